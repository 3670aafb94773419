/* Typed launchers for the cross-entropy family (kernels/cross_entropy,
 * docs/kernels/cross_entropy.md): check, launch, and after fwd and stats the
 * err entry that records a bad target. */
#include <limits.h>

#include "common/error.h"
#include "kiln/ops.h"
#include "loader/ops_internal.h"

#define CE_THREADS 512u  /* fwd, stats, bwd: one block per row */
#define CE_VTHREADS 256u /* rescale, loss: one thread per row */
#define CE_ERR_THREADS 32u
#define CE_MAX_GRID 0x7fffffffLL

/* One block per row (the kernels grid-stride past 2^31 - 1 rows). */
static unsigned long long row_grid(long long rows) {
  return (unsigned long long)(rows < CE_MAX_GRID ? rows : CE_MAX_GRID);
}

/* One thread per row, blocks of CE_VTHREADS. */
static unsigned long long vec_grid(long long rows) {
  const long long g = (rows - 1) / (long long)CE_VTHREADS + 1;
  return (unsigned long long)(g < CE_MAX_GRID ? g : CE_MAX_GRID);
}

static kiln_status launch(kiln_loader *l, const char *op, const char *dir, const char *dt,
                          unsigned long long grid, unsigned block, void **args,
                          struct CUstream_st *stream) {
  char entry[96];
  KILN_OP_ENTRY(entry, "kiln_cross_entropy", dir, dt, "g");
  return kiln_op_launch(l, op, entry, grid, block, args, stream);
}

/* rows >= 0 (0: an empty batch), cols >= 1 and rows * cols * elem fits 64
 * bits. */
static kiln_status check_shape(const char *op, kiln_dtype dt, long long rows, long long cols,
                               const char *cols_name) {
  kiln_status rc;
  long long n = 0;
  KILN_CHECK(kiln_op_need_count(op, rows, "rows"));
  KILN_CHECK(kiln_op_need_positive(op, cols, cols_name));
  rc = kiln_op_product(op, rows, cols, (long long)kiln_dtype_size(dt), &n);
out:
  return rc;
}

static kiln_status check_flags(const char *op, unsigned flags) {
  if (flags & ~KILN_OPS_SYNC_CHECK)
    return kiln_fail(KILN_EINVAL, "%s: flags 0x%x has unknown bits (only KILN_OPS_SYNC_CHECK)", op,
                     flags);
  return KILN_OK;
}

/* The err entry right after a launch that may have noted a bad target. */
static kiln_status record_errors(kiln_loader *l, const char *op, CUdeviceptr e,
                                 const int64_t *target, long long rows, long long vocab_size,
                                 unsigned flags, struct CUstream_st *stream) {
  void *args[] = {&e, &target, &rows, &vocab_size};
  kiln_status rc;
  KILN_CHECK(launch(l, op, "err", "i64", 1, CE_ERR_THREADS, args, stream));
  if (flags & KILN_OPS_SYNC_CHECK) rc = kiln_ops_check(l, stream);
out:
  return rc;
}

kiln_status kiln_cross_entropy_fwd(kiln_loader *l, kiln_dtype dt, float *loss, float *lse,
                                   const void *logits, const int64_t *target, long long rows,
                                   int vocab_size, long long ignore_index, unsigned flags,
                                   struct CUstream_st *stream) {
  static const char op[] = "kiln_cross_entropy_fwd";
  CUdeviceptr e = 0;
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  KILN_CHECK(check_shape(op, dt, rows, vocab_size, "vocab_size"));
  KILN_CHECK(check_flags(op, flags));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(
      KILN_OP_NEED_PTRS(op, {"loss", loss}, {"lse", lse}, {"logits", logits}, {"target", target}));
  KILN_CHECK(kiln_op_error_block(l, &e));
  {
    void *args[] = {&loss, &lse, &logits, &target, &rows, &vocab_size, &ignore_index, &e};
    KILN_CHECK(launch(l, op, "fwd", kiln_dtype_str(dt), row_grid(rows), CE_THREADS, args, stream));
  }
  rc = record_errors(l, op, e, target, rows, vocab_size, flags, stream);
out:
  return rc;
}

kiln_status kiln_cross_entropy_stats(kiln_loader *l, kiln_dtype dt, float *row_max, float *sumexp,
                                     float *tgt, const void *logits, const int64_t *target,
                                     long long rows, int vocab_part, long long vocab_start,
                                     long long vocab_size, long long ignore_index, unsigned flags,
                                     struct CUstream_st *stream) {
  static const char op[] = "kiln_cross_entropy_stats";
  CUdeviceptr e = 0;
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  KILN_CHECK(check_shape(op, dt, rows, vocab_part, "vocab_part"));
  KILN_CHECK(kiln_op_need_positive(op, vocab_size, "vocab_size"));
  if (vocab_start < 0 || vocab_start > vocab_size - vocab_part) {
    rc = kiln_fail(KILN_EINVAL,
                   "%s: the partition [vocab_start = %lld, + vocab_part = %d) is not inside the "
                   "vocabulary [0, vocab_size = %lld)",
                   op, vocab_start, vocab_part, vocab_size);
    goto out;
  }
  KILN_CHECK(check_flags(op, flags));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"row_max", row_max}, {"sumexp", sumexp}, {"tgt", tgt},
                               {"logits", logits}, {"target", target}));
  KILN_CHECK(kiln_op_error_block(l, &e));
  {
    void *args[] = {&row_max,    &sumexp,      &tgt,        &logits,       &target, &rows,
                    &vocab_part, &vocab_start, &vocab_size, &ignore_index, &e};
    KILN_CHECK(
        launch(l, op, "stats", kiln_dtype_str(dt), row_grid(rows), CE_THREADS, args, stream));
  }
  rc = record_errors(l, op, e, target, rows, vocab_size, flags, stream);
out:
  return rc;
}

kiln_status kiln_cross_entropy_rescale(kiln_loader *l, float *sumexp, const float *row_max,
                                       const float *gmax, long long rows,
                                       struct CUstream_st *stream) {
  static const char op[] = "kiln_cross_entropy_rescale";
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, KILN_F32));
  KILN_CHECK(check_shape(op, KILN_F32, rows, 1, "columns"));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"sumexp", sumexp}, {"row_max", row_max}, {"gmax", gmax}));
  {
    void *args[] = {&sumexp, &row_max, &gmax, &rows};
    rc = launch(l, op, "rescale", "f32", vec_grid(rows), CE_VTHREADS, args, stream);
  }
out:
  return rc;
}

kiln_status kiln_cross_entropy_loss(kiln_loader *l, float *loss, float *lse, const float *gmax,
                                    const float *sumexp, const float *tgt, const int64_t *target,
                                    long long rows, long long ignore_index,
                                    struct CUstream_st *stream) {
  static const char op[] = "kiln_cross_entropy_loss";
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, KILN_F32));
  KILN_CHECK(check_shape(op, KILN_F32, rows, 1, "columns"));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"loss", loss}, {"lse", lse}, {"gmax", gmax}, {"sumexp", sumexp},
                               {"tgt", tgt}, {"target", target}));
  {
    void *args[] = {&loss, &lse, &gmax, &sumexp, &tgt, &target, &rows, &ignore_index};
    rc = launch(l, op, "loss", "f32", vec_grid(rows), CE_VTHREADS, args, stream);
  }
out:
  return rc;
}

kiln_status kiln_cross_entropy_bwd(kiln_loader *l, kiln_dtype dt, void *logits, const float *lse,
                                   const float *dloss, const int64_t *target, long long rows,
                                   int vocab_part, long long vocab_start, long long ignore_index,
                                   struct CUstream_st *stream) {
  static const char op[] = "kiln_cross_entropy_bwd";
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  KILN_CHECK(check_shape(op, dt, rows, vocab_part, "vocab_part"));
  if (vocab_start < 0 || vocab_start > LLONG_MAX - vocab_part) {
    rc = kiln_fail(KILN_EINVAL,
                   "%s: vocab_start = %lld, must be >= 0 (and vocab_start + %d "
                   "must fit 64 bits)",
                   op, vocab_start, vocab_part);
    goto out;
  }
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"logits", logits}, {"lse", lse}, {"dloss", dloss},
                               {"target", target}));
  {
    void *args[] = {&logits, &lse,        &dloss,       &target,
                    &rows,   &vocab_part, &vocab_start, &ignore_index};
    rc = launch(l, op, "bwd", kiln_dtype_str(dt), row_grid(rows), CE_THREADS, args, stream);
  }
out:
  return rc;
}
