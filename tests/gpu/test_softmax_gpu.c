/* gpu.softmax — every softmax op (docs/kernels.md) on a GPU, in f32, f16 and
 * bf16, against the float64 reference of softmax_ref.c:
 *   1. invalid arguments return KILN_EINVAL before any launch;
 *   2. forward and backward of the plain, masked and causal units over
 *      columns on every launch variant's edges (1 .. 20000), masked with a
 *      per-batch and a broadcast mask and a fully masked row, causal with
 *      sq > sk, sq == sk and sq < sk, in place too; outputs are poisoned
 *      (0xFF: NaN) before each launch and checked for writes past their end;
 *   3. loading from an exact CUBIN, a compatible CUBIN (sm_X0 on an sm_XY
 *      device, Y > 0) and PTX gives the same results: bit-identical for the
 *      two CUBINs, within tolerance for PTX (each built into a cache of its
 *      own: skipped with a note when there is no NVRTC).
 * Exits 77 (skipped) when there is no CUDA device, 1 on any failure.
 *
 * Environment: KILN_CACHE_DIR (else a temp cache, built on first use);
 * KILN_GPU_TEST_QUICK=1 keeps only small shapes (for a CPU test double of
 * libcuda named by KILN_CUDA_LIBRARY, which emulates the kernels);
 * KILN_GPU_TEST_TRIM=1 only the riskiest (kTrim). */
#include <math.h>   /* NAN */
#include <stdio.h>  /* printf, snprintf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcmp, memcpy */

#include "kiln/build.h"            /* kiln_build, for the source comparison's caches */
#include "kiln/kernels.h"          /* kiln_unit_at */
#include "kiln/loader.h"           /* kiln_loader_unit_load */
#include "kiln/ops.h"              /* the ops under test */
#include "kiln/target.h"           /* kiln_nvrtc_version */
#include "loader/select.h"         /* kiln_toolchain_ptx_isa */
#include "tests/gpu/device.h"      /* device buffers with poisoned guards */
#include "tests/gpu/harness.h"     /* the run, counters, einval checks, elements */
#include "tests/gpu/softmax_ref.h" /* inputs and the float64 reference */

#define QUICK_MAX_ELEMS 40000 /* KILN_GPU_TEST_QUICK: largest rows * cols */

static uint64_t g_seed = 0x6b696c6e2d677075ULL;

static const kiln_dtype kDtypes[] = {KILN_F32, KILN_F16, KILN_BF16};

/* ---- launching a case --------------------------------------------------------- */

static kiln_status launch_fwd(kiln_loader *l, const ref_case *c, CUdeviceptr y, CUdeviceptr x,
                              CUdeviceptr mask) {
  const ref_shape *s = &c->s;
  switch (s->unit) {
  case REF_PLAIN:
    return kiln_scaled_softmax_fwd(l, c->dt, dptr(y), dptr(x), c->rows, s->cols, s->scale, NULL);
  case REF_MASKED:
    return kiln_scaled_masked_softmax_fwd(l, c->dt, dptr(y), dptr(x), dptr(mask), s->b, s->heads,
                                          s->sq, s->cols, s->mask_batches, s->scale, NULL);
  default:
    return kiln_scaled_upper_triang_masked_softmax_fwd(l, c->dt, dptr(y), dptr(x), s->b, s->sq,
                                                       s->cols, s->scale, NULL);
  }
}

static kiln_status launch_bwd(kiln_loader *l, const ref_case *c, CUdeviceptr dx, CUdeviceptr y,
                              CUdeviceptr dy) {
  const ref_shape *s = &c->s;
  switch (s->unit) {
  case REF_PLAIN:
    return kiln_scaled_softmax_bwd(l, c->dt, dptr(dx), dptr(y), dptr(dy), c->rows, s->cols,
                                   s->scale, NULL);
  case REF_MASKED:
    return kiln_scaled_masked_softmax_bwd(l, c->dt, dptr(dx), dptr(y), dptr(dy), s->b, s->heads,
                                          s->sq, s->cols, s->scale, NULL);
  default:
    return kiln_scaled_upper_triang_masked_softmax_bwd(l, c->dt, dptr(dx), dptr(y), dptr(dy), s->b,
                                                       s->sq, s->cols, s->scale, NULL);
  }
}

typedef struct case_bufs {
  dbuf x, y, dy, dx, mask;
  void *scratch; /* host, n elements: to check that inputs come back unchanged */
} case_bufs;

static void bufs_free(case_bufs *b) {
  dev_free(&b->x);
  dev_free(&b->y);
  dev_free(&b->dy);
  dev_free(&b->dx);
  dev_free(&b->mask);
  free(b->scratch);
}

static int bufs_alloc(case_bufs *b, const ref_case *c, char *msg, size_t cap) {
  const size_t bytes = c->n * gt_dtype_size(c->dt);
  memset(b, 0, sizeof *b);
  b->scratch = malloc(bytes);
  if (!b->scratch) {
    snprintf(msg, cap, "out of host memory");
    return 0;
  }
  return dev_alloc(&b->x, bytes, msg, cap) && dev_alloc(&b->y, bytes, msg, cap) &&
         dev_alloc(&b->dy, bytes, msg, cap) && dev_alloc(&b->dx, bytes, msg, cap) &&
         dev_alloc(&b->mask, c->mask_bytes ? c->mask_bytes : 1, msg, cap) &&
         (!c->mask_bytes || dev_put(&b->mask, c->mask, msg, cap));
}

/* An input the kernel takes as const must come back byte for byte. */
static int unchanged(const dbuf *d, const void *want, void *scratch, const char *name, char *msg,
                     size_t cap) {
  if (!dev_get(d, scratch, name, msg, cap)) return 0;
  if (memcmp(scratch, want, d->bytes) == 0) return 1;
  snprintf(msg, cap, "input %s was changed", name);
  return 0;
}

/* Forward: y (host, n elements) from the device; 0 and msg on failure. */
static int run_fwd(kiln_loader *l, const ref_case *c, case_bufs *b, void *y, char *msg,
                   size_t cap) {
  kiln_status st;
  if (!dev_poison(&b->y, msg, cap)) return 0;
  if (c->s.inplace) {
    if (!dev_put(&b->y, c->x, msg, cap)) return 0;
    st = launch_fwd(l, c, b->y.p, b->y.p, b->mask.p);
  } else {
    if (!dev_put(&b->x, c->x, msg, cap)) return 0;
    st = launch_fwd(l, c, b->y.p, b->x.p, b->mask.p);
  }
  if (st != KILN_OK) {
    snprintf(msg, cap, "%s: %s", kiln_status_str(st), kiln_last_error());
    return 0;
  }
  return dev_sync("forward", msg, cap) && dev_get(&b->y, y, "y", msg, cap) &&
         (c->s.inplace || unchanged(&b->x, c->x, b->scratch, "x", msg, cap)) &&
         (!c->mask_bytes || unchanged(&b->mask, c->mask, b->scratch, "mask", msg, cap));
}

/* Backward from the case's own y_in and dy; dx to the host. */
static int run_bwd(kiln_loader *l, const ref_case *c, case_bufs *b, void *dx, char *msg,
                   size_t cap) {
  kiln_status st;
  if (!dev_put(&b->y, c->y_in, msg, cap) || !dev_poison(&b->dx, msg, cap)) return 0;
  if (c->s.inplace) {
    if (!dev_put(&b->dx, c->dy, msg, cap)) return 0;
    st = launch_bwd(l, c, b->dx.p, b->y.p, b->dx.p);
  } else {
    if (!dev_put(&b->dy, c->dy, msg, cap)) return 0;
    st = launch_bwd(l, c, b->dx.p, b->y.p, b->dy.p);
  }
  if (st != KILN_OK) {
    snprintf(msg, cap, "%s: %s", kiln_status_str(st), kiln_last_error());
    return 0;
  }
  return dev_sync("backward", msg, cap) && dev_get(&b->dx, dx, "dx", msg, cap) &&
         unchanged(&b->y, c->y_in, b->scratch, "y", msg, cap) &&
         (c->s.inplace || unchanged(&b->dy, c->dy, b->scratch, "dy", msg, cap));
}

/* One line per result; counts it. */
static int report(const char *prefix, const char *dir, const ref_case *c, int ran, const char *msg,
                  const void *got, const double *ref, const double *tol) {
  char shape[160];
  ref_mismatch first = {0, 0, 0, 0, 0};
  double worst = 0;
  size_t bad = 0;
  ref_shape_str(&c->s, shape, sizeof shape);
  if (ran) bad = ref_check(c, got, ref, tol, &first, &worst);
  if (ran && bad == 0) {
    gt_pass("%s%s %-4s %s  (worst %.2f of tolerance)", prefix, dir, kiln_dtype_str(c->dt), shape,
            worst);
    return 1;
  }
  if (!ran)
    gt_fail("%s%s %-4s %s: %s", prefix, dir, kiln_dtype_str(c->dt), shape, msg);
  else if (first.tol < 0)
    gt_fail("%s%s %-4s %s: %zu wrong, first [row %lld, col %d] = %.9g, must be exactly 0", prefix,
            dir, kiln_dtype_str(c->dt), shape, bad, first.row, first.col, first.got);
  else
    gt_fail("%s%s %-4s %s: %zu wrong, first [row %lld, col %d] = %.9g, expected %.9g +- "
            "%.3g",
            prefix, dir, kiln_dtype_str(c->dt), shape, bad, first.row, first.col, first.got,
            first.want, first.tol);
  return 0;
}

/* Runs c forward and backward on l, reports both; the outputs stay in y/dx
 * (host, n elements each) for comparisons across loaders. */
static void run_case(kiln_loader *l, const char *prefix, const ref_case *c, void *y, void *dx) {
  char msg[512] = "";
  case_bufs b;
  int ok = bufs_alloc(&b, c, msg, sizeof msg);
  const int fwd_ran = ok && run_fwd(l, c, &b, y, msg, sizeof msg);
  report(prefix, "fwd", c, fwd_ran, msg, y, c->y_ref, c->y_tol);
  msg[0] = '\0';
  ok = ok && run_bwd(l, c, &b, dx, msg, sizeof msg);
  report(prefix, "bwd", c, ok, msg[0] ? msg : "buffers not allocated", dx, c->dx_ref, c->dx_tol);
  bufs_free(&b);
}

/* ---- the shapes ------------------------------------------------------------------ */

/* Every launch variant's edges: w1 (1, 31, 32), w2 (33), w32 (1000), b8
 * (4096), b32 (16384) and the general path (20000). */
static const int kCols[] = {1, 31, 32, 33, 1000, 4096, 16384, 20000};
#define N_COLS (sizeof kCols / sizeof kCols[0])
static const float kScales[] = {0.37f, 1.7f, 0.125f};

#define MAX_SHAPES 128

static int keep(const ref_shape *s) {
  return !gt_quick() || ref_rows(s) * s->cols <= QUICK_MAX_ELEMS;
}

static size_t add_shape(ref_shape *out, size_t n, ref_unit u, int b, int h, int sq, int cols,
                        int mb, int inplace) {
  ref_shape s = {u, b, h, sq, cols, mb, kScales[n % 3], inplace};
  if (n < MAX_SHAPES && keep(&s)) out[n++] = s;
  return n;
}

/* rows 1, 3, 37 for every column count; masked [b, h, sq] with a broadcast
 * and a per-batch mask (the last mask row fully masked when there are two or
 * more); causal with sq > sk, sq == sk (up to 1000) and sq < sk; in place on
 * a few. */
static size_t make_shapes(ref_shape *out) {
  static const int plain_rows[] = {1, 3, 37};
  static const int masked[][4] = {{1, 1, 1, 1}, {3, 1, 1, 3}, {2, 3, 6, 1}, {2, 2, 9, 2}};
  static const int causal[][2] = {{1, 1}, {2, 3}, {1, 37}};
  size_t n = 0;
  for (size_t k = 0; k < N_COLS; k++) {
    const int cols = kCols[k];
    for (size_t i = 0; i < 3; i++)
      n = add_shape(out, n, REF_PLAIN, plain_rows[i], 1, 1, cols, 1, 0);
    for (size_t i = 0; i < 4; i++)
      n = add_shape(out, n, REF_MASKED, masked[i][0], masked[i][1], masked[i][2], cols,
                    masked[i][3], 0);
    for (size_t i = 0; i < 3; i++)
      n = add_shape(out, n, REF_CAUSAL, causal[i][0], 1, causal[i][1], cols, 1, 0);
    if (cols > 1 && cols <= 1000) n = add_shape(out, n, REF_CAUSAL, 1, 1, cols, cols, 1, 0);
  }
  n = add_shape(out, n, REF_PLAIN, 3, 1, 1, 33, 1, 1);
  n = add_shape(out, n, REF_PLAIN, 3, 1, 1, 20000, 1, 1);
  n = add_shape(out, n, REF_PLAIN, 1, 1, 1, 20000, 1, 1);
  n = add_shape(out, n, REF_MASKED, 2, 3, 6, 1000, 1, 1);
  n = add_shape(out, n, REF_CAUSAL, 2, 1, 3, 4096, 1, 1);
  n = add_shape(out, n, REF_CAUSAL, 1, 1, 3, 33, 1, 1);
  return n;
}

/* ---- 1. invalid arguments ------------------------------------------------------------ */

/* Every call is invalid in exactly one argument; none may launch, so the
 * poisoned outputs must come back untouched. */
static void check_invalid_args(kiln_loader *l) {
  enum { B = 2, H = 1, SQ = 2, SK = 8, ROWS = B * H * SQ, N = ROWS * SK };
  const kiln_dtype f32 = KILN_F32, bad = (kiln_dtype)7;
  const size_t bytes = N * 4; /* the output, f32 */
  char msg[256] = "";
  dbuf out = {0, 0}, in = {0, 0}, mask = {0, 0};
  void *o, *i;
  const uint8_t *m;
  if (!dev_alloc(&out, bytes, msg, sizeof msg) || !dev_alloc(&in, bytes, msg, sizeof msg) ||
      !dev_alloc(&mask, B * SQ * SK, msg, sizeof msg)) {
    gt_fail("einval: %s", msg);
    goto out;
  }
  o = dptr(out.p);
  i = dptr(in.p);
  m = dptr(mask.p);
  gt_expect_einval("scaled_softmax_fwd loader=NULL",
                   kiln_scaled_softmax_fwd(NULL, f32, o, i, ROWS, SK, 1, NULL));
  gt_expect_einval("scaled_softmax_fwd y=NULL",
                   kiln_scaled_softmax_fwd(l, f32, NULL, i, ROWS, SK, 1, NULL));
  gt_expect_einval("scaled_softmax_fwd x=NULL",
                   kiln_scaled_softmax_fwd(l, f32, o, NULL, ROWS, SK, 1, NULL));
  gt_expect_empty("scaled_softmax_fwd rows=0",
                  kiln_scaled_softmax_fwd(l, f32, o, i, 0, SK, 1, NULL));
  gt_expect_einval("scaled_softmax_fwd cols=0",
                   kiln_scaled_softmax_fwd(l, f32, o, i, ROWS, 0, 1, NULL));
  gt_expect_einval("scaled_softmax_fwd cols=-1",
                   kiln_scaled_softmax_fwd(l, f32, o, i, ROWS, -1, 1, NULL));
  gt_expect_einval("scaled_softmax_fwd dtype=7",
                   kiln_scaled_softmax_fwd(l, bad, o, i, ROWS, SK, 1, NULL));
  gt_expect_einval("scaled_softmax_fwd scale=NaN",
                   kiln_scaled_softmax_fwd(l, f32, o, i, ROWS, SK, NAN, NULL));
  gt_expect_einval("scaled_softmax_bwd dx=NULL",
                   kiln_scaled_softmax_bwd(l, f32, NULL, i, i, ROWS, SK, 1, NULL));
  gt_expect_einval("scaled_softmax_bwd y=NULL",
                   kiln_scaled_softmax_bwd(l, f32, o, NULL, i, ROWS, SK, 1, NULL));
  gt_expect_einval("scaled_softmax_bwd dy=NULL",
                   kiln_scaled_softmax_bwd(l, f32, o, i, NULL, ROWS, SK, 1, NULL));
  gt_expect_einval("scaled_softmax_bwd cols=0",
                   kiln_scaled_softmax_bwd(l, f32, o, i, i, ROWS, 0, 1, NULL));
  gt_expect_einval("scaled_softmax_bwd dtype=7",
                   kiln_scaled_softmax_bwd(l, bad, o, i, i, ROWS, SK, 1, NULL));
  gt_expect_einval("scaled_masked_softmax_fwd mask=NULL",
                   kiln_scaled_masked_softmax_fwd(l, f32, o, i, NULL, B, H, SQ, SK, 1, 1, NULL));
  gt_expect_einval("scaled_masked_softmax_fwd y=NULL",
                   kiln_scaled_masked_softmax_fwd(l, f32, NULL, i, m, B, H, SQ, SK, 1, 1, NULL));
  gt_expect_einval("scaled_masked_softmax_fwd mask_batches=3 (b=2)",
                   kiln_scaled_masked_softmax_fwd(l, f32, o, i, m, B, H, SQ, SK, 3, 1, NULL));
  gt_expect_einval("scaled_masked_softmax_fwd mask_batches=0",
                   kiln_scaled_masked_softmax_fwd(l, f32, o, i, m, B, H, SQ, SK, 0, 1, NULL));
  gt_expect_einval("scaled_masked_softmax_fwd sk=0",
                   kiln_scaled_masked_softmax_fwd(l, f32, o, i, m, B, H, SQ, 0, 1, 1, NULL));
  gt_expect_empty("scaled_masked_softmax_fwd sq=0",
                  kiln_scaled_masked_softmax_fwd(l, f32, o, i, m, B, H, 0, SK, 1, 1, NULL));
  gt_expect_empty("scaled_masked_softmax_fwd heads=0",
                  kiln_scaled_masked_softmax_fwd(l, f32, o, i, m, B, 0, SQ, SK, 1, 1, NULL));
  gt_expect_empty("scaled_masked_softmax_fwd b=0",
                  kiln_scaled_masked_softmax_fwd(l, f32, o, i, m, 0, H, SQ, SK, 1, 1, NULL));
  gt_expect_einval("scaled_masked_softmax_fwd dtype=7",
                   kiln_scaled_masked_softmax_fwd(l, bad, o, i, m, B, H, SQ, SK, 1, 1, NULL));
  gt_expect_einval("scaled_masked_softmax_bwd dx=NULL",
                   kiln_scaled_masked_softmax_bwd(l, f32, NULL, i, i, B, H, SQ, SK, 1, NULL));
  gt_expect_einval("scaled_masked_softmax_bwd dy=NULL",
                   kiln_scaled_masked_softmax_bwd(l, f32, o, i, NULL, B, H, SQ, SK, 1, NULL));
  gt_expect_einval("scaled_masked_softmax_bwd sk=0",
                   kiln_scaled_masked_softmax_bwd(l, f32, o, i, i, B, H, SQ, 0, 1, NULL));
  gt_expect_einval("scaled_masked_softmax_bwd dtype=7",
                   kiln_scaled_masked_softmax_bwd(l, bad, o, i, i, B, H, SQ, SK, 1, NULL));
  gt_expect_einval(
      "scaled_upper_triang_masked_softmax_fwd x=NULL",
      kiln_scaled_upper_triang_masked_softmax_fwd(l, f32, o, NULL, B, SQ, SK, 1, NULL));
  gt_expect_empty("scaled_upper_triang_masked_softmax_fwd sq=0",
                  kiln_scaled_upper_triang_masked_softmax_fwd(l, f32, o, i, B, 0, SK, 1, NULL));
  gt_expect_einval("scaled_upper_triang_masked_softmax_fwd sk=0",
                   kiln_scaled_upper_triang_masked_softmax_fwd(l, f32, o, i, B, SQ, 0, 1, NULL));
  gt_expect_empty("scaled_upper_triang_masked_softmax_fwd attn_batches=0",
                  kiln_scaled_upper_triang_masked_softmax_fwd(l, f32, o, i, 0, SQ, SK, 1, NULL));
  gt_expect_einval("scaled_upper_triang_masked_softmax_fwd dtype=7",
                   kiln_scaled_upper_triang_masked_softmax_fwd(l, bad, o, i, B, SQ, SK, 1, NULL));
  gt_expect_einval(
      "scaled_upper_triang_masked_softmax_bwd dy=NULL",
      kiln_scaled_upper_triang_masked_softmax_bwd(l, f32, o, i, NULL, B, SQ, SK, 1, NULL));
  gt_expect_einval("scaled_upper_triang_masked_softmax_bwd sk=0",
                   kiln_scaled_upper_triang_masked_softmax_bwd(l, f32, o, i, i, B, SQ, 0, 1, NULL));
  gt_expect_einval(
      "scaled_upper_triang_masked_softmax_bwd dtype=7",
      kiln_scaled_upper_triang_masked_softmax_bwd(l, bad, o, i, i, B, SQ, SK, 1, NULL));
  gt_expect_untouched(&out);
out:
  dev_free(&out);
  dev_free(&in);
  dev_free(&mask);
}

/* ---- 2. the suite ---------------------------------------------------------------------- */

/* KILN_GPU_TEST_TRIM: per unit, the shapes most likely to break, each run
 * forward and backward in every dtype:
 *   - 33 columns, 3 rows (plain, in place): odd columns, the w2 variant's
 *     first width, and rows that leave every vector load misaligned;
 *   - 20000 columns (plain, 1 row; in place, 3 rows): the largest the suite
 *     takes, the general path past b32's 16384;
 *   - masked [2, 2, 9] with a per-batch mask (its last row fully masked) at
 *     1000 columns (w32, odd warps), and [1, 1, 1] with a broadcast mask at
 *     20000 (the largest);
 *   - causal sq > sk (37 x 33: odd, misaligned rows) and sq < sk at 20000. */
static const ref_shape kTrim[] = {
    {REF_PLAIN, 3, 1, 1, 33, 1, 0.37f, 1},     {REF_PLAIN, 1, 1, 1, 20000, 1, 1.7f, 0},
    {REF_PLAIN, 3, 1, 1, 20000, 1, 0.125f, 1}, {REF_MASKED, 2, 2, 9, 1000, 2, 0.37f, 0},
    {REF_MASKED, 1, 1, 1, 20000, 1, 1.7f, 0},  {REF_CAUSAL, 1, 1, 37, 33, 1, 0.125f, 0},
    {REF_CAUSAL, 2, 1, 3, 20000, 1, 0.37f, 0},
};

static void run_suite(kiln_loader *l) {
  ref_shape shapes[MAX_SHAPES];
  const size_t n = gt_trim() ? sizeof kTrim / sizeof *kTrim : make_shapes(shapes);
  if (gt_trim()) memcpy(shapes, kTrim, sizeof kTrim);
  for (size_t i = 0; i < n; i++)
    for (size_t d = 0; d < 3; d++) {
      ref_case c;
      void *y = NULL, *dx = NULL;
      if (ref_case_make(&c, &shapes[i], kDtypes[d], g_seed++) != 0 ||
          !(y = malloc(c.n * gt_dtype_size(c.dt))) || !(dx = malloc(c.n * gt_dtype_size(c.dt)))) {
        gt_fail("out of host memory");
      } else {
        run_case(l, "", &c, y, dx);
      }
      free(y);
      free(dx);
      ref_case_free(&c);
    }
}

/* ---- 3. exact CUBIN, compatible CUBIN, PTX ----------------------------------------------- */

static const ref_shape kSubset[] = {
    {REF_PLAIN, 3, 1, 1, 33, 1, 0.37f, 0},      {REF_PLAIN, 3, 1, 1, 1000, 1, 1.7f, 0},
    {REF_PLAIN, 2, 1, 1, 20000, 1, 0.125f, 0},  {REF_MASKED, 2, 3, 6, 1000, 1, 0.37f, 0},
    {REF_MASKED, 3, 1, 1, 4096, 3, 1.7f, 0},    {REF_CAUSAL, 2, 1, 3, 4096, 1, 0.125f, 0},
    {REF_CAUSAL, 1, 1, 37, 16384, 1, 0.37f, 0},
};
#define N_SUBSET (sizeof kSubset / sizeof kSubset[0])

typedef struct source_run {
  const char *label;
  char targets[16];
  kiln_load_source want;
  int ran;
  void *y[N_SUBSET][3], *dx[N_SUBSET][3];
} source_run;

/* The units the source comparison builds and loads: every unit on a GPU; on
 * the fake driver (quick) only scaled_softmax, whose plain shapes alone run
 * there. The fake runs every kernel from its source on the emulator, whatever
 * image was loaded, so there only the loader's choice of artifact is tested,
 * and compiling all eleven units for three more targets (about three minutes
 * of NVRTC on two cores) would buy nothing. */
static const char *source_units(void) {
  return gt_quick() || gt_trim() ? "scaled_softmax" : NULL;
}

/* Under trim, too, only scaled_softmax's shapes: the comparison tests the
 * loader's choice of artifact, and one unit's three builds fit run all's
 * share where eleven units' would not. */
static int source_case(const ref_shape *s) {
  return keep(s) && (!(gt_quick() || gt_trim()) || s->unit == REF_PLAIN);
}

/* Builds the source units for `targets` into a new cache at dir, with no
 * other layer; *isa gets the PTX ISA of the toolchain that built them. */
static int build_cache(const char *dir, const char *targets, int *isa, char *msg, size_t cap) {
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_build_options bo = KILN_BUILD_OPTIONS_INIT;
  kiln_build_summary *sum = NULL;
  kiln_cache *cache = NULL;
  kiln_target *t = NULL;
  size_t nt = 0;
  int ok = 0;
  co.dir = dir;
  co.ro_path = "";
  if (kiln_cache_open(&cache, &co) != KILN_OK ||
      kiln_targets_parse_list(&t, &nt, targets) != KILN_OK) {
    snprintf(msg, cap, "%s", kiln_last_error());
    goto out;
  }
  bo.targets = t;
  bo.n_targets = nt;
  bo.kernels_glob = source_units();
  if (kiln_build(&sum, cache, &bo) != KILN_OK) {
    snprintf(msg, cap, "kiln_build %s: %s", targets, kiln_last_error());
    goto out;
  }
  for (size_t i = 0; i < sum->n_items; i++)
    if (sum->items[i].outcome == KILN_BUILD_FAILED) {
      snprintf(msg, cap, "kiln_build %s %s: %.400s", sum->items[i].unit->name, targets,
               sum->items[i].error);
      goto out;
    }
  *isa = sum->n_items ? kiln_toolchain_ptx_isa(sum->items[0].record.toolchain) : 0;
  ok = 1;
out:
  kiln_build_summary_free(sum);
  free(t);
  kiln_cache_close(cache);
  return ok;
}

/* An offline loader on dir alone, warmed up; every unit must come from the
 * kind of artifact `want` names. */
static kiln_loader *open_offline(const char *dir, kiln_load_source want, char *msg, size_t cap) {
  kiln_loader_options o = KILN_LOADER_OPTIONS_INIT;
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_loader *l = NULL;
  co.dir = dir;
  co.ro_path = "";
  o.device = 0;
  o.cache = &co;
  o.offline = 1;
  o.kernels = source_units();
  if (kiln_loader_open(&l, &o) != KILN_OK || kiln_loader_warmup(l, NULL) != KILN_OK) {
    snprintf(msg, cap, "%s", kiln_last_error());
    kiln_loader_close(l);
    return NULL;
  }
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    kiln_unit_load ul;
    const char *name = kiln_unit_at(u)->name;
    if (source_units() && strcmp(name, source_units()) != 0) continue;
    if (kiln_loader_unit_load(&ul, l, name) != KILN_OK || ul.source != want) {
      snprintf(msg, cap, "%s loaded from %s %s, want %s", name, kiln_load_source_str(ul.source),
               ul.target, kiln_load_source_str(want));
      kiln_loader_close(l);
      return NULL;
    }
  }
  return l;
}

static void free_run(source_run *r) {
  for (size_t i = 0; i < N_SUBSET; i++)
    for (size_t d = 0; d < 3; d++) {
      free(r->y[i][d]);
      free(r->dx[i][d]);
    }
}

/* Builds r's cache under root, loads from it alone and runs the subset. */
static void run_source(source_run *r, const char *root, const kiln_device_info *info,
                       ref_case cases[N_SUBSET][3]) {
  char dir[4200], msg[512] = "", prefix[64];
  kiln_loader *l = NULL;
  int isa = 0;
  snprintf(dir, sizeof dir, "%s/%s", root, r->targets);
  if (!build_cache(dir, r->targets, &isa, msg, sizeof msg)) {
    gt_fail("source %s %s: %s", r->label, r->targets, msg);
    return;
  }
  if (r->want == KILN_LOAD_PTX && isa > info->ptx_isa) {
    printf("note: source %s %s skipped: NVRTC emits PTX ISA %d.%d, this driver JITs up to "
           "%d.%d\n",
           r->label, r->targets, isa / 10, isa % 10, info->ptx_isa / 10, info->ptx_isa % 10);
    return;
  }
  if (!(l = open_offline(dir, r->want, msg, sizeof msg))) {
    gt_fail("source %s %s: %s", r->label, r->targets, msg);
    return;
  }
  gt_pass("source %s %s: %s loaded as %s", r->label, r->targets,
          source_units() ? source_units() : "every unit", kiln_load_source_str(r->want));
  snprintf(prefix, sizeof prefix, "[%s] ", r->targets);
  for (size_t i = 0; i < N_SUBSET; i++)
    for (size_t d = 0; d < 3; d++) {
      const ref_case *c = &cases[i][d];
      if (!c->n) continue;
      r->y[i][d] = malloc(c->n * gt_dtype_size(c->dt));
      r->dx[i][d] = malloc(c->n * gt_dtype_size(c->dt));
      if (!r->y[i][d] || !r->dx[i][d]) {
        gt_fail("out of host memory");
        continue;
      }
      run_case(l, prefix, c, r->y[i][d], r->dx[i][d]);
    }
  r->ran = 1;
  kiln_loader_close(l);
}

/* (a) and (c) must agree bit for bit. */
static void compare_runs(const source_run *a, const source_run *b, ref_case cases[N_SUBSET][3]) {
  for (size_t i = 0; i < N_SUBSET; i++)
    for (size_t d = 0; d < 3; d++) {
      const ref_case *c = &cases[i][d];
      const size_t bytes = c->n * gt_dtype_size(c->dt);
      char shape[160];
      int same;
      if (!c->n || !a->y[i][d] || !b->y[i][d]) continue;
      same = memcmp(a->y[i][d], b->y[i][d], bytes) == 0 &&
             memcmp(a->dx[i][d], b->dx[i][d], bytes) == 0;
      ref_shape_str(&c->s, shape, sizeof shape);
      if (same)
        gt_pass("%s == %s %-4s %s", a->targets, b->targets, kiln_dtype_str(c->dt), shape);
      else
        gt_fail("%s == %s %-4s outputs differ", a->targets, b->targets, kiln_dtype_str(c->dt));
    }
}

static void check_sources(const char *root, const kiln_device_info *info) {
  source_run runs[3];
  ref_case cases[N_SUBSET][3];
  int ma, mi;
  if (kiln_nvrtc_version(&ma, &mi) != KILN_OK) {
    printf("note: sources (a) to (c) skipped: each is built into a cache of its own, and there is "
           "no NVRTC\n");
    return;
  }
  memset(runs, 0, sizeof runs);
  memset(cases, 0, sizeof cases);
  runs[0].label = "(a) exact CUBIN";
  snprintf(runs[0].targets, sizeof runs[0].targets, "sm_%d%d", info->cc_major, info->cc_minor);
  runs[0].want = KILN_LOAD_EXACT;
  runs[1].label = "(b) PTX";
  snprintf(runs[1].targets, sizeof runs[1].targets, "compute_%d", KILN_MIN_ARCH);
  runs[1].want = KILN_LOAD_PTX;
  runs[2].label = "(c) compatible CUBIN";
  snprintf(runs[2].targets, sizeof runs[2].targets, "sm_%d0", info->cc_major);
  runs[2].want = KILN_LOAD_COMPATIBLE;
  for (size_t i = 0; i < N_SUBSET; i++)
    for (size_t d = 0; d < 3 && source_case(&kSubset[i]); d++)
      if (ref_case_make(&cases[i][d], &kSubset[i], kDtypes[d], g_seed++) != 0) {
        gt_fail("out of host memory");
      }
  for (size_t k = 0; k < 3; k++) {
    if (k == 2 && (info->cc_minor == 0 || info->cc_major * 10 < KILN_MIN_ARCH)) {
      printf("note: source (c) compatible CUBIN skipped: sm_%d%d has no lower minor of its major "
             "(a compatible CUBIN needs a device such as sm_86 or sm_89)\n",
             info->cc_major, info->cc_minor);
      continue;
    }
    run_source(&runs[k], root, info, cases);
  }
  if (runs[0].ran && runs[2].ran) compare_runs(&runs[0], &runs[2], cases);
  for (size_t k = 0; k < 3; k++)
    free_run(&runs[k]);
  for (size_t i = 0; i < N_SUBSET; i++)
    for (size_t d = 0; d < 3; d++)
      ref_case_free(&cases[i][d]);
}

/* ---- main ------------------------------------------------------------------------------- */

static void print_sources(kiln_loader *l) {
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    kiln_unit_load ul;
    const char *name = kiln_unit_at(u)->name;
    if (kiln_loader_unit_load(&ul, l, name) == KILN_OK)
      printf("loaded %s: %s %s (%.1f ms)\n", name, kiln_load_source_str(ul.source), ul.target,
             ul.ms);
  }
}

/* What NVRTC builds needs a driver of its CUDA major or newer: say so up
 * front when this one is older, since every build-and-load below will fail. */
static void note_toolchain(const kiln_device_info *info) {
  int ma = 0, mi = 0;
  if (kiln_nvrtc_version(&ma, &mi) != KILN_OK) {
    printf("note: no NVRTC (%s): only what the caches already hold can load\n", kiln_last_error());
    return;
  }
  printf("NVRTC %d.%d\n", ma, mi);
  if (ma > info->driver_version / 1000)
    printf("note: NVRTC %d.%d is newer than the driver's CUDA %d.%d: the driver cannot load what "
           "it builds; use a toolkit of CUDA %d or older, or a newer driver\n",
           ma, mi, info->driver_version / 1000, info->driver_version % 1000 / 10,
           info->driver_version / 1000);
}

int main(void) {
  gt_run r;
  const int rc = gt_init(&r, "softmax");
  if (rc) return rc;
  if (!gt_open(&r)) goto out;
  gt_print_device(&r, GT_SHOW_DRIVER | GT_SHOW_PTX_ISA | GT_SHOW_CACHE);
  note_toolchain(&r.info);
  if (!gt_context(&r)) goto out;
  check_invalid_args(r.loader);
  run_suite(r.loader);
  print_sources(r.loader);
  check_sources(r.root, &r.info);
out:
  return gt_finish(&r);
}
