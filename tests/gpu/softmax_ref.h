/* softmax_ref.h — gpu.softmax's inputs and its float64 CPU reference of
 * docs/kernels.md ("Softmax units"), with a tolerance per element.
 *
 * A case is one shape in one dtype: its inputs are made here from a seed
 * (xorshift64*, so a failure reproduces), already rounded to the dtype, and
 * the reference reads exactly those stored values, so the tolerance covers
 * only what the kernel adds: fp32 arithmetic, ex2.approx, and the rounding of
 * the output to the dtype. Positions the contract fixes (masked, scale*x =
 * -inf, a fully masked row, the causal upper triangle, dx where y == 0) must
 * be exactly 0. */
#ifndef KILN_TESTS_GPU_SOFTMAX_REF_H
#define KILN_TESTS_GPU_SOFTMAX_REF_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint8_t, uint64_t */

#include "kiln/ops.h" /* kiln_dtype */

typedef enum ref_unit { REF_PLAIN = 0, REF_MASKED = 1, REF_CAUSAL = 2 } ref_unit;

/* x viewed as [b, heads, sq, cols]: plain uses rows = b (heads = sq = 1),
 * causal [b = attn_batches, sq, cols] (heads = 1). */
typedef struct ref_shape {
  ref_unit unit;
  int b, heads, sq, cols;
  int mask_batches; /* masked: 1 or b */
  float scale;
  int inplace; /* launch with y == x (forward) and dx == dy (backward) */
} ref_shape;

typedef struct ref_case {
  ref_shape s;
  kiln_dtype dt;
  long long rows;
  size_t n;                /* rows * cols */
  size_t mask_bytes;       /* masked: mask_batches * sq * cols; else 0 */
  void *x;                 /* forward input, n elements of dt */
  void *y_in, *dy;         /* backward inputs: the reference's y rounded to dt, and dy */
  uint8_t *mask;           /* masked unit only: nonzero = masked */
  double *y_ref, *y_tol;   /* forward result; tol < 0: must be exactly 0 */
  double *dx_ref, *dx_tol; /* backward result from y_in and dy; same rule */
} ref_case;

/* The first element out of tolerance, for the message. */
typedef struct ref_mismatch {
  long long row;
  int col;
  double got, want, tol;
} ref_mismatch;

long long ref_rows(const ref_shape *s);

/* Makes the inputs and both references; 0, or -1 when out of memory. */
int ref_case_make(ref_case *c, const ref_shape *s, kiln_dtype dt, uint64_t seed);
void ref_case_free(ref_case *c);

/* Compares got (n elements of c->dt) with ref/tol: returns how many are out
 * of tolerance (NaN always is), the first in *first, and in *worst the
 * largest |got - ref| / tol over the elements with a tolerance. */
size_t ref_check(const ref_case *c, const void *got, const double *ref, const double *tol,
                 ref_mismatch *first, double *worst);

/* "masked b=2 h=3 sq=6 sk=1000 mb=1 scale=0.37 in-place": the shape, for a
 * case's line. */
const char *ref_shape_str(const ref_shape *s, char *out, size_t cap);

#endif
