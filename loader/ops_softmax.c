/* Typed launchers for the softmax family: check, pick, launch. */
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "kernels/softmax_launch.h"
#include "kiln/ops.h"
#include "loader/ops_internal.h"

static kiln_status check_common(const char *op, kiln_loader *l, kiln_dtype dt, float scale) {
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  rc = kiln_op_need_finite(op, scale, "scale");
out:
  return rc;
}

/* Whether every pointer the entry reads or writes (NULL: an argument the unit
 * ignores) is 16-byte aligned: the vector variants' condition. */
static int aligned16(const void *a, const void *b, const void *c) {
  return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15u) == 0;
}

/* Finds the entry point for (unit, direction, dtype, the variant picked for
 * rows x cols and the tensors' alignment) and launches it with args on
 * stream. */
static kiln_status launch(kiln_loader *l, const char *op, const char *unit_name, int bwd,
                          kiln_dtype dt, long long rows, int cols, int aligned, void **args,
                          struct CUstream_st *stream) {
  kiln_softmax_launch pick;
  char entry[128];
  long long bytes;
  kiln_status rc = kiln_op_product(op, rows, cols, (long long)kiln_dtype_size(dt), &bytes);
  if (rc != KILN_OK) return rc; /* the tensors' byte size must fit 64 bits, as for every op */
  if (kiln_softmax_pick_launch(&pick, rows, cols, kiln_dtype_size(dt), aligned) != 0)
    return kiln_fail(KILN_EINVAL, "%s: no launch for %lld x %d", op, rows, cols);
  KILN_OP_ENTRY(entry, "kiln", unit_name, bwd ? "bwd" : "fwd", kiln_dtype_str(dt), pick.variant);
  return kiln_op_launch(l, op, entry, pick.grid, pick.block, args, stream);
}

static kiln_status fwd(kiln_loader *l, const char *op, const char *unit, kiln_dtype dt, void *y,
                       const void *x, const uint8_t *mask, float scale, long long rows, int cols,
                       int sq, int heads, int mask_batches, struct CUstream_st *stream) {
  void *args[] = {&y, &x, &mask, &scale, &rows, &cols, &sq, &heads, &mask_batches};
  return launch(l, op, unit, 0, dt, rows, cols, aligned16(y, x, mask), args, stream);
}

static kiln_status bwd(kiln_loader *l, const char *op, const char *unit, kiln_dtype dt, void *dx,
                       const void *y, const void *dy, float scale, long long rows, int cols, int sq,
                       struct CUstream_st *stream) {
  void *args[] = {&dx, &y, &dy, &scale, &rows, &cols, &sq};
  return launch(l, op, unit, 1, dt, rows, cols, aligned16(dx, y, dy), args, stream);
}

kiln_status kiln_scaled_softmax_fwd(kiln_loader *l, kiln_dtype dt, void *y, const void *x,
                                    long long rows, int cols, float scale,
                                    struct CUstream_st *stream) {
  static const char op[] = "kiln_scaled_softmax_fwd";
  kiln_status rc;
  KILN_CHECK(check_common(op, l, dt, scale));
  KILN_CHECK(kiln_op_need_count(op, rows, "rows"));
  KILN_CHECK(kiln_op_need_positive(op, cols, "cols"));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"y", y}, {"x", x}));
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
  KILN_CHECK(kiln_op_need_count(op, rows, "rows"));
  KILN_CHECK(kiln_op_need_positive(op, cols, "cols"));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"dx", dx}, {"y", y}, {"dy", dy}));
  rc = bwd(l, op, "scaled_softmax", dt, dx, y, dy, scale, rows, cols, 1, stream);
out:
  return rc;
}

static kiln_status check_bhs(const char *op, int b, int heads, int sq, int sk, long long *rows) {
  kiln_status rc;
  KILN_CHECK(kiln_op_need_count(op, b, "b"));
  KILN_CHECK(kiln_op_need_count(op, heads, "heads"));
  KILN_CHECK(kiln_op_need_count(op, sq, "sq"));
  KILN_CHECK(kiln_op_need_positive(op, sk, "sk"));
  rc = kiln_op_product(op, b, heads, sq, rows);
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
  KILN_CHECK(check_bhs(op, b, heads, sq, sk, &rows));
  if (mask_batches != 1 && mask_batches != b) {
    rc = kiln_fail(KILN_EINVAL,
                   "%s: a mask of shape [%d, 1, %d, %d] does not broadcast over x [%d, %d, %d, "
                   "%d]: its first dimension must be 1 or b = %d",
                   op, mask_batches, sq, sk, b, heads, sq, sk, b);
    goto out;
  }
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"y", y}, {"x", x}, {"mask", mask}));
  rc = fwd(l, op, "scaled_masked_softmax", dt, y, x, mask, scale, rows, sk, sq, heads, mask_batches,
           stream);
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
  KILN_CHECK(check_bhs(op, b, heads, sq, sk, &rows));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"dx", dx}, {"y", y}, {"dy", dy}));
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
  KILN_CHECK(kiln_op_need_count(op, attn_batches, "attn_batches"));
  KILN_CHECK(kiln_op_need_count(op, sq, "sq"));
  KILN_CHECK(kiln_op_need_positive(op, sk, "sk"));
  KILN_CHECK(kiln_op_product(op, attn_batches, sq, 1, &rows));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"y", y}, {"x", x}));
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
  KILN_CHECK(kiln_op_need_count(op, attn_batches, "attn_batches"));
  KILN_CHECK(kiln_op_need_count(op, sq, "sq"));
  KILN_CHECK(kiln_op_need_positive(op, sk, "sk"));
  KILN_CHECK(kiln_op_product(op, attn_batches, sq, 1, &rows));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"dx", dx}, {"y", y}, {"dy", dy}));
  rc = bwd(l, op, "scaled_upper_triang_masked_softmax", dt, dx, y, dy, scale, rows, sk, sq, stream);
out:
  return rc;
}
