/* cross_entropy_entries.h — a declaration of every entry point of
 * kernels/cross_entropy/cross_entropy.def, with the signatures of
 * docs/kernels/cross_entropy.md.
 *
 * CMake force-includes this header into kernels/cross_entropy/cross_entropy.cu when it
 * compiles them for the emulator (tests/fakecuda), ahead of the unit's own
 * code: two extern "C" declarations of one function must agree, so a kernel
 * whose signature drifts from what the fake calls fails to compile. */
#ifndef KILN_EMU_CROSS_ENTROPY_ENTRIES_H
#define KILN_EMU_CROSS_ENTROPY_ENTRIES_H

#include "host_prelude.h" /* first: CUDA built-ins and PTX for the kernel headers */

#include "common/kiln_errors.cuh"          /* kiln_op_error */
#include "common/kiln_types.cuh"           /* kiln_f16, kiln_bf16 */
#include "cross_entropy/cross_entropy.def" /* KILN_CROSS_ENTROPY_ENTRIES */

/* X(dt, ctype) for the three logits dtypes. */
#define KILN_EMU_CROSS_ENTROPY_DTYPES(X) X(f32, float) X(f16, kiln_f16) X(bf16, kiln_bf16)

#define KILN_EMU_CROSS_ENTROPY_DECL_(dt, T)                                                        \
  extern "C" void kiln_cross_entropy_fwd_##dt##_g(                                                 \
      float *loss, float *lse, const T *logits, const long long *target, long long rows,           \
      int vocab_size, long long ignore_index, kiln_op_error *err);                                 \
  extern "C" void kiln_cross_entropy_stats_##dt##_g(                                               \
      float *row_max, float *sumexp, float *tgt, const T *logits, const long long *target,         \
      long long rows, int vocab_part, long long vocab_start, long long vocab_size,                 \
      long long ignore_index, kiln_op_error *err);                                                 \
  extern "C" void kiln_cross_entropy_bwd_##dt##_g(                                                 \
      T *logits, const float *lse, const float *dloss, const long long *target, long long rows,    \
      int vocab_part, long long vocab_start, long long ignore_index);
KILN_EMU_CROSS_ENTROPY_DTYPES(KILN_EMU_CROSS_ENTROPY_DECL_)
#undef KILN_EMU_CROSS_ENTROPY_DECL_

extern "C" void kiln_cross_entropy_rescale_f32_g(float *sumexp, const float *row_max,
                                                 const float *gmax, long long rows);
extern "C" void kiln_cross_entropy_loss_f32_g(float *loss, float *lse, const float *gmax,
                                              const float *sumexp, const float *tgt,
                                              const long long *target, long long rows,
                                              long long ignore_index);
extern "C" void kiln_cross_entropy_err_i64_g(kiln_op_error *err, const long long *target,
                                             long long rows, long long vocab_size);

#endif /* KILN_EMU_CROSS_ENTROPY_ENTRIES_H */
