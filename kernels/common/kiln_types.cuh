/* kiln_types.cuh — kiln's own scalar types and warp/block primitives for
 * hermetic kernels.
 *
 * Kernels are hermetic (docs/kernels.md, DESIGN.md "Kernels are hermetic"):
 * this header, like every kernel source, includes nothing from the CUDA
 * toolkit. It uses only what NVRTC knows natively (threadIdx, __syncthreads,
 * __shfl_xor_sync, fmaxf, __uint_as_float, ...) and inline PTX, so a JIT
 * build needs nothing but NVRTC and the cache key is kiln's bytes plus the
 * toolchain version. Everything is prefixed kiln_ because nvcc pre-includes
 * cuda_runtime.h and its names must not clash with ours.
 *
 * Include style: kernel files include each other by their path relative to
 * kernels/ ("common/kiln_types.cuh"). NVRTC matches include names verbatim
 * against the header names passed to nvrtcCreateProgram and does not resolve
 * "../x" against the including file's directory; nvcc finds the same names
 * with -I kernels.
 *
 * Minimum target is sm_80 (cvt.rn.bf16.f32 needs it).
 */
#ifndef KILN_TYPES_CUH
#define KILN_TYPES_CUH

typedef long long kiln_i64;
typedef unsigned char kiln_u8; /* mask bytes */

/* 16-bit storage types; all arithmetic happens in fp32. */
struct kiln_f16 {
  unsigned short bits;
};
struct kiln_bf16 {
  unsigned short bits;
};

/* ---- conversions ------------------------------------------------------ */

__device__ __forceinline__ float kiln_f16_to_f32(kiln_f16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}

__device__ __forceinline__ kiln_f16 kiln_f32_to_f16(float f) {
  kiln_f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}

/* bf16 is the top half of an fp32: widening is exact. */
__device__ __forceinline__ float kiln_bf16_to_f32(kiln_bf16 h) {
  return __uint_as_float((unsigned)h.bits << 16);
}

/* Round to nearest even, NaN stays NaN (sm_80+). */
__device__ __forceinline__ kiln_bf16 kiln_f32_to_bf16(float f) {
  kiln_bf16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}

/* ---- load as float / store from float ---------------------------------- */

__device__ __forceinline__ float kiln_load_f32(const float *p) {
  return *p;
}
__device__ __forceinline__ float kiln_load_f32(const kiln_f16 *p) {
  return kiln_f16_to_f32(*p);
}
__device__ __forceinline__ float kiln_load_f32(const kiln_bf16 *p) {
  return kiln_bf16_to_f32(*p);
}

__device__ __forceinline__ void kiln_store_f32(float *p, float v) {
  *p = v;
}
__device__ __forceinline__ void kiln_store_f32(kiln_f16 *p, float v) {
  *p = kiln_f32_to_f16(v);
}
__device__ __forceinline__ void kiln_store_f32(kiln_bf16 *p, float v) {
  *p = kiln_f32_to_bf16(v);
}

/* ---- math ---------------------------------------------------------------- */

#define KILN_LOG2E 1.4426950408889634f

__device__ __forceinline__ float kiln_neg_inf() {
  return __uint_as_float(0xff800000u);
}

/* 2^x, approximate (2 ulp), flushes denormals: 2^-inf = +0, 2^NaN = NaN.
 * Callers pre-multiply by log2(e) to get e^x. */
__device__ __forceinline__ float kiln_exp2f(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* ---- warp reductions (all 32 lanes must take part) ---------------------- */

/* fmaxf ignores a NaN operand; callers that need NaN to propagate carry it
 * in a sum instead (see softmax_core.cuh). */
__device__ __forceinline__ float kiln_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float kiln_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* ---- block reductions ----------------------------------------------------
 * kThreads: the block size, a multiple of 32, at most 1024; every thread of
 * the block must call. buf: 32 floats of shared memory. The result is
 * returned to every thread.
 *
 * One __syncthreads per call, none trailing: a buffer may be written again
 * only after another __syncthreads that every thread reaches after its read
 * of this call's result. Two reductions in a row therefore use two buffers,
 * and a loop that does one reduction per iteration alternates two buffers.
 */
template <int kThreads> __device__ __forceinline__ float kiln_block_max(float v, float *buf) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  const int lane = threadIdx.x & 31;
  v = kiln_warp_max(v);
  if (lane == 0) buf[threadIdx.x >> 5] = v;
  __syncthreads();
  return kiln_warp_max(lane < kThreads / 32 ? buf[lane] : kiln_neg_inf());
}

template <int kThreads> __device__ __forceinline__ float kiln_block_sum(float v, float *buf) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  const int lane = threadIdx.x & 31;
  v = kiln_warp_sum(v);
  if (lane == 0) buf[threadIdx.x >> 5] = v;
  __syncthreads();
  return kiln_warp_sum(lane < kThreads / 32 ? buf[lane] : 0.f);
}

#endif /* KILN_TYPES_CUH */
