/* softmax_inputs.h — one test case of the softmax units and the inputs it
 * gets: random rows with masks, special values and poisoned never-read
 * regions, each chosen to exercise one clause of docs/kernels.md. */
#ifndef KILN_EMU_SOFTMAX_INPUTS_H
#define KILN_EMU_SOFTMAX_INPUTS_H

#include <stdint.h> /* uint64_t */

#include <random> /* std::mt19937_64 */
#include <vector> /* std::vector */

#include "device_buffer.h"     /* buffer */
#include "softmax_reference.h" /* row_geometry, expected */

namespace kiln_emu {

struct test_case {
  int entry;
  int b, heads, sq, cols, mask_batches;
  float scale;
  unsigned grid;
  bool inplace_fwd; /* y == x */
  int inplace_bwd;  /* 0: dx separate, 1: dx == dy, 2: dx == y */
  bool special;     /* NaN, inf, -inf rows, huge and tiny values */
  bool random_y;    /* backward y uniform in [0, 1) rather than a softmax */
  int shift = 0;    /* x, y, dy, dx start this many elements past a 16-byte boundary */
  uint64_t seed;
};

/* Forward inputs: x normal(0, 3); the masked unit's mask (30% masked with
 * any nonzero byte; query 1 fully masked, query 2 all but one), NaN in x
 * under half the masked bytes; the causal upper triangle NaN. Special rows
 * (row % 9): 1 NaN, 2 +inf, 3 -inf in every other column, 4 all -inf, 5 one
 * huge value, 6 all equal, 7 subnormal-sized values, 8 scale * x far below 0
 * (only subtracting the row's own max keeps it finite). */
void fill_forward_inputs(buffer *x, buffer *mask, const test_case &c, const row_geometry &g,
                         std::mt19937_64 &rng);

/* Backward inputs: y the forward's reference (or uniform if c.random_y), dy
 * normal(0, 3); special rows 1 and 2 get a NaN or +inf in dy; the causal upper
 * triangle NaN in both (never read). */
void fill_backward_inputs(buffer *y, buffer *dy, const std::vector<expected> &fwd,
                          const test_case &c, const row_geometry &g, std::mt19937_64 &rng);

} // namespace kiln_emu

#endif /* KILN_EMU_SOFTMAX_INPUTS_H */
