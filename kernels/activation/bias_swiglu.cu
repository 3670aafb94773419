/* bias_swiglu.cu — y = silu(a + bias_a) * (b + bias_b) over x = [a | b]
 * ([rows, 2*cols]) and its backward into dx [rows, 2*cols]
 * (docs/kernels/activation.md; entry points: bias_swiglu.def). Elementwise
 * and memory-bound: 16-byte vectors when cols % KILN_VEC(T) == 0 and every
 * pointer is 16-byte aligned (then so are the b halves), one element at a
 * time otherwise; all math in fp32. */
#include "activation/activation_core.cuh"
#include "activation/bias_swiglu.def"
#include "common/kiln_types.cuh"
#include "common/kiln_vec.cuh"

template <int V, class T> struct kiln_swiglu_fwd_op {
  T *y;
  const T *x, *bias;
  int cols;
  struct regs {
    kiln_act_raw<V, T> a, b, ba, bb;
  };
  __device__ __forceinline__ void load(kiln_i64 row, int c, regs &r) const {
    const int col = c * V;
    const kiln_i64 xo = row * (2 * (kiln_i64)cols) + col;
    kiln_act_fetch(x + xo, r.a);
    kiln_act_fetch(x + xo + cols, r.b);
    kiln_act_fetch(bias ? bias + col : bias, r.ba);
    kiln_act_fetch(bias ? bias + cols + col : bias, r.bb); /* pointer math: no int overflow */
  }
  __device__ __forceinline__ void store(kiln_i64 row, int c, const regs &r) const {
    float a[V], b[V], ba[V], bb[V];
    kiln_act_unpack(r.a, a);
    kiln_act_unpack(r.b, b);
    kiln_act_unpack(r.ba, ba);
    kiln_act_unpack(r.bb, bb);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float u = a[i] + ba[i];
      a[i] = u * kiln_sigmoid(u) * (b[i] + bb[i]);
    }
    kiln_act_store<V>(y + (row * cols + c * V), a);
  }
};

template <int V, class T> struct kiln_swiglu_bwd_op {
  T *dx;
  const T *dy, *x, *bias;
  int cols;
  struct regs {
    kiln_act_raw<V, T> g, a, b, ba, bb;
  };
  __device__ __forceinline__ void load(kiln_i64 row, int c, regs &r) const {
    const int col = c * V;
    const kiln_i64 xo = row * (2 * (kiln_i64)cols) + col;
    kiln_act_fetch(dy + (row * cols + col), r.g);
    kiln_act_fetch(x + xo, r.a);
    kiln_act_fetch(x + xo + cols, r.b);
    kiln_act_fetch(bias ? bias + col : bias, r.ba);
    kiln_act_fetch(bias ? bias + cols + col : bias, r.bb);
  }
  __device__ __forceinline__ void store(kiln_i64 row, int c, const regs &r) const {
    float g[V], a[V], b[V], ba[V], bb[V];
    kiln_act_unpack(r.g, g);
    kiln_act_unpack(r.a, a);
    kiln_act_unpack(r.b, b);
    kiln_act_unpack(r.ba, ba);
    kiln_act_unpack(r.bb, bb);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float u = a[i] + ba[i], w = b[i] + bb[i];
      const float s = kiln_sigmoid(u), gs = g[i] * s;
      a[i] = gs * w * (1.f + u * (1.f - s)); /* da */
      b[i] = gs * u;                         /* db */
    }
    const kiln_i64 xo = row * (2 * (kiln_i64)cols) + c * V;
    kiln_act_store<V>(dx + xo, a);
    kiln_act_store<V>(dx + xo + cols, b);
  }
};

template <class T>
__device__ __forceinline__ void kiln_bias_swiglu_fwd(T *y, const T *x, const T *bias, kiln_i64 rows,
                                                     int cols) {
  const int V = KILN_VEC(T);
  if (cols % V == 0 && kiln_aligned16(y) && kiln_aligned16(x) && kiln_aligned16(bias)) {
    kiln_swiglu_fwd_op<KILN_VEC(T), T> f = {y, x, bias, cols};
    kiln_act_walk(rows, cols / V, f);
  } else {
    kiln_swiglu_fwd_op<1, T> f = {y, x, bias, cols};
    kiln_act_walk(rows, cols, f);
  }
}

template <class T>
__device__ __forceinline__ void kiln_bias_swiglu_bwd(T *dx, const T *dy, const T *x, const T *bias,
                                                     kiln_i64 rows, int cols) {
  const int V = KILN_VEC(T);
  if (cols % V == 0 && kiln_aligned16(dx) && kiln_aligned16(dy) && kiln_aligned16(x) &&
      kiln_aligned16(bias)) {
    kiln_swiglu_bwd_op<KILN_VEC(T), T> f = {dx, dy, x, bias, cols};
    kiln_act_walk(rows, cols / V, f);
  } else {
    kiln_swiglu_bwd_op<1, T> f = {dx, dy, x, bias, cols};
    kiln_act_walk(rows, cols, f);
  }
}

#define KILN_SWIGLU_CTYPE_f32 float
#define KILN_SWIGLU_CTYPE_f16 kiln_f16
#define KILN_SWIGLU_CTYPE_bf16 kiln_bf16

#define KILN_SWIGLU_ENTRY_fwd(dt, v)                                                               \
  extern "C" __global__ void __launch_bounds__(KILN_ACT_THREADS) kiln_bias_swiglu_fwd_##dt##_##v(  \
      KILN_SWIGLU_CTYPE_##dt *y, const KILN_SWIGLU_CTYPE_##dt *x,                                  \
      const KILN_SWIGLU_CTYPE_##dt *bias, long long rows, int cols) {                              \
    kiln_bias_swiglu_fwd(y, x, bias, rows, cols);                                                  \
  }
#define KILN_SWIGLU_ENTRY_bwd(dt, v)                                                               \
  extern "C" __global__ void __launch_bounds__(KILN_ACT_THREADS) kiln_bias_swiglu_bwd_##dt##_##v(  \
      KILN_SWIGLU_CTYPE_##dt *dx, const KILN_SWIGLU_CTYPE_##dt *dy,                                \
      const KILN_SWIGLU_CTYPE_##dt *x, const KILN_SWIGLU_CTYPE_##dt *bias, long long rows,         \
      int cols) {                                                                                  \
    kiln_bias_swiglu_bwd(dx, dy, x, bias, rows, cols);                                             \
  }
#define KILN_SWIGLU_ENTRY_(unit, dir, dt, v) KILN_SWIGLU_ENTRY_##dir(dt, v)
KILN_BIAS_SWIGLU_ENTRIES(KILN_SWIGLU_ENTRY_)
