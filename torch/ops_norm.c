/* The norms' kernels (kiln::layer_norm, rms_norm and their backwards): the
 * checks and messages of python/kiln/torch/ops.py's impls, in the same order,
 * then the launcher on torch's current stream with a workspace from torch's
 * allocator. */
#include "torch/ops.h"

typedef struct norm_shape {
  long long rows;
  int cols;
  kiln_dtype dt, wdt;
} norm_shape;

/* ops.py _norm_args; b may be absent (h NULL) */
static int norm_args(kt_call *c, const kt_arg *x, const kt_arg *w, const kt_arg *b,
                     norm_shape *ns) {
  char s1[256], s2[256], d1[48], d2[48];
  if (kt_rows_cols(c, x, &ns->rows, &ns->cols)) return -1;
  const kt_arg *wb[2] = {w, b};
  const char *names[2] = {"weight", "bias"};
  for (int i = 0; i < 2; i++) {
    if (wb[i]->h && !kt_same_device(wb[i], x))
      return kt_fail(c, "kiln.torch.%s: %s is on %s, x on %s", c->op, names[i],
                     kt_device(d1, sizeof d1, wb[i]), kt_device(d2, sizeof d2, x));
  }
  int bad_w = w->dim != 1 || w->sizes[0] != ns->cols;
  int bad_b = b->h && (b->dim != 1 || b->sizes[0] != ns->cols);
  if (bad_w || bad_b) {
    if (b->h)
      return kt_fail(c,
                     "kiln.torch.%s: weight/bias must be [%d] (x's last dimension); got %s and %s",
                     c->op, ns->cols, KT_SHAPE(s1, w), KT_SHAPE(s2, b));
    return kt_fail(c, "kiln.torch.%s: weight/bias must be [%d] (x's last dimension); got %s", c->op,
                   ns->cols, KT_SHAPE(s1, w));
  }
  if ((w->dtype != kt_f32 && w->dtype != x->dtype) || (b->h && b->dtype != w->dtype))
    return kt_fail(c, "kiln.torch.%s: weight and bias are float32 or x's dtype (%s), both the same",
                   c->op, kt_dtype(d1, sizeof d1, x));
  if (kt_dtype_code(c, x, "x", &ns->dt) || kt_dtype_code(c, w, "weight", &ns->wdt)) return -1;
  return 0;
}

/* ops.py _f32: saved statistics are float32 of x's shape but the last */
static int f32_stat(kt_call *c, const char *name, const kt_arg *t, const kt_arg *x) {
  return kt_float32(c, c->op, name, t, x->dim - 1, x->sizes, x);
}

/* ops.py _norm_args for a backward, and dy matching x */
static int norm_grads(kt_call *c, const kt_arg *dy, const kt_arg *x, const kt_arg *w,
                      norm_shape *ns) {
  kt_arg none = {0};
  return norm_args(c, x, w, &none, ns) || kt_match(c, "x", x, "dy", dy);
}

/* outputs of x's shape and dtype, then n_stats float32 of x's shape but the
 * last (mean, rstd); made with their pointers in out[] */
static int norm_outputs(kt_call *c, const kt_arg *x, int n_stats, void **out) {
  if (kt_out_like(c, x, &out[0])) return -1;
  for (int i = 1; i <= n_stats; i++)
    if (kt_out(c, x->dim - 1, x->sizes, kt_f32, x, &out[i])) return -1;
  return 0;
}

/* the weight gradients (n of them, w's shape and dtype); the sum over no
 * rows is zeros and launches nothing (1); 0: launch with ws of nbytes */
static int weight_grads(kt_call *c, const kt_arg *x, const kt_arg *w, const norm_shape *ns, int n,
                        void **out, size_t nbytes, void **ws) {
  for (int i = 0; i < n; i++)
    if (kt_out_like(c, w, &out[i])) return -1;
  if (ns->rows == 0) {
    for (int i = 0; i < n; i++)
      if (kt_zero_out(c, 1 + i)) return -1;
    return 1;
  }
  return kt_workspace(c, nbytes, x, ws) || kt_skip(c, x, ns->rows);
}

KT_OP(layer_norm, 0x7, 0, 0)
static void layer_norm(kt_call *c) {
  kt_arg *x = &c->arg[0], *w = &c->arg[1], *b = &c->arg[2];
  norm_shape ns;
  void *o[3];
  if (norm_args(c, x, w, b, &ns) || kt_contig(c, x) || kt_contig(c, w) || kt_contig(c, b) ||
      norm_outputs(c, x, 2, o) || kt_skip(c, x, ns.rows))
    return;
  kt_status(c, kiln_layer_norm_fwd(c->l, ns.dt, ns.wdt, o[0], o[1], o[2], x->data, w->data, b->data,
                                   ns.rows, ns.cols, (float)kt_double(c, 3), c->s));
}

KT_OP(layer_norm_backward, 0x1f, 0, 0)
static void layer_norm_backward(kt_call *c) {
  kt_arg *dy = &c->arg[0], *x = &c->arg[1], *mean = &c->arg[2], *rstd = &c->arg[3], *w = &c->arg[4];
  norm_shape ns;
  void *dx, *dg[2], *ws;
  if (norm_grads(c, dy, x, w, &ns) || f32_stat(c, "mean", mean, x) ||
      f32_stat(c, "rstd", rstd, x) || kt_contig(c, dy) || kt_contig(c, x) || kt_contig(c, mean) ||
      kt_contig(c, rstd) || kt_contig(c, w) || kt_out_like(c, x, &dx))
    return;
  size_t nbytes = kiln_layer_norm_bwd_workspace_size(ns.rows, ns.cols);
  if (weight_grads(c, x, w, &ns, 2, dg, nbytes, &ws)) return;
  kt_status(c, kiln_layer_norm_bwd(c->l, ns.dt, ns.wdt, dx, dg[0], dg[1], dy->data, x->data,
                                   mean->data, rstd->data, w->data, ns.rows, ns.cols, ws, nbytes,
                                   c->s));
}

KT_OP(rms_norm, 0x3, 0, 0)
static void rms_norm(kt_call *c) {
  kt_arg *x = &c->arg[0], *w = &c->arg[1];
  kt_arg none = {0};
  norm_shape ns;
  void *o[2];
  if (norm_args(c, x, w, &none, &ns) || kt_contig(c, x) || kt_contig(c, w) ||
      norm_outputs(c, x, 1, o) || kt_skip(c, x, ns.rows))
    return;
  kt_status(c, kiln_rms_norm_fwd(c->l, ns.dt, ns.wdt, o[0], o[1], x->data, w->data, ns.rows,
                                 ns.cols, (float)kt_double(c, 2), c->s));
}

KT_OP(rms_norm_backward, 0xf, 0, 0)
static void rms_norm_backward(kt_call *c) {
  kt_arg *dy = &c->arg[0], *x = &c->arg[1], *rstd = &c->arg[2], *w = &c->arg[3];
  norm_shape ns;
  void *dx, *dg, *ws;
  if (norm_grads(c, dy, x, w, &ns) || f32_stat(c, "rstd", rstd, x) || kt_contig(c, dy) ||
      kt_contig(c, x) || kt_contig(c, rstd) || kt_contig(c, w) || kt_out_like(c, x, &dx))
    return;
  size_t nbytes = kiln_rms_norm_bwd_workspace_size(ns.rows, ns.cols);
  if (weight_grads(c, x, w, &ns, 1, &dg, nbytes, &ws)) return;
  kt_status(c, kiln_rms_norm_bwd(c->l, ns.dt, ns.wdt, dx, dg, dy->data, x->data, rstd->data,
                                 w->data, ns.rows, ns.cols, ws, nbytes, c->s));
}

const kt_kernel kt_norm_kernels[] = {
    KT_KERNEL(layer_norm), KT_KERNEL(layer_norm_backward),
    KT_KERNEL(rms_norm),   KT_KERNEL(rms_norm_backward),
    {NULL, NULL},
};
