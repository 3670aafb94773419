/* norm_ref.c — float64 reference of layer norm and RMSNorm (norm_ref.h). */
#include "tests/gpu/norm_ref.h"

#include <math.h>

#include "tests/gpu/harness.h" /* elements of a dtype, xorshift64* */

void nref_fill(kiln_dtype dt, void *p, size_t n, double lo, double hi, double offset,
               uint64_t *seed) {
  for (size_t i = 0; i < n; ++i) {
    double v = gt_rng_uniform(seed, lo, hi);
    if (fabs(v) < 1e-3) v = v < 0 ? -1e-3 : 1e-3; /* never zero */
    gt_set(dt, p, i, (float)(v + offset));
  }
}

void nref_fwd(int ln, kiln_dtype dt, kiln_dtype wdt, const void *x, const void *gamma,
              const void *beta, long long rows, int cols, double eps, double *y, double *mean,
              double *rstd) {
  for (long long r = 0; r < rows; ++r) {
    const size_t off = (size_t)r * (size_t)cols;
    double m = 0, v = 0;
    if (ln) {
      for (int j = 0; j < cols; ++j)
        m += gt_get(dt, x, off + j);
      m /= cols;
    }
    for (int j = 0; j < cols; ++j) {
      const double d = gt_get(dt, x, off + j) - m;
      v += d * d;
    }
    const double rs = 1.0 / sqrt(v / cols + eps);
    mean[r] = m;
    rstd[r] = rs;
    for (int j = 0; j < cols; ++j) {
      double o = (gt_get(dt, x, off + j) - m) * rs * gt_get(wdt, gamma, j);
      if (ln) o += gt_get(wdt, beta, j);
      y[off + j] = o;
    }
  }
}

void nref_bwd(int ln, kiln_dtype dt, kiln_dtype wdt, const void *dy, const void *x,
              const float *mean, const float *rstd, const void *gamma, long long rows, int cols,
              double *dx, double *dx_abs, double *dgamma, double *dbeta, double *dgamma_abs,
              double *dbeta_abs) {
  for (int j = 0; j < cols; ++j)
    dgamma[j] = dbeta[j] = dgamma_abs[j] = dbeta_abs[j] = 0;
  for (long long r = 0; r < rows; ++r) {
    const size_t off = (size_t)r * (size_t)cols;
    const double m = ln ? mean[r] : 0.0, rs = rstd[r];
    double s1 = 0, s2 = 0;
    for (int j = 0; j < cols; ++j) {
      const double xh = (gt_get(dt, x, off + j) - m) * rs;
      const double d = gt_get(dt, dy, off + j);
      const double g = d * gt_get(wdt, gamma, j);
      s1 += g;
      s2 += g * xh;
      dgamma[j] += d * xh;
      dbeta[j] += d;
      dgamma_abs[j] += fabs(d * xh);
      dbeta_abs[j] += fabs(d);
    }
    s1 = ln ? s1 / cols : 0.0;
    s2 /= cols;
    for (int j = 0; j < cols; ++j) {
      const double xh = (gt_get(dt, x, off + j) - m) * rs;
      const double g = gt_get(dt, dy, off + j) * gt_get(wdt, gamma, j);
      dx[off + j] = rs * (g - s1 - xh * s2);
      dx_abs[off + j] = rs * (fabs(g) + fabs(s1) + fabs(xh * s2));
    }
  }
}
