/* The softmax ops' kernels (kiln::scaled_softmax, scaled_masked_softmax,
 * scaled_upper_triang_masked_softmax and their backwards): the checks and
 * messages of python/kiln/torch/ops.py's impls, in the same order, then the
 * launcher on torch's current stream. */
#include "torch/ops.h"

KT_OP(scaled_softmax, 0x1, 0, 0)
static void scaled_softmax(kt_call *c) {
  kt_arg *x = &c->arg[0];
  kt_rows r;
  if (kt_rows_cols(c, x, &r.rows, &r.cols) || kt_dtype_code(c, x, "x", &r.dt) || kt_contig(c, x) ||
      kt_out_like(c, x, &r.out) || kt_skip(c, x, r.rows))
    return;
  kt_status(c, kiln_scaled_softmax_fwd(c->l, r.dt, r.out, x->data, r.rows, r.cols,
                                       (float)kt_double(c, 1), c->s));
}

/* dy and y of every softmax backward: dy matching y, both contiguous, dx
 * made in r->out; nonzero when nothing is to be launched (kt_skip) */
static int softmax_grads(kt_call *c, kt_arg *dy, kt_arg *y, kt_rows *r) {
  return kt_match(c, "y", y, "dy", dy) || kt_dtype_code(c, y, "y", &r->dt) || kt_contig(c, dy) ||
         kt_contig(c, y) || kt_out_like(c, y, &r->out) || kt_skip(c, y, kt_numel(y));
}

KT_OP(scaled_softmax_backward, 0x3, 0, 0)
static void scaled_softmax_backward(kt_call *c) {
  kt_arg *dy = &c->arg[0], *y = &c->arg[1];
  kt_rows r;
  if (kt_rows_cols(c, y, &r.rows, &r.cols) || softmax_grads(c, dy, y, &r)) return;
  kt_status(c, kiln_scaled_softmax_bwd(c->l, r.dt, r.out, y->data, dy->data, r.rows, r.cols,
                                       (float)kt_double(c, 2), c->s));
}

static int masked_args(kt_call *c, const kt_arg *x, const kt_arg *m) {
  char xs[256], ms[256], xd[48], md[48];
  if (x->dim != 4 || m->dim != 4)
    return kt_fail(c,
                   "kiln.torch.scaled_masked_softmax: want x [b, heads, sq, sk] and mask "
                   "[b or 1, 1, sq, sk]; got %s and %s",
                   KT_SHAPE(xs, x), KT_SHAPE(ms, m));
  const int64_t *xz = x->sizes, *mz = m->sizes;
  if (mz[1] != 1 || mz[2] != xz[2] || mz[3] != xz[3] || (mz[0] != 1 && mz[0] != xz[0]))
    return kt_fail(c,
                   "kiln.torch.scaled_masked_softmax: mask %s does not fit x %s (want "
                   "[%lld or 1, 1, %lld, %lld])",
                   KT_SHAPE(ms, m), KT_SHAPE(xs, x), (long long)xz[0], (long long)xz[2],
                   (long long)xz[3]);
  if (!kt_same_device(m, x))
    return kt_fail(c, "kiln.torch.scaled_masked_softmax: mask is on %s, x on %s",
                   kt_device(md, sizeof md, m), kt_device(xd, sizeof xd, x));
  if (xz[3] == 0)
    return kt_fail(c, "kiln.torch.scaled_masked_softmax: x %s has sk = 0 keys", KT_SHAPE(xs, x));
  return 0;
}

KT_OP(scaled_masked_softmax, 0x3, 0, 0)
static void scaled_masked_softmax(kt_call *c) {
  kt_arg *x = &c->arg[0], *m = &c->arg[1];
  kiln_dtype dt;
  void *y;
  char md[48];
  if (masked_args(c, x, m) || kt_dtype_code(c, x, "x", &dt) || kt_contig(c, x)) return;
  if (m->dtype != kt_bool && m->dtype != kt_u8) {
    kt_fail(c, "kiln.torch.scaled_masked_softmax: mask is %s; want bool or uint8",
            kt_dtype(md, sizeof md, m));
    return;
  }
  if (kt_contig(c, m) || kt_out_like(c, x, &y) || kt_skip(c, x, kt_numel(x))) return;
  const int64_t *z = x->sizes;
  kt_status(c, kiln_scaled_masked_softmax_fwd(c->l, dt, y, x->data, m->data, (int)z[0], (int)z[1],
                                              (int)z[2], (int)z[3], (int)m->sizes[0],
                                              (float)kt_double(c, 2), c->s));
}

/* y of a masked backward: rank dims with a last dimension of at least 1 */
static int fixed_rank(kt_call *c, const kt_arg *y, int64_t rank, const char *want) {
  char ys[256];
  if (y->dim == rank && y->sizes[rank - 1] != 0) return 0;
  return kt_fail(c, "kiln.torch.%s: want y %s; got %s", c->op, want, KT_SHAPE(ys, y));
}

/* the masked and the causal backward: y of a fixed rank, then the launch */
static void masked_backward(kt_call *c, int causal) {
  kt_arg *dy = &c->arg[0], *y = &c->arg[1];
  kt_rows r;
  const char *want = causal ? "[attn_batches, sq, sk >= 1]" : "[b, heads, sq, sk >= 1]";
  if (fixed_rank(c, y, causal ? 3 : 4, want) || softmax_grads(c, dy, y, &r)) return;
  const int64_t *z = y->sizes;
  float scale = (float)kt_double(c, 2);
  kt_status(c, causal
                   ? kiln_scaled_upper_triang_masked_softmax_bwd(c->l, r.dt, r.out, y->data,
                                                                 dy->data, (long long)z[0],
                                                                 (int)z[1], (int)z[2], scale, c->s)
                   : kiln_scaled_masked_softmax_bwd(c->l, r.dt, r.out, y->data, dy->data, (int)z[0],
                                                    (int)z[1], (int)z[2], (int)z[3], scale, c->s));
}

KT_OP(scaled_masked_softmax_backward, 0x3, 0, 0)
static void scaled_masked_softmax_backward(kt_call *c) {
  masked_backward(c, 0);
}

KT_OP(scaled_upper_triang_masked_softmax, 0x1, 0, 0)
static void scaled_upper_triang_masked_softmax(kt_call *c) {
  kt_arg *x = &c->arg[0];
  kiln_dtype dt;
  void *y;
  char xs[256];
  if (x->dim != 3) {
    kt_fail(c,
            "kiln.torch.scaled_upper_triang_masked_softmax: want x [attn_batches, sq, sk]; got %s",
            KT_SHAPE(xs, x));
    return;
  }
  if (x->sizes[2] == 0) {
    kt_fail(c, "kiln.torch.scaled_upper_triang_masked_softmax: x %s has sk = 0 keys",
            KT_SHAPE(xs, x));
    return;
  }
  if (kt_dtype_code(c, x, "x", &dt) || kt_contig(c, x) || kt_out_like(c, x, &y) ||
      kt_skip(c, x, kt_numel(x)))
    return;
  const int64_t *z = x->sizes;
  kt_status(c, kiln_scaled_upper_triang_masked_softmax_fwd(c->l, dt, y, x->data, (long long)z[0],
                                                           (int)z[1], (int)z[2],
                                                           (float)kt_double(c, 1), c->s));
}

KT_OP(scaled_upper_triang_masked_softmax_backward, 0x3, 0, 0)
static void scaled_upper_triang_masked_softmax_backward(kt_call *c) {
  masked_backward(c, 1);
}

const kt_kernel kt_softmax_kernels[] = {
    KT_KERNEL(scaled_softmax),
    KT_KERNEL(scaled_softmax_backward),
    KT_KERNEL(scaled_masked_softmax),
    KT_KERNEL(scaled_masked_softmax_backward),
    KT_KERNEL(scaled_upper_triang_masked_softmax),
    KT_KERNEL(scaled_upper_triang_masked_softmax_backward),
    {NULL, NULL},
};
