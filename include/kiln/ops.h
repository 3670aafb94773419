/* kiln — typed launchers for the fused ops.
 *
 * Each launcher takes device pointers, shapes, the dtype and a CUstream,
 * checks every argument (a clear KILN_EINVAL before any launch, never a
 * device-side assert), resolves the unit through the loader if needed,
 * picks the specialisation and launch configuration, and launches
 * asynchronously on the stream. Tensors are contiguous and row-major, and all
 * share the dtype; semantics in docs/kernels.md. A NULL stream is the
 * legacy default stream. Launches run in the loader's context (pushed for the
 * call when another one is current).
 *
 * Empty batches: a batch count (rows, n_tokens, attn_batches, b, heads, sq,
 * rope's s, b, h) may be 0, a row width (cols, sk, hidden, vocab, d) must be
 * >= 1. With an empty batch the other arguments are checked, then KILN_OK
 * with nothing resolved, read or launched (tensor pointers may be NULL),
 * except the norms' backward, which writes dgamma/dbeta zeros (docs/api.md). */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/api.h"
#include "kiln/loader.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_dtype { KILN_F32 = 0, KILN_F16 = 1, KILN_BF16 = 2 } kiln_dtype;

/* "f32", "f16", "bf16", or "?" */
KILN_API const char *kiln_dtype_str(kiln_dtype dt);

/* softmax(scale * x) over the last dimension of x[rows, cols]; y may be x. */
KILN_API kiln_status kiln_scaled_softmax_fwd(kiln_loader *l, kiln_dtype dt, void *y, const void *x,
                                             long long rows, int cols, float scale,
                                             struct CUstream_st *stream);
/* dx = scale * y * (dy - sum(dy * y)); dx may be dy or y. */
KILN_API kiln_status kiln_scaled_softmax_bwd(kiln_loader *l, kiln_dtype dt, void *dx, const void *y,
                                             const void *dy, long long rows, int cols, float scale,
                                             struct CUstream_st *stream);

/* x, y: [b, heads, sq, sk]; mask: uint8 [mask_batches, 1, sq, sk], nonzero =
 * masked, mask_batches 1 (broadcast over the batch) or b. */
KILN_API kiln_status kiln_scaled_masked_softmax_fwd(kiln_loader *l, kiln_dtype dt, void *y,
                                                    const void *x, const uint8_t *mask, int b,
                                                    int heads, int sq, int sk, int mask_batches,
                                                    float scale, struct CUstream_st *stream);
KILN_API kiln_status kiln_scaled_masked_softmax_bwd(kiln_loader *l, kiln_dtype dt, void *dx,
                                                    const void *y, const void *dy, int b, int heads,
                                                    int sq, int sk, float scale,
                                                    struct CUstream_st *stream);

/* Causal: x, y: [attn_batches, sq, sk]; query i sees keys 0..i. */
KILN_API kiln_status kiln_scaled_upper_triang_masked_softmax_fwd(kiln_loader *l, kiln_dtype dt,
                                                                 void *y, const void *x,
                                                                 long long attn_batches, int sq,
                                                                 int sk, float scale,
                                                                 struct CUstream_st *stream);
KILN_API kiln_status kiln_scaled_upper_triang_masked_softmax_bwd(
    kiln_loader *l, kiln_dtype dt, void *dx, const void *y, const void *dy, long long attn_batches,
    int sq, int sk, float scale, struct CUstream_st *stream);

/* ---- data errors -------------------------------------------------------------
 * Ops whose input can be invalid in its values, not its shape (token ids,
 * targets), never fault or assert on the device: the kernel writes zeros for
 * the bad element, notes it in a device word of the loader, and the op goes
 * on. kiln_ops_check() synchronizes `stream`, and returns KILN_EINVAL with the
 * first such error since the last check, e.g. "kiln_embedding_fwd: token id
 * 32001 at position 17 is outside the vocabulary [0, 32000)", then clears it;
 * KILN_OK when there was none. The CUDA context stays usable either way.
 * Ops taking `flags` check at once with KILN_OPS_SYNC_CHECK (a stream
 * synchronization per call: for tests and debugging). The device word is one
 * per loader and the check synchronizes only `stream`, reading and
 * clearing the word in order on it (never with copies on the legacy
 * stream, which a non-blocking stream does not wait for): check on the
 * stream the ops ran on. Such ops running at once on several streams of one loader
 * may report their errors under each other's check (never a wrong read). */
#define KILN_OPS_SYNC_CHECK 1u
KILN_API kiln_status kiln_ops_check(kiln_loader *l, struct CUstream_st *stream);

/* ---- layer norm and RMSNorm ------------------------------------------------
 * x, y, dx, dy: [rows, cols] of dt. gamma, beta, dgamma, dbeta: [cols] of wdt,
 * which is KILN_F32 or dt (mixed precision: 16-bit activations, fp32
 * weights). mean, rstd: [rows] fp32, written by the forward (either may be
 * NULL when not needed, e.g. inference) and read by the backward (which
 * needs them). Any cols from 1 to 2^31 - 2049; y may be x, dx may be dy.
 * eps: finite, >= 0.
 * docs/kernels/norm.md has the formulas and the launch details.
 *
 * The backward reduces dgamma and dbeta deterministically (same bits every
 * run): per-block partials in `workspace`, then a fixed-order second pass; no
 * float atomics. workspace: device memory of at least
 * kiln_*_norm_bwd_workspace_size(rows, cols) bytes, 256-byte aligned (what
 * cuMemAlloc returns); its contents on entry do not matter. */
KILN_API kiln_status kiln_layer_norm_fwd(kiln_loader *l, kiln_dtype dt, kiln_dtype wdt, void *y,
                                         float *mean, float *rstd, const void *x, const void *gamma,
                                         const void *beta, long long rows, int cols, float eps,
                                         struct CUstream_st *stream);
KILN_API size_t kiln_layer_norm_bwd_workspace_size(long long rows, int cols);
KILN_API kiln_status kiln_layer_norm_bwd(kiln_loader *l, kiln_dtype dt, kiln_dtype wdt, void *dx,
                                         void *dgamma, void *dbeta, const void *dy, const void *x,
                                         const float *mean, const float *rstd, const void *gamma,
                                         long long rows, int cols, void *workspace,
                                         size_t workspace_bytes, struct CUstream_st *stream);

/* y = x * rsqrt(mean(x^2) + eps) * gamma; rstd as for layer norm. */
KILN_API kiln_status kiln_rms_norm_fwd(kiln_loader *l, kiln_dtype dt, kiln_dtype wdt, void *y,
                                       float *rstd, const void *x, const void *gamma,
                                       long long rows, int cols, float eps,
                                       struct CUstream_st *stream);
KILN_API size_t kiln_rms_norm_bwd_workspace_size(long long rows, int cols);
KILN_API kiln_status kiln_rms_norm_bwd(kiln_loader *l, kiln_dtype dt, kiln_dtype wdt, void *dx,
                                       void *dgamma, const void *dy, const void *x,
                                       const float *rstd, const void *gamma, long long rows,
                                       int cols, void *workspace, size_t workspace_bytes,
                                       struct CUstream_st *stream);

/* ---- embedding (vocabulary-parallel) ------------------------------------------
 * This rank holds rows [vocab_start, vocab_end) of a vocabulary [0,
 * vocab_size): weight is [vocab_end - vocab_start, hidden] of dt. ids: int64
 * [n_tokens]. Forward: y[t] = weight[ids[t] - vocab_start] when the id is in
 * the partition, else a zero row (another rank's; the tensor-parallel
 * all-reduce sums them). TP = 1 is vocab_start = 0, vocab_end = vocab_size.
 * An id outside [0, vocab_size) is a data error (kiln_ops_check), the same
 * at TP = 1 and TP > 1; its row is zeros.
 *
 * Backward: dweight[ids[t] - vocab_start] += dy[t] for the partition's ids;
 * dweight is fp32 [vocab_end - vocab_start, hidden] (Megatron's main_grad)
 * and is accumulated into, not overwritten. deterministic = 1 sorts the ids
 * and sums each row's tokens in a fixed order: position order within
 * pieces cut at fixed points of the sorted ids, then the pieces in order
 * (same bits every run and on every GPU; docs/kernels/embedding.md);
 * deterministic = 0 uses fp32 atomics (faster, order-dependent rounding).
 * workspace: at least kiln_embedding_bwd_workspace_size(...) bytes (0 for
 * the atomic path), 256-byte aligned. */
KILN_API kiln_status kiln_embedding_fwd(kiln_loader *l, kiln_dtype dt, void *y, const int64_t *ids,
                                        const void *weight, long long n_tokens, int hidden,
                                        long long vocab_start, long long vocab_end,
                                        long long vocab_size, unsigned flags,
                                        struct CUstream_st *stream);
KILN_API size_t kiln_embedding_bwd_workspace_size(long long n_tokens, long long vocab_start,
                                                  long long vocab_end, int deterministic);
KILN_API kiln_status kiln_embedding_bwd(kiln_loader *l, kiln_dtype dt, float *dweight,
                                        const void *dy, const int64_t *ids, long long n_tokens,
                                        int hidden, long long vocab_start, long long vocab_end,
                                        int deterministic, void *workspace, size_t workspace_bytes,
                                        struct CUstream_st *stream);

/* ---- bias + activation ----------------------------------------------------------
 * x, y, dx, dy: [rows, cols] of dt, bias: [cols] of dt or NULL (no bias).
 * GeLU is the tanh approximation (Megatron's bias_gelu):
 *   y = 0.5 u (1 + tanh(0.79788456 (u + 0.044715 u^3))), u = x + bias.
 * The backward writes dx = dy * gelu'(u) (dbias, the column sum of dx, is
 * the caller's). y may be x, dx may be dy (in place); nothing else may
 * overlap. Math in fp32 (docs/kernels/activation.md). */
KILN_API kiln_status kiln_bias_gelu_fwd(kiln_loader *l, kiln_dtype dt, void *y, const void *x,
                                        const void *bias, long long rows, int cols,
                                        struct CUstream_st *stream);
KILN_API kiln_status kiln_bias_gelu_bwd(kiln_loader *l, kiln_dtype dt, void *dx, const void *dy,
                                        const void *x, const void *bias, long long rows, int cols,
                                        struct CUstream_st *stream);

/* SwiGLU: x is [rows, 2*cols] = [a | b], bias [2*cols] = [bias_a | bias_b]
 * or NULL; y, dy are [rows, cols]: y = silu(a + bias_a) * (b + bias_b), with
 * silu(z) = z * sigmoid(z); dx is [rows, 2*cols] = [da | db]. No buffer may
 * overlap a written one. */
KILN_API kiln_status kiln_bias_swiglu_fwd(kiln_loader *l, kiln_dtype dt, void *y, const void *x,
                                          const void *bias, long long rows, int cols,
                                          struct CUstream_st *stream);
KILN_API kiln_status kiln_bias_swiglu_bwd(kiln_loader *l, kiln_dtype dt, void *dx, const void *dy,
                                          const void *x, const void *bias, long long rows, int cols,
                                          struct CUstream_st *stream);

/* ---- bias + dropout + residual add ---------------------------------------------
 * y = residual + dropout_p(x + bias) over [rows, cols] of dt, bias [cols] or
 * NULL. Element i (row-major index) is kept iff u_i >= p, u_i = (w >> 8) *
 * 2^-24 with w word i % 4 of Philox-4x32-10 with key (seed lo, seed hi) and
 * counter (i/4 lo, i/4 hi, offset lo, offset hi): reproducible from (seed,
 * offset) and independent of the launch shape; a different offset (e.g. +1
 * per call) or seed gives an independent mask. Kept elements are
 * fma(x + bias, 1 / (1 - p), residual) in fp32; dropped ones are exactly
 * residual (x is not used: an inf or NaN there does not propagate).
 * training = 0, or p = 0, is the exact identity y = (x + bias) + residual in
 * fp32, rounded once. 0 <= p < 1 (p = 1 too when training = 0), training 0 or 1, else KILN_EINVAL.
 * y may be x or residual. The backward regenerates the mask: dx = dy * keep / (1 - p), +0 where
 * dropped; dx may be dy (dresidual is dy itself; dbias the column sum of dx).
 * docs/kernels/dropout.md. */
KILN_API kiln_status kiln_bias_dropout_add_fwd(kiln_loader *l, kiln_dtype dt, void *y,
                                               const void *x, const void *bias,
                                               const void *residual, long long rows, int cols,
                                               float p, uint64_t seed, uint64_t offset,
                                               int training, struct CUstream_st *stream);
KILN_API kiln_status kiln_bias_dropout_add_bwd(kiln_loader *l, kiln_dtype dt, void *dx,
                                               const void *dy, long long rows, int cols, float p,
                                               uint64_t seed, uint64_t offset, int training,
                                               struct CUstream_st *stream);

/* ---- rotary position embedding ----------------------------------------------------
 * x, y: [s, b, h, d] (KILN_ROPE_SBHD) or [b, s, h, d] (KILN_ROPE_BSHD) of dt.
 * angles: fp32 [s, rot_dim / 2], the angle of each rotated pair at each
 * position. The first rot_dim (even, 2 <= rot_dim <= d) features of each
 * head are rotated, the rest copied. Pairs: (i, i + rot_dim/2) for
 * KILN_ROPE_ROTATE_HALF (GPT-NeoX, Llama), (2i, 2i+1) for
 * KILN_ROPE_INTERLEAVED (GPT-J). The backward rotates dy by -angle. y may be
 * x, dx may be dy. */
typedef enum kiln_rope_layout { KILN_ROPE_SBHD = 0, KILN_ROPE_BSHD = 1 } kiln_rope_layout;
typedef enum kiln_rope_style {
  KILN_ROPE_ROTATE_HALF = 0,
  KILN_ROPE_INTERLEAVED = 1
} kiln_rope_style;
KILN_API kiln_status kiln_rope_fwd(kiln_loader *l, kiln_dtype dt, kiln_rope_layout layout,
                                   kiln_rope_style style, void *y, const void *x,
                                   const float *angles, int s, int b, int h, int d, int rot_dim,
                                   struct CUstream_st *stream);
KILN_API kiln_status kiln_rope_bwd(kiln_loader *l, kiln_dtype dt, kiln_rope_layout layout,
                                   kiln_rope_style style, void *dx, const void *dy,
                                   const float *angles, int s, int b, int h, int d, int rot_dim,
                                   struct CUstream_st *stream);

/* ---- cross-entropy over a vocabulary partition ---------------------------------------
 * logits: [rows, vocab_part] of dt, this rank's columns [vocab_start,
 * vocab_start + vocab_part) of a vocabulary [0, vocab_size). target: int64
 * [rows]; a row whose target is ignore_index has loss 0 and gradient 0; any
 * other target outside [0, vocab_size) is a data error (kiln_ops_check).
 * loss, lse (logsumexp, saved for the backward): fp32 [rows].
 * An ignored row's logits are not read (fwd: loss 0, lse 0; after the TP > 1
 * steps: loss 0, lse finite). fwd and stats note a bad target and do not
 * read its row: its loss is 0 and its lse +inf (so the backward's row is 0),
 * at TP = 1 and after the TP > 1 steps (docs/kernels/cross_entropy.md).
 * flags: 0 or KILN_OPS_SYNC_CHECK.
 *
 * TP = 1 (vocab_start = 0, vocab_part = vocab_size): one fused pass. */
KILN_API kiln_status kiln_cross_entropy_fwd(kiln_loader *l, kiln_dtype dt, float *loss, float *lse,
                                            const void *logits, const int64_t *target,
                                            long long rows, int vocab_size, long long ignore_index,
                                            unsigned flags, struct CUstream_st *stream);
/* TP > 1, three steps around three small all-reduces:
 *   1. stats: row_max[r] = max of the partition's logits, sumexp[r] = sum
 *      exp(logit - row_max[r]), tgt[r] = the target's logit if it is in the
 *      partition, else 0.
 *   (all-reduce MAX row_max into gmax)
 *   2. rescale: sumexp[r] *= exp(row_max[r] - gmax[r]), in place.
 *   (all-reduce SUM sumexp; all-reduce SUM tgt)
 *   3. loss: lse[r] = gmax[r] + log(sumexp[r]); loss[r] = lse[r] - tgt[r]
 *      (0 for ignored rows).
 * All vectors fp32 [rows]. */
KILN_API kiln_status kiln_cross_entropy_stats(kiln_loader *l, kiln_dtype dt, float *row_max,
                                              float *sumexp, float *tgt, const void *logits,
                                              const int64_t *target, long long rows, int vocab_part,
                                              long long vocab_start, long long vocab_size,
                                              long long ignore_index, unsigned flags,
                                              struct CUstream_st *stream);
KILN_API kiln_status kiln_cross_entropy_rescale(kiln_loader *l, float *sumexp, const float *row_max,
                                                const float *gmax, long long rows,
                                                struct CUstream_st *stream);
KILN_API kiln_status kiln_cross_entropy_loss(kiln_loader *l, float *loss, float *lse,
                                             const float *gmax, const float *sumexp,
                                             const float *tgt, const int64_t *target,
                                             long long rows, long long ignore_index,
                                             struct CUstream_st *stream);
/* Backward (any TP): logits <- dloss[r] * (exp(logit - lse[r]) - [column is
 * the target]), in place; rows whose target is ignore_index become 0 (their
 * lse and dloss are not read). A target outside [vocab_start, vocab_start +
 * vocab_part) is another rank's: no one-hot term. */
KILN_API kiln_status kiln_cross_entropy_bwd(kiln_loader *l, kiln_dtype dt, void *logits,
                                            const float *lse, const float *dloss,
                                            const int64_t *target, long long rows, int vocab_part,
                                            long long vocab_start, long long ignore_index,
                                            struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
