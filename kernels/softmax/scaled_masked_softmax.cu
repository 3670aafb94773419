/* scaled_masked_softmax.cu — unit: y = softmax(scale * x) over the last
 * dimension of x[b, heads, sq, sk] with a uint8 mask[mask_batches, 1, sq, sk]
 * (byte != 0: masked; broadcast over heads, and over b when mask_batches is
 * 1), and its backward dx = scale * y * (dy - sum(dy * y)), which needs no
 * mask (masked positions have y == 0).
 *
 * Entry points: kiln_scaled_masked_softmax_{fwd,bwd}_<dt>_<v> for every dtype
 * and variant of softmax_variants.def; signatures and semantics in
 * docs/kernels.md. The backward ignores sq.
 */
#include "common/kiln_types.cuh"
#include "softmax/softmax_core.cuh"
#include "softmax/softmax_variants.def"

#define KILN_SOFTMAX_THIS_UNIT scaled_masked_softmax
#define KILN_SOFTMAX_THIS_KIND KILN_SOFTMAX_MASKED

KILN_SOFTMAX_DEFINE_ENTRY_POINTS()
