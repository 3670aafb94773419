/* softmax_core.cuh — templates behind every softmax entry point.
 *
 * Semantics (docs/kernels.md has the full contract):
 *   forward   y = softmax(scale * x) over each row of `cols` elements, fp32
 *             inside. Masked elements, and elements whose scaled value is
 *             -inf, take no part and get y = 0; a row with no participating
 *             element is all zeros, never NaN.
 *   backward  dx = scale * y * (dy - sum_j dy_j * y_j).
 *
 * Variant kinds (rows of softmax_variants.def):
 *   w<E>  one warp per row, E elements per lane in registers, cols <= 32*E;
 *         element k of lane l is column k*32 + l (coalesced).
 *   b<E>  one block of kThreads per row, E elements per thread in registers,
 *         cols <= kThreads*E; element k of thread t is column k*kThreads + t.
 *   g     one block per row, any cols: pass 1 reduces (online max/sum
 *         forward, sum(dy*y) backward), pass 2 re-reads and writes.
 *   wv, bv, gv  the same with 16-byte accesses: a thread's elements come in
 *         vectors of V = 16 / sizeof(T) contiguous columns, vector j of
 *         thread t covering columns (j*width + t)*V ... + V-1. The launcher
 *         picks them only when every tensor (and the mask) is 16-byte aligned
 *         and cols % V == 0, so a vector that starts inside a row lies in it;
 *         a causal row's limit may cut a vector, whose columns past it are
 *         read (in bounds) but take no part.
 * All kinds grid-stride over rows, so any grid size is correct.
 *
 * Register-resident rows are kept as the dtype stores them (two 16-bit
 * values per register) and converted again in each pass, so that a b32 or
 * w32 row of bf16 fits the 64 registers per thread that 32 resident warps
 * per SM allow (KILN_SOFTMAX_BOUNDS_*; docs/kernels/softmax.md).
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
#include "common/kiln_vec.cuh" /* kiln_v16, kiln_lo_f32/hi_f32, kiln_load/store_vec */
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

/* Reductions over the threads that share a row: one warp or the block.
 * red: 32 floats of shared memory (unused for a warp). */
template <int kWidth> __device__ __forceinline__ float kiln_softmax_row_max(float v, float *red) {
  return kWidth == 32 ? kiln_warp_max(v) : kiln_block_max<kWidth>(v, red);
}
template <int kWidth> __device__ __forceinline__ float kiln_softmax_row_sum(float v, float *red) {
  return kWidth == 32 ? kiln_warp_sum(v) : kiln_block_sum<kWidth>(v, red);
}

/* ---- where a thread's elements are ------------------------------------- */

/* Elements of T in a 16-byte vector. */
template <typename T> struct kiln_softmax_vec {
  enum { value = 16 / (int)sizeof(T) };
};

/* Column of element k of thread tid among kWidth threads, from the start of
 * a chunk: strided (scalar kinds) or in vectors of V (vector kinds). */
template <bool kVec, typename T, int kWidth>
__device__ __forceinline__ int kiln_softmax_col(int k, int tid) {
  const int V = kiln_softmax_vec<T>::value;
  return kVec ? ((k / V) * kWidth + tid) * V + k % V : k * kWidth + tid;
}

/* V mask bytes in one load from p, aligned to V bytes: byte i is bits 8i.. */
template <int V> struct kiln_softmax_mask_vec;
template <> struct kiln_softmax_mask_vec<8> {
  static __device__ __forceinline__ unsigned long long get(const kiln_u8 *p) {
    return *reinterpret_cast<const unsigned long long *>(p);
  }
};
template <> struct kiln_softmax_mask_vec<4> {
  static __device__ __forceinline__ unsigned long long get(const kiln_u8 *p) {
    return *reinterpret_cast<const unsigned *>(p);
  }
};

/* Bit n set: element n of this thread's chunk at base is before lim and not
 * masked (masked unit: mask byte 0); the mask is read a vector at a time in
 * the vector kinds. */
template <int kUnit, bool kVec, int N, int kWidth, typename T>
__device__ __forceinline__ unsigned kiln_softmax_part(const kiln_softmax_row &r, kiln_i64 base,
                                                      int tid) {
  const int V = kiln_softmax_vec<T>::value;
  unsigned in = 0;
  if (kVec) {
#pragma unroll
    for (int j = 0; j < N / V; ++j) {
      const kiln_i64 col0 = base + ((kiln_i64)j * kWidth + tid) * V;
      if (col0 >= r.lim) continue;
      const unsigned long long mb =
          kUnit == KILN_SOFTMAX_MASKED ? kiln_softmax_mask_vec<V>::get(r.mask + col0) : 0ull;
#pragma unroll
      for (int i = 0; i < V; ++i)
        in |= (unsigned)(col0 + i < r.lim && ((mb >> (8 * i)) & 0xffu) == 0) << (j * V + i);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const kiln_i64 col = base + (kiln_i64)k * kWidth + tid;
      in |= (unsigned)(col < r.lim && (kUnit != KILN_SOFTMAX_MASKED || r.mask[col] == 0)) << k;
    }
  }
  return in;
}

/* v[0..N) = p[base + this thread's columns] as fp32, 0 at columns >= lim. */
template <bool kVec, int N, int kWidth, typename T>
__device__ __forceinline__ void kiln_softmax_read(float *v, const T *p, kiln_i64 base, int tid,
                                                  kiln_i64 lim) {
  const int V = kiln_softmax_vec<T>::value;
  if (kVec) {
#pragma unroll
    for (int j = 0; j < N / V; ++j) {
      const kiln_i64 col0 = base + ((kiln_i64)j * kWidth + tid) * V;
#pragma unroll
      for (int i = 0; i < V; ++i)
        v[j * V + i] = 0.f;
      if (col0 < lim) kiln_load_vec(p + col0, v + j * V);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const kiln_i64 col = base + (kiln_i64)k * kWidth + tid;
      v[k] = col < lim ? kiln_load_f32(p + col) : 0.f;
    }
  }
}

/* p[base + this thread's columns] = o[0..N), rounded to T, where < cols. */
template <bool kVec, int N, int kWidth, typename T>
__device__ __forceinline__ void kiln_softmax_write(T *p, const float *o, kiln_i64 base, int tid,
                                                   kiln_i64 cols) {
  const int V = kiln_softmax_vec<T>::value;
  if (kVec) {
#pragma unroll
    for (int j = 0; j < N / V; ++j) {
      const kiln_i64 col0 = base + ((kiln_i64)j * kWidth + tid) * V;
      if (col0 < cols) kiln_store_vec(p + col0, o + j * V);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const kiln_i64 col = base + (kiln_i64)k * kWidth + tid;
      if (col < cols) kiln_store_f32(p + col, o[k]);
    }
  }
}

/* p[base + this thread's columns] = f(n) for element n, rounded to T, where
 * < cols; f is called just before its store (short live ranges). */
template <bool kVec, int N, int kWidth, typename T, typename F>
__device__ __forceinline__ void kiln_softmax_emit(T *p, const F &f, kiln_i64 base, int tid,
                                                  kiln_i64 cols) {
  const int V = kiln_softmax_vec<T>::value;
  if (kVec) {
#pragma unroll
    for (int j = 0; j < N / V; ++j) {
      const kiln_i64 col0 = base + ((kiln_i64)j * kWidth + tid) * V;
      if (col0 >= cols) continue;
      float o[V];
#pragma unroll
      for (int i = 0; i < V; ++i)
        o[i] = f(j * V + i);
      kiln_store_vec(p + col0, o);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const kiln_i64 col = base + (kiln_i64)k * kWidth + tid;
      if (col < cols) kiln_store_f32(p + col, f(k));
    }
  }
}

/* ---- register-resident rows, scalar kinds --------------------------------
 * Element k of thread tid is column k * kWidth + tid; the row is held as fp32
 * (forward: its exponentials), one register per element. */

/* log2(e) * scale * x[col], or -inf where the mask says no. col < r.lim. */
template <int kUnit, typename T>
__device__ __forceinline__ float kiln_softmax_load(const T *x, const kiln_softmax_row &r,
                                                   kiln_i64 col, float c) {
  float t = kiln_load_f32(x + r.off + col) * c;
  if (kUnit == KILN_SOFTMAX_MASKED && r.mask[col] != 0) t = kiln_neg_inf();
  return t;
}

/* kWidth threads share the row; tid is this thread's index among them.
 * red: 64 floats of shared memory for kWidth > 32 (max uses the first 32,
 * sum the last 32, so back-to-back rows need no extra barrier). */
template <int kUnit, int E, int kWidth, typename T>
__device__ __forceinline__ void kiln_softmax_fwd_regs_scalar(T *y, const T *x,
                                                             const kiln_softmax_row &r, int cols,
                                                             float c, int tid, float *red) {
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
__device__ __forceinline__ void kiln_softmax_bwd_regs_scalar(T *dx, const T *y, const T *dy,
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

/* ---- register-resident rows, vector kinds ------------------------------- */

/* E elements of T as the dtype stores them: fp32 one per register, 16-bit
 * types two per register (element k in half k & 1 of word k / 2). */
template <typename T, int E> struct kiln_softmax_vals {
  unsigned w[(E + 1) / 2];
  __device__ __forceinline__ float get(int k) const {
    return k & 1 ? kiln_hi_f32(w[k >> 1], (const T *)0) : kiln_lo_f32(w[k >> 1], (const T *)0);
  }
  __device__ __forceinline__ void set(int k, const T *p) {
    const unsigned h = p->bits, keep = k & 1 ? 0xffffu : 0xffff0000u;
    w[k >> 1] = (w[k >> 1] & keep) | (k & 1 ? h << 16 : h);
  }
  __device__ __forceinline__ void set_vec(int j, const T *p) { /* elements 8j.., p aligned */
    const kiln_v16 r = *reinterpret_cast<const kiln_v16 *>(p);
#pragma unroll
    for (int q = 0; q < 4; ++q)
      w[4 * j + q] = r.w[q];
  }
};
template <int E> struct kiln_softmax_vals<float, E> {
  float v[E];
  __device__ __forceinline__ float get(int k) const {
    return v[k];
  }
  template <typename U> __device__ __forceinline__ void set(int k, const U *p) {
    v[k] = kiln_load_f32(p);
  }
  /* elements 4j.., p aligned; U is float (a scalar kind's dead branch names others) */
  template <typename U> __device__ __forceinline__ void set_vec(int j, const U *p) {
    const kiln_v16 r = *reinterpret_cast<const kiln_v16 *>(p);
#pragma unroll
    for (int q = 0; q < 4; ++q)
      v[4 * j + q] = __uint_as_float(r.w[q]);
  }
};

/* How the functions below hold a row of T: as stored (vector loads fill
 * whole registers). The scalar kinds use the functions above; this only
 * types the branch they compile but never run. */
template <bool kVec, typename T> struct kiln_softmax_held { typedef T type; };
template <typename T> struct kiln_softmax_held<false, T> { typedef float type; };

/* Loads this thread's elements of row p (columns < lim) into vals. */
template <bool kVec, int E, int kWidth, typename S, typename T>
__device__ __forceinline__ void kiln_softmax_hold(kiln_softmax_vals<S, E> &vals, const T *p,
                                                  int tid, int lim) {
  const int V = kiln_softmax_vec<T>::value;
  if (kVec) {
#pragma unroll
    for (int j = 0; j < E / V; ++j) {
      const int col0 = (j * kWidth + tid) * V;
      if (col0 < lim) vals.set_vec(j, p + col0);
    }
  } else {
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const int col = k * kWidth + tid;
      if (col < lim) vals.set(k, p + col);
    }
  }
}

/* kWidth threads share the row; tid is this thread's index among them.
 * red: 64 floats of shared memory for kWidth > 32 (max uses the first 32,
 * sum the last 32, so back-to-back rows need no extra barrier). x is held as
 * stored; t = log2(e) * scale * x is recomputed in each pass (cheaper than
 * the registers to keep it). */
template <int kUnit, bool kVec, int E, int kWidth, typename T>
__device__ __forceinline__ void kiln_softmax_fwd_regs(T *y, const T *x, const kiln_softmax_row &r,
                                                      int cols, float c, int tid, float *red) {
  static_assert(E >= 1 && E <= 32, "E bits must fit the participation mask");
  static_assert(!kVec || E % 8 == 0, "vector kinds hold whole vectors of every dtype");
  kiln_softmax_vals<typename kiln_softmax_held<kVec, T>::type, E> xv = {};
  kiln_softmax_hold<kVec, E, kWidth>(xv, x + r.off, tid, r.lim);
  unsigned in = kiln_softmax_part<kUnit, kVec, E, kWidth, T>(r, 0, tid); /* bit k: takes part */
  float m = kiln_neg_inf();
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const float t = xv.get(k) * c;
    if (t == kiln_neg_inf()) in &= ~(1u << k); /* scale * x == -inf takes no part either */
    if ((in >> k) & 1u) m = fmaxf(m, t);
  }
  m = kiln_softmax_row_max<kWidth>(m, red);

  /* c1, c2: c, as values the compiler cannot prove equal to c (m * 0 is not
   * 0 for m = inf or NaN), so that it recomputes t = x * c in each pass
   * rather than keep E floats live across the reductions. Equal to c
   * whenever a result depends on them: m is finite once anything takes
   * part (nothing does when m = -inf), and +inf or NaN in m makes every
   * participating y NaN either way. Likewise `in` passes through a shuffle
   * from the thread's own lane before each pass: the same bits, but a value
   * the compiler must test afresh, instead of keeping E predicates (one per
   * element: the masked unit's are not per vector) live across the
   * reductions, which spills at the 64 registers of 32 warps per SM. Every
   * lane of the warp is here, as for the reductions. */
  in = __shfl_xor_sync(0xffffffffu, in, 0);
  const float c1 = c + m * 0.f;
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < E; ++k)
    if ((in >> k) & 1u) s += kiln_exp2f(xv.get(k) * c1 - m);
  s = kiln_softmax_row_sum<kWidth>(s, kWidth == 32 ? red : red + 32); /* red is null for a warp */
  const float inv = 1.f / s; /* s >= 1 if anything takes part, else unused */
  const float c2 = c + inv * 0.f;
  in = __shfl_xor_sync(0xffffffffu, in, 0);
  kiln_softmax_emit<kVec, E, kWidth>(
      y + r.off, [&](int k) { return (in >> k) & 1u ? kiln_exp2f(xv.get(k) * c2 - m) * inv : 0.f; },
      0, tid, cols);
}

/* red: 32 floats of shared memory for kWidth > 32; callers alternate two
 * buffers between consecutive rows (one reduction per row). */
template <bool kVec, int kWidth, int E, typename T>
__device__ __forceinline__ void kiln_softmax_bwd_regs(T *dx, const T *y, const T *dy,
                                                      const kiln_softmax_row &r, int cols,
                                                      float scale, int tid, float *red) {
  kiln_softmax_vals<typename kiln_softmax_held<kVec, T>::type, E> yv = {}, gv = {};
  kiln_softmax_hold<kVec, E, kWidth>(yv, y + r.off, tid, r.lim);
  kiln_softmax_hold<kVec, E, kWidth>(gv, dy + r.off, tid, r.lim);
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < E; ++k)
    if (kiln_softmax_col<kVec, T, kWidth>(k, tid) < r.lim) s += yv.get(k) * gv.get(k);
  s = kiln_softmax_row_sum<kWidth>(s, red);
  /* lt: columns left from this thread's first one; the element tests below
   * compare it with constants. It passes through a shuffle from the thread's
   * own lane (as the forward's `in`), so the compiler recomputes E cheap
   * predicates after the reduction rather than keep them live across it,
   * which spills the 16-bit v1k (sm_100+) at 64 registers. Every lane of the
   * warp is here, as for the reduction. */
  const int lt = r.lim - __shfl_xor_sync(0xffffffffu, kiln_softmax_col<kVec, T, kWidth>(0, tid), 0);
  kiln_softmax_emit<kVec, E, kWidth>(
      dx + r.off,
      [&](int k) {
        return kiln_softmax_col<kVec, T, kWidth>(k, 0) < lt ? scale * (yv.get(k) * (gv.get(k) - s))
                                                            : 0.f;
      },
      0, tid, cols);
}

/* ---- kernel bodies, one per kind; <kUnit, kVec, E, kThreads> --------------
 * Backward needs no mask: masked positions have y == 0 and so dx == 0. The
 * causal unit still uses its limit so it neither reads nor computes the
 * upper triangle (bar the rest of a vector that the limit cuts), and writes
 * dx = 0 there. */

template <int kUnit> struct kiln_softmax_bwd_unit {
  enum { value = kUnit == KILN_SOFTMAX_CAUSAL ? KILN_SOFTMAX_CAUSAL : KILN_SOFTMAX_PLAIN };
};

template <int kUnit, bool kVec, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_fwd_w(T *y, const T *x, const kiln_u8 *mask,
                                                   float scale, kiln_i64 rows, int cols, int sq,
                                                   int heads, int mask_batches) {
  const int warps = kThreads / 32;
  const float c = scale * KILN_LOG2E;
  for (kiln_i64 row = (kiln_i64)blockIdx.x * warps + (threadIdx.x >> 5); row < rows;
       row += (kiln_i64)gridDim.x * warps) {
    const kiln_softmax_row r = kiln_softmax_row_at<kUnit>(row, cols, mask, sq, heads, mask_batches);
    if (kVec)
      kiln_softmax_fwd_regs<kUnit, kVec, E, 32>(y, x, r, cols, c, threadIdx.x & 31, (float *)0);
    else
      kiln_softmax_fwd_regs_scalar<kUnit, E, 32>(y, x, r, cols, c, threadIdx.x & 31, (float *)0);
  }
}

template <int kUnit, bool kVec, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_bwd_w(T *dx, const T *y, const T *dy, float scale,
                                                   kiln_i64 rows, int cols, int sq) {
  const int warps = kThreads / 32;
  for (kiln_i64 row = (kiln_i64)blockIdx.x * warps + (threadIdx.x >> 5); row < rows;
       row += (kiln_i64)gridDim.x * warps) {
    const kiln_softmax_row r =
        kiln_softmax_row_at<kiln_softmax_bwd_unit<kUnit>::value>(row, cols, 0, sq, 1, 1);
    if (kVec)
      kiln_softmax_bwd_regs<kVec, 32, E>(dx, y, dy, r, cols, scale, threadIdx.x & 31, (float *)0);
    else
      kiln_softmax_bwd_regs_scalar<32, E>(dx, y, dy, r, cols, scale, threadIdx.x & 31, (float *)0);
  }
}

template <int kUnit, bool kVec, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_fwd_b(T *y, const T *x, const kiln_u8 *mask,
                                                   float scale, kiln_i64 rows, int cols, int sq,
                                                   int heads, int mask_batches) {
  __shared__ float red[64];
  const float c = scale * KILN_LOG2E;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const kiln_softmax_row r = kiln_softmax_row_at<kUnit>(row, cols, mask, sq, heads, mask_batches);
    if (kVec)
      kiln_softmax_fwd_regs<kUnit, kVec, E, kThreads>(y, x, r, cols, c, threadIdx.x, red);
    else
      kiln_softmax_fwd_regs_scalar<kUnit, E, kThreads>(y, x, r, cols, c, threadIdx.x, red);
  }
}

template <int kUnit, bool kVec, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_bwd_b(T *dx, const T *y, const T *dy, float scale,
                                                   kiln_i64 rows, int cols, int sq) {
  __shared__ float red[64];
  int parity = 0;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 32) {
    const kiln_softmax_row r =
        kiln_softmax_row_at<kiln_softmax_bwd_unit<kUnit>::value>(row, cols, 0, sq, 1, 1);
    if (kVec)
      kiln_softmax_bwd_regs<kVec, kThreads, E>(dx, y, dy, r, cols, scale, threadIdx.x,
                                               red + parity);
    else
      kiln_softmax_bwd_regs_scalar<kThreads, E>(dx, y, dy, r, cols, scale, threadIdx.x,
                                                red + parity);
  }
}

/* g forward. Pass 1 keeps a per-thread running max m and a sum s of
 * exp2(t - m) over the thread's participating elements; s == 0 exactly when
 * the thread has none so far (otherwise s >= 1, or NaN once a NaN/+inf was
 * seen), which is what guards the rescale against exp2(-inf - -inf). The
 * block then combines (m, s) into the row's max M and sum S. Chunks of
 * kThreads * U columns; every thread runs every chunk. */
template <int kUnit, bool kVec, int kThreads, typename T>
__device__ __forceinline__ void
kiln_softmax_g_chunk(float *v, const T *x, const kiln_softmax_row &r, kiln_i64 base, float c) {
  const int U = KILN_SOFTMAX_G_UNROLL;
  if (!kVec) { /* one test per element: the bit mask costs registers here (sm_120 spills) */
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const kiln_i64 col = base + (kiln_i64)u * kThreads + threadIdx.x;
      v[u] = col < r.lim ? kiln_softmax_load<kUnit>(x, r, col, c) : kiln_neg_inf();
    }
    return;
  }
  const unsigned in = kiln_softmax_part<kUnit, kVec, U, kThreads, T>(r, base, threadIdx.x);
  kiln_softmax_read<kVec, U, kThreads>(v, x + r.off, base, threadIdx.x, r.lim);
#pragma unroll
  for (int u = 0; u < U; ++u)
    v[u] = (in >> u) & 1u ? v[u] * c : kiln_neg_inf();
}

template <int kUnit, bool kVec, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_fwd_g(T *y, const T *x, const kiln_u8 *mask,
                                                   float scale, kiln_i64 rows, int cols, int sq,
                                                   int heads, int mask_batches) {
  const int U = KILN_SOFTMAX_G_UNROLL;
  __shared__ float red[64];
  const float c = scale * KILN_LOG2E;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const kiln_softmax_row r = kiln_softmax_row_at<kUnit>(row, cols, mask, sq, heads, mask_batches);
    float m = kiln_neg_inf(), s = 0.f;
    for (kiln_i64 base = 0; base < r.lim; base += kThreads * U) {
      float v[U];
      kiln_softmax_g_chunk<kUnit, kVec, kThreads>(v, x, r, base, c);
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
    for (kiln_i64 base = 0; base < cols; base += kThreads * U) {
      float v[U];
      kiln_softmax_g_chunk<kUnit, kVec, kThreads>(v, x, r, base, c);
#pragma unroll
      for (int u = 0; u < U; ++u)
        v[u] = v[u] != kiln_neg_inf() ? kiln_exp2f(v[u] - rm) * inv : 0.f;
      kiln_softmax_write<kVec, U, kThreads>(y + r.off, v, base, threadIdx.x, cols);
    }
  }
}

template <int kUnit, bool kVec, int E, int kThreads, typename T>
__device__ __forceinline__ void kiln_softmax_bwd_g(T *dx, const T *y, const T *dy, float scale,
                                                   kiln_i64 rows, int cols, int sq) {
  const int U = KILN_SOFTMAX_G_UNROLL;
  __shared__ float red[64];
  int parity = 0;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 32) {
    const kiln_softmax_row r =
        kiln_softmax_row_at<kiln_softmax_bwd_unit<kUnit>::value>(row, cols, 0, sq, 1, 1);
    float s = 0.f;
    for (kiln_i64 base = 0; base < r.lim; base += kThreads * U) {
      float yv[U], gv[U];
      kiln_softmax_read<kVec, U, kThreads>(yv, y + r.off, base, threadIdx.x, r.lim);
      kiln_softmax_read<kVec, U, kThreads>(gv, dy + r.off, base, threadIdx.x, r.lim);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (base + kiln_softmax_col<kVec, T, kThreads>(u, threadIdx.x) < r.lim) s += yv[u] * gv[u];
    }
    s = kiln_block_sum<kThreads>(s, red + parity);
    for (kiln_i64 base = 0; base < cols; base += kThreads * U) {
      float yv[U], gv[U];
      kiln_softmax_read<kVec, U, kThreads>(yv, y + r.off, base, threadIdx.x, r.lim);
      kiln_softmax_read<kVec, U, kThreads>(gv, dy + r.off, base, threadIdx.x, r.lim);
#pragma unroll
      for (int u = 0; u < U; ++u)
        yv[u] = base + kiln_softmax_col<kVec, T, kThreads>(u, threadIdx.x) < r.lim
                    ? scale * (yv[u] * (gv[u] - s))
                    : 0.f;
      kiln_softmax_write<kVec, U, kThreads>(dx + r.off, yv, base, threadIdx.x, cols);
    }
  }
}

/* The vector kinds: the same bodies with 16-byte access. */
#define KILN_SOFTMAX_VEC_KIND_(kind)                                                               \
  template <int kUnit, bool kVec, int E, int kThreads, typename T>                                 \
  __device__ __forceinline__ void kiln_softmax_fwd_##kind##v(                                      \
      T *y, const T *x, const kiln_u8 *mask, float scale, kiln_i64 rows, int cols, int sq,         \
      int heads, int mask_batches) {                                                               \
    kiln_softmax_fwd_##kind<kUnit, true, E, kThreads>(y, x, mask, scale, rows, cols, sq, heads,    \
                                                      mask_batches);                               \
  }                                                                                                \
  template <int kUnit, bool kVec, int E, int kThreads, typename T>                                 \
  __device__ __forceinline__ void kiln_softmax_bwd_##kind##v(                                      \
      T *dx, const T *y, const T *dy, float scale, kiln_i64 rows, int cols, int sq) {              \
    kiln_softmax_bwd_##kind<kUnit, true, E, kThreads>(dx, y, dy, scale, rows, cols, sq);           \
  }
KILN_SOFTMAX_VEC_KIND_(w)
KILN_SOFTMAX_VEC_KIND_(b)
KILN_SOFTMAX_VEC_KIND_(g)
#undef KILN_SOFTMAX_VEC_KIND_

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

/* __launch_bounds__ per kind: the block size, and for the vector kinds a
 * minimum of resident blocks per SM (docs/kernels/softmax.md).
 * The vector kinds ask for 32 warps per SM (1024 / threads blocks), which
 * keeps them within 64 registers per thread: their rows are held two 16-bit
 * values per register and read in whole vectors, at most 16 elements per
 * thread in a block kind (v16k takes 1024 threads rather than 32 elements
 * each: 512 x 32 spills under this bound). Not the fp32 backward of 32
 * elements per thread (v1k), whose 64 floats of y and dy alone fill 64
 * registers (it would spill), nor the scalar kinds, whose element-wise loads
 * of packed values spill under that bound: they keep the registers they
 * need. No entry may spill or have a stack frame on any target
 * (integration.resources, integration.all_targets). */
#define KILN_SOFTMAX_BOUNDS_w(dt, bwd, elems, threads) __launch_bounds__(threads)
#define KILN_SOFTMAX_BOUNDS_b(dt, bwd, elems, threads) __launch_bounds__(threads)
#define KILN_SOFTMAX_BOUNDS_g(dt, bwd, elems, threads) __launch_bounds__(threads)
#define KILN_SOFTMAX_BOUNDS_V_(dt, bwd, elems, threads)                                            \
  __launch_bounds__(threads, sizeof(kiln_softmax_ctype_##dt) == 4 && (bwd) && (elems) >= 32        \
                                 ? 1                                                               \
                                 : 1024 / (threads))
#define KILN_SOFTMAX_BOUNDS_wv KILN_SOFTMAX_BOUNDS_V_
#define KILN_SOFTMAX_BOUNDS_bv KILN_SOFTMAX_BOUNDS_V_
#define KILN_SOFTMAX_BOUNDS_gv KILN_SOFTMAX_BOUNDS_V_

#define KILN_SOFTMAX_ENTRY_PAIR_(dt, v, kind, elems, threads)                                      \
  extern "C" __global__ void KILN_SOFTMAX_BOUNDS_##kind(dt, 0, elems, threads)                     \
      KILN_SOFTMAX_NAME(KILN_SOFTMAX_THIS_UNIT, fwd, dt, v)(                                       \
          kiln_softmax_ctype_##dt * y, const kiln_softmax_ctype_##dt *x, const kiln_u8 *mask,      \
          float scale, long long rows, int cols, int sq, int heads, int mask_batches) {            \
    kiln_softmax_fwd_##kind<KILN_SOFTMAX_THIS_KIND, false, elems, threads>(                        \
        y, x, mask, scale, rows, cols, sq, heads, mask_batches);                                   \
  }                                                                                                \
  extern "C" __global__ void KILN_SOFTMAX_BOUNDS_##kind(dt, 1, elems, threads)                     \
      KILN_SOFTMAX_NAME(KILN_SOFTMAX_THIS_UNIT, bwd, dt, v)(                                       \
          kiln_softmax_ctype_##dt * dx, const kiln_softmax_ctype_##dt *y,                          \
          const kiln_softmax_ctype_##dt *dy, float scale, long long rows, int cols, int sq) {      \
    kiln_softmax_bwd_##kind<KILN_SOFTMAX_THIS_KIND, false, elems, threads>(dx, y, dy, scale, rows, \
                                                                           cols, sq);              \
  }

#define KILN_SOFTMAX_ENTRY_DTYPE_(a, dt, ctype) KILN_SOFTMAX_VARIANTS(KILN_SOFTMAX_ENTRY_PAIR_, dt)

#define KILN_SOFTMAX_DEFINE_ENTRY_POINTS()                                                         \
  static_assert(KILN_SOFTMAX_PASTE(kiln_softmax_unit_id_, KILN_SOFTMAX_THIS_UNIT) >= 0,            \
                "unit missing from softmax_variants.def");                                         \
  KILN_SOFTMAX_DTYPES(KILN_SOFTMAX_ENTRY_DTYPE_, ~)

#endif /* KILN_SOFTMAX_CORE_CUH */
