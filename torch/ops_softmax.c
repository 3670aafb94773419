/* The softmax ops' kernels (kiln::scaled_softmax, scaled_masked_softmax,
 * scaled_upper_triang_masked_softmax and their backwards): the checks and
 * messages of python/kiln/torch/ops.py's impls, in the same order, then the
 * launcher on torch's current stream. */
#include <limits.h>

#include "torch/call.h"
#include "torch/ops.h"

#define SHAPE(buf, a) kt_shape(buf, sizeof buf, (a)->dim, (a)->sizes)

static void scaled_softmax(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "scaled_softmax", stack, 0x1, 0);
  kt_arg *x = &c.arg[0];
  long long rows;
  int cols;
  kiln_dtype dt;
  void *y;
  kiln_loader *l;
  struct CUstream_st *s;
  if (kt_rows_cols(&c, x, &rows, &cols) || kt_dtype_code(&c, x, "x", &dt) || kt_contig(&c, x) ||
      kt_out(&c, x->dim, x->sizes, x->dtype, x, &y) || rows == 0 || kt_target(&c, x, &l, &s))
    goto out;
  kt_status(&c, kiln_scaled_softmax_fwd(l, dt, y, x->data, rows, cols, (float)kt_double(&c, 1), s));
out:
  kt_end(&c);
}

static void scaled_softmax_backward(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "scaled_softmax_backward", stack, 0x3, 0);
  kt_arg *dy = &c.arg[0], *y = &c.arg[1];
  long long rows;
  int cols;
  kiln_dtype dt;
  void *dx;
  kiln_loader *l;
  struct CUstream_st *s;
  if (kt_rows_cols(&c, y, &rows, &cols) || kt_match(&c, "y", y, "dy", dy) ||
      kt_dtype_code(&c, y, "y", &dt) || kt_contig(&c, dy) || kt_contig(&c, y) ||
      kt_out(&c, y->dim, y->sizes, y->dtype, y, &dx) || rows == 0 || kt_target(&c, y, &l, &s))
    goto out;
  kt_status(&c, kiln_scaled_softmax_bwd(l, dt, dx, y->data, dy->data, rows, cols,
                                        (float)kt_double(&c, 2), s));
out:
  kt_end(&c);
}

static int masked_args(kt_call *c, const kt_arg *x, const kt_arg *m) {
  char xs[256], ms[256], xd[48], md[48];
  if (x->dim != 4 || m->dim != 4)
    return kt_fail(c,
                   "kiln.torch.scaled_masked_softmax: want x [b, heads, sq, sk] and mask "
                   "[b or 1, 1, sq, sk]; got %s and %s",
                   SHAPE(xs, x), SHAPE(ms, m));
  const int64_t *xz = x->sizes, *mz = m->sizes;
  if (mz[1] != 1 || mz[2] != xz[2] || mz[3] != xz[3] || (mz[0] != 1 && mz[0] != xz[0]))
    return kt_fail(c,
                   "kiln.torch.scaled_masked_softmax: mask %s does not fit x %s (want "
                   "[%lld or 1, 1, %lld, %lld])",
                   SHAPE(ms, m), SHAPE(xs, x), (long long)xz[0], (long long)xz[2],
                   (long long)xz[3]);
  if (!kt_same_device(m, x))
    return kt_fail(c, "kiln.torch.scaled_masked_softmax: mask is on %s, x on %s",
                   kt_device(md, sizeof md, m), kt_device(xd, sizeof xd, x));
  if (xz[3] == 0)
    return kt_fail(c, "kiln.torch.scaled_masked_softmax: x %s has sk = 0 keys", SHAPE(xs, x));
  return 0;
}

static void scaled_masked_softmax(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "scaled_masked_softmax", stack, 0x3, 0);
  kt_arg *x = &c.arg[0], *m = &c.arg[1];
  kiln_dtype dt;
  void *y;
  kiln_loader *l;
  struct CUstream_st *s;
  char md[48];
  if (masked_args(&c, x, m) || kt_dtype_code(&c, x, "x", &dt) || kt_contig(&c, x)) goto out;
  if (m->dtype != kt_bool && m->dtype != kt_u8) {
    kt_fail(&c, "kiln.torch.scaled_masked_softmax: mask is %s; want bool or uint8",
            kt_dtype(md, sizeof md, m));
    goto out;
  }
  if (kt_contig(&c, m) || kt_out(&c, x->dim, x->sizes, x->dtype, x, &y) || kt_numel(x) == 0 ||
      kt_target(&c, x, &l, &s))
    goto out;
  const int64_t *z = x->sizes;
  kt_status(&c, kiln_scaled_masked_softmax_fwd(l, dt, y, x->data, m->data, (int)z[0], (int)z[1],
                                               (int)z[2], (int)z[3], (int)m->sizes[0],
                                               (float)kt_double(&c, 2), s));
out:
  kt_end(&c);
}

static void scaled_masked_softmax_backward(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "scaled_masked_softmax_backward", stack, 0x3, 0);
  kt_arg *dy = &c.arg[0], *y = &c.arg[1];
  kiln_dtype dt;
  void *dx;
  kiln_loader *l;
  struct CUstream_st *s;
  char ys[256];
  if (y->dim != 4 || y->sizes[3] == 0) {
    kt_fail(&c, "kiln.torch.scaled_masked_softmax_backward: want y [b, heads, sq, sk >= 1]; got %s",
            SHAPE(ys, y));
    goto out;
  }
  if (kt_match(&c, "y", y, "dy", dy) || kt_dtype_code(&c, y, "y", &dt) || kt_contig(&c, dy) ||
      kt_contig(&c, y) || kt_out(&c, y->dim, y->sizes, y->dtype, y, &dx) || kt_numel(y) == 0 ||
      kt_target(&c, y, &l, &s))
    goto out;
  const int64_t *z = y->sizes;
  kt_status(&c, kiln_scaled_masked_softmax_bwd(l, dt, dx, y->data, dy->data, (int)z[0], (int)z[1],
                                               (int)z[2], (int)z[3], (float)kt_double(&c, 2), s));
out:
  kt_end(&c);
}

static void scaled_upper_triang_masked_softmax(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "scaled_upper_triang_masked_softmax", stack, 0x1, 0);
  kt_arg *x = &c.arg[0];
  kiln_dtype dt;
  void *y;
  kiln_loader *l;
  struct CUstream_st *s;
  char xs[256];
  if (x->dim != 3) {
    kt_fail(&c,
            "kiln.torch.scaled_upper_triang_masked_softmax: want x [attn_batches, sq, sk]; got %s",
            SHAPE(xs, x));
    goto out;
  }
  if (x->sizes[2] == 0) {
    kt_fail(&c, "kiln.torch.scaled_upper_triang_masked_softmax: x %s has sk = 0 keys",
            SHAPE(xs, x));
    goto out;
  }
  if (kt_dtype_code(&c, x, "x", &dt) || kt_contig(&c, x) ||
      kt_out(&c, x->dim, x->sizes, x->dtype, x, &y) || kt_numel(x) == 0 || kt_target(&c, x, &l, &s))
    goto out;
  const int64_t *z = x->sizes;
  kt_status(&c, kiln_scaled_upper_triang_masked_softmax_fwd(l, dt, y, x->data, (long long)z[0],
                                                            (int)z[1], (int)z[2],
                                                            (float)kt_double(&c, 1), s));
out:
  kt_end(&c);
}

static void scaled_upper_triang_masked_softmax_backward(kt_ivalue *stack, uint64_t nargs,
                                                        uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "scaled_upper_triang_masked_softmax_backward", stack, 0x3, 0);
  kt_arg *dy = &c.arg[0], *y = &c.arg[1];
  kiln_dtype dt;
  void *dx;
  kiln_loader *l;
  struct CUstream_st *s;
  char ys[256];
  if (y->dim != 3 || y->sizes[2] == 0) {
    kt_fail(&c,
            "kiln.torch.scaled_upper_triang_masked_softmax_backward: want y [attn_batches, sq, "
            "sk >= 1]; got %s",
            SHAPE(ys, y));
    goto out;
  }
  if (kt_match(&c, "y", y, "dy", dy) || kt_dtype_code(&c, y, "y", &dt) || kt_contig(&c, dy) ||
      kt_contig(&c, y) || kt_out(&c, y->dim, y->sizes, y->dtype, y, &dx) || kt_numel(y) == 0 ||
      kt_target(&c, y, &l, &s))
    goto out;
  const int64_t *z = y->sizes;
  kt_status(&c, kiln_scaled_upper_triang_masked_softmax_bwd(l, dt, dx, y->data, dy->data,
                                                            (long long)z[0], (int)z[1], (int)z[2],
                                                            (float)kt_double(&c, 2), s));
out:
  kt_end(&c);
}

const kt_kernel kt_softmax_kernels[] = {
    {"scaled_softmax", scaled_softmax, 0},
    {"scaled_softmax_backward", scaled_softmax_backward, 0},
    {"scaled_masked_softmax", scaled_masked_softmax, 0},
    {"scaled_masked_softmax_backward", scaled_masked_softmax_backward, 0},
    {"scaled_upper_triang_masked_softmax", scaled_upper_triang_masked_softmax, 0},
    {"scaled_upper_triang_masked_softmax_backward", scaled_upper_triang_masked_softmax_backward, 0},
    {NULL, NULL, 0},
};
