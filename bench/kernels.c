/* kernels_bw — achieved bandwidth of kiln's fused ops (all of include/kiln/ops.h but softmax, which
 * softmax_bw covers), as a fraction of a device-to-device copy of the same number of bytes measured
 * in the same run, at training shapes (bench/README.md).
 *
 * T = tokens (--tokens, 16384), H = hidden (--hidden, 4096 and 8192; the norms also 12288 and
 * 16384 unless --hidden is given), V = vocabulary partition
 * (--vocab, 32000 and 128000), es = bytes of the dtype (2 for bf16), ws = bytes of the weights'
 * dtype (4: fp32 weights, Megatron's mixed precision; or es: "w=<dtype>"). "bytes" is the least the
 * op must read and write; workspaces, partial sums and re-reads are not counted: layer_norm fwd  x,
 * gamma, beta -> y, mean, rstd        2*T*H*es + 2*H*ws + 8*T bwd  dy, x, mean, rstd, gamma -> dx,
 * dgamma, dbeta   3*T*H*es + 3*H*ws + 8*T rms_norm         fwd  x, gamma -> y, rstd 2*T*H*es + H*ws
 * + 4*T bwd  dy, x, rstd, gamma -> dx, dgamma       3*T*H*es + 2*H*ws + 4*T embedding partition [0,
 * V) of a vocabulary of tp*V (--tp, 2: rank 0 of TP = 2), ids uniform over the whole vocabulary; D
 * = distinct ids in the partition, N = ids in it (both counted on the host from the ids used; the
 * backwards again with skewed ids, shape marked "zipf1.1": Zipf by id, exponent 1.1, and "rep2048":
 * uniform with one id at 2048 positions, or all of them when T < 2048): fwd
 * ids, D weight rows -> T rows of y      8*T + D*H*es + T*H*es bwd_atomic, bwd_det  ids, N rows of
 * dy, fp32 dweight rows read and written 8*T + N*H*es + 2*D*H*4 bias_gelu        fwd  x, bias -> y
 * 2*T*H*es + H*es bwd  dy, x, bias -> dx                      3*T*H*es + H*es bias_swiglu      x
 * [T, 2H], y [T, H] fwd  x, bias -> y                           3*T*H*es + 2*H*es bwd  dy, x, bias
 * -> dx                      5*T*H*es + 2*H*es bias_dropout_add p = 0.1, training fwd  x, bias,
 * residual -> y                 3*T*H*es + H*es bwd  dy -> dx (mask regenerated) 2*T*H*es rope
 * sbhd, rotate-half, s = T/4, b = 4, h = H/128, d = rot_dim = 128, angles fp32 fwd, bwd  x, angles
 * -> y                    2*T*H*es + s*64*4 cross_entropy    logits [T, V], targets int64, no
 * ignored row fwd (TP = 1)  logits, targets -> loss, lse  T*V*es + 16*T stats (partition [0, V) of
 * tp*V)  logits, targets -> row_max, sumexp, tgt T*V*es + 20*T bwd (TP = 1, in place)  logits, lse,
 * dloss, targets -> logits 2*T*V*es + 16*T GB/s = bytes / time. Right after each op, bytes / 2 are
 * copied with cuMemcpyDtoD (it reads and writes that much), timed the same way; "vs copy" = kiln
 * GB/s / copy GB/s. Times are CUDA events around one launch, the median of --reps after --warmup
 * launches. Inputs are random, never zeros; mean, rstd and lse for the backward come from a forward
 * run first.
 *
 * usage: kernels_bw [--ops LIST] [--dtypes bf16,f16,f32] [--tokens N] [--hidden LIST] [--vocab
 * LIST]
 *                   [--tp N] [--reps N] [--warmup N] [--csv] [--smoke]
 * --smoke: T = 64, H = 256, V = 1000, 2 reps, no warm-up (for the CPU test double of libcuda named
 * by KILN_CUDA_LIBRARY); options after it override it. Without a GPU it prints why and exits 0; it
 * exits 1 when any op fails. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h" /* set-up, header, timing, rng */
#include "common/half.h"
#include "kiln/kernels.h"
#include "kiln/loader.h"
#include "kiln/ops.h"
#include "loader/driver.h" /* kiln_cuda(): memory, events */

#define TILE_ELEMS (8u << 20) /* host tile of random inputs, uploaded repeatedly */
#define MAX_LIST 8
#define MAX_BUFS 16
#define ROPE_B 4
#define ROPE_D 128
#define DROPOUT_P 0.1f
#define NORM_EPS 1e-5f
#define ZIPF_S 1.1      /* the skewed embedding ids: Zipf by id over the vocabulary */
#define REPEAT_IDS 2048 /* and uniform ids with one id at this many positions */

typedef enum {
  F_LAYER_NORM,
  F_RMS_NORM,
  F_EMBEDDING,
  F_GELU,
  F_SWIGLU,
  F_DROPOUT_ADD,
  F_ROPE,
  F_CROSS_ENTROPY,
  N_FAMILIES
} family;
static const char *const kFamilies[N_FAMILIES] = {"layer_norm", "rms_norm",     "embedding",
                                                  "bias_gelu",  "bias_swiglu",  "bias_dropout_add",
                                                  "rope",       "cross_entropy"};

typedef enum {
  LN_FWD,
  LN_BWD,
  RMS_FWD,
  RMS_BWD,
  EMB_FWD,
  EMB_BWD_ATOMIC,
  EMB_BWD_DET,
  GELU_FWD,
  GELU_BWD,
  SWIGLU_FWD,
  SWIGLU_BWD,
  BDA_FWD,
  BDA_BWD,
  ROPE_FWD,
  ROPE_BWD,
  CE_FWD,
  CE_STATS,
  CE_BWD
} op_id;

typedef struct bench {
  bench_env env; /* cu, l, info, events */
  int reps, warmup, csv, failed;
  long long tokens, vocab[MAX_LIST];
  int hidden[MAX_LIST], n_hidden, n_vocab, tp;
  int norm_hidden[MAX_LIST], n_norm_hidden; /* the norms' hidden sizes (--hidden sets both) */
  int family_on[N_FAMILIES];
  uint64_t rng;
} bench;

/* One op's tensors and shape. Roles (device pointers, 0 when unused):
 *   x   x, or the logits          y   y                dy, dx  gradients of y and x
 *   w1  gamma, bias, or the embedding weight   w2  beta, the residual, or CE stats' targets
 *   dw1 dgamma, fp32 dweight, or CE's dloss    dw2 dbeta, or CE stats' sumexp
 *   f1  mean, rope's angles, CE's loss / row_max    f2  rstd, CE's lse    f3  CE stats' tgt
 *   ids embedding ids or CE targets   ws  the op's workspace   copy  the copy baseline's scratch */
typedef struct job {
  kiln_dtype dt, wdt;
  long long t, v; /* rows (tokens), vocabulary partition */
  int h;          /* columns (hidden) */
  char shape[64];
  CUdeviceptr x, y, dy, dx, w1, w2, dw1, dw2, f1, f2, f3, ids, ws, copy;
  size_t ws_bytes, copy_bytes;
  CUdeviceptr owned[MAX_BUFS];
  int n_owned;
} job;

static unsigned dsize(kiln_dtype dt) {
  return dt == KILN_F32 ? 4 : 2;
}

#define P(d) ((void *)(uintptr_t)(d))
#define PF(d) ((float *)(uintptr_t)(d))
#define PI(d) ((const int64_t *)(uintptr_t)(d))

static kiln_status launch(const bench *bn, const job *j, op_id op) {
  kiln_loader *l = bn->env.l;
  const long long t = j->t, v = j->v;
  const int h = j->h, s = (int)(t / ROPE_B), heads = h / ROPE_D;
  switch (op) {
  case LN_FWD: /* x, y; w1 gamma, w2 beta; f1 mean, f2 rstd */
    return kiln_layer_norm_fwd(l, j->dt, j->wdt, P(j->y), PF(j->f1), PF(j->f2), P(j->x), P(j->w1),
                               P(j->w2), t, h, NORM_EPS, NULL);
  case LN_BWD:
    return kiln_layer_norm_bwd(l, j->dt, j->wdt, P(j->dx), P(j->dw1), P(j->dw2), P(j->dy), P(j->x),
                               PF(j->f1), PF(j->f2), P(j->w1), t, h, P(j->ws), j->ws_bytes, NULL);
  case RMS_FWD:
    return kiln_rms_norm_fwd(l, j->dt, j->wdt, P(j->y), PF(j->f2), P(j->x), P(j->w1), t, h,
                             NORM_EPS, NULL);
  case RMS_BWD:
    return kiln_rms_norm_bwd(l, j->dt, j->wdt, P(j->dx), P(j->dw1), P(j->dy), P(j->x), PF(j->f2),
                             P(j->w1), t, h, P(j->ws), j->ws_bytes, NULL);
  case EMB_FWD: /* w1 weight [v, h], dw1 fp32 dweight, y [t, h], dy */
    return kiln_embedding_fwd(l, j->dt, P(j->y), PI(j->ids), P(j->w1), t, h, 0, v, v * bn->tp, 0,
                              NULL);
  case EMB_BWD_ATOMIC:
  case EMB_BWD_DET:
    return kiln_embedding_bwd(l, j->dt, PF(j->dw1), P(j->dy), PI(j->ids), t, h, 0, v,
                              op == EMB_BWD_DET, P(j->ws), j->ws_bytes, NULL);
  case GELU_FWD: /* w1 bias */
    return kiln_bias_gelu_fwd(l, j->dt, P(j->y), P(j->x), P(j->w1), t, h, NULL);
  case GELU_BWD:
    return kiln_bias_gelu_bwd(l, j->dt, P(j->dx), P(j->dy), P(j->x), P(j->w1), t, h, NULL);
  case SWIGLU_FWD: return kiln_bias_swiglu_fwd(l, j->dt, P(j->y), P(j->x), P(j->w1), t, h, NULL);
  case SWIGLU_BWD:
    return kiln_bias_swiglu_bwd(l, j->dt, P(j->dx), P(j->dy), P(j->x), P(j->w1), t, h, NULL);
  case BDA_FWD: /* w1 bias, w2 residual [t, h] */
    return kiln_bias_dropout_add_fwd(l, j->dt, P(j->y), P(j->x), P(j->w1), P(j->w2), t, h,
                                     DROPOUT_P, 1234, 0, 1, NULL);
  case BDA_BWD:
    return kiln_bias_dropout_add_bwd(l, j->dt, P(j->dx), P(j->dy), t, h, DROPOUT_P, 1234, 0, 1,
                                     NULL);
  case ROPE_FWD: /* f1 angles [s, d/2] */
    return kiln_rope_fwd(l, j->dt, KILN_ROPE_SBHD, KILN_ROPE_ROTATE_HALF, P(j->y), P(j->x),
                         PF(j->f1), s, ROPE_B, heads, ROPE_D, ROPE_D, NULL);
  case ROPE_BWD:
    return kiln_rope_bwd(l, j->dt, KILN_ROPE_SBHD, KILN_ROPE_ROTATE_HALF, P(j->dx), P(j->dy),
                         PF(j->f1), s, ROPE_B, heads, ROPE_D, ROPE_D, NULL);
  case CE_FWD: /* x logits [t, v]; f1 loss/row_max, f2 lse/sumexp, f3 tgt, dw1 dloss */
    return kiln_cross_entropy_fwd(l, j->dt, PF(j->f1), PF(j->f2), P(j->x), PI(j->ids), t, (int)v,
                                  -100, 0, NULL);
  case CE_STATS:
    return kiln_cross_entropy_stats(l, j->dt, PF(j->f1), PF(j->dw2), PF(j->f3), P(j->x), PI(j->w2),
                                    t, (int)v, 0, v * bn->tp, -100, 0, NULL);
  default:
    return kiln_cross_entropy_bwd(l, j->dt, P(j->x), PF(j->f2), PF(j->dw1), PI(j->ids), t, (int)v,
                                  0, -100, NULL);
  }
}

/* bench_time's launch of one op on one job. */
typedef struct job_run {
  const bench *bn;
  const job *j;
  op_id op;
} job_run;

static int launch_job(void *arg, const char **why) {
  const job_run *r = arg;
  if (launch(r->bn, r->j, r->op) == KILN_OK) return 1;
  *why = kiln_last_error();
  return 0;
}

/* Times op and the copy of the same bytes; prints one row. Data errors (kiln_ops_check) and
 * asynchronous faults count as failures. */
static void measure(bench *bn, job *j, op_id op, const char *name, const char *dir, double bytes) {
  char what[160], copy_what[96];
  job_run r = {bn, j, op};
  bench_copy_args c = {bn->env.cu, 0, 0, 0};
  double k_ms, c_ms;
  kiln_status st;
  snprintf(what, sizeof what, "%s %s %s", name, dir, j->shape);
  snprintf(copy_what, sizeof copy_what, "cuMemcpyDtoD %s", j->shape);
  j->copy_bytes = (size_t)(bytes / 2) & ~(size_t)255; /* aligned: the copy's fast path */
  if (j->copy_bytes == 0) j->copy_bytes = 256;
  c.dst = j->copy + j->copy_bytes, c.src = j->copy, c.bytes = j->copy_bytes;
  if (!bench_time(&bn->env, bn->reps, bn->warmup, launch_job, &r, what, &k_ms)) goto fail;
  if ((st = kiln_ops_check(bn->env.l, NULL)) != KILN_OK) {
    fprintf(stderr, "kernels_bw: %s: %s\n", what, kiln_last_error());
    goto fail;
  }
  if (!bench_time(&bn->env, bn->reps, bn->warmup, bench_copy, &c, copy_what, &c_ms)) goto fail;
  const double k_gbps = bytes / k_ms / 1e6, c_gbps = 2.0 * (double)j->copy_bytes / c_ms / 1e6;
  if (bn->csv)
    printf("%s,%s,%s,%s,%.0f,%.4f,%.1f,%.4f,%.1f,%.3f\n", name, dir, kiln_dtype_str(j->dt),
           j->shape, bytes, k_ms, k_gbps, c_ms, c_gbps, k_gbps / c_gbps);
  else
    printf("%-16s %-10s %-5s %-28s %10.1f %9.3f %8.1f %9.3f %9.1f %7.3f\n", name, dir,
           kiln_dtype_str(j->dt), j->shape, bytes / 1e6, k_ms, k_gbps, c_ms, c_gbps,
           k_gbps / c_gbps);
  fflush(stdout);
  return;
fail:
  bn->failed = 1;
}

/* ---- device buffers ------------------------------------------------------------------------ */

/* A device buffer of bytes, owned by j (freed by release). 0 on failure (reported). */
static int take(const bench *bn, job *j, CUdeviceptr *out, size_t bytes) {
  const CUresult r = bn->env.cu->MemAlloc(out, bytes ? bytes : 256);
  if (r != CUDA_SUCCESS || j->n_owned == MAX_BUFS) {
    fprintf(stderr, "kernels_bw: %s: cuMemAlloc of %.2f GiB: %s\n", j->shape,
            (double)bytes / (1 << 30), kiln_cuda_error_name(r));
    if (r == CUDA_SUCCESS) bn->env.cu->MemFree(*out);
    *out = 0;
    return 0;
  }
  j->owned[j->n_owned++] = *out;
  return 1;
}

static void release(const bench *bn, job *j) {
  while (j->n_owned > 0)
    bn->env.cu->MemFree(j->owned[--j->n_owned]);
}

/* A buffer of n elements of dt, uniform in [lo, hi) (never all zeros), uploaded from a repeated
 * host tile. */
static int take_rand(bench *bn, job *j, CUdeviceptr *out, size_t n, kiln_dtype dt, float lo,
                     float hi) {
  const size_t es = dt == KILN_F32 ? 4 : 2, tile_n = n < TILE_ELEMS ? n : TILE_ELEMS;
  unsigned char *tile = malloc(tile_n * es);
  int ok = tile != NULL && take(bn, j, out, n * es);
  for (size_t i = 0; ok && i < tile_n; i++) {
    const float v = lo + (hi - lo) * (float)(bench_rng_next(&bn->rng) >> 40) * 0x1p-24f;
    if (dt == KILN_F32)
      memcpy(tile + 4 * i, &v, 4);
    else {
      const uint16_t b = dt == KILN_F16 ? kiln_f32_to_f16(v) : kiln_f32_to_bf16(v);
      memcpy(tile + 2 * i, &b, 2);
    }
  }
  for (size_t off = 0; ok && off < n * es; off += tile_n * es) {
    const size_t k = n * es - off < tile_n * es ? n * es - off : tile_n * es;
    ok = bn->env.cu->MemcpyHtoD(*out + off, tile, k) == CUDA_SUCCESS;
  }
  free(tile);
  return ok;
}

/* How the embedding rows draw their ids. */
typedef enum { IDS_UNIFORM, IDS_ZIPF, IDS_REPEAT } ids_kind;

/* n ids in [0, range): uniform; Zipf (weight of id k proportional to (k + 1)^-ZIPF_S); or uniform
 * with id v / 3 at min(REPEAT_IDS, n) distinct positions. 0 when out of memory. */
static int gen_ids(bench *bn, int64_t *ids, long long n, long long range, long long v,
                   ids_kind kind) {
  if (kind == IDS_ZIPF) {
    double *cdf = malloc((size_t)range * sizeof *cdf), z = 0;
    if (!cdf) return 0;
    for (long long k = 0; k < range; k++)
      cdf[k] = z += pow((double)(k + 1), -ZIPF_S);
    for (long long i = 0; i < n; i++) { /* the first k with cdf[k] > u */
      const double u = (double)(bench_rng_next(&bn->rng) >> 11) * 0x1p-53 * z;
      long long lo = 0, hi = range - 1;
      while (lo < hi) {
        const long long mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u)
          hi = mid;
        else
          lo = mid + 1;
      }
      ids[i] = lo;
    }
    free(cdf);
    return 1;
  }
  for (long long i = 0; i < n; i++)
    ids[i] = (int64_t)(bench_rng_next(&bn->rng) % (uint64_t)range);
  if (kind == IDS_REPEAT)
    for (long long k = 0, want = n < REPEAT_IDS ? n : REPEAT_IDS; k < want;) {
      const long long i = (long long)(bench_rng_next(&bn->rng) % (uint64_t)n);
      if (ids[i] != v / 3) ids[i] = v / 3, k++;
    }
  return 1;
}

/* Draws j->t ids of the kind into *out (allocated first when 0); *distinct and *inside count
 * those in [0, v). */
static int take_ids(bench *bn, job *j, CUdeviceptr *out, long long range, long long v,
                    ids_kind kind, long long *distinct, long long *inside) {
  int64_t *ids = malloc((size_t)j->t * sizeof *ids);
  unsigned char *seen = calloc((size_t)v, 1);
  int ok = ids && seen && (*out || take(bn, j, out, (size_t)j->t * sizeof *ids)) &&
           gen_ids(bn, ids, j->t, range, v, kind);
  *distinct = *inside = 0;
  for (long long i = 0; ok && i < j->t; i++) {
    if (ids[i] < v) {
      ++*inside;
      *distinct += !seen[ids[i]];
      seen[ids[i]] = 1;
    }
  }
  ok = ok && bn->env.cu->MemcpyHtoD(*out, ids, (size_t)j->t * sizeof *ids) == CUDA_SUCCESS;
  free(ids);
  free(seen);
  return ok;
}

/* Runs op once untimed (to produce what a backward reads) and synchronizes. */
static int prime(bench *bn, job *j, op_id op, const char *what) {
  CUresult r;
  if (launch(bn, j, op) != KILN_OK) {
    fprintf(stderr, "kernels_bw: %s %s: %s\n", what, j->shape, kiln_last_error());
    return 0;
  }
  if ((r = bn->env.cu->CtxSynchronize()) != CUDA_SUCCESS) {
    fprintf(stderr, "kernels_bw: %s %s: %s\n", what, j->shape, kiln_cuda_error_name(r));
    return 0;
  }
  return 1;
}

/* ---- one function per family: buffers, then the rows -------------------------------------- */

static void run_norm(bench *bn, job *j, int rms) {
  const char *name = rms ? "rms_norm" : "layer_norm";
  const size_t n = (size_t)j->t * j->h;
  const double es = dsize(j->dt), ws = dsize(j->wdt);
  const double T = (double)j->t, H = j->h;
  j->ws_bytes = rms ? kiln_rms_norm_bwd_workspace_size(j->t, j->h)
                    : kiln_layer_norm_bwd_workspace_size(j->t, j->h);
  if (!take_rand(bn, j, &j->x, n, j->dt, -4, 4) || !take_rand(bn, j, &j->dy, n, j->dt, -1, 1) ||
      !take_rand(bn, j, &j->w1, (size_t)j->h, j->wdt, 0.5f, 1.5f) ||
      !take_rand(bn, j, &j->w2, (size_t)j->h, j->wdt, -0.5f, 0.5f) ||
      !take(bn, j, &j->y, n * (size_t)es) || !take(bn, j, &j->dx, n * (size_t)es) ||
      !take(bn, j, &j->f1, (size_t)j->t * 4) || !take(bn, j, &j->f2, (size_t)j->t * 4) ||
      !take(bn, j, &j->dw1, (size_t)(H * ws)) || !take(bn, j, &j->dw2, (size_t)(H * ws)) ||
      !take(bn, j, &j->ws, j->ws_bytes) || !take(bn, j, &j->copy, (size_t)(3 * T * H * es) + 4096))
    goto fail;
  if (rms) {
    if (!prime(bn, j, RMS_FWD, "rms_norm fwd")) goto fail;
    measure(bn, j, RMS_FWD, name, "fwd", 2 * T * H * es + H * ws + 4 * T);
    measure(bn, j, RMS_BWD, name, "bwd", 3 * T * H * es + 2 * H * ws + 4 * T);
  } else {
    if (!prime(bn, j, LN_FWD, "layer_norm fwd")) goto fail;
    measure(bn, j, LN_FWD, name, "fwd", 2 * T * H * es + 2 * H * ws + 8 * T);
    measure(bn, j, LN_BWD, name, "bwd", 3 * T * H * es + 3 * H * ws + 8 * T);
  }
  return;
fail:
  bn->failed = 1;
}

/* Uniform ids: fwd, bwd_atomic, bwd_det; then both backwards again for skewed ids, the shape
 * marked "zipf1.1" (Zipf) or "rep2048" (one id at 2048 positions; fewer when there are fewer
 * tokens: "rep<count>"). */
static void run_embedding(bench *bn, job *j) {
  const double es = dsize(j->dt), T = (double)j->t, H = j->h;
  const double rows_max = (double)(j->t < j->v ? j->t : j->v); /* distinct ids at most */
  long long d = 0, in = 0;
  char base[64];
  const size_t n = (size_t)j->t * j->h, nw = (size_t)j->v * j->h;
  const size_t ws_det = kiln_embedding_bwd_workspace_size(j->t, 0, j->v, 1);
  const size_t ws_atomic = kiln_embedding_bwd_workspace_size(j->t, 0, j->v, 0);
  if (!take_ids(bn, j, &j->ids, j->v * bn->tp, j->v, IDS_UNIFORM, &d, &in)) goto fail;
  const double f_bytes = 8 * T + (double)d * H * es + T * H * es;
  double b_bytes = 8 * T + (double)in * H * es + 2.0 * (double)d * H * 4;
  const double b_max = 8 * T + T * H * es + 2.0 * rows_max * H * 4; /* any ids */
  if (!take_rand(bn, j, &j->w1, nw, j->dt, -1, 1) || !take_rand(bn, j, &j->dy, n, j->dt, -1, 1) ||
      !take(bn, j, &j->y, n * (size_t)es) || !take(bn, j, &j->dw1, nw * 4) ||
      bn->env.cu->MemsetD8(j->dw1, 0, nw * 4) != CUDA_SUCCESS ||
      !take(bn, j, &j->ws, ws_det > ws_atomic ? ws_det : ws_atomic) ||
      !take(bn, j, &j->copy, (size_t)(f_bytes > b_max ? f_bytes : b_max) + 4096))
    goto fail;
  measure(bn, j, EMB_FWD, "embedding", "fwd", f_bytes);
  memcpy(base, j->shape, sizeof base);
  for (int k = -1; k < 2; k++) {
    if (k >= 0) {
      if (!take_ids(bn, j, &j->ids, j->v * bn->tp, j->v, k ? IDS_REPEAT : IDS_ZIPF, &d, &in))
        goto fail;
      b_bytes = 8 * T + (double)in * H * es + 2.0 * (double)d * H * 4;
      if (k)
        snprintf(j->shape, sizeof j->shape, "%.40s rep%d", base,
                 (int)(j->t < REPEAT_IDS ? j->t : REPEAT_IDS));
      else
        snprintf(j->shape, sizeof j->shape, "%.40s zipf1.1", base);
    }
    j->ws_bytes = ws_atomic;
    measure(bn, j, EMB_BWD_ATOMIC, "embedding", "bwd_atomic", b_bytes);
    j->ws_bytes = ws_det;
    measure(bn, j, EMB_BWD_DET, "embedding", "bwd_det", b_bytes);
  }
  memcpy(j->shape, base, sizeof base);
  return;
fail:
  bn->failed = 1;
}

/* bias_gelu, bias_swiglu, bias_dropout_add: elementwise over [T, H] (swiglu's x: [T, 2H]). */
static void run_elementwise(bench *bn, job *j, const char *name) {
  const double es = dsize(j->dt), T = (double)j->t, H = j->h;
  const int swiglu = strcmp(name, "bias_swiglu") == 0, bda = strcmp(name, "bias_dropout_add") == 0;
  const size_t n = (size_t)j->t * j->h, nx = swiglu ? 2 * n : n;
  if (!take_rand(bn, j, &j->x, nx, j->dt, -4, 4) || !take_rand(bn, j, &j->dy, n, j->dt, -1, 1) ||
      !take_rand(bn, j, &j->w1, swiglu ? 2 * (size_t)j->h : (size_t)j->h, j->dt, -0.5f, 0.5f) ||
      (bda && !take_rand(bn, j, &j->w2, n, j->dt, -2, 2)) || !take(bn, j, &j->y, n * (size_t)es) ||
      !take(bn, j, &j->dx, nx * (size_t)es) ||
      !take(bn, j, &j->copy, (size_t)(5 * T * H * es + 2 * H * es) + 4096))
    goto fail;
  if (swiglu) {
    measure(bn, j, SWIGLU_FWD, name, "fwd", 3 * T * H * es + 2 * H * es);
    measure(bn, j, SWIGLU_BWD, name, "bwd", 5 * T * H * es + 2 * H * es);
  } else if (bda) {
    measure(bn, j, BDA_FWD, name, "fwd", 3 * T * H * es + H * es);
    measure(bn, j, BDA_BWD, name, "bwd", 2 * T * H * es);
  } else {
    measure(bn, j, GELU_FWD, name, "fwd", 2 * T * H * es + H * es);
    measure(bn, j, GELU_BWD, name, "bwd", 3 * T * H * es + H * es);
  }
  return;
fail:
  bn->failed = 1;
}

static void run_rope(bench *bn, job *j) {
  const double es = dsize(j->dt), T = (double)j->t, H = j->h;
  const int s = (int)(j->t / ROPE_B);
  const size_t n = (size_t)j->t * j->h;
  const double bytes = 2 * T * H * es + (double)s * (ROPE_D / 2) * 4;
  snprintf(j->shape, sizeof j->shape, "s%d b%d h%d d%d", s, ROPE_B, j->h / ROPE_D, ROPE_D);
  if (!take_rand(bn, j, &j->x, n, j->dt, -4, 4) || !take_rand(bn, j, &j->dy, n, j->dt, -1, 1) ||
      !take_rand(bn, j, &j->f1, (size_t)s * (ROPE_D / 2), KILN_F32, 0, 6.28f) ||
      !take(bn, j, &j->y, n * (size_t)es) || !take(bn, j, &j->dx, n * (size_t)es) ||
      !take(bn, j, &j->copy, (size_t)bytes + 4096))
    goto fail;
  measure(bn, j, ROPE_FWD, "rope", "fwd", bytes);
  measure(bn, j, ROPE_BWD, "rope", "bwd", bytes);
  return;
fail:
  bn->failed = 1;
}

/* fwd (TP = 1) then stats (partition [0, V) of tp*V), then bwd in place (TP = 1), which reads the
 * forward's lse (f2). */
static void run_cross_entropy(bench *bn, job *j) {
  const double es = dsize(j->dt), T = (double)j->t, V = (double)j->v;
  const size_t n = (size_t)j->t * (size_t)j->v, tv = (size_t)j->t * 4;
  long long d, in;
  char tp_shape[64];
  if (!take_rand(bn, j, &j->x, n, j->dt, -4, 4) ||
      !take_ids(bn, j, &j->ids, j->v, j->v, IDS_UNIFORM, &d, &in) ||
      !take_ids(bn, j, &j->w2, j->v * bn->tp, j->v, IDS_UNIFORM, &d, &in) ||
      !take(bn, j, &j->f1, tv) || !take(bn, j, &j->f2, tv) || !take(bn, j, &j->f3, tv) ||
      !take(bn, j, &j->dw2, tv) || !take_rand(bn, j, &j->dw1, (size_t)j->t, KILN_F32, 0.1f, 1) ||
      !take(bn, j, &j->copy, (size_t)(2 * T * V * es) + 4096))
    goto fail;
  measure(bn, j, CE_FWD, "cross_entropy", "fwd", T * V * es + 16 * T);
  memcpy(tp_shape, j->shape, sizeof tp_shape);
  snprintf(j->shape, sizeof j->shape, "%.40s tp=%d", tp_shape, bn->tp);
  measure(bn, j, CE_STATS, "cross_entropy", "stats", T * V * es + 20 * T);
  memcpy(j->shape, tp_shape, sizeof tp_shape);
  if (!prime(bn, j, CE_FWD, "cross_entropy fwd")) goto fail; /* lse of these logits */
  measure(bn, j, CE_BWD, "cross_entropy", "bwd", 2 * T * V * es + 16 * T);
  return;
fail:
  bn->failed = 1;
}

/* Runs family f at one shape (hidden h, vocabulary v where it has one). */
static void run_one(bench *bn, family f, kiln_dtype dt, kiln_dtype wdt, int h, long long v) {
  job j;
  memset(&j, 0, sizeof j);
  j.dt = dt, j.wdt = wdt, j.t = bn->tokens, j.h = h, j.v = v;
  switch (f) {
  case F_LAYER_NORM:
  case F_RMS_NORM:
    snprintf(j.shape, sizeof j.shape, "%lldx%d w=%s", j.t, h, kiln_dtype_str(wdt));
    run_norm(bn, &j, f == F_RMS_NORM);
    break;
  case F_EMBEDDING:
    snprintf(j.shape, sizeof j.shape, "%lldx%d V=%lld tp=%d", j.t, h, v, bn->tp);
    run_embedding(bn, &j);
    break;
  case F_ROPE: run_rope(bn, &j); break;
  case F_CROSS_ENTROPY:
    snprintf(j.shape, sizeof j.shape, "%lldx%lld", j.t, v);
    run_cross_entropy(bn, &j);
    break;
  default:
    snprintf(j.shape, sizeof j.shape, "%lldx%d", j.t, h);
    run_elementwise(bn, &j, kFamilies[f]);
  }
  const CUresult r = bn->env.cu->CtxSynchronize();
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "kernels_bw: %s %s: %s\n", kFamilies[f], j.shape, kiln_cuda_error_name(r));
    bn->failed = 1;
  }
  release(bn, &j);
}

static void run_dtype(bench *bn, kiln_dtype dt) {
  for (family f = 0; f < N_FAMILIES; f++) {
    if (!bn->family_on[f]) continue;
    if (f == F_LAYER_NORM || f == F_RMS_NORM) { /* fp32 weights, then weights in dt */
      for (int i = 0; i < bn->n_norm_hidden; i++) {
        run_one(bn, f, dt, KILN_F32, bn->norm_hidden[i], 0);
        if (dt != KILN_F32) run_one(bn, f, dt, dt, bn->norm_hidden[i], 0);
      }
      continue;
    }
    if (f == F_CROSS_ENTROPY) { /* rows x vocabulary, no hidden */
      for (int k = 0; k < bn->n_vocab; k++)
        run_one(bn, f, dt, dt, 0, bn->vocab[k]);
      continue;
    }
    for (int i = 0; i < bn->n_hidden; i++) {
      if (f == F_EMBEDDING)
        for (int k = 0; k < bn->n_vocab; k++)
          run_one(bn, f, dt, dt, bn->hidden[i], bn->vocab[k]);
      else if (f != F_LAYER_NORM && f != F_RMS_NORM)
        run_one(bn, f, dt, dt, bn->hidden[i], 0);
    }
  }
}

/* ---- options ----------------------------------------------------------------------------------
 */

static int parse_ll(const char *s, long long lo, long long hi, long long *out) {
  char *end = NULL;
  const long long v = strtoll(s, &end, 10);
  if (end == s || (*end && *end != ',') || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* A comma list of at most MAX_LIST integers in [lo, hi]. */
static int parse_list(const char *s, long long lo, long long hi, long long *out, int *n) {
  for (*n = 0; *s; (*n)++) {
    if (*n == MAX_LIST || !parse_ll(s, lo, hi, &out[*n])) return 0;
    s += strcspn(s, ",");
    if (*s == ',' && !*++s) return 0;
  }
  return *n > 0;
}

static int parse_ops(bench *bn, const char *s) {
  memset(bn->family_on, 0, sizeof bn->family_on);
  while (*s) {
    const size_t len = strcspn(s, ",");
    int f = 0;
    while (f < N_FAMILIES && (strlen(kFamilies[f]) != len || strncmp(s, kFamilies[f], len) != 0))
      f++;
    if (f == N_FAMILIES) {
      fprintf(stderr, "kernels_bw: unknown op '%.*s'\n", (int)len, s);
      return 0;
    }
    bn->family_on[f] = 1;
    s += len + (s[len] == ',');
  }
  return 1;
}

static int parse_args(bench *bn, int argc, char **argv, const char **dtypes, int *smoke) {
  long long v, list[MAX_LIST];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *s = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--csv") == 0) {
      bn->csv = 1;
      continue;
    }
    if (strcmp(a, "--smoke") == 0) {
      bn->tokens = 64, bn->hidden[0] = 256, bn->n_hidden = 1, bn->vocab[0] = 1000, bn->n_vocab = 1;
      bn->norm_hidden[0] = 256, bn->n_norm_hidden = 1;
      bn->reps = 2, bn->warmup = 0, *smoke = 1;
      continue;
    }
    if (!s) return 0;
    i++;
    if (strcmp(a, "--reps") == 0 && parse_ll(s, 1, BENCH_MAX_REPS, &v))
      bn->reps = (int)v;
    else if (strcmp(a, "--warmup") == 0 && parse_ll(s, 0, 1000, &v))
      bn->warmup = (int)v;
    else if (strcmp(a, "--tokens") == 0 && parse_ll(s, ROPE_B, 1LL << 40, &v) && v % ROPE_B == 0)
      bn->tokens = v;
    else if (strcmp(a, "--tp") == 0 && parse_ll(s, 1, 1024, &v))
      bn->tp = (int)v;
    else if (strcmp(a, "--hidden") == 0 && parse_list(s, ROPE_D, 1 << 20, list, &bn->n_hidden)) {
      for (int k = 0; k < bn->n_hidden; k++) {
        if (list[k] % ROPE_D) return 0; /* rope: h = hidden / 128 heads */
        bn->hidden[k] = bn->norm_hidden[k] = (int)list[k];
      }
      bn->n_norm_hidden = bn->n_hidden;
    } else if (strcmp(a, "--vocab") == 0 && parse_list(s, 1, 1 << 30, bn->vocab, &bn->n_vocab))
      continue;
    else if (strcmp(a, "--dtypes") == 0)
      *dtypes = s;
    else if (strcmp(a, "--ops") == 0) {
      if (!parse_ops(bn, s)) return 0;
    } else
      return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  bench bn;
  const char *dtypes = "bf16";
  kiln_dtype dt;
  bench_open_result ready;
  int rc, found, smoke = 0;
  memset(&bn, 0, sizeof bn);
  bn.tokens = 16384, bn.hidden[0] = 4096, bn.hidden[1] = 8192, bn.n_hidden = 2;
  /* the norms also at the largest hidden sizes (their g path) */
  bn.norm_hidden[0] = 4096, bn.norm_hidden[1] = 8192, bn.norm_hidden[2] = 12288;
  bn.norm_hidden[3] = 16384, bn.n_norm_hidden = 4;
  bn.vocab[0] = 32000, bn.vocab[1] = 128000, bn.n_vocab = 2, bn.tp = 2;
  bn.reps = 20, bn.warmup = 5, bn.rng = 0x9e3779b97f4a7c15ULL;
  for (int f = 0; f < N_FAMILIES; f++)
    bn.family_on[f] = 1;
  if (!parse_args(&bn, argc, argv, &dtypes, &smoke)) {
    fprintf(stderr, "usage: kernels_bw [--ops LIST] [--dtypes bf16,f16,f32] [--tokens N (of 4)] "
                    "[--hidden LIST (of 128)] [--vocab LIST] [--tp N] [--reps N] [--warmup N] "
                    "[--csv] [--smoke]\n  ops: layer_norm, rms_norm, embedding, bias_gelu, "
                    "bias_swiglu, bias_dropout_add, rope, cross_entropy\n");
    return 2;
  }
  /* Every unit is built or loaded before anything is timed; --smoke leaves it to the first launch
   * of each op, so that it builds only the units it runs. */
  if ((ready = bench_open(&bn.env, "kernels_bw", !smoke)) != BENCH_READY)
    return ready == BENCH_FAILED;
  bench_header(&bn.env,
               "tokens %lld; median of %d after %d warm-up; embedding/CE stats partition tp=%d",
               bn.tokens, bn.reps, bn.warmup, bn.tp);
  if (bn.csv)
    printf("op,dir,dtype,shape,bytes,kernel_ms,kernel_gbps,copy_ms,copy_gbps,ratio_to_copy\n");
  else
    printf("%-16s %-10s %-5s %-28s %10s %9s %8s %9s %9s %7s\n", "op", "dir", "dtype", "shape",
           "MB moved", "kernel ms", "GB/s", "copy ms", "copy GB/s", "vs copy");
  for (const char *p = dtypes; (found = bench_next_dtype(&dt, &p, "kernels_bw")) != 0;) {
    if (found > 0)
      run_dtype(&bn, dt);
    else
      bn.failed = 1;
  }
  rc = bn.failed;
  bench_close(&bn.env);
  return rc;
}
