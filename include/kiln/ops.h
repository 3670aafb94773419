/* kiln — typed launchers for the fused ops.
 *
 * Each launcher takes device pointers, shapes, the dtype and a CUstream,
 * checks every argument (a clear KILN_EINVAL before any launch, never a
 * device-side assert), resolves the unit through the loader if needed,
 * picks the specialisation and launch configuration, and launches
 * asynchronously on the stream. Tensors are contiguous and row-major, and all
 * share the dtype; semantics in docs/kernels.md. A NULL stream is the
 * legacy default stream. Launches run in the loader's context (pushed for the
 * call when another one is current). */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include <stdint.h>

#include "kiln/api.h"
#include "kiln/loader.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_dtype { KILN_F32 = 0, KILN_F16 = 1, KILN_BF16 = 2 } kiln_dtype;

/* "f32", "f16", "bf16", or "?" */
KILN_API const char *kiln_dtype_str(kiln_dtype dt);

/* softmax(scale * x) over the last dimension of x[rows, cols]; y may be x. */
KILN_API kiln_status kiln_scaled_softmax_fwd(kiln_loader *l, kiln_dtype dt, void *y,
                                             const void *x, long long rows, int cols,
                                             float scale, struct CUstream_st *stream);
/* dx = scale * y * (dy - sum(dy * y)); dx may be dy or y. */
KILN_API kiln_status kiln_scaled_softmax_bwd(kiln_loader *l, kiln_dtype dt, void *dx,
                                             const void *y, const void *dy, long long rows,
                                             int cols, float scale, struct CUstream_st *stream);

/* x, y: [b, heads, sq, sk]; mask: uint8 [mask_batches, 1, sq, sk], nonzero =
 * masked, mask_batches 1 (broadcast over the batch) or b. */
KILN_API kiln_status kiln_scaled_masked_softmax_fwd(kiln_loader *l, kiln_dtype dt, void *y,
                                                    const void *x, const uint8_t *mask, int b,
                                                    int heads, int sq, int sk, int mask_batches,
                                                    float scale, struct CUstream_st *stream);
KILN_API kiln_status kiln_scaled_masked_softmax_bwd(kiln_loader *l, kiln_dtype dt, void *dx,
                                                    const void *y, const void *dy, int b,
                                                    int heads, int sq, int sk, float scale,
                                                    struct CUstream_st *stream);

/* Causal: x, y: [attn_batches, sq, sk]; query i sees keys 0..i. */
KILN_API kiln_status kiln_scaled_upper_triang_masked_softmax_fwd(
    kiln_loader *l, kiln_dtype dt, void *y, const void *x, long long attn_batches, int sq,
    int sk, float scale, struct CUstream_st *stream);
KILN_API kiln_status kiln_scaled_upper_triang_masked_softmax_bwd(
    kiln_loader *l, kiln_dtype dt, void *dx, const void *y, const void *dy,
    long long attn_batches, int sq, int sk, float scale, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
