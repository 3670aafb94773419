/* What the typed launchers share: argument checks, launch by entry name, and
 * the device error block behind kiln_ops_check. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "kernels/registry.h"
#include "loader/ops_internal.h"

const char *kiln_dtype_str(kiln_dtype dt) {
  switch (dt) {
  case KILN_F32: return "f32";
  case KILN_F16: return "f16";
  case KILN_BF16: return "bf16";
  default: return "?";
  }
}

unsigned kiln_dtype_size(kiln_dtype dt) {
  return dt == KILN_F32 ? 4u : 2u;
}

kiln_status kiln_op_check_common(const char *op, kiln_loader *l, kiln_dtype dt) {
  if (!l) return kiln_fail(KILN_EINVAL, "%s: loader is NULL", op);
  if (dt != KILN_F32 && dt != KILN_F16 && dt != KILN_BF16)
    return kiln_fail(KILN_EINVAL, "%s: unsupported dtype %d (KILN_F32, KILN_F16 or KILN_BF16)", op,
                     (int)dt);
  return KILN_OK;
}

kiln_status kiln_op_check_wdtype(const char *op, kiln_dtype dt, kiln_dtype wdt) {
  if (wdt == KILN_F32 || wdt == dt) return KILN_OK;
  return kiln_fail(KILN_EINVAL, "%s: weight dtype %s with %s activations: use KILN_F32 or %s", op,
                   kiln_dtype_str(wdt), kiln_dtype_str(dt), kiln_dtype_str(dt));
}

kiln_status kiln_op_need_ptr(const char *op, const void *p, const char *name) {
  return p ? KILN_OK : kiln_fail(KILN_EINVAL, "%s: %s is NULL", op, name);
}

kiln_status kiln_op_need_ptrs(const char *op, const kiln_op_ptr *ptrs, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!ptrs[i].p) return kiln_fail(KILN_EINVAL, "%s: %s is NULL", op, ptrs[i].name);
  return KILN_OK;
}

kiln_status kiln_op_need_positive(const char *op, long long v, const char *name) {
  return v >= 1 ? KILN_OK : kiln_fail(KILN_EINVAL, "%s: %s = %lld, must be >= 1", op, name, v);
}

kiln_status kiln_op_need_count(const char *op, long long v, const char *name) {
  return v >= 0 ? KILN_OK : kiln_fail(KILN_EINVAL, "%s: %s = %lld, must be >= 0", op, name, v);
}

kiln_status kiln_op_need_finite(const char *op, float v, const char *name) {
  return isfinite(v) ? KILN_OK : kiln_fail(KILN_EINVAL, "%s: %s %g is not finite", op, name, v);
}

kiln_status kiln_op_product(const char *op, long long a, long long b, long long c, long long *out) {
  if (__builtin_mul_overflow(a, b, out) || __builtin_mul_overflow(*out, c, out))
    return kiln_fail(KILN_EINVAL, "%s: %lld x %lld x %lld overflows 64 bits", op, a, b, c);
  return KILN_OK;
}

const char *kiln_op_entry_name(char *buf, size_t cap, const char *const *parts, size_t n) {
  size_t at = 0;
  for (size_t i = 0; i < n && cap > 0; i++) {
    size_t len = strlen(parts[i]);
    if (i && at + 1 < cap) buf[at++] = '_';
    if (len > cap - 1 - at) len = cap - 1 - at;
    memcpy(buf + at, parts[i], len);
    at += len;
  }
  if (cap > 0) buf[at] = '\0';
  return buf;
}

kiln_status kiln_op_launch(kiln_loader *l, const char *op, const char *entry,
                           unsigned long long grid, unsigned block, void **args,
                           struct CUstream_st *stream) {
  CUfunction fn = NULL;
  kiln_status rc = KILN_OK;
  size_t u, e;
  int pushed = 0;
  CUresult r;
  if (kiln_entry_find(entry, &u, &e) != 0 || u >= l->n_units)
    return kiln_fail(KILN_EINTERNAL, "%s: entry point %s is not registered", op, entry);
  if (grid < 1 || grid > 0x7fffffffULL || block < 1 || block > 1024)
    return kiln_fail(KILN_EINTERNAL, "%s: launch of %s with grid %llu, block %u", op, entry, grid,
                     block);
  KILN_CHECK(kiln_loader_entry(l, u, e, &fn));
  KILN_CHECK(kiln_ctx_enter(l, &pushed));
  r = l->cu->LaunchKernel(fn, (unsigned)grid, 1, 1, block, 1, 1, 0, stream, args, NULL);
  kiln_ctx_leave(l, pushed);
  if (r != CUDA_SUCCESS) {
    char what[200];
    snprintf(what, sizeof what, "%s: launch of %s (grid %llu, block %u)", op, entry, grid, block);
    rc = kiln_cuda_fail(r, what);
  }
out:
  return rc;
}

/* ---- the device error block ------------------------------------------------ */

/* kiln_op_error of kernels/common/kiln_errors.cuh, as the host reads it. */
typedef struct kiln_op_error_host {
  uint64_t note, reported;
  int64_t pos, value, lo, hi, what, unused;
} kiln_op_error_host;
_Static_assert(sizeof(kiln_op_error_host) == 64, "kiln_errors.cuh layout");

enum { OP_ERROR_TOKEN_ID = 1, OP_ERROR_TARGET = 2 }; /* KILN_OP_ERROR_* */

static const kiln_op_error_host clean_block = {UINT64_MAX, 0, 0, 0, 0, 0, 0, 0};

kiln_status kiln_op_error_block(kiln_loader *l, CUdeviceptr *out) {
  CUdeviceptr p = __atomic_load_n(&l->op_error, __ATOMIC_ACQUIRE);
  kiln_status rc = KILN_OK;
  int pushed = 0, locked = 0;
  if (p) {
    *out = p;
    return KILN_OK;
  }
  pthread_mutex_lock(&l->lock);
  locked = 1;
  if (!l->op_error) {
    KILN_CHECK(kiln_ctx_enter(l, &pushed));
    CU_CHECK(l->cu->MemAlloc(&p, sizeof clean_block), "allocating the op error block");
    CU_CHECK(l->cu->MemcpyHtoD(p, &clean_block, sizeof clean_block), "initialising it");
    /* a copy from pageable memory may return before its DMA lands: wait for
     * it, so a kernel on a non-blocking stream never sees the block unset */
    CU_CHECK(l->cu->StreamSynchronize(NULL), "initialising it");
    __atomic_store_n(&l->op_error, p, __ATOMIC_RELEASE);
    p = 0;
  }
  *out = l->op_error;
out:
  if (p) l->cu->MemFree(p);
  if (pushed) kiln_ctx_leave(l, pushed);
  if (locked) pthread_mutex_unlock(&l->lock);
  return rc;
}

kiln_status kiln_ops_check(kiln_loader *l, struct CUstream_st *stream) {
  kiln_op_error_host h;
  CUdeviceptr p;
  kiln_status rc = KILN_OK;
  int pushed = 0;
  if (!l) return kiln_fail(KILN_EINVAL, "kiln_ops_check: loader is NULL");
  p = __atomic_load_n(&l->op_error, __ATOMIC_ACQUIRE);
  if (!p) return KILN_OK; /* no op that notes errors has run */
  KILN_CHECK(kiln_ctx_enter(l, &pushed));
  /* Read and clear in order on the caller's stream, not with synchronous
   * copies on the legacy stream: those do not order against a non-blocking
   * stream (PyTorch's side streams), where a later kernel could note an error
   * that the clear's late DMA then erases. */
  CU_CHECK(l->cu->MemcpyDtoHAsync(&h, p, sizeof h, stream),
           "kiln_ops_check: reading the op error block");
  CU_CHECK(l->cu->StreamSynchronize(stream), "kiln_ops_check: synchronizing the stream");
  if (!h.reported) goto out;
  CU_CHECK(l->cu->MemcpyHtoDAsync(p, &clean_block, sizeof clean_block, stream),
           "kiln_ops_check: clearing the op error block");
  if (h.what == OP_ERROR_TOKEN_ID)
    rc = kiln_fail(KILN_EINVAL,
                   "kiln_embedding_fwd: token id %lld at position %lld is outside the vocabulary "
                   "[%lld, %lld)",
                   (long long)h.value, (long long)h.pos, (long long)h.lo, (long long)h.hi);
  else if (h.what == OP_ERROR_TARGET)
    rc = kiln_fail(KILN_EINVAL,
                   "kiln_cross_entropy: target %lld at row %lld is outside the vocabulary "
                   "[%lld, %lld) and is not the ignore index",
                   (long long)h.value, (long long)h.pos, (long long)h.lo, (long long)h.hi);
  else
    rc = kiln_fail(KILN_EINTERNAL, "kiln_ops_check: unknown error kind %lld in the op error block",
                   (long long)h.what);
out:
  if (pushed) kiln_ctx_leave(l, pushed);
  return rc;
}
