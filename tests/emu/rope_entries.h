/* rope_entries.h — a declaration of every rope entry point, generated from
 * kernels/rope/rope.def with the signature of docs/kernels/rope.md.
 *
 * CMake force-includes this header into kernels/rope/rope.cu when it compiles
 * it for the emulator, ahead of the unit's own code: two extern "C"
 * declarations of one function must agree, so a kernel whose signature
 * drifts from what the fake calls fails to compile. fake_rope.cpp includes
 * it for the same declarations. */
#ifndef KILN_EMU_ROPE_ENTRIES_H
#define KILN_EMU_ROPE_ENTRIES_H

#include "host_prelude.h" /* first: CUDA built-ins and PTX for the kernel headers */

#include "common/kiln_types.cuh" /* kiln_f16, kiln_bf16 */
#include "rope/rope.def"         /* KILN_ROPE_ENTRIES */

typedef float kiln_emu_rope_f32;
typedef kiln_f16 kiln_emu_rope_f16;
typedef kiln_bf16 kiln_emu_rope_bf16;

/* X(unit, dir, dt, v) rows of rope.def; y may be x (in place). */
#define KILN_EMU_ROPE_DECL_(unit, dir, dt, v)                                                      \
  extern "C" void kiln_##unit##_##dir##_##dt##_##v(                                                \
      kiln_emu_rope_##dt *y, const kiln_emu_rope_##dt *x, const float *angles, int s, int b,       \
      int h, int d, int rot_dim, int layout, int bchunk);
KILN_ROPE_ENTRIES(KILN_EMU_ROPE_DECL_)
#undef KILN_EMU_ROPE_DECL_

#endif /* KILN_EMU_ROPE_ENTRIES_H */
