/* embedding_ref.h — gpu.embedding's inputs and its CPU references of
 * docs/kernels/embedding.md.
 *
 * Inputs come from a seed (xorshift64*) so a failure reproduces; values are
 * nonzero, already rounded to the dtype, and the references read exactly the
 * stored values. The forward is a copy: it must match bit for bit. The
 * backward has a float64 reference with a per-element bound on fp32 sum
 * rounding (ref_bwd_tol), and, for the deterministic path, an fp32 emulation
 * of its exact order of operations (each row's tokens summed in position
 * order from 0 within each piece of the sorted order, the pieces' sums added
 * in order, then added to dweight: docs/kernels/embedding.md), which it must
 * match bit for bit. */
#ifndef KILN_TESTS_GPU_EMBEDDING_REF_H
#define KILN_TESTS_GPU_EMBEDDING_REF_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* int64_t, uint64_t */

#include "kiln/ops.h" /* kiln_dtype */

/* n nonzero values in [-1, -1/64] U [1/64, 1] (times scale), stored as dt in h. */
void ref_fill(kiln_dtype dt, void *h, size_t n, double scale, uint64_t *seed);

/* ids: n_tokens ids of [0, vocab_size), every row of [lo, hi) likely; a
 * fraction `outside` (0..1) of them outside [lo, hi) when the vocabulary has
 * room. */
void ref_ids(int64_t *ids, long long n, long long vocab_size, long long lo, long long hi,
             double outside, uint64_t *seed);

/* y (doubles) = the forward of docs/kernels/embedding.md. */
void ref_fwd(double *y, const int64_t *ids, kiln_dtype dt, const void *weight, long long n,
             int hidden, long long vs, long long ve);

/* dw[r, c] (float64, starting from dw0) += dy of the partition's tokens; tol:
 * the bound on an fp32 summation's error, per element. */
void ref_bwd(double *dw, double *tol, const float *dw0, kiln_dtype dt, const void *dy,
             const int64_t *ids, long long n, int hidden, long long vs, long long ve);

/* The deterministic path's exact fp32 result. */
void ref_bwd_sorted_f32(float *dw, const float *dw0, kiln_dtype dt, const void *dy,
                        const int64_t *ids, long long n, int hidden, long long vs, long long ve);

#endif
