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
  struct regs {
    kiln_act_raw<V, T> x, b;
  };
  __device__ __forceinline__ void load(kiln_i64 row, int c, regs &r) const {
    kiln_act_fetch(x + (row * cols + c * V), r.x);
    kiln_act_fetch(bias ? bias + c * V : bias, r.b);
  }
  __device__ __forceinline__ void store(kiln_i64 row, int c, const regs &r) const {
    float v[V], b[V];
    kiln_act_unpack(r.x, v);
    kiln_act_unpack(r.b, b);
#pragma unroll
    for (int i = 0; i < V; ++i)
      v[i] = kiln_gelu_fwd(v[i] + b[i]);
    kiln_act_store<V>(y + (row * cols + c * V), v);
  }
};

template <int V, class T> struct kiln_gelu_bwd_op {
  T *dx;
  const T *dy, *x, *bias;
  int cols;
  struct regs {
    kiln_act_raw<V, T> g, x, b;
  };
  __device__ __forceinline__ void load(kiln_i64 row, int c, regs &r) const {
    const kiln_i64 off = row * cols + c * V;
    kiln_act_fetch(dy + off, r.g);
    kiln_act_fetch(x + off, r.x);
    kiln_act_fetch(bias ? bias + c * V : bias, r.b);
  }
  __device__ __forceinline__ void store(kiln_i64 row, int c, const regs &r) const {
    float g[V], v[V], b[V];
    kiln_act_unpack(r.g, g);
    kiln_act_unpack(r.x, v);
    kiln_act_unpack(r.b, b);
#pragma unroll
    for (int i = 0; i < V; ++i)
      g[i] *= kiln_gelu_grad(v[i] + b[i]);
    kiln_act_store<V>(dx + (row * cols + c * V), g);
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
