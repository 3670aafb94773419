/* gpu.rope — kiln_rope_fwd / kiln_rope_bwd (docs/kernels/rope.md) on a GPU,
 * in f32, f16 and bf16, both layouts and both styles, against the float64
 * reference of rope_ref.c:
 *   1. invalid arguments return KILN_EINVAL before any launch;
 *   2. forward and backward of every shape: full and partial rotary (d = 128,
 *      rot = 64; d = 6, rot = 4; d = 2), odd s, b, h, the vector and the
 *      scalar path (rot/2 or d not a multiple of the vector, misaligned
 *      pointers), rot_dim past the kernel's sin/cos cache, large angles
 *      (positions near 100000 and 1000000 at frequency 1), in place; outputs are poisoned
 *      (0xFF: NaN) before each launch and checked for writes past their end,
 *      inputs must come back unchanged;
 *   3. forward then backward gives x back (within the roundings).
 * Exits 77 (skipped) when there is no CUDA device, 1 on any failure.
 *
 * Environment: KILN_CACHE_DIR (else a temp cache); KILN_GPU_TEST_QUICK=1
 * keeps only small shapes (for the CPU test double of libcuda);
 * KILN_GPU_TEST_TRIM=1 only the riskiest (trim_case). */
#include <stdio.h>  /* printf, snprintf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcmp */

#include "kiln/loader.h"        /* kiln_loader */
#include "kiln/ops.h"           /* the ops under test */
#include "tests/gpu/device.h"   /* device buffers with poisoned guards */
#include "tests/gpu/harness.h"  /* the run, counters, einval checks, elements */
#include "tests/gpu/rope_ref.h" /* inputs and the float64 reference */

#define QUICK_MAX_ELEMS 13000 /* KILN_GPU_TEST_QUICK: largest s*b*h*d */

static uint64_t g_seed = 0x726f70652d677075ULL;

static const kiln_dtype kDtypes[] = {KILN_F32, KILN_F16, KILN_BF16};
static const char *const kLayout[] = {"sbhd", "bshd"};
static const char *const kStyle[] = {"rh", "il"};

typedef struct tcase {
  rope_shape sh;
  int inplace;  /* y == x, dx == dy */
  int misalign; /* pointers one element past a 16-byte boundary: the scalar path */
} tcase;

/* s, b, h, d, rot, pos0, base; inplace, misalign */
static const tcase kCases[] = {
    {{7, 3, 5, 64, 64, 0, 10000}, 0, 0},      /* full rotary, vector path */
    {{5, 3, 3, 128, 64, 0, 10000}, 0, 0},     /* partial rotary, d = 128, rot = 64 */
    {{9, 3, 5, 6, 4, 0, 10000}, 0, 0},        /* d = 6, rot = 4: scalar path */
    {{11, 1, 3, 2, 2, 0, 10000}, 0, 0},       /* d = 2 */
    {{5, 3, 7, 16, 12, 3, 500}, 0, 0},        /* rot/2 = 6: vector for il f32 only */
    {{11, 1, 3, 32, 32, 99990, 1}, 0, 0},     /* angles near 1e5 rad (freq 1) */
    {{5, 1, 2, 16, 16, 1000000, 1}, 0, 0},    /* 1e6 rad: the fp64 range reduction */
    {{3, 2, 1, 2100, 2100, 0, 10000}, 0, 0},  /* rot/2 = 1050: pairs past the cache */
    {{7, 3, 5, 64, 64, 0, 10000}, 1, 0},      /* in place, vector */
    {{9, 3, 5, 6, 4, 0, 10000}, 1, 0},        /* in place, scalar, copied tail kept */
    {{5, 3, 3, 128, 64, 0, 10000}, 0, 1},     /* misaligned: scalar path on a vector shape */
    {{512, 4, 16, 128, 128, 0, 10000}, 0, 0}, /* large */
    {{300, 3, 7, 96, 64, 1000, 10000}, 0, 0}, /* large, partial */
    {{129, 5, 9, 80, 80, 99000, 1}, 0, 0},    /* large angles */
    {{1, 700, 8, 64, 64, 5, 10000}, 0, 0},    /* s = 1: chunks of b */
};
#define N_CASES (sizeof kCases / sizeof kCases[0])

static size_t elems(const rope_shape *sh) {
  return (size_t)sh->s * sh->b * sh->h * sh->d;
}

static kiln_status op(kiln_loader *l, int bwd, kiln_dtype dt, kiln_rope_layout lay,
                      kiln_rope_style st, void *out, const void *in, const float *ang,
                      const rope_shape *sh) {
  return bwd ? kiln_rope_bwd(l, dt, lay, st, out, in, ang, sh->s, sh->b, sh->h, sh->d, sh->rot,
                             NULL)
             : kiln_rope_fwd(l, dt, lay, st, out, in, ang, sh->s, sh->b, sh->h, sh->d, sh->rot,
                             NULL);
}

/* A view of b one element in (misaligned); the guard still lies inside b's. */
static dbuf view(const dbuf *b, size_t off, size_t bytes) {
  dbuf v = {b->p + off, bytes};
  return v;
}

static void report(const char *what, const char *shape, kiln_dtype dt, const char *msg,
                   const void *got, const void *x, const double *ref, const double *tol, size_t n) {
  size_t first = 0, bad;
  double worst = 0;
  if (msg[0]) {
    gt_fail("%-9s %-4s %s: %s", what, kiln_dtype_str(dt), shape, msg);
    return;
  }
  bad = rope_ref_check(dt, got, x, ref, tol, n, &first, &worst);
  if (!bad) {
    gt_pass("%-9s %-4s %s  (worst %.2f of tolerance)", what, kiln_dtype_str(dt), shape, worst);
    return;
  }
  if (tol[first] < 0)
    gt_fail("%-9s %-4s %s: %zu wrong, first [%zu] = %.9g, must be the input %.9g", what,
            kiln_dtype_str(dt), shape, bad, first, gt_get(dt, got, first), gt_get(dt, x, first));
  else
    gt_fail("%-9s %-4s %s: %zu wrong, first [%zu] = %.9g, expected %.9g +- %.3g", what,
            kiln_dtype_str(dt), shape, bad, first, gt_get(dt, got, first), ref[first], tol[first]);
}

/* Launch out = op(in): in is put first (into out when in place), out
 * poisoned, then read back; in must come back unchanged. */
static int launch(kiln_loader *l, int bwd, kiln_dtype dt, kiln_rope_layout lay, kiln_rope_style st,
                  const tcase *c, dbuf *out, dbuf *in, const dbuf *ang, const void *in_host,
                  void *got, void *scratch, char *msg, size_t cap) {
  kiln_status s;
  if (!dev_poison(out, msg, cap)) return 0;
  if (c->inplace) {
    if (!dev_put(out, in_host, msg, cap)) return 0;
    s = op(l, bwd, dt, lay, st, dptr(out->p), dptr(out->p), dptr(ang->p), &c->sh);
  } else {
    if (!dev_put(in, in_host, msg, cap)) return 0;
    s = op(l, bwd, dt, lay, st, dptr(out->p), dptr(in->p), dptr(ang->p), &c->sh);
  }
  if (s != KILN_OK) {
    snprintf(msg, cap, "%s: %s", kiln_status_str(s), kiln_last_error());
    return 0;
  }
  if (!dev_sync(bwd ? "backward" : "forward", msg, cap) ||
      !dev_get(out, got, bwd ? "dx" : "y", msg, cap))
    return 0;
  if (!c->inplace) {
    if (!dev_get(in, scratch, bwd ? "dy" : "x", msg, cap)) return 0;
    if (memcmp(scratch, in_host, in->bytes) != 0) {
      snprintf(msg, cap, "input %s was changed", bwd ? "dy" : "x");
      return 0;
    }
  }
  return 1;
}

/* fwd, bwd and fwd-then-bwd of one case in one dtype, layout and style. */
static void run_one(kiln_loader *l, const tcase *c, kiln_dtype dt, kiln_rope_layout lay,
                    kiln_rope_style st) {
  const rope_shape *sh = &c->sh;
  const size_t n = elems(sh), es = gt_dtype_size(dt), bytes = n * es;
  const size_t off = c->misalign ? es : 0;
  const size_t na = (size_t)sh->s * (sh->rot / 2);
  char shape[200], msg[512] = "";
  dbuf a = {0, 0}, bb = {0, 0}, ang = {0, 0}, va, vb;
  void *x = malloc(bytes), *dy = malloc(bytes), *y = malloc(bytes), *dx = malloc(bytes);
  void *scratch = malloc(bytes);
  float *angles = malloc(na * sizeof *angles);
  double *ref = malloc(n * sizeof *ref), *tol = malloc(n * sizeof *tol);
  snprintf(shape, sizeof shape, "%s %s s=%d b=%d h=%d d=%d rot=%d pos0=%g%s%s", kLayout[lay],
           kStyle[st], sh->s, sh->b, sh->h, sh->d, sh->rot, sh->pos0, c->inplace ? " in-place" : "",
           c->misalign ? " misaligned" : "");
  if (!x || !dy || !y || !dx || !scratch || !angles || !ref || !tol) {
    gt_fail("%s: out of host memory", shape);
    goto out;
  }
  rope_ref_fill(dt, x, n, g_seed++);
  rope_ref_fill(dt, dy, n, g_seed++);
  rope_ref_angles(sh, angles);
  if (!dev_alloc(&a, bytes + off, msg, sizeof msg) ||
      !dev_alloc(&bb, bytes + off, msg, sizeof msg) ||
      !dev_alloc(&ang, na * sizeof *angles, msg, sizeof msg) ||
      !dev_put(&ang, angles, msg, sizeof msg)) {
    gt_fail("%s: %s", shape, msg);
    goto out;
  }
  va = view(&a, off, bytes);
  vb = view(&bb, off, bytes);
  /* forward: y (a) = rope(x (b)) */
  launch(l, 0, dt, lay, st, c, &va, &vb, &ang, x, y, scratch, msg, sizeof msg);
  rope_ref(dt, lay, st, 0, 0, sh, x, angles, ref, tol);
  report("fwd", shape, dt, msg, y, x, ref, tol, n);
  /* backward: dx (a) = rope^-1(dy (b)) */
  msg[0] = '\0';
  launch(l, 1, dt, lay, st, c, &va, &vb, &ang, dy, dx, scratch, msg, sizeof msg);
  rope_ref(dt, lay, st, 1, 0, sh, dy, angles, ref, tol);
  report("bwd", shape, dt, msg, dx, dy, ref, tol, n);
  /* round trip: backward of the forward's y gives x */
  msg[0] = '\0';
  launch(l, 1, dt, lay, st, c, &va, &vb, &ang, y, dx, scratch, msg, sizeof msg);
  rope_ref(dt, lay, st, 1, 1, sh, x, angles, ref, tol);
  report("fwd+bwd=x", shape, dt, msg, dx, x, ref, tol, n);
out:
  dev_free(&a);
  dev_free(&bb);
  dev_free(&ang);
  free(x);
  free(dy);
  free(y);
  free(dx);
  free(scratch);
  free(angles);
  free(ref);
  free(tol);
}

/* KILN_GPU_TEST_TRIM keeps these kCases (each in both layouts, both styles,
 * every dtype, forward and backward): d = 6, rot = 4 (odd pairs per head, the
 * scalar path), the misaligned pointers on a vector shape, and d = rot = 2100
 * (the largest head: pairs past the cached angles). */
static int trim_case(const tcase *c) {
  return c->misalign || (c->sh.d == 6 && !c->inplace) || c->sh.d == 2100;
}

static void run_suite(kiln_loader *l) {
  for (size_t i = 0; i < N_CASES; i++) {
    if (gt_quick() && elems(&kCases[i].sh) > QUICK_MAX_ELEMS) continue;
    if (gt_trim() && !trim_case(&kCases[i])) continue;
    for (int lay = 0; lay < 2; lay++)
      for (int st = 0; st < 2; st++)
        for (size_t d = 0; d < 3; d++)
          run_one(l, &kCases[i], kDtypes[d], (kiln_rope_layout)lay, (kiln_rope_style)st);
  }
}

/* ---- invalid arguments ---------------------------------------------------------- */

/* Every call is invalid in exactly one argument; none may launch, so the
 * poisoned output must come back untouched. */
static void check_invalid_args(kiln_loader *l) {
  enum { S = 2, B = 1, H = 1, D = 8, ROT = 8, N = S * B * H * D };
  const kiln_dtype f32 = KILN_F32, bad = (kiln_dtype)7;
  const kiln_rope_layout sb = KILN_ROPE_SBHD, bad_l = (kiln_rope_layout)2;
  const kiln_rope_style rh = KILN_ROPE_ROTATE_HALF, bad_s = (kiln_rope_style)-1;
  const size_t bytes = N * 4; /* f32 */
  char msg[256] = "";
  dbuf out = {0, 0}, in = {0, 0}, ang = {0, 0};
  void *o, *i;
  const float *a;
  if (!dev_alloc(&out, bytes, msg, sizeof msg) || !dev_alloc(&in, bytes, msg, sizeof msg) ||
      !dev_alloc(&ang, S * ROT / 2 * 4, msg, sizeof msg)) {
    gt_fail("einval: %s", msg);
    goto out;
  }
  o = dptr(out.p);
  i = dptr(in.p);
  a = dptr(ang.p);
  gt_expect_einval("rope_fwd loader=NULL",
                   kiln_rope_fwd(NULL, f32, sb, rh, o, i, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_fwd dtype=7",
                   kiln_rope_fwd(l, bad, sb, rh, o, i, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_fwd layout=2",
                   kiln_rope_fwd(l, f32, bad_l, rh, o, i, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_fwd style=-1",
                   kiln_rope_fwd(l, f32, sb, bad_s, o, i, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_fwd y=NULL",
                   kiln_rope_fwd(l, f32, sb, rh, NULL, i, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_fwd x=NULL",
                   kiln_rope_fwd(l, f32, sb, rh, o, NULL, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_fwd angles=NULL",
                   kiln_rope_fwd(l, f32, sb, rh, o, i, NULL, S, B, H, D, ROT, NULL));
  gt_expect_empty("rope_fwd s=0", kiln_rope_fwd(l, f32, sb, rh, o, i, a, 0, B, H, D, ROT, NULL));
  gt_expect_empty("rope_fwd b=0", kiln_rope_fwd(l, f32, sb, rh, o, i, a, S, 0, H, D, ROT, NULL));
  gt_expect_einval("rope_fwd h=-1", kiln_rope_fwd(l, f32, sb, rh, o, i, a, S, B, -1, D, ROT, NULL));
  gt_expect_einval("rope_fwd d=0", kiln_rope_fwd(l, f32, sb, rh, o, i, a, S, B, H, 0, ROT, NULL));
  gt_expect_einval("rope_fwd rot_dim=7 (odd)",
                   kiln_rope_fwd(l, f32, sb, rh, o, i, a, S, B, H, D, 7, NULL));
  gt_expect_einval("rope_fwd rot_dim=10 > d=8",
                   kiln_rope_fwd(l, f32, sb, rh, o, i, a, S, B, H, D, 10, NULL));
  gt_expect_einval("rope_fwd rot_dim=0",
                   kiln_rope_fwd(l, f32, sb, rh, o, i, a, S, B, H, D, 0, NULL));
  gt_expect_einval(
      "rope_fwd s*b*h*d overflows",
      kiln_rope_fwd(l, f32, sb, rh, o, i, a, 0x7fffffff, 0x7fffffff, 0x7fffffff, D, ROT, NULL));
  gt_expect_einval("rope_bwd loader=NULL",
                   kiln_rope_bwd(NULL, f32, sb, rh, o, i, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_bwd dtype=7",
                   kiln_rope_bwd(l, bad, sb, rh, o, i, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_bwd layout=2",
                   kiln_rope_bwd(l, f32, bad_l, rh, o, i, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_bwd style=-1",
                   kiln_rope_bwd(l, f32, sb, bad_s, o, i, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_bwd dx=NULL",
                   kiln_rope_bwd(l, f32, sb, rh, NULL, i, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_bwd dy=NULL",
                   kiln_rope_bwd(l, f32, sb, rh, o, NULL, a, S, B, H, D, ROT, NULL));
  gt_expect_einval("rope_bwd angles=NULL",
                   kiln_rope_bwd(l, f32, sb, rh, o, i, NULL, S, B, H, D, ROT, NULL));
  gt_expect_empty("rope_bwd s=0", kiln_rope_bwd(l, f32, sb, rh, o, i, a, 0, B, H, D, ROT, NULL));
  gt_expect_einval("rope_bwd rot_dim=3 (odd)",
                   kiln_rope_bwd(l, f32, sb, rh, o, i, a, S, B, H, D, 3, NULL));
  gt_expect_einval("rope_bwd rot_dim=10 > d=8",
                   kiln_rope_bwd(l, f32, sb, rh, o, i, a, S, B, H, D, 10, NULL));
  gt_expect_untouched(&out);
out:
  dev_free(&out);
  dev_free(&in);
  dev_free(&ang);
}

/* ---- main ------------------------------------------------------------------------ */

int main(void) {
  gt_run r;
  if (gt_start(&r, "rope", GT_SHOW_DRIVER | GT_SHOW_CACHE)) {
    check_invalid_args(r.loader);
    run_suite(r.loader);
  }
  return gt_finish(&r);
}
