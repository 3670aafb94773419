/* gpu.norm — layer norm and RMSNorm (docs/kernels/norm.md) on a GPU, forward
 * and backward, for every (dtype, weight dtype) pair, against the float64
 * reference of norm_ref.c:
 *   1. invalid arguments return KILN_EINVAL before any launch (the poisoned
 *      outputs stay untouched);
 *   2. shapes on both paths' edges: cols 1 .. 8200 (r capacity, vector
 *      aligned or not, a partial last block), odd rows, rows > 512 (several
 *      rows per backward part), in place (y == x, dx == dy), pointers off by
 *      one element (not 16-byte aligned: the g path), mean/rstd NULL, and in
 *      f32 a common offset of 1000 (a naive E[x^2] - E[x]^2 variance fails);
 *      outputs are poisoned (0xFF: NaN) first and checked for writes past
 *      their end;
 *   3. the backward twice: dx, dgamma, dbeta bit-identical.
 * Exits 77 (skipped) when there is no CUDA device, 1 on any failure.
 *
 * Environment: KILN_CACHE_DIR (else a temp cache); KILN_GPU_TEST_QUICK=1
 * keeps only small shapes (for the CPU test double of libcuda);
 * KILN_GPU_TEST_TRIM=1 only the riskiest (kTrim). */
#include <limits.h> /* LLONG_MAX */
#include <math.h>   /* fabs, sqrt, NAN */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc */
#include <string.h> /* memcmp, memset */

#include "kiln/loader.h"        /* kiln_loader */
#include "kiln/ops.h"           /* the ops under test */
#include "tests/gpu/device.h"   /* device buffers with poisoned guards */
#include "tests/gpu/harness.h"  /* the run, counters, einval checks, elements */
#include "tests/gpu/norm_ref.h" /* inputs and the float64 reference */

static uint64_t g_seed = 0x6e6f726d2d677075ULL;

typedef struct pair {
  kiln_dtype dt, wdt;
} pair;
static const pair kPairs[] = {{KILN_F32, KILN_F32},
                              {KILN_F16, KILN_F32},
                              {KILN_F16, KILN_F16},
                              {KILN_BF16, KILN_F32},
                              {KILN_BF16, KILN_BF16}};

enum { M_PLAIN = 0, M_INPLACE = 1, M_MISALIGNED = 2, M_NOSTATS = 3 };
static const char *const kModes[] = {"", " in-place", " misaligned", " mean/rstd NULL"};

typedef struct shape {
  long long rows;
  int cols;
  int mode;
  double offset; /* added to every x (f32 only) */
} shape;

static const char *dts(kiln_dtype dt) {
  return dt == KILN_F32 ? "f32" : dt == KILN_F16 ? "f16" : "bf16";
}

/* ---- tolerances ------------------------------------------------------------------
 * A value of dtype dt rounded from the exact result is off by at most half an
 * ulp: rel 2^-24 (f32), 2^-11 (f16), 2^-8 (bf16); we allow twice that. On top,
 * fp32 arithmetic inside the kernel (sums over a row, rsqrtf's 2 ulp, the
 * cancellation in x - mean and g - mean(g) - xh*mean(g*xh)) is bounded
 * relative to the tensor's scale (its rms): 1e-4 of it for f32 outputs,
 * 1e-3 for 16-bit ones. With a common offset of 1000 the fp32 mean itself is
 * off by ~1e-4 (ulp(1000) = 6e-5), which shifts every x - mean: 5e-3 of the
 * rms there, still far below what a cancelling variance gives (ulp(1e6) =
 * 0.06 in E[x^2] against a variance of ~1.3). Sums over rows (dgamma, dbeta)
 * get 1e-4 of the sum of their terms' magnitudes, and dx 1e-4 (16-bit:
 * 1e-3) of its terms' magnitudes rstd * (|g| + |mean g| + |xh mean(g xh)|),
 * since they can cancel to almost nothing (cols = 1). f16 values below
 * 2^-14 are subnormal, spaced 2^-24: that much absolute on top. */
static double rel_of(kiln_dtype dt) {
  return dt == KILN_F32 ? 0x1p-23 : dt == KILN_F16 ? 0x1p-10 : 0x1p-7;
}

static double rms(const double *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i)
    s += v[i] * v[i];
  return n ? sqrt(s / (double)n) : 0;
}

/* got: n elements of dt at element `off` of h; 0 and a message on the first
 * mismatch; element 0..off-1 must still be poison. */
static int compare(const char *what, kiln_dtype dt, const void *h, size_t off, const double *want,
                   size_t n, double atol, const double *atol_each, char *msg, size_t cap) {
  const double rel = rel_of(dt);
  /* f16 results below 2^-14 are subnormal: spaced 2^-24 whatever their size */
  const double floor_abs = dt == KILN_F16 ? 0x1p-24 : 0;
  for (size_t i = 0; i < off; ++i)
    if (((const unsigned char *)h)[i * gt_dtype_size(dt)] != 0xFF) {
      snprintf(msg, cap, "%s: element before the start (-%zu) was written", what, off - i);
      return 0;
    }
  for (size_t i = 0; i < n; ++i) {
    const double got = gt_get(dt, h, off + i);
    const double tol = rel * fabs(want[i]) + (atol_each ? atol_each[i] : atol) + floor_abs;
    if (!(fabs(got - want[i]) <= tol)) {
      snprintf(msg, cap, "%s[%zu] = %.9g, want %.9g (tolerance %.3g)", what, i, got, want[i], tol);
      return 0;
    }
  }
  return 1;
}

static void report(int ok, const char *what, const char *msg) {
  if (ok)
    gt_pass("%s", what);
  else
    gt_fail("%s: %s", what, msg);
}

/* ---- one case -------------------------------------------------------------------- */

typedef struct bufs {
  dbuf x, y, dy, dx, mean, rstd, g, b, dg, db, ws;
} bufs;

static void bufs_free(bufs *d) {
  dbuf *all[] = {&d->x, &d->y, &d->dy, &d->dx, &d->mean, &d->rstd,
                 &d->g, &d->b, &d->dg, &d->db, &d->ws};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
    dev_free(all[i]);
}

static kiln_status do_fwd(kiln_loader *l, int ln, pair p, void *y, float *mean, float *rstd,
                          const void *x, const bufs *d, long long rows, int cols, float eps) {
  if (ln)
    return kiln_layer_norm_fwd(l, p.dt, p.wdt, y, mean, rstd, x, dptr(d->g.p), dptr(d->b.p), rows,
                               cols, eps, NULL);
  return kiln_rms_norm_fwd(l, p.dt, p.wdt, y, rstd, x, dptr(d->g.p), rows, cols, eps, NULL);
}

static kiln_status do_bwd(kiln_loader *l, int ln, pair p, void *dx, const void *dy, const void *x,
                          const bufs *d, long long rows, int cols) {
  const float *mean = (const float *)dptr(d->mean.p), *rstd = (const float *)dptr(d->rstd.p);
  if (ln)
    return kiln_layer_norm_bwd(l, p.dt, p.wdt, dx, dptr(d->dg.p), dptr(d->db.p), dy, x, mean, rstd,
                               dptr(d->g.p), rows, cols, dptr(d->ws.p), d->ws.bytes, NULL);
  return kiln_rms_norm_bwd(l, p.dt, p.wdt, dx, dptr(d->dg.p), dy, x, rstd, dptr(d->g.p), rows, cols,
                           dptr(d->ws.p), d->ws.bytes, NULL);
}

static int st_ok(kiln_status st, char *msg, size_t cap) {
  if (st == KILN_OK) return 1;
  snprintf(msg, cap, "%s: %s", kiln_status_str(st), kiln_last_error());
  return 0;
}

static void run_case(kiln_loader *l, int ln, pair p, const shape *s) {
  const long long rows = s->rows;
  const int cols = s->cols;
  const size_t n = (size_t)rows * (size_t)cols, es = gt_dtype_size(p.dt), ws = gt_dtype_size(p.wdt);
  const size_t off = s->mode == M_MISALIGNED ? 1 : 0;
  const size_t tbytes = (n + off) * es;
  const float eps = 1e-5f;
  char what[200], msg[512];
  bufs d;
  memset(&d, 0, sizeof d);
  snprintf(what, sizeof what, "%s %s/w%s %lld x %d%s%s", ln ? "layer_norm" : "rms_norm", dts(p.dt),
           dts(p.wdt), rows, cols, kModes[s->mode], s->offset != 0 ? " offset 1000" : "");
  unsigned char *hx = calloc(n + off, es), *hdy = calloc(n + off, es), *hout = calloc(n + off, es),
                *hout2 = calloc(n + off, es), *hg = calloc(cols, ws), *hb = calloc(cols, ws),
                *hdg = calloc(cols, ws), *hdb = calloc(cols, ws), *hdg2 = calloc(cols, ws),
                *hdb2 = calloc(cols, ws);
  double *yref = calloc(n, sizeof(double)), *dxref = calloc(n, sizeof(double));
  double *dxabs = calloc(n, sizeof(double));
  double *mref = calloc(rows, sizeof(double)), *rref = calloc(rows, sizeof(double));
  double *dgref = calloc(cols, sizeof(double)), *dbref = calloc(cols, sizeof(double));
  double *dgabs = calloc(cols, sizeof(double)), *dbabs = calloc(cols, sizeof(double));
  double *tol = calloc(cols > rows ? cols : rows, sizeof(double));
  float *mf = calloc(rows, sizeof(float)), *rf = calloc(rows, sizeof(float));
  float *mgot = calloc(rows, sizeof(float)), *rgot = calloc(rows, sizeof(float));
  int ok = 0;
  kiln_status st;
  if (!hx || !hdy || !hout || !hout2 || !hg || !hb || !hdg || !hdb || !hdg2 || !hdb2 || !yref ||
      !dxref || !dxabs || !mref || !rref || !dgref || !dbref || !dgabs || !dbabs || !tol || !mf ||
      !rf || !mgot || !rgot) {
    snprintf(msg, sizeof msg, "out of host memory");
    goto done;
  }
  /* inputs: x in [-2, 2) (+ offset), dy in [-1, 1), gamma in [0.5, 1.5),
   * beta in [-0.5, 0.5); the elements before `off` are poison-like 0xFF */
  memset(hx, 0xFF, off * es);
  memset(hdy, 0xFF, off * es);
  nref_fill(p.dt, hx + off * es, n, -2, 2, s->offset, &g_seed);
  nref_fill(p.dt, hdy + off * es, n, -1, 1, 0, &g_seed);
  nref_fill(p.wdt, hg, cols, 0.5, 1.5, 0, &g_seed);
  nref_fill(p.wdt, hb, cols, -0.5, 0.5, 0, &g_seed);
  nref_fwd(ln, p.dt, p.wdt, hx + off * es, hg, hb, rows, cols, eps, yref, mref, rref);
  for (long long r = 0; r < rows; ++r) {
    mf[r] = (float)mref[r];
    rf[r] = (float)rref[r];
  }
  nref_bwd(ln, p.dt, p.wdt, hdy + off * es, hx + off * es, mf, rf, hg, rows, cols, dxref, dxabs,
           dgref, dbref, dgabs, dbabs);
  if (!dev_alloc(&d.x, tbytes, msg, sizeof msg) || !dev_alloc(&d.y, tbytes, msg, sizeof msg) ||
      !dev_alloc(&d.dy, tbytes, msg, sizeof msg) || !dev_alloc(&d.dx, tbytes, msg, sizeof msg) ||
      !dev_alloc(&d.mean, rows * 4, msg, sizeof msg) ||
      !dev_alloc(&d.rstd, rows * 4, msg, sizeof msg) ||
      !dev_alloc(&d.g, cols * ws, msg, sizeof msg) ||
      !dev_alloc(&d.b, cols * ws, msg, sizeof msg) ||
      !dev_alloc(&d.dg, cols * ws, msg, sizeof msg) ||
      !dev_alloc(&d.db, cols * ws, msg, sizeof msg) ||
      !dev_alloc(&d.ws,
                 ln ? kiln_layer_norm_bwd_workspace_size(rows, cols)
                    : kiln_rms_norm_bwd_workspace_size(rows, cols),
                 msg, sizeof msg) ||
      !dev_put(&d.g, hg, msg, sizeof msg) || !dev_put(&d.b, hb, msg, sizeof msg))
    goto done;

  /* ---- forward ---- */
  {
    const int inplace = s->mode == M_INPLACE, nostats = s->mode == M_NOSTATS;
    float *mean = nostats ? NULL : (float *)dptr(d.mean.p);
    float *rstd = nostats ? NULL : (float *)dptr(d.rstd.p);
    char *y = (char *)dptr(d.y.p) + off * es, *x = (char *)dptr(d.x.p) + off * es;
    if (!dev_poison(&d.y, msg, sizeof msg) || !dev_poison(&d.mean, msg, sizeof msg) ||
        !dev_poison(&d.rstd, msg, sizeof msg))
      goto done;
    if (!dev_put(inplace ? &d.y : &d.x, hx, msg, sizeof msg)) goto done;
    st = do_fwd(l, ln, p, y, mean, rstd, inplace ? y : x, &d, rows, cols, eps);
    if (!st_ok(st, msg, sizeof msg) || !dev_sync("forward", msg, sizeof msg) ||
        !dev_get(&d.y, hout, "y", msg, sizeof msg) ||
        !dev_get(&d.mean, mgot, "mean", msg, sizeof msg) ||
        !dev_get(&d.rstd, rgot, "rstd", msg, sizeof msg))
      goto done;
    const double k = p.dt == KILN_F32 ? (s->offset != 0 ? 5e-3 : 1e-4) : 1e-3;
    if (!compare("y", p.dt, hout, off, yref, n, k * rms(yref, n), NULL, msg, sizeof msg)) goto done;
    if (!inplace) {
      if (!dev_get(&d.x, hout2, "x", msg, sizeof msg)) goto done;
      if (memcmp(hout2, hx, tbytes) != 0) {
        snprintf(msg, sizeof msg, "input x was changed");
        goto done;
      }
    }
    for (long long r = 0; r < rows; ++r) {
      const unsigned char *mb = (const unsigned char *)&mgot[r],
                          *rb = (const unsigned char *)&rgot[r];
      if (nostats || !ln) { /* not written: still poison */
        if ((!ln || nostats) && (mb[0] != 0xFF || mb[3] != 0xFF)) {
          snprintf(msg, sizeof msg, "mean[%lld] was written", r);
          goto done;
        }
        if (nostats && (rb[0] != 0xFF || rb[3] != 0xFF)) {
          snprintf(msg, sizeof msg, "rstd[%lld] was written", r);
          goto done;
        }
      }
      if (!nostats) {
        const double sd = 1.0 / rref[r];
        if (ln && !(fabs(mgot[r] - mref[r]) <= 1e-5 * (fabs(mref[r]) + sd))) {
          snprintf(msg, sizeof msg, "mean[%lld] = %.9g, want %.9g", r, mgot[r], mref[r]);
          goto done;
        }
        if (!(fabs(rgot[r] - rref[r]) <= (s->offset != 0 ? 1e-3 : 1e-4) * rref[r])) {
          snprintf(msg, sizeof msg, "rstd[%lld] = %.9g, want %.9g", r, rgot[r], rref[r]);
          goto done;
        }
      }
    }
  }

  /* ---- backward (twice: the same bits) ---- */
  {
    const int inplace = s->mode == M_INPLACE;
    char *dx = (char *)dptr(d.dx.p) + off * es, *dy = (char *)dptr(d.dy.p) + off * es;
    const char *x = (const char *)dptr(d.x.p) + off * es;
    if (!dev_put(&d.x, hx, msg, sizeof msg) || !dev_put(&d.mean, mf, msg, sizeof msg) ||
        !dev_put(&d.rstd, rf, msg, sizeof msg))
      goto done;
    for (int run = 0; run < 2; ++run) {
      if (!dev_poison(&d.dx, msg, sizeof msg) || !dev_poison(&d.dg, msg, sizeof msg) ||
          !dev_poison(&d.db, msg, sizeof msg) || !dev_poison(&d.ws, msg, sizeof msg))
        goto done;
      if (inplace && !dev_put(&d.dx, hdy, msg, sizeof msg)) goto done;
      if (!inplace && !dev_put(&d.dy, hdy, msg, sizeof msg)) goto done;
      st = do_bwd(l, ln, p, dx, inplace ? dx : dy, x, &d, rows, cols);
      if (!st_ok(st, msg, sizeof msg) || !dev_sync("backward", msg, sizeof msg) ||
          !dev_get(&d.dx, run ? hout2 : hout, "dx", msg, sizeof msg) ||
          !dev_get(&d.dg, run ? hdg2 : hdg, "dgamma", msg, sizeof msg) ||
          !dev_get(&d.db, run ? hdb2 : hdb, "dbeta", msg, sizeof msg))
        goto done;
    }
    const double k = p.dt == KILN_F32 ? (s->offset != 0 ? 5e-3 : 1e-4) : 1e-3;
    for (size_t i = 0; i < n; ++i)
      dxabs[i] *= k;
    if (!compare("dx", p.dt, hout, off, dxref, n, 0, dxabs, msg, sizeof msg)) goto done;
    for (int j = 0; j < cols; ++j)
      tol[j] = 1e-4 * dgabs[j];
    if (!compare("dgamma", p.wdt, hdg, 0, dgref, cols, 0, tol, msg, sizeof msg)) goto done;
    if (ln) {
      for (int j = 0; j < cols; ++j)
        tol[j] = 1e-4 * dbabs[j];
      if (!compare("dbeta", p.wdt, hdb, 0, dbref, cols, 0, tol, msg, sizeof msg)) goto done;
    } else {
      for (int j = 0; j < cols * (int)ws; ++j)
        if (hdb[j] != 0xFF) {
          snprintf(msg, sizeof msg, "rms_norm wrote dbeta's buffer");
          goto done;
        }
    }
    if (memcmp(hout, hout2, tbytes) != 0 || memcmp(hdg, hdg2, cols * ws) != 0 ||
        memcmp(hdb, hdb2, cols * ws) != 0) {
      snprintf(msg, sizeof msg, "two backward runs differ in dx, dgamma or dbeta bits");
      goto done;
    }
  }
  ok = 1;
done:
  report(ok, what, msg);
  bufs_free(&d);
  free(hx), free(hdy), free(hout), free(hout2), free(hg), free(hb), free(hdg), free(hdb);
  free(hdg2), free(hdb2), free(yref), free(dxref), free(dxabs), free(mref), free(rref), free(dgref);
  free(dbref), free(dgabs), free(dbabs), free(tol), free(mf), free(rf), free(mgot), free(rgot);
}

static const shape kQuick[] = {
    {5, 1, M_PLAIN, 0},      {37, 3, M_INPLACE, 0},      {37, 31, M_MISALIGNED, 0},
    {5, 127, M_NOSTATS, 0},  {5, 1000, M_PLAIN, 0},      {3, 1030, M_MISALIGNED, 0},
    {3, 1032, M_INPLACE, 0}, {3, 1024, M_MISALIGNED, 0}, {1, 4099, M_PLAIN, 0},
    {1, 4096, M_NOSTATS, 0}, {1, 8192, M_PLAIN, 0},      {1, 8200, M_INPLACE, 0},
    {515, 8, M_PLAIN, 0},    {517, 7, M_PLAIN, 0},
};
static const shape kFull[] = {
    {127, 4096, M_PLAIN, 0}, {65, 8192, M_PLAIN, 0},      {33, 12288, M_PLAIN, 0},
    {17, 16384, M_PLAIN, 0}, {9, 20000, M_MISALIGNED, 0}, {1031, 1024, M_INPLACE, 0},
    {2049, 64, M_PLAIN, 0},  {63, 4096, M_MISALIGNED, 0},
};
/* f32 only: a common offset of 1000 on both paths */
static const shape kOffset[] = {{5, 1000, M_PLAIN, 1000.0}, {3, 4099, M_PLAIN, 1000.0}};

/* KILN_GPU_TEST_TRIM: only these, for layer norm and RMS norm, every dtype
 * pair, forward and backward (and kOffset's odd 4099 in f32): 31 columns on
 * misaligned rows (odd, under a warp), 127 with mean/rstd NULL (odd, the
 * stats-free path), 1030 misaligned (past the vector path's 1024, rows off
 * 16 bytes), and 20000 misaligned (the largest the suite takes; one row).
 * Not 515 or 517 rows (several rows per backward part): ~2 s a case on the
 * fake driver, where run all's share is seconds; quick and full run them. */
static const shape kTrim[] = {
    {37, 31, M_MISALIGNED, 0},
    {5, 127, M_NOSTATS, 0},
    {3, 1030, M_MISALIGNED, 0},
    {1, 20000, M_MISALIGNED, 0},
};

static void run_trim(kiln_loader *l) {
  for (int ln = 1; ln >= 0; --ln)
    for (size_t pi = 0; pi < sizeof kPairs / sizeof *kPairs; ++pi) {
      for (size_t i = 0; i < sizeof kTrim / sizeof *kTrim; ++i)
        run_case(l, ln, kPairs[pi], &kTrim[i]);
      if (kPairs[pi].dt == KILN_F32) run_case(l, ln, kPairs[pi], &kOffset[1]);
    }
}

static void run_suite(kiln_loader *l) {
  if (gt_trim()) {
    run_trim(l);
    return;
  }
  for (int ln = 1; ln >= 0; --ln)
    for (size_t pi = 0; pi < sizeof kPairs / sizeof *kPairs; ++pi) {
      for (size_t i = 0; i < sizeof kQuick / sizeof *kQuick; ++i)
        run_case(l, ln, kPairs[pi], &kQuick[i]);
      if (!gt_quick())
        for (size_t i = 0; i < sizeof kFull / sizeof *kFull; ++i)
          run_case(l, ln, kPairs[pi], &kFull[i]);
      if (kPairs[pi].dt == KILN_F32)
        for (size_t i = 0; i < sizeof kOffset / sizeof *kOffset; ++i)
          run_case(l, ln, kPairs[pi], &kOffset[i]);
    }
}

/* ---- invalid arguments ---------------------------------------------------------- */

static void check_invalid_args(kiln_loader *l) {
  enum { R = 3, C = 16 };
  char msg[512];
  dbuf x = {0, 0}, y = {0, 0}, g = {0, 0}, st = {0, 0}, w = {0, 0};
  const size_t wsz = kiln_layer_norm_bwd_workspace_size(R, C);
  if (!dev_alloc(&x, R * C * 4, msg, sizeof msg) || !dev_alloc(&y, R * C * 4, msg, sizeof msg) ||
      !dev_alloc(&g, C * 4, msg, sizeof msg) || !dev_alloc(&st, R * 4, msg, sizeof msg) ||
      !dev_alloc(&w, wsz, msg, sizeof msg)) {
    report(0, "einval buffers", msg);
    goto out;
  }
  void *X = dptr(x.p), *Y = dptr(y.p), *G = dptr(g.p), *W = dptr(w.p);
  float *S = (float *)dptr(st.p);
  const kiln_dtype F = KILN_F32;
  gt_expect_einval("ln fwd loader NULL",
                   kiln_layer_norm_fwd(NULL, F, F, Y, S, S, X, G, G, R, C, 1e-5f, NULL));
  gt_expect_einval("ln fwd dtype 99",
                   kiln_layer_norm_fwd(l, (kiln_dtype)99, F, Y, S, S, X, G, G, R, C, 1e-5f, NULL));
  gt_expect_einval("ln fwd wdt bf16 for f16", kiln_layer_norm_fwd(l, KILN_F16, KILN_BF16, Y, S, S,
                                                                  X, G, G, R, C, 1e-5f, NULL));
  gt_expect_einval("ln fwd wdt f16 for f32",
                   kiln_layer_norm_fwd(l, F, KILN_F16, Y, S, S, X, G, G, R, C, 1e-5f, NULL));
  gt_expect_empty("ln fwd rows 0",
                  kiln_layer_norm_fwd(l, F, F, Y, S, S, X, G, G, 0, C, 1e-5f, NULL));
  gt_expect_einval("ln fwd cols 0",
                   kiln_layer_norm_fwd(l, F, F, Y, S, S, X, G, G, R, 0, 1e-5f, NULL));
  gt_expect_einval("ln fwd cols -3",
                   kiln_layer_norm_fwd(l, F, F, Y, S, S, X, G, G, R, -3, 1e-5f, NULL));
  gt_expect_einval("ln fwd rows x cols overflow",
                   kiln_layer_norm_fwd(l, F, F, Y, S, S, X, G, G, LLONG_MAX / 2, 8, 1e-5f, NULL));
  gt_expect_einval("ln fwd cols INT_MAX",
                   kiln_layer_norm_fwd(l, F, F, Y, S, S, X, G, G, 1, INT_MAX, 1e-5f, NULL));
  gt_expect_einval("ln fwd y NULL",
                   kiln_layer_norm_fwd(l, F, F, NULL, S, S, X, G, G, R, C, 1e-5f, NULL));
  gt_expect_einval("ln fwd x NULL",
                   kiln_layer_norm_fwd(l, F, F, Y, S, S, NULL, G, G, R, C, 1e-5f, NULL));
  gt_expect_einval("ln fwd gamma NULL",
                   kiln_layer_norm_fwd(l, F, F, Y, S, S, X, NULL, G, R, C, 1e-5f, NULL));
  gt_expect_einval("ln fwd beta NULL",
                   kiln_layer_norm_fwd(l, F, F, Y, S, S, X, G, NULL, R, C, 1e-5f, NULL));
  gt_expect_einval("ln fwd eps NaN",
                   kiln_layer_norm_fwd(l, F, F, Y, S, S, X, G, G, R, C, NAN, NULL));
  gt_expect_einval("ln fwd eps -1",
                   kiln_layer_norm_fwd(l, F, F, Y, S, S, X, G, G, R, C, -1.f, NULL));
  gt_expect_einval("rms fwd rows -1", kiln_rms_norm_fwd(l, F, F, Y, S, X, G, -1, C, 1e-5f, NULL));
  gt_expect_einval("rms fwd gamma NULL",
                   kiln_rms_norm_fwd(l, F, F, Y, S, X, NULL, R, C, 1e-5f, NULL));
  gt_expect_einval("rms fwd eps inf", kiln_rms_norm_fwd(l, F, F, Y, S, X, G, R, C, INFINITY, NULL));
  gt_expect_einval("rms fwd dtype 7",
                   kiln_rms_norm_fwd(l, (kiln_dtype)7, F, Y, S, X, G, R, C, 1e-5f, NULL));
  gt_expect_einval("ln bwd dx NULL",
                   kiln_layer_norm_bwd(l, F, F, NULL, G, G, X, X, S, S, G, R, C, W, wsz, NULL));
  gt_expect_einval("ln bwd dgamma NULL",
                   kiln_layer_norm_bwd(l, F, F, Y, NULL, G, X, X, S, S, G, R, C, W, wsz, NULL));
  gt_expect_einval("ln bwd dbeta NULL",
                   kiln_layer_norm_bwd(l, F, F, Y, G, NULL, X, X, S, S, G, R, C, W, wsz, NULL));
  gt_expect_einval("ln bwd dy NULL",
                   kiln_layer_norm_bwd(l, F, F, Y, G, G, NULL, X, S, S, G, R, C, W, wsz, NULL));
  gt_expect_einval("ln bwd mean NULL",
                   kiln_layer_norm_bwd(l, F, F, Y, G, G, X, X, NULL, S, G, R, C, W, wsz, NULL));
  gt_expect_einval("ln bwd rstd NULL",
                   kiln_layer_norm_bwd(l, F, F, Y, G, G, X, X, S, NULL, G, R, C, W, wsz, NULL));
  gt_expect_einval("ln bwd workspace NULL",
                   kiln_layer_norm_bwd(l, F, F, Y, G, G, X, X, S, S, G, R, C, NULL, wsz, NULL));
  gt_expect_einval("ln bwd workspace too small",
                   kiln_layer_norm_bwd(l, F, F, Y, G, G, X, X, S, S, G, R, C, W, wsz - 1, NULL));
  gt_expect_einval(
      "ln bwd workspace misaligned",
      kiln_layer_norm_bwd(l, F, F, Y, G, G, X, X, S, S, G, R, C, (char *)W + 16, wsz, NULL));
  gt_expect_einval("ln bwd cols 0",
                   kiln_layer_norm_bwd(l, F, F, Y, G, G, X, X, S, S, G, R, 0, W, wsz, NULL));
  gt_expect_einval("rms bwd x NULL",
                   kiln_rms_norm_bwd(l, F, F, Y, G, X, NULL, S, G, R, C, W, wsz, NULL));
  gt_expect_einval("rms bwd wdt bf16 for f16",
                   kiln_rms_norm_bwd(l, KILN_F16, KILN_BF16, Y, G, X, X, S, G, R, C, W, wsz, NULL));
  gt_expect_einval("rms bwd workspace too small",
                   kiln_rms_norm_bwd(l, F, F, Y, G, X, X, S, G, R, C, W,
                                     kiln_rms_norm_bwd_workspace_size(R, C) - 4, NULL));
  /* workspace sizes: 0 for shapes no op accepts; 256-byte sections */
  {
    const size_t a = kiln_layer_norm_bwd_workspace_size(0, 5),
                 b = kiln_rms_norm_bwd_workspace_size(5, -1);
    const size_t c = kiln_rms_norm_bwd_workspace_size(R, C);
    report(a == 0 && b == 0 && c % 256 == 0 && c >= R * C * 4 && wsz == 2 * c, "workspace sizes",
           "unexpected kiln_*_norm_bwd_workspace_size");
  }
  /* nothing ran: y is still all poison */
  {
    unsigned char h[R * C * 4];
    int clean = dev_sync("einval", msg, sizeof msg) && dev_get(&y, h, "y", msg, sizeof msg);
    const size_t k = clean ? gt_first_not_ff(h, sizeof h) : 0;
    if (clean && k < sizeof h) {
      clean = 0;
      snprintf(msg, sizeof msg, "an invalid call wrote y[%zu]", k / 4);
    }
    report(clean, "einval: no launch wrote anything", msg);
  }
out:
  dev_free(&x), dev_free(&y), dev_free(&g), dev_free(&st), dev_free(&w);
}

/* ---- one block, many rows ---------------------------------------------------------
 * The launcher gives each row its own block up to 65536 rows; past that (and
 * for any grid a caller picks) a block loops over rows, and its shared
 * reduction buffers are reused from one row to the next. The forward entry
 * points are launched directly with grids of 1, 2 and 3 blocks over 7 rows:
 * the output must be bit-identical to the launcher's, row for row (on the
 * emulator a barrier missing between rows shows up as a wrong row). */
static void check_small_grids(kiln_loader *l) {
  /* the r path with every warp holding columns (so a partial sum of another
   * row read by a slow warp changes the result), and the g path */
  static const int kCols[] = {4096, 1001};
  static unsigned char hx[7 * 4096 * 2], want[7 * 4096 * 2], got[7 * 4096 * 2];
  const kiln_cuda_api *cu = NULL;
  const long long rows = 7;
  uint64_t seed = g_seed ^ 0x67726964ULL;
  for (int ln = 0; ln <= 1; ln++)
    for (size_t c = 0; c < sizeof kCols / sizeof *kCols; c++) {
      const int cols = kCols[c];
      const size_t n = (size_t)rows * (size_t)cols, tb = n * 2;
      float hg[4096], hb[4096];
      dbuf x = {0}, y = {0}, g = {0}, b = {0}, st = {0};
      char what[96], msg[512] = "", entry[96];
      CUfunction fn = NULL;
      snprintf(what, sizeof what, "%s bf16/wf32 rows=%lld cols=%d, grids 1..3",
               ln ? "ln fwd" : "rms fwd", rows, cols);
      snprintf(entry, sizeof entry, "kiln_%s_fwd_bf16_wf32_%s", ln ? "layer_norm" : "rms_norm",
               cols == 4096 ? "r" : "g");
      for (size_t i = 0; i < n; i++)
        gt_set(KILN_BF16, hx, i, (float)gt_rng_uniform(&seed, -3, 3));
      for (int i = 0; i < cols; i++) {
        hg[i] = (float)gt_rng_uniform(&seed, 0.5, 1.5);
        hb[i] = (float)gt_rng_uniform(&seed, -0.5, 0.5);
      }
      if (!dev_alloc(&x, tb, msg, sizeof msg) || !dev_alloc(&y, tb, msg, sizeof msg) ||
          !dev_alloc(&g, (size_t)cols * 4, msg, sizeof msg) ||
          !dev_alloc(&b, (size_t)cols * 4, msg, sizeof msg) ||
          !dev_alloc(&st, (size_t)rows * 8, msg, sizeof msg) || !dev_put(&x, hx, msg, sizeof msg) ||
          !dev_put(&g, hg, msg, sizeof msg) || !dev_put(&b, hb, msg, sizeof msg))
        goto done;
      {
        float *mean = (float *)dptr(st.p), *rstd = mean + rows;
        kiln_status s =
            ln ? kiln_layer_norm_fwd(l, KILN_BF16, KILN_F32, dptr(y.p), mean, rstd, dptr(x.p),
                                     dptr(g.p), dptr(b.p), rows, cols, 1e-5f, NULL)
               : kiln_rms_norm_fwd(l, KILN_BF16, KILN_F32, dptr(y.p), rstd, dptr(x.p), dptr(g.p),
                                   rows, cols, 1e-5f, NULL);
        if (s != KILN_OK) {
          snprintf(msg, sizeof msg, "launcher: %s", kiln_last_error());
          goto done;
        }
        if (!dev_sync(what, msg, sizeof msg) || !dev_get(&y, want, "y", msg, sizeof msg)) goto done;
        if (kiln_cuda(&cu) != KILN_OK || kiln_loader_function(&fn, l, entry) != KILN_OK) {
          snprintf(msg, sizeof msg, "%s: %s", entry, kiln_last_error());
          goto done;
        }
        for (unsigned grid = 1; grid <= 3 && !msg[0]; grid++) {
          void *py = dptr(y.p), *px = dptr(x.p), *pg = dptr(g.p), *pb = dptr(b.p);
          float eps = 1e-5f, *pm = mean, *pr = rstd;
          int ncols = cols;
          long long nrows = rows;
          void *args[] = {&py, &pm, &pr, &px, &pg, &pb, &nrows, &ncols, &eps};
          CUresult r;
          if (!dev_poison(&y, msg, sizeof msg)) break;
          if ((r = cu->LaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, NULL, args, NULL)) !=
              CUDA_SUCCESS) {
            snprintf(msg, sizeof msg, "%s grid %u: cuLaunchKernel error %d", entry, grid, (int)r);
            break;
          }
          if (!dev_sync(what, msg, sizeof msg) || !dev_get(&y, got, "y", msg, sizeof msg)) break;
          for (size_t i = 0; i < tb && !msg[0]; i++)
            if (got[i] != want[i])
              snprintf(msg, sizeof msg, "grid %u: row %zu differs from the launcher's", grid,
                       i / 2 / (size_t)cols);
        }
      }
    done:
      report(!msg[0], what, msg);
      dev_free(&x), dev_free(&y), dev_free(&g), dev_free(&b), dev_free(&st);
    }
}

int main(void) {
  gt_run r;
  if (gt_start(&r, "norm", 0)) {
    check_invalid_args(r.loader);
    check_small_grids(r.loader);
    run_suite(r.loader);
  }
  return gt_finish(&r);
}
