/* dropout_entries.h — a declaration of every entry point of
 * kernels/dropout/bias_dropout_add.def, with the signatures of
 * docs/kernels/dropout.md.
 *
 * CMake force-includes this header into kernels/dropout/<unit>.cu when it
 * compiles it for the emulator (tests/fakecuda), ahead of the unit's own
 * code: two extern "C" declarations of one function must agree, so a kernel
 * whose signature drifts from what fake_dropout.cpp calls fails to compile
 * instead of being called wrongly.
 */
#ifndef KILN_EMU_DROPOUT_ENTRIES_H
#define KILN_EMU_DROPOUT_ENTRIES_H

#include "host_prelude.h" /* first: CUDA built-ins and PTX for the kernel headers */

#include "common/kiln_types.cuh"        /* kiln_f16, kiln_bf16 */
#include "dropout/bias_dropout_add.def" /* KILN_BIAS_DROPOUT_ADD_ENTRIES */

#define KILN_EMU_DROPOUT_CTYPE_f32 float
#define KILN_EMU_DROPOUT_CTYPE_f16 kiln_f16
#define KILN_EMU_DROPOUT_CTYPE_bf16 kiln_bf16

#define KILN_EMU_DROPOUT_DECL_fwd(unit, dt, v)                                                     \
  extern "C" void kiln_##unit##_fwd_##dt##_##v(                                                    \
      KILN_EMU_DROPOUT_CTYPE_##dt *y, const KILN_EMU_DROPOUT_CTYPE_##dt *x,                        \
      const KILN_EMU_DROPOUT_CTYPE_##dt *bias, const KILN_EMU_DROPOUT_CTYPE_##dt *residual,        \
      long long n, int cols, unsigned threshold, float scale, unsigned long long seed,             \
      unsigned long long offset);
#define KILN_EMU_DROPOUT_DECL_bwd(unit, dt, v)                                                     \
  extern "C" void kiln_##unit##_bwd_##dt##_##v(                                                    \
      KILN_EMU_DROPOUT_CTYPE_##dt *dx, const KILN_EMU_DROPOUT_CTYPE_##dt *dy, long long n,         \
      unsigned threshold, float scale, unsigned long long seed, unsigned long long offset);
#define KILN_EMU_DROPOUT_DECL_(unit, dir, dt, v) KILN_EMU_DROPOUT_DECL_##dir(unit, dt, v)
KILN_BIAS_DROPOUT_ADD_ENTRIES(KILN_EMU_DROPOUT_DECL_)
#undef KILN_EMU_DROPOUT_DECL_

#endif /* KILN_EMU_DROPOUT_ENTRIES_H */
