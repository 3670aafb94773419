/* gpu.embedding — the embedding ops (docs/kernels/embedding.md) on a GPU, in
 * f32, f16 and bf16, against embedding_ref.c:
 *   1. invalid arguments return KILN_EINVAL before any launch (the poisoned
 *      output stays poisoned, no data error appears);
 *   2. forward at TP = 1 and TP = 2 over hidden sizes on the vector path
 *      (hidden % (16 / element size) == 0, aligned pointers) and the general
 *      path (odd hidden, pointers one element off 16 bytes), bit-exact copies,
 *      zero rows for other ranks' ids; outputs poisoned first, guards checked;
 *   3. bad token ids (negative, == vocab_size, 2^40) at TP = 1 and TP = 2:
 *      the same message from kiln_ops_check, with KILN_OPS_SYNC_CHECK and
 *      after a plain launch; zero rows; a second check is KILN_OK; the
 *      context keeps working;
 *   4. backward, atomic and deterministic, accumulating into an existing
 *      dweight, against the float64 reference; the deterministic one also
 *      bit-identical across two runs and to an fp32 emulation of its order
 *      (each row's tokens in position order); skewed ids (one id for every
 *      token), ids outside the partition, multi-pass sorts (rows > 256) and
 *      several sort tiles (n_tokens > 2048).
 * Exits 77 (skipped) when there is no CUDA device, 1 on any failure.
 *
 * Environment: KILN_CACHE_DIR (else a temp cache); KILN_GPU_TEST_QUICK=1
 * keeps only small shapes (for the CPU test double of libcuda);
 * KILN_GPU_TEST_TRIM=1 only the riskiest (run_trim). */
#include <math.h>   /* fabs, isnan */
#include <stdio.h>  /* printf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcmp, strcmp */

#include "kiln/loader.h"             /* kiln_loader */
#include "kiln/ops.h"                /* the ops under test */
#include "tests/gpu/device.h"        /* device buffers with poisoned guards */
#include "tests/gpu/embedding_ref.h" /* inputs and references */
#include "tests/gpu/harness.h"       /* the run, counters, elements */

static uint64_t g_seed = 0x656d6265646b696cULL;

static const kiln_dtype kDtypes[] = {KILN_F32, KILN_F16, KILN_BF16};

/* ---- 1. invalid arguments ------------------------------------------------------------ */

/* Not harness's gt_expect_einval: like every check here it passes silently. */
static void expect_einval(const char *what, kiln_status st) {
  gt_check(st == KILN_EINVAL, "einval %s: got %s (%s)", what, kiln_status_str(st),
           st == KILN_OK ? "" : kiln_last_error());
}

static void check_invalid_args(kiln_loader *l) {
  enum { N = 8, H = 8, V = 16 };
  const kiln_dtype f = KILN_F32, bad = (kiln_dtype)7;
  char msg[256] = "";
  dbuf y = {0, 0}, w = {0, 0}, ids = {0, 0}, ws = {0, 0};
  int64_t hids[N];
  unsigned char host[N * H * 4];
  void *py, *pw, *pws;
  const int64_t *pid;
  size_t wsb;
  for (int i = 0; i < N; i++)
    hids[i] = i;
  wsb = kiln_embedding_bwd_workspace_size(N, 0, V, 1);
  if (!dev_alloc(&y, sizeof host, msg, sizeof msg) || !dev_alloc(&w, V * H * 4, msg, sizeof msg) ||
      !dev_alloc(&ids, sizeof hids, msg, sizeof msg) || !dev_alloc(&ws, wsb, msg, sizeof msg) ||
      !dev_put(&ids, hids, msg, sizeof msg)) {
    gt_check(0, "einval setup: %s", msg);
    goto out;
  }
  py = dptr(y.p), pw = dptr(w.p), pid = dptr(ids.p), pws = dptr(ws.p);
  gt_check(kiln_embedding_bwd_workspace_size(N, 0, V, 0) == 0, "atomic workspace is 0 bytes");
  gt_check(wsb > 0, "deterministic workspace > 0 bytes");
  gt_check(kiln_embedding_bwd_workspace_size(0, 0, V, 1) == 0 &&
               kiln_embedding_bwd_workspace_size(N, 5, 5, 1) == 0 &&
               kiln_embedding_bwd_workspace_size(N, -1, V, 1) == 0,
           "workspace size of invalid arguments is 0");
  expect_einval("fwd loader=NULL",
                kiln_embedding_fwd(NULL, f, py, pid, pw, N, H, 0, V, V, 0, NULL));
  expect_einval("fwd dtype=7", kiln_embedding_fwd(l, bad, py, pid, pw, N, H, 0, V, V, 0, NULL));
  expect_einval("fwd y=NULL", kiln_embedding_fwd(l, f, NULL, pid, pw, N, H, 0, V, V, 0, NULL));
  expect_einval("fwd ids=NULL", kiln_embedding_fwd(l, f, py, NULL, pw, N, H, 0, V, V, 0, NULL));
  expect_einval("fwd weight=NULL", kiln_embedding_fwd(l, f, py, pid, NULL, N, H, 0, V, V, 0, NULL));
  gt_expect_empty("fwd n_tokens=0", kiln_embedding_fwd(l, f, py, pid, pw, 0, H, 0, V, V, 0, NULL));
  expect_einval("fwd hidden=0", kiln_embedding_fwd(l, f, py, pid, pw, N, 0, 0, V, V, 0, NULL));
  expect_einval("fwd hidden=-3", kiln_embedding_fwd(l, f, py, pid, pw, N, -3, 0, V, V, 0, NULL));
  expect_einval("fwd vocab_start<0",
                kiln_embedding_fwd(l, f, py, pid, pw, N, H, -1, V, V, 0, NULL));
  expect_einval("fwd empty partition",
                kiln_embedding_fwd(l, f, py, pid, pw, N, H, 4, 4, V, 0, NULL));
  expect_einval("fwd vocab_end>vocab_size",
                kiln_embedding_fwd(l, f, py, pid, pw, N, H, 0, V + 1, V, 0, NULL));
  expect_einval("fwd vocab_size=0", kiln_embedding_fwd(l, f, py, pid, pw, N, H, 0, V, 0, 0, NULL));
  expect_einval("fwd flags=2", kiln_embedding_fwd(l, f, py, pid, pw, N, H, 0, V, V, 2, NULL));
  expect_einval("fwd overflow",
                kiln_embedding_fwd(l, f, py, pid, pw, 1LL << 62, H, 0, V, V, 0, NULL));
  expect_einval("bwd loader=NULL",
                kiln_embedding_bwd(NULL, f, py, pw, pid, N, H, 0, V, 0, NULL, 0, NULL));
  expect_einval("bwd dtype=7",
                kiln_embedding_bwd(l, bad, py, pw, pid, N, H, 0, V, 0, NULL, 0, NULL));
  expect_einval("bwd dweight=NULL",
                kiln_embedding_bwd(l, f, NULL, pw, pid, N, H, 0, V, 0, NULL, 0, NULL));
  expect_einval("bwd dy=NULL",
                kiln_embedding_bwd(l, f, py, NULL, pid, N, H, 0, V, 0, NULL, 0, NULL));
  expect_einval("bwd ids=NULL",
                kiln_embedding_bwd(l, f, py, pw, NULL, N, H, 0, V, 0, NULL, 0, NULL));
  expect_einval("bwd n_tokens=-1",
                kiln_embedding_bwd(l, f, py, pw, pid, -1, H, 0, V, 0, NULL, 0, NULL));
  expect_einval("bwd hidden=0",
                kiln_embedding_bwd(l, f, py, pw, pid, N, 0, 0, V, 0, NULL, 0, NULL));
  expect_einval("bwd partition",
                kiln_embedding_bwd(l, f, py, pw, pid, N, H, V, 2, 0, NULL, 0, NULL));
  expect_einval("bwd deterministic=2",
                kiln_embedding_bwd(l, f, py, pw, pid, N, H, 0, V, 2, pws, wsb, NULL));
  expect_einval("bwd workspace=NULL",
                kiln_embedding_bwd(l, f, py, pw, pid, N, H, 0, V, 1, NULL, wsb, NULL));
  expect_einval("bwd workspace too small",
                kiln_embedding_bwd(l, f, py, pw, pid, N, H, 0, V, 1, pws, wsb - 1, NULL));
  expect_einval("bwd workspace misaligned",
                kiln_embedding_bwd(l, f, py, pw, pid, N, H, 0, V, 1, (char *)pws + 8, wsb, NULL));
  expect_einval("bwd overflow",
                kiln_embedding_bwd(l, f, py, pw, pid, N, H, 0, 1LL << 61, 0, NULL, 0, NULL));
  /* nothing ran: y (the bwd's dweight, fwd's y) is still all poison, no data error */
  if (!dev_get(&y, host, "y", msg, sizeof msg))
    gt_check(0, "einval: %s", msg);
  else
    gt_check(gt_first_not_ff(host, sizeof host) == sizeof host,
             "einval: an invalid call wrote its output");
  gt_check(kiln_ops_check(l, NULL) == KILN_OK, "einval: a data error after invalid calls: %s",
           kiln_last_error());
out:
  dev_free(&y);
  dev_free(&w);
  dev_free(&ids);
  dev_free(&ws);
}

/* ---- 2. forward ---------------------------------------------------------------------- */

/* One forward case; off = 1 puts y and weight one element past 16-byte
 * alignment (the general path). */
static void fwd_case(kiln_loader *l, kiln_dtype dt, long long n, int hidden, long long V,
                     long long vs, long long ve, int off) {
  const size_t es = gt_dtype_size(dt);
  const long long rows = ve - vs;
  const size_t ny = (size_t)(n * hidden), nw = (size_t)(rows * hidden);
  char msg[256] = "";
  dbuf y = {0, 0}, w = {0, 0}, ids = {0, 0};
  unsigned char *hy = malloc((ny + 1) * es), *hw = malloc((nw + 1) * es);
  int64_t *hid = malloc((size_t)n * sizeof *hid);
  double *ref = malloc(ny * sizeof *ref);
  size_t bad = 0, first = 0;
  kiln_status st;
  memset(hw, 0, es);
  ref_fill(dt, hw + (size_t)off * es, nw, 1.0, &g_seed);
  ref_ids(hid, n, V, vs, ve, vs > 0 || ve < V ? 0.3 : 0.0, &g_seed);
  if (!dev_alloc(&y, (ny + 1) * es, msg, sizeof msg) ||
      !dev_alloc(&w, (nw + 1) * es, msg, sizeof msg) ||
      !dev_alloc(&ids, (size_t)n * 8, msg, sizeof msg) || !dev_put(&w, hw, msg, sizeof msg) ||
      !dev_put(&ids, hid, msg, sizeof msg) || !dev_poison(&y, msg, sizeof msg)) {
    gt_check(0, "fwd %s setup: %s", kiln_dtype_str(dt), msg);
    goto out;
  }
  st = kiln_embedding_fwd(l, dt, (char *)dptr(y.p) + off * es, dptr(ids.p),
                          (char *)dptr(w.p) + off * es, n, hidden, vs, ve, V, KILN_OPS_SYNC_CHECK,
                          NULL);
  if (st != KILN_OK) {
    gt_check(0, "fwd %s n=%lld hidden=%d [%lld, %lld) of %lld: %s", kiln_dtype_str(dt), n, hidden,
             vs, ve, V, kiln_last_error());
    goto out;
  }
  if (!dev_get(&y, hy, "y", msg, sizeof msg)) {
    gt_check(0, "fwd %s n=%lld hidden=%d: %s", kiln_dtype_str(dt), n, hidden, msg);
    goto out;
  }
  ref_fwd(ref, hid, dt, hw + (size_t)off * es, n, hidden, vs, ve);
  for (size_t i = 0; i < ny; i++) {
    const double g = gt_get(dt, hy + (size_t)off * es, i);
    /* a copy: bit-exact, and a zero row is +0 */
    if (g != ref[i] || (ref[i] == 0 && signbit(g))) {
      if (!bad++) first = i;
    }
  }
  gt_check(!bad && (!off || gt_first_not_ff(hy, es) == es),
           "fwd %s n=%lld hidden=%d [%lld, %lld) of %lld off=%d: %zu wrong, first at %zu (got %g, "
           "want %g)%s",
           kiln_dtype_str(dt), n, hidden, vs, ve, V, off, bad, first,
           bad ? gt_get(dt, hy + (size_t)off * es, first) : 0.0, bad ? ref[first] : 0.0,
           off && gt_first_not_ff(hy, es) < es ? "; wrote before y" : "");
out:
  dev_free(&y);
  dev_free(&w);
  dev_free(&ids);
  free(hy);
  free(hw);
  free(hid);
  free(ref);
}

static void run_fwd(kiln_loader *l) {
  static const struct {
    long long n;
    int hidden;
    long long V;
  } quick[] = {{37, 1, 11}, {50, 64, 40}, {33, 67, 20}, {9, 520, 7}, {21, 24, 1000}},
    big[] = {{8192, 4096, 32000}, {1 << 20, 64, 256000}, {4099, 1023, 50257}, {3, 12288, 5}};
  for (size_t d = 0; d < 3; d++) {
    const kiln_dtype dt = kDtypes[d];
    const size_t nq = gt_quick() ? sizeof quick / sizeof *quick : sizeof big / sizeof *big;
    for (size_t i = 0; i < nq; i++) {
      const long long n = gt_quick() ? quick[i].n : big[i].n,
                      V = gt_quick() ? quick[i].V : big[i].V;
      const int h = gt_quick() ? quick[i].hidden : big[i].hidden;
      fwd_case(l, dt, n, h, V, 0, V, 0);           /* TP = 1 */
      fwd_case(l, dt, n, h, V, V / 2, V, 0);       /* TP = 2, second rank */
      fwd_case(l, dt, n, h, V, 0, (V + 1) / 2, 1); /* first rank, misaligned: general path */
    }
  }
}

/* ---- 3. bad ids ------------------------------------------------------------------------ */

static void bad_id_case(kiln_loader *l, kiln_dtype dt, long long badv, int sync) {
  enum { N = 40, H = 16, V = 1000, POS = 17 };
  const size_t es = gt_dtype_size(dt);
  char msg[256] = "", want[256], got[2][512];
  dbuf y = {0, 0}, w = {0, 0}, ids = {0, 0};
  unsigned char hw[V * H * 4], hy[N * H * 4];
  int64_t hid[N];
  double ref[N * H];
  snprintf(want, sizeof want,
           "kiln_embedding_fwd: token id %lld at position %d is outside the vocabulary [0, %d)",
           badv, POS, V);
  ref_fill(dt, hw, V * H, 1.0, &g_seed);
  ref_ids(hid, N, V, 0, V, 0, &g_seed);
  hid[POS] = badv;
  hid[POS + 5] = -7; /* a later bad id: the first position wins */
  if (!dev_alloc(&y, N * H * es, msg, sizeof msg) || !dev_alloc(&w, V * H * es, msg, sizeof msg) ||
      !dev_alloc(&ids, sizeof hid, msg, sizeof msg) || !dev_put(&w, hw, msg, sizeof msg) ||
      !dev_put(&ids, hid, msg, sizeof msg)) {
    gt_check(0, "bad id setup: %s", msg);
    goto out;
  }
  for (int tp = 1; tp <= 2; tp++) {
    const long long vs = tp == 1 ? 0 : V / 2;
    const void *wp = (const char *)dptr(w.p) + (size_t)vs * H * es;
    kiln_status st;
    if (!dev_poison(&y, msg, sizeof msg)) {
      gt_check(0, "bad id: %s", msg);
      goto out;
    }
    st = kiln_embedding_fwd(l, dt, dptr(y.p), dptr(ids.p), wp, N, H, vs, V, V,
                            sync ? KILN_OPS_SYNC_CHECK : 0, NULL);
    if (!sync) {
      gt_check(st == KILN_OK, "bad id %lld tp=%d: a plain launch returned %s: %s", badv, tp,
               kiln_status_str(st), kiln_last_error());
      st = kiln_ops_check(l, NULL);
    }
    snprintf(got[tp - 1], sizeof got[tp - 1], "%s",
             st == KILN_OK ? "(KILN_OK)" : kiln_last_error());
    gt_check(st == KILN_EINVAL && !strcmp(got[tp - 1], want),
             "bad id %lld %s tp=%d: got %s \"%s\", want \"%s\"", badv, kiln_dtype_str(dt), tp,
             kiln_status_str(st), got[tp - 1], want);
    gt_check(kiln_ops_check(l, NULL) == KILN_OK, "bad id: a second kiln_ops_check: %s",
             kiln_last_error());
    if (!dev_get(&y, hy, "y", msg, sizeof msg)) {
      gt_check(0, "bad id: %s", msg);
      goto out;
    }
    /* the good rows are right, the bad (and other ranks') rows are zeros */
    {
      int64_t shifted[N];
      size_t bad = 0;
      for (int t = 0; t < N; t++)
        shifted[t] = hid[t];
      ref_fwd(ref, shifted, dt, (const unsigned char *)hw + (size_t)vs * H * es, N, H, vs, V);
      for (size_t i = 0; i < N * H; i++)
        bad += gt_get(dt, hy, i) != ref[i];
      gt_check(!bad && ref[POS * H] == 0 && gt_get(dt, hy, POS * H) == 0,
               "bad id %lld tp=%d: %zu wrong elements", badv, tp, bad);
    }
  }
  gt_check(!strcmp(got[0], got[1]), "bad id: tp=1 said \"%s\", tp=2 \"%s\"", got[0], got[1]);
  /* the context keeps working: a correct op afterwards */
  hid[POS] = 3;
  hid[POS + 5] = 4;
  if (!dev_put(&ids, hid, msg, sizeof msg) || !dev_poison(&y, msg, sizeof msg)) {
    gt_check(0, "bad id: %s", msg);
    goto out;
  }
  {
    kiln_status st = kiln_embedding_fwd(l, dt, dptr(y.p), dptr(ids.p), dptr(w.p), N, H, 0, V, V,
                                        KILN_OPS_SYNC_CHECK, NULL);
    size_t bad = 0;
    if (st != KILN_OK || !dev_get(&y, hy, "y", msg, sizeof msg)) {
      gt_check(0, "after a bad id, a correct fwd: %s %s", kiln_status_str(st),
               st != KILN_OK ? kiln_last_error() : msg);
      goto out;
    }
    ref_fwd(ref, hid, dt, hw, N, H, 0, V);
    for (size_t i = 0; i < N * H; i++)
      bad += gt_get(dt, hy, i) != ref[i];
    gt_check(!bad, "after a bad id, a correct fwd: %zu wrong elements", bad);
  }
out:
  dev_free(&y);
  dev_free(&w);
  dev_free(&ids);
}

static void run_bad_ids(kiln_loader *l) {
  const long long bads[] = {-1, 1000, 1LL << 40};
  for (size_t d = 0; d < 3; d++)
    for (size_t b = 0; b < 3; b++)
      for (int sync = 0; sync <= 1; sync++)
        if (gt_trim() ? d == b && sync == (int)(b & 1)
                      : !gt_quick() || d == b || sync == (int)(b & 1))
          bad_id_case(l, kDtypes[d], bads[b], sync);
}

/* ---- 4. backward ---------------------------------------------------------------------- */

/* skew: every token has the same id (vs + 1 or the only row). */
static void bwd_case(kiln_loader *l, kiln_dtype dt, long long n, int hidden, long long V,
                     long long vs, long long ve, int det, int skew) {
  const size_t es = gt_dtype_size(dt);
  const long long rows = ve - vs;
  const size_t ny = (size_t)(n * hidden), nw = (size_t)(rows * hidden);
  const size_t wsb = kiln_embedding_bwd_workspace_size(n, vs, ve, det);
  char msg[256] = "";
  dbuf dw = {0, 0}, dy = {0, 0}, ids = {0, 0}, ws = {0, 0};
  unsigned char *hdy = malloc(ny * es);
  float *dw0 = malloc(nw * 4), *got = malloc(nw * 4), *got2 = malloc(nw * 4),
        *exact = malloc(nw * 4);
  double *ref = malloc(nw * sizeof *ref), *tol = malloc(nw * sizeof *tol);
  int64_t *hid = malloc((size_t)n * sizeof *hid);
  size_t bad = 0, first = 0, nbits = 0;
  ref_fill(KILN_F32, dw0, nw, 4.0, &g_seed);
  ref_fill(dt, hdy, ny, 1.0, &g_seed);
  ref_ids(hid, n, V, vs, ve, vs > 0 || ve < V ? 0.25 : 0.0, &g_seed);
  if (skew)
    for (long long t = 0; t < n; t++)
      hid[t] = rows > 1 ? vs + 1 : vs;
  if (!dev_alloc(&dw, nw * 4, msg, sizeof msg) || !dev_alloc(&dy, ny * es, msg, sizeof msg) ||
      !dev_alloc(&ids, (size_t)n * 8, msg, sizeof msg) ||
      (wsb && !dev_alloc(&ws, wsb, msg, sizeof msg)) || !dev_put(&dy, hdy, msg, sizeof msg) ||
      !dev_put(&ids, hid, msg, sizeof msg)) {
    gt_check(0, "bwd setup: %s", msg);
    goto out;
  }
  ref_bwd(ref, tol, dw0, dt, hdy, hid, n, hidden, vs, ve);
  for (int run = 0; run < (det ? 2 : 1); run++) {
    kiln_status st;
    float *dst = run ? got2 : got;
    if (!dev_put(&dw, dw0, msg, sizeof msg) || (wsb && !dev_poison(&ws, msg, sizeof msg))) {
      gt_check(0, "bwd: %s", msg);
      goto out;
    }
    st = kiln_embedding_bwd(l, dt, dptr(dw.p), dptr(dy.p), dptr(ids.p), n, hidden, vs, ve, det,
                            wsb ? dptr(ws.p) : NULL, wsb, NULL);
    if (st != KILN_OK || !dev_sync("bwd", msg, sizeof msg) ||
        !dev_get(&dw, dst, "dweight", msg, sizeof msg)) {
      gt_check(0, "bwd %s det=%d n=%lld hidden=%d: %s", kiln_dtype_str(dt), det, n, hidden,
               st != KILN_OK ? kiln_last_error() : msg);
      goto out;
    }
  }
  for (size_t i = 0; i < nw; i++)
    if (!(fabs((double)got[i] - ref[i]) <= tol[i])) {
      if (!bad++) first = i;
    }
  gt_check(!bad,
           "bwd %s det=%d skew=%d n=%lld hidden=%d [%lld, %lld) of %lld: %zu outside tolerance, "
           "first dweight[%zu] = %.9g, want %.9g +- %.3g",
           kiln_dtype_str(dt), det, skew, n, hidden, vs, ve, V, bad, first, bad ? got[first] : 0.0,
           bad ? ref[first] : 0.0, bad ? tol[first] : 0.0);
  if (det) {
    ref_bwd_sorted_f32(exact, dw0, dt, hdy, hid, n, hidden, vs, ve);
    gt_check(!memcmp(got, got2, nw * 4), "bwd %s det n=%lld hidden=%d: two runs differ",
             kiln_dtype_str(dt), n, hidden);
    for (size_t i = 0; i < nw; i++)
      nbits += memcmp(&got[i], &exact[i], 4) != 0;
    gt_check(!nbits,
             "bwd %s det skew=%d n=%lld hidden=%d: %zu elements differ from the position-order "
             "fp32 sum",
             kiln_dtype_str(dt), skew, n, hidden, nbits);
  }
out:
  dev_free(&dw);
  dev_free(&dy);
  dev_free(&ids);
  dev_free(&ws);
  free(hdy);
  free(dw0);
  free(got);
  free(got2);
  free(exact);
  free(ref);
  free(tol);
  free(hid);
}

static void run_bwd(kiln_loader *l) {
  static const struct {
    long long n;
    int hidden;
    long long V;
  } quick[] = {{60, 1, 7}, {45, 32, 13}, {30, 35, 600}, {2500, 2, 700}, {300, 2, 70000}},
    big[] = {{8192, 4096, 4000}, {1 << 20, 16, 512000}, {4099, 1023, 50257}, {65536, 768, 300}};
  for (size_t d = 0; d < 3; d++) {
    const kiln_dtype dt = kDtypes[d];
    const size_t nq = gt_quick() ? sizeof quick / sizeof *quick : sizeof big / sizeof *big;
    for (int det = 0; det <= 1; det++)
      for (size_t i = 0; i < nq; i++) {
        const long long n = gt_quick() ? quick[i].n : big[i].n,
                        V = gt_quick() ? quick[i].V : big[i].V;
        const int h = gt_quick() ? quick[i].hidden : big[i].hidden;
        bwd_case(l, dt, n, h, V, 0, V, det, 0);     /* TP = 1 */
        bwd_case(l, dt, n, h, V, V / 2, V, det, 0); /* TP = 2, second rank */
        if (i == 1 || i == 3 || !gt_quick()) bwd_case(l, dt, n, h, V, 0, V, det, 1); /* skewed */
      }
  }
}

/* KILN_GPU_TEST_TRIM, per dtype, one forward and one backward of each:
 *   - 33 tokens of hidden 67 over 20 rows, as TP rank 0 of 2 whose
 *     [0, 10) slice makes the general path (forward), and 30 tokens of
 *     hidden 35 over 600 rows, deterministic (backward): odd columns,
 *     rows that leave every vector load misaligned;
 *   - hidden 12288 (forward) and 4096 (backward, every token on one id: the
 *     skewed sort): the largest hidden each direction of the suite takes, on
 *     few tokens and rows;
 *   - and the bad ids (run_bad_ids, at TP=1 and 2): -1, V and 2^40, one per dtype,
 *     the synchronous check and the device flag in turn. */
static void run_trim(kiln_loader *l) {
  for (size_t d = 0; d < 3; d++) {
    fwd_case(l, kDtypes[d], 33, 67, 20, 0, 10, 1);
    fwd_case(l, kDtypes[d], 3, 12288, 5, 0, 5, 0);
    bwd_case(l, kDtypes[d], 30, 35, 600, 0, 600, 1, 0);
    bwd_case(l, kDtypes[d], 9, 4096, 13, 0, 13, 0, 1);
  }
}

/* ---- main ------------------------------------------------------------------------------- */

int main(void) {
  gt_run r;
  if (gt_start(&r, "embedding", 0)) {
    check_invalid_args(r.loader);
    if (!gt_trim()) run_fwd(r.loader);
    run_bad_ids(r.loader);
    if (gt_trim())
      run_trim(r.loader);
    else
      run_bwd(r.loader);
  }
  return gt_finish(&r);
}
