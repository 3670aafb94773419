/* softmax_entries.h — a declaration of every softmax entry point, generated
 * from kernels/softmax/softmax_variants.def with the signatures of
 * docs/kernels.md.
 *
 * CMake force-includes this header into each kernels/softmax/<unit>.cu it compiles
 * for the emulator, ahead of the unit's own code: two extern "C" declarations
 * of one function must agree, so a kernel whose signature drifts from what
 * the test calls fails to compile instead of being called wrongly. The test
 * includes it for the same declarations.
 */
#ifndef KILN_EMU_SOFTMAX_ENTRIES_H
#define KILN_EMU_SOFTMAX_ENTRIES_H

#include "host_prelude.h" /* first: CUDA built-ins and PTX for the kernel headers */

#include "common/kiln_types.cuh"        /* kiln_f16, kiln_bf16 */
#include "softmax/softmax_variants.def" /* KILN_SOFTMAX_UNITS, _DTYPES, _VARIANTS */

/* KILN_EMU_SOFTMAX_FOR_EACH(X): X(unit, dt, ctype, v) for every entry pair, in
 * .def order (unit, then dtype, then variant). The list macros pass one
 * argument through to the inner level, so X and the outer rows' columns travel
 * as one parenthesised tuple, unpacked by KILN_EMU_UNPACK_. */
#define KILN_EMU_UNPACK_(...) __VA_ARGS__
#define KILN_EMU_APPLY_(m, args) m args
#define KILN_EMU_CALL_(X, ...) X(__VA_ARGS__)
#define KILN_EMU_SOFTMAX_V_(a, v, kind, elems, threads)                                            \
  KILN_EMU_APPLY_(KILN_EMU_CALL_, (KILN_EMU_UNPACK_ a, v))
#define KILN_EMU_SOFTMAX_DT_(a, dt, ctype)                                                         \
  KILN_SOFTMAX_VARIANTS(KILN_EMU_SOFTMAX_V_, (KILN_EMU_UNPACK_ a, dt, ctype))
#define KILN_EMU_SOFTMAX_U_(X, unit) KILN_SOFTMAX_DTYPES(KILN_EMU_SOFTMAX_DT_, (X, unit))
#define KILN_EMU_SOFTMAX_FOR_EACH(X) KILN_SOFTMAX_UNITS(KILN_EMU_SOFTMAX_U_, X)

#define KILN_EMU_SOFTMAX_DECL_(unit, dt, ctype, v)                                                 \
  extern "C" void kiln_##unit##_fwd_##dt##_##v(                                                    \
      ctype *y, const ctype *x, const unsigned char *mask, float scale, long long rows, int cols,  \
      int sq, int heads, int mask_batches);                                                        \
  extern "C" void kiln_##unit##_bwd_##dt##_##v(ctype *dx, const ctype *y, const ctype *dy,         \
                                               float scale, long long rows, int cols, int sq);
KILN_EMU_SOFTMAX_FOR_EACH(KILN_EMU_SOFTMAX_DECL_)

#endif /* KILN_EMU_SOFTMAX_ENTRIES_H */
