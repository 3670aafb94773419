/* cross_entropy_ref.c — inputs and the float64 reference for gpu.cross_entropy. */
#include "tests/gpu/cross_entropy_ref.h"

#include <math.h> /* exp, log, INFINITY */

#include "common/half.h" /* f16/bf16 conversions, as libkiln does them */

size_t ce_dtype_size(kiln_dtype dt) {
  return dt == KILN_F32 ? 4 : 2;
}

double ce_get(kiln_dtype dt, const void *p, size_t i) {
  if (dt == KILN_F32) return ((const float *)p)[i];
  if (dt == KILN_F16) return kiln_f16_to_f32(((const uint16_t *)p)[i]);
  return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
}

void ce_set(kiln_dtype dt, void *p, size_t i, float v) {
  if (dt == KILN_F32)
    ((float *)p)[i] = v;
  else if (dt == KILN_F16)
    ((uint16_t *)p)[i] = kiln_f32_to_f16(v);
  else
    ((uint16_t *)p)[i] = kiln_f32_to_bf16(v);
}

uint64_t ce_rng_next(uint64_t *s) { /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

double ce_rng_uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * (double)(ce_rng_next(s) >> 11) * 0x1p-53;
}

void ce_make_logits(kiln_dtype dt, void *x, long long rows, int vocab, double scale, int neg_inf,
                    const int64_t *target, uint64_t *seed) {
  for (long long r = 0; r < rows; r++)
    for (int c = 0; c < vocab; c++) {
      const size_t i = (size_t)r * (size_t)vocab + (size_t)c;
      float v = (float)ce_rng_uniform(seed, -scale, scale);
      if (neg_inf && target[r] != c && ce_rng_next(seed) % 7 == 0) v = -INFINITY;
      ce_set(dt, x, i, v);
      if (ce_get(dt, x, i) == 0) ce_set(dt, x, i, (float)(scale * 0.5));
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
      const double v = ce_get(dt, x, base + (size_t)c);
      if (v > m) m = v;
    }
    for (int c = 0; c < vocab; c++)
      s += exp(ce_get(dt, x, base + (size_t)c) - m);
    lse[r] = m + log(s);
    loss[r] = lse[r] - ce_get(dt, x, base + (size_t)t);
    if (xmax) xmax[r] = m;
  }
}

void ce_ref_bwd(kiln_dtype dt, const void *x, const float *lse, const float *dloss,
                const int64_t *target, long long rows, int vocab, long long ignore, double *g) {
  for (long long r = 0; r < rows; r++) {
    const size_t base = (size_t)r * (size_t)vocab;
    for (int c = 0; c < vocab; c++) {
      const double p = exp(ce_get(dt, x, base + (size_t)c) - (double)lse[r]);
      g[base + (size_t)c] =
          target[r] == ignore ? 0 : (double)dloss[r] * (p - (target[r] == c ? 1.0 : 0.0));
    }
  }
}
