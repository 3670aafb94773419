/* layer_norm.cu — unit: y = (x - mean) * rstd * gamma + beta over the last
 * dimension (biased variance), its backward dx, and the deterministic
 * reduction of dgamma, dbeta.
 *
 * Entry points: every row of layer_norm.def, kiln_layer_norm_<dir>_<dt>_<v>;
 * signatures and semantics in docs/kernels/norm.md, templates in
 * norm_core.cuh. */
#include "common/kiln_types.cuh"
#include "norm/layer_norm.def"
#include "norm/norm_core.cuh"

#define KILN_NORM_THIS_LN 1

KILN_LAYER_NORM_ENTRIES(KILN_NORM_ENTRY)
