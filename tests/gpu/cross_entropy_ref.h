/* cross_entropy_ref.h — gpu.cross_entropy's inputs and its float64 CPU
 * reference of docs/kernels/cross_entropy.md. Inputs are made from a seed
 * (xorshift64*), already rounded to the dtype, and the reference reads those
 * stored values, so tolerances cover only what the kernels add. */
#ifndef KILN_TESTS_GPU_CROSS_ENTROPY_REF_H
#define KILN_TESTS_GPU_CROSS_ENTROPY_REF_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* int64_t, uint64_t */

#include "kiln/ops.h" /* kiln_dtype */

/* rows x vocab logits of dt, uniform in [-scale, scale] and never 0; with
 * neg_inf, about one in 7 is -inf (never a row's target, given target). */
void ce_make_logits(kiln_dtype dt, void *x, long long rows, int vocab, double scale, int neg_inf,
                    const int64_t *target, uint64_t *seed);

/* Forward over the whole vocabulary: lse[r] = log sum exp x[r, :],
 * loss[r] = lse[r] - x[r, target[r]]; 0 and 0 for ignored or bad targets.
 * xmax[r] (may be NULL): the row's largest logit. */
void ce_ref_fwd(kiln_dtype dt, const void *x, const int64_t *target, long long rows, int vocab,
                long long ignore, double *loss, double *lse, double *xmax);

/* Backward: g[r, c] = dloss[r] * (exp(x[r, c] - lse[r]) - [c == target[r]]),
 * 0 for ignored rows; lse and dloss are the fp32 inputs of the kernel. */
void ce_ref_bwd(kiln_dtype dt, const void *x, const float *lse, const float *dloss,
                const int64_t *target, long long rows, int vocab, long long ignore, double *g);

#endif
