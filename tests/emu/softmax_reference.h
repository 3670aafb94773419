/* softmax_reference.h — the contract of docs/kernels.md ("Softmax units"), in
 * double precision, with an error bound per element for the kernels' fp32
 * arithmetic and output rounding.
 *
 * The reference reads the same (already rounded) inputs as the kernel, so the
 * bound covers only what the kernel adds: fp32 products and sums, ex2 of an
 * fp32 argument, the final rounding to the output dtype, and flushing below
 * 2^-126. It is an interval per element, derived from the actual operands
 * (not a fixed tolerance), so it stays tight for rows with huge or tiny
 * values. Positions the contract fixes exactly (masked, not participating,
 * the causal upper triangle) must be exactly 0.
 */
#ifndef KILN_EMU_SOFTMAX_REFERENCE_H
#define KILN_EMU_SOFTMAX_REFERENCE_H

#include <stddef.h> /* size_t */

#include <vector> /* std::vector */

#include "device_buffer.h" /* the dtype enum */

namespace kiln_emu {

/* What a unit computes (the test maps unit names to these). */
enum { kUnitPlain, kUnitMasked, kUnitCausal };

/* One expected element: `value` is the exact result (for messages); the
 * kernel's must lie in [lo, hi], or be NaN / the same infinity when value is;
 * `exact_zero`: the contract says 0 (either sign). */
struct expected {
  double value;
  double lo, hi;
  bool exact_zero;
};

struct row_geometry {
  int unit;
  long long rows;
  int cols, sq, heads, mask_batches;
  int width; /* threads sharing a row (32 for w, the block for b and g): sets the sum depth */
};

/* Forward over all rows; x and mask as the kernel sees them (x already
 * rounded to the dtype, mask[mask_batches * sq * cols] for the masked unit). */
void reference_forward(std::vector<expected> *out, const row_geometry &g, int dtype,
                       const std::vector<float> &x, const unsigned char *mask, float scale);

/* Backward: dx from y and dy (rounded to the dtype). */
void reference_backward(std::vector<expected> *out, const row_geometry &g, int dtype,
                        const std::vector<float> &y, const std::vector<float> &dy, float scale);

/* Does `got` meet `e`? */
bool meets(double got, const expected &e);

/* Columns of row r that the contract lets take part at all: [0, limit). */
int row_limit(const row_geometry &g, long long r);

} // namespace kiln_emu

#endif /* KILN_EMU_SOFTMAX_REFERENCE_H */
