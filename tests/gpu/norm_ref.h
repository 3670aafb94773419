/* norm_ref.h — gpu.norm's inputs and its float64 CPU reference of
 * docs/kernels/norm.md (layer norm and RMSNorm, forward and backward).
 *
 * Inputs are made from a seed (xorshift64*), already rounded to their
 * dtype, and the reference reads exactly those stored values (and the fp32
 * mean/rstd the backward is given), so a tolerance covers only what the
 * kernel adds: fp32 arithmetic and the rounding of its outputs. */
#ifndef KILN_TESTS_GPU_NORM_REF_H
#define KILN_TESTS_GPU_NORM_REF_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "kiln/ops.h" /* kiln_dtype */

/* n values uniform in [lo, hi) + offset, none of them zero, stored as dt. */
void nref_fill(kiln_dtype dt, void *p, size_t n, double lo, double hi, double offset,
               uint64_t *seed);

/* Forward, ln = 1 layer norm, 0 RMSNorm: y [rows*cols], mean, rstd [rows]
 * (mean is 0 for RMSNorm). x of dt, gamma/beta of wdt (beta unused by RMS). */
void nref_fwd(int ln, kiln_dtype dt, kiln_dtype wdt, const void *x, const void *gamma,
              const void *beta, long long rows, int cols, double eps, double *y, double *mean,
              double *rstd);

/* Backward from dy, x and the fp32 mean/rstd the kernel is given: dx
 * [rows*cols] with dx_abs, the magnitude of its terms
 * rstd * (|g| + |mean(g)| + |xh * mean(g * xh)|) (they can cancel to nearly
 * nothing: the scale of fp32 rounding), dgamma, dbeta [cols], and per column
 * the sums of the magnitudes of their terms (for the tolerance of a sum). */
void nref_bwd(int ln, kiln_dtype dt, kiln_dtype wdt, const void *dy, const void *x,
              const float *mean, const float *rstd, const void *gamma, long long rows, int cols,
              double *dx, double *dx_abs, double *dgamma, double *dbeta, double *dgamma_abs,
              double *dbeta_abs);

#endif
