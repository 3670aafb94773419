/* The bias + activation and bias + dropout + residual kernels (kiln::bias_gelu,
 * bias_swiglu, bias_dropout_add and their backwards): the checks and messages
 * of python/kiln/torch/ops.py's impls, in the same order, then the launcher
 * on torch's current stream. The bias is a Tensor? (a heap StableIValue torch
 * allocates, which torch >= 2.13 lets the kernel free: without
 * torch_delete_stable_ivalue these stay in Python). Dropout's (seed, offset)
 * is the op's seed_offset argument, drawn from torch's generator by
 * kiln::philox_seed_offset: the shim has no call that reads a generator's
 * Philox state (docs/python.md, "The fast path"). */
#include <string.h>

#include "torch/ops.h"

/* rows and cols of x, bias checked against cols; 0 when the checks pass */
static int bias_args(kt_call *c, const kt_arg *x, const kt_arg *b, kt_rows *r) {
  return kt_rows_cols(c, x, &r->rows, &r->cols) || kt_bias(c, x, b, r->cols);
}

/* x and the bias made contiguous, the output (shape [dim]sizes, x's dtype)
 * made; nonzero when nothing is to be launched (kt_skip) */
static int bias_ready(kt_call *c, kt_arg *x, kt_arg *b, kt_rows *r, const int64_t *sizes) {
  return kt_contig(c, x) || kt_out(c, x->dim, sizes, x->dtype, x, &r->out) ||
         kt_skip(c, x, r->rows) || kt_contig(c, b);
}

static const void *bias_data(const kt_arg *b) {
  return b->h ? b->data : NULL;
}

KT_OP(bias_gelu, 0x1, 0x2, 0)
static void bias_gelu(kt_call *c) {
  kt_arg *x = &c->arg[0], *b = &c->arg[1];
  kt_rows r;
  if (bias_args(c, x, b, &r) || kt_dtype_code(c, x, "x", &r.dt) ||
      bias_ready(c, x, b, &r, x->sizes))
    return;
  kt_status(c, kiln_bias_gelu_fwd(c->l, r.dt, r.out, x->data, bias_data(b), r.rows, r.cols, c->s));
}

KT_OP(bias_gelu_backward, 0x3, 0x4, 0)
static void bias_gelu_backward(kt_call *c) {
  kt_arg *dy = &c->arg[0], *x = &c->arg[1], *b = &c->arg[2];
  kt_rows r;
  if (bias_args(c, x, b, &r) || kt_match(c, "x", x, "dy", dy) || kt_dtype_code(c, x, "x", &r.dt) ||
      kt_contig(c, dy) || bias_ready(c, x, b, &r, x->sizes))
    return;
  kt_status(c, kiln_bias_gelu_bwd(c->l, r.dt, r.out, dy->data, x->data, bias_data(b), r.rows,
                                  r.cols, c->s));
}

/* x [..., 2c] -> [..., c] (half: the shape of y and dy; r->cols is 2c): the
 * even check of both swiglu ops, then the bias against 2c */
static int swiglu_args(kt_call *c, const kt_arg *x, const kt_arg *b, kt_rows *r, int64_t *half) {
  if (kt_rows_cols(c, x, &r->rows, &r->cols)) return -1;
  if (x->dim > KT_MAX_DIM)
    return kt_fail(c, "kiln.torch.%s: x has %lld dimensions; kiln takes at most %d", c->op,
                   (long long)x->dim, KT_MAX_DIM);
  if (r->cols % 2)
    return kt_fail(c, "kiln.torch.%s: x's last dimension (%d) must be even: [a | b]", c->op,
                   r->cols);
  memcpy(half, x->sizes, sizeof(int64_t) * (size_t)x->dim);
  half[x->dim - 1] = r->cols / 2;
  return kt_bias(c, x, b, r->cols);
}

KT_OP(bias_swiglu, 0x1, 0x2, 0)
static void bias_swiglu(kt_call *c) {
  kt_arg *x = &c->arg[0], *b = &c->arg[1];
  kt_rows r;
  int64_t half[KT_MAX_DIM];
  if (swiglu_args(c, x, b, &r, half) || kt_dtype_code(c, x, "x", &r.dt) ||
      bias_ready(c, x, b, &r, half))
    return;
  kt_status(
      c, kiln_bias_swiglu_fwd(c->l, r.dt, r.out, x->data, bias_data(b), r.rows, r.cols / 2, c->s));
}

/* dy is x's dtype, shape half and device (ops.py's message) */
static int swiglu_dy(kt_call *c, const kt_arg *dy, const kt_arg *x, const int64_t *half) {
  if (dy->dtype == x->dtype && kt_same_device(dy, x) && kt_sizes_are(dy, x->dim, half)) return 0;
  char d1[48], d2[48], s1[256], s2[256], s3[256], v1[48], v2[48];
  return kt_fail(c,
                 "kiln.torch.bias_swiglu_backward: dy is %s %s on %s; want %s %s on %s (x %s "
                 "halved)",
                 kt_dtype(d1, sizeof d1, dy), KT_SHAPE(s1, dy), kt_device(v1, sizeof v1, dy),
                 kt_dtype(d2, sizeof d2, x), kt_shape(s2, sizeof s2, x->dim, half),
                 kt_device(v2, sizeof v2, x), KT_SHAPE(s3, x));
}

KT_OP(bias_swiglu_backward, 0x3, 0x4, 0)
static void bias_swiglu_backward(kt_call *c) {
  kt_arg *dy = &c->arg[0], *x = &c->arg[1], *b = &c->arg[2];
  kt_rows r;
  int64_t half[KT_MAX_DIM];
  if (swiglu_args(c, x, b, &r, half) || swiglu_dy(c, dy, x, half) ||
      kt_dtype_code(c, x, "x", &r.dt) || kt_contig(c, dy) || bias_ready(c, x, b, &r, x->sizes))
    return;
  kt_status(c, kiln_bias_swiglu_bwd(c->l, r.dt, r.out, dy->data, x->data, bias_data(b), r.rows,
                                    r.cols / 2, c->s));
}

/* ops.py _dropout_args: p (slot) and training (slot + 1) */
static int dropout_args(kt_call *c, int slot, float *p, int *training) {
  double v = kt_double(c, slot);
  char s[64];
  *training = kt_bool_arg(c, slot + 1);
  *p = (float)v;
  /* eval is the identity for any p, 1 included; training with p = 1 would
   * scale by 1 / (1 - p) */
  if (*training && !(v >= 0.0 && v < 1.0))
    return kt_fail(c, "kiln.torch.%s: p = %s; want 0 <= p < 1 when training", c->op,
                   kt_pyfloat(s, sizeof s, v));
  if (!*training && !(v >= 0.0 && v <= 1.0))
    return kt_fail(c, "kiln.torch.%s: p = %s; want 0 <= p <= 1", c->op, kt_pyfloat(s, sizeof s, v));
  return 0;
}

/* ops.py _seed_offset: so is int64 [2] of non-negative values, read on the
 * host (a copy where it is on a GPU) */
static int seed_offset(kt_call *c, kt_arg *so, uint64_t *seed, uint64_t *offset) {
  char d[48], s[256];
  if (so->dtype != kt_i64 || so->dim != 1 || so->sizes[0] != 2)
    return kt_fail(c, "kiln.torch.%s: seed_offset is %s %s; want int64 [2]", c->op,
                   kt_dtype(d, sizeof d, so), KT_SHAPE(s, so));
  if (kt_on_host(c, so)) return -1;
  int64_t v[2];
  memcpy(v, so->data, sizeof v);
  if (v[0] < 0 || v[1] < 0) /* they reach C as uint64: never wrapped */
    return kt_fail(c, "kiln.torch.%s: seed_offset (%lld, %lld) must not be negative", c->op,
                   (long long)v[0], (long long)v[1]);
  *seed = (uint64_t)v[0];
  *offset = (uint64_t)v[1];
  return 0;
}

KT_OP(bias_dropout_add, 0x25, 0x2, 0)
static void bias_dropout_add(kt_call *c) {
  kt_arg *x = &c->arg[0], *b = &c->arg[1], *res = &c->arg[2], *so = &c->arg[5];
  kt_rows r;
  int training;
  float p;
  uint64_t seed, offset;
  char s1[256], s2[256];
  if (dropout_args(c, 3, &p, &training) || bias_args(c, x, b, &r) ||
      kt_same_dtype(c, "residual", res, x))
    return;
  if (!kt_same_shape(res, x)) {
    kt_fail(c, "kiln.torch.bias_dropout_add: residual %s != x %s", KT_SHAPE(s1, res),
            KT_SHAPE(s2, x));
    return;
  }
  if (seed_offset(c, so, &seed, &offset) || kt_dtype_code(c, x, "x", &r.dt) || kt_contig(c, res) ||
      bias_ready(c, x, b, &r, x->sizes))
    return;
  kt_status(c, kiln_bias_dropout_add_fwd(c->l, r.dt, r.out, x->data, bias_data(b), res->data,
                                         r.rows, r.cols, p, seed, offset, training, c->s));
}

KT_OP(bias_dropout_add_backward, 0x9, 0, 0)
static void bias_dropout_add_backward(kt_call *c) {
  kt_arg *dy = &c->arg[0], *so = &c->arg[3];
  kt_rows r;
  int training;
  float p;
  uint64_t seed, offset;
  if (dropout_args(c, 1, &p, &training) || kt_rows_cols(c, dy, &r.rows, &r.cols) ||
      seed_offset(c, so, &seed, &offset) || kt_dtype_code(c, dy, "dy", &r.dt) || kt_contig(c, dy) ||
      kt_out_like(c, dy, &r.out) || kt_skip(c, dy, r.rows))
    return;
  kt_status(c, kiln_bias_dropout_add_bwd(c->l, r.dt, r.out, dy->data, r.rows, r.cols, p, seed,
                                         offset, training, c->s));
}

const kt_kernel kt_act_kernels[] = {
    KT_KERNEL(bias_gelu),
    KT_KERNEL(bias_gelu_backward),
    KT_KERNEL(bias_swiglu),
    KT_KERNEL(bias_swiglu_backward),
    KT_KERNEL(bias_dropout_add),
    KT_KERNEL(bias_dropout_add_backward),
    {NULL, NULL},
};
