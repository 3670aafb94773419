/* gpu.cross_entropy — every cross-entropy op (docs/kernels/cross_entropy.md)
 * on a GPU, in f32, f16 and bf16, against the float64 reference of
 * cross_entropy_ref.c:
 *   1. invalid arguments return KILN_EINVAL before any launch;
 *   2. TP = 1 forward (loss, lse) over vocab 1, 7, 1000, 1001, 1004, 32000
 *      (+ 128000 when not quick), odd row counts, the vector path and the
 *      general one (odd vocab, a vocab that is not a multiple of 8 for
 *      16-bit, a misaligned logits pointer), ignore_index rows, -inf logits,
 *      logits of magnitude 1e4;
 *   3. TP = 2 simulated on the host: the logits split into two partitions
 *      (half, and a third), stats on each, the all-reduces on the host,
 *      rescale and loss on the device: equal to the TP = 1 reference;
 *   4. the backward in place, at TP = 1 and on each partition;
 *   5. special values: a NaN row, an all -inf row;
 *   6. bad targets: KILN_EINVAL from kiln_ops_check with the exact message,
 *      the same at TP = 1 and TP = 2, and the context keeps working.
 * Outputs are poisoned (0xFF: NaN) before each launch and their guards
 * checked. Exits 77 (skipped) when there is no CUDA device, 1 on any failure.
 *
 * Environment: KILN_CACHE_DIR (else a temp cache); KILN_GPU_TEST_QUICK=1
 * keeps only small shapes (for the CPU test double of libcuda);
 * KILN_GPU_TEST_TRIM=1 only the riskiest (run_trim). */
#include <math.h>   /* fabs, isfinite, NAN */
#include <stdio.h>  /* printf, snprintf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcmp, strcmp */

#include "kiln/loader.h"                 /* kiln_loader */
#include "kiln/ops.h"                    /* the ops under test */
#include "tests/gpu/cross_entropy_ref.h" /* inputs and the float64 reference */
#include "tests/gpu/device.h"            /* device buffers with poisoned guards */
#include "tests/gpu/harness.h"           /* the run, counters, einval checks, elements */

#define IGNORE (-100LL)

static uint64_t g_seed = 0x63726f7373656e74ULL;

static const kiln_dtype kDtypes[] = {KILN_F32, KILN_F16, KILN_BF16};

/* ---- tolerances ----------------------------------------------------------------
 * loss and lse are fp32 from exactly stored inputs: the sum of exponentials
 * has ex2.approx's 2 ulp per term and fp32 rounding over a per-thread chain
 * of a few hundred terms and a 512-way tree (relative 1e-5 at most, so 1e-5
 * absolute in the log), and lse, the target logit and loss are fp32 numbers
 * of magnitude up to max|x| + log(vocab) (a few ulp each: 2^-20 relative). */
static double tol_lse(double lse, double xmax, double xt) {
  return 1e-5 + 0x1p-20 * (fabs(lse) + fabs(xmax) + fabs(xt));
}

/* The gradient: exp(x - lse) from an fp32 difference (relative error
 * |x - lse| * 2^-24) and ex2.approx (2 ulp), times dloss, rounded to dt
 * (twice its half-ulp), subnormals flushed (fp32, bf16) or spaced 2^-24 (fp16). */
static double tol_grad(kiln_dtype dt, double x, double lse, double dl, double g) {
  const double rel = dt == KILN_F32 ? 0x1p-22 : dt == KILN_F16 ? 0x1p-10 : 0x1p-7;
  const double p = exp(x - lse);
  const double abs_ = dt == KILN_F16 ? 0x1p-24 : 1e-37;
  const double d = p > 0 ? fabs(x - lse) : 0; /* x = -inf: p = 0 exactly */
  return fabs(dl) * p * (d + 8) * 0x1p-22 + fabs(g) * rel + abs_;
}

/* ---- a case ------------------------------------------------------------------------ */

typedef struct ce_case {
  kiln_dtype dt;
  long long rows;
  int vocab;
  double scale;
  int neg_inf;  /* some logits -inf */
  int misalign; /* logits one element past a 256-byte boundary: the general path */
} ce_case;

static const char *case_str(const ce_case *c, char *out, size_t cap) {
  snprintf(out, cap, "%-4s rows=%lld vocab=%d scale=%g%s%s", kiln_dtype_str(c->dt), c->rows,
           c->vocab, c->scale, c->neg_inf ? " -inf" : "", c->misalign ? " misaligned" : "");
  return out;
}

/* Host data of a case. */
typedef struct ce_host {
  int64_t *target;
  void *x; /* rows * vocab of dt */
  float *dloss, *lse_in;
  double *loss, *lse, *xmax, *g;
} ce_host;

static void host_free(ce_host *h) {
  free(h->target);
  free(h->x);
  free(h->dloss);
  free(h->lse_in);
  free(h->loss);
  free(h->lse);
  free(h->xmax);
  free(h->g);
}

static int host_make(ce_host *h, const ce_case *c) {
  const size_t n = (size_t)c->rows * (size_t)c->vocab, R = (size_t)c->rows;
  memset(h, 0, sizeof *h);
  h->target = malloc(R * sizeof *h->target);
  h->x = malloc(n * gt_dtype_size(c->dt));
  h->dloss = malloc(R * sizeof(float));
  h->lse_in = malloc(R * sizeof(float));
  h->loss = malloc(R * sizeof(double));
  h->lse = malloc(R * sizeof(double));
  h->xmax = malloc(R * sizeof(double));
  h->g = malloc(n * sizeof(double));
  if (!h->target || !h->x || !h->dloss || !h->lse_in || !h->loss || !h->lse || !h->xmax || !h->g)
    return 0;
  for (long long r = 0; r < c->rows; r++) {
    /* the first and last columns, ignored rows (1, 6, ...), random others */
    h->target[r] = r == 0             ? 0
                   : r == c->rows - 1 ? c->vocab - 1
                   : r % 5 == 1       ? IGNORE
                                      : (int64_t)(gt_rng_next(&g_seed) % (uint64_t)c->vocab);
    h->dloss[r] = (float)gt_rng_uniform(&g_seed, 0.5, 1.5);
  }
  ce_make_logits(c->dt, h->x, c->rows, c->vocab, c->scale, c->neg_inf, h->target, &g_seed);
  ce_ref_fwd(c->dt, h->x, h->target, c->rows, c->vocab, IGNORE, h->loss, h->lse, h->xmax);
  for (long long r = 0; r < c->rows; r++) /* ignored rows: lse must not be read */
    h->lse_in[r] = h->target[r] == IGNORE ? NAN : (float)h->lse[r];
  ce_ref_bwd(c->dt, h->x, h->lse_in, h->dloss, h->target, c->rows, c->vocab, IGNORE, h->g);
  return 1;
}

/* Logits of columns [c0, c0 + cols) of every row, at element offset off of
 * a device buffer (off elements of junk first). */
static int put_logits(dbuf *b, const ce_case *c, const ce_host *h, int c0, int cols, int off,
                      char *msg, size_t cap) {
  const size_t es = gt_dtype_size(c->dt);
  unsigned char *tmp = malloc(((size_t)c->rows * (size_t)cols + (size_t)off) * es);
  int ok;
  if (!tmp) {
    snprintf(msg, cap, "out of host memory");
    return 0;
  }
  memset(tmp, 0x3c, (size_t)off * es);
  for (long long r = 0; r < c->rows; r++)
    memcpy(tmp + ((size_t)off + (size_t)r * (size_t)cols) * es,
           (const unsigned char *)h->x + ((size_t)r * (size_t)c->vocab + (size_t)c0) * es,
           (size_t)cols * es);
  ok = dev_alloc(b, ((size_t)c->rows * (size_t)cols + (size_t)off) * es, msg, cap) &&
       dev_put(b, tmp, msg, cap);
  free(tmp);
  return ok;
}

static void *logits_ptr(const dbuf *b, const ce_case *c, int off) {
  return dptr(b->p + (CUdeviceptr)off * gt_dtype_size(c->dt));
}

/* Compares the fp32 loss and lse of the device with the reference. */
static void check_fwd(const char *what, const ce_case *c, const ce_host *h, const float *loss,
                      const float *lse, double tol_scale) {
  char s[160];
  double worst = 0;
  case_str(c, s, sizeof s);
  for (long long r = 0; r < c->rows; r++) {
    if (h->target[r] == IGNORE) {
      if (loss[r] != 0 || !isfinite(lse[r])) {
        gt_fail("%s %s: ignored row %lld: loss %.9g (must be 0), lse %.9g (must be finite)", what,
                s, r, loss[r], lse[r]);
        return;
      }
      continue;
    }
    const double xt = gt_get(c->dt, h->x, (size_t)r * (size_t)c->vocab + (size_t)h->target[r]);
    const double t = tol_scale * tol_lse(h->lse[r], h->xmax[r], xt);
    const double e1 = fabs(lse[r] - h->lse[r]), e2 = fabs(loss[r] - h->loss[r]);
    if (!(e1 <= t) || !(e2 <= t)) {
      gt_fail("%s %s: row %lld: lse %.9g (want %.9g), loss %.9g (want %.9g), tolerance %.3g", what,
              s, r, lse[r], h->lse[r], loss[r], h->loss[r], t);
      return;
    }
    if (e1 / t > worst) worst = e1 / t;
    if (e2 / t > worst) worst = e2 / t;
  }
  gt_pass("%s %s  (worst %.2f of tolerance)", what, s, worst);
}

/* g: rows x cols of dt from the device, columns [c0, c0 + cols) of the reference. */
static void check_bwd(const char *what, const ce_case *c, const ce_host *h, const void *g, int c0,
                      int cols) {
  char s[160];
  double worst = 0;
  case_str(c, s, sizeof s);
  for (long long r = 0; r < c->rows; r++)
    for (int k = 0; k < cols; k++) {
      const size_t i = (size_t)r * (size_t)c->vocab + (size_t)(c0 + k);
      const double got = gt_get(c->dt, g, (size_t)r * (size_t)cols + (size_t)k), want = h->g[i];
      if (h->target[r] == IGNORE) {
        if (got != 0) {
          gt_fail("%s %s: ignored row %lld col %d = %.9g, must be 0", what, s, r, c0 + k, got);
          return;
        }
        continue;
      }
      const double t =
          tol_grad(c->dt, gt_get(c->dt, h->x, i), (double)h->lse_in[r], h->dloss[r], want);
      const double e = fabs(got - want);
      if (!(e <= t)) {
        gt_fail("%s %s: [row %lld, col %d] = %.9g, want %.9g +- %.3g", what, s, r, c0 + k, got,
                want, t);
        return;
      }
      if (e / t > worst) worst = e / t;
    }
  gt_pass("%s %s  (worst %.2f of tolerance)", what, s, worst);
}

static int status_ok(kiln_status st, char *msg, size_t cap) {
  if (st == KILN_OK) return 1;
  snprintf(msg, cap, "%s: %s", kiln_status_str(st), kiln_last_error());
  return 0;
}

/* ---- TP = 1 forward and backward ------------------------------------------------------ */

static void run_tp1(kiln_loader *l, const ce_case *c, const ce_host *h) {
  const size_t R = (size_t)c->rows, es = gt_dtype_size(c->dt);
  const size_t n = R * (size_t)c->vocab;
  const int off = c->misalign ? 1 : 0;
  char msg[512] = "", s[160];
  dbuf x = {0, 0}, tg = {0, 0}, loss = {0, 0}, lse = {0, 0}, dl = {0, 0}, lsei = {0, 0};
  float *hl = malloc(R * 4), *hs = malloc(R * 4);
  void *back = malloc(n * es + es);
  case_str(c, s, sizeof s);
  if (!hl || !hs || !back) {
    gt_fail("tp1 %s: out of host memory", s);
    goto out;
  }
  if (!put_logits(&x, c, h, 0, c->vocab, off, msg, sizeof msg) ||
      !dev_alloc(&tg, R * 8, msg, sizeof msg) || !dev_put(&tg, h->target, msg, sizeof msg) ||
      !dev_alloc(&loss, R * 4, msg, sizeof msg) || !dev_alloc(&lse, R * 4, msg, sizeof msg) ||
      !dev_alloc(&dl, R * 4, msg, sizeof msg) || !dev_put(&dl, h->dloss, msg, sizeof msg) ||
      !dev_alloc(&lsei, R * 4, msg, sizeof msg) || !dev_put(&lsei, h->lse_in, msg, sizeof msg)) {
    gt_fail("tp1 %s: %s", s, msg);
    goto out;
  }
  /* forward */
  if (!dev_poison(&loss, msg, sizeof msg) || !dev_poison(&lse, msg, sizeof msg) ||
      !status_ok(kiln_cross_entropy_fwd(l, c->dt, dptr(loss.p), dptr(lse.p), logits_ptr(&x, c, off),
                                        dptr(tg.p), c->rows, c->vocab, IGNORE, KILN_OPS_SYNC_CHECK,
                                        NULL),
                 msg, sizeof msg) ||
      !dev_sync("forward", msg, sizeof msg) || !dev_get(&loss, hl, "loss", msg, sizeof msg) ||
      !dev_get(&lse, hs, "lse", msg, sizeof msg) || !dev_get(&x, back, "logits", msg, sizeof msg)) {
    gt_fail("fwd %s: %s", s, msg);
  } else if (memcmp((unsigned char *)back + (size_t)off * es, h->x, n * es) != 0) {
    gt_fail("fwd %s: the logits were changed", s);
  } else {
    check_fwd("fwd", c, h, hl, hs, 1);
  }
  /* backward, in place */
  if (!status_ok(kiln_cross_entropy_bwd(l, c->dt, logits_ptr(&x, c, off), dptr(lsei.p), dptr(dl.p),
                                        dptr(tg.p), c->rows, c->vocab, 0, IGNORE, NULL),
                 msg, sizeof msg) ||
      !dev_sync("backward", msg, sizeof msg) || !dev_get(&x, back, "logits", msg, sizeof msg)) {
    gt_fail("bwd %s: %s", s, msg);
  } else {
    check_bwd("bwd", c, h, (unsigned char *)back + (size_t)off * es, 0, c->vocab);
  }
out:
  dev_free(&x);
  dev_free(&tg);
  dev_free(&loss);
  dev_free(&lse);
  dev_free(&dl);
  dev_free(&lsei);
  free(hl);
  free(hs);
  free(back);
}

/* ---- TP = 2 on the host -------------------------------------------------------------------- */

static void run_tp2(kiln_loader *l, const ce_case *c, const ce_host *h, int split) {
  const size_t R = (size_t)c->rows, es = gt_dtype_size(c->dt);
  const int vp[2] = {split, c->vocab - split};
  const long long vs[2] = {0, split};
  char msg[512] = "", s[160], what[64];
  dbuf x[2] = {{0, 0}, {0, 0}}, mx[2] = {{0, 0}, {0, 0}}, se[2] = {{0, 0}, {0, 0}},
       tg[2] = {{0, 0}, {0, 0}};
  dbuf target = {0, 0}, gmax = {0, 0}, sesum = {0, 0}, tgsum = {0, 0}, loss = {0, 0}, lse = {0, 0},
       dl = {0, 0}, lsei = {0, 0};
  float *hm[2] = {malloc(R * 4), malloc(R * 4)}, *hse[2] = {malloc(R * 4), malloc(R * 4)},
        *htg[2] = {malloc(R * 4), malloc(R * 4)};
  float *hg = malloc(R * 4), *hsum = malloc(R * 4), *htsum = malloc(R * 4), *hl = malloc(R * 4),
        *hs = malloc(R * 4);
  void *back = malloc(R * (size_t)c->vocab * es);
  case_str(c, s, sizeof s);
  snprintf(what, sizeof what, "tp2 split=%d", split);
  if (!hm[0] || !hm[1] || !hse[0] || !hse[1] || !htg[0] || !htg[1] || !hg || !hsum || !htsum ||
      !hl || !hs || !back) {
    gt_fail("%s %s: out of host memory", what, s);
    goto out;
  }
  if (!dev_alloc(&target, R * 8, msg, sizeof msg) ||
      !dev_put(&target, h->target, msg, sizeof msg) || !dev_alloc(&gmax, R * 4, msg, sizeof msg) ||
      !dev_alloc(&sesum, R * 4, msg, sizeof msg) || !dev_alloc(&tgsum, R * 4, msg, sizeof msg) ||
      !dev_alloc(&loss, R * 4, msg, sizeof msg) || !dev_alloc(&lse, R * 4, msg, sizeof msg) ||
      !dev_alloc(&dl, R * 4, msg, sizeof msg) || !dev_put(&dl, h->dloss, msg, sizeof msg) ||
      !dev_alloc(&lsei, R * 4, msg, sizeof msg) || !dev_put(&lsei, h->lse_in, msg, sizeof msg))
    goto failed;
  /* 1. stats on each rank */
  for (int k = 0; k < 2; k++) {
    if (!put_logits(&x[k], c, h, (int)vs[k], vp[k], 0, msg, sizeof msg) ||
        !dev_alloc(&mx[k], R * 4, msg, sizeof msg) || !dev_alloc(&se[k], R * 4, msg, sizeof msg) ||
        !dev_alloc(&tg[k], R * 4, msg, sizeof msg) ||
        !status_ok(kiln_cross_entropy_stats(l, c->dt, dptr(mx[k].p), dptr(se[k].p), dptr(tg[k].p),
                                            dptr(x[k].p), dptr(target.p), c->rows, vp[k], vs[k],
                                            c->vocab, IGNORE, KILN_OPS_SYNC_CHECK, NULL),
                   msg, sizeof msg) ||
        !dev_get(&mx[k], hm[k], "row_max", msg, sizeof msg) ||
        !dev_get(&tg[k], htg[k], "tgt", msg, sizeof msg))
      goto failed;
  }
  /* all-reduce MAX; 2. rescale on each rank; all-reduce SUM of sumexp and tgt */
  for (size_t r = 0; r < R; r++)
    hg[r] = hm[0][r] > hm[1][r] ? hm[0][r] : hm[1][r];
  if (!dev_put(&gmax, hg, msg, sizeof msg)) goto failed;
  for (int k = 0; k < 2; k++)
    if (!status_ok(kiln_cross_entropy_rescale(l, dptr(se[k].p), dptr(mx[k].p), dptr(gmax.p),
                                              c->rows, NULL),
                   msg, sizeof msg) ||
        !dev_sync("rescale", msg, sizeof msg) ||
        !dev_get(&se[k], hse[k], "sumexp", msg, sizeof msg))
      goto failed;
  for (size_t r = 0; r < R; r++) {
    hsum[r] = hse[0][r] + hse[1][r];
    htsum[r] = htg[0][r] + htg[1][r];
  }
  /* 3. loss */
  if (!dev_put(&sesum, hsum, msg, sizeof msg) || !dev_put(&tgsum, htsum, msg, sizeof msg) ||
      !dev_poison(&loss, msg, sizeof msg) || !dev_poison(&lse, msg, sizeof msg) ||
      !status_ok(kiln_cross_entropy_loss(l, dptr(loss.p), dptr(lse.p), dptr(gmax.p), dptr(sesum.p),
                                         dptr(tgsum.p), dptr(target.p), c->rows, IGNORE, NULL),
                 msg, sizeof msg) ||
      !dev_sync("loss", msg, sizeof msg) || !dev_get(&loss, hl, "loss", msg, sizeof msg) ||
      !dev_get(&lse, hs, "lse", msg, sizeof msg))
    goto failed;
  /* two partitions add one more rounding of the sum and of the rescale */
  check_fwd(what, c, h, hl, hs, 2);
  /* backward on each rank's columns */
  for (int k = 0; k < 2; k++) {
    char w2[96];
    snprintf(w2, sizeof w2, "%s bwd rank %d [%lld, +%d)", what, k, vs[k], vp[k]);
    if (!status_ok(kiln_cross_entropy_bwd(l, c->dt, dptr(x[k].p), dptr(lsei.p), dptr(dl.p),
                                          dptr(target.p), c->rows, vp[k], vs[k], IGNORE, NULL),
                   msg, sizeof msg) ||
        !dev_sync("backward", msg, sizeof msg) || !dev_get(&x[k], back, "logits", msg, sizeof msg))
      gt_fail("%s %s: %s", w2, s, msg);
    else
      check_bwd(w2, c, h, back, (int)vs[k], vp[k]);
  }
  goto out;
failed:
  gt_fail("%s %s: %s", what, s, msg);
out:
  for (int k = 0; k < 2; k++) {
    dev_free(&x[k]);
    dev_free(&mx[k]);
    dev_free(&se[k]);
    dev_free(&tg[k]);
    free(hm[k]);
    free(hse[k]);
    free(htg[k]);
  }
  dev_free(&target);
  dev_free(&gmax);
  dev_free(&sesum);
  dev_free(&tgsum);
  dev_free(&loss);
  dev_free(&lse);
  dev_free(&dl);
  dev_free(&lsei);
  free(hg);
  free(hsum);
  free(htsum);
  free(hl);
  free(hs);
  free(back);
}

static void run_case(kiln_loader *l, const ce_case *c, int tp2) {
  ce_host h;
  char s[160];
  if (!host_make(&h, c)) {
    gt_fail("%s: out of host memory", case_str(c, s, sizeof s));
  } else {
    run_tp1(l, c, &h);
    if (tp2 && c->vocab >= 2) {
      run_tp2(l, c, &h, c->vocab / 2);
      if (c->vocab >= 3) run_tp2(l, c, &h, c->vocab / 3);
    }
  }
  host_free(&h);
}

/* KILN_GPU_TEST_TRIM, per dtype, forward and backward: vocabulary 1001 on 7
 * rows (odd: the general path, every row misaligned) at TP=1 and split over
 * TP=2 (500 | 501) and TP=3, the same with logits of 1e4 (overflow, the
 * rounding of max * log2(e)), 32000 on 3 rows with the logits off their
 * 256-byte alignment (the general path where the vector path would go), and
 * 128000 on 2 rows (the largest vocabulary the suite takes), both at TP=1.
 * check_special and check_bad_targets run in full. */
static void run_trim(kiln_loader *l) {
  for (size_t d = 0; d < 3; d++) {
    ce_case c = {kDtypes[d], 7, 1001, 8.0, 0, 0};
    run_case(l, &c, 1);
    c.scale = 1e4;
    run_case(l, &c, 1);
    c.rows = 3, c.vocab = 32000, c.scale = 8.0, c.misalign = 1;
    run_case(l, &c, 0);
    c.rows = 2, c.vocab = 128000, c.misalign = 0;
    run_case(l, &c, 0);
  }
}

static void run_suite(kiln_loader *l) {
  static const int vocab[] = {1, 7, 1000, 1001, 1004, 32000, 128000};
  const size_t nv = sizeof vocab / sizeof *vocab - (gt_quick() ? 1 : 0);
  for (size_t d = 0; d < 3; d++) {
    for (size_t i = 0; i < nv; i++) {
      ce_case c = {kDtypes[d], 0, vocab[i], 8.0, 0, 0};
      c.rows = gt_quick() ? (vocab[i] <= 1004 ? 7 : 3) : (vocab[i] <= 1004 ? 129 : 37);
      run_case(l, &c, 1);
    }
    {
      /* the general path on a vocabulary the vector path would take */
      ce_case c = {kDtypes[d], 3, 32000, 8.0, 0, 1};
      run_case(l, &c, 0);
    }
    {
      /* -inf logits (never a target) */
      ce_case c = {kDtypes[d], 5, 1001, 8.0, 1, 0};
      run_case(l, &c, 1);
      c.vocab = 1000;
      run_case(l, &c, 0);
    }
    {
      /* large logits: nothing overflows, nothing is lost to rounding of max * log2(e) */
      ce_case c = {kDtypes[d], 5, 1001, 1e4, 0, 0};
      run_case(l, &c, 1);
      c.rows = 3;
      c.vocab = 32000;
      run_case(l, &c, 1);
    }
  }
}

/* ---- special values ----------------------------------------------------------------------- */

/* Row 0 holds a NaN (lse, loss NaN), row 1 is ordinary, row 2 is all -inf
 * (lse -inf, loss NaN), at TP = 1 on both paths (vocab 1000 and 1001). */
static void check_special(kiln_loader *l) {
  for (size_t d = 0; d < 3; d++)
    for (int v = 1000; v <= 1001; v++) {
      ce_case c = {kDtypes[d], 3, v, 8.0, 0, 0};
      ce_host h;
      char msg[512] = "", s[160];
      dbuf x = {0, 0}, tg = {0, 0}, loss = {0, 0}, lse = {0, 0};
      float hl[3], hs[3];
      case_str(&c, s, sizeof s);
      if (!host_make(&h, &c)) {
        gt_fail("special %s: out of host memory", s);
        host_free(&h);
        continue;
      }
      h.target[1] = 3; /* not ignored */
      gt_set(c.dt, h.x, 5, NAN);
      for (int k = 0; k < v; k++)
        gt_set(c.dt, h.x, (size_t)2 * (size_t)v + (size_t)k, -INFINITY);
      ce_ref_fwd(c.dt, h.x, h.target, c.rows, c.vocab, IGNORE, h.loss, h.lse, h.xmax);
      if (!put_logits(&x, &c, &h, 0, v, 0, msg, sizeof msg) ||
          !dev_alloc(&tg, 3 * 8, msg, sizeof msg) || !dev_put(&tg, h.target, msg, sizeof msg) ||
          !dev_alloc(&loss, 3 * 4, msg, sizeof msg) || !dev_alloc(&lse, 3 * 4, msg, sizeof msg) ||
          !status_ok(kiln_cross_entropy_fwd(l, c.dt, dptr(loss.p), dptr(lse.p), dptr(x.p),
                                            dptr(tg.p), 3, v, IGNORE, 0, NULL),
                     msg, sizeof msg) ||
          !dev_get(&loss, hl, "loss", msg, sizeof msg) ||
          !dev_get(&lse, hs, "lse", msg, sizeof msg)) {
        gt_fail("special %s: %s", s, msg);
      } else if (!isnan(hl[0]) || !isnan(hs[0]) || hs[2] != -INFINITY || !isnan(hl[2]) ||
                 !(fabs(hl[1] - h.loss[1]) <= tol_lse(h.lse[1], h.xmax[1], 8))) {
        gt_fail("special %s: NaN row: loss %g lse %g (want NaN, NaN); all -inf row: loss %g lse %g "
                "(want NaN, -inf); ordinary row: loss %g (want %g)",
                s, hl[0], hs[0], hl[2], hs[2], hl[1], h.loss[1]);
      } else {
        gt_pass("special %s: a NaN row is NaN, an all -inf row has lse -inf and loss NaN", s);
      }
      dev_free(&x);
      dev_free(&tg);
      dev_free(&loss);
      dev_free(&lse);
      host_free(&h);
    }
}

/* ---- bad targets ------------------------------------------------------------------------------
 */

static void expect_msg(const char *what, kiln_status st, const char *want) {
  if (st == KILN_EINVAL && strcmp(kiln_last_error(), want) == 0)
    gt_pass("%s: %s", what, want);
  else
    gt_fail("%s: returned %s (%s), want KILN_EINVAL \"%s\"", what, kiln_status_str(st),
            kiln_last_error(), want);
}

static int is_bad_row(int r) {
  return r == 2 || r == 4 || r == 6;
}

/* loss (0) and lse (+inf) of the bad rows, the others against the reference. */
static void check_bad_rows(const char *what, const ce_host *h, const float *loss, const float *lse,
                           int rows, double tol_scale) {
  for (int r = 0; r < rows; r++) {
    const int ok =
        is_bad_row(r) ? loss[r] == 0 && lse[r] == INFINITY
        : h->target[r] == IGNORE
            ? loss[r] == 0 && isfinite(lse[r])
            : fabs(loss[r] - h->loss[r]) <= tol_scale * tol_lse(h->lse[r], h->xmax[r], 8) &&
                  fabs(lse[r] - h->lse[r]) <= tol_scale * tol_lse(h->lse[r], h->xmax[r], 8);
    if (!ok) {
      gt_fail("%s: row %d: loss %.9g, lse %.9g (want %s)", what, r, loss[r], lse[r],
              is_bad_row(r) ? "0 and +inf" : "the reference");
      return;
    }
  }
  gt_pass("%s: bad rows have loss 0 and lse +inf, the other rows are right", what);
}

static void check_bad_targets(kiln_loader *l) {
  enum { ROWS = 7, V = 1001, SPLIT = 500 };
  static const char want[] = "kiln_cross_entropy: target 1001 at row 2 is outside the vocabulary "
                             "[0, 1001) and is not the ignore index";
  ce_case c = {KILN_F32, ROWS, V, 8.0, 0, 0};
  ce_host h;
  char msg[512] = "";
  dbuf x = {0, 0}, tg = {0, 0}, loss = {0, 0}, lse = {0, 0}, dl = {0, 0}, gm = {0, 0};
  dbuf xp[2] = {{0, 0}, {0, 0}}, m[2] = {{0, 0}, {0, 0}}, se[2] = {{0, 0}, {0, 0}},
       t[2] = {{0, 0}, {0, 0}};
  float hl[ROWS], hs[ROWS], hm[2][ROWS], hse[2][ROWS], ht[2][ROWS], g[ROWS * V];
  if (!host_make(&h, &c)) {
    gt_fail("bad targets: out of host memory");
    host_free(&h);
    return;
  }
  h.target[2] = V;  /* the first bad one */
  h.target[4] = -5; /* others */
  h.target[6] = 1LL << 40;
  ce_ref_fwd(c.dt, h.x, h.target, c.rows, c.vocab, IGNORE, h.loss, h.lse, h.xmax);
  if (!put_logits(&x, &c, &h, 0, V, 0, msg, sizeof msg) ||
      !dev_alloc(&tg, ROWS * 8, msg, sizeof msg) || !dev_put(&tg, h.target, msg, sizeof msg) ||
      !dev_alloc(&loss, ROWS * 4, msg, sizeof msg) || !dev_alloc(&lse, ROWS * 4, msg, sizeof msg) ||
      !dev_alloc(&dl, ROWS * 4, msg, sizeof msg) || !dev_put(&dl, h.dloss, msg, sizeof msg) ||
      !dev_alloc(&gm, ROWS * 4, msg, sizeof msg) ||
      !put_logits(&xp[0], &c, &h, 0, SPLIT, 0, msg, sizeof msg) ||
      !put_logits(&xp[1], &c, &h, SPLIT, V - SPLIT, 0, msg, sizeof msg)) {
    gt_fail("bad targets: %s", msg);
    goto out;
  }
  for (int k = 0; k < 2; k++)
    if (!dev_alloc(&m[k], ROWS * 4, msg, sizeof msg) ||
        !dev_alloc(&se[k], ROWS * 4, msg, sizeof msg) ||
        !dev_alloc(&t[k], ROWS * 4, msg, sizeof msg)) {
      gt_fail("bad targets: %s", msg);
      goto out;
    }
  /* TP = 1, checked at once */
  expect_msg("bad target fwd KILN_OPS_SYNC_CHECK",
             kiln_cross_entropy_fwd(l, KILN_F32, dptr(loss.p), dptr(lse.p), dptr(x.p), dptr(tg.p),
                                    ROWS, V, IGNORE, KILN_OPS_SYNC_CHECK, NULL),
             want);
  if (!dev_get(&loss, hl, "loss", msg, sizeof msg) || !dev_get(&lse, hs, "lse", msg, sizeof msg))
    gt_fail("bad targets: %s", msg);
  else
    check_bad_rows("bad target fwd", &h, hl, hs, ROWS, 1);
  /* the backward from that lse: the bad rows (and the ignored one) are 0 */
  if (!status_ok(kiln_cross_entropy_bwd(l, KILN_F32, dptr(x.p), dptr(lse.p), dptr(dl.p), dptr(tg.p),
                                        ROWS, V, 0, IGNORE, NULL),
                 msg, sizeof msg) ||
      !dev_sync("backward", msg, sizeof msg) || !dev_get(&x, g, "logits", msg, sizeof msg)) {
    gt_fail("bad target bwd: %s", msg);
  } else {
    int bad = -1;
    for (int r = 0; r < ROWS && bad < 0; r++)
      for (int k = 0; k < V; k++)
        if ((is_bad_row(r) || h.target[r] == IGNORE) ? g[r * V + k] != 0 : !isfinite(g[r * V + k]))
          bad = r;
    if (bad < 0)
      gt_pass("bad target bwd: the bad and ignored rows are 0, the others finite");
    else
      gt_fail("bad target bwd: row %d is wrong", bad);
  }
  /* TP = 1, checked later; then nothing is left to report */
  if (!dev_put(&x, h.x, msg, sizeof msg) || /* the backward overwrote it */
      !status_ok(kiln_cross_entropy_fwd(l, KILN_F32, dptr(loss.p), dptr(lse.p), dptr(x.p),
                                        dptr(tg.p), ROWS, V, IGNORE, 0, NULL),
                 msg, sizeof msg))
    gt_fail("bad target fwd without the flag: %s", msg);
  else
    gt_pass("bad target fwd without the flag returns KILN_OK");
  expect_msg("bad target kiln_ops_check after fwd", kiln_ops_check(l, NULL), want);
  if (kiln_ops_check(l, NULL) == KILN_OK)
    gt_pass("kiln_ops_check again: KILN_OK (the report was cleared)");
  else
    gt_fail("kiln_ops_check again: %s", kiln_last_error());
  /* TP = 2: each rank's stats reports the same; the loss step gives the same rows */
  expect_msg("bad target stats rank 0 KILN_OPS_SYNC_CHECK",
             kiln_cross_entropy_stats(l, KILN_F32, dptr(m[0].p), dptr(se[0].p), dptr(t[0].p),
                                      dptr(xp[0].p), dptr(tg.p), ROWS, SPLIT, 0, V, IGNORE,
                                      KILN_OPS_SYNC_CHECK, NULL),
             want);
  if (!status_ok(kiln_cross_entropy_stats(l, KILN_F32, dptr(m[1].p), dptr(se[1].p), dptr(t[1].p),
                                          dptr(xp[1].p), dptr(tg.p), ROWS, V - SPLIT, SPLIT, V,
                                          IGNORE, 0, NULL),
                 msg, sizeof msg))
    gt_fail("bad target stats rank 1 without the flag: %s", msg);
  expect_msg("bad target kiln_ops_check after stats rank 1", kiln_ops_check(l, NULL), want);
  {
    float gmax[ROWS], sum[ROWS], tsum[ROWS];
    int ok = 1;
    for (int k = 0; k < 2 && ok; k++)
      ok = dev_get(&m[k], hm[k], "row_max", msg, sizeof msg) &&
           dev_get(&t[k], ht[k], "tgt", msg, sizeof msg);
    for (int r = 0; r < ROWS; r++)
      gmax[r] = hm[0][r] > hm[1][r] ? hm[0][r] : hm[1][r];
    ok = ok && dev_put(&gm, gmax, msg, sizeof msg);
    for (int k = 0; k < 2 && ok; k++)
      ok = status_ok(
               kiln_cross_entropy_rescale(l, dptr(se[k].p), dptr(m[k].p), dptr(gm.p), ROWS, NULL),
               msg, sizeof msg) &&
           dev_get(&se[k], hse[k], "sumexp", msg, sizeof msg);
    for (int r = 0; r < ROWS; r++) {
      sum[r] = hse[0][r] + hse[1][r];
      tsum[r] = ht[0][r] + ht[1][r];
    }
    ok = ok && dev_put(&se[0], sum, msg, sizeof msg) && dev_put(&t[0], tsum, msg, sizeof msg) &&
         dev_poison(&loss, msg, sizeof msg) && dev_poison(&lse, msg, sizeof msg) &&
         status_ok(kiln_cross_entropy_loss(l, dptr(loss.p), dptr(lse.p), dptr(gm.p), dptr(se[0].p),
                                           dptr(t[0].p), dptr(tg.p), ROWS, IGNORE, NULL),
                   msg, sizeof msg) &&
         dev_get(&loss, hl, "loss", msg, sizeof msg) && dev_get(&lse, hs, "lse", msg, sizeof msg);
    if (!ok)
      gt_fail("bad target tp2: %s", msg);
    else
      check_bad_rows("bad target tp2 loss", &h, hl, hs, ROWS, 2);
  }
  /* the context keeps working */
  h.target[2] = 3;
  h.target[4] = IGNORE;
  h.target[6] = V - 1;
  ce_ref_fwd(c.dt, h.x, h.target, c.rows, c.vocab, IGNORE, h.loss, h.lse, h.xmax);
  if (!dev_put(&tg, h.target, msg, sizeof msg) || !dev_poison(&loss, msg, sizeof msg) ||
      !dev_poison(&lse, msg, sizeof msg) ||
      !status_ok(kiln_cross_entropy_fwd(l, KILN_F32, dptr(loss.p), dptr(lse.p), dptr(x.p),
                                        dptr(tg.p), ROWS, V, IGNORE, KILN_OPS_SYNC_CHECK, NULL),
                 msg, sizeof msg) ||
      !dev_get(&loss, hl, "loss", msg, sizeof msg) || !dev_get(&lse, hs, "lse", msg, sizeof msg))
    gt_fail("fwd after the bad targets: %s", msg);
  else
    check_fwd("fwd after the bad targets", &c, &h, hl, hs, 1);
out:
  dev_free(&x);
  dev_free(&tg);
  dev_free(&loss);
  dev_free(&lse);
  dev_free(&dl);
  dev_free(&gm);
  for (int k = 0; k < 2; k++) {
    dev_free(&xp[k]);
    dev_free(&m[k]);
    dev_free(&se[k]);
    dev_free(&t[k]);
  }
  host_free(&h);
}

/* ---- invalid arguments
 * --------------------------------------------------------------------------- */

static void check_invalid_args(kiln_loader *l) {
  enum { R = 4, V = 16 };
  const kiln_dtype f = KILN_F32, bad = (kiln_dtype)7;
  const size_t bytes = R * V * 4; /* the output, f32 */
  char msg[256] = "";
  dbuf out = {0, 0}, in = {0, 0}, tgb = {0, 0};
  float *o, *fi;
  void *x;
  const int64_t *t;
  if (!dev_alloc(&out, bytes, msg, sizeof msg) || !dev_alloc(&in, bytes, msg, sizeof msg) ||
      !dev_alloc(&tgb, R * 8, msg, sizeof msg)) {
    gt_fail("einval: %s", msg);
    goto out;
  }
  o = dptr(out.p);
  x = dptr(out.p); /* bwd writes here: must stay untouched */
  fi = dptr(in.p);
  t = dptr(tgb.p);
#define FWD_ "kiln_cross_entropy_fwd"
  gt_expect_einval_naming("fwd loader=NULL",
                          kiln_cross_entropy_fwd(NULL, f, o, o + R, fi, t, R, V, IGNORE, 0, NULL),
                          "loader");
  gt_expect_einval_naming("fwd dtype=7",
                          kiln_cross_entropy_fwd(l, bad, o, o + R, fi, t, R, V, IGNORE, 0, NULL),
                          "dtype");
  gt_expect_einval_naming("fwd loss=NULL",
                          kiln_cross_entropy_fwd(l, f, NULL, o + R, fi, t, R, V, IGNORE, 0, NULL),
                          FWD_ ": loss");
  gt_expect_einval_naming("fwd lse=NULL",
                          kiln_cross_entropy_fwd(l, f, o, NULL, fi, t, R, V, IGNORE, 0, NULL),
                          FWD_ ": lse");
  gt_expect_einval_naming("fwd logits=NULL",
                          kiln_cross_entropy_fwd(l, f, o, o + R, NULL, t, R, V, IGNORE, 0, NULL),
                          FWD_ ": logits");
  gt_expect_einval_naming("fwd target=NULL",
                          kiln_cross_entropy_fwd(l, f, o, o + R, fi, NULL, R, V, IGNORE, 0, NULL),
                          FWD_ ": target");
  gt_expect_empty("fwd rows=0",
                  kiln_cross_entropy_fwd(l, f, o, o + R, fi, t, 0, V, IGNORE, 0, NULL));
  gt_expect_einval_naming("fwd vocab_size=0",
                          kiln_cross_entropy_fwd(l, f, o, o + R, fi, t, R, 0, IGNORE, 0, NULL),
                          FWD_ ": vocab_size");
  gt_expect_einval_naming("fwd vocab_size=-3",
                          kiln_cross_entropy_fwd(l, f, o, o + R, fi, t, R, -3, IGNORE, 0, NULL),
                          FWD_ ": vocab_size");
  gt_expect_einval_naming(
      "fwd rows x vocab overflows",
      kiln_cross_entropy_fwd(l, f, o, o + R, fi, t, 1LL << 62, V, IGNORE, 0, NULL), "overflows");
  gt_expect_einval_naming("fwd flags=2",
                          kiln_cross_entropy_fwd(l, f, o, o + R, fi, t, R, V, IGNORE, 2, NULL),
                          FWD_ ": flags");
#define ST_ "kiln_cross_entropy_stats"
  gt_expect_einval_naming(
      "stats loader=NULL",
      kiln_cross_entropy_stats(NULL, f, o, o + R, o + 2 * R, fi, t, R, V, 0, V, IGNORE, 0, NULL),
      "loader");
  gt_expect_einval_naming(
      "stats dtype=7",
      kiln_cross_entropy_stats(l, bad, o, o + R, o + 2 * R, fi, t, R, V, 0, V, IGNORE, 0, NULL),
      "dtype");
  gt_expect_einval_naming(
      "stats row_max=NULL",
      kiln_cross_entropy_stats(l, f, NULL, o + R, o + 2 * R, fi, t, R, V, 0, V, IGNORE, 0, NULL),
      ST_ ": row_max");
  gt_expect_einval_naming(
      "stats sumexp=NULL",
      kiln_cross_entropy_stats(l, f, o, NULL, o + 2 * R, fi, t, R, V, 0, V, IGNORE, 0, NULL),
      ST_ ": sumexp");
  gt_expect_einval_naming(
      "stats tgt=NULL",
      kiln_cross_entropy_stats(l, f, o, o + R, NULL, fi, t, R, V, 0, V, IGNORE, 0, NULL),
      ST_ ": tgt");
  gt_expect_einval_naming(
      "stats logits=NULL",
      kiln_cross_entropy_stats(l, f, o, o + R, o + 2 * R, NULL, t, R, V, 0, V, IGNORE, 0, NULL),
      ST_ ": logits");
  gt_expect_einval_naming(
      "stats target=NULL",
      kiln_cross_entropy_stats(l, f, o, o + R, o + 2 * R, fi, NULL, R, V, 0, V, IGNORE, 0, NULL),
      ST_ ": target");
  gt_expect_einval_naming(
      "stats rows=-1",
      kiln_cross_entropy_stats(l, f, o, o + R, o + 2 * R, fi, t, -1, V, 0, V, IGNORE, 0, NULL),
      ST_ ": rows");
  gt_expect_einval_naming(
      "stats vocab_part=0",
      kiln_cross_entropy_stats(l, f, o, o + R, o + 2 * R, fi, t, R, 0, 0, V, IGNORE, 0, NULL),
      ST_ ": vocab_part");
  gt_expect_einval_naming(
      "stats vocab_size=0",
      kiln_cross_entropy_stats(l, f, o, o + R, o + 2 * R, fi, t, R, V, 0, 0, IGNORE, 0, NULL),
      ST_ ": vocab_size");
  gt_expect_einval_naming(
      "stats vocab_start=-1",
      kiln_cross_entropy_stats(l, f, o, o + R, o + 2 * R, fi, t, R, V, -1, 2 * V, IGNORE, 0, NULL),
      ST_ ": the partition");
  gt_expect_einval_naming("stats partition past vocab_size",
                          kiln_cross_entropy_stats(l, f, o, o + R, o + 2 * R, fi, t, R, V, V + 1,
                                                   2 * V, IGNORE, 0, NULL),
                          ST_ ": the partition");
  gt_expect_einval_naming(
      "stats flags=4",
      kiln_cross_entropy_stats(l, f, o, o + R, o + 2 * R, fi, t, R, V, 0, V, IGNORE, 4, NULL),
      ST_ ": flags");
#define RS_ "kiln_cross_entropy_rescale"
  gt_expect_einval_naming("rescale loader=NULL",
                          kiln_cross_entropy_rescale(NULL, o, fi, fi, R, NULL), "loader");
  gt_expect_einval_naming("rescale sumexp=NULL",
                          kiln_cross_entropy_rescale(l, NULL, fi, fi, R, NULL), RS_ ": sumexp");
  gt_expect_einval_naming("rescale row_max=NULL",
                          kiln_cross_entropy_rescale(l, o, NULL, fi, R, NULL), RS_ ": row_max");
  gt_expect_einval_naming("rescale gmax=NULL", kiln_cross_entropy_rescale(l, o, fi, NULL, R, NULL),
                          RS_ ": gmax");
  gt_expect_empty("rescale rows=0", kiln_cross_entropy_rescale(l, o, fi, fi, 0, NULL));
#define LS_ "kiln_cross_entropy_loss"
  gt_expect_einval_naming("loss loader=NULL",
                          kiln_cross_entropy_loss(NULL, o, o + R, fi, fi, fi, t, R, IGNORE, NULL),
                          "loader");
  gt_expect_einval_naming("loss loss=NULL",
                          kiln_cross_entropy_loss(l, NULL, o + R, fi, fi, fi, t, R, IGNORE, NULL),
                          LS_ ": loss");
  gt_expect_einval_naming("loss lse=NULL",
                          kiln_cross_entropy_loss(l, o, NULL, fi, fi, fi, t, R, IGNORE, NULL),
                          LS_ ": lse");
  gt_expect_einval_naming("loss gmax=NULL",
                          kiln_cross_entropy_loss(l, o, o + R, NULL, fi, fi, t, R, IGNORE, NULL),
                          LS_ ": gmax");
  gt_expect_einval_naming("loss sumexp=NULL",
                          kiln_cross_entropy_loss(l, o, o + R, fi, NULL, fi, t, R, IGNORE, NULL),
                          LS_ ": sumexp");
  gt_expect_einval_naming("loss tgt=NULL",
                          kiln_cross_entropy_loss(l, o, o + R, fi, fi, NULL, t, R, IGNORE, NULL),
                          LS_ ": tgt");
  gt_expect_einval_naming("loss target=NULL",
                          kiln_cross_entropy_loss(l, o, o + R, fi, fi, fi, NULL, R, IGNORE, NULL),
                          LS_ ": target");
  gt_expect_empty("loss rows=0",
                  kiln_cross_entropy_loss(l, o, o + R, fi, fi, fi, t, 0, IGNORE, NULL));
#define BW_ "kiln_cross_entropy_bwd"
  gt_expect_einval_naming("bwd loader=NULL",
                          kiln_cross_entropy_bwd(NULL, f, x, fi, fi, t, R, V, 0, IGNORE, NULL),
                          "loader");
  gt_expect_einval_naming(
      "bwd dtype=7", kiln_cross_entropy_bwd(l, bad, x, fi, fi, t, R, V, 0, IGNORE, NULL), "dtype");
  gt_expect_einval_naming("bwd logits=NULL",
                          kiln_cross_entropy_bwd(l, f, NULL, fi, fi, t, R, V, 0, IGNORE, NULL),
                          BW_ ": logits");
  gt_expect_einval_naming("bwd lse=NULL",
                          kiln_cross_entropy_bwd(l, f, x, NULL, fi, t, R, V, 0, IGNORE, NULL),
                          BW_ ": lse");
  gt_expect_einval_naming("bwd dloss=NULL",
                          kiln_cross_entropy_bwd(l, f, x, fi, NULL, t, R, V, 0, IGNORE, NULL),
                          BW_ ": dloss");
  gt_expect_einval_naming("bwd target=NULL",
                          kiln_cross_entropy_bwd(l, f, x, fi, fi, NULL, R, V, 0, IGNORE, NULL),
                          BW_ ": target");
  gt_expect_empty("bwd rows=0", kiln_cross_entropy_bwd(l, f, x, fi, fi, t, 0, V, 0, IGNORE, NULL));
  gt_expect_einval_naming("bwd vocab_part=0",
                          kiln_cross_entropy_bwd(l, f, x, fi, fi, t, R, 0, 0, IGNORE, NULL),
                          BW_ ": vocab_part");
  gt_expect_einval_naming("bwd vocab_start=-1",
                          kiln_cross_entropy_bwd(l, f, x, fi, fi, t, R, V, -1, IGNORE, NULL),
                          BW_ ": vocab_start");
  gt_expect_untouched(&out);
out:
  dev_free(&out);
  dev_free(&in);
  dev_free(&tgb);
}

/* ---- main ---------------------------------------------------------------------------------------
 */

int main(void) {
  gt_run r;
  if (gt_start(&r, "cross_entropy", GT_SHOW_DRIVER | GT_SHOW_CACHE)) {
    check_invalid_args(r.loader);
    if (gt_trim())
      run_trim(r.loader);
    else
      run_suite(r.loader);
    check_special(r.loader);
    check_bad_targets(r.loader);
  }
  return gt_finish(&r);
}
