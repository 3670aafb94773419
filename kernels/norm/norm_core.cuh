/* norm_core.cuh — templates behind every layer_norm and rms_norm entry point
 * (docs/kernels/norm.md has the full contract).
 *
 *   LayerNorm  y = (x - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + eps),
 *              var the biased variance of the row.
 *   RMSNorm    y = x * rstd * gamma, rstd = 1/sqrt(mean(x^2) + eps).
 *   backward   xh = (x - mean) * rstd (RMS: x * rstd), g = dy * gamma,
 *              LN  dx = rstd * (g - mean(g) - xh * mean(g * xh)),
 *              RMS dx = rstd * (g - xh * mean(g * xh)),
 *              dgamma = sum_rows dy * xh, dbeta = sum_rows dy.
 * All math in fp32; x, y, dx, dy are T (f32, f16, bf16), gamma, beta and
 * their gradients W (f32 or T).
 *
 * Two paths, both one block of KILN_NORM_THREADS per row (the r backward:
 * KILN_NORM_BWD_R_THREADS), grid-stride over rows (any grid is correct):
 *   r  the row lives in registers: thread t holds the 16-byte vectors
 *      k * KILN_NORM_THREADS + t, k < KILN_NORM_R_VECS, so the row is read
 *      from memory once. Contract: cols % KILN_VEC(T) == 0,
 *      cols <= KILN_NORM_R_CAP(T), every row tensor and gamma/beta 16-byte
 *      aligned (the launcher checks; tests/fakecuda enforces).
 *      LayerNorm's variance is the exact two-pass sum((x - mean)^2) over
 *      the registers.
 *   g  any cols and alignment, scalar accesses, KILN_NORM_G_UNROLL loads in
 *      flight per thread. Forward: one pass of per-chunk Welford statistics
 *      merged with Chan's formula (symmetric, so every lane of a butterfly
 *      gets the same bits), then a second pass that writes.
 *
 * Backward: the rows are dealt to `parts` (1 <= parts <= rows, a function of
 * rows and cols only): part p takes rows p, p + parts, ... in order, and
 * leaves sum dy * xh and sum dy per column in fp32 at ws_g[p * cols + col]
 * (ws_b likewise). Blocks grid-stride over parts. The bwdw entry then sums
 * the parts of each column in a fixed order (kiln_norm_bwdw). Nothing depends on the grid
 * or on timing: the same bits every run, no atomics.
 *
 * In place (y == x, dx == dy) is fine: each element is read by the thread
 * that writes it, before it writes it. */
#ifndef KILN_NORM_CORE_CUH
#define KILN_NORM_CORE_CUH

#include "common/kiln_types.cuh"
#include "common/kiln_vec.cuh"

#define KILN_NORM_THREADS 256
/* 16-byte vectors per thread in the r path. */
#define KILN_NORM_R_VECS 4
#define KILN_NORM_R_CAP(T) (KILN_NORM_THREADS * KILN_NORM_R_VECS * KILN_VEC(T))
#define KILN_NORM_G_UNROLL 8
/* The r backward: twice the threads, half the vectors each (same capacity). */
#define KILN_NORM_BWD_R_THREADS 512
#define KILN_NORM_BWD_R_VECS (KILN_NORM_R_VECS * KILN_NORM_THREADS / KILN_NORM_BWD_R_THREADS)
/* bwdw's column tiles: at least this many (two per SM of a 132-SM H100)
 * where 4-column tiles allow; see kiln_norm_bwdw_width. */
#define KILN_NORM_BWDW_MIN_TILES 256
/* The g forward's int column arithmetic (col + KILN_NORM_G_UNROLL *
 * KILN_NORM_THREADS) stays in range for cols up to this; the launcher
 * rejects more. (Unsigned arithmetic there costs a spill on sm_80.) */
#define KILN_NORM_MAX_COLS (2147483647 - KILN_NORM_G_UNROLL * KILN_NORM_THREADS)

/* Divisions are __fdividef (2 ulp, no slow-path subroutine: an IEEE `/`
 * calls one, which costs a stack frame on some targets). */

/* ---- helpers --------------------------------------------------------------- */

/* n = KILN_VEC(T) weights from p (16-byte aligned) as fp32. W is float or T,
 * so n is a multiple of KILN_VEC(W). */
template <int N, typename W>
__device__ __forceinline__ void kiln_norm_load_w(const W *p, float *v) {
#pragma unroll
  for (int i = 0; i < N; i += KILN_VEC(W))
    kiln_load_vec(p + i, v + i);
}

/* Two sums over the block at once; buf: 64 floats, one __syncthreads, none
 * trailing (same reuse rule as kiln_block_sum). */
template <int kWarps = KILN_NORM_THREADS / 32>
__device__ __forceinline__ void kiln_norm_block_sum2(float *a, float *b, float *buf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float x = kiln_warp_sum(*a), y = kiln_warp_sum(*b);
  if (lane == 0) {
    buf[warp] = x;
    buf[32 + warp] = y;
  }
  __syncthreads();
  const bool in = lane < kWarps;
  *a = kiln_warp_sum(in ? buf[lane] : 0.f);
  *b = kiln_warp_sum(in ? buf[32 + lane] : 0.f);
}

/* Welford statistics: count, mean, sum of squared deviations. */
struct kiln_norm_stat {
  float n, m, m2;
};

/* Chan's merge, symmetric in (a, b) so that both lanes of a butterfly step
 * compute the same bits. Every product and sum is rounded explicitly
 * (__fmul_rn / __fadd_rn are never contracted): NVRTC would otherwise fuse
 * a.n * a.m + b.n * b.m into fma(a.n, a.m, b.n * b.m) on one lane and
 * fma(b.n, b.m, a.n * a.m) on the other, which round differently. The rest
 * is symmetric as written: d and -d square to the same bits. */
__device__ __forceinline__ kiln_norm_stat kiln_norm_merge(kiln_norm_stat a, kiln_norm_stat b) {
  kiln_norm_stat r;
  r.n = __fadd_rn(a.n, b.n);
  if (r.n == 0.f) return a;
  const float inv = __fdividef(1.f, r.n);
  const float d = __fadd_rn(b.m, -a.m);
  r.m = __fmul_rn(__fadd_rn(__fmul_rn(a.n, a.m), __fmul_rn(b.n, b.m)), inv);
  r.m2 = __fadd_rn(__fadd_rn(a.m2, b.m2),
                   __fmul_rn(__fmul_rn(d, d), __fmul_rn(__fmul_rn(a.n, b.n), inv)));
  return r;
}

__device__ __forceinline__ kiln_norm_stat kiln_norm_warp_stat(kiln_norm_stat s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    kiln_norm_stat t;
    t.n = __shfl_xor_sync(0xffffffffu, s.n, o);
    t.m = __shfl_xor_sync(0xffffffffu, s.m, o);
    t.m2 = __shfl_xor_sync(0xffffffffu, s.m2, o);
    s = kiln_norm_merge(s, t);
  }
  return s;
}

/* buf: 96 floats; one __syncthreads, none trailing. */
__device__ __forceinline__ kiln_norm_stat kiln_norm_block_stat(kiln_norm_stat s, float *buf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  s = kiln_norm_warp_stat(s);
  if (lane == 0) {
    buf[warp] = s.n;
    buf[32 + warp] = s.m;
    buf[64 + warp] = s.m2;
  }
  __syncthreads();
  kiln_norm_stat t = {0.f, 0.f, 0.f};
  if (lane < KILN_NORM_THREADS / 32) {
    t.n = buf[lane];
    t.m = buf[32 + lane];
    t.m2 = buf[64 + lane];
  }
  return kiln_norm_warp_stat(t);
}

/* ---- forward ------------------------------------------------------------------ */

template <bool kLN, typename T, typename W>
__device__ __forceinline__ void kiln_norm_fwd_r(T *y, float *mean_out, float *rstd_out, const T *x,
                                                const W *gamma, const W *beta, kiln_i64 rows,
                                                int cols, float eps) {
  const int V = KILN_VEC(T), E = KILN_NORM_R_VECS;
  __shared__ float red[128];
  const float inv_cols = __fdividef(1.f, (float)cols);
  int parity = 0;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const kiln_i64 off = row * cols;
    float v[E * V];
    float s = 0.f, unused = 0.f;
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const int col = (k * KILN_NORM_THREADS + (int)threadIdx.x) * V;
      if (col < cols) {
        kiln_load_vec(x + off + col, v + k * V);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i)
          v[k * V + i] = 0.f;
      }
    }
    float mean = 0.f;
    if (kLN) {
#pragma unroll
      for (int i = 0; i < E * V; ++i)
        s += v[i];
      kiln_norm_block_sum2(&s, &unused, red);
      mean = s * inv_cols;
      s = 0.f;
#pragma unroll
      for (int k = 0; k < E; ++k) {
        const int col = (k * KILN_NORM_THREADS + (int)threadIdx.x) * V;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const float d = v[k * V + i] - mean;
          s += col < cols ? d * d : 0.f;
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < E * V; ++i)
        s += v[i] * v[i];
    }
    unused = 0.f;
    /* LayerNorm's two sums per row use both halves of red, so a warp cannot
     * reach this row's second sum before every warp has read the previous
     * row's. RMSNorm has one sum per row: it alternates the halves by row
     * parity for the same guarantee (a block takes several rows when
     * rows > grid). */
    kiln_norm_block_sum2(&s, &unused, kLN ? red + 64 : red + 64 * parity);
    parity ^= 1;
    const float rstd = rsqrtf(s * inv_cols + eps);
    if (threadIdx.x == 0) {
      if (kLN && mean_out) mean_out[row] = mean;
      if (rstd_out) rstd_out[row] = rstd;
    }
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const int col = (k * KILN_NORM_THREADS + (int)threadIdx.x) * V;
      if (col < cols) {
        float g[V], o[V];
        kiln_norm_load_w<V>(gamma + col, g);
        if (kLN) {
          float b[V];
          kiln_norm_load_w<V>(beta + col, b);
#pragma unroll
          for (int i = 0; i < V; ++i)
            o[i] = (v[k * V + i] - mean) * rstd * g[i] + b[i];
        } else {
#pragma unroll
          for (int i = 0; i < V; ++i)
            o[i] = v[k * V + i] * rstd * g[i];
        }
        kiln_store_vec(y + off + col, o);
      }
    }
  }
}

template <bool kLN, typename T, typename W>
__device__ __forceinline__ void kiln_norm_fwd_g(T *y, float *mean_out, float *rstd_out, const T *x,
                                                const W *gamma, const W *beta, kiln_i64 rows,
                                                int cols, float eps) {
  const int U = KILN_NORM_G_UNROLL;
  __shared__ float red[2][96];
  int parity = 0;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const T *xr = x + row * cols;
    T *yr = y + row * cols;
    kiln_norm_stat st = {0.f, 0.f, 0.f};
    float ss = 0.f; /* RMS: sum of squares */
    for (int base = threadIdx.x; base < cols; base += U * KILN_NORM_THREADS) {
      float v[U];
      int c = 0;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int col = base + u * KILN_NORM_THREADS;
        v[u] = col < cols ? kiln_load_f32(xr + col) : 0.f;
        c += col < cols;
      }
      if (kLN) {
        float s = 0.f;
#pragma unroll
        for (int u = 0; u < U; ++u)
          s += v[u];
        kiln_norm_stat ch;
        ch.n = (float)c;
        ch.m = __fdividef(s, ch.n);
        ch.m2 = 0.f;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const float d = v[u] - ch.m;
          ch.m2 += u < c ? d * d : 0.f;
        }
        st = kiln_norm_merge(st, ch);
      } else {
#pragma unroll
        for (int u = 0; u < U; ++u)
          ss += v[u] * v[u];
      }
    }
    float mean = 0.f, rstd;
    if (kLN) {
      st = kiln_norm_block_stat(st, red[parity]);
      mean = st.m;
      rstd = rsqrtf(__fdividef(st.m2, (float)cols) + eps);
    } else {
      float unused = 0.f;
      kiln_norm_block_sum2(&ss, &unused, red[parity]);
      rstd = rsqrtf(__fdividef(ss, (float)cols) + eps);
    }
    if (threadIdx.x == 0) {
      if (kLN && mean_out) mean_out[row] = mean;
      if (rstd_out) rstd_out[row] = rstd;
    }
    for (int base = threadIdx.x; base < cols; base += U * KILN_NORM_THREADS) {
      float v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int col = base + u * KILN_NORM_THREADS;
        v[u] = col < cols ? kiln_load_f32(xr + col) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int col = base + u * KILN_NORM_THREADS;
        if (col < cols) {
          const float g = kiln_load_f32(gamma + col);
          const float o =
              kLN ? (v[u] - mean) * rstd * g + kiln_load_f32(beta + col) : v[u] * rstd * g;
          kiln_store_f32(yr + col, o);
        }
      }
    }
  }
}

/* ---- backward ------------------------------------------------------------------
 * LN passes mean; RMS passes mean == NULL (xh = x * rstd) and ws_b == NULL. */

/* A 16-byte vector held as loaded, unpacked to fp32 when used: the r
 * backward keeps x and dy packed so that 16-bit rows take half the
 * registers. */
__device__ __forceinline__ void kiln_norm_unpack(const kiln_v16 &r, float *v, const float *) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    v[i] = __uint_as_float(r.w[i]);
}
template <typename T>
__device__ __forceinline__ void kiln_norm_unpack(const kiln_v16 &r, float *v, const T *t) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = kiln_lo_f32(r.w[i], t);
    v[2 * i + 1] = kiln_hi_f32(r.w[i], t);
  }
}

/* The r backward: blocks of KILN_NORM_BWD_R_THREADS (512), each thread
 * holding KILN_NORM_BWD_R_VECS (2) vectors of x and dy, packed as loaded (1
 * register per 16-bit element), and one of the two column accumulators
 * (LayerNorm's sum dy * xh) in registers; the other (LayerNorm's sum dy,
 * RMSNorm's only one) lives in shared memory, one slot per element the
 * thread owns, at [j][t] so that a warp's accesses hit 32 banks. A thread
 * only touches its own slots: no barrier guards them. With 256 threads and
 * both accumulators in registers (3 per 16-bit element) the entry took
 * 126-128 registers: 2 blocks of 256, 16 warps per SM; this way at most 64
 * (__launch_bounds__(512, 2)), 32 warps per SM, no spills
 * (docs/kernels/norm.md, "Registers"). */
template <typename T> struct kiln_norm_r_acc {
  float v[KILN_NORM_BWD_R_VECS * KILN_VEC(T)][KILN_NORM_BWD_R_THREADS];
};

template <bool kLN, typename T, typename W>
__device__ __forceinline__ void
kiln_norm_bwd_r(T *dx, float *ws_g, float *ws_b, const T *dy, const T *x, const float *mean,
                const float *rstd, const W *gamma, kiln_i64 rows, int cols, int parts) {
  const int V = KILN_VEC(T), E = KILN_NORM_BWD_R_VECS, t = (int)threadIdx.x;
  __shared__ float red[2][64];
  __shared__ kiln_norm_r_acc<T> sacc; /* LN: sum dy; RMS: sum dy * xh */
  const float inv_cols = __fdividef(1.f, (float)cols);
  int parity = 0;
  for (int p = blockIdx.x; p < parts; p += gridDim.x) {
    float ag[kLN ? E * V : 1]; /* LN: sum dy * xh */
#pragma unroll
    for (int i = 0; i < E * V; ++i) {
      if (kLN) ag[i] = 0.f;
      sacc.v[i][t] = 0.f;
    }
    for (kiln_i64 row = p; row < rows; row += parts, parity ^= 1) {
      const kiln_i64 off = row * cols;
      const float r = rstd[row];
      const float mu = kLN ? mean[row] : 0.f;
      kiln_v16 xr[E], dr[E];
      float s1 = 0.f, s2 = 0.f;
#pragma unroll
      for (int k = 0; k < E; ++k) {
        const int col = (k * KILN_NORM_BWD_R_THREADS + t) * V;
        if (col < cols) {
          xr[k] = *reinterpret_cast<const kiln_v16 *>(x + off + col);
          dr[k] = *reinterpret_cast<const kiln_v16 *>(dy + off + col);
        }
      }
#pragma unroll
      for (int k = 0; k < E; ++k) {
        const int col = (k * KILN_NORM_BWD_R_THREADS + t) * V;
        if (col < cols) {
          float g[V], xv[V], dv[V];
          kiln_norm_load_w<V>(gamma + col, g);
          kiln_norm_unpack(xr[k], xv, x);
          kiln_norm_unpack(dr[k], dv, x);
#pragma unroll
          for (int i = 0; i < V; ++i) {
            const float gj = dv[i] * g[i];
            s1 += gj;
            s2 += gj * ((xv[i] - mu) * r);
          }
        }
      }
      kiln_norm_block_sum2<KILN_NORM_BWD_R_THREADS / 32>(&s1, &s2, red[parity]);
      const float c1 = kLN ? s1 * inv_cols : 0.f, c2 = s2 * inv_cols;
#pragma unroll
      for (int k = 0; k < E; ++k) {
        const int col = (k * KILN_NORM_BWD_R_THREADS + t) * V;
        if (col < cols) {
          float g[V], xv[V], dv[V], o[V];
          kiln_norm_load_w<V>(gamma + col, g);
          kiln_norm_unpack(xr[k], xv, x);
          kiln_norm_unpack(dr[k], dv, x);
#pragma unroll
          for (int i = 0; i < V; ++i) {
            const int j = k * V + i;
            const float xh = (xv[i] - mu) * r;
            o[i] = r * (dv[i] * g[i] - c1 - xh * c2);
            if (kLN) {
              ag[j] += dv[i] * xh;
              sacc.v[j][t] += dv[i];
            } else {
              sacc.v[j][t] += dv[i] * xh;
            }
          }
          kiln_store_vec(dx + off + col, o);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const int col = (k * KILN_NORM_BWD_R_THREADS + t) * V;
      if (col < cols) {
        const kiln_i64 w = (kiln_i64)p * cols + col;
#pragma unroll
        for (int i = 0; i < V; i += 4) {
          float s[4];
#pragma unroll
          for (int q = 0; q < 4; ++q)
            s[q] = sacc.v[k * V + i + q][t];
          if (kLN) {
            kiln_store_vec(ws_g + w + i, ag + k * V + i);
            kiln_store_vec(ws_b + w + i, s);
          } else {
            kiln_store_vec(ws_g + w + i, s);
          }
        }
      }
    }
  }
}

template <bool kLN, typename T, typename W>
__device__ __forceinline__ void
kiln_norm_bwd_g(T *dx, float *ws_g, float *ws_b, const T *dy, const T *x, const float *mean,
                const float *rstd, const W *gamma, kiln_i64 rows, int cols, int parts) {
  /* unsigned: col + KILN_NORM_G_UNROLL * KILN_NORM_THREADS cannot overflow */
  const unsigned ucols = (unsigned)cols;
  const int U = KILN_NORM_G_UNROLL / 2; /* three loads per element */
  __shared__ float red[2][64];
  const float inv_cols = __fdividef(1.f, (float)cols);
  int parity = 0;
  for (int p = blockIdx.x; p < parts; p += gridDim.x) {
    float *pg = ws_g + (kiln_i64)p * cols;
    float *pb = kLN ? ws_b + (kiln_i64)p * cols : pg;
    /* columns col = t (mod KILN_NORM_THREADS) are this thread's, below too */
    for (unsigned col = threadIdx.x; col < ucols; col += KILN_NORM_THREADS) {
      pg[col] = 0.f;
      if (kLN) pb[col] = 0.f;
    }
    for (kiln_i64 row = p; row < rows; row += parts, parity ^= 1) {
      const kiln_i64 off = row * cols;
      const float r = rstd[row];
      const float mu = kLN ? mean[row] : 0.f;
      float s1 = 0.f, s2 = 0.f;
      for (unsigned base = threadIdx.x; base < ucols; base += U * KILN_NORM_THREADS) {
        float xv[U], dv[U], gv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const unsigned col = base + u * KILN_NORM_THREADS;
          xv[u] = dv[u] = gv[u] = 0.f;
          if (col < ucols) {
            xv[u] = kiln_load_f32(x + off + col);
            dv[u] = kiln_load_f32(dy + off + col);
            gv[u] = kiln_load_f32(gamma + col);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const float gj = dv[u] * gv[u];
          s1 += gj;
          s2 += gj * ((xv[u] - mu) * r);
        }
      }
      kiln_norm_block_sum2(&s1, &s2, red[parity]);
      const float c1 = kLN ? s1 * inv_cols : 0.f, c2 = s2 * inv_cols;
      for (unsigned base = threadIdx.x; base < ucols; base += U * KILN_NORM_THREADS) {
        float xv[U], dv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const unsigned col = base + u * KILN_NORM_THREADS;
          xv[u] = dv[u] = 0.f;
          if (col < ucols) {
            xv[u] = kiln_load_f32(x + off + col);
            dv[u] = kiln_load_f32(dy + off + col);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const unsigned col = base + u * KILN_NORM_THREADS;
          if (col < ucols) {
            const float xh = (xv[u] - mu) * r;
            const float g = dv[u] * kiln_load_f32(gamma + col);
            kiln_store_f32(dx + off + col, r * (g - c1 - xh * c2));
            /* this thread owns column col of the part: a plain update */
            pg[col] += dv[u] * xh;
            if (kLN) pb[col] += dv[u];
          }
        }
      }
    }
  }
}

/* bwdw's column tile: the widest of 32, 16, 8, 4 columns that still makes
 * at least KILN_NORM_BWDW_MIN_TILES tiles (else 4), so that narrow rows
 * still spread over every SM. A function of cols only: the order of the
 * sums, hence the bits, never depends on the GPU. loader/ops_norm.c sizes
 * the grid with the same function. */
__device__ __forceinline__ int kiln_norm_bwdw_width(int cols) {
  int w = 32;
  while (w > 4 && (cols + w - 1) / w < KILN_NORM_BWDW_MIN_TILES)
    w >>= 1;
  return w;
}

/* dgamma[col] = sum over p in order of ws_g[p * cols + col] (dbeta from ws_b
 * when kLN), in a fixed order. A block takes a tile of `width` columns at a
 * time: thread t sums column t % width of parts s, s + S, ... in order
 * (s = t / width, S = 256 / width streams), and thread s = 0 of each column
 * adds the S stream sums in order, from 0. */
template <bool kLN, typename W>
__device__ __forceinline__ void kiln_norm_bwdw(W *dgamma, W *dbeta, const float *ws_g,
                                               const float *ws_b, int parts, int cols) {
  __shared__ float sg[KILN_NORM_THREADS], sb[KILN_NORM_THREADS];
  const int width = kiln_norm_bwdw_width(cols), streams = KILN_NORM_THREADS / width;
  const int t = (int)threadIdx.x, c = t % width, s = t / width;
  const int tiles = (int)(((unsigned)cols + (unsigned)width - 1u) / (unsigned)width);
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int col = tile * width + c;
    float a = 0.f, b = 0.f;
    if (col < cols) {
#pragma unroll 4
      for (int p = s; p < parts; p += streams) {
        const kiln_i64 i = (kiln_i64)p * cols + col;
        a += ws_g[i];
        if (kLN) b += ws_b[i];
      }
    }
    sg[t] = a; /* t == s * width + c */
    sb[t] = b;
    __syncthreads();
    if (s == 0 && col < cols) {
      a = 0.f;
      b = 0.f;
      for (int q = 0; q < streams; ++q) {
        a += sg[q * width + c];
        b += sb[q * width + c];
      }
      kiln_store_f32(dgamma + col, a);
      if (kLN) kiln_store_f32(dbeta + col, b);
    }
    __syncthreads();
  }
}

/* ---- entry points ---------------------------------------------------------------
 * A unit defines KILN_NORM_THIS_LN (1: layer_norm, 0: rms_norm) and expands
 * its .def with KILN_NORM_ENTRY. */

#define KILN_NORM_CT_f32 float
#define KILN_NORM_CT_f16 kiln_f16
#define KILN_NORM_CT_bf16 kiln_bf16
#define KILN_NORM_W_wf32_r float
#define KILN_NORM_W_wf16_r kiln_f16
#define KILN_NORM_W_wbf16_r kiln_bf16
#define KILN_NORM_W_wf32_g float
#define KILN_NORM_W_wf16_g kiln_f16
#define KILN_NORM_W_wbf16_g kiln_bf16
#define KILN_NORM_PATH_wf32_r r
#define KILN_NORM_PATH_wf16_r r
#define KILN_NORM_PATH_wbf16_r r
#define KILN_NORM_PATH_wf32_g g
#define KILN_NORM_PATH_wf16_g g
#define KILN_NORM_PATH_wbf16_g g
/* The r backward's blocks per SM, as a register bound for ptxas (see
 * kiln_norm_bwd_r); the g path needs no hint. */
#define KILN_NORM_BWD_BOUNDS_r __launch_bounds__(KILN_NORM_BWD_R_THREADS, 2)
#define KILN_NORM_BWD_BOUNDS_g __launch_bounds__(KILN_NORM_THREADS)
#define KILN_NORM_BWD_BOUNDS_wf32_r KILN_NORM_BWD_BOUNDS_r
#define KILN_NORM_BWD_BOUNDS_wf16_r KILN_NORM_BWD_BOUNDS_r
#define KILN_NORM_BWD_BOUNDS_wbf16_r KILN_NORM_BWD_BOUNDS_r
#define KILN_NORM_BWD_BOUNDS_wf32_g KILN_NORM_BWD_BOUNDS_g
#define KILN_NORM_BWD_BOUNDS_wf16_g KILN_NORM_BWD_BOUNDS_g
#define KILN_NORM_BWD_BOUNDS_wbf16_g KILN_NORM_BWD_BOUNDS_g
#define KILN_NORM_CALL_(name, path) name##path
#define KILN_NORM_CALL(name, path) KILN_NORM_CALL_(name, path)

#define KILN_NORM_ENTRY(unit, dir, dt, v) KILN_NORM_ENTRY_##dir(unit, dt, v)

#define KILN_NORM_ENTRY_fwd(unit, dt, v)                                                           \
  extern "C" __global__ void __launch_bounds__(KILN_NORM_THREADS) kiln_##unit##_fwd_##dt##_##v(    \
      KILN_NORM_CT_##dt *y, float *mean, float *rstd, const KILN_NORM_CT_##dt *x,                  \
      const KILN_NORM_W_##v *gamma, const KILN_NORM_W_##v *beta, long long rows, int cols,         \
      float eps) {                                                                                 \
    KILN_NORM_CALL(kiln_norm_fwd_, KILN_NORM_PATH_##v)<KILN_NORM_THIS_LN>(y, mean, rstd, x, gamma, \
                                                                          beta, rows, cols, eps);  \
  }

#define KILN_NORM_ENTRY_bwd(unit, dt, v)                                                           \
  extern "C" __global__ void KILN_NORM_BWD_BOUNDS_##v kiln_##unit##_bwd_##dt##_##v(                \
      KILN_NORM_CT_##dt *dx, float *ws_g, float *ws_b, const KILN_NORM_CT_##dt *dy,                \
      const KILN_NORM_CT_##dt *x, const float *mean, const float *rstd,                            \
      const KILN_NORM_W_##v *gamma, long long rows, int cols, int parts) {                         \
    KILN_NORM_CALL(kiln_norm_bwd_, KILN_NORM_PATH_##v)<KILN_NORM_THIS_LN>(                         \
        dx, ws_g, ws_b, dy, x, mean, rstd, gamma, rows, cols, parts);                              \
  }

#define KILN_NORM_ENTRY_bwdw(unit, dt, v)                                                          \
  extern "C" __global__ void __launch_bounds__(KILN_NORM_THREADS)                                  \
      kiln_##unit##_bwdw_##dt##_##v(KILN_NORM_CT_##dt *dgamma, KILN_NORM_CT_##dt *dbeta,           \
                                    const float *ws_g, const float *ws_b, int parts, int cols) {   \
    kiln_norm_bwdw<KILN_NORM_THIS_LN>(dgamma, dbeta, ws_g, ws_b, parts, cols);                     \
  }

#endif /* KILN_NORM_CORE_CUH */
