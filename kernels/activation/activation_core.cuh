/* activation_core.cuh — the shared grid walk of the activation units
 * (bias_gelu.cu, bias_swiglu.cu; docs/kernels/activation.md).
 *
 * A tensor of `rows` rows is cut into units of V consecutive elements of one
 * row: V = KILN_VEC(T) (one 16-byte access) on the vector path, V = 1 on the
 * general path, cu = units per row. The flat unit index i = row * cu + c runs
 * grid-stride over rows * cu; each thread tracks (row, c) itself, so the
 * bias column is c * V without a 64-bit divide per element: one divide per
 * thread at the start (its first unit, and the stride in rows and units),
 * then adds. Any 1-D grid is correct; all offsets are 64-bit.
 *
 * Hermetic like every kernel header (kiln_types.cuh). */
#ifndef KILN_ACTIVATION_CORE_CUH
#define KILN_ACTIVATION_CORE_CUH

#include "common/kiln_types.cuh"
#include "common/kiln_vec.cuh"

/* Threads per block of every activation entry point. */
#define KILN_ACT_THREADS 256

/* GeLU, tanh approximation (Megatron's bias_gelu). */
#define KILN_GELU_K0 0.79788456f /* sqrt(2 / pi) */
#define KILN_GELU_K1 0.044715f
#define KILN_GELU_K2 0.1070322243f /* 3 * K0 * K1 */

/* The unit after (row, c) in this thread's grid-stride order. */
__device__ __forceinline__ void kiln_act_next(kiln_i64 &row, int &c, kiln_i64 srow, int sc,
                                              int cu) {
  c += sc;
  row += srow;
  if (c >= cu) {
    c -= cu;
    ++row;
  }
}

/* Runs f over every unit (row < rows, c < cu) this thread owns, two at a
 * time: f.load(row, c, r) reads a unit's inputs into registers r
 * (F::regs), f.store(row, c, r) computes and writes it. Both units' loads
 * are issued before either store, so a thread keeps two units' bytes in
 * flight (the stores may alias the loads: y may be x). */
template <class F>
__device__ __forceinline__ void kiln_act_walk(kiln_i64 rows, int cu, const F &f) {
  const kiln_i64 first = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x;
  const kiln_i64 stride = (kiln_i64)gridDim.x * blockDim.x;
  kiln_i64 row = first / cu;
  int c = (int)(first - row * cu);
  const kiln_i64 srow = stride / cu;
  const int sc = (int)(stride - srow * cu);
  while (row < rows) {
    kiln_i64 row1 = row;
    int c1 = c;
    kiln_act_next(row1, c1, srow, sc, cu);
    const bool two = row1 < rows;
    typename F::regs r0, r1;
    f.load(row, c, r0);
    if (two) f.load(row1, c1, r1);
    f.store(row, c, r0);
    if (two) f.store(row1, c1, r1);
    row = row1;
    c = c1;
    kiln_act_next(row, c, srow, sc, cu);
  }
}

/* A unit's V elements of T as loaded, unconverted: one 16-byte word
 * (kiln_v16) when V > 1, one T when V == 1. Units in flight are held raw
 * (4 registers a vector) and widened to fp32 only when computed. */
template <int V, class T> struct kiln_act_raw { kiln_v16 r; };
template <class T> struct kiln_act_raw<1, T> { T r; };

/* p[0..V) (16-byte aligned when V > 1); p NULL (no bias): zeros, the
 * all-zero bits being +0 in every dtype. */
template <int V, class T>
__device__ __forceinline__ void kiln_act_fetch(const T *p, kiln_act_raw<V, T> &r) {
  typedef decltype(r.r) word;
  if (p) {
    r.r = *reinterpret_cast<const word *>(p);
  } else {
    r.r = word{};
  }
}

/* Widens a raw unit to V floats. */
__device__ __forceinline__ void kiln_act_unpack(const kiln_act_raw<4, float> &r, float *v) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    v[i] = __uint_as_float(r.r.w[i]);
}
template <class T>
__device__ __forceinline__ void kiln_act_unpack(const kiln_act_raw<8, T> &r, float *v) {
  const T *tag = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = kiln_lo_f32(r.r.w[i], tag);
    v[2 * i + 1] = kiln_hi_f32(r.r.w[i], tag);
  }
}
template <class T>
__device__ __forceinline__ void kiln_act_unpack(const kiln_act_raw<1, T> &r, float *v) {
  v[0] = kiln_load_f32(&r.r);
}

/* p[0..V) = v rounded to T (16-byte aligned when V > 1). */
template <int V, class T> __device__ __forceinline__ void kiln_act_store(T *p, const float *v) {
  if (V > 1) {
    kiln_store_vec(p, v);
  } else {
    kiln_store_f32(p, v[0]);
  }
}

/* tanh(K0 * u * (1 + K1 * u^2)) with the precise tanhf. */
__device__ __forceinline__ float kiln_gelu_tanh(float u) {
  return tanhf(KILN_GELU_K0 * u * (1.f + KILN_GELU_K1 * u * u));
}
__device__ __forceinline__ float kiln_gelu_fwd(float u) {
  return u * 0.5f * (1.f + kiln_gelu_tanh(u));
}
/* d gelu / du. */
__device__ __forceinline__ float kiln_gelu_grad(float u) {
  const float t = kiln_gelu_tanh(u);
  return 0.5f * u * ((1.f - t * t) * (KILN_GELU_K0 + KILN_GELU_K2 * u * u)) + 0.5f * (1.f + t);
}

/* sigmoid(z) = 1 / (1 + e^-z): the precise expf, then __fdividef (2 ulp,
 * no slow-path call, hence no stack frame): 0 for z << 0 (1 + e^-z above
 * 2^126 or inf), 1 for z >> 0. */
__device__ __forceinline__ float kiln_sigmoid(float z) {
  return __fdividef(1.f, 1.f + expf(-z));
}

#endif /* KILN_ACTIVATION_CORE_CUH */
