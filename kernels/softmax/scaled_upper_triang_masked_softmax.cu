/* scaled_upper_triang_masked_softmax.cu — unit: causal softmax. x is
 * [attn_batches, sq, sk]; in row r (query i = r % sq) column j takes part iff
 * j <= i (top-left aligned; Megatron's semantics when sq == sk). Backward
 * dx = scale * y * (dy - sum(dy * y)) over j <= i, and dx = 0 for j > i
 * without reading the upper triangle.
 *
 * Entry points: kiln_scaled_upper_triang_masked_softmax_{fwd,bwd}_<dt>_<v>
 * for every dtype and variant of softmax_variants.def; signatures and
 * semantics in docs/kernels.md. The forward ignores mask, heads and
 * mask_batches.
 */
#include "common/kiln_types.cuh"
#include "softmax/softmax_core.cuh"
#include "softmax/softmax_variants.def"

#define KILN_SOFTMAX_THIS_UNIT scaled_upper_triang_masked_softmax
#define KILN_SOFTMAX_THIS_KIND KILN_SOFTMAX_CAUSAL

KILN_SOFTMAX_DEFINE_ENTRY_POINTS()
