/* bias_gelu.cu — y = gelu(x + bias) and its backward over [rows, cols]
 * (docs/kernels/activation.md; entry points: bias_gelu.def). Elementwise and
 * memory-bound: 16-byte vectors when cols % KILN_VEC(T) == 0 and every
 * pointer is 16-byte aligned, one element at a time otherwise; all math in
 * fp32. y may be x, dx may be dy (each element is read before it is
 * written, by the same thread). */
#include "activation/activation_core.cuh"
#include "activation/bias_gelu.def"
#include "common/kiln_types.cuh"
#include "common/kiln_vec.cuh"

template <int V, class T> struct kiln_gelu_fwd_op {
  T *y;
  const T *x, *bias;
  int cols;
  __device__ __forceinline__ void operator()(kiln_i64 row, int c) const {
    const int col = c * V;
    const kiln_i64 off = row * cols + col;
    float v[V], b[V];
    kiln_act_load<V>(x + off, v);
    kiln_act_load_bias<V>(bias, col, b);
#pragma unroll
    for (int i = 0; i < V; ++i)
      v[i] = kiln_gelu_fwd(v[i] + b[i]);
    kiln_act_store<V>(y + off, v);
  }
};

template <int V, class T> struct kiln_gelu_bwd_op {
  T *dx;
  const T *dy, *x, *bias;
  int cols;
  __device__ __forceinline__ void operator()(kiln_i64 row, int c) const {
    const int col = c * V;
    const kiln_i64 off = row * cols + col;
    float g[V], v[V], b[V];
    kiln_act_load<V>(dy + off, g);
    kiln_act_load<V>(x + off, v);
    kiln_act_load_bias<V>(bias, col, b);
#pragma unroll
    for (int i = 0; i < V; ++i)
      g[i] *= kiln_gelu_grad(v[i] + b[i]);
    kiln_act_store<V>(dx + off, g);
  }
};

template <class T>
__device__ __forceinline__ void kiln_bias_gelu_fwd(T *y, const T *x, const T *bias, kiln_i64 rows,
                                                   int cols) {
  const int V = KILN_VEC(T);
  if (cols % V == 0 && kiln_aligned16(y) && kiln_aligned16(x) && kiln_aligned16(bias)) {
    kiln_gelu_fwd_op<KILN_VEC(T), T> f = {y, x, bias, cols};
    kiln_act_walk(rows, cols / V, f);
  } else {
    kiln_gelu_fwd_op<1, T> f = {y, x, bias, cols};
    kiln_act_walk(rows, cols, f);
  }
}

template <class T>
__device__ __forceinline__ void kiln_bias_gelu_bwd(T *dx, const T *dy, const T *x, const T *bias,
                                                   kiln_i64 rows, int cols) {
  const int V = KILN_VEC(T);
  if (cols % V == 0 && kiln_aligned16(dx) && kiln_aligned16(dy) && kiln_aligned16(x) &&
      kiln_aligned16(bias)) {
    kiln_gelu_bwd_op<KILN_VEC(T), T> f = {dx, dy, x, bias, cols};
    kiln_act_walk(rows, cols / V, f);
  } else {
    kiln_gelu_bwd_op<1, T> f = {dx, dy, x, bias, cols};
    kiln_act_walk(rows, cols, f);
  }
}

#define KILN_GELU_CTYPE_f32 float
#define KILN_GELU_CTYPE_f16 kiln_f16
#define KILN_GELU_CTYPE_bf16 kiln_bf16

#define KILN_GELU_ENTRY_fwd(dt, v)                                                                 \
  extern "C" __global__ void __launch_bounds__(KILN_ACT_THREADS)                                   \
      kiln_bias_gelu_fwd_##dt##_##v(KILN_GELU_CTYPE_##dt *y, const KILN_GELU_CTYPE_##dt *x,        \
                                    const KILN_GELU_CTYPE_##dt *bias, long long rows, int cols) {  \
    kiln_bias_gelu_fwd(y, x, bias, rows, cols);                                                    \
  }
#define KILN_GELU_ENTRY_bwd(dt, v)                                                                 \
  extern "C" __global__ void __launch_bounds__(KILN_ACT_THREADS) kiln_bias_gelu_bwd_##dt##_##v(    \
      KILN_GELU_CTYPE_##dt *dx, const KILN_GELU_CTYPE_##dt *dy, const KILN_GELU_CTYPE_##dt *x,     \
      const KILN_GELU_CTYPE_##dt *bias, long long rows, int cols) {                                \
    kiln_bias_gelu_bwd(dx, dy, x, bias, rows, cols);                                               \
  }
#define KILN_GELU_ENTRY_(unit, dir, dt, v) KILN_GELU_ENTRY_##dir(dt, v)
KILN_BIAS_GELU_ENTRIES(KILN_GELU_ENTRY_)
