/* cross_entropy_ref.c — inputs and the float64 reference for gpu.cross_entropy. */
#include "tests/gpu/cross_entropy_ref.h"

#include <math.h> /* exp, log, INFINITY */

#include "tests/gpu/harness.h" /* elements of a dtype, xorshift64* */

void ce_make_logits(kiln_dtype dt, void *x, long long rows, int vocab, double scale, int neg_inf,
                    const int64_t *target, uint64_t *seed) {
  for (long long r = 0; r < rows; r++)
    for (int c = 0; c < vocab; c++) {
      const size_t i = (size_t)r * (size_t)vocab + (size_t)c;
      float v = (float)gt_rng_uniform(seed, -scale, scale);
      if (neg_inf && target[r] != c && gt_rng_next(seed) % 7 == 0) v = -INFINITY;
      gt_set(dt, x, i, v);
      if (gt_get(dt, x, i) == 0) gt_set(dt, x, i, (float)(scale * 0.5));
    }
}

void ce_ref_fwd(kiln_dtype dt, const void *x, const int64_t *target, long long rows, int vocab,
                long long ignore, double *loss, double *lse, double *xmax) {
  for (long long r = 0; r < rows; r++) {
    const size_t base = (size_t)r * (size_t)vocab;
    const int64_t t = target[r];
    double m = -INFINITY, s = 0;
    if (t == ignore || t < 0 || t >= vocab) {
      loss[r] = lse[r] = 0;
      if (xmax) xmax[r] = 0;
      continue;
    }
    for (int c = 0; c < vocab; c++) {
      const double v = gt_get(dt, x, base + (size_t)c);
      if (v > m) m = v;
    }
    for (int c = 0; c < vocab; c++)
      s += exp(gt_get(dt, x, base + (size_t)c) - m);
    lse[r] = m + log(s);
    loss[r] = lse[r] - gt_get(dt, x, base + (size_t)t);
    if (xmax) xmax[r] = m;
  }
}

void ce_ref_bwd(kiln_dtype dt, const void *x, const float *lse, const float *dloss,
                const int64_t *target, long long rows, int vocab, long long ignore, double *g) {
  for (long long r = 0; r < rows; r++) {
    const size_t base = (size_t)r * (size_t)vocab;
    for (int c = 0; c < vocab; c++) {
      const double p = exp(gt_get(dt, x, base + (size_t)c) - (double)lse[r]);
      g[base + (size_t)c] =
          target[r] == ignore ? 0 : (double)dloss[r] * (p - (target[r] == c ? 1.0 : 0.0));
    }
  }
}
