/* embedding_ref.c — see embedding_ref.h. */
#include "tests/gpu/embedding_ref.h"

#include <math.h>   /* fabs, ldexp */
#include <stdlib.h> /* calloc, free */
#include <string.h> /* memcpy */

#include "tests/gpu/harness.h" /* elements of a dtype, xorshift64* */

void ref_fill(kiln_dtype dt, void *h, size_t n, double scale, uint64_t *seed) {
  for (size_t i = 0; i < n; i++) {
    double m = 1.0 / 64 + gt_unit53(gt_rng_next(seed)) * (1.0 - 1.0 / 64);
    gt_set(dt, h, i, (float)((gt_rng_next(seed) & 1 ? -m : m) * scale));
  }
}

void ref_ids(int64_t *ids, long long n, long long vocab_size, long long lo, long long hi,
             double outside, uint64_t *seed) {
  const int room = lo > 0 || hi < vocab_size;
  for (long long t = 0; t < n; t++) {
    if (room && gt_unit53(gt_rng_next(seed)) < outside) {
      long long other = vocab_size - (hi - lo); /* ids outside [lo, hi) */
      long long k = (long long)(gt_rng_next(seed) % (uint64_t)other);
      ids[t] = k < lo ? k : hi + (k - lo);
    } else {
      ids[t] = lo + (long long)(gt_rng_next(seed) % (uint64_t)(hi - lo));
    }
  }
}

void ref_fwd(double *y, const int64_t *ids, kiln_dtype dt, const void *weight, long long n,
             int hidden, long long vs, long long ve) {
  for (long long t = 0; t < n; t++)
    for (int c = 0; c < hidden; c++) {
      const int in = ids[t] >= vs && ids[t] < ve;
      y[t * hidden + c] = in ? gt_get(dt, weight, (size_t)((ids[t] - vs) * hidden + c)) : 0.0;
    }
}

void ref_bwd(double *dw, double *tol, const float *dw0, kiln_dtype dt, const void *dy,
             const int64_t *ids, long long n, int hidden, long long vs, long long ve) {
  const long long rows = ve - vs;
  long long *cnt = calloc((size_t)rows, sizeof *cnt);
  double *abs_sum = calloc((size_t)(rows * hidden), sizeof *abs_sum);
  for (long long i = 0; i < rows * hidden; i++)
    dw[i] = dw0[i];
  for (long long t = 0; t < n; t++) {
    if (ids[t] < vs || ids[t] >= ve) continue;
    const long long r = ids[t] - vs;
    cnt[r]++;
    for (int c = 0; c < hidden; c++) {
      const double v = gt_get(dt, dy, (size_t)(t * hidden + c));
      dw[r * hidden + c] += v;
      abs_sum[r * hidden + c] += fabs(v);
    }
  }
  /* k fp32 additions (k - 1 into the running sum, one into dweight, or k
   * atomics): each rounds by at most 2^-24 of a partial sum, and every
   * partial sum is at most |dw0| + sum |dy|: k * 2^-24 * that, doubled. */
  for (long long r = 0; r < rows; r++)
    for (int c = 0; c < hidden; c++) {
      const long long i = r * hidden + c;
      tol[i] = 2.0 * (double)(cnt[r] + 1) * ldexp(1.0, -24) * (fabs(dw0[i]) + abs_sum[i]);
    }
  free(cnt);
  free(abs_sum);
}

/* The rows of a piece (loader/ops_embedding.c emb_piece). */
static long long ref_piece(int hidden) {
  const long long p = ((long long)hidden * 4 + 127) / 128;
  return p > 64 ? p : 64;
}

void ref_bwd_sorted_f32(float *dw, const float *dw0, kiln_dtype dt, const void *dy,
                        const int64_t *ids, long long n, int hidden, long long vs, long long ve) {
  const long long rows = ve - vs, piece = ref_piece(hidden);
  long long *start = calloc((size_t)rows + 1, sizeof *start), *order = malloc((size_t)n * 8);
  float *total = malloc((size_t)hidden * 4), *part = malloc((size_t)hidden * 4);
  /* the sorted order: the partition's tokens by row, then position (a counting sort) */
  for (long long t = 0; t < n; t++)
    if (ids[t] >= vs && ids[t] < ve) start[ids[t] - vs + 1]++;
  for (long long r = 0; r < rows; r++)
    start[r + 1] += start[r];
  for (long long t = 0; t < n; t++)
    if (ids[t] >= vs && ids[t] < ve) order[start[ids[t] - vs]++] = t;
  for (long long r = rows; r > 0; r--) /* back to each row's first sorted index */
    start[r] = start[r - 1];
  start[0] = 0;
  /* a row's segment [start[r], start[r + 1]) is cut at the multiples of piece:
   * the head's sum is the running total; each tail is summed from 0, then
   * added to it; the total is added to dweight last */
  for (long long r = 0; r < rows; r++) {
    int in_head = 1;
    memset(total, 0, (size_t)hidden * 4);
    for (long long i = start[r]; i < start[r + 1]; i++) {
      if (i > start[r] && i % piece == 0) { /* a tail piece starts */
        for (int c = 0; c < hidden && !in_head; c++) {
          volatile float s = total[c] + part[c];
          total[c] = s;
        }
        in_head = 0;
        memset(part, 0, (size_t)hidden * 4);
      }
      for (int c = 0; c < hidden; c++) {
        float *acc = in_head ? &total[c] : &part[c];
        volatile float s = *acc + (float)gt_get(dt, dy, (size_t)(order[i] * hidden + c));
        *acc = s;
      }
    }
    for (int c = 0; c < hidden && !in_head; c++) { /* the last tail */
      volatile float s = total[c] + part[c];
      total[c] = s;
    }
    for (int c = 0; c < hidden; c++) {
      volatile float s = dw0[r * hidden + c] + total[c];
      dw[r * hidden + c] = s;
    }
  }
  free(start);
  free(order);
  free(total);
  free(part);
}
