/* host_prelude.h — what a hermetic kiln kernel source needs from CUDA, for the
 * host: lets kernels/softmax/<unit>.cu compile as C++ and run on the fiber runtime
 * (runtime.h) unchanged, byte for byte.
 *
 * Kernel sources use only what NVRTC knows natively plus inline PTX
 * (kernels/common/kiln_types.cuh). This header supplies the first as
 * ordinary C++ (qualifiers as macros, built-in variables as objects,
 * __syncthreads and __shfl_xor_sync as calls into the runtime) and the second
 * by defining `asm` as a macro that recognises each PTX statement of
 * kiln_types.cuh by its text and runs a host version of it (see "Inline PTX"
 * below). Nothing is rewritten, so the test compiles exactly the bytes kiln
 * ships.
 *
 * Include it after any standard header and before the kernel headers (CMake
 * force-includes it, through softmax_entries.h, ahead of each kernel source):
 * `asm` stays defined to the end of the translation unit.
 */
#ifndef KILN_EMU_HOST_PRELUDE_H
#define KILN_EMU_HOST_PRELUDE_H

#include <math.h>   /* fmaxf: NVRTC has it built in */
#include <string.h> /* memcpy */

#include "ptx_host.h" /* what the PTX statements do, on the host */

/* ---- qualifiers ------------------------------------------------------------
 * __shared__ variables become function statics: the runtime runs one block at
 * a time, so all threads of the running block see the same array, as on the
 * device. They start zeroed and keep the last block's values (the device's
 * are undefined): GCC ignores a section attribute on a template's static, so
 * the runtime cannot find them to poison them. */
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

namespace kiln_emu {

struct dim3 {
  unsigned x, y, z;
};

/* Set by the runtime before it switches to a thread. */
extern dim3 g_thread_idx, g_block_idx, g_block_dim, g_grid_dim;

/* ---- Inline PTX --------------------------------------------------------------
 * `asm("..." : "=f"(y) : "f"(x))` cannot be split by the preprocessor (the
 * operand lists are separated by colons, not commas), so the macro below
 * stringifies the whole statement, looks it up in kPtx at compile time
 * (ignoring white space), and hands the operands to ptx_exec by their names in
 * kiln_types.cuh: f, h, x, y. A name the enclosing function does not declare
 * finds the placeholder in ptx_operand_fallbacks, which block-scope lookup
 * reaches only after the function's own names. Any PTX not in the table is a
 * compile error here, so a new or changed statement in kiln_types.cuh cannot
 * go untested: add it to kPtx and ptx_exec. */
namespace ptx_operand_fallbacks {
struct absent {};
inline absent f, h, x, y;
} // namespace ptx_operand_fallbacks

enum { kPtxCvtF32F16, kPtxCvtRnF16F32, kPtxCvtRnBf16F32, kPtxEx2ApproxFtz, kPtxCount };
constexpr const char *kPtx[kPtxCount] = {
    "\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h.bits)",
    "\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h.bits) : \"f\"(f)",
    "\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h.bits) : \"f\"(f)",
    "\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x)",
};

constexpr bool ptx_same(const char *a, const char *b) {
  for (;;) {
    while (*a == ' ' || *a == '\t' || *a == '\n')
      ++a;
    while (*b == ' ' || *b == '\t' || *b == '\n')
      ++b;
    if (*a != *b) return false;
    if (!*a) return true;
    ++a, ++b;
  }
}

constexpr int ptx_lookup(const char *text) {
  for (int i = 0; i < kPtxCount; ++i)
    if (ptx_same(text, kPtx[i])) return i;
  return -1;
}

template <int kOp, class F, class H, class X, class Y>
inline void ptx_exec(F &f, H &h, X &x, Y &y) {
  (void)f, (void)h, (void)x, (void)y;
  if constexpr (kOp == kPtxCvtF32F16)
    f = f16_bits_to_f32(h.bits);
  else if constexpr (kOp == kPtxCvtRnF16F32)
    h.bits = f32_to_f16_bits(f);
  else if constexpr (kOp == kPtxCvtRnBf16F32)
    h.bits = f32_to_bf16_bits(f);
  else if constexpr (kOp == kPtxEx2ApproxFtz)
    y = ex2_approx_ftz(x);
}

} // namespace kiln_emu

#define asm(...)                                                                                   \
  do {                                                                                             \
    using namespace kiln_emu::ptx_operand_fallbacks;                                               \
    constexpr int kiln_emu_ptx_op_ = kiln_emu::ptx_lookup(#__VA_ARGS__);                           \
    static_assert(kiln_emu_ptx_op_ >= 0, "inline PTX that tests/emu/host_prelude.h does not "      \
                                         "emulate: add it to kiln_emu::kPtx and ptx_exec");        \
    kiln_emu::ptx_exec<kiln_emu_ptx_op_>(f, h, x, y);                                              \
  } while (0)

/* ---- built-in variables and functions ------------------------------------- */

extern const kiln_emu::dim3 &threadIdx, &blockIdx, &blockDim, &gridDim;

/* Block barrier: every thread of the block must arrive (the runtime reports a
 * deadlock otherwise). */
void __syncthreads();

/* Only the full mask: kiln's kernels shuffle whole warps. */
float __shfl_xor_sync(unsigned mask, float var, int lane_mask);

inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

#endif /* KILN_EMU_HOST_PRELUDE_H */
