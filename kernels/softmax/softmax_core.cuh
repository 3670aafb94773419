/* softmax_core.cuh — templates behind every softmax entry point.
 *
 * Semantics (docs/kernels.md has the full contract):
 *   forward   y = softmax(scale * x) over each row of `cols` elements, fp32
 *             inside. Masked elements, and elements whose scaled value is
 *             -inf, take no part and get y = 0; a row with no participating
 *             element is all zeros, never NaN.
 *   backward  dx = scale * y * (dy - sum_j dy_j * y_j).
 *
 * Three variant kinds (rows of softmax_variants.def):
 *   w<E>  one warp per row, E elements per lane in registers, cols <= 32*E;
 *         element k of lane l is column k*32 + l (coalesced).
 *   b<E>  one block of kThreads per row, E elements per thread in registers,
 *         cols <= kThreads*E; element k of thread t is column k*kThreads + t.
 *   g     one block per row, any cols: pass 1 reduces (online max/sum
 *         forward, sum(dy*y) backward), pass 2 re-reads and writes.
 * All kinds grid-stride over rows, so any grid size is correct.
 *
 * In-place (y == x, dx == dy or dx == y) is allowed everywhere: every thread
 * reads and writes only its own columns, and reads each of them before it
 * writes it.
 *
 * Non-participating elements are tracked explicitly (a bit per register
 * element, or recomputed from x in the g path) rather than by exp() == 0, so
 * a row holding NaN or +inf gives NaN at its participating positions and
 * exact zeros at masked ones, the same on every path.
 */
#ifndef KILN_SOFTMAX_CORE_CUH
#define KILN_SOFTMAX_CORE_CUH

#include "common/kiln_types.cuh"
#include "softmax/softmax_variants.def"

enum { KILN_SOFTMAX_PLAIN = 0, KILN_SOFTMAX_MASKED = 1, KILN_SOFTMAX_CAUSAL = 2 };

/* Elements per thread per chunk in the g path: enough independent loads in
 * flight per thread to cover DRAM latency. */
#define KILN_SOFTMAX_G_UNROLL 8

/* q = a / b, r = a % b for a >= 0, b >= 1. Rows rarely exceed 2^32, so take
 * the 32-bit divide when both fit; the 64-bit one is several times longer. */
__device__ __forceinline__ void kiln_divmod64(kiln_i64 a, kiln_i64 b, kiln_i64 *q, kiln_i64 *r) {
  if ((((unsigned long long)a | (unsigned long long)b) >> 32) == 0) {
    const unsigned qq = (unsigned)a / (unsigned)b;
    *q = qq;
    *r = (unsigned)a - qq * (unsigned)b;
  } else {
    *q = a / b;
    *r = a - *q * b;
  }
}

/* Where a row lives and which of its columns may take part. */
struct kiln_softmax_row {
  kiln_i64 off;        /* element offset of the row in x, y, dy, dx */
  int lim;             /* columns >= lim are masked by position (causal) */
  const kiln_u8 *mask; /* masked unit: this row's mask bytes */
};

/* Row r of [batch, heads, sq, cols]: the masked unit reads mask row
 * (mask_batches == 1 ? 0 : batch) * sq + r % sq; the causal unit lets
 * columns j <= r % sq take part. The caller has checked sq, heads >= 1. */
template <int kUnit>
__device__ __forceinline__ kiln_softmax_row kiln_softmax_row_at(kiln_i64 row, int cols,
                                                                const kiln_u8 *mask, int sq,
                                                                int heads, int mask_batches) {
  kiln_softmax_row r;
  r.off = row * cols;
  r.lim = cols;
  r.mask = mask;
  if (kUnit == KILN_SOFTMAX_CAUSAL) {
    kiln_i64 q, i;
    kiln_divmod64(row, sq, &q, &i);
    if (i < cols) r.lim = (int)i + 1;
  } else if (kUnit == KILN_SOFTMAX_MASKED) {
    kiln_i64 batch, in_batch, h, i;
    kiln_divmod64(row, (kiln_i64)heads * sq, &batch, &in_batch);
    kiln_divmod64(in_batch, sq, &h, &i);
    r.mask = mask + ((mask_batches == 1 ? 0 : batch) * sq + i) * cols;
  }
  return r;
}

/* log2(e) * scale * x[col], or -inf where the mask says no. col < r.lim. */
template <int kUnit, typename T>
__device__ __forceinline__ float kiln_softmax_load(const T *x, const kiln_softmax_row &r,
                                                   kiln_i64 col, float c) {
  float t = kiln_load_f32(x + r.off + col) * c;
  if (kUnit == KILN_SOFTMAX_MASKED && r.mask[col] != 0) t = kiln_neg_inf();
  return t;
}

/* Reductions over the threads that share a row: one warp or the block.
 * red: 32 floats of shared memory (unused for a warp). */
template <int kWidth> __device__ __forceinline__ float kiln_softmax_row_max(float v, float *red) {
  return kWidth == 32 ? kiln_warp_max(v) : kiln_block_max<kWidth>(v, red);
}
template <int kWidth> __device__ __forceinline__ float kiln_softmax_row_sum(float v, float *red) {
  return kWidth == 32 ? kiln_warp_sum(v) : kiln_block_sum<kWidth>(v, red);
}

/* ---- register-resident rows (w and b kinds) ---------------------------- */

/* kWidth threads share the row; tid is this thread's index among them.
 * red: 64 floats of shared memory for kWidth > 32 (max uses the first 32,
 * sum the last 32, so back-to-back rows need no extra barrier). */
template <int kUnit, int E, int kWidth, typename T>
__device__ __forceinline__ void kiln_softmax_fwd_regs(T *y, const T *x, const kiln_softmax_row &r,
                                                      int cols, float c, int tid, float *red) {
  static_assert(E >= 1 && E <= 32, "E bits must fit the participation mask");
  float v[E];
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const int col = k * kWidth + tid;
    v[k] = col < r.lim ? kiln_softmax_load<kUnit>(x, r, col, c) : kiln_neg_inf();
  }
  float m = kiln_neg_inf();
#pragma unroll
  for (int k = 0; k < E; ++k)
    m = fmaxf(m, v[k]);
  m = kiln_softmax_row_max<kWidth>(m, red);

  float s = 0.f;
  unsigned in = 0; /* bit k: element k takes part */
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const bool part = v[k] != kiln_neg_inf();
    in |= (unsigned)part << k;
    v[k] = part ? kiln_exp2f(v[k] - m) : 0.f;
    s += v[k];
  }
  s = kiln_softmax_row_sum<kWidth>(s, kWidth == 32 ? red : red + 32); /* red is null for a warp */
  const float inv = 1.f / s; /* s >= 1 if anything takes part, else unused */
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const int col = k * kWidth + tid;
    if (col < cols) kiln_store_f32(y + r.off + col, (in >> k) & 1u ? v[k] * inv : 0.f);
  }
}

/* red: 32 floats of shared memory for kWidth > 32; callers alternate two
 * buffers between consecutive rows (one reduction per row). */
template <int kWidth, int E, typename T>
__device__ __forceinline__ void kiln_softmax_bwd_regs(T *dx, const T *y, const T *dy,
                                                      const kiln_softmax_row &r, int cols,
                                                      float scale, int tid, float *red) {
  float yv[E], gv[E];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const int col = k * kWidth + tid;
    yv[k] = 0.f;
    gv[k] = 0.f;
    if (col < r.lim) {
      yv[k] = kiln_load_f32(y + r.off + col);
      gv[k] = kiln_load_f32(dy + r.off + col);
    }
    s += yv[k] * gv[k];
  }
  s = kiln_softmax_row_sum<kWidth>(s, red);
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const int col = k * kWidth + tid;
    if (col < cols)
      kiln_store_f32(dx + r.off + col, col < r.lim ? scale * (yv[k] * (gv[k] - s)) : 0.f);
  }
}

/* ---- kernel bodies, one per kind; <kUnit, E, kThreads> ------------------
 * Backward needs no mask: masked positions have y == 0 and so dx == 0. The
 * causal unit still uses its limit so it neither reads nor computes the
 * upper triangle, and writes dx = 0 there. */

template <int kUnit> struct kiln_softmax_bwd_unit {
  enum { value = kUnit == KILN_SOFTMAX_CAUSAL ? KILN_SOFTMAX_CAUSAL : KILN_SOFTMAX_PLAIN };
};

template <int kUnit, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_fwd_w(T *y, const T *x, const kiln_u8 *mask,
                                                   float scale, kiln_i64 rows, int cols, int sq,
                                                   int heads, int mask_batches) {
  const int warps = kThreads / 32;
  const float c = scale * KILN_LOG2E;
  for (kiln_i64 row = (kiln_i64)blockIdx.x * warps + (threadIdx.x >> 5); row < rows;
       row += (kiln_i64)gridDim.x * warps) {
    const kiln_softmax_row r = kiln_softmax_row_at<kUnit>(row, cols, mask, sq, heads, mask_batches);
    kiln_softmax_fwd_regs<kUnit, E, 32>(y, x, r, cols, c, threadIdx.x & 31, (float *)0);
  }
}

template <int kUnit, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_bwd_w(T *dx, const T *y, const T *dy, float scale,
                                                   kiln_i64 rows, int cols, int sq) {
  const int warps = kThreads / 32;
  for (kiln_i64 row = (kiln_i64)blockIdx.x * warps + (threadIdx.x >> 5); row < rows;
       row += (kiln_i64)gridDim.x * warps) {
    const kiln_softmax_row r =
        kiln_softmax_row_at<kiln_softmax_bwd_unit<kUnit>::value>(row, cols, 0, sq, 1, 1);
    kiln_softmax_bwd_regs<32, E>(dx, y, dy, r, cols, scale, threadIdx.x & 31, (float *)0);
  }
}

template <int kUnit, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_fwd_b(T *y, const T *x, const kiln_u8 *mask,
                                                   float scale, kiln_i64 rows, int cols, int sq,
                                                   int heads, int mask_batches) {
  __shared__ float red[64];
  const float c = scale * KILN_LOG2E;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const kiln_softmax_row r = kiln_softmax_row_at<kUnit>(row, cols, mask, sq, heads, mask_batches);
    kiln_softmax_fwd_regs<kUnit, E, kThreads>(y, x, r, cols, c, threadIdx.x, red);
  }
}

template <int kUnit, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_bwd_b(T *dx, const T *y, const T *dy, float scale,
                                                   kiln_i64 rows, int cols, int sq) {
  __shared__ float red[64];
  int parity = 0;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 32) {
    const kiln_softmax_row r =
        kiln_softmax_row_at<kiln_softmax_bwd_unit<kUnit>::value>(row, cols, 0, sq, 1, 1);
    kiln_softmax_bwd_regs<kThreads, E>(dx, y, dy, r, cols, scale, threadIdx.x, red + parity);
  }
}

/* g forward. Pass 1 keeps a per-thread running max m and a sum s of
 * exp2(t - m) over the thread's participating elements; s == 0 exactly when
 * the thread has none so far (otherwise s >= 1, or NaN once a NaN/+inf was
 * seen), which is what guards the rescale against exp2(-inf - -inf). The
 * block then combines (m, s) into the row's max M and sum S. */
template <int kUnit, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_fwd_g(T *y, const T *x, const kiln_u8 *mask,
                                                   float scale, kiln_i64 rows, int cols, int sq,
                                                   int heads, int mask_batches) {
  const int U = KILN_SOFTMAX_G_UNROLL;
  __shared__ float red[64];
  const float c = scale * KILN_LOG2E;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const kiln_softmax_row r = kiln_softmax_row_at<kUnit>(row, cols, mask, sq, heads, mask_batches);
    float m = kiln_neg_inf(), s = 0.f;
    for (kiln_i64 base = threadIdx.x; base < r.lim; base += kThreads * U) {
      float v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const kiln_i64 col = base + u * kThreads;
        v[u] = col < r.lim ? kiln_softmax_load<kUnit>(x, r, col, c) : kiln_neg_inf();
      }
      float mn = m;
#pragma unroll
      for (int u = 0; u < U; ++u)
        mn = fmaxf(mn, v[u]);
      float add = 0.f;
#pragma unroll
      for (int u = 0; u < U; ++u)
        add += v[u] != kiln_neg_inf() ? kiln_exp2f(v[u] - mn) : 0.f;
      s = (s == 0.f ? 0.f : s * kiln_exp2f(m - mn)) + add;
      m = mn;
    }
    const float rm = kiln_block_max<kThreads>(m, red);
    const float rs = kiln_block_sum<kThreads>(s == 0.f ? 0.f : s * kiln_exp2f(m - rm), red + 32);
    const float inv = 1.f / rs; /* rs >= 1 if anything takes part, else unused */
    for (kiln_i64 base = threadIdx.x; base < cols; base += kThreads * U) {
      float v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const kiln_i64 col = base + u * kThreads;
        v[u] = col < r.lim ? kiln_softmax_load<kUnit>(x, r, col, c) : kiln_neg_inf();
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const kiln_i64 col = base + u * kThreads;
        if (col < cols)
          kiln_store_f32(y + r.off + col,
                         v[u] != kiln_neg_inf() ? kiln_exp2f(v[u] - rm) * inv : 0.f);
      }
    }
  }
}

template <int kUnit, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_bwd_g(T *dx, const T *y, const T *dy, float scale,
                                                   kiln_i64 rows, int cols, int sq) {
  const int U = KILN_SOFTMAX_G_UNROLL;
  __shared__ float red[64];
  int parity = 0;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 32) {
    const kiln_softmax_row r =
        kiln_softmax_row_at<kiln_softmax_bwd_unit<kUnit>::value>(row, cols, 0, sq, 1, 1);
    float s = 0.f;
    for (kiln_i64 base = threadIdx.x; base < r.lim; base += kThreads * U) {
      float yv[U], gv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const kiln_i64 col = base + u * kThreads;
        yv[u] = col < r.lim ? kiln_load_f32(y + r.off + col) : 0.f;
        gv[u] = col < r.lim ? kiln_load_f32(dy + r.off + col) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
        s += yv[u] * gv[u];
    }
    s = kiln_block_sum<kThreads>(s, red + parity);
    for (kiln_i64 base = threadIdx.x; base < cols; base += kThreads * U) {
      float yv[U], gv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const kiln_i64 col = base + u * kThreads;
        yv[u] = col < r.lim ? kiln_load_f32(y + r.off + col) : 0.f;
        gv[u] = col < r.lim ? kiln_load_f32(dy + r.off + col) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const kiln_i64 col = base + u * kThreads;
        if (col < cols)
          kiln_store_f32(dx + r.off + col, col < r.lim ? scale * (yv[u] * (gv[u] - s)) : 0.f);
      }
    }
  }
}

/* ---- entry points --------------------------------------------------------
 * A unit defines KILN_SOFTMAX_THIS_UNIT (its name, e.g. scaled_softmax) and
 * KILN_SOFTMAX_THIS_KIND (KILN_SOFTMAX_PLAIN/MASKED/CAUSAL), then expands
 * KILN_SOFTMAX_DEFINE_ENTRY_POINTS() once: an extern "C" forward and
 * backward kernel for every dtype x variant of softmax_variants.def. */

#define KILN_SOFTMAX_CTYPE_(a, dt, ctype) typedef ctype kiln_softmax_ctype_##dt;
KILN_SOFTMAX_DTYPES(KILN_SOFTMAX_CTYPE_, ~)
#undef KILN_SOFTMAX_CTYPE_

/* Referencing kiln_softmax_unit_id_<unit> checks the unit is in the .def. */
#define KILN_SOFTMAX_UNIT_ID_(a, name) kiln_softmax_unit_id_##name,
enum { KILN_SOFTMAX_UNITS(KILN_SOFTMAX_UNIT_ID_, ~) kiln_softmax_unit_count };
#undef KILN_SOFTMAX_UNIT_ID_

#define KILN_SOFTMAX_PASTE_(a, b) a##b
#define KILN_SOFTMAX_PASTE(a, b) KILN_SOFTMAX_PASTE_(a, b)
#define KILN_SOFTMAX_NAME_(unit, dir, dt, v) kiln_##unit##_##dir##_##dt##_##v
#define KILN_SOFTMAX_NAME(unit, dir, dt, v) KILN_SOFTMAX_NAME_(unit, dir, dt, v)

#define KILN_SOFTMAX_ENTRY_PAIR_(dt, v, kind, elems, threads)                                      \
  extern "C" __global__ void __launch_bounds__(threads)                                            \
      KILN_SOFTMAX_NAME(KILN_SOFTMAX_THIS_UNIT, fwd, dt, v)(                                       \
          kiln_softmax_ctype_##dt * y, const kiln_softmax_ctype_##dt *x, const kiln_u8 *mask,      \
          float scale, long long rows, int cols, int sq, int heads, int mask_batches) {            \
    kiln_softmax_fwd_##kind<KILN_SOFTMAX_THIS_KIND, elems, threads>(y, x, mask, scale, rows, cols, \
                                                                    sq, heads, mask_batches);      \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(threads)                                            \
      KILN_SOFTMAX_NAME(KILN_SOFTMAX_THIS_UNIT, bwd, dt, v)(                                       \
          kiln_softmax_ctype_##dt * dx, const kiln_softmax_ctype_##dt *y,                          \
          const kiln_softmax_ctype_##dt *dy, float scale, long long rows, int cols, int sq) {      \
    kiln_softmax_bwd_##kind<KILN_SOFTMAX_THIS_KIND, elems, threads>(dx, y, dy, scale, rows, cols,  \
                                                                    sq);                           \
  }

#define KILN_SOFTMAX_ENTRY_DTYPE_(a, dt, ctype) KILN_SOFTMAX_VARIANTS(KILN_SOFTMAX_ENTRY_PAIR_, dt)

#define KILN_SOFTMAX_DEFINE_ENTRY_POINTS()                                                         \
  static_assert(KILN_SOFTMAX_PASTE(kiln_softmax_unit_id_, KILN_SOFTMAX_THIS_UNIT) >= 0,            \
                "unit missing from softmax_variants.def");                                         \
  KILN_SOFTMAX_DTYPES(KILN_SOFTMAX_ENTRY_DTYPE_, ~)

#endif /* KILN_SOFTMAX_CORE_CUH */
