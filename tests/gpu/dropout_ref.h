/* dropout_ref.h — gpu.dropout's inputs and its CPU reference of
 * docs/kernels/dropout.md: Philox-4x32-10 written again from the paper (not
 * shared with the kernel), the keep mask from it, and y / dx per element in
 * float64 with a tolerance.
 *
 * Inputs are made from a seed (xorshift64*), already rounded to the dtype,
 * and chosen so that the mask can be read back from the outputs: |x + bias|
 * >= 0.25 > the spacing of any |residual| <= 1 in every dtype, so a kept
 * element always differs from its residual; dy is never 0, so a kept dx
 * never is.
 *
 * Tolerances (|got - want| <= tol), per element from its own operands:
 *   - dropped: y is the residual, dx is +0, exactly (tol 0, sign included);
 *   - identity (training 0 or p 0): exactly fp32 (x + bias) + residual
 *     rounded once to the dtype, and dx == dy (tol 0): the kernel and this
 *     reference both do it in fp32;
 *   - kept: want = r + t * s in float64, t = fp32(x + bias) as the kernel,
 *     s = 1 / (1 - p) exact. The kernel's errors: s rounded to fp32 (|t s|
 *     2^-24), the fma's rounding ((|t s| + |r|) 2^-24), then the store's
 *     rounding to the dtype, half an ulp: |y| 2^-24 (f32), 2^-11 (f16),
 *     2^-8 (bf16), plus half the smallest subnormal. dx = dy * s likewise
 *     (two fp32 roundings, then the store's). Both add 2^-50 |want| for the
 *     reference's own rounding in float64. */
#ifndef KILN_TESTS_GPU_DROPOUT_REF_H
#define KILN_TESTS_GPU_DROPOUT_REF_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t, uint64_t */

#include "kiln/ops.h" /* kiln_dtype */

/* Philox-4x32-10 of ctr under key. */
void dref_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* Random123's known answers; 1, or 0 with the first mismatch in msg. */
int dref_philox_kat(char *msg, size_t cap);

/* keep[i] for i in [0, n): u_i = (word_i >> 8) * 2^-24 >= p, word_i = word
 * i % 4 of Philox(counter (i/4 lo, i/4 hi, offset lo, offset hi), key (seed
 * lo, seed hi)); everything is kept when training is 0. Returns how many. */
size_t dref_mask(unsigned char *keep, size_t n, float p, int training, uint64_t seed,
                 uint64_t offset);

typedef struct dref_case {
  kiln_dtype dt;
  long long rows;
  int cols, has_bias, training;
  float p;
  uint64_t seed, offset;
  size_t n;                  /* rows * cols */
  void *x, *bias, *res, *dy; /* inputs of dt: n, cols (has_bias), n, n */
  unsigned char *keep;       /* the reference mask, n */
  size_t kept;
} dref_case;

/* Makes the inputs (from data_seed) and the mask; 0, or -1 out of memory. */
int dref_make(dref_case *c, kiln_dtype dt, long long rows, int cols, int has_bias, float p,
              int training, uint64_t seed, uint64_t offset, uint64_t data_seed);
void dref_free(dref_case *c);

/* Element i of y (bwd 0) or dx (bwd 1): want, and tol (0: bit for bit). */
void dref_want(const dref_case *c, int bwd, size_t i, double *want, double *tol);

typedef struct dref_result {
  size_t bad;      /* values out of tolerance (NaN always is) */
  size_t mask_bad; /* elements kept on one side and dropped on the other */
  size_t first;    /* the first bad element (value or mask) */
  double got, want, tol;
  double worst; /* max |got - want| / tol over elements with tol > 0 */
} dref_result;

/* Checks got (n elements of c->dt): values, and the kept set read back from
 * them (y != residual, dx != 0) against the reference mask. */
void dref_check(const dref_case *c, int bwd, const void *got, dref_result *r);

#endif
