/* rms_norm.cu — unit: y = x * rsqrt(mean(x^2) + eps) * gamma over the last
 * dimension, its backward dx, and the deterministic reduction of dgamma.
 *
 * Entry points: every row of rms_norm.def, kiln_rms_norm_<dir>_<dt>_<v>;
 * signatures (shared with layer_norm: the arguments RMSNorm has no use for,
 * mean, beta, ws_b and dbeta, are ignored) and semantics in
 * docs/kernels/norm.md, templates in norm_core.cuh. */
#include "common/kiln_types.cuh"
#include "norm/norm_core.cuh"
#include "norm/rms_norm.def"

#define KILN_NORM_THIS_LN 0

KILN_RMS_NORM_ENTRIES(KILN_NORM_ENTRY)
