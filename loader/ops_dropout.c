/* Typed launchers for the dropout family (kernels/dropout/bias_dropout_add.cu,
 * docs/kernels/dropout.md): check, turn p into the kernel's keep threshold and
 * scale, size the grid, launch. */
#include <math.h>
#include <stdint.h>

#include "common/error.h"
#include "kiln/ops.h"
#include "loader/ops_internal.h"

/* Launch shape (docs/kernels/dropout.md, "Launch"); the ELEMS are the
 * kernel's elements per thread per step (KILN_BDA_FWD_ELEMS/BWD_ELEMS on the
 * vector path, one Philox group of 4 on the general path). The grid is capped
 * at several waves of resident blocks; the kernels grid-stride beyond. */
#define BDA_THREADS 256u /* KILN_BDA_THREADS */
#define BDA_FWD_ELEMS 8u
#define BDA_BWD_ELEMS 16u
#define BDA_GROUP_ELEMS 4u
#define BDA_BLOCKS_PER_SM 32ull

/* The keep rule of the kernels: keep iff (word >> 8) >= threshold, i.e.
 * u = (word >> 8) * 2^-24 >= p. p * 2^24 is exact (p is a float below 1),
 * so threshold = ceil(p * 2^24) <= 2^24 - 1, and p = 0 gives 0: keep all. */
static unsigned keep_threshold(float p) {
  return (unsigned)ceil((double)p * 16777216.0);
}

/* Checks of the shape and the dropout arguments, before the pointers' (an
 * empty batch needs none); *n = rows * cols. */
static kiln_status check_shape(const char *op, kiln_dtype dt, long long rows, int cols, float p,
                               int training, long long *n) {
  long long bytes = 0;
  kiln_status rc;
  KILN_CHECK(kiln_op_need_count(op, rows, "rows"));
  KILN_CHECK(kiln_op_need_positive(op, cols, "cols"));
  KILN_CHECK(kiln_op_product(op, rows, cols, kiln_dtype_size(dt), &bytes));
  *n = rows * (long long)cols;
  if (training != 0 && training != 1) {
    rc = kiln_fail(KILN_EINVAL, "%s: training = %d, must be 0 or 1", op, training);
    goto out;
  }
  /* eval (training = 0) is the identity for any p, 1 included; training
   * with p = 1 would scale by 1 / (1 - p) */
  if (training ? !(p >= 0.f && p < 1.f) : !(p >= 0.f && p <= 1.f))
    rc = kiln_fail(KILN_EINVAL, "%s: p = %g is outside [0, %s", op, (double)p,
                   training ? "1) when training" : "1]");
out:
  return rc;
}

static int aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

/* Blocks for n elements, one thread per `per` of them, at most
 * BDA_BLOCKS_PER_SM per SM; the result does not depend on the grid. */
static unsigned long long pick_grid(kiln_loader *l, long long n, unsigned per) {
  const unsigned long long threads = ((unsigned long long)n + per - 1) / per;
  const unsigned long long sms = l->info.sm_count > 0 ? (unsigned long long)l->info.sm_count : 132;
  const unsigned long long blocks = (threads + BDA_THREADS - 1) / BDA_THREADS;
  return blocks < sms * BDA_BLOCKS_PER_SM ? blocks : sms * BDA_BLOCKS_PER_SM;
}

static kiln_status launch(kiln_loader *l, const char *op, int bwd, kiln_dtype dt, long long n,
                          int vec, void **args, struct CUstream_st *stream) {
  const unsigned per = !vec ? BDA_GROUP_ELEMS : bwd ? BDA_BWD_ELEMS : BDA_FWD_ELEMS;
  char entry[96];
  KILN_OP_ENTRY(entry, "kiln_bias_dropout_add", bwd ? "bwd" : "fwd", kiln_dtype_str(dt), "g");
  return kiln_op_launch(l, op, entry, pick_grid(l, n, per), BDA_THREADS, args, stream);
}

kiln_status kiln_bias_dropout_add_fwd(kiln_loader *l, kiln_dtype dt, void *y, const void *x,
                                      const void *bias, const void *residual, long long rows,
                                      int cols, float p, uint64_t seed, uint64_t offset,
                                      int training, struct CUstream_st *stream) {
  static const char op[] = "kiln_bias_dropout_add_fwd";
  long long n = 0;
  unsigned threshold;
  float scale;
  unsigned long long seed_arg = seed, offset_arg = offset;
  int vec;
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  KILN_CHECK(check_shape(op, dt, rows, cols, p, training, &n));
  if (n == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"y", y}, {"x", x}, {"residual", residual}));
  threshold = training ? keep_threshold(p) : 0u;
  scale = threshold ? (float)(1.0 / (1.0 - (double)p)) : 1.f;
  /* the kernel's own test for its vector path (bias_dropout_add.cu) */
  vec = aligned16(y) && aligned16(x) && aligned16(residual) &&
        (!bias || (aligned16(bias) && cols % (int)(16 / kiln_dtype_size(dt)) == 0));
  {
    void *args[] = {&y,    &x,         &bias,  &residual, &n,
                    &cols, &threshold, &scale, &seed_arg, &offset_arg};
    rc = launch(l, op, 0, dt, n, vec, args, stream);
  }
out:
  return rc;
}

kiln_status kiln_bias_dropout_add_bwd(kiln_loader *l, kiln_dtype dt, void *dx, const void *dy,
                                      long long rows, int cols, float p, uint64_t seed,
                                      uint64_t offset, int training, struct CUstream_st *stream) {
  static const char op[] = "kiln_bias_dropout_add_bwd";
  long long n = 0;
  unsigned threshold;
  float scale;
  unsigned long long seed_arg = seed, offset_arg = offset;
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  KILN_CHECK(check_shape(op, dt, rows, cols, p, training, &n));
  if (n == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"dx", dx}, {"dy", dy}));
  threshold = training ? keep_threshold(p) : 0u;
  scale = threshold ? (float)(1.0 / (1.0 - (double)p)) : 1.f;
  {
    void *args[] = {&dx, &dy, &n, &threshold, &scale, &seed_arg, &offset_arg};
    rc = launch(l, op, 1, dt, n, aligned16(dx) && aligned16(dy), args, stream);
  }
out:
  return rc;
}
