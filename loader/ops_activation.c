/* Typed launchers for the activation family (docs/kernels/activation.md):
 * bias_gelu and bias_swiglu, forward and backward. Check, size the grid,
 * launch. */
#include <stdint.h>

#include "common/error.h"
#include "kiln/ops.h"
#include "loader/ops_internal.h"

/* Threads per block: KILN_ACT_THREADS of kernels/activation/activation_core.cuh. */
#define ACT_THREADS 256u
/* Units of work each thread takes per pass (kiln_act_walk keeps two in
 * flight). */
#define ACT_UNITS_PER_THREAD 2ull
/* Blocks per SM the grid is capped at: 4 to 8 blocks of 256 threads are
 * resident on an SM at the kernels' 48 to 64 registers, so the cap is 32 or
 * more waves, small blocks the hardware balances across SMs with a tail of
 * a few percent at most; beyond it the kernels grid-stride. */
#define ACT_BLOCKS_PER_SM 256ull

static int aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

/* The kernels take the 16-byte vector path when cols is a multiple of the
 * elements in 16 bytes and every pointer (NULL included) is 16-byte aligned;
 * a unit of work is a vector there, an element otherwise. The grid gives
 * each thread ACT_UNITS_PER_THREAD units, capped at ACT_BLOCKS_PER_SM blocks
 * per SM. */
static unsigned long long pick_grid(const kiln_loader *l, kiln_dtype dt, long long rows, int cols,
                                    const void *p0, const void *p1, const void *p2,
                                    const void *p3) {
  const int vec = (int)(16 / kiln_dtype_size(dt));
  const int fast =
      cols % vec == 0 && aligned16(p0) && aligned16(p1) && aligned16(p2) && aligned16(p3);
  const unsigned long long units =
      (unsigned long long)rows * (unsigned long long)(fast ? cols / vec : cols);
  const unsigned long long sms = l->info.sm_count > 0 ? (unsigned long long)l->info.sm_count : 132;
  const unsigned long long cap = sms * ACT_BLOCKS_PER_SM;
  const unsigned long long per_block = ACT_THREADS * ACT_UNITS_PER_THREAD;
  unsigned long long grid = (units + per_block - 1) / per_block;
  if (grid > cap) grid = cap;
  return grid ? grid : 1;
}

/* Shared checks: the loader, dtype, rows, cols, and that rows x width
 * elements of dt fit in 64-bit bytes (width = cols, or 2*cols for x and dx
 * of swiglu). */
static kiln_status check_shape(const char *op, kiln_loader *l, kiln_dtype dt, long long rows,
                               int cols, long long width_factor) {
  long long bytes = 0;
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  KILN_CHECK(kiln_op_need_count(op, rows, "rows"));
  KILN_CHECK(kiln_op_need_positive(op, cols, "cols"));
  rc = kiln_op_product(op, rows, width_factor * cols, (long long)kiln_dtype_size(dt), &bytes);
out:
  return rc;
}

static kiln_status launch(kiln_loader *l, const char *op, const char *unit, int bwd, kiln_dtype dt,
                          unsigned long long grid, void **args, struct CUstream_st *stream) {
  char entry[128];
  KILN_OP_ENTRY(entry, "kiln", unit, bwd ? "bwd" : "fwd", kiln_dtype_str(dt), "g");
  return kiln_op_launch(l, op, entry, grid, ACT_THREADS, args, stream);
}

static kiln_status act_fwd(const char *op, const char *unit, long long width_factor, kiln_loader *l,
                           kiln_dtype dt, void *y, const void *x, const void *bias, long long rows,
                           int cols, struct CUstream_st *stream) {
  kiln_status rc;
  KILN_CHECK(check_shape(op, l, dt, rows, cols, width_factor));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"y", y}, {"x", x}));
  {
    void *args[] = {&y, &x, &bias, &rows, &cols};
    rc = launch(l, op, unit, 0, dt, pick_grid(l, dt, rows, cols, y, x, bias, NULL), args, stream);
  }
out:
  return rc;
}

static kiln_status act_bwd(const char *op, const char *unit, long long width_factor, kiln_loader *l,
                           kiln_dtype dt, void *dx, const void *dy, const void *x, const void *bias,
                           long long rows, int cols, struct CUstream_st *stream) {
  kiln_status rc;
  KILN_CHECK(check_shape(op, l, dt, rows, cols, width_factor));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"dx", dx}, {"dy", dy}, {"x", x}));
  {
    void *args[] = {&dx, &dy, &x, &bias, &rows, &cols};
    rc = launch(l, op, unit, 1, dt, pick_grid(l, dt, rows, cols, dx, dy, x, bias), args, stream);
  }
out:
  return rc;
}

kiln_status kiln_bias_gelu_fwd(kiln_loader *l, kiln_dtype dt, void *y, const void *x,
                               const void *bias, long long rows, int cols,
                               struct CUstream_st *stream) {
  return act_fwd("kiln_bias_gelu_fwd", "bias_gelu", 1, l, dt, y, x, bias, rows, cols, stream);
}

kiln_status kiln_bias_gelu_bwd(kiln_loader *l, kiln_dtype dt, void *dx, const void *dy,
                               const void *x, const void *bias, long long rows, int cols,
                               struct CUstream_st *stream) {
  return act_bwd("kiln_bias_gelu_bwd", "bias_gelu", 1, l, dt, dx, dy, x, bias, rows, cols, stream);
}

kiln_status kiln_bias_swiglu_fwd(kiln_loader *l, kiln_dtype dt, void *y, const void *x,
                                 const void *bias, long long rows, int cols,
                                 struct CUstream_st *stream) {
  return act_fwd("kiln_bias_swiglu_fwd", "bias_swiglu", 2, l, dt, y, x, bias, rows, cols, stream);
}

kiln_status kiln_bias_swiglu_bwd(kiln_loader *l, kiln_dtype dt, void *dx, const void *dy,
                                 const void *x, const void *bias, long long rows, int cols,
                                 struct CUstream_st *stream) {
  return act_bwd("kiln_bias_swiglu_bwd", "bias_swiglu", 2, l, dt, dx, dy, x, bias, rows, cols,
                 stream);
}
