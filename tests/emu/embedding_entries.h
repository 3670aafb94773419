/* embedding_entries.h — a declaration of every embedding entry point of
 * kernels/embedding/embedding.def, with the signatures of
 * docs/kernels/embedding.md.
 *
 * CMake force-includes this header into kernels/embedding/embedding.cu when
 * it compiles it for the emulator (tests/fakecuda), ahead of the unit's own
 * code: two extern "C" declarations of one function must agree, so a kernel
 * whose signature drifts from what the fake calls fails to compile. */
#ifndef KILN_EMU_EMBEDDING_ENTRIES_H
#define KILN_EMU_EMBEDDING_ENTRIES_H

#include "host_prelude.h" /* first: CUDA built-ins and PTX for the kernel headers */

#include "common/kiln_errors.cuh"  /* kiln_op_error */
#include "common/kiln_types.cuh"   /* kiln_f16, kiln_bf16, kiln_i64 */
#include "embedding/embedding.def" /* KILN_EMBEDDING_ENTRIES */

#define KILN_EMU_EMBEDDING_DT_(dt, ctype)                                                          \
  extern "C" void kiln_embedding_fwd_##dt##_g(                                                     \
      ctype *y, const kiln_i64 *ids, const ctype *weight, kiln_i64 n_tokens, int hidden,           \
      kiln_i64 vocab_start, kiln_i64 vocab_end, kiln_i64 vocab_size, kiln_op_error *err);          \
  extern "C" void kiln_embedding_bwd_##dt##_atomic(                                                \
      float *dweight, const ctype *dy, const kiln_i64 *ids, kiln_i64 n_tokens, int hidden,         \
      kiln_i64 vocab_start, kiln_i64 vocab_end);                                                   \
  extern "C" void kiln_embedding_bwd_##dt##_sorted(                                                \
      float *dweight, const ctype *dy, const kiln_i64 *keys, const kiln_i64 *pos,                  \
      const float *slots, kiln_i64 n_tokens, int hidden, kiln_i64 rows, int piece);                \
  extern "C" void kiln_embedding_bwd_##dt##_pieces(                                                \
      float *slots, const ctype *dy, const kiln_i64 *keys, const kiln_i64 *pos, kiln_i64 n_tokens, \
      int hidden, kiln_i64 rows, int piece);
KILN_EMU_EMBEDDING_DT_(f32, float)
KILN_EMU_EMBEDDING_DT_(f16, kiln_f16)
KILN_EMU_EMBEDDING_DT_(bf16, kiln_bf16)
#undef KILN_EMU_EMBEDDING_DT_

extern "C" void kiln_embedding_err_i64_g(kiln_op_error *err, const kiln_i64 *ids, kiln_i64 n_tokens,
                                         kiln_i64 vocab_size);
extern "C" void kiln_embedding_keys_i64_g(kiln_i64 *keys, kiln_i64 *pos, const kiln_i64 *ids,
                                          kiln_i64 n_tokens, kiln_i64 vocab_start,
                                          kiln_i64 vocab_end);
extern "C" void kiln_embedding_hist_i64_g(kiln_i64 *hist, const kiln_i64 *keys, kiln_i64 n_tokens,
                                          int shift);
extern "C" void kiln_embedding_scan_i64_g(kiln_i64 *hist, kiln_i64 count);
extern "C" void kiln_embedding_scatter_i64_g(kiln_i64 *keys_out, kiln_i64 *pos_out,
                                             const kiln_i64 *keys_in, const kiln_i64 *pos_in,
                                             const kiln_i64 *hist, kiln_i64 n_tokens, int shift);

#endif
