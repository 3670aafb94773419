/* rope_ref.h — gpu.rope's inputs and its float64 CPU reference of
 * docs/kernels/rope.md, with a tolerance per element.
 *
 * Inputs are made from a seed (xorshift64*), already rounded to the dtype
 * (never zero), and the reference reads exactly those stored values and the
 * stored fp32 angles, so a tolerance covers only what the kernel adds: its
 * sin/cos (~1e-7 absolute for any angle), fp32 products and the rounding of
 * the result to the dtype. Features past rot_dim must be copied exactly. */
#ifndef KILN_TESTS_GPU_ROPE_REF_H
#define KILN_TESTS_GPU_ROPE_REF_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "kiln/ops.h" /* kiln_dtype, kiln_rope_layout, kiln_rope_style */

typedef struct rope_shape {
  int s, b, h, d, rot;
  double pos0; /* position of the first token: angle(p, i) = (pos0 + p) * freq_i */
  double base; /* freq_i = base^(-2i / rot); 1: every pair at freq 1 */
} rope_shape;

/* Every element of x (n of dt) random in +-[1/64, 1], rounded to dt. */
void rope_ref_fill(kiln_dtype dt, void *x, size_t n, uint64_t seed);
/* angles [s, rot/2] of sh. */
void rope_ref_angles(const rope_shape *sh, float *angles);

/* out[i] and tol[i] (tol < 0: must equal the input exactly) of the forward
 * (bwd = 0) or backward (bwd = 1) of x under layout/style; roundtrip = 1
 * widens the tolerance for x -> fwd (rounded to dt) -> bwd against x. */
void rope_ref(kiln_dtype dt, kiln_rope_layout layout, kiln_rope_style style, int bwd, int roundtrip,
              const rope_shape *sh, const void *x, const float *angles, double *out, double *tol);

/* How many of got (n of dt) are out of tolerance (NaN always is); the first
 * in *first_i, the largest |got - ref| / tol in *worst. */
size_t rope_ref_check(kiln_dtype dt, const void *got, const void *x, const double *ref,
                      const double *tol, size_t n, size_t *first_i, double *worst);

#endif
