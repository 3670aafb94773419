/* activation_entries.h — a declaration of every activation entry point,
 * generated from kernels/activation/bias_gelu.def and bias_swiglu.def with the
 * signatures of docs/kernels/activation.md.
 *
 * CMake force-includes this header into each kernels/activation/<unit>.cu it
 * compiles for the emulator, ahead of the unit's own code: two extern "C"
 * declarations of one function must agree, so a kernel whose signature
 * drifts from what the fake calls fails to compile instead of being called
 * wrongly. tests/fakecuda/fake_activation.cpp includes it for the same
 * declarations. */
#ifndef KILN_EMU_ACTIVATION_ENTRIES_H
#define KILN_EMU_ACTIVATION_ENTRIES_H

#include "host_prelude.h" /* first: CUDA built-ins and PTX for the kernel headers */

#include "activation/bias_gelu.def"   /* KILN_BIAS_GELU_ENTRIES */
#include "activation/bias_swiglu.def" /* KILN_BIAS_SWIGLU_ENTRIES */
#include "common/kiln_types.cuh"      /* kiln_f16, kiln_bf16 */

#define KILN_EMU_ACT_CTYPE_f32 float
#define KILN_EMU_ACT_CTYPE_f16 kiln_f16
#define KILN_EMU_ACT_CTYPE_bf16 kiln_bf16
#define KILN_EMU_ACT_CTYPE(dt) KILN_EMU_ACT_CTYPE_##dt

/* Both units share one signature per direction:
 *   fwd (y, x, bias, rows, cols), bwd (dx, dy, x, bias, rows, cols). */
#define KILN_EMU_ACT_DECL_fwd(unit, dt, v)                                                         \
  extern "C" void kiln_##unit##_fwd_##dt##_##v(                                                    \
      KILN_EMU_ACT_CTYPE(dt) * y, const KILN_EMU_ACT_CTYPE(dt) * x,                                \
      const KILN_EMU_ACT_CTYPE(dt) * bias, long long rows, int cols);
#define KILN_EMU_ACT_DECL_bwd(unit, dt, v)                                                         \
  extern "C" void kiln_##unit##_bwd_##dt##_##v(                                                    \
      KILN_EMU_ACT_CTYPE(dt) * dx, const KILN_EMU_ACT_CTYPE(dt) * dy,                              \
      const KILN_EMU_ACT_CTYPE(dt) * x, const KILN_EMU_ACT_CTYPE(dt) * bias, long long rows,       \
      int cols);
#define KILN_EMU_ACT_DECL_(unit, dir, dt, v) KILN_EMU_ACT_DECL_##dir(unit, dt, v)
KILN_BIAS_GELU_ENTRIES(KILN_EMU_ACT_DECL_)
KILN_BIAS_SWIGLU_ENTRIES(KILN_EMU_ACT_DECL_)

#endif /* KILN_EMU_ACTIVATION_ENTRIES_H */
