/* bias_dropout_add.cu — unit: y = residual + dropout_p(x + bias) and its
 * backward dx = dy * keep / (1 - p), the mask regenerated from (seed, offset)
 * with Philox-4x32-10 (common/kiln_philox.cuh), never stored.
 *
 * Entry points (bias_dropout_add.def), semantics, numerics and launch in
 * docs/kernels/dropout.md:
 *   kiln_bias_dropout_add_fwd_<dt>_g(T *y, const T *x, const T *bias, const T *residual,
 *                                    long long n, int cols, unsigned threshold, float scale,
 *                                    unsigned long long seed, unsigned long long offset)
 *   kiln_bias_dropout_add_bwd_<dt>_g(T *dx, const T *dy, long long n, unsigned threshold,
 *                                    float scale, unsigned long long seed,
 *                                    unsigned long long offset)
 * n = rows * cols elements, row-major; bias [cols] or NULL. Element i is kept
 * iff (word_i >> 8) >= threshold, word_i = word i % 4 of the Philox block of
 * group i / 4; threshold = ceil(p * 2^24) (the host's), so u_i = (word_i >> 8)
 * * 2^-24 >= p. threshold == 0 is the identity (no Philox, scale not read).
 *
 * Work split: a thread takes whole groups of 4 consecutive elements (one
 * Philox call each). Fast path, when every pointer is 16-byte aligned and the
 * bias (if any) is too with cols % KILN_VEC(T) == 0: 16-byte vectors, 8
 * (fwd) or 16 (bwd) elements per step loaded before any is used; vector v of
 * thread t is v = t + k * threads. General path (and
 * the last n % KILN_VEC(T) elements of the fast path, bias NULL only):
 * scalar loads, group g = t + k * threads. Which thread takes which element
 * never changes an element's value: the result depends on (seed, offset, i)
 * alone, not on the grid.
 *
 * In place: y may be x or residual, dx may be dy: each thread reads all of
 * its elements before it writes them and touches no other thread's.
 */
#include "common/kiln_philox.cuh"
#include "common/kiln_types.cuh"
#include "common/kiln_vec.cuh"
#include "dropout/bias_dropout_add.def"

#define KILN_BDA_THREADS 256 /* the `g` variant's block (docs/kernels/dropout.md) */
/* Elements per thread per fast-path step: 32 (16-bit) or 64 (f32) bytes of
 * loads in flight per thread either way; the forward reads two tensors. */
#define KILN_BDA_FWD_ELEMS 8
#define KILN_BDA_BWD_ELEMS 16
#define KILN_BDA_MIN_BLOCKS 4 /* per SM: at most 64 registers, half the threads of an SM */

typedef unsigned long long kiln_u64;

/* The element's value after dropout: t kept and scaled, or dropped (0). The
 * caller adds the residual. kept(w) == (w >> 8) >= threshold. */
__device__ __forceinline__ bool kiln_bda_keep(unsigned word, unsigned threshold) {
  return (word >> 8) >= threshold;
}

/* Forward of one element: identity (threshold 0) t + r; else kept fma(t,
 * scale, r), dropped r. One rounding to T happens at the store. */
__device__ __forceinline__ float kiln_bda_fwd1(float t, float r, bool keep, float scale) {
  return keep ? __fmaf_rn(t, scale, r) : r;
}

/* Backward of one element: dy * scale kept, +0 dropped. */
__device__ __forceinline__ float kiln_bda_bwd1(float d, bool keep, float scale) {
  return keep ? d * scale : 0.f;
}

/* (a + b) mod m for a, b < m <= 2^31 - 1 (a column advanced by a step). */
__device__ __forceinline__ unsigned kiln_bda_wrap(unsigned a, unsigned b, unsigned m) {
  const unsigned s = a + b;
  return s >= m ? s - m : s;
}

/* Bwd reads no bias and no residual: the same body with kFwd = false, where
 * x is dy, y is dx and bias/residual are NULL. */
template <typename T, bool kFwd>
__device__ __forceinline__ void kiln_bda_body(T *y, const T *x, const T *bias, const T *residual,
                                              kiln_i64 n, int cols, unsigned threshold, float scale,
                                              kiln_u64 seed, kiln_u64 offset) {
  const int V = KILN_VEC(T);
  /* vectors per input per step: fwd 2 (f32) or 1 (16-bit), bwd 4 or 2 */
  const int U = (kFwd ? KILN_BDA_FWD_ELEMS : KILN_BDA_BWD_ELEMS) / KILN_VEC(T);
  const kiln_i64 tid = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x;
  const kiln_i64 threads = (kiln_i64)gridDim.x * blockDim.x;
  const unsigned ucols = (unsigned)cols;
  const bool vec = kiln_aligned16(y) && kiln_aligned16(x) && (!kFwd || kiln_aligned16(residual)) &&
                   (!bias || (kiln_aligned16(bias) && cols % V == 0));
  kiln_i64 g_begin = 0; /* the first group of the scalar part */
  if (vec) {
    const kiln_i64 nv = n / V;
    /* Column of this thread's next vector, and how far one stride moves it. */
    unsigned c = bias ? (unsigned)((tid * V) % cols) : 0u;
    const unsigned cstep = bias ? (unsigned)((threads * V) % cols) : 0u;
    for (kiln_i64 v0 = tid; v0 < nv; v0 += U * threads) {
      float a[U][KILN_VEC(T)], r[U][KILN_VEC(T)];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const kiln_i64 v = v0 + u * threads;
        if (v < nv) {
          kiln_load_vec(x + v * V, a[u]);
          if (kFwd) kiln_load_vec(residual + v * V, r[u]);
          if (kFwd && bias) {
            float b[KILN_VEC(T)];
            kiln_load_vec(bias + c, b);
#pragma unroll
            for (int k = 0; k < V; ++k)
              a[u][k] += b[k];
          }
        }
        if (bias) c = kiln_bda_wrap(c, cstep, ucols);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const kiln_i64 v = v0 + u * threads;
        if (v < nv) {
          float o[KILN_VEC(T)];
          if (threshold == 0) {
#pragma unroll
            for (int k = 0; k < V; ++k)
              o[k] = kFwd ? a[u][k] + r[u][k] : a[u][k];
          } else {
#pragma unroll
            for (int q = 0; q < V / 4; ++q) {
              const kiln_philox4 blk = kiln_philox_group(seed, offset, (kiln_u64)(v * V / 4 + q));
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                const bool keep = kiln_bda_keep(kiln_philox_word(blk, j), threshold);
                const int k = 4 * q + j;
                o[k] = kFwd ? kiln_bda_fwd1(a[u][k], r[u][k], keep, scale)
                            : kiln_bda_bwd1(a[u][k], keep, scale);
              }
            }
          }
          kiln_store_vec(y + v * V, o);
        }
      }
    }
    g_begin = nv * V / 4; /* V is a multiple of 4: the tail starts a group */
  }
  /* General path: scalar accesses, group by group. */
  const kiln_i64 groups = (n + 3) / 4;
  kiln_i64 g = g_begin + tid;
  if (g >= groups) return;
  unsigned c = bias ? (unsigned)((g * 4) % cols) : 0u;
  const unsigned cstep = bias ? (unsigned)((threads * 4) % cols) : 0u;
  for (; g < groups; g += threads) {
    const kiln_i64 i0 = g * 4;
    const int m = n - i0 < 4 ? (int)(n - i0) : 4;
    float a[4], r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j < m) {
        a[j] = kiln_load_f32(x + i0 + j);
        if (kFwd) {
          r[j] = kiln_load_f32(residual + i0 + j);
          if (bias) a[j] += kiln_load_f32(bias + kiln_bda_wrap(c, (unsigned)j % ucols, ucols));
        }
      }
    kiln_philox4 blk = {0u, 0u, 0u, 0u};
    if (threshold != 0) blk = kiln_philox_group(seed, offset, (kiln_u64)g);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j < m) {
        float o;
        if (threshold == 0) {
          o = kFwd ? a[j] + r[j] : a[j];
        } else {
          const bool keep = kiln_bda_keep(kiln_philox_word(blk, j), threshold);
          o = kFwd ? kiln_bda_fwd1(a[j], r[j], keep, scale) : kiln_bda_bwd1(a[j], keep, scale);
        }
        kiln_store_f32(y + i0 + j, o);
      }
    if (bias) c = kiln_bda_wrap(c, cstep, ucols);
  }
}

#define KILN_BDA_CTYPE_f32 float
#define KILN_BDA_CTYPE_f16 kiln_f16
#define KILN_BDA_CTYPE_bf16 kiln_bf16

#define KILN_BDA_ENTRY_fwd(dt, v)                                                                  \
  extern "C" __global__ void __launch_bounds__(KILN_BDA_THREADS, KILN_BDA_MIN_BLOCKS)              \
      kiln_bias_dropout_add_fwd_##dt##_##v(                                                        \
          KILN_BDA_CTYPE_##dt *y, const KILN_BDA_CTYPE_##dt *x, const KILN_BDA_CTYPE_##dt *bias,   \
          const KILN_BDA_CTYPE_##dt *residual, long long n, int cols, unsigned threshold,          \
          float scale, unsigned long long seed, unsigned long long offset) {                       \
    kiln_bda_body<KILN_BDA_CTYPE_##dt, true>(y, x, bias, residual, n, cols, threshold, scale,      \
                                             seed, offset);                                        \
  }
#define KILN_BDA_ENTRY_bwd(dt, v)                                                                  \
  extern "C" __global__ void __launch_bounds__(KILN_BDA_THREADS, KILN_BDA_MIN_BLOCKS)              \
      kiln_bias_dropout_add_bwd_##dt##_##v(KILN_BDA_CTYPE_##dt *dx, const KILN_BDA_CTYPE_##dt *dy, \
                                           long long n, unsigned threshold, float scale,           \
                                           unsigned long long seed, unsigned long long offset) {   \
    kiln_bda_body<KILN_BDA_CTYPE_##dt, false>(dx, dy, (const KILN_BDA_CTYPE_##dt *)0,              \
                                              (const KILN_BDA_CTYPE_##dt *)0, n, 1, threshold,     \
                                              scale, seed, offset);                                \
  }
#define KILN_BDA_ENTRY(unit, dir, dt, v) KILN_BDA_ENTRY_##dir(dt, v)
KILN_BIAS_DROPOUT_ADD_ENTRIES(KILN_BDA_ENTRY)
