/* The float64 reference of rope_ref.h. */
#include "tests/gpu/rope_ref.h"

#include <math.h>

#include "tests/gpu/harness.h" /* elements of a dtype, xorshift64* */

#define REF_CALC 0x1p-20 /* x (|x0| + |x1|): sin/cos to ~1e-7, fp32 products and sums */

void rope_ref_fill(kiln_dtype dt, void *x, size_t n, uint64_t seed) {
  uint64_t st = seed ? seed : 1;
  for (size_t i = 0; i < n; i++) {
    const double u = gt_unit53(gt_rng_next(&st));
    const float m = (float)(1.0 / 64 + u * (1 - 1.0 / 64));
    gt_set(dt, x, i, (gt_rng_next(&st) & 1) ? -m : m);
  }
}

void rope_ref_angles(const rope_shape *sh, float *angles) {
  const int half = sh->rot / 2;
  for (int p = 0; p < sh->s; p++)
    for (int i = 0; i < half; i++)
      angles[(size_t)p * half + i] = (float)((sh->pos0 + p) * pow(sh->base, -2.0 * i / sh->rot));
}

/* Half-ulp of dt relative to the value, widened to one ulp: the kernel's
 * fp32 result may sit on the other side of a rounding boundary. */
static double rel(kiln_dtype dt) {
  return dt == KILN_F32 ? 0x1p-23 : dt == KILN_F16 ? 0x1p-10 : 0x1p-7;
}

void rope_ref(kiln_dtype dt, kiln_rope_layout layout, kiln_rope_style style, int bwd, int roundtrip,
              const rope_shape *sh, const void *x, const float *angles, double *out, double *tol) {
  const int half = sh->rot / 2, d = sh->d;
  const double r = rel(dt), tiny = dt == KILN_F16 ? 0x1p-24 : 0;
  for (int t = 0; t < sh->s * sh->b; t++) {
    /* token t in memory order; its position */
    const int p = layout == KILN_ROPE_SBHD ? t / sh->b : t % sh->s;
    for (int hh = 0; hh < sh->h; hh++) {
      const size_t row = ((size_t)t * sh->h + hh) * d;
      for (int i = 0; i < half; i++) {
        const size_t i0 = row + (style == KILN_ROPE_INTERLEAVED ? 2 * i : i);
        const size_t i1 = row + (style == KILN_ROPE_INTERLEAVED ? 2 * i + 1 : i + half);
        const double a = angles[(size_t)p * half + i], c = cos(a), sn = bwd ? -sin(a) : sin(a);
        const double x0 = gt_get(dt, x, i0), x1 = gt_get(dt, x, i1);
        const double mag = fabs(x0) + fabs(x1);
        if (roundtrip) { /* x itself; y rounded to dt in between, then rotated back */
          out[i0] = x0;
          out[i1] = x1;
          tol[i0] = tol[i1] = mag * (3 * r + 2 * REF_CALC) + 2 * tiny;
          continue;
        }
        out[i0] = x0 * c - x1 * sn;
        out[i1] = x1 * c + x0 * sn;
        tol[i0] = fabs(out[i0]) * r + mag * REF_CALC + tiny;
        tol[i1] = fabs(out[i1]) * r + mag * REF_CALC + tiny;
      }
      for (int f = sh->rot; f < d; f++) {
        out[row + f] = gt_get(dt, x, row + f);
        tol[row + f] = -1;
      }
    }
  }
}

size_t rope_ref_check(kiln_dtype dt, const void *got, const void *x, const double *ref,
                      const double *tol, size_t n, size_t *first_i, double *worst) {
  size_t bad = 0;
  *worst = 0;
  for (size_t i = 0; i < n; i++) {
    const double g = gt_get(dt, got, i);
    int ok;
    if (tol[i] < 0) {
      ok = g == gt_get(dt, x, i);
    } else {
      const double e = fabs(g - ref[i]);
      ok = e <= tol[i]; /* false for NaN */
      if (ok && tol[i] > 0 && e / tol[i] > *worst) *worst = e / tol[i];
    }
    if (!ok && bad++ == 0) *first_i = i;
  }
  return bad;
}
