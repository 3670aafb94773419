/* The norms' kernels (kiln::layer_norm, rms_norm and their backwards): the
 * checks and messages of python/kiln/torch/ops.py's impls, in the same order,
 * then the launcher on torch's current stream with a workspace from torch's
 * allocator. */
#include "torch/call.h"
#include "torch/ops.h"

#define SHAPE(buf, a) kt_shape(buf, sizeof buf, (a)->dim, (a)->sizes)
#define ALIGN 256 /* workspaces: what cuMemAlloc returns */

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
                     c->op, ns->cols, SHAPE(s1, w), SHAPE(s2, b));
    return kt_fail(c, "kiln.torch.%s: weight/bias must be [%d] (x's last dimension); got %s", c->op,
                   ns->cols, SHAPE(s1, w));
  }
  if ((w->dtype != kt_f32 && w->dtype != x->dtype) || (b->h && b->dtype != w->dtype))
    return kt_fail(c, "kiln.torch.%s: weight and bias are float32 or x's dtype (%s), both the same",
                   c->op, kt_dtype(d1, sizeof d1, x));
  if (kt_dtype_code(c, x, "x", &ns->dt) || kt_dtype_code(c, w, "weight", &ns->wdt)) return -1;
  return 0;
}

/* ops.py _f32: saved statistics are float32 of x's shape but the last */
static int f32_stat(kt_call *c, const char *name, const kt_arg *t, const kt_arg *x) {
  int ok = t->dtype == kt_f32 && t->dim == x->dim - 1 && kt_same_device(t, x);
  for (int64_t i = 0; ok && i < t->dim; i++)
    ok = t->sizes[i] == x->sizes[i];
  if (ok) return 0;
  char td[48], ts[256], tv[48], ws[256], xv[48];
  return kt_fail(c, "kiln.torch.%s: %s is %s %s on %s; want float32 %s on %s", c->op, name,
                 kt_dtype(td, sizeof td, t), SHAPE(ts, t), kt_device(tv, sizeof tv, t),
                 kt_shape(ws, sizeof ws, x->dim - 1, x->sizes), kt_device(xv, sizeof xv, x));
}

/* nbytes of scratch from torch's allocator, ALIGN-aligned (ops.py _workspace) */
static int workspace(kt_call *c, size_t nbytes, const kt_arg *like, void **out) {
  *out = NULL;
  if (nbytes == 0) return 0;
  int64_t n = (int64_t)(nbytes + ALIGN);
  void *p;
  if (kt_tmp(c, 1, &n, kt_u8, like, &p)) return -1;
  uintptr_t a = (uintptr_t)p;
  *out = (void *)(a + (-a % ALIGN));
  return 0;
}

static void layer_norm(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "layer_norm", stack, 0x7, 0);
  kt_arg *x = &c.arg[0], *w = &c.arg[1], *b = &c.arg[2];
  norm_shape ns;
  void *y, *mean, *rstd;
  kiln_loader *l;
  struct CUstream_st *s;
  if (norm_args(&c, x, w, b, &ns) || kt_contig(&c, x) || kt_contig(&c, w) || kt_contig(&c, b) ||
      kt_out(&c, x->dim, x->sizes, x->dtype, x, &y) ||
      kt_out(&c, x->dim - 1, x->sizes, kt_f32, x, &mean) ||
      kt_out(&c, x->dim - 1, x->sizes, kt_f32, x, &rstd) || ns.rows == 0 ||
      kt_target(&c, x, &l, &s))
    goto out;
  kt_status(&c, kiln_layer_norm_fwd(l, ns.dt, ns.wdt, y, mean, rstd, x->data, w->data, b->data,
                                    ns.rows, ns.cols, (float)kt_double(&c, 3), s));
out:
  kt_end(&c);
}

static void layer_norm_backward(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "layer_norm_backward", stack, 0x1f, 0);
  kt_arg *dy = &c.arg[0], *x = &c.arg[1], *mean = &c.arg[2], *rstd = &c.arg[3], *w = &c.arg[4];
  kt_arg none = {0};
  norm_shape ns;
  void *dx, *dg, *db, *ws;
  kiln_loader *l;
  struct CUstream_st *s;
  if (norm_args(&c, x, w, &none, &ns) || kt_match(&c, "x", x, "dy", dy) ||
      f32_stat(&c, "mean", mean, x) || f32_stat(&c, "rstd", rstd, x) || kt_contig(&c, dy) ||
      kt_contig(&c, x) || kt_contig(&c, mean) || kt_contig(&c, rstd) || kt_contig(&c, w) ||
      kt_out(&c, x->dim, x->sizes, x->dtype, x, &dx) ||
      kt_out(&c, w->dim, w->sizes, w->dtype, w, &dg) ||
      kt_out(&c, w->dim, w->sizes, w->dtype, w, &db))
    goto out;
  if (ns.rows == 0) { /* the sum over no rows */
    if (kt_zero_out(&c, 1) == 0) kt_zero_out(&c, 2);
    goto out;
  }
  size_t nbytes = kiln_layer_norm_bwd_workspace_size(ns.rows, ns.cols);
  if (workspace(&c, nbytes, x, &ws) || kt_target(&c, x, &l, &s)) goto out;
  kt_status(&c, kiln_layer_norm_bwd(l, ns.dt, ns.wdt, dx, dg, db, dy->data, x->data, mean->data,
                                    rstd->data, w->data, ns.rows, ns.cols, ws, nbytes, s));
out:
  kt_end(&c);
}

static void rms_norm(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "rms_norm", stack, 0x3, 0);
  kt_arg *x = &c.arg[0], *w = &c.arg[1];
  kt_arg none = {0};
  norm_shape ns;
  void *y, *rstd;
  kiln_loader *l;
  struct CUstream_st *s;
  if (norm_args(&c, x, w, &none, &ns) || kt_contig(&c, x) || kt_contig(&c, w) ||
      kt_out(&c, x->dim, x->sizes, x->dtype, x, &y) ||
      kt_out(&c, x->dim - 1, x->sizes, kt_f32, x, &rstd) || ns.rows == 0 ||
      kt_target(&c, x, &l, &s))
    goto out;
  kt_status(&c, kiln_rms_norm_fwd(l, ns.dt, ns.wdt, y, rstd, x->data, w->data, ns.rows, ns.cols,
                                  (float)kt_double(&c, 2), s));
out:
  kt_end(&c);
}

static void rms_norm_backward(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {
  (void)nargs, (void)nout;
  kt_call c;
  kt_begin(&c, "rms_norm_backward", stack, 0xf, 0);
  kt_arg *dy = &c.arg[0], *x = &c.arg[1], *rstd = &c.arg[2], *w = &c.arg[3];
  kt_arg none = {0};
  norm_shape ns;
  void *dx, *dg, *ws;
  kiln_loader *l;
  struct CUstream_st *s;
  if (norm_args(&c, x, w, &none, &ns) || kt_match(&c, "x", x, "dy", dy) ||
      f32_stat(&c, "rstd", rstd, x) || kt_contig(&c, dy) || kt_contig(&c, x) ||
      kt_contig(&c, rstd) || kt_contig(&c, w) || kt_out(&c, x->dim, x->sizes, x->dtype, x, &dx) ||
      kt_out(&c, w->dim, w->sizes, w->dtype, w, &dg))
    goto out;
  if (ns.rows == 0) { /* the sum over no rows */
    kt_zero_out(&c, 1);
    goto out;
  }
  size_t nbytes = kiln_rms_norm_bwd_workspace_size(ns.rows, ns.cols);
  if (workspace(&c, nbytes, x, &ws) || kt_target(&c, x, &l, &s)) goto out;
  kt_status(&c, kiln_rms_norm_bwd(l, ns.dt, ns.wdt, dx, dg, dy->data, x->data, rstd->data, w->data,
                                  ns.rows, ns.cols, ws, nbytes, s));
out:
  kt_end(&c);
}

const kt_kernel kt_norm_kernels[] = {
    {"layer_norm", layer_norm, 0},
    {"layer_norm_backward", layer_norm_backward, 0},
    {"rms_norm", rms_norm, 0},
    {"rms_norm_backward", rms_norm_backward, 0},
    {NULL, NULL, 0},
};
