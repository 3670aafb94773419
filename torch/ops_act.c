/* The bias + activation kernels (kiln::bias_gelu, bias_swiglu and their
 * backwards): the checks and messages of python/kiln/torch/ops.py's impls, in
 * the same order, then the launcher on torch's current stream. The bias is a
 * Tensor? (a heap StableIValue torch allocates, which torch >= 2.13 lets the
 * kernel free: without torch_delete_stable_ivalue these stay in Python). */
#include <string.h>

#include "torch/call.h"
#include "torch/ops.h"

#define SHAPE(buf, a) kt_shape(buf, sizeof buf, (a)->dim, (a)->sizes)

/* ops.py _bias_check */
static int bias_check(kt_call *c, const kt_arg *x, const kt_arg *bias, int cols) {
  char d1[48], d2[48], s[256];
  if (!bias->h) return 0;
  if (bias->dtype != x->dtype)
    return kt_fail(c, "kiln.torch.%s: bias is %s, x is %s; they must match", c->op,
                   kt_dtype(d1, sizeof d1, bias), kt_dtype(d2, sizeof d2, x));
  if (!kt_same_device(bias, x))
    return kt_fail(c, "kiln.torch.%s: bias is on %s, x on %s", c->op,
                   kt_device(d1, sizeof d1, bias), kt_device(d2, sizeof d2, x));
  if (bias->dim != 1 || bias->sizes[0] != cols)
    return kt_fail(c, "kiln.torch.%s: bias must be [%d]; got %s", c->op, cols, SHAPE(s, bias));
  return 0;
}

static void bias_gelu(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "bias_gelu", stack, 0x1, 0x2);
  kt_arg *x = &c.arg[0], *b = &c.arg[1];
  long long rows;
  int cols;
  kiln_dtype dt;
  void *y;
  kiln_loader *l;
  struct CUstream_st *s;
  if (kt_rows_cols(&c, x, &rows, &cols) || bias_check(&c, x, b, cols) ||
      kt_dtype_code(&c, x, "x", &dt) || kt_contig(&c, x) ||
      kt_out(&c, x->dim, x->sizes, x->dtype, x, &y) || rows == 0 || kt_contig(&c, b) ||
      kt_target(&c, x, &l, &s))
    goto out;
  kt_status(&c, kiln_bias_gelu_fwd(l, dt, y, x->data, b->h ? b->data : NULL, rows, cols, s));
out:
  kt_end(&c);
}

static void bias_gelu_backward(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "bias_gelu_backward", stack, 0x3, 0x4);
  kt_arg *dy = &c.arg[0], *x = &c.arg[1], *b = &c.arg[2];
  long long rows;
  int cols;
  kiln_dtype dt;
  void *dx;
  kiln_loader *l;
  struct CUstream_st *s;
  if (kt_rows_cols(&c, x, &rows, &cols) || bias_check(&c, x, b, cols) ||
      kt_match(&c, "x", x, "dy", dy) || kt_dtype_code(&c, x, "x", &dt) || kt_contig(&c, dy) ||
      kt_contig(&c, x) || kt_out(&c, x->dim, x->sizes, x->dtype, x, &dx) || rows == 0 ||
      kt_contig(&c, b) || kt_target(&c, x, &l, &s))
    goto out;
  kt_status(&c,
            kiln_bias_gelu_bwd(l, dt, dx, dy->data, x->data, b->h ? b->data : NULL, rows, cols, s));
out:
  kt_end(&c);
}

/* x [..., 2c] -> [..., c]: the even check of both swiglu ops */
static int swiglu_cols(kt_call *c, const kt_arg *x, long long *rows, int *cols2) {
  if (kt_rows_cols(c, x, rows, cols2)) return -1;
  if (x->dim > 16)
    return kt_fail(c, "kiln.torch.%s: x has %lld dimensions; kiln takes at most 16", c->op,
                   (long long)x->dim);
  if (*cols2 % 2)
    return kt_fail(c, "kiln.torch.%s: x's last dimension (%d) must be even: [a | b]", c->op,
                   *cols2);
  return 0;
}

static void bias_swiglu(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "bias_swiglu", stack, 0x1, 0x2);
  kt_arg *x = &c.arg[0], *b = &c.arg[1];
  long long rows;
  int cols2;
  kiln_dtype dt;
  void *y;
  kiln_loader *l;
  struct CUstream_st *s;
  int64_t half[16];
  if (swiglu_cols(&c, x, &rows, &cols2) || bias_check(&c, x, b, cols2) ||
      kt_dtype_code(&c, x, "x", &dt) || kt_contig(&c, x))
    goto out;
  memcpy(half, x->sizes, sizeof(int64_t) * (size_t)(x->dim < 16 ? x->dim : 16));
  half[x->dim - 1] = cols2 / 2;
  if (kt_out(&c, x->dim, half, x->dtype, x, &y) || rows == 0 || kt_contig(&c, b) ||
      kt_target(&c, x, &l, &s))
    goto out;
  kt_status(&c, kiln_bias_swiglu_fwd(l, dt, y, x->data, b->h ? b->data : NULL, rows, cols2 / 2, s));
out:
  kt_end(&c);
}

static void bias_swiglu_backward(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "bias_swiglu_backward", stack, 0x3, 0x4);
  kt_arg *dy = &c.arg[0], *x = &c.arg[1], *b = &c.arg[2];
  long long rows;
  int cols2;
  kiln_dtype dt;
  void *dx;
  kiln_loader *l;
  struct CUstream_st *s;
  int64_t half[16];
  if (swiglu_cols(&c, x, &rows, &cols2) || bias_check(&c, x, b, cols2)) goto out;
  memcpy(half, x->sizes, sizeof(int64_t) * (size_t)(x->dim < 16 ? x->dim : 16));
  half[x->dim - 1] = cols2 / 2;
  int fits = dy->dim == x->dim && dy->dtype == x->dtype && kt_same_device(dy, x);
  for (int64_t i = 0; fits && i < dy->dim; i++)
    fits = dy->sizes[i] == half[i];
  if (!fits) {
    char d1[48], d2[48], s1[256], s2[256], s3[256], v1[48], v2[48];
    kt_fail(&c,
            "kiln.torch.bias_swiglu_backward: dy is %s %s on %s; want %s %s on %s (x %s halved)",
            kt_dtype(d1, sizeof d1, dy), SHAPE(s1, dy), kt_device(v1, sizeof v1, dy),
            kt_dtype(d2, sizeof d2, x), kt_shape(s2, sizeof s2, x->dim, half),
            kt_device(v2, sizeof v2, x), SHAPE(s3, x));
    goto out;
  }
  if (kt_dtype_code(&c, x, "x", &dt) || kt_contig(&c, dy) || kt_contig(&c, x) ||
      kt_out(&c, x->dim, x->sizes, x->dtype, x, &dx) || rows == 0 || kt_contig(&c, b) ||
      kt_target(&c, x, &l, &s))
    goto out;
  kt_status(&c, kiln_bias_swiglu_bwd(l, dt, dx, dy->data, x->data, b->h ? b->data : NULL, rows,
                                     cols2 / 2, s));
out:
  kt_end(&c);
}

const kt_kernel kt_act_kernels[] = {
    {"bias_gelu", bias_gelu, 1},
    {"bias_gelu_backward", bias_gelu_backward, 1},
    {"bias_swiglu", bias_swiglu, 1},
    {"bias_swiglu_backward", bias_swiglu_backward, 1},
    {NULL, NULL, 0},
};
