/* softmax_bw — achieved bandwidth of kiln's softmax ops, as a fraction of a
 * device-to-device copy of the same number of bytes measured in the same
 * run (bench/README.md).
 *
 * For each shape and dtype, on x [B, H, SQ, SK] (default three shapes: 32 x 16 x 2048 x 2048, and
 * the 8K and 16K rows of docs/kernels/softmax.md, 2 x 16 x 4096 x 8192 and 1 x 16 x 4096 x 16384;
 * --shape, repeatable, replaces them; --csv, whose rows are keyed by (op, dtype) for
 * softmax_vs_torch, takes one shape: the first):
 *   softmax_fwd  kiln_scaled_softmax_fwd                     reads x, writes y
 *   softmax_bwd  kiln_scaled_softmax_bwd                     reads y, dy, writes dx
 *   masked_fwd   kiln_scaled_masked_softmax_fwd, mask [B,1,SQ,SK] (per batch)
 *                                                            reads x and the mask once, writes y
 *   masked_bwd   kiln_scaled_masked_softmax_bwd              reads y, dy, writes dx
 *   causal_fwd   kiln_scaled_upper_triang_masked_softmax_fwd, [B*H, SQ, SK]
 *                                                            reads x's lower triangle, writes y
 *   causal_bwd   ..._bwd                                     reads y, dy's lower triangle, writes
 * dx "bytes" is what the op must read and write at least; GB/s = bytes / time. The baseline copies
 * bytes / 2 with cuMemcpyDtoD (it reads and writes that much), timed the same way right after the
 * op. Times are CUDA events around one launch, the median of --reps after --warmup launches.
 *
 * usage: softmax_bw [--shape B,H,SQ,SK]... [--dtypes bf16,f16,f32] [--reps N] [--warmup N] [--csv]
 * Without a GPU it prints why and exits 0. */
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

typedef enum {
  SOFTMAX_FWD,
  SOFTMAX_BWD,
  MASKED_FWD,
  MASKED_BWD,
  CAUSAL_FWD,
  CAUSAL_BWD,
  N_OPS
} op_id;
static const char *const kOpNames[N_OPS] = {"softmax_fwd", "softmax_bwd", "masked_fwd",
                                            "masked_bwd",  "causal_fwd",  "causal_bwd"};

#define MAX_SHAPES 8

typedef struct bench {
  bench_env env;    /* cu, l, info, events */
  int b, h, sq, sk; /* the shape being run */
  int shapes[MAX_SHAPES][4], n_shapes;
  int reps, warmup, csv;
  /* per dtype */
  kiln_dtype dt;
  size_t n, es;      /* elements per tensor, bytes per element */
  CUdeviceptr arena; /* 3 tensors: A, B, C */
  CUdeviceptr mask;  /* b * sq * sk bytes */
} bench;

static void *at(const bench *bn, int k) { /* tensor k of the arena */
  return (void *)(uintptr_t)(bn->arena + (CUdeviceptr)k * bn->n * bn->es);
}

/* Tensor A holds random x / dy, B the forward's y, C the backward's dx. */
static kiln_status launch(const bench *bn, op_id op) {
  const long long rows = (long long)bn->b * bn->h * bn->sq;
  const float scale = 0.125f;
  void *A = at(bn, 0), *B = at(bn, 1), *C = at(bn, 2);
  const uint8_t *m = (const uint8_t *)(uintptr_t)bn->mask;
  kiln_loader *l = bn->env.l;
  switch (op) {
  case SOFTMAX_FWD: return kiln_scaled_softmax_fwd(l, bn->dt, B, A, rows, bn->sk, scale, NULL);
  case SOFTMAX_BWD: return kiln_scaled_softmax_bwd(l, bn->dt, C, B, A, rows, bn->sk, scale, NULL);
  case MASKED_FWD:
    return kiln_scaled_masked_softmax_fwd(l, bn->dt, B, A, m, bn->b, bn->h, bn->sq, bn->sk, bn->b,
                                          scale, NULL);
  case MASKED_BWD:
    return kiln_scaled_masked_softmax_bwd(l, bn->dt, C, B, A, bn->b, bn->h, bn->sq, bn->sk, scale,
                                          NULL);
  case CAUSAL_FWD:
    return kiln_scaled_upper_triang_masked_softmax_fwd(l, bn->dt, B, A, (long long)bn->b * bn->h,
                                                       bn->sq, bn->sk, scale, NULL);
  default:
    return kiln_scaled_upper_triang_masked_softmax_bwd(l, bn->dt, C, B, A, (long long)bn->b * bn->h,
                                                       bn->sq, bn->sk, scale, NULL);
  }
}

/* The bytes op must move: causal reads only the lower triangle. */
static double op_bytes(const bench *bn, op_id op) {
  const double n = (double)bn->n, es = (double)bn->es;
  double lower = 0; /* elements with j <= i, over all rows */
  for (int i = 0; i < bn->sq; i++)
    lower += i + 1 < bn->sk ? i + 1 : bn->sk;
  lower *= (double)bn->b * bn->h;
  switch (op) {
  case SOFTMAX_FWD: return 2 * n * es;
  case MASKED_FWD: return 2 * n * es + (double)bn->b * bn->sq * bn->sk;
  case SOFTMAX_BWD:
  case MASKED_BWD: return 3 * n * es;
  case CAUSAL_FWD: return (lower + n) * es;
  default: return (2 * lower + n) * es;
  }
}

/* bench_time's launch of one op. */
typedef struct op_run {
  const bench *bn;
  op_id op;
} op_run;

static int launch_op(void *arg, const char **why) {
  const op_run *r = arg;
  if (launch(r->bn, r->op) == KILN_OK) return 1;
  *why = kiln_last_error();
  return 0;
}

/* Fills [dst, dst + bytes) from a repeated host tile. */
static int upload_tiled(const bench *bn, CUdeviceptr dst, size_t bytes, const void *tile,
                        size_t tile_bytes) {
  for (size_t off = 0; off < bytes; off += tile_bytes) {
    const size_t k = bytes - off < tile_bytes ? bytes - off : tile_bytes;
    if (bn->env.cu->MemcpyHtoD(dst + off, tile, k) != CUDA_SUCCESS) return 0;
  }
  return 1;
}

/* Random x in [-4, 4) in the dtype, a mask with ~1 in 8 positions masked. */
static int fill_inputs(bench *bn) {
  uint64_t s = 0x9e3779b97f4a7c15ULL;
  unsigned char *tile = malloc((size_t)TILE_ELEMS * 4);
  int ok = tile != NULL;
  for (size_t i = 0; ok && i < TILE_ELEMS; i++) {
    const float v = (float)(bench_rng_next(&s) >> 40) * 0x1p-21f - 4.f;
    if (bn->dt == KILN_F32)
      memcpy(tile + 4 * i, &v, 4);
    else {
      const uint16_t h = bn->dt == KILN_F16 ? kiln_f32_to_f16(v) : kiln_f32_to_bf16(v);
      memcpy(tile + 2 * i, &h, 2);
    }
  }
  ok = ok && upload_tiled(bn, bn->arena, bn->n * bn->es, tile, (size_t)TILE_ELEMS * bn->es);
  for (size_t i = 0; ok && i < TILE_ELEMS; i++)
    tile[i] = (bench_rng_next(&s) >> 61) == 0;
  ok = ok && upload_tiled(bn, bn->mask, (size_t)bn->b * bn->sq * bn->sk, tile, TILE_ELEMS);
  /* y for the backward ops: a real softmax output */
  ok = ok && launch(bn, SOFTMAX_FWD) == KILN_OK && bn->env.cu->CtxSynchronize() == CUDA_SUCCESS;
  free(tile);
  return ok;
}

static void run_dtype(bench *bn, kiln_dtype dt, uint64_t total_mem) {
  const size_t mask_bytes = (size_t)bn->b * bn->sq * bn->sk;
  bn->dt = dt;
  bn->es = dt == KILN_F32 ? 4 : 2;
  bn->n = (size_t)bn->b * bn->h * bn->sq * bn->sk;
  if ((double)(3 * bn->n * bn->es + mask_bytes) > 0.9 * (double)total_mem) {
    printf("%s: skipped, needs %.1f GiB of %.1f GiB\n", kiln_dtype_str(dt),
           (3.0 * bn->n * bn->es + mask_bytes) / (1 << 30), (double)total_mem / (1 << 30));
    return;
  }
  if (bn->env.cu->MemAlloc(&bn->arena, 3 * bn->n * bn->es) != CUDA_SUCCESS ||
      bn->env.cu->MemAlloc(&bn->mask, mask_bytes) != CUDA_SUCCESS || !fill_inputs(bn)) {
    fprintf(stderr, "softmax_bw: %s: could not set up the tensors (%s)\n", kiln_dtype_str(dt),
            kiln_last_error());
    goto out;
  }
  for (int op = 0; op < N_OPS; op++) {
    const double bytes = op_bytes(bn, (op_id)op);
    op_run r = {bn, (op_id)op};
    bench_copy_args c = {bn->env.cu, bn->arena + (size_t)(bytes / 2), bn->arena,
                         (size_t)(bytes / 2)};
    double k_ms, c_ms;
    if (!bench_time(&bn->env, bn->reps, bn->warmup, launch_op, &r, kOpNames[op], &k_ms) ||
        !bench_time(&bn->env, bn->reps, bn->warmup, bench_copy, &c, "cuMemcpyDtoD", &c_ms))
      break;
    if (bn->csv)
      printf("%s,%s,%.0f,%.4f,%.1f,%.4f,%.1f,%.3f\n", kOpNames[op], kiln_dtype_str(dt), bytes, k_ms,
             bytes / k_ms / 1e6, c_ms, bytes / c_ms / 1e6, c_ms / k_ms);
    else
      printf("%-12s %-5s %10.1f %10.3f %10.1f %10.3f %10.1f %8.3f\n", kOpNames[op],
             kiln_dtype_str(dt), bytes / 1e6, k_ms, bytes / k_ms / 1e6, c_ms, bytes / c_ms / 1e6,
             c_ms / k_ms);
  }
out:
  if (bn->arena) bn->env.cu->MemFree(bn->arena);
  if (bn->mask) bn->env.cu->MemFree(bn->mask);
  bn->arena = bn->mask = 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || (*end && *end != ',') || v < lo || v > hi) return 0;
  *out = (int)v;
  return 1;
}

static int parse_args(bench *bn, int argc, char **argv, const char **dtypes) {
  int given = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--csv") == 0) {
      bn->csv = 1;
      continue;
    }
    if (!v) return 0;
    i++;
    if (strcmp(a, "--reps") == 0) {
      if (!parse_int(v, 1, BENCH_MAX_REPS, &bn->reps)) return 0;
    } else if (strcmp(a, "--warmup") == 0) {
      if (!parse_int(v, 0, 1000, &bn->warmup)) return 0;
    } else if (strcmp(a, "--dtypes") == 0) {
      *dtypes = v;
    } else if (strcmp(a, "--shape") == 0) {
      const char *p = v;
      if (!given) bn->n_shapes = 0, given = 1; /* the first --shape replaces the defaults */
      if (bn->n_shapes == MAX_SHAPES) return 0;
      for (int k = 0; k < 4; k++) {
        if (!parse_int(p, 1, 1 << 30, &bn->shapes[bn->n_shapes][k])) return 0;
        p = strchr(p, ',');
        if ((k < 3) != (p != NULL)) return 0;
        if (p) p++;
      }
      bn->n_shapes++;
    } else {
      return 0;
    }
  }
  return 1;
}

int main(int argc, char **argv) {
  bench bn = {.shapes = {{32, 16, 2048, 2048}, {2, 16, 4096, 8192}, {1, 16, 4096, 16384}},
              .n_shapes = 3,
              .reps = 20,
              .warmup = 5};
  const char *dtypes = "bf16,f16,f32";
  kiln_dtype dt;
  bench_open_result ready;
  int found;
  if (!parse_args(&bn, argc, argv, &dtypes)) {
    fprintf(stderr, "usage: softmax_bw [--shape B,H,SQ,SK]... [--dtypes bf16,f16,f32] [--reps N] "
                    "[--warmup N] [--csv]\n");
    return 2;
  }
  if (bn.csv) bn.n_shapes = 1; /* one row per (op, dtype): the first shape */
  if ((ready = bench_open(&bn.env, "softmax_bw", 1)) != BENCH_READY) return ready == BENCH_FAILED;
  bench_header(&bn.env, "%d shape(s); median of %d after %d warm-up; scale 0.125", bn.n_shapes,
               bn.reps, bn.warmup);
  if (bn.csv) printf("op,dtype,bytes,kernel_ms,kernel_gbps,copy_ms,copy_gbps,ratio_to_copy\n");
  for (int i = 0; i < bn.n_shapes; i++) {
    bn.b = bn.shapes[i][0], bn.h = bn.shapes[i][1], bn.sq = bn.shapes[i][2],
    bn.sk = bn.shapes[i][3];
    if (!bn.csv) {
      printf("\nx [%d, %d, %d, %d]\n", bn.b, bn.h, bn.sq, bn.sk);
      printf("%-12s %-5s %10s %10s %10s %10s %10s %8s\n", "op", "dtype", "MB moved", "kernel ms",
             "GB/s", "copy ms", "copy GB/s", "vs copy");
    }
    for (const char *p = dtypes; (found = bench_next_dtype(&dt, &p, "softmax_bw")) != 0;)
      if (found > 0) run_dtype(&bn, dt, bn.env.info.total_mem);
  }
  bench_close(&bn.env);
  return 0;
}
