/* cross_entropy.cu — unit: cross-entropy over a vocabulary partition
 * (docs/kernels/cross_entropy.md has the contract).
 *
 * Entry points (cross_entropy.def), T = float, kiln_f16, kiln_bf16:
 *   fwd_<dt>_g    TP = 1: loss[r] = lse[r] - x[r, target[r]], one pass.
 *   stats_<dt>_g  TP > 1: row_max, sumexp = sum exp(x - row_max), tgt.
 *   bwd_<dt>_g    x <- dloss[r] * (exp(x - lse[r]) - [col == target - vocab_start]).
 *   rescale_f32_g, loss_f32_g: the small steps between the all-reduces.
 *   err_i64_g     records the first bad target noted by the launch before it.
 *
 * fwd, stats, bwd: one block of KILN_CE_THREADS per row, grid-stride over
 * rows. fwd and stats read each logit once: every thread keeps an online
 * (max, sum of exponentials) pair, rescaling its sum when its max grows,
 * and the block combines the pairs. 16-byte vectors when the row allows
 * (vocab % KILN_VEC(T) == 0 and logits 16-byte aligned), scalars otherwise.
 *
 * Exponentials are ex2.approx of arguments scaled by log2(e). A thread's sum
 * is kept relative to mc = round(m * log2(e)) (m its running max), each term
 * ex2(fma(x, log2(e), -mc)); the residual fma(M, log2(e), -MC) of the row's
 * max is folded back exactly, so logits of magnitude 1e4 lose nothing to the
 * rounding of M * log2(e).
 *
 * Special values: -inf logits contribute 0 (a row of only -inf has lse =
 * -inf); a NaN logit makes the row's sum, lse and loss NaN; a +inf logit
 * makes them NaN too (inf - inf), as in the softmax units.
 */
#include "common/kiln_errors.cuh"
#include "common/kiln_types.cuh"
#include "common/kiln_vec.cuh"
#include "cross_entropy/cross_entropy.def"

#define KILN_CE_THREADS 512  /* fwd, stats, bwd: one block per row */
#define KILN_CE_VTHREADS 256 /* rescale, loss: one thread per row */
#define KILN_CE_VALUES 16    /* logits per thread per step: loads in flight */
#define KILN_LN2 0.6931471805599453f

/* ---- the online (max, sum) pair ---------------------------------------- */

struct kiln_ce_acc {
  float m;  /* largest logit seen; -inf: none yet (or only -inf) */
  float mc; /* m * log2(e) rounded; 0 while m is -inf */
  float s;  /* sum of ex2(x * log2(e) - mc) over the logits seen */
};

__device__ __forceinline__ void kiln_ce_acc_init(kiln_ce_acc &a) {
  a.m = kiln_neg_inf();
  a.mc = 0.f;
  a.s = 0.f;
}

/* Takes n logits (absent ones are -inf). fmaxf skips NaN, so m never becomes
 * NaN; a NaN logit reaches s through its term. While m is -inf, s is 0 or
 * NaN and is kept as it is. */
template <int N> __device__ __forceinline__ void kiln_ce_absorb(kiln_ce_acc &a, const float *v) {
  float vm = v[0];
#pragma unroll
  for (int k = 1; k < N; ++k)
    vm = fmaxf(vm, v[k]);
  if (vm > a.m) {
    const float mc = vm * KILN_LOG2E;
    if (a.m != kiln_neg_inf()) a.s *= kiln_exp2f(a.mc - mc);
    a.m = vm;
    a.mc = mc;
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < N; ++k)
    s += kiln_exp2f(fmaf(v[k], KILN_LOG2E, -a.mc));
  a.s += s;
}

/* The row's (max, sum exp(x - max)) from every thread's pair; every thread
 * of the block calls and gets the result. red: two buffers of 32 floats. */
__device__ __forceinline__ void kiln_ce_combine(const kiln_ce_acc &a, float *red_max,
                                                float *red_sum, float *row_max, float *sumexp) {
  const float M = kiln_block_max<KILN_CE_THREADS>(a.m, red_max);
  const float MC = M == kiln_neg_inf() ? 0.f : M * KILN_LOG2E;
  const float s = (a.m == M || a.m == kiln_neg_inf()) ? a.s : a.s * kiln_exp2f(a.mc - MC);
  const float S = kiln_block_sum<KILN_CE_THREADS>(s, red_sum); /* sum 2^(x log2e - MC) */
  *row_max = M;
  /* S = 2^(M log2e - MC) * sum exp(x - M): remove the residual of MC. */
  *sumexp = M == kiln_neg_inf() ? S : S * kiln_exp2f(-fmaf(M, KILN_LOG2E, -MC));
}

/* The pair of one row of n logits at x. */
template <typename T>
__device__ __forceinline__ kiln_ce_acc kiln_ce_row_pass(const T *x, int n, bool vec) {
  kiln_ce_acc a;
  kiln_ce_acc_init(a);
  const unsigned tid = threadIdx.x; /* general path: unsigned, i + a step < 2^32 */
  if (vec) {
    const int W = KILN_VEC(T), U = KILN_CE_VALUES / KILN_VEC(T);
    const int nv = n / W; /* < 2^29: i + a step cannot overflow */
    for (int i = (int)tid; i < nv; i += KILN_CE_THREADS * U) {
      const T *xi = x + (kiln_i64)i * W; /* one base, constant offsets */
      float v[KILN_CE_VALUES];
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const int j = i + k * KILN_CE_THREADS;
        if (j < nv) {
          kiln_load_vec(xi + k * KILN_CE_THREADS * W, v + k * W);
        } else {
#pragma unroll
          for (int q = 0; q < W; ++q)
            v[k * W + q] = kiln_neg_inf();
        }
      }
      kiln_ce_absorb<KILN_CE_VALUES>(a, v);
    }
  } else {
    for (unsigned i = tid; i < (unsigned)n; i += KILN_CE_THREADS * KILN_CE_VALUES) {
      const T *xi = x + i;
      float v[KILN_CE_VALUES];
#pragma unroll
      for (int k = 0; k < KILN_CE_VALUES; ++k) {
        const unsigned j = i + k * KILN_CE_THREADS;
        v[k] = j < (unsigned)n ? kiln_load_f32(xi + k * KILN_CE_THREADS) : kiln_neg_inf();
      }
      kiln_ce_absorb<KILN_CE_VALUES>(a, v);
    }
  }
  return a;
}

__device__ __forceinline__ float kiln_ce_pos_inf() {
  return __uint_as_float(0x7f800000u);
}

/* Shared by fwd (stats = false: loss, lse) and stats (row_max, sumexp, tgt).
 * A row whose target is ignore_index is not read: fwd writes loss 0, lse 0;
 * stats row_max 0, sumexp 1, tgt 0 (after the all-reduces, lse = log(TP),
 * finite). A bad target (outside [0, vocab_size), not ignore_index) is noted
 * in e and its row not read either: fwd writes loss 0, lse +inf; stats
 * row_max +inf, sumexp 1, tgt 0, which the loss step recognises (gmax = +inf
 * with a sumexp that is not NaN: every rank marks the row, and a real +inf
 * logit makes sumexp NaN) and turns into loss 0, lse +inf. With lse = +inf
 * the backward's row is exp(x - inf) = 0: the row is ignored at any TP. */
template <bool kStats, typename T>
__device__ __forceinline__ void kiln_ce_forward(float *o0, float *o1, float *o2, const T *logits,
                                                const kiln_i64 *target, kiln_i64 rows, int vpart,
                                                kiln_i64 vstart, kiln_i64 vsize, kiln_i64 ignore,
                                                kiln_op_error *e) {
  __shared__ float red_max[32], red_sum[32];
  const bool vec = kiln_aligned16(logits) && vpart % KILN_VEC(T) == 0;
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const kiln_i64 t = target[row];
    const bool bad = t != ignore && (t < 0 || t >= vsize);
    if (t == ignore || bad) { /* uniform over the block: no barrier is skipped by some only */
      if (threadIdx.x == 0) {
        if (bad) kiln_op_error_note(e, row);
        if (kStats) {
          o0[row] = bad ? kiln_ce_pos_inf() : 0.f;
          o1[row] = 1.f;
          o2[row] = 0.f;
        } else {
          o0[row] = 0.f;
          o1[row] = bad ? kiln_ce_pos_inf() : 0.f;
        }
      }
      continue;
    }
    const T *x = logits + row * vpart;
    const kiln_i64 col = t - vstart;
    /* the target logit, read directly; issued before the pass so its latency hides */
    const float xt = (threadIdx.x == 0 && col >= 0 && col < vpart) ? kiln_load_f32(x + col) : 0.f;
    const kiln_ce_acc a = kiln_ce_row_pass(x, vpart, vec);
    float M, S;
    kiln_ce_combine(a, red_max, red_sum, &M, &S);
    if (threadIdx.x == 0) {
      if (kStats) {
        o0[row] = M;
        o1[row] = S;
        o2[row] = xt;
      } else {
        const float lse = (M == kiln_neg_inf() ? 0.f : M) + logf(S);
        o0[row] = lse - xt;
        o1[row] = lse;
      }
    }
  }
}

/* g = dl * (exp(x - lse) - hot), with exp(x - lse) = ex2((x - lse) log2e):
 * the difference first, so a large lse costs no precision. */
__device__ __forceinline__ float kiln_ce_grad(float x, float lse, float dl, bool hot) {
  const float p = kiln_exp2f((x - lse) * KILN_LOG2E);
  return dl * (hot ? p - 1.f : p);
}

/* The target's column relative to a step that starts at column c0 and spans
 * `span` columns, or -1 when it is not in the step. */
__device__ __forceinline__ int kiln_ce_rel(kiln_i64 tcol, kiln_i64 c0, int span) {
  const kiln_i64 r = tcol - c0;
  return r >= 0 && r < span ? (int)r : -1;
}

template <typename T>
__device__ __forceinline__ void kiln_ce_backward(T *logits, const float *lse, const float *dloss,
                                                 const kiln_i64 *target, kiln_i64 rows, int vpart,
                                                 kiln_i64 vstart, kiln_i64 ignore) {
  const bool vec = kiln_aligned16(logits) && vpart % KILN_VEC(T) == 0;
  const unsigned tid = threadIdx.x; /* general path: unsigned, i + a step < 2^32 */
  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const kiln_i64 t = target[row];
    const bool zero = t == ignore; /* lse and dloss are not read */
    const float l = zero ? 0.f : lse[row];
    const float dl = zero ? 0.f : dloss[row];
    const kiln_i64 tcol = t - vstart; /* outside [0, vpart): another rank's */
    T *x = logits + row * vpart;
    if (vec) {
      const int W = KILN_VEC(T), U = KILN_CE_VALUES / KILN_VEC(T);
      const int nv = vpart / W; /* < 2^29: i + a step cannot overflow */
      for (int i = (int)tid; i < nv; i += KILN_CE_THREADS * U) {
        T *xi = x + (kiln_i64)i * W; /* one base, constant offsets */
        const int rel = kiln_ce_rel(tcol, (kiln_i64)i * W, KILN_CE_THREADS * U * W);
        float v[KILN_CE_VALUES];
#pragma unroll
        for (int k = 0; k < U; ++k) {
          const int j = i + k * KILN_CE_THREADS;
          if (!zero && j < nv) {
            kiln_load_vec(xi + k * KILN_CE_THREADS * W, v + k * W);
          } else {
#pragma unroll
            for (int q = 0; q < W; ++q)
              v[k * W + q] = 0.f;
          }
        }
        if (!zero) {
#pragma unroll
          for (int k = 0; k < U; ++k)
#pragma unroll
            for (int q = 0; q < W; ++q)
              v[k * W + q] = kiln_ce_grad(v[k * W + q], l, dl, k * KILN_CE_THREADS * W + q == rel);
        }
#pragma unroll
        for (int k = 0; k < U; ++k) {
          const int j = i + k * KILN_CE_THREADS;
          if (j < nv) kiln_store_vec(xi + k * KILN_CE_THREADS * W, v + k * W);
        }
      }
    } else {
      for (unsigned i = tid; i < (unsigned)vpart; i += KILN_CE_THREADS * KILN_CE_VALUES) {
        T *xi = x + i;
        const int rel = kiln_ce_rel(tcol, (kiln_i64)i, KILN_CE_THREADS * KILN_CE_VALUES);
        float v[KILN_CE_VALUES];
#pragma unroll
        for (int k = 0; k < KILN_CE_VALUES; ++k) {
          const unsigned j = i + k * KILN_CE_THREADS;
          v[k] = (!zero && j < (unsigned)vpart) ? kiln_load_f32(xi + k * KILN_CE_THREADS) : 0.f;
        }
#pragma unroll
        for (int k = 0; k < KILN_CE_VALUES; ++k) {
          const unsigned j = i + k * KILN_CE_THREADS;
          if (j < (unsigned)vpart)
            kiln_store_f32(xi + k * KILN_CE_THREADS,
                           zero ? 0.f : kiln_ce_grad(v[k], l, dl, k * KILN_CE_THREADS == rel));
        }
      }
    }
  }
}

/* ---- entry points ---------------------------------------------------------- */

#define KILN_CE_ENTRIES_(dt, T)                                                                    \
  extern "C" __global__ void __launch_bounds__(KILN_CE_THREADS) kiln_cross_entropy_fwd_##dt##_g(   \
      float *loss, float *lse, const T *logits, const kiln_i64 *target, kiln_i64 rows,             \
      int vocab_size, kiln_i64 ignore_index, kiln_op_error *err) {                                 \
    kiln_ce_forward<false>(loss, lse, (float *)0, logits, target, rows, vocab_size, 0,             \
                           (kiln_i64)vocab_size, ignore_index, err);                               \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(KILN_CE_THREADS) kiln_cross_entropy_stats_##dt##_g( \
      float *row_max, float *sumexp, float *tgt, const T *logits, const kiln_i64 *target,          \
      kiln_i64 rows, int vocab_part, kiln_i64 vocab_start, kiln_i64 vocab_size,                    \
      kiln_i64 ignore_index, kiln_op_error *err) {                                                 \
    kiln_ce_forward<true>(row_max, sumexp, tgt, logits, target, rows, vocab_part, vocab_start,     \
                          vocab_size, ignore_index, err);                                          \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(KILN_CE_THREADS) kiln_cross_entropy_bwd_##dt##_g(   \
      T *logits, const float *lse, const float *dloss, const kiln_i64 *target, kiln_i64 rows,      \
      int vocab_part, kiln_i64 vocab_start, kiln_i64 ignore_index) {                               \
    kiln_ce_backward(logits, lse, dloss, target, rows, vocab_part, vocab_start, ignore_index);     \
  }

KILN_CE_ENTRIES_(f32, float)
KILN_CE_ENTRIES_(f16, kiln_f16)
KILN_CE_ENTRIES_(bf16, kiln_bf16)

/* sumexp[r] *= exp(row_max[r] - gmax[r]); 1 when they are equal (also for
 * -inf = -inf and +inf = +inf). */
extern "C" __global__ void __launch_bounds__(KILN_CE_VTHREADS)
    kiln_cross_entropy_rescale_f32_g(float *sumexp, const float *row_max, const float *gmax,
                                     kiln_i64 rows) {
  for (kiln_i64 r = (kiln_i64)blockIdx.x * KILN_CE_VTHREADS + threadIdx.x; r < rows;
       r += (kiln_i64)gridDim.x * KILN_CE_VTHREADS) {
    const float m = row_max[r], g = gmax[r];
    if (m != g) sumexp[r] *= kiln_exp2f((m - g) * KILN_LOG2E);
  }
}

/* lse = gmax + log(sumexp), loss = lse - tgt (0 for ignored rows); a row
 * that stats marked bad (gmax = +inf, sumexp not NaN): loss 0, lse +inf. */
extern "C" __global__ void __launch_bounds__(KILN_CE_VTHREADS)
    kiln_cross_entropy_loss_f32_g(float *loss, float *lse, const float *gmax, const float *sumexp,
                                  const float *tgt, const kiln_i64 *target, kiln_i64 rows,
                                  kiln_i64 ignore_index) {
  for (kiln_i64 r = (kiln_i64)blockIdx.x * KILN_CE_VTHREADS + threadIdx.x; r < rows;
       r += (kiln_i64)gridDim.x * KILN_CE_VTHREADS) {
    const float g = gmax[r], se = sumexp[r];
    const bool bad = g == kiln_ce_pos_inf() && se == se;
    const float l = bad ? g : (g == kiln_neg_inf() ? 0.f : g) + logf(se);
    lse[r] = l;
    loss[r] = (bad || target[r] == ignore_index) ? 0.f : l - tgt[r];
  }
}

/* One block of 32 threads after fwd or stats: the first bad target. */
extern "C" __global__ void __launch_bounds__(32)
    kiln_cross_entropy_err_i64_g(kiln_op_error *err, const kiln_i64 *target, kiln_i64 rows,
                                 kiln_i64 vocab_size) {
  if (threadIdx.x == 0)
    kiln_op_error_record(err, target, rows, 0, vocab_size, KILN_OP_ERROR_TARGET);
}
