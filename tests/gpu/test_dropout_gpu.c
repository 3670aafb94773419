/* gpu.dropout — kiln_bias_dropout_add_fwd/bwd (docs/kernels/dropout.md) on a
 * GPU, in f32, f16 and bf16, against the reference of dropout_ref.c:
 *   1. the reference's Philox-4x32-10 gives Random123's known answers;
 *   2. invalid arguments return KILN_EINVAL before any launch;
 *   3. forward and backward over odd and aligned shapes (and large ones when
 *      not quick), bias and no bias, 16-byte aligned (vector path) and
 *      shifted by one element (general path), in place (y == x, y ==
 *      residual, dx == dy): the kept set equals the reference mask exactly,
 *      in y (y != residual) and in dx (dx != 0), values within tolerance;
 *      p = 0 and training = 0 are bit-exact identities; outputs are poisoned
 *      (0xFF) first and checked for writes outside them;
 *   4. the same (seed, offset) gives bit-identical outputs; another offset or
 *      seed another mask;
 *   5. launching the entry points directly (kiln_loader_function) with other
 *      grids gives bit-identical outputs;
 *   6. the kept fraction is within a binomial bound of 1 - p for p = 0.1,
 *      0.5, 0.9.
 * Exits 77 (skipped) when there is no CUDA device, 1 on any failure.
 *
 * Environment: KILN_CACHE_DIR (else a temp cache, built on first use);
 * KILN_GPU_TEST_TRIM=1 only the riskiest (kTrim), the fraction on 64 rows;
 * KILN_GPU_TEST_QUICK=1 keeps only small shapes (for the CPU test double of
 * libcuda named by KILN_CUDA_LIBRARY, which emulates the kernels). */
#include <math.h>   /* NAN, ceil, sqrt */
#include <stdio.h>  /* printf, snprintf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcmp, memset */

#include "kiln/loader.h"           /* kiln_loader_function */
#include "kiln/ops.h"              /* the ops under test */
#include "loader/driver.h"         /* kiln_cuda: the driver table, for direct launches */
#include "tests/gpu/device.h"      /* device buffers with poisoned guards */
#include "tests/gpu/dropout_ref.h" /* Philox, inputs and the reference */
#include "tests/gpu/harness.h"     /* the run, counters, einval checks, elements */

#define QUICK_MAX_ELEMS 40000 /* KILN_GPU_TEST_QUICK: largest rows * cols of the suite */

static uint64_t g_seed = 0x6b696c6e2d64726fULL;

static const kiln_dtype kDtypes[] = {KILN_F32, KILN_F16, KILN_BF16};

static uint64_t next_seed(void) { /* splitmix64 */
  uint64_t z = (g_seed += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* ---- device tensors, optionally shifted off 16-byte alignment -------------------- */

/* n elements at element `shift` of an allocation of n + shift (+ the guard):
 * the shift's bytes must stay 0xFF like the guard. */
typedef struct dten {
  dbuf b;
  size_t es, n, shift;
  unsigned char *h; /* host staging, (n + shift) * es */
} dten;

static int dten_alloc(dten *t, kiln_dtype dt, size_t n, size_t shift, char *msg, size_t cap) {
  memset(t, 0, sizeof *t);
  t->es = gt_dtype_size(dt);
  t->n = n;
  t->shift = shift;
  if (!(t->h = malloc((n + shift) * t->es))) {
    snprintf(msg, cap, "out of host memory");
    return 0;
  }
  return dev_alloc(&t->b, (n + shift) * t->es, msg, cap);
}

static void dten_free(dten *t) {
  dev_free(&t->b);
  free(t->h);
  t->h = NULL;
}

static CUdeviceptr dten_ptr(const dten *t) {
  return t->b.p + t->shift * t->es;
}

static int dten_put(dten *t, const void *src, char *msg, size_t cap) {
  memset(t->h, 0xFF, t->shift * t->es);
  memcpy(t->h + t->shift * t->es, src, t->n * t->es);
  return dev_put(&t->b, t->h, msg, cap);
}

static int dten_get(dten *t, void *dst, const char *name, char *msg, size_t cap) {
  const size_t before = t->shift * t->es;
  size_t i;
  if (!dev_get(&t->b, t->h, name, msg, cap)) return 0;
  if ((i = gt_first_not_ff(t->h, before)) < before) {
    snprintf(msg, cap, "wrote before the start of %s (byte %zu of the %zu before it)", name, i,
             before);
    return 0;
  }
  memcpy(dst, t->h + t->shift * t->es, t->n * t->es);
  return 1;
}

/* An input must come back byte for byte. */
static int dten_unchanged(dten *t, const void *want, void *scratch, const char *name, char *msg,
                          size_t cap) {
  if (!dten_get(t, scratch, name, msg, cap)) return 0;
  if (memcmp(scratch, want, t->n * t->es) == 0) return 1;
  snprintf(msg, cap, "input %s was changed", name);
  return 0;
}

/* ---- one case: forward then backward -------------------------------------------- */

enum { INPLACE_NONE = 0, INPLACE_X = 1, INPLACE_RES = 2 };

typedef struct bda_shape {
  long long rows;
  int cols, bias;
  float p;
  int training;
  int inplace; /* forward: y == x or y == residual; backward: dx == dy when not NONE */
  int shift;   /* elements every tensor is moved off its 256-byte aligned base */
} bda_shape;

typedef struct case_bufs {
  dten x, bias, res, y, dy, dx;
  void *scratch;
} case_bufs;

static void bufs_free(case_bufs *b) {
  dten_free(&b->x);
  dten_free(&b->bias);
  dten_free(&b->res);
  dten_free(&b->y);
  dten_free(&b->dy);
  dten_free(&b->dx);
  free(b->scratch);
}

static int bufs_alloc(case_bufs *b, const dref_case *c, size_t shift, char *msg, size_t cap) {
  memset(b, 0, sizeof *b);
  if (!(b->scratch = malloc(c->n * gt_dtype_size(c->dt)))) {
    snprintf(msg, cap, "out of host memory");
    return 0;
  }
  return dten_alloc(&b->x, c->dt, c->n, shift, msg, cap) &&
         dten_alloc(&b->bias, c->dt, (size_t)c->cols, shift, msg, cap) &&
         dten_alloc(&b->res, c->dt, c->n, shift, msg, cap) &&
         dten_alloc(&b->y, c->dt, c->n, shift, msg, cap) &&
         dten_alloc(&b->dy, c->dt, c->n, shift, msg, cap) &&
         dten_alloc(&b->dx, c->dt, c->n, shift, msg, cap);
}

static int op_failed(kiln_status st, char *msg, size_t cap) {
  if (st == KILN_OK) return 0;
  snprintf(msg, cap, "%s: %s", kiln_status_str(st), kiln_last_error());
  return 1;
}

/* The forward of c into y (host, n elements); 0 and msg on failure. */
static int run_fwd(kiln_loader *l, const dref_case *c, int inplace, case_bufs *b, void *y,
                   char *msg, size_t cap) {
  CUdeviceptr xp = dten_ptr(&b->x), rp = dten_ptr(&b->res);
  kiln_status st;
  if (!dev_poison(&b->y.b, msg, cap)) return 0;
  if (c->has_bias && !dten_put(&b->bias, c->bias, msg, cap)) return 0;
  if (inplace == INPLACE_X) {
    if (!dten_put(&b->y, c->x, msg, cap) || !dten_put(&b->res, c->res, msg, cap)) return 0;
    xp = dten_ptr(&b->y);
  } else if (inplace == INPLACE_RES) {
    if (!dten_put(&b->y, c->res, msg, cap) || !dten_put(&b->x, c->x, msg, cap)) return 0;
    rp = dten_ptr(&b->y);
  } else if (!dten_put(&b->x, c->x, msg, cap) || !dten_put(&b->res, c->res, msg, cap)) {
    return 0;
  }
  st = kiln_bias_dropout_add_fwd(l, c->dt, dptr(dten_ptr(&b->y)), dptr(xp),
                                 c->has_bias ? dptr(dten_ptr(&b->bias)) : NULL, dptr(rp), c->rows,
                                 c->cols, c->p, c->seed, c->offset, c->training, NULL);
  if (op_failed(st, msg, cap)) return 0;
  return dev_sync("forward", msg, cap) && dten_get(&b->y, y, "y", msg, cap) &&
         (inplace == INPLACE_X || dten_unchanged(&b->x, c->x, b->scratch, "x", msg, cap)) &&
         (inplace == INPLACE_RES ||
          dten_unchanged(&b->res, c->res, b->scratch, "residual", msg, cap)) &&
         (!c->has_bias || dten_unchanged(&b->bias, c->bias, b->scratch, "bias", msg, cap));
}

static int run_bwd(kiln_loader *l, const dref_case *c, int inplace, case_bufs *b, void *dx,
                   char *msg, size_t cap) {
  CUdeviceptr dyp = dten_ptr(&b->dy);
  kiln_status st;
  if (!dev_poison(&b->dx.b, msg, cap)) return 0;
  if (inplace) {
    if (!dten_put(&b->dx, c->dy, msg, cap)) return 0;
    dyp = dten_ptr(&b->dx);
  } else if (!dten_put(&b->dy, c->dy, msg, cap)) {
    return 0;
  }
  st = kiln_bias_dropout_add_bwd(l, c->dt, dptr(dten_ptr(&b->dx)), dptr(dyp), c->rows, c->cols,
                                 c->p, c->seed, c->offset, c->training, NULL);
  if (op_failed(st, msg, cap)) return 0;
  return dev_sync("backward", msg, cap) && dten_get(&b->dx, dx, "dx", msg, cap) &&
         (inplace || dten_unchanged(&b->dy, c->dy, b->scratch, "dy", msg, cap));
}

static const char *shape_str(const bda_shape *s, kiln_dtype dt, char *out, size_t cap) {
  static const char *const inpl[] = {"", " y=x", " y=residual"};
  snprintf(out, cap, "%-4s %lldx%d%s p=%g%s%s%s", kiln_dtype_str(dt), s->rows, s->cols,
           s->bias ? " bias" : "", (double)s->p, s->training ? "" : " eval", inpl[s->inplace],
           s->shift ? " shifted" : "");
  return out;
}

static void report(const char *dir, const char *shape, const dref_case *c, int bwd, int ran,
                   const char *msg, const void *got) {
  dref_result r;
  if (!ran) {
    gt_fail("%s %s: %s", dir, shape, msg);
    return;
  }
  dref_check(c, bwd, got, &r);
  if (r.bad == 0 && r.mask_bad == 0) {
    gt_pass("%s %s  (kept %zu of %zu, worst %.2f of tolerance)", dir, shape, c->kept, c->n,
            r.worst);
    return;
  }
  gt_fail("%s %s: %zu values wrong, %zu kept/dropped wrong; first [%zu] = %.9g, want %.9g "
          "+- %.3g (reference %s)",
          dir, shape, r.bad, r.mask_bad, r.first, r.got, r.want, r.tol,
          c->keep[r.first] ? "keeps it" : "drops it");
}

/* Runs one shape in one dtype; y and dx (host, n elements, may be NULL) get
 * the outputs. Returns 1 when both ran. */
static int run_case(kiln_loader *l, const bda_shape *s, kiln_dtype dt, uint64_t seed,
                    uint64_t offset, void *y_out, void *dx_out) {
  char msg[512] = "", shape[160];
  dref_case c;
  case_bufs b;
  void *y = NULL, *dx = NULL;
  int fwd_ok = 0, bwd_ok = 0;
  shape_str(s, dt, shape, sizeof shape);
  if (dref_make(&c, dt, s->rows, s->cols, s->bias, s->p, s->training, seed, offset, next_seed()) !=
      0) {
    gt_fail("%s: out of host memory", shape);
    return 0;
  }
  y = y_out ? y_out : malloc(c.n * gt_dtype_size(dt));
  dx = dx_out ? dx_out : malloc(c.n * gt_dtype_size(dt));
  if (!y || !dx || !bufs_alloc(&b, &c, (size_t)s->shift, msg, sizeof msg)) {
    gt_fail("%s: %s", shape, msg[0] ? msg : "out of host memory");
    goto out_nobufs;
  }
  fwd_ok = run_fwd(l, &c, s->inplace, &b, y, msg, sizeof msg);
  report("fwd", shape, &c, 0, fwd_ok, msg, y);
  msg[0] = '\0';
  bwd_ok = run_bwd(l, &c, s->inplace != INPLACE_NONE, &b, dx, msg, sizeof msg);
  report("bwd", shape, &c, 1, bwd_ok, msg, dx);
  if (fwd_ok && bwd_ok) { /* the backward regenerates the forward's mask */
    size_t diff = 0;
    for (size_t i = 0; i < c.n; i++)
      diff += (gt_get(dt, y, i) != gt_get(dt, c.res, i)) != (gt_get(dt, dx, i) != 0.0);
    if (diff) {
      gt_fail("mask %s: dx is 0 at %zu elements where y has the x term, or not 0 where it "
              "lacks it",
              shape, diff);
    } else {
      gt_pass("mask %s: dx == 0 exactly where y == residual", shape);
    }
  }
  bufs_free(&b);
out_nobufs:
  if (!y_out) free(y);
  if (!dx_out) free(dx);
  dref_free(&c);
  return fwd_ok && bwd_ok;
}

/* ---- 1. Philox known answers ------------------------------------------------------- */

static void check_kat(void) {
  char msg[256];
  if (dref_philox_kat(msg, sizeof msg))
    gt_pass("philox4x32-10 known answers (Random123): reference matches all three");
  else
    gt_fail("philox4x32-10 known answers: %s", msg);
}

/* ---- 2. invalid arguments ---------------------------------------------------------- */

/* Every call is invalid in exactly one argument; none may launch, so the
 * poisoned outputs must come back untouched. */
static void check_invalid_args(kiln_loader *l) {
  enum { ROWS = 4, COLS = 8, N = ROWS * COLS };
  const kiln_dtype f32 = KILN_F32, bad = (kiln_dtype)7;
  const uint64_t sd = 1, of = 2;
  const size_t bytes = N * 4; /* the output, f32 */
  char msg[256] = "";
  dbuf out = {0, 0}, in = {0, 0};
  void *o, *i;
  if (!dev_alloc(&out, bytes, msg, sizeof msg) || !dev_alloc(&in, bytes, msg, sizeof msg)) {
    gt_fail("einval: %s", msg);
    goto out;
  }
  o = dptr(out.p);
  i = dptr(in.p);
#define FWD(...) kiln_bias_dropout_add_fwd(__VA_ARGS__, NULL)
#define BWD(...) kiln_bias_dropout_add_bwd(__VA_ARGS__, NULL)
  gt_expect_einval("fwd loader=NULL", FWD(NULL, f32, o, i, i, i, ROWS, COLS, .5f, sd, of, 1));
  gt_expect_einval("fwd dtype=7", FWD(l, bad, o, i, i, i, ROWS, COLS, .5f, sd, of, 1));
  gt_expect_einval("fwd y=NULL", FWD(l, f32, NULL, i, i, i, ROWS, COLS, .5f, sd, of, 1));
  gt_expect_einval("fwd x=NULL", FWD(l, f32, o, NULL, i, i, ROWS, COLS, .5f, sd, of, 1));
  gt_expect_einval("fwd residual=NULL", FWD(l, f32, o, i, i, NULL, ROWS, COLS, .5f, sd, of, 1));
  gt_expect_empty("fwd rows=0", FWD(l, f32, o, i, i, i, 0, COLS, .5f, sd, of, 1));
  gt_expect_einval("fwd rows=-1", FWD(l, f32, o, i, i, i, -1, COLS, .5f, sd, of, 1));
  gt_expect_einval("fwd cols=0", FWD(l, f32, o, i, i, i, ROWS, 0, .5f, sd, of, 1));
  gt_expect_einval("fwd cols=-3", FWD(l, f32, o, i, i, i, ROWS, -3, .5f, sd, of, 1));
  gt_expect_einval("fwd rows*cols*4 overflows",
                   FWD(l, f32, o, i, i, i, 0x4000000000000000LL, 2, .5f, sd, of, 1));
  gt_expect_einval("fwd p=-0.1", FWD(l, f32, o, i, i, i, ROWS, COLS, -.1f, sd, of, 1));
  gt_expect_einval("fwd p=1", FWD(l, f32, o, i, i, i, ROWS, COLS, 1.f, sd, of, 1));
  gt_expect_einval("fwd p=1.5", FWD(l, f32, o, i, i, i, ROWS, COLS, 1.5f, sd, of, 1));
  gt_expect_einval("fwd p=NaN", FWD(l, f32, o, i, i, i, ROWS, COLS, NAN, sd, of, 1));
  /* p = 1 without training is the identity, not an error (a launch:
   * unit.test_loader_ops checks it) */
  gt_expect_einval("fwd training=2", FWD(l, f32, o, i, i, i, ROWS, COLS, .5f, sd, of, 2));
  gt_expect_einval("bwd loader=NULL", BWD(NULL, f32, o, i, ROWS, COLS, .5f, sd, of, 1));
  gt_expect_einval("bwd dtype=7", BWD(l, bad, o, i, ROWS, COLS, .5f, sd, of, 1));
  gt_expect_einval("bwd dx=NULL", BWD(l, f32, NULL, i, ROWS, COLS, .5f, sd, of, 1));
  gt_expect_einval("bwd dy=NULL", BWD(l, f32, o, NULL, ROWS, COLS, .5f, sd, of, 1));
  gt_expect_empty("bwd rows=0", BWD(l, f32, o, i, 0, COLS, .5f, sd, of, 1));
  gt_expect_einval("bwd cols=0", BWD(l, f32, o, i, ROWS, 0, .5f, sd, of, 1));
  gt_expect_einval("bwd rows*cols*2 overflows",
                   BWD(l, KILN_F16, o, i, 0x4000000000000000LL, 4, .5f, sd, of, 1));
  gt_expect_einval("bwd p=-1e-9", BWD(l, f32, o, i, ROWS, COLS, -1e-9f, sd, of, 1));
  gt_expect_einval("bwd p=1", BWD(l, f32, o, i, ROWS, COLS, 1.f, sd, of, 1));
  gt_expect_einval("bwd p=NaN", BWD(l, f32, o, i, ROWS, COLS, NAN, sd, of, 1));
  gt_expect_einval("bwd training=-1", BWD(l, f32, o, i, ROWS, COLS, .5f, sd, of, -1));
#undef FWD
#undef BWD
  gt_expect_untouched(&out);
out:
  dev_free(&out);
  dev_free(&in);
}

/* ---- 3. the suite ------------------------------------------------------------------ */

typedef struct rc_shape {
  long long rows;
  int cols;
} rc_shape;

/* Odd and aligned column counts (a multiple of 8 takes every dtype's vector
 * path with a bias; 4 only f32's), one row to many; big ones when not quick. */
static const rc_shape kShapes[] = {{1, 1},      {1, 3},       {3, 5},        {2, 8},
                                   {7, 33},     {4, 64},      {1, 4},        {5, 1000},
                                   {3, 1027},   {2, 4096},    {9, 999},      {37, 1001},
                                   {8, 4104},   {4096, 4096}, {1000, 12289}, {1, (1 << 24) + 3},
                                   {8192, 1024}};
static const float kP[] = {0.1f, 0.5f, 0.9f, 0.3f};

/* KILN_GPU_TEST_TRIM runs only these, each in every dtype with its three
 * variants (bias aligned; no bias, in place on x; bias shifted off 16 bytes,
 * in place on the residual), forward and backward: 7 x 33 (odd, a vector
 * body and a scalar tail), 3 x 1027 (odd, every row misaligned) and
 * 2 x 12289 (the largest hidden of kShapes, odd, on two rows). */
static const rc_shape kTrim[] = {{7, 33}, {3, 1027}, {2, 12289}};

static void run_suite(kiln_loader *l) {
  const rc_shape *shapes = gt_trim() ? kTrim : kShapes;
  const size_t ns = gt_trim() ? sizeof kTrim / sizeof *kTrim : sizeof kShapes / sizeof *kShapes;
  size_t k = 0;
  for (size_t si = 0; si < ns; si++) {
    const rc_shape *r = &shapes[si];
    const long long n = r->rows * r->cols;
    if (gt_quick() && n > QUICK_MAX_ELEMS) continue;
    for (size_t d = 0; d < 3; d++) {
      /* (a) bias, aligned; (b) no bias, in place on x; (c) bias, shifted (the
       * general path), in place on the residual; big shapes: one of them */
      const bda_shape v[3] = {
          {r->rows, r->cols, 1, kP[k % 4], 1, INPLACE_NONE, 0},
          {r->rows, r->cols, 0, kP[(k + 1) % 4], 1, INPLACE_X, 0},
          {r->rows, r->cols, 1, kP[(k + 2) % 4], 1, INPLACE_RES, 1},
      };
      for (size_t j = 0; j < 3; j++) {
        if (n > QUICK_MAX_ELEMS && j != (si + d) % 3) continue;
        run_case(l, &v[j], kDtypes[d], next_seed(), next_seed(), NULL, NULL);
      }
      k++;
    }
  }
}

/* p = 0 in training, and training = 0 with p = 0.5: y = fp32(x + bias) +
 * residual rounded once, dx = dy, bit for bit (the reference's tol is 0). */
static void run_identities(kiln_loader *l) {
  static const rc_shape shapes[] = {{7, 33}, {4, 64}};
  for (size_t si = 0; si < 2; si++)
    for (size_t d = 0; d < 3; d++)
      for (int mode = 0; mode < 2; mode++) {
        const bda_shape s = {shapes[si].rows, shapes[si].cols, (int)(d != 1), mode ? 0.5f : 0.f,
                             !mode,           INPLACE_NONE,    (int)si ^ mode};
        run_case(l, &s, kDtypes[d], next_seed(), next_seed(), NULL, NULL);
      }
}

/* ---- 4. reproducibility, offsets and seeds ------------------------------------------ */

static size_t mask_diff(kiln_dtype dt, const void *a, const void *b, size_t n) {
  size_t diff = 0;
  for (size_t i = 0; i < n; i++)
    diff += (gt_get(dt, a, i) != 0.0) != (gt_get(dt, b, i) != 0.0);
  return diff;
}

static void check_reproducible(kiln_loader *l) {
  static const struct {
    bda_shape s;
    kiln_dtype dt;
  } cases[] = {{{3, 1027, 1, 0.5f, 1, INPLACE_NONE, 0}, KILN_F32},
               {{4, 64, 1, 0.3f, 1, INPLACE_NONE, 1}, KILN_BF16},
               {{2, 4096, 0, 0.1f, 1, INPLACE_NONE, 0}, KILN_F16}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const bda_shape *s = &cases[k].s;
    const kiln_dtype dt = cases[k].dt;
    const size_t bytes = (size_t)(s->rows * s->cols) * gt_dtype_size(dt),
                 n = bytes / gt_dtype_size(dt);
    const uint64_t seed = next_seed(), offset = next_seed();
    const uint64_t data = g_seed;
    unsigned char *y[2], *dx[4];
    char shape[160];
    int ok = 1;
    shape_str(s, dt, shape, sizeof shape);
    y[0] = malloc(bytes), y[1] = malloc(bytes);
    for (int i = 0; i < 4; i++)
      dx[i] = malloc(bytes);
    if (!y[0] || !y[1] || !dx[0] || !dx[1] || !dx[2] || !dx[3]) {
      gt_fail("reproducible: out of host memory");
      ok = 0;
    }
    /* the same inputs twice (the data seed is rewound), then offset + 1, seed + 1 */
    for (int i = 0; ok && i < 2; i++) {
      g_seed = data;
      ok = run_case(l, s, dt, seed, offset, y[i], dx[i]);
    }
    g_seed = data;
    ok = ok && run_case(l, s, dt, seed, offset + 1, NULL, dx[2]);
    g_seed = data;
    ok = ok && run_case(l, s, dt, seed + 1, offset, NULL, dx[3]);
    if (ok) {
      const size_t d_off = mask_diff(dt, dx[0], dx[2], n), d_seed = mask_diff(dt, dx[0], dx[3], n);
      if (memcmp(y[0], y[1], bytes) == 0 && memcmp(dx[0], dx[1], bytes) == 0) {
        gt_pass("reproducible %s: same (seed, offset), bit-identical y and dx", shape);
      } else {
        gt_fail("reproducible %s: same (seed, offset) gave different outputs", shape);
      }
      /* 2p(1-p)n elements are expected to differ: at least a third of that */
      if (3 * d_off >= (size_t)(2 * s->p * (1 - s->p) * n) && d_off > 0 &&
          3 * d_seed >= (size_t)(2 * s->p * (1 - s->p) * n) && d_seed > 0) {
        gt_pass("streams %s: offset + 1 changes %zu of %zu keep decisions, seed + 1 %zu", shape,
                d_off, n, d_seed);
      } else {
        gt_fail("streams %s: offset + 1 changes %zu of %zu keep decisions, seed + 1 %zu", shape,
                d_off, n, d_seed);
      }
    }
    free(y[0]);
    free(y[1]);
    for (int i = 0; i < 4; i++)
      free(dx[i]);
  }
}

/* ---- 5. launch shape ----------------------------------------------------------------- */

/* Launches entry with grid blocks of 256 threads, the arguments the launcher
 * would pass for p (threshold = ceil(p * 2^24), scale = 1 / (1 - p)). */
static int launch_direct(kiln_loader *l, const char *entry, unsigned grid, void **args, char *msg,
                         size_t cap) {
  const kiln_cuda_api *cu = NULL;
  CUfunction fn = NULL;
  CUresult r;
  if (kiln_cuda(&cu) != KILN_OK || kiln_loader_function(&fn, l, entry) != KILN_OK) {
    snprintf(msg, cap, "%s: %s", entry, kiln_last_error());
    return 0;
  }
  r = cu->LaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
  if (r != CUDA_SUCCESS) {
    snprintf(msg, cap, "launch of %s with grid %u: %s", entry, grid, kiln_cuda_error_name(r));
    return 0;
  }
  return dev_sync(entry, msg, cap);
}

static void check_launch_shape(kiln_loader *l) {
  static const struct {
    bda_shape s;
    kiln_dtype dt;
  } cases[] = {{{5, 1000, 1, 0.5f, 1, INPLACE_NONE, 0}, KILN_F32}, /* vector path */
               {{3, 1027, 1, 0.3f, 1, INPLACE_NONE, 1}, KILN_F16}, /* general path */
               {{7, 33, 0, 0.1f, 1, INPLACE_NONE, 0}, KILN_BF16}}; /* vector + scalar tail */
  static const unsigned grids[] = {1, 3, 64};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const bda_shape *s = &cases[k].s;
    const kiln_dtype dt = cases[k].dt;
    const size_t es = gt_dtype_size(dt);
    unsigned char *y0 = NULL, *dx0 = NULL, *got = NULL;
    char shape[160], msg[512] = "", entry[96];
    dref_case c;
    case_bufs b;
    int ok;
    memset(&b, 0, sizeof b);
    shape_str(s, dt, shape, sizeof shape);
    if (dref_make(&c, dt, s->rows, s->cols, s->bias, s->p, 1, next_seed(), next_seed(),
                  next_seed()) != 0) {
      gt_fail("launch shape: out of host memory");
      continue;
    }
    ok = (y0 = malloc(c.n * es)) && (dx0 = malloc(c.n * es)) && (got = malloc(c.n * es)) &&
         bufs_alloc(&b, &c, (size_t)s->shift, msg, sizeof msg);
    /* the launcher's own grid first */
    ok = ok && run_fwd(l, &c, INPLACE_NONE, &b, y0, msg, sizeof msg) &&
         run_bwd(l, &c, 0, &b, dx0, msg, sizeof msg);
    for (size_t g = 0; ok && g < sizeof grids / sizeof grids[0]; g++) {
      long long n = (long long)c.n;
      int cols = c.cols;
      unsigned threshold = (unsigned)ceil((double)c.p * 16777216.0);
      float scale = (float)(1.0 / (1.0 - (double)c.p));
      unsigned long long seed = c.seed, offset = c.offset;
      CUdeviceptr y = dten_ptr(&b.y), x = dten_ptr(&b.x), res = dten_ptr(&b.res);
      CUdeviceptr bias = c.has_bias ? dten_ptr(&b.bias) : 0, dx = dten_ptr(&b.dx),
                  dy = dten_ptr(&b.dy);
      void *fargs[] = {&y, &x, &bias, &res, &n, &cols, &threshold, &scale, &seed, &offset};
      void *bargs[] = {&dx, &dy, &n, &threshold, &scale, &seed, &offset};
      snprintf(entry, sizeof entry, "kiln_bias_dropout_add_fwd_%s_g", kiln_dtype_str(dt));
      ok = dev_poison(&b.y.b, msg, sizeof msg) &&
           launch_direct(l, entry, grids[g], fargs, msg, sizeof msg) &&
           dten_get(&b.y, got, "y", msg, sizeof msg);
      if (ok && memcmp(got, y0, c.n * es) != 0) {
        snprintf(msg, sizeof msg, "forward with grid %u differs from the launcher's grid",
                 grids[g]);
        ok = 0;
      }
      snprintf(entry, sizeof entry, "kiln_bias_dropout_add_bwd_%s_g", kiln_dtype_str(dt));
      ok = ok && dev_poison(&b.dx.b, msg, sizeof msg) &&
           launch_direct(l, entry, grids[g], bargs, msg, sizeof msg) &&
           dten_get(&b.dx, got, "dx", msg, sizeof msg);
      if (ok && memcmp(got, dx0, c.n * es) != 0) {
        snprintf(msg, sizeof msg, "backward with grid %u differs from the launcher's grid",
                 grids[g]);
        ok = 0;
      }
    }
    if (ok) {
      gt_pass("launch shape %s: grids 1, 3, 64 and the launcher's give bit-identical y, dx", shape);
    } else {
      gt_fail("launch shape: %s", msg[0] ? msg : "out of host memory");
    }
    if (b.scratch) bufs_free(&b);
    free(y0);
    free(dx0);
    free(got);
    dref_free(&c);
  }
}

/* ---- 6. kept fraction ---------------------------------------------------------------- */

static void check_fraction(kiln_loader *l) {
  static const float ps[] = {0.1f, 0.5f, 0.9f};
  const long long rows = gt_quick() || gt_trim() ? 64 : 16384, cols = 1024;
  const size_t n = (size_t)(rows * cols);
  for (size_t k = 0; k < 3; k++) {
    const bda_shape s = {rows, (int)cols, 0, ps[k], 1, INPLACE_NONE, 0};
    float *dx = malloc(n * sizeof *dx);
    size_t kept = 0;
    if (!dx) {
      gt_fail("fraction: out of host memory");
      continue;
    }
    if (run_case(l, &s, KILN_F32, next_seed(), next_seed(), NULL, dx)) {
      /* P(keep) = (2^24 - ceil(p 2^24)) / 2^24; 5 sigma of Binomial(n, q) */
      const double q = (16777216.0 - ceil((double)ps[k] * 16777216.0)) / 16777216.0;
      const double sigma = sqrt((double)n * q * (1 - q));
      for (size_t i = 0; i < n; i++)
        kept += dx[i] != 0.f;
      if (fabs((double)kept - (double)n * q) <= 5 * sigma) {
        gt_pass("fraction p=%g: kept %zu of %zu = %.5f, 1 - p = %.5f, within 5 sigma (%.0f)",
                (double)ps[k], kept, n, (double)kept / (double)n, q, 5 * sigma);
      } else {
        gt_fail("fraction p=%g: kept %zu of %zu = %.5f, 1 - p = %.5f, outside 5 sigma (%.0f)",
                (double)ps[k], kept, n, (double)kept / (double)n, q, 5 * sigma);
      }
    }
    free(dx);
  }
}

/* ---- main ------------------------------------------------------------------------------- */

int main(void) {
  gt_run r;
  if (gt_start(&r, "dropout", GT_SHOW_CACHE)) {
    check_kat();
    check_invalid_args(r.loader);
    run_suite(r.loader);
    run_identities(r.loader);
    check_reproducible(r.loader);
    check_launch_shape(r.loader);
    check_fraction(r.loader);
  }
  return gt_finish(&r);
}
