/* Typed launchers for the softmax family: check, pick, launch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "kernels/softmax_launch.h"
#include "kiln/ops.h"
#include "loader/loader_internal.h"

const char *kiln_dtype_str(kiln_dtype dt) {
  switch (dt) {
  case KILN_F32: return "f32";
  case KILN_F16: return "f16";
  case KILN_BF16: return "bf16";
  default: return "?";
  }
}

static kiln_status check_common(const char *op, kiln_loader *l, kiln_dtype dt, float scale) {
  if (!l) return kiln_fail(KILN_EINVAL, "%s: loader is NULL", op);
  if (dt != KILN_F32 && dt != KILN_F16 && dt != KILN_BF16)
    return kiln_fail(KILN_EINVAL, "%s: unsupported dtype %d (KILN_F32, KILN_F16 or KILN_BF16)", op,
                     (int)dt);
  if (!isfinite(scale)) return kiln_fail(KILN_EINVAL, "%s: scale %g is not finite", op, scale);
  return KILN_OK;
}

static kiln_status need_ptr(const char *op, const void *p, const char *name) {
  return p ? KILN_OK : kiln_fail(KILN_EINVAL, "%s: %s is NULL", op, name);
}

static kiln_status need_positive(const char *op, long long v, const char *name) {
  return v >= 1 ? KILN_OK : kiln_fail(KILN_EINVAL, "%s: %s = %lld, must be >= 1", op, name, v);
}

/* rows = a * b (* c), or an error when it does not fit. */
static kiln_status rows_of(const char *op, long long a, long long b, long long c, long long *rows) {
  if (__builtin_mul_overflow(a, b, rows) || __builtin_mul_overflow(*rows, c, rows))
    return kiln_fail(KILN_EINVAL, "%s: %lld x %lld x %lld rows overflow 64 bits", op, a, b, c);
  return KILN_OK;
}

/* Finds the entry point for (unit, direction, dtype, the variant picked for
 * rows x cols) and launches it with args on stream. */
static kiln_status launch(kiln_loader *l, const char *op, const char *unit_name, int bwd,
                          kiln_dtype dt, long long rows, int cols, void **args,
                          struct CUstream_st *stream) {
  kiln_softmax_launch pick;
  const kiln_unit_info *unit = NULL;
  CUfunction fn = NULL;
  kiln_status rc = KILN_OK;
  size_t u = 0, nv, v, e;
  int pushed = 0;
  CUresult r;
  if (kiln_softmax_pick_launch(&pick, rows, cols) != 0)
    return kiln_fail(KILN_EINVAL, "%s: no launch for %lld x %d", op, rows, cols);
  while (u < l->n_units && strcmp(l->units[u].unit->name, unit_name) != 0) u++;
  if (u == l->n_units) return kiln_fail(KILN_EINTERNAL, "%s: unit %s is not registered", op, unit_name);
  unit = l->units[u].unit;
  /* entries are laid out direction x dtype x variant (kernels/registry.c) */
  nv = unit->n_entries / 6;
  for (v = 0; v < nv && strcmp(unit->entries[v].variant, pick.variant) != 0; v++) {}
  e = (size_t)bwd * 3 * nv + (size_t)dt * nv + v;
  if (v == nv || e >= unit->n_entries || strcmp(unit->entries[e].dtype, kiln_dtype_str(dt)) != 0 ||
      strcmp(unit->entries[e].direction, bwd ? "bwd" : "fwd") != 0)
    return kiln_fail(KILN_EINTERNAL, "%s: no entry point for variant %s", op, pick.variant);
  KILN_CHECK(kiln_loader_entry(l, u, e, &fn));
  KILN_CHECK(kiln_ctx_enter(l, &pushed));
  r = l->cu->LaunchKernel(fn, (unsigned)pick.grid, 1, 1, pick.block, 1, 1, 0, stream, args, NULL);
  kiln_ctx_leave(l, pushed);
  if (r != CUDA_SUCCESS) {
    char what[160];
    snprintf(what, sizeof what, "%s: launch of %s (grid %llu, block %u)", op, unit->entries[e].name,
             pick.grid, pick.block);
    rc = kiln_cuda_fail(r, what);
  }
out:
  return rc;
}

static kiln_status fwd(kiln_loader *l, const char *op, const char *unit, kiln_dtype dt, void *y,
                       const void *x, const uint8_t *mask, float scale, long long rows, int cols,
                       int sq, int heads, int mask_batches, struct CUstream_st *stream) {
  void *args[] = {&y, &x, &mask, &scale, &rows, &cols, &sq, &heads, &mask_batches};
  return launch(l, op, unit, 0, dt, rows, cols, args, stream);
}

static kiln_status bwd(kiln_loader *l, const char *op, const char *unit, kiln_dtype dt, void *dx,
                       const void *y, const void *dy, float scale, long long rows, int cols,
                       int sq, struct CUstream_st *stream) {
  void *args[] = {&dx, &y, &dy, &scale, &rows, &cols, &sq};
  return launch(l, op, unit, 1, dt, rows, cols, args, stream);
}

kiln_status kiln_scaled_softmax_fwd(kiln_loader *l, kiln_dtype dt, void *y, const void *x,
                                    long long rows, int cols, float scale,
                                    struct CUstream_st *stream) {
  static const char op[] = "kiln_scaled_softmax_fwd";
  kiln_status rc;
  KILN_CHECK(check_common(op, l, dt, scale));
  KILN_CHECK(need_ptr(op, y, "y"));
  KILN_CHECK(need_ptr(op, x, "x"));
  KILN_CHECK(need_positive(op, rows, "rows"));
  KILN_CHECK(need_positive(op, cols, "cols"));
  rc = fwd(l, op, "scaled_softmax", dt, y, x, NULL, scale, rows, cols, 1, 1, 1, stream);
out:
  return rc;
}

kiln_status kiln_scaled_softmax_bwd(kiln_loader *l, kiln_dtype dt, void *dx, const void *y,
                                    const void *dy, long long rows, int cols, float scale,
                                    struct CUstream_st *stream) {
  static const char op[] = "kiln_scaled_softmax_bwd";
  kiln_status rc;
  KILN_CHECK(check_common(op, l, dt, scale));
  KILN_CHECK(need_ptr(op, dx, "dx"));
  KILN_CHECK(need_ptr(op, y, "y"));
  KILN_CHECK(need_ptr(op, dy, "dy"));
  KILN_CHECK(need_positive(op, rows, "rows"));
  KILN_CHECK(need_positive(op, cols, "cols"));
  rc = bwd(l, op, "scaled_softmax", dt, dx, y, dy, scale, rows, cols, 1, stream);
out:
  return rc;
}

static kiln_status check_bhs(const char *op, int b, int heads, int sq, int sk, long long *rows) {
  kiln_status rc;
  KILN_CHECK(need_positive(op, b, "b"));
  KILN_CHECK(need_positive(op, heads, "heads"));
  KILN_CHECK(need_positive(op, sq, "sq"));
  KILN_CHECK(need_positive(op, sk, "sk"));
  rc = rows_of(op, b, heads, sq, rows);
out:
  return rc;
}

kiln_status kiln_scaled_masked_softmax_fwd(kiln_loader *l, kiln_dtype dt, void *y, const void *x,
                                           const uint8_t *mask, int b, int heads, int sq, int sk,
                                           int mask_batches, float scale,
                                           struct CUstream_st *stream) {
  static const char op[] = "kiln_scaled_masked_softmax_fwd";
  long long rows = 0;
  kiln_status rc;
  KILN_CHECK(check_common(op, l, dt, scale));
  KILN_CHECK(need_ptr(op, y, "y"));
  KILN_CHECK(need_ptr(op, x, "x"));
  KILN_CHECK(need_ptr(op, mask, "mask"));
  KILN_CHECK(check_bhs(op, b, heads, sq, sk, &rows));
  if (mask_batches != 1 && mask_batches != b) {
    rc = kiln_fail(KILN_EINVAL,
                   "%s: a mask of shape [%d, 1, %d, %d] does not broadcast over x [%d, %d, %d, "
                   "%d]: its first dimension must be 1 or b = %d",
                   op, mask_batches, sq, sk, b, heads, sq, sk, b);
    goto out;
  }
  rc = fwd(l, op, "scaled_masked_softmax", dt, y, x, mask, scale, rows, sk, sq, heads,
           mask_batches, stream);
out:
  return rc;
}

kiln_status kiln_scaled_masked_softmax_bwd(kiln_loader *l, kiln_dtype dt, void *dx, const void *y,
                                           const void *dy, int b, int heads, int sq, int sk,
                                           float scale, struct CUstream_st *stream) {
  static const char op[] = "kiln_scaled_masked_softmax_bwd";
  long long rows = 0;
  kiln_status rc;
  KILN_CHECK(check_common(op, l, dt, scale));
  KILN_CHECK(need_ptr(op, dx, "dx"));
  KILN_CHECK(need_ptr(op, y, "y"));
  KILN_CHECK(need_ptr(op, dy, "dy"));
  KILN_CHECK(check_bhs(op, b, heads, sq, sk, &rows));
  rc = bwd(l, op, "scaled_masked_softmax", dt, dx, y, dy, scale, rows, sk, sq, stream);
out:
  return rc;
}

kiln_status kiln_scaled_upper_triang_masked_softmax_fwd(kiln_loader *l, kiln_dtype dt, void *y,
                                                        const void *x, long long attn_batches,
                                                        int sq, int sk, float scale,
                                                        struct CUstream_st *stream) {
  static const char op[] = "kiln_scaled_upper_triang_masked_softmax_fwd";
  long long rows = 0;
  kiln_status rc;
  KILN_CHECK(check_common(op, l, dt, scale));
  KILN_CHECK(need_ptr(op, y, "y"));
  KILN_CHECK(need_ptr(op, x, "x"));
  KILN_CHECK(need_positive(op, attn_batches, "attn_batches"));
  KILN_CHECK(need_positive(op, sq, "sq"));
  KILN_CHECK(need_positive(op, sk, "sk"));
  KILN_CHECK(rows_of(op, attn_batches, sq, 1, &rows));
  rc = fwd(l, op, "scaled_upper_triang_masked_softmax", dt, y, x, NULL, scale, rows, sk, sq, 1, 1,
           stream);
out:
  return rc;
}

kiln_status kiln_scaled_upper_triang_masked_softmax_bwd(kiln_loader *l, kiln_dtype dt, void *dx,
                                                        const void *y, const void *dy,
                                                        long long attn_batches, int sq, int sk,
                                                        float scale, struct CUstream_st *stream) {
  static const char op[] = "kiln_scaled_upper_triang_masked_softmax_bwd";
  long long rows = 0;
  kiln_status rc;
  KILN_CHECK(check_common(op, l, dt, scale));
  KILN_CHECK(need_ptr(op, dx, "dx"));
  KILN_CHECK(need_ptr(op, y, "y"));
  KILN_CHECK(need_ptr(op, dy, "dy"));
  KILN_CHECK(need_positive(op, attn_batches, "attn_batches"));
  KILN_CHECK(need_positive(op, sq, "sq"));
  KILN_CHECK(need_positive(op, sk, "sk"));
  KILN_CHECK(rows_of(op, attn_batches, sq, 1, &rows));
  rc = bwd(l, op, "scaled_upper_triang_masked_softmax", dt, dx, y, dy, scale, rows, sk, sq, stream);
out:
  return rc;
}
