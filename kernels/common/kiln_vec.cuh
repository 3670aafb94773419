/* kiln_vec.cuh — 16-byte vector access for memory-bound kernels: one load
 * or store instruction (ld.global.v4.u32) moves 4 floats or 8 halves, the
 * widest access a thread can issue, converted to or from fp32 registers.
 *
 * The caller guarantees 16-byte alignment (kiln_aligned16) and that all
 * KILN_VEC<T> elements exist; kernels keep a scalar path for the rest.
 * Hermetic like every kernel header (kiln_types.cuh). */
#ifndef KILN_VEC_CUH
#define KILN_VEC_CUH

#include "common/kiln_types.cuh"

/* Elements of T in 16 bytes: 4 for float, 8 for kiln_f16 / kiln_bf16. */
template <typename T> struct kiln_vec_width { static const int value = 16 / (int)sizeof(T); };
#define KILN_VEC(T) (kiln_vec_width<T>::value)

struct alignas(16) kiln_v16 {
  unsigned w[4];
};

__device__ __forceinline__ bool kiln_aligned16(const void *p) {
  return ((unsigned long long)p & 15ull) == 0;
}

/* Two 16-bit values packed in a word, low half first (little endian). */
__device__ __forceinline__ float kiln_lo_f32(unsigned w, const kiln_f16 *) {
  kiln_f16 h;
  h.bits = (unsigned short)(w & 0xffffu);
  return kiln_f16_to_f32(h);
}
__device__ __forceinline__ float kiln_hi_f32(unsigned w, const kiln_f16 *) {
  kiln_f16 h;
  h.bits = (unsigned short)(w >> 16);
  return kiln_f16_to_f32(h);
}
__device__ __forceinline__ float kiln_lo_f32(unsigned w, const kiln_bf16 *) {
  return __uint_as_float(w << 16);
}
__device__ __forceinline__ float kiln_hi_f32(unsigned w, const kiln_bf16 *) {
  return __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ unsigned kiln_pack2(float lo, float hi, const kiln_f16 *) {
  return (unsigned)kiln_f32_to_f16(lo).bits | ((unsigned)kiln_f32_to_f16(hi).bits << 16);
}
__device__ __forceinline__ unsigned kiln_pack2(float lo, float hi, const kiln_bf16 *) {
  return (unsigned)kiln_f32_to_bf16(lo).bits | ((unsigned)kiln_f32_to_bf16(hi).bits << 16);
}

/* v[0..KILN_VEC(T)) = p[0..KILN_VEC(T)) as fp32; p 16-byte aligned. */
__device__ __forceinline__ void kiln_load_vec(const float *p, float *v) {
  const kiln_v16 r = *reinterpret_cast<const kiln_v16 *>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i)
    v[i] = __uint_as_float(r.w[i]);
}
template <typename T> __device__ __forceinline__ void kiln_load_vec(const T *p, float *v) {
  const kiln_v16 r = *reinterpret_cast<const kiln_v16 *>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = kiln_lo_f32(r.w[i], p);
    v[2 * i + 1] = kiln_hi_f32(r.w[i], p);
  }
}

/* p[0..KILN_VEC(T)) = v, rounded to T; p 16-byte aligned. */
__device__ __forceinline__ void kiln_store_vec(float *p, const float *v) {
  kiln_v16 r;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    r.w[i] = __float_as_uint(v[i]);
  *reinterpret_cast<kiln_v16 *>(p) = r;
}
template <typename T> __device__ __forceinline__ void kiln_store_vec(T *p, const float *v) {
  kiln_v16 r;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    r.w[i] = kiln_pack2(v[2 * i], v[2 * i + 1], p);
  *reinterpret_cast<kiln_v16 *>(p) = r;
}

#endif /* KILN_VEC_CUH */
