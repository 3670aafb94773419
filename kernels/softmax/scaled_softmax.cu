/* scaled_softmax.cu — unit: y = softmax(scale * x) over the last dimension,
 * no mask, and its backward dx = scale * y * (dy - sum(dy * y)).
 *
 * Entry points: kiln_scaled_softmax_{fwd,bwd}_<dt>_<v> for every dtype and
 * variant of softmax_variants.def; signatures and semantics in
 * docs/kernels.md. The forward ignores mask, sq, heads and mask_batches; the
 * backward ignores sq.
 */
#include "common/kiln_types.cuh"
#include "softmax/softmax_core.cuh"
#include "softmax/softmax_variants.def"

#define KILN_SOFTMAX_THIS_UNIT scaled_softmax
#define KILN_SOFTMAX_THIS_KIND KILN_SOFTMAX_PLAIN

KILN_SOFTMAX_DEFINE_ENTRY_POINTS()
