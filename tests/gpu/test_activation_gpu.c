/* gpu.activation — bias_gelu and bias_swiglu (docs/kernels/activation.md),
 * forward and backward, on a GPU in f32, f16 and bf16, against the float64
 * reference of activation_ref.c:
 *   1. invalid arguments return KILN_EINVAL before any launch;
 *   2. odd columns (1, 3, 7, 1001: the general path) and aligned ones (8, 64,
 *      4096, and 16384 when not quick: the 16-byte vector path), with and
 *      without bias, gelu in place (y == x, dx == dy), and aligned columns
 *      from misaligned pointers (the general path again); outputs are
 *      poisoned (0xFF: NaN) before each launch and checked for writes past
 *      their ends (guard bytes) and before their starts (the misaligned
 *      cases' leading element); inputs must come back unchanged;
 *   3. any grid is correct: every entry point launched directly with 1, 3
 *      and 5 blocks (each thread then walks many units, wrapping rows), on
 *      both paths.
 * Exits 77 (skipped) when there is no CUDA device, 1 on any failure.
 *
 * Environment: KILN_CACHE_DIR (else a temp cache, built on first use);
 * KILN_GPU_TEST_QUICK=1 keeps only small shapes (for a CPU test double of
 * libcuda named by KILN_CUDA_LIBRARY, which emulates the kernels);
 * KILN_GPU_TEST_TRIM=1 only the riskiest (kTrim) and one small grid. */
#include <limits.h> /* LLONG_MAX, INT_MAX */
#include <stdio.h>  /* printf, snprintf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcmp, memcpy, memset, strlen */

#include "kiln/loader.h"              /* kiln_loader_function */
#include "kiln/ops.h"                 /* the ops under test */
#include "loader/driver.h"            /* kiln_cuda: LaunchKernel, for the grid checks */
#include "tests/gpu/activation_ref.h" /* inputs and the float64 reference */
#include "tests/gpu/device.h"         /* device buffers with poisoned guards */
#include "tests/gpu/harness.h"        /* the run, counters, einval checks, elements */

#define QUICK_MAX_ELEMS 20000 /* KILN_GPU_TEST_QUICK: largest rows * width */
#define FULL_MAX_ELEMS (64LL << 20)

static uint64_t g_seed = 0x6b696c6e2d616374ULL;

static const kiln_dtype kDtypes[] = {KILN_F32, KILN_F16, KILN_BF16};
/* 0: launch through the API; else the entry point directly with this many
 * blocks of 256 threads (3. any grid). */
static unsigned g_grid;

/* ---- buffers with an optional leading element --------------------------------------- */

/* A device tensor of n elements at element offset `off` (0, or 1 for the
 * misaligned cases) inside its allocation; stage is host memory of the
 * allocation's size. */
typedef struct tbuf {
  dbuf d;
  size_t off_bytes, bytes;
  unsigned char *stage;
} tbuf;

static int tb_alloc(tbuf *t, size_t bytes, size_t off_bytes, char *msg, size_t cap) {
  memset(t, 0, sizeof *t);
  t->off_bytes = off_bytes;
  t->bytes = bytes;
  if (!(t->stage = malloc(bytes + off_bytes))) {
    snprintf(msg, cap, "out of host memory");
    return 0;
  }
  return dev_alloc(&t->d, bytes + off_bytes, msg, cap);
}

static void tb_free(tbuf *t) {
  dev_free(&t->d);
  free(t->stage);
}

static void *tb_ptr(const tbuf *t) {
  return (char *)dptr(t->d.p) + t->off_bytes;
}

/* The tensor from h; the leading bytes are 0xFF. */
static int tb_put(tbuf *t, const void *h, char *msg, size_t cap) {
  memset(t->stage, 0xFF, t->off_bytes);
  memcpy(t->stage + t->off_bytes, h, t->bytes);
  return dev_put(&t->d, t->stage, msg, cap);
}

/* The tensor into h (NULL: into stage only); fails when the guard after it
 * or the leading bytes before it are no longer 0xFF. */
static int tb_get(tbuf *t, void *h, const char *name, char *msg, size_t cap) {
  if (!dev_get(&t->d, t->stage, name, msg, cap)) return 0;
  for (size_t i = 0; i < t->off_bytes; i++)
    if (t->stage[i] != 0xFF) {
      snprintf(msg, cap, "%s: the byte %zu before its start was written", name, t->off_bytes - i);
      return 0;
    }
  if (h) memcpy(h, t->stage + t->off_bytes, t->bytes);
  return 1;
}

/* An input the kernel takes as const must come back byte for byte. */
static int unchanged(tbuf *t, const void *want, const char *name, char *msg, size_t cap) {
  if (!tb_get(t, NULL, name, msg, cap)) return 0;
  if (memcmp(t->stage + t->off_bytes, want, t->bytes) == 0) return 1;
  snprintf(msg, cap, "input %s was changed", name);
  return 0;
}

/* ---- launching a case --------------------------------------------------------------- */

typedef struct case_bufs {
  tbuf x, bias, y, dy, dx;
} case_bufs;

static void bufs_free(case_bufs *b) {
  tb_free(&b->x);
  tb_free(&b->bias);
  tb_free(&b->y);
  tb_free(&b->dy);
  tb_free(&b->dx);
}

static int bufs_alloc(case_bufs *b, const act_case *c, char *msg, size_t cap) {
  const size_t es = gt_dtype_size(c->dt), off = c->s.misalign ? es : 0;
  memset(b, 0, sizeof *b);
  return tb_alloc(&b->x, c->n_in * es, off, msg, cap) &&
         tb_alloc(&b->bias, (size_t)c->width * es, off, msg, cap) &&
         tb_alloc(&b->y, c->n_out * es, off, msg, cap) &&
         tb_alloc(&b->dy, c->n_out * es, off, msg, cap) &&
         tb_alloc(&b->dx, c->n_in * es, off, msg, cap) && tb_put(&b->bias, c->bias, msg, cap);
}

/* The entry point kiln_<unit>_<dir>_<dt>_g with g_grid blocks; args as the
 * launcher passes them. */
static kiln_status launch_direct(kiln_loader *l, const act_case *c, int bwd, void **args) {
  const kiln_cuda_api *cu = NULL;
  struct CUfunc_st *fn = NULL;
  char entry[96];
  kiln_status st;
  CUresult r;
  snprintf(entry, sizeof entry, "kiln_%s_%s_%s_g",
           c->s.unit == ACT_GELU ? "bias_gelu" : "bias_swiglu", bwd ? "bwd" : "fwd",
           kiln_dtype_str(c->dt));
  if ((st = kiln_cuda(&cu)) != KILN_OK || (st = kiln_loader_function(&fn, l, entry)) != KILN_OK)
    return st;
  r = cu->LaunchKernel(fn, g_grid, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
  if (r != CUDA_SUCCESS) {
    printf("note: cuLaunchKernel %s grid %u: error %d\n", entry, g_grid, (int)r);
    return KILN_EDRIVER;
  }
  return KILN_OK;
}

static kiln_status launch_fwd(kiln_loader *l, const act_case *c, void *y, const void *x,
                              const void *bias) {
  long long rows = c->s.rows;
  int cols = c->s.cols;
  void *args[] = {&y, &x, &bias, &rows, &cols};
  if (g_grid) return launch_direct(l, c, 0, args);
  if (c->s.unit == ACT_GELU) return kiln_bias_gelu_fwd(l, c->dt, y, x, bias, rows, cols, NULL);
  return kiln_bias_swiglu_fwd(l, c->dt, y, x, bias, rows, cols, NULL);
}

static kiln_status launch_bwd(kiln_loader *l, const act_case *c, void *dx, const void *dy,
                              const void *x, const void *bias) {
  long long rows = c->s.rows;
  int cols = c->s.cols;
  void *args[] = {&dx, &dy, &x, &bias, &rows, &cols};
  if (g_grid) return launch_direct(l, c, 1, args);
  if (c->s.unit == ACT_GELU) return kiln_bias_gelu_bwd(l, c->dt, dx, dy, x, bias, rows, cols, NULL);
  return kiln_bias_swiglu_bwd(l, c->dt, dx, dy, x, bias, rows, cols, NULL);
}

static int status_ok(kiln_status st, char *msg, size_t cap) {
  if (st == KILN_OK) return 1;
  snprintf(msg, cap, "%s: %s", kiln_status_str(st), kiln_last_error());
  return 0;
}

/* Forward: y (host, n_out elements) from the device. */
static int run_fwd(kiln_loader *l, const act_case *c, case_bufs *b, void *y, char *msg,
                   size_t cap) {
  const void *bias = c->s.bias ? tb_ptr(&b->bias) : NULL;
  if (c->s.inplace) { /* gelu: y == x */
    if (!tb_put(&b->y, c->x, msg, cap) ||
        !status_ok(launch_fwd(l, c, tb_ptr(&b->y), tb_ptr(&b->y), bias), msg, cap))
      return 0;
  } else {
    if (!dev_poison(&b->y.d, msg, cap) || !tb_put(&b->x, c->x, msg, cap) ||
        !status_ok(launch_fwd(l, c, tb_ptr(&b->y), tb_ptr(&b->x), bias), msg, cap))
      return 0;
  }
  return dev_sync("forward", msg, cap) && tb_get(&b->y, y, "y", msg, cap) &&
         (c->s.inplace || unchanged(&b->x, c->x, "x", msg, cap)) &&
         unchanged(&b->bias, c->bias, "bias", msg, cap);
}

/* Backward: dx (host, n_in elements) from the device. */
static int run_bwd(kiln_loader *l, const act_case *c, case_bufs *b, void *dx, char *msg,
                   size_t cap) {
  const void *bias = c->s.bias ? tb_ptr(&b->bias) : NULL;
  if (!tb_put(&b->x, c->x, msg, cap)) return 0;
  if (c->s.inplace) { /* gelu: dx == dy */
    if (!tb_put(&b->dx, c->dy, msg, cap) ||
        !status_ok(launch_bwd(l, c, tb_ptr(&b->dx), tb_ptr(&b->dx), tb_ptr(&b->x), bias), msg, cap))
      return 0;
  } else {
    if (!dev_poison(&b->dx.d, msg, cap) || !tb_put(&b->dy, c->dy, msg, cap) ||
        !status_ok(launch_bwd(l, c, tb_ptr(&b->dx), tb_ptr(&b->dy), tb_ptr(&b->x), bias), msg, cap))
      return 0;
  }
  return dev_sync("backward", msg, cap) && tb_get(&b->dx, dx, "dx", msg, cap) &&
         unchanged(&b->x, c->x, "x", msg, cap) &&
         (c->s.inplace || unchanged(&b->dy, c->dy, "dy", msg, cap)) &&
         unchanged(&b->bias, c->bias, "bias", msg, cap);
}

/* One line per result; counts it. */
static void report(const char *dir, const act_case *c, int ran, const char *msg, const void *got,
                   const double *ref, const double *tol, size_t n, int row_width) {
  char shape[200];
  size_t bad = 0, first = 0, len;
  double worst = 0;
  act_shape_str(&c->s, shape, sizeof shape);
  len = strlen(shape);
  if (g_grid) snprintf(shape + len, sizeof shape - len, " grid=%u", g_grid);
  if (ran) bad = act_check(c->dt, got, ref, tol, n, &first, &worst);
  if (ran && bad == 0)
    gt_pass("%s %-4s %s  (worst %.2f of tolerance)", dir, kiln_dtype_str(c->dt), shape, worst);
  else if (!ran)
    gt_fail("%s %-4s %s: %s", dir, kiln_dtype_str(c->dt), shape, msg);
  else
    gt_fail("%s %-4s %s: %zu wrong, first [row %zu, col %zu] = %.9g, expected %.9g +- %.3g", dir,
            kiln_dtype_str(c->dt), shape, bad, first / (size_t)row_width, first % (size_t)row_width,
            gt_get(c->dt, got, first), ref[first], tol[first]);
}

static void run_case(kiln_loader *l, const act_case *c) {
  const size_t es = gt_dtype_size(c->dt);
  char msg[512] = "";
  case_bufs b;
  void *y = malloc(c->n_out * es), *dx = malloc(c->n_in * es);
  int ok = y && dx && bufs_alloc(&b, c, msg, sizeof msg);
  if (!y || !dx) snprintf(msg, sizeof msg, "out of host memory");
  report("fwd", c, ok && run_fwd(l, c, &b, y, msg, sizeof msg), msg, y, c->y_ref, c->y_tol,
         c->n_out, c->s.cols);
  report("bwd", c, ok && run_bwd(l, c, &b, dx, msg, sizeof msg), msg, dx, c->dx_ref, c->dx_tol,
         c->n_in, c->width);
  bufs_free(&b);
  free(y);
  free(dx);
}

/* ---- 1. invalid arguments ------------------------------------------------------------ */

/* Every call is invalid in exactly one argument; none may launch, so the
 * poisoned output must come back untouched. */
static void check_invalid_args(kiln_loader *l) {
  enum { ROWS = 2, COLS = 8, N = ROWS * 2 * COLS };
  const kiln_dtype f32 = KILN_F32, bad = (kiln_dtype)7;
  const long long huge = LLONG_MAX / 4;
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
  /* bias_gelu_fwd */
  gt_expect_einval("bias_gelu_fwd loader=NULL",
                   kiln_bias_gelu_fwd(NULL, f32, o, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_gelu_fwd dtype=7", kiln_bias_gelu_fwd(l, bad, o, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_gelu_fwd y=NULL",
                   kiln_bias_gelu_fwd(l, f32, NULL, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_gelu_fwd x=NULL",
                   kiln_bias_gelu_fwd(l, f32, o, NULL, i, ROWS, COLS, NULL));
  gt_expect_empty("bias_gelu_fwd rows=0", kiln_bias_gelu_fwd(l, f32, o, i, i, 0, COLS, NULL));
  gt_expect_einval("bias_gelu_fwd rows=-1", kiln_bias_gelu_fwd(l, f32, o, i, i, -1, COLS, NULL));
  gt_expect_einval("bias_gelu_fwd cols=0", kiln_bias_gelu_fwd(l, f32, o, i, i, ROWS, 0, NULL));
  gt_expect_einval("bias_gelu_fwd cols=-1", kiln_bias_gelu_fwd(l, f32, o, i, i, ROWS, -1, NULL));
  gt_expect_einval("bias_gelu_fwd rows*cols*4 overflows",
                   kiln_bias_gelu_fwd(l, f32, o, i, i, huge, COLS, NULL));
  /* bias_gelu_bwd */
  gt_expect_einval("bias_gelu_bwd loader=NULL",
                   kiln_bias_gelu_bwd(NULL, f32, o, i, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_gelu_bwd dtype=7",
                   kiln_bias_gelu_bwd(l, bad, o, i, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_gelu_bwd dx=NULL",
                   kiln_bias_gelu_bwd(l, f32, NULL, i, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_gelu_bwd dy=NULL",
                   kiln_bias_gelu_bwd(l, f32, o, NULL, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_gelu_bwd x=NULL",
                   kiln_bias_gelu_bwd(l, f32, o, i, NULL, i, ROWS, COLS, NULL));
  gt_expect_empty("bias_gelu_bwd rows=0", kiln_bias_gelu_bwd(l, f32, o, i, i, i, 0, COLS, NULL));
  gt_expect_einval("bias_gelu_bwd cols=0", kiln_bias_gelu_bwd(l, f32, o, i, i, i, ROWS, 0, NULL));
  gt_expect_einval("bias_gelu_bwd rows*cols*2 overflows",
                   kiln_bias_gelu_bwd(l, KILN_BF16, o, i, i, i, huge, COLS, NULL));
  /* bias_swiglu_fwd */
  gt_expect_einval("bias_swiglu_fwd loader=NULL",
                   kiln_bias_swiglu_fwd(NULL, f32, o, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_swiglu_fwd dtype=7",
                   kiln_bias_swiglu_fwd(l, bad, o, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_swiglu_fwd y=NULL",
                   kiln_bias_swiglu_fwd(l, f32, NULL, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_swiglu_fwd x=NULL",
                   kiln_bias_swiglu_fwd(l, f32, o, NULL, i, ROWS, COLS, NULL));
  gt_expect_empty("bias_swiglu_fwd rows=0", kiln_bias_swiglu_fwd(l, f32, o, i, i, 0, COLS, NULL));
  gt_expect_einval("bias_swiglu_fwd cols=0", kiln_bias_swiglu_fwd(l, f32, o, i, i, ROWS, 0, NULL));
  gt_expect_einval("bias_swiglu_fwd cols=-3",
                   kiln_bias_swiglu_fwd(l, f32, o, i, i, ROWS, -3, NULL));
  gt_expect_einval("bias_swiglu_fwd rows*2*cols*4 overflows",
                   kiln_bias_swiglu_fwd(l, f32, o, i, i, LLONG_MAX / 64, INT_MAX, NULL));
  /* bias_swiglu_bwd */
  gt_expect_einval("bias_swiglu_bwd loader=NULL",
                   kiln_bias_swiglu_bwd(NULL, f32, o, i, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_swiglu_bwd dtype=7",
                   kiln_bias_swiglu_bwd(l, bad, o, i, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_swiglu_bwd dx=NULL",
                   kiln_bias_swiglu_bwd(l, f32, NULL, i, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_swiglu_bwd dy=NULL",
                   kiln_bias_swiglu_bwd(l, f32, o, NULL, i, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_swiglu_bwd x=NULL",
                   kiln_bias_swiglu_bwd(l, f32, o, i, NULL, i, ROWS, COLS, NULL));
  gt_expect_einval("bias_swiglu_bwd rows=-5",
                   kiln_bias_swiglu_bwd(l, f32, o, i, i, i, -5, COLS, NULL));
  gt_expect_einval("bias_swiglu_bwd cols=0",
                   kiln_bias_swiglu_bwd(l, f32, o, i, i, i, ROWS, 0, NULL));
  gt_expect_einval("bias_swiglu_bwd rows*2*cols*2 overflows",
                   kiln_bias_swiglu_bwd(l, KILN_F16, o, i, i, i, huge, COLS, NULL));
  gt_expect_untouched(&out); /* nothing ran: the output is still all 0xFF */
out:
  dev_free(&out);
  dev_free(&in);
}

/* ---- 2. the suite ---------------------------------------------------------------------- */

/* Odd columns take the general path, multiples of 8 the vector path (every
 * dtype: 8 is a multiple of KILN_VEC, 4 or 8); 16384 only when not quick. */
static const int kCols[] = {1, 3, 7, 1001, 8, 64, 4096, 16384};
#define N_COLS (sizeof kCols / sizeof kCols[0])
#define MAX_SHAPES 160

static int keep(const act_shape *s) {
  const long long width = s->unit == ACT_SWIGLU ? 2LL * s->cols : s->cols;
  return s->rows * width <= (gt_quick() ? QUICK_MAX_ELEMS : FULL_MAX_ELEMS);
}

static size_t add(act_shape *out, size_t n, act_unit u, long long rows, int cols, int bias,
                  int inplace, int misalign) {
  act_shape s = {u, rows, cols, bias, inplace, misalign};
  if (n < MAX_SHAPES && keep(&s)) out[n++] = s;
  return n;
}

/* Every column count with rows 1, 3 and 37 (the largest that fits the
 * quick budget otherwise), bias alternating; gelu in place and misaligned
 * pointers on a few; when not quick, large shapes too. */
static size_t make_shapes(act_shape *out) {
  static const long long rows[] = {1, 3, 37};
  size_t n = 0;
  for (int u = 0; u < 2; u++)
    for (size_t k = 0; k < N_COLS; k++) {
      int kept = 0;
      for (size_t r = 0; r < 3; r++) {
        const size_t before = n;
        n = add(out, n, (act_unit)u, rows[r], kCols[k], (int)((k + r) % 2 == 0), 0, 0);
        kept += n > before;
      }
      if (!kept && kCols[k] <= QUICK_MAX_ELEMS / 2) /* at least one row of every width */
        n = add(out, n, (act_unit)u, 1, kCols[k], 1, 0, 0);
    }
  n = add(out, n, ACT_GELU, 3, 1001, 1, 1, 0);
  n = add(out, n, ACT_GELU, 5, 64, 1, 1, 0);
  n = add(out, n, ACT_GELU, 2, 7, 0, 1, 0);
  n = add(out, n, ACT_GELU, 3, 64, 1, 0, 1);
  n = add(out, n, ACT_GELU, 2, 64, 0, 1, 1);
  n = add(out, n, ACT_SWIGLU, 3, 64, 1, 0, 1);
  n = add(out, n, ACT_SWIGLU, 2, 8, 0, 0, 1);
  if (!gt_quick()) {
    n = add(out, n, ACT_GELU, 1024, 16384, 1, 0, 0);
    n = add(out, n, ACT_GELU, 1000, 4099, 1, 1, 0);
    n = add(out, n, ACT_SWIGLU, 512, 16384, 1, 0, 0);
    n = add(out, n, ACT_SWIGLU, 777, 5001, 0, 0, 0);
    n = add(out, n, ACT_SWIGLU, 300, 4096, 1, 0, 1);
  }
  return n;
}

/* KILN_GPU_TEST_TRIM: for gelu and swiglu, every dtype, forward and
 * backward: 1001 columns on 3 rows with bias (odd: the general path, rows
 * off the vector width; gelu in place too), 64 misaligned (a vector shape
 * forced onto the general path) and 16384 (the largest the suite takes, one
 * row, with bias). */
static const act_shape kTrim[] = {
    {ACT_GELU, 3, 1001, 1, 1, 0},   {ACT_GELU, 3, 64, 1, 0, 1},   {ACT_GELU, 1, 16384, 1, 0, 0},
    {ACT_SWIGLU, 3, 1001, 1, 0, 0}, {ACT_SWIGLU, 3, 64, 1, 0, 1}, {ACT_SWIGLU, 1, 16384, 1, 0, 0},
};

static void run_suite(kiln_loader *l) {
  act_shape shapes[MAX_SHAPES];
  const size_t n = gt_trim() ? sizeof kTrim / sizeof *kTrim : make_shapes(shapes);
  if (gt_trim()) memcpy(shapes, kTrim, sizeof kTrim);
  for (size_t i = 0; i < n; i++)
    for (size_t d = 0; d < 3; d++) {
      act_case c;
      if (act_case_make(&c, &shapes[i], kDtypes[d], g_seed++) != 0) {
        gt_fail("out of host memory");
        continue;
      }
      run_case(l, &c);
      act_case_free(&c);
    }
}

/* ---- 3. any grid ----------------------------------------------------------------------- */

/* Each thread of a small grid walks many units: rows 37 x cols 64 (vector
 * path) and x 7 (general path), with and without bias, gelu in place. */
static void run_grids(kiln_loader *l) {
  static const unsigned grids[] = {1, 3, 5};
  static const act_shape shapes[] = {
      {ACT_GELU, 37, 64, 1, 0, 0},   {ACT_GELU, 37, 7, 0, 0, 0},   {ACT_GELU, 37, 64, 0, 1, 0},
      {ACT_SWIGLU, 37, 64, 1, 0, 0}, {ACT_SWIGLU, 37, 7, 1, 0, 0}, {ACT_SWIGLU, 37, 64, 0, 0, 1},
  };
  /* trim: the grid of 3, whose threads walk units with a remainder */
  for (size_t g = gt_trim() ? 1 : 0; g < (gt_trim() ? 2 : sizeof grids / sizeof *grids); g++)
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
      for (size_t d = 0; d < 3; d++) {
        act_case c;
        if (act_case_make(&c, &shapes[i], kDtypes[d], g_seed++) != 0) {
          gt_fail("out of host memory");
          continue;
        }
        g_grid = grids[g];
        run_case(l, &c);
        g_grid = 0;
        act_case_free(&c);
      }
}

/* ---- main ------------------------------------------------------------------------------- */

int main(void) {
  gt_run r;
  if (gt_start(&r, "activation", GT_SHOW_CACHE)) {
    check_invalid_args(r.loader);
    run_suite(r.loader);
    run_grids(r.loader);
  }
  return gt_finish(&r);
}
