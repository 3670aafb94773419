/* scaled_upper_triang_masked_softmax.cu — unit: y = softmax(scale * x) over the last dim, causal: column j of row r takes part iff j <= r % sq,
 * and its backward. Semantics and entry signatures: docs/kernels.md.
 * Entry points: kiln_scaled_upper_triang_masked_softmax_{fwd,bwd}_<dt>_<v> for every dtype and variant
 * in softmax_variants.def.
 */
#include "common/kiln_types.cuh"
#include "softmax/softmax_core.cuh"
#include "softmax/softmax_variants.def"

#define KILN_SOFTMAX_THIS_UNIT scaled_upper_triang_masked_softmax
#define KILN_SOFTMAX_THIS_KIND KILN_SOFTMAX_CAUSAL

KILN_SOFTMAX_DEFINE_ENTRY_POINTS()
