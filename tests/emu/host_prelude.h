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
#include <stdint.h> /* uint32_t */
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

namespace kiln_emu {
/* A warp collective: every lane of the calling warp hands in 32 bits, all 32
 * must arrive (full mask only: kiln's kernels use whole warps), then each
 * reads the returned array (lane order) before its next collective. */
const uint32_t *warp_exchange(unsigned mask, uint32_t bits, const char *what);

template <class T> inline uint32_t to_bits(T v) {
  static_assert(sizeof(T) == 4, "32-bit shuffles only: split wider values");
  uint32_t b;
  memcpy(&b, &v, 4);
  return b;
}
template <class T> inline T from_bits(uint32_t b) {
  T v;
  memcpy(&v, &b, 4);
  return v;
}
inline int lane_id() {
  return (int)(g_thread_idx.x & 31u);
}
} // namespace kiln_emu

float __shfl_xor_sync(unsigned mask, float var, int lane_mask);
template <class T> inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask) {
  const uint32_t *all = kiln_emu::warp_exchange(mask, kiln_emu::to_bits(var), "__shfl_xor_sync");
  return kiln_emu::from_bits<T>(all[(kiln_emu::lane_id() ^ lane_mask) & 31]);
}
/* width 32 only */
template <class T> inline T __shfl_sync(unsigned mask, T var, int src_lane) {
  const uint32_t *all = kiln_emu::warp_exchange(mask, kiln_emu::to_bits(var), "__shfl_sync");
  return kiln_emu::from_bits<T>(all[src_lane & 31]);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T var, unsigned delta) {
  const uint32_t *all = kiln_emu::warp_exchange(mask, kiln_emu::to_bits(var), "__shfl_down_sync");
  const unsigned src = (unsigned)kiln_emu::lane_id() + delta;
  return kiln_emu::from_bits<T>(all[src < 32 ? src : (unsigned)kiln_emu::lane_id()]);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T var, unsigned delta) {
  const uint32_t *all = kiln_emu::warp_exchange(mask, kiln_emu::to_bits(var), "__shfl_up_sync");
  const int src = kiln_emu::lane_id() - (int)delta;
  return kiln_emu::from_bits<T>(all[src >= 0 ? src : kiln_emu::lane_id()]);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  const uint32_t *all = kiln_emu::warp_exchange(mask, pred != 0, "__ballot_sync");
  unsigned b = 0;
  for (int i = 0; i < 32; ++i)
    b |= (all[i] ? 1u : 0u) << i;
  return b;
}
inline int __any_sync(unsigned mask, int pred) {
  return __ballot_sync(mask, pred) != 0;
}
inline int __all_sync(unsigned mask, int pred) {
  return __ballot_sync(mask, pred) == 0xffffffffu;
}

/* One-line shims below: a table to read across, kept as written. */
// clang-format off
/* ---- atomics: fibers switch only at barriers and collectives, so a plain
 * read-modify-write is atomic here. Return the old value, as CUDA's do. */
template <class T> inline T __kiln_emu_rmw(T *p, T v, int op) {
  const T old = *p;
  switch (op) {
  case 0: *p = old + v; break;
  case 1: *p = v < old ? v : old; break;
  case 2: *p = v > old ? v : old; break;
  case 3: *p = v; break;
  case 4: *p = old - v; break;
  }
  return old;
}
inline float atomicAdd(float *p, float v) { return __kiln_emu_rmw(p, v, 0); }
inline double atomicAdd(double *p, double v) { return __kiln_emu_rmw(p, v, 0); }
inline int atomicAdd(int *p, int v) { return __kiln_emu_rmw(p, v, 0); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __kiln_emu_rmw(p, v, 0); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  return __kiln_emu_rmw(p, v, 0);
}
inline int atomicSub(int *p, int v) { return __kiln_emu_rmw(p, v, 4); }
inline unsigned atomicSub(unsigned *p, unsigned v) { return __kiln_emu_rmw(p, v, 4); }
inline int atomicMin(int *p, int v) { return __kiln_emu_rmw(p, v, 1); }
inline unsigned atomicMin(unsigned *p, unsigned v) { return __kiln_emu_rmw(p, v, 1); }
inline long long atomicMin(long long *p, long long v) { return __kiln_emu_rmw(p, v, 1); }
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
  return __kiln_emu_rmw(p, v, 1);
}
inline int atomicMax(int *p, int v) { return __kiln_emu_rmw(p, v, 2); }
inline unsigned atomicMax(unsigned *p, unsigned v) { return __kiln_emu_rmw(p, v, 2); }
inline long long atomicMax(long long *p, long long v) { return __kiln_emu_rmw(p, v, 2); }
inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v) {
  return __kiln_emu_rmw(p, v, 2);
}
inline int atomicExch(int *p, int v) { return __kiln_emu_rmw(p, v, 3); }
inline unsigned atomicExch(unsigned *p, unsigned v) { return __kiln_emu_rmw(p, v, 3); }
inline float atomicExch(float *p, float v) { return __kiln_emu_rmw(p, v, 3); }
inline unsigned long long atomicExch(unsigned long long *p, unsigned long long v) {
  return __kiln_emu_rmw(p, v, 3);
}
template <class T> inline T atomicCAS(T *p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}
inline unsigned atomicOr(unsigned *p, unsigned v) {
  const unsigned old = *p;
  *p = old | v;
  return old;
}
/* Writes are visible at once, in program order (runtime.h): fences are no-ops. */
inline void __threadfence() {}
inline void __threadfence_block() {}

/* ---- integer and bit intrinsics ---- */
inline unsigned __umulhi(unsigned a, unsigned b) {
  return (unsigned)(((unsigned long long)a * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i)
    r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
template <class T> inline T __ldg(const T *p) { return *p; }

/* ---- bit casts ---- */
inline float __uint_as_float(unsigned u) { return kiln_emu::from_bits<float>(u); }
inline float __int_as_float(int i) { return kiln_emu::from_bits<float>((uint32_t)i); }
inline unsigned __float_as_uint(float f) { return kiln_emu::to_bits(f); }
inline int __float_as_int(float f) { return (int)kiln_emu::to_bits(f); }

/* ---- fast math (host: the precise functions; the device's error bounds are
 * not modelled, as for ex2.approx) ---- */
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline void __sincosf(float x, float *s, float *c) { *s = sinf(x), *c = cosf(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : x > 1.f ? 1.f : x; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
/* Rounded once each and never contracted into an fma, as on the device:
 * out of line, since contraction (-ffp-contract=fast) works within a function. */
[[gnu::noinline]] inline float __fmul_rn(float a, float b) { return a * b; }
[[gnu::noinline]] inline float __fadd_rn(float a, float b) { return a + b; }
// clang-format on

#endif /* KILN_EMU_HOST_PRELUDE_H */
