/* norm_entries.h — a declaration of every layer_norm and rms_norm entry
 * point, generated from kernels/norm/layer_norm.def and rms_norm.def with
 * the signatures of docs/kernels/norm.md.
 *
 * CMake force-includes this header into each kernels/norm/<unit>.cu it
 * compiles for the emulator, ahead of the unit's own code: two extern "C"
 * declarations of one function must agree, so a kernel whose signature
 * drifts from what the fake calls fails to compile. tests/fakecuda/
 * fake_norm.cpp includes it for the same declarations. */
#ifndef KILN_EMU_NORM_ENTRIES_H
#define KILN_EMU_NORM_ENTRIES_H

#include "host_prelude.h" /* first: CUDA built-ins and PTX for the kernel headers */

#include "common/kiln_types.cuh" /* kiln_f16, kiln_bf16 */
#include "norm/layer_norm.def"   /* KILN_LAYER_NORM_ENTRIES */
#include "norm/rms_norm.def"     /* KILN_RMS_NORM_ENTRIES */

#define KILN_EMU_NORM_CT_f32 float
#define KILN_EMU_NORM_CT_f16 kiln_f16
#define KILN_EMU_NORM_CT_bf16 kiln_bf16
#define KILN_EMU_NORM_W_wf32_r float
#define KILN_EMU_NORM_W_wf16_r kiln_f16
#define KILN_EMU_NORM_W_wbf16_r kiln_bf16
#define KILN_EMU_NORM_W_wf32_g float
#define KILN_EMU_NORM_W_wf16_g kiln_f16
#define KILN_EMU_NORM_W_wbf16_g kiln_bf16

/* fwd (y, mean, rstd, x, gamma, beta, rows, cols, eps);
 * bwd (dx, ws_g, ws_b, dy, x, mean, rstd, gamma, rows, cols, parts);
 * bwdw (dgamma, dbeta, ws_g, ws_b, parts, cols), dtype = the weights'.
 * rms_norm takes the same arguments and ignores mean, beta, ws_b, dbeta. */
#define KILN_EMU_NORM_DECL_fwd(unit, dt, v)                                                        \
  extern "C" void kiln_##unit##_fwd_##dt##_##v(                                                    \
      KILN_EMU_NORM_CT_##dt *y, float *mean, float *rstd, const KILN_EMU_NORM_CT_##dt *x,          \
      const KILN_EMU_NORM_W_##v *gamma, const KILN_EMU_NORM_W_##v *beta, long long rows, int cols, \
      float eps);
#define KILN_EMU_NORM_DECL_bwd(unit, dt, v)                                                        \
  extern "C" void kiln_##unit##_bwd_##dt##_##v(                                                    \
      KILN_EMU_NORM_CT_##dt *dx, float *ws_g, float *ws_b, const KILN_EMU_NORM_CT_##dt *dy,        \
      const KILN_EMU_NORM_CT_##dt *x, const float *mean, const float *rstd,                        \
      const KILN_EMU_NORM_W_##v *gamma, long long rows, int cols, int parts);
#define KILN_EMU_NORM_DECL_bwdw(unit, dt, v)                                                       \
  extern "C" void kiln_##unit##_bwdw_##dt##_##v(KILN_EMU_NORM_CT_##dt *dgamma,                     \
                                                KILN_EMU_NORM_CT_##dt *dbeta, const float *ws_g,   \
                                                const float *ws_b, int parts, int cols);
#define KILN_EMU_NORM_DECL_(unit, dir, dt, v) KILN_EMU_NORM_DECL_##dir(unit, dt, v)
KILN_LAYER_NORM_ENTRIES(KILN_EMU_NORM_DECL_)
KILN_RMS_NORM_ENTRIES(KILN_EMU_NORM_DECL_)

#endif
