/* embedding.cu — unit: the vocabulary-parallel embedding (include/kiln/ops.h,
 * docs/kernels/embedding.md).
 *
 * Entry points (embedding.def), all 1-D grids with grid-stride loops:
 *   fwd_<dt>_g       y[t] = weight[ids[t] - vocab_start] or a zero row; notes
 *                    an id outside [0, vocab_size) in the error block;
 *   err_i64_g        records the noted position (one thread);
 *   bwd_<dt>_atomic  dweight[ids[t] - vocab_start] += dy[t], fp32 atomics;
 *   keys_i64_g       the sort's input: key = id - vocab_start in the
 *                    partition, else rows (sorted last, ignored); pos = t;
 *   hist_i64_g       per-tile counts of one 8-bit digit, digit-major;
 *   scan_i64_g       exclusive scan of those counts in fixed order;
 *   scatter_i64_g    the stable scatter of one LSD radix pass;
 *   bwd_<dt>_pieces  the sums of the tail pieces of long runs of one key;
 *   bwd_<dt>_sorted  per distinct key, the sum of its dy rows in position
 *                    order within each piece, pieces in order, added to
 *                    dweight (no atomics: same bits every run).
 */
#include "common/kiln_errors.cuh"
#include "common/kiln_types.cuh"
#include "common/kiln_vec.cuh"
#include "embedding/embedding.def"

#define KILN_EMB_THREADS 256 /* every entry but err and scan */
#define KILN_EMB_WARPS (KILN_EMB_THREADS / 32)
#define KILN_EMB_SCAN_THREADS 1024                             /* scan: one block */
#define KILN_EMB_TILE_ITEMS 8                                  /* tokens per thread per sort tile */
#define KILN_EMB_TILE (KILN_EMB_THREADS * KILN_EMB_TILE_ITEMS) /* 2048 tokens */
#define KILN_EMB_RADIX 256                                     /* 8-bit digits */
#define KILN_EMB_UNROLL 4 /* 16-byte accesses in flight per thread */
/* The deterministic sums: at most 64 registers (4 blocks per SM); without
 * the bound ptxas spills the f32 pieces entry on sm_120 at 40. */
#define KILN_EMB_SUM_BOUNDS __launch_bounds__(KILN_EMB_THREADS, 4)

/* A zero element of T (+0 in every dtype). */
template <typename T> __device__ __forceinline__ T kiln_emb_zero() {
  T v;
  v.bits = 0;
  return v;
}
template <> __device__ __forceinline__ float kiln_emb_zero<float>() {
  return 0.f;
}

/* ---- forward --------------------------------------------------------------------
 * One warp per token (grid-stride over tokens); a copy, so bytes move
 * unconverted: 16-byte vectors when y, weight and the row length allow,
 * elements otherwise. */
template <typename T>
__device__ __forceinline__ void kiln_embedding_fwd_body(T *y, const kiln_i64 *ids, const T *weight,
                                                        kiln_i64 n_tokens, int hidden,
                                                        kiln_i64 vocab_start, kiln_i64 vocab_end,
                                                        kiln_i64 vocab_size, kiln_op_error *err) {
  const int lane = threadIdx.x & 31;
  const kiln_i64 nwarps = (kiln_i64)gridDim.x * KILN_EMB_WARPS;
  const bool vec = kiln_aligned16(y) && kiln_aligned16(weight) && hidden % KILN_VEC(T) == 0;
  for (kiln_i64 t = (kiln_i64)blockIdx.x * KILN_EMB_WARPS + (threadIdx.x >> 5); t < n_tokens;
       t += nwarps) {
    const kiln_i64 id = ids[t];
    if ((id < 0 || id >= vocab_size) && lane == 0) kiln_op_error_note(err, t);
    const bool in = id >= vocab_start && id < vocab_end;
    T *dst = y + t * (kiln_i64)hidden;
    const T *src = weight + (in ? id - vocab_start : 0) * (kiln_i64)hidden;
    if (vec) {
      const int nv = hidden / KILN_VEC(T);
      kiln_v16 *d = reinterpret_cast<kiln_v16 *>(dst);
      const kiln_v16 *s = reinterpret_cast<const kiln_v16 *>(src);
      for (int c = lane; c < nv; c += 32 * KILN_EMB_UNROLL) {
        kiln_v16 r[KILN_EMB_UNROLL];
#pragma unroll
        for (int k = 0; k < KILN_EMB_UNROLL; ++k) {
          r[k].w[0] = r[k].w[1] = r[k].w[2] = r[k].w[3] = 0u;
          if (in && c + 32 * k < nv) r[k] = s[c + 32 * k];
        }
#pragma unroll
        for (int k = 0; k < KILN_EMB_UNROLL; ++k)
          if (c + 32 * k < nv) d[c + 32 * k] = r[k];
      }
    } else {
      for (int c = lane; c < hidden; c += 32)
        dst[c] = in ? src[c] : kiln_emb_zero<T>();
    }
  }
}

/* ---- backward, atomic ------------------------------------------------------------
 * One warp per token; fp32 atomicAdd per element (order-dependent rounding). */
template <typename T>
__device__ __forceinline__ void
kiln_embedding_bwd_atomic_body(float *dweight, const T *dy, const kiln_i64 *ids, kiln_i64 n_tokens,
                               int hidden, kiln_i64 vocab_start, kiln_i64 vocab_end) {
  const int lane = threadIdx.x & 31;
  const kiln_i64 nwarps = (kiln_i64)gridDim.x * KILN_EMB_WARPS;
  const bool vec = kiln_aligned16(dy) && hidden % KILN_VEC(T) == 0;
  for (kiln_i64 t = (kiln_i64)blockIdx.x * KILN_EMB_WARPS + (threadIdx.x >> 5); t < n_tokens;
       t += nwarps) {
    const kiln_i64 id = ids[t];
    if (id < vocab_start || id >= vocab_end) continue; /* warp-uniform */
    float *dst = dweight + (id - vocab_start) * (kiln_i64)hidden;
    const T *src = dy + t * (kiln_i64)hidden;
    if (vec) {
      const int nv = hidden / KILN_VEC(T);
      for (int c = lane; c < nv; c += 32) {
        float v[KILN_VEC(T)];
        kiln_load_vec(src + (kiln_i64)c * KILN_VEC(T), v);
#pragma unroll
        for (int k = 0; k < KILN_VEC(T); ++k)
          atomicAdd(dst + (kiln_i64)c * KILN_VEC(T) + k, v[k]);
      }
    } else {
      for (int c = lane; c < hidden; c += 32)
        atomicAdd(dst + c, kiln_load_f32(src + c));
    }
  }
}

/* ---- backward, sorted (deterministic) ---------------------------------------------
 * keys/pos: the partition's tokens sorted stably by key (so equal keys are
 * in position order); keys == rows (outside the partition) come last.
 *
 * A key's segment of the sorted order is cut into pieces at the multiples of
 * `piece` (a function of hidden only, chosen by the launcher): the head runs
 * from the segment's start to the next multiple (or the segment's end), each
 * tail piece from a multiple q * piece for at most `piece` rows. Each
 * (row, column) of a piece is summed by one lane in fp32, from 0, in sorted
 * (= position) order:
 *   bwd_<dt>_pieces  one warp per (tail candidate q, column chunk): when
 *                    sorted index q * piece continues a segment, the piece's
 *                    sums go to slot q - 1 of `slots` ([q - 1][hidden] fp32);
 *   bwd_<dt>_sorted  one warp per (sorted index i, column chunk): when i
 *                    starts a segment of key k < rows, the head's sums, then
 *                    + slot 0, + slot 1, ... of its tail pieces in order,
 *                    then dweight[k] += that.
 * Every (row, column) has one owner and the order of every addition is
 * fixed: no atomics, the same bits every run. A long run of one id is summed
 * by (its length / piece) warps per column chunk instead of one. */

/* acc[0..per) += dy[pos[j]][col..] for j in [j, end) while keys[j] == key, in
 * order; 4 rows' loads in flight (predicated, so the order never changes). */
template <typename T, bool kVec>
__device__ __forceinline__ void kiln_emb_sum_rows(float *acc, const T *dy, const kiln_i64 *keys,
                                                  const kiln_i64 *pos, kiln_i64 j, kiln_i64 end,
                                                  kiln_i64 key, int hidden, int col) {
  const int per = kVec ? KILN_VEC(T) : 1, U = 4;
  for (; j < end; j += U) {
    kiln_i64 p[U];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      ok[u] = j + u < end && keys[j + u] == key;
      p[u] = ok[u] ? pos[j + u] : 0;
    }
    float v[U][per];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const T *src = dy + p[u] * (kiln_i64)hidden + col;
#pragma unroll
      for (int k = 0; k < per; ++k)
        v[u][k] = 0.f;
      if (ok[u]) {
        if (kVec)
          kiln_load_vec(src, v[u]);
        else
          v[u][0] = kiln_load_f32(src);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (ok[u]) {
#pragma unroll
        for (int k = 0; k < per; ++k)
          acc[k] += v[u][k];
      }
    if (!ok[U - 1]) break; /* the segment ended */
  }
}

template <typename T, bool kVec>
__device__ __forceinline__ void
kiln_embedding_bwd_pieces_loop(float *slots, const T *dy, const kiln_i64 *keys, const kiln_i64 *pos,
                               kiln_i64 n_tokens, int hidden, kiln_i64 rows, int piece) {
  const int per = kVec ? KILN_VEC(T) : 1; /* columns per lane */
  const int chunk_cols = 32 * per;
  const int chunks = (hidden + chunk_cols - 1) / chunk_cols;
  const int lane = threadIdx.x & 31;
  const kiln_i64 tails = (n_tokens - 1) / piece; /* candidates q = 1 .. tails */
  const kiln_i64 items = tails * chunks;
  const kiln_i64 nwarps = (kiln_i64)gridDim.x * KILN_EMB_WARPS;
  for (kiln_i64 it = (kiln_i64)blockIdx.x * KILN_EMB_WARPS + (threadIdx.x >> 5); it < items;
       it += nwarps) {
    const kiln_i64 q = it / chunks + 1, i = q * piece;
    const kiln_i64 key = keys[i];
    if (key >= rows || keys[i - 1] != key) continue; /* warp-uniform: no tail piece here */
    const int col = (int)(it - (q - 1) * chunks) * chunk_cols + lane * per;
    if (col < hidden) {
      float acc[per];
#pragma unroll
      for (int k = 0; k < per; ++k)
        acc[k] = 0.f;
      const kiln_i64 end = i + piece < n_tokens ? i + piece : n_tokens;
      kiln_emb_sum_rows<T, kVec>(acc, dy, keys, pos, i, end, key, hidden, col);
      float *dst = slots + (q - 1) * (kiln_i64)hidden + col;
#pragma unroll
      for (int k = 0; k < per; k += 4) {
        if (kVec)
          kiln_store_vec(dst + k, acc + k);
        else
          dst[0] = acc[0];
      }
    }
  }
}

template <typename T, bool kVec>
__device__ __forceinline__ void
kiln_embedding_bwd_sorted_loop(float *dweight, const T *dy, const kiln_i64 *keys,
                               const kiln_i64 *pos, const float *slots, kiln_i64 n_tokens,
                               int hidden, kiln_i64 rows, int piece) {
  const int per = kVec ? KILN_VEC(T) : 1; /* columns per lane */
  const int chunk_cols = 32 * per;
  const int chunks = (hidden + chunk_cols - 1) / chunk_cols;
  const int lane = threadIdx.x & 31;
  const kiln_i64 items = n_tokens * chunks;
  const kiln_i64 nwarps = (kiln_i64)gridDim.x * KILN_EMB_WARPS;
  for (kiln_i64 it = (kiln_i64)blockIdx.x * KILN_EMB_WARPS + (threadIdx.x >> 5); it < items;
       it += nwarps) {
    const kiln_i64 i = it / chunks;
    const kiln_i64 key = keys[i];
    if (key >= rows || (i > 0 && keys[i - 1] == key)) continue; /* warp-uniform */
    const int col = (int)(it - i * chunks) * chunk_cols + lane * per;
    if (col < hidden) {
      float acc[per];
#pragma unroll
      for (int k = 0; k < per; ++k)
        acc[k] = 0.f;
      kiln_i64 q = i / piece + 1; /* the first tail candidate */
      const kiln_i64 head_end = q * piece < n_tokens ? q * piece : n_tokens;
      kiln_emb_sum_rows<T, kVec>(acc, dy, keys, pos, i, head_end, key, hidden, col);
      for (; q * piece < n_tokens && keys[q * piece] == key; ++q) {
        const float *src = slots + (q - 1) * (kiln_i64)hidden + col;
        float s[per];
        if (kVec) {
#pragma unroll
          for (int k = 0; k < per; k += 4)
            kiln_load_vec(src + k, s + k);
        } else {
          s[0] = src[0];
        }
#pragma unroll
        for (int k = 0; k < per; ++k)
          acc[k] += s[k];
      }
      float *dst = dweight + key * (kiln_i64)hidden + col;
#pragma unroll
      for (int k = 0; k < per; k += 4) {
        if (kVec) {
          float w4[4];
          kiln_load_vec(dst + k, w4);
#pragma unroll
          for (int m = 0; m < 4; ++m)
            w4[m] += acc[k + m];
          kiln_store_vec(dst + k, w4);
        } else {
          dst[0] += acc[0];
        }
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void
kiln_embedding_bwd_pieces_body(float *slots, const T *dy, const kiln_i64 *keys, const kiln_i64 *pos,
                               kiln_i64 n_tokens, int hidden, kiln_i64 rows, int piece) {
  if (kiln_aligned16(dy) && kiln_aligned16(slots) && hidden % KILN_VEC(T) == 0)
    kiln_embedding_bwd_pieces_loop<T, true>(slots, dy, keys, pos, n_tokens, hidden, rows, piece);
  else
    kiln_embedding_bwd_pieces_loop<T, false>(slots, dy, keys, pos, n_tokens, hidden, rows, piece);
}

template <typename T>
__device__ __forceinline__ void
kiln_embedding_bwd_sorted_body(float *dweight, const T *dy, const kiln_i64 *keys,
                               const kiln_i64 *pos, const float *slots, kiln_i64 n_tokens,
                               int hidden, kiln_i64 rows, int piece) {
  if (kiln_aligned16(dy) && kiln_aligned16(dweight) && kiln_aligned16(slots) &&
      hidden % KILN_VEC(T) == 0)
    kiln_embedding_bwd_sorted_loop<T, true>(dweight, dy, keys, pos, slots, n_tokens, hidden, rows,
                                            piece);
  else
    kiln_embedding_bwd_sorted_loop<T, false>(dweight, dy, keys, pos, slots, n_tokens, hidden, rows,
                                             piece);
}

/* ---- the stable LSD radix sort of the deterministic path --------------------------
 * Tokens form tiles of KILN_EMB_TILE consecutive positions; thread x of a
 * tile's block holds positions tile * TILE + r * 256 + x, r = 0..7. One pass
 * sorts by the digit (key >> shift) & 255: hist counts each tile's digits
 * into hist[digit * ntiles + tile], scan turns those into exclusive offsets
 * (digit-major, so a digit's tiles follow each other in tile order), and
 * scatter places each element at its tile's offset + the number of equal
 * digits before it in the tile (ballots within a warp, warp counts within
 * the block, a running count across the tile's rounds): stable. */
__device__ __forceinline__ kiln_i64 kiln_embedding_tiles(kiln_i64 n) {
  return (n + KILN_EMB_TILE - 1) / KILN_EMB_TILE;
}

extern "C" __global__ void __launch_bounds__(KILN_EMB_THREADS)
    kiln_embedding_keys_i64_g(kiln_i64 *keys, kiln_i64 *pos, const kiln_i64 *ids, kiln_i64 n_tokens,
                              kiln_i64 vocab_start, kiln_i64 vocab_end) {
  const kiln_i64 rows = vocab_end - vocab_start;
  for (kiln_i64 i = (kiln_i64)blockIdx.x * KILN_EMB_THREADS + threadIdx.x; i < n_tokens;
       i += (kiln_i64)gridDim.x * KILN_EMB_THREADS) {
    const kiln_i64 id = ids[i];
    keys[i] = id >= vocab_start && id < vocab_end ? id - vocab_start : rows;
    pos[i] = i;
  }
}

extern "C" __global__ void __launch_bounds__(KILN_EMB_THREADS)
    kiln_embedding_hist_i64_g(kiln_i64 *hist, const kiln_i64 *keys, kiln_i64 n_tokens, int shift) {
  __shared__ int h[KILN_EMB_RADIX];
  const int x = threadIdx.x;
  const kiln_i64 ntiles = kiln_embedding_tiles(n_tokens);
  for (kiln_i64 tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    h[x] = 0;
    __syncthreads();
#pragma unroll
    for (int r = 0; r < KILN_EMB_TILE_ITEMS; ++r) {
      const kiln_i64 i = tile * KILN_EMB_TILE + r * KILN_EMB_THREADS + x;
      if (i < n_tokens) atomicAdd(&h[(int)((keys[i] >> shift) & (KILN_EMB_RADIX - 1))], 1);
    }
    __syncthreads();
    hist[(kiln_i64)x * ntiles + tile] = h[x];
    __syncthreads();
  }
}

/* One block: hist[0..count) becomes its exclusive prefix sum. Thread x sums
 * its contiguous chunk, the block scans the chunk sums (Hillis-Steele in
 * shared memory), then each thread rewrites its chunk: a fixed order. */
extern "C" __global__ void __launch_bounds__(KILN_EMB_SCAN_THREADS)
    kiln_embedding_scan_i64_g(kiln_i64 *hist, kiln_i64 count) {
  __shared__ kiln_i64 s[KILN_EMB_SCAN_THREADS];
  if (blockIdx.x != 0) return; /* any grid: block 0 does it all */
  const int x = threadIdx.x;
  const kiln_i64 per = (count + KILN_EMB_SCAN_THREADS - 1) / KILN_EMB_SCAN_THREADS;
  const kiln_i64 beg = x * per < count ? x * per : count;
  const kiln_i64 end = beg + per < count ? beg + per : count;
  kiln_i64 sum = 0;
  for (kiln_i64 i = beg; i < end; ++i)
    sum += hist[i];
  s[x] = sum;
  __syncthreads();
  for (int o = 1; o < KILN_EMB_SCAN_THREADS; o <<= 1) {
    const kiln_i64 v = x >= o ? s[x - o] : 0;
    __syncthreads();
    s[x] += v;
    __syncthreads();
  }
  kiln_i64 run = s[x] - sum; /* exclusive */
  for (kiln_i64 i = beg; i < end; ++i) {
    const kiln_i64 c = hist[i];
    hist[i] = run;
    run += c;
  }
}

extern "C" __global__ void __launch_bounds__(KILN_EMB_THREADS)
    kiln_embedding_scatter_i64_g(kiln_i64 *keys_out, kiln_i64 *pos_out, const kiln_i64 *keys_in,
                                 const kiln_i64 *pos_in, const kiln_i64 *hist, kiln_i64 n_tokens,
                                 int shift) {
  __shared__ kiln_i64 base[KILN_EMB_RADIX];            /* next free slot per digit */
  __shared__ int wofs[KILN_EMB_WARPS][KILN_EMB_RADIX]; /* per warp: count, then offset */
  const int x = threadIdx.x, lane = x & 31, warp = x >> 5;
  const unsigned lt = (1u << lane) - 1u;
  const kiln_i64 ntiles = kiln_embedding_tiles(n_tokens);
  for (kiln_i64 tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    base[x] = hist[(kiln_i64)x * ntiles + tile];
    for (int r = 0; r < KILN_EMB_TILE_ITEMS; ++r) {
      const kiln_i64 i = tile * KILN_EMB_TILE + r * KILN_EMB_THREADS + x;
      const bool valid = i < n_tokens;
      const kiln_i64 key = valid ? keys_in[i] : 0;
      const kiln_i64 p = valid ? pos_in[i] : 0;
      const int d = (int)((key >> shift) & (KILN_EMB_RADIX - 1));
#pragma unroll
      for (int w = 0; w < KILN_EMB_WARPS; ++w)
        wofs[w][x] = 0;
      __syncthreads();
      /* the lanes of this warp with the same digit (and validity) */
      unsigned peers = __ballot_sync(0xffffffffu, valid);
      if (!valid) peers = ~peers;
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const int bit = (d >> b) & 1;
        const unsigned bal = __ballot_sync(0xffffffffu, bit);
        peers &= bit ? bal : ~bal;
      }
      const int rank = __popc(peers & lt);
      if (valid && rank == 0) wofs[warp][d] = __popc(peers);
      __syncthreads();
      int total = 0;
#pragma unroll
      for (int w = 0; w < KILN_EMB_WARPS; ++w) {
        const int c = wofs[w][x];
        wofs[w][x] = total;
        total += c;
      }
      __syncthreads();
      if (valid) {
        const kiln_i64 dst = base[d] + wofs[warp][d] + rank;
        keys_out[dst] = key;
        pos_out[dst] = p;
      }
      __syncthreads();
      base[x] += total;
    }
    __syncthreads();
  }
}

/* ---- entry points ----------------------------------------------------------------- */

extern "C" __global__ void __launch_bounds__(32)
    kiln_embedding_err_i64_g(kiln_op_error *err, const kiln_i64 *ids, kiln_i64 n_tokens,
                             kiln_i64 vocab_size) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    kiln_op_error_record(err, ids, n_tokens, 0, vocab_size, KILN_OP_ERROR_TOKEN_ID);
}

#define KILN_EMB_CT_f32 float
#define KILN_EMB_CT_f16 kiln_f16
#define KILN_EMB_CT_bf16 kiln_bf16

#define KILN_EMB_DEFINE_fwd_g(dt)                                                                  \
  extern "C" __global__ void __launch_bounds__(KILN_EMB_THREADS) kiln_embedding_fwd_##dt##_g(      \
      KILN_EMB_CT_##dt *y, const kiln_i64 *ids, const KILN_EMB_CT_##dt *weight, kiln_i64 n_tokens, \
      int hidden, kiln_i64 vocab_start, kiln_i64 vocab_end, kiln_i64 vocab_size,                   \
      kiln_op_error *err) {                                                                        \
    kiln_embedding_fwd_body<KILN_EMB_CT_##dt>(y, ids, weight, n_tokens, hidden, vocab_start,       \
                                              vocab_end, vocab_size, err);                         \
  }
#define KILN_EMB_DEFINE_bwd_atomic(dt)                                                             \
  extern "C" __global__ void __launch_bounds__(KILN_EMB_THREADS) kiln_embedding_bwd_##dt##_atomic( \
      float *dweight, const KILN_EMB_CT_##dt *dy, const kiln_i64 *ids, kiln_i64 n_tokens,          \
      int hidden, kiln_i64 vocab_start, kiln_i64 vocab_end) {                                      \
    kiln_embedding_bwd_atomic_body<KILN_EMB_CT_##dt>(dweight, dy, ids, n_tokens, hidden,           \
                                                     vocab_start, vocab_end);                      \
  }
#define KILN_EMB_DEFINE_bwd_sorted(dt)                                                             \
  extern "C" __global__ void KILN_EMB_SUM_BOUNDS kiln_embedding_bwd_##dt##_sorted(                 \
      float *dweight, const KILN_EMB_CT_##dt *dy, const kiln_i64 *keys, const kiln_i64 *pos,       \
      const float *slots, kiln_i64 n_tokens, int hidden, kiln_i64 rows, int piece) {               \
    kiln_embedding_bwd_sorted_body<KILN_EMB_CT_##dt>(dweight, dy, keys, pos, slots, n_tokens,      \
                                                     hidden, rows, piece);                         \
  }
#define KILN_EMB_DEFINE_bwd_pieces(dt)                                                             \
  extern "C" __global__ void KILN_EMB_SUM_BOUNDS kiln_embedding_bwd_##dt##_pieces(                 \
      float *slots, const KILN_EMB_CT_##dt *dy, const kiln_i64 *keys, const kiln_i64 *pos,         \
      kiln_i64 n_tokens, int hidden, kiln_i64 rows, int piece) {                                   \
    kiln_embedding_bwd_pieces_body<KILN_EMB_CT_##dt>(slots, dy, keys, pos, n_tokens, hidden, rows, \
                                                     piece);                                       \
  }

KILN_EMB_DEFINE_fwd_g(f32) KILN_EMB_DEFINE_fwd_g(f16) KILN_EMB_DEFINE_fwd_g(bf16)
    KILN_EMB_DEFINE_bwd_atomic(f32) KILN_EMB_DEFINE_bwd_atomic(f16) KILN_EMB_DEFINE_bwd_atomic(bf16)
        KILN_EMB_DEFINE_bwd_sorted(f32) KILN_EMB_DEFINE_bwd_sorted(f16)
            KILN_EMB_DEFINE_bwd_sorted(bf16) KILN_EMB_DEFINE_bwd_pieces(f32)
                KILN_EMB_DEFINE_bwd_pieces(f16) KILN_EMB_DEFINE_bwd_pieces(bf16)
