/* The kernels of the ops over a vocabulary (kiln::embedding, cross_entropy,
 * cross_entropy_stats and their backwards): the checks and messages of
 * python/kiln/torch/ops.py's impls, in the same order, then the launcher on
 * torch's current stream. A token id or target outside the vocabulary is a
 * data error the launcher notes on the device (kiln.torch.check, or at once
 * with sync_check), never a device-side assert. */
#include "torch/ops.h"

/* int64 sums as ctypes passes ops.py's Python ints: wrapped, never UB */
static long long add64(int64_t a, int64_t b) {
  return (long long)(int64_t)((uint64_t)a + (uint64_t)b);
}

static unsigned sync_flags(const kt_call *c, int slot) {
  return kt_bool_arg(c, slot) ? KILN_OPS_SYNC_CHECK : 0;
}

KT_OP(embedding, 0x3, 0, 0)
static void embedding(kt_call *c) {
  kt_arg *ids = &c->arg[0], *w = &c->arg[1];
  char ws[256];
  kiln_dtype dt;
  void *y;
  if (w->dim != 2) {
    kt_fail(c, "kiln.torch.embedding: weight must be [vocab_part, hidden]; got %s",
            KT_SHAPE(ws, w));
    return;
  }
  if (w->sizes[0] == 0 || w->sizes[1] == 0) {
    kt_fail(c, "kiln.torch.embedding: weight %s has no rows or no columns", KT_SHAPE(ws, w));
    return;
  }
  int64_t sizes[KT_MAX_DIM + 1], n = kt_numel(ids), vocab_start = kt_int(c, 2);
  if (kt_ids(c, "embedding", ids, w) || kt_contig(c, w) || kt_dtype_code(c, w, "weight", &dt))
    return;
  for (int64_t i = 0; i < ids->dim && i < KT_MAX_DIM; i++)
    sizes[i] = ids->sizes[i];
  sizes[ids->dim < KT_MAX_DIM ? ids->dim : KT_MAX_DIM] = w->sizes[1];
  if (kt_out(c, ids->dim + 1, sizes, w->dtype, w, &y) || kt_skip(c, w, n)) return;
  kt_status(c, kiln_embedding_fwd(c->l, dt, y, (const int64_t *)ids->data, w->data, n,
                                  (int)w->sizes[1], vocab_start, add64(vocab_start, w->sizes[0]),
                                  kt_int(c, 3), sync_flags(c, 4), c->s));
}

KT_OP(embedding_backward, 0x3, 0, 0)
static void embedding_backward(kt_call *c) {
  kt_arg *dy = &c->arg[0], *ids = &c->arg[1];
  int64_t part = kt_int(c, 2), vocab_start = kt_int(c, 3), n = kt_numel(ids);
  int det = kt_bool_arg(c, 4);
  char s1[256], s2[256];
  kiln_dtype dt;
  void *dw, *ws;
  if (kt_ids(c, "embedding_backward", ids, dy)) return;
  int fits = dy->dim == ids->dim + 1 && dy->sizes[dy->dim - 1] != 0;
  for (int64_t i = 0; fits && i < ids->dim; i++)
    fits = dy->sizes[i] == ids->sizes[i];
  if (!fits) {
    kt_fail(c,
            "kiln.torch.embedding_backward: dy %s does not fit ids %s (want [*ids.shape, hidden])",
            KT_SHAPE(s1, dy), KT_SHAPE(s2, ids));
    return;
  }
  if (part < 1 || vocab_start < 0) {
    kt_fail(c, "kiln.torch.embedding_backward: vocab_part = %lld, vocab_start = %lld",
            (long long)part, (long long)vocab_start);
    return;
  }
  int64_t dw_sizes[2] = {part, dy->sizes[dy->dim - 1]};
  if (kt_dtype_code(c, dy, "dy", &dt) || kt_contig(c, dy) ||
      kt_out(c, 2, dw_sizes, kt_f32, dy, &dw) || kt_zero_out(c, 0))
    return;
  long long vocab_end = add64(vocab_start, part);
  size_t nbytes = kiln_embedding_bwd_workspace_size(n, vocab_start, vocab_end, det);
  if (kt_skip(c, dy, n) || kt_workspace(c, nbytes, dy, &ws)) return;
  kt_status(c, kiln_embedding_bwd(c->l, dt, (float *)dw, dy->data, (const int64_t *)ids->data, n,
                                  (int)dw_sizes[1], vocab_start, vocab_end, det, ws, nbytes, c->s));
}

/* ops.py _ce_args: logits [rows, vocab] with a vocabulary, target [rows]
 * int64 on logits' device (made contiguous); messages name cross_entropy */
static int ce_args(kt_call *c, const kt_arg *logits, kt_arg *target, kiln_dtype *dt) {
  char ls[256], ts[256];
  if (logits->dim != 2 || target->dim != 1 || target->sizes[0] != logits->sizes[0])
    return kt_fail(c,
                   "kiln.torch.cross_entropy: want logits [rows, vocab] and target [rows]; got %s "
                   "and %s",
                   KT_SHAPE(ls, logits), KT_SHAPE(ts, target));
  if (logits->sizes[1] == 0)
    return kt_fail(c, "kiln.torch.cross_entropy: logits %s has no vocabulary",
                   KT_SHAPE(ls, logits));
  return kt_dtype_code(c, logits, "logits", dt) || kt_ids(c, "cross_entropy", target, logits);
}

/* the forward (TP = 1: loss, lse) and the stats (TP > 1: row_max, sumexp,
 * tgt): ce_args, logits made contiguous, float32 [rows] outputs, the launch */
static void ce_forward(kt_call *c, int stats) {
  const kt_arg *logits = &c->arg[0], *target = &c->arg[1];
  kiln_dtype dt;
  void *o[3];
  if (ce_args(c, &c->arg[0], &c->arg[1], &dt) || kt_contig(c, &c->arg[0])) return;
  for (int i = 0; i < 2 + stats; i++)
    if (kt_out(c, 1, logits->sizes, kt_f32, logits, &o[i])) return;
  long long rows = logits->sizes[0];
  int vocab = (int)logits->sizes[1];
  if (kt_skip(c, logits, rows)) return;
  kt_status(c, stats ? kiln_cross_entropy_stats(c->l, dt, o[0], o[1], o[2], logits->data,
                                                target->data, rows, vocab, kt_int(c, 2),
                                                kt_int(c, 3), kt_int(c, 4), sync_flags(c, 5), c->s)
                     : kiln_cross_entropy_fwd(c->l, dt, o[0], o[1], logits->data, target->data,
                                              rows, vocab, kt_int(c, 2), sync_flags(c, 3), c->s));
}

KT_OP(cross_entropy, 0x3, 0, 0)
static void cross_entropy(kt_call *c) {
  ce_forward(c, 0);
}

KT_OP(cross_entropy_stats, 0x3, 0, 0)
static void cross_entropy_stats(kt_call *c) {
  ce_forward(c, 1);
}

KT_OP(cross_entropy_backward, 0xf, 0, 0)
static void cross_entropy_backward(kt_call *c) {
  kt_arg *logits = &c->arg[0], *lse = &c->arg[1], *dloss = &c->arg[2], *target = &c->arg[3];
  int64_t vocab_start = kt_int(c, 4);
  kiln_dtype dt;
  void *grad;
  if (ce_args(c, logits, target, &dt) ||
      kt_float32(c, "cross_entropy_backward", "lse", lse, 1, logits->sizes, logits) ||
      kt_float32(c, "cross_entropy_backward", "dloss", dloss, 1, logits->sizes, logits))
    return;
  if (vocab_start < 0) {
    kt_fail(c, "kiln.torch.cross_entropy_backward: vocab_start = %lld, must be >= 0",
            (long long)vocab_start);
    return;
  }
  /* the gradient is written over a contiguous copy of the logits */
  if (kt_out_like(c, logits, &grad)) return;
  if (kt_torch.copy_(c->out[0], logits->h, 0) != 0) {
    kt_fail(c, "kiln.torch.cross_entropy_backward: copying the logits failed");
    return;
  }
  if (kt_skip(c, logits, logits->sizes[0]) || kt_contig(c, lse) || kt_contig(c, dloss)) return;
  kt_status(c, kiln_cross_entropy_bwd(c->l, dt, grad, lse->data, dloss->data, target->data,
                                      logits->sizes[0], (int)logits->sizes[1], vocab_start,
                                      kt_int(c, 5), c->s));
}

const kt_kernel kt_vocab_kernels[] = {
    KT_KERNEL(embedding),           KT_KERNEL(embedding_backward),
    KT_KERNEL(cross_entropy),       KT_KERNEL(cross_entropy_backward),
    KT_KERNEL(cross_entropy_stats), {NULL, NULL},
};
