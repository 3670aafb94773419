/* softmax_ref.c — inputs and the float64 reference for gpu.softmax. */
#include "tests/gpu/softmax_ref.h"

#include <math.h>   /* exp, fabs, INFINITY, NAN */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, free */
#include <string.h> /* memset */

#include "tests/gpu/harness.h" /* elements of a dtype, xorshift64* */

/* Tolerances, as a fraction of the reference (see ref_case_make). */
#define REF_F32_REL 1e-5     /* fp32 arithmetic, ex2.approx, sums of up to ~50 terms deep */
#define REF_F16_REL 0x1p-10  /* twice fp16's half-ulp (2^-11) */
#define REF_BF16_REL 0x1p-7  /* twice bf16's half-ulp (2^-8) */
#define REF_F16_ABS 0x1p-24  /* fp16 subnormal spacing */
#define REF_TINY_ABS 1e-30   /* f32/bf16: nothing but the relative term */
#define REF_BWD_SUM_REL 1e-5 /* fp32 error of dy - sum(dy*y), relative to its magnitude */
#define REF_MASK_PERCENT 30  /* masked unit: share of masked positions */

long long ref_rows(const ref_shape *s) {
  return (long long)s->b * s->heads * s->sq;
}

/* Uniform in [lo, hi). */
static float rng_uniform(uint64_t *s, float lo, float hi) {
  return lo + (hi - lo) * gt_unit24(gt_rng_next(s));
}

/* The mask row of x's row r (docs/kernels.md, "Mask"). */
static long long mask_row(const ref_shape *s, long long r) {
  const long long batch = r / ((long long)s->heads * s->sq), i = r % s->sq;
  return (s->mask_batches == 1 ? 0 : batch) * s->sq + i;
}

/* Columns [0, limit) of row r may take part (the causal limit). */
static int row_limit(const ref_shape *s, long long r) {
  long long i;
  if (s->unit != REF_CAUSAL) return s->cols;
  i = r % s->sq;
  return i + 1 < s->cols ? (int)(i + 1) : s->cols;
}

static int masked_at(const ref_case *c, long long r, int j) {
  return c->s.unit == REF_MASKED && c->mask[mask_row(&c->s, r) * c->s.cols + j] != 0;
}

/* Random mask; when there are at least two mask rows the last is fully
 * masked (its rows must come out all zeros, never NaN). */
static void make_mask(ref_case *c, uint64_t *rng) {
  const size_t mrows = (size_t)c->s.mask_batches * c->s.sq, cols = (size_t)c->s.cols;
  for (size_t i = 0; i < c->mask_bytes; i++) {
    const uint64_t v = gt_rng_next(rng);
    /* any nonzero byte masks: use 1..255, not just 1 */
    c->mask[i] = (v % 100) < REF_MASK_PERCENT ? (uint8_t)(1 + (v >> 32) % 255) : 0;
  }
  if (mrows >= 2) memset(c->mask + (mrows - 1) * cols, 1, cols);
}

/* x: uniform in [-2, 2) (|scale*x*log2 e| stays below 5, so the fp32
 * argument error stays well inside REF_F32_REL). Values the kernel must not
 * use are poisoned: NaN or +inf under the mask, NaN in the causal upper
 * triangle. One -inf in plain rows (scale > 0 there: a non-participating
 * position, 0). */
static void make_x(ref_case *c, uint64_t *rng) {
  const int cols = c->s.cols;
  for (long long r = 0; r < c->rows; r++) {
    const int lim = row_limit(&c->s, r);
    for (int j = 0; j < cols; j++) {
      const size_t i = (size_t)r * cols + j;
      float v = rng_uniform(rng, -2.f, 2.f);
      if (j >= lim)
        v = NAN;
      else if (masked_at(c, r, j))
        v = (j & 1) ? NAN : INFINITY;
      gt_set(c->dt, c->x, i, v);
    }
  }
  if (c->s.unit == REF_PLAIN && cols >= 2 && c->s.scale > 0)
    gt_set(c->dt, c->x, (size_t)cols / 2, -INFINITY);
}

static double rel_tol(kiln_dtype dt) {
  return dt == KILN_F32 ? REF_F32_REL : dt == KILN_F16 ? REF_F16_REL : REF_BF16_REL;
}

static double abs_tol(kiln_dtype dt) {
  return dt == KILN_F16 ? REF_F16_ABS : REF_TINY_ABS;
}

/* scale * x of row r, column j, or -inf when it takes no part (beyond the
 * causal limit, masked, or -inf itself). */
static double participant(const ref_case *c, long long r, int j, int lim) {
  if (j >= lim || masked_at(c, r, j)) return -INFINITY;
  return (double)c->s.scale * gt_get(c->dt, c->x, (size_t)r * c->s.cols + j);
}

/* y = softmax over the participating set, 0 elsewhere (exactly). */
static void reference_forward(ref_case *c) {
  const int cols = c->s.cols;
  const double rel = rel_tol(c->dt), abs_ = abs_tol(c->dt);
  for (long long r = 0; r < c->rows; r++) {
    const int lim = row_limit(&c->s, r);
    double *y = c->y_ref + (size_t)r * cols, *tol = c->y_tol + (size_t)r * cols;
    double m = -INFINITY, sum = 0;
    for (int j = 0; j < cols; j++) {
      const double t = participant(c, r, j, lim);
      if (t > m) m = t;
    }
    for (int j = 0; j < cols; j++) {
      const double t = participant(c, r, j, lim);
      y[j] = t == -INFINITY ? 0 : exp(t - m); /* a fully masked row: all zeros */
      sum += y[j];
    }
    for (int j = 0; j < cols; j++) {
      const int takes_part = participant(c, r, j, lim) != -INFINITY;
      if (takes_part) y[j] /= sum;
      tol[j] = takes_part ? rel * y[j] + abs_ : -1; /* -1: exactly 0 */
    }
  }
}

/* dx = scale * y * (dy - sum(dy * y)) over the row's [0, limit); the bound
 * adds fp32's error of the sum and difference, |scale*y| * (|dy| +
 * sum|dy*y|) * REF_BWD_SUM_REL, to the output rounding. */
static void reference_backward(ref_case *c) {
  const int cols = c->s.cols;
  const double scale = c->s.scale, rel = rel_tol(c->dt), abs_ = abs_tol(c->dt);
  for (long long r = 0; r < c->rows; r++) {
    const int lim = row_limit(&c->s, r);
    const size_t base = (size_t)r * cols;
    double s = 0, sabs = 0;
    for (int j = 0; j < lim; j++) {
      const double p = gt_get(c->dt, c->y_in, base + j) * gt_get(c->dt, c->dy, base + j);
      s += p;
      sabs += fabs(p);
    }
    for (int j = 0; j < cols; j++) {
      const double y = j < lim ? gt_get(c->dt, c->y_in, base + j) : 0;
      const double g = j < lim ? gt_get(c->dt, c->dy, base + j) : 0;
      if (j >= lim || y == 0) { /* 0 * finite, or never read: exactly 0 */
        c->dx_ref[base + j] = 0;
        c->dx_tol[base + j] = -1;
        continue;
      }
      c->dx_ref[base + j] = scale * y * (g - s);
      c->dx_tol[base + j] = rel * fabs(c->dx_ref[base + j]) +
                            REF_BWD_SUM_REL * fabs(scale * y) * (fabs(g) + sabs) + abs_;
    }
  }
}

/* Backward inputs: y is the forward reference rounded to the dtype (a real
 * softmax output, independent of the forward kernel's result); dy uniform in
 * [-1, 1). The causal upper triangle holds NaN, which the kernel must not
 * read. */
static void make_bwd_inputs(ref_case *c, uint64_t *rng) {
  for (long long r = 0; r < c->rows; r++) {
    const int lim = row_limit(&c->s, r);
    for (int j = 0; j < c->s.cols; j++) {
      const size_t i = (size_t)r * c->s.cols + j;
      const float g = rng_uniform(rng, -1.f, 1.f);
      gt_set(c->dt, c->y_in, i, j < lim ? (float)c->y_ref[i] : NAN);
      gt_set(c->dt, c->dy, i, j < lim ? g : NAN);
    }
  }
}

int ref_case_make(ref_case *c, const ref_shape *s, kiln_dtype dt, uint64_t seed) {
  uint64_t rng = seed ? seed : 0x6b696c6eULL;
  size_t es;
  memset(c, 0, sizeof *c);
  c->s = *s;
  c->dt = dt;
  c->rows = ref_rows(s);
  c->n = (size_t)c->rows * (size_t)s->cols;
  es = gt_dtype_size(dt);
  c->mask_bytes = s->unit == REF_MASKED ? (size_t)s->mask_batches * s->sq * s->cols : 0;
  c->x = calloc(c->n, es);
  c->y_in = calloc(c->n, es);
  c->dy = calloc(c->n, es);
  c->mask = calloc(c->mask_bytes ? c->mask_bytes : 1, 1);
  c->y_ref = calloc(c->n, sizeof(double));
  c->y_tol = calloc(c->n, sizeof(double));
  c->dx_ref = calloc(c->n, sizeof(double));
  c->dx_tol = calloc(c->n, sizeof(double));
  if (!c->x || !c->y_in || !c->dy || !c->mask || !c->y_ref || !c->y_tol || !c->dx_ref ||
      !c->dx_tol) {
    ref_case_free(c);
    return -1;
  }
  if (c->mask_bytes) make_mask(c, &rng);
  make_x(c, &rng);
  reference_forward(c);
  make_bwd_inputs(c, &rng);
  reference_backward(c);
  return 0;
}

void ref_case_free(ref_case *c) {
  if (!c) return;
  free(c->x);
  free(c->y_in);
  free(c->dy);
  free(c->mask);
  free(c->y_ref);
  free(c->y_tol);
  free(c->dx_ref);
  free(c->dx_tol);
  memset(c, 0, sizeof *c);
}

size_t ref_check(const ref_case *c, const void *got, const double *ref, const double *tol,
                 ref_mismatch *first, double *worst) {
  size_t bad = 0;
  *worst = 0;
  for (size_t i = 0; i < c->n; i++) {
    const double g = gt_get(c->dt, got, i);
    int ok;
    if (tol[i] < 0) {
      ok = g == 0; /* either sign; NaN is not */
    } else {
      const double ratio = fabs(g - ref[i]) / tol[i];
      ok = ratio <= 1; /* false for NaN */
      if (ok && ratio > *worst) *worst = ratio;
    }
    if (!ok && bad++ == 0) {
      first->row = (long long)(i / (size_t)c->s.cols);
      first->col = (int)(i % (size_t)c->s.cols);
      first->got = g;
      first->want = ref[i];
      first->tol = tol[i];
    }
  }
  return bad;
}

const char *ref_shape_str(const ref_shape *s, char *out, size_t cap) {
  int n;
  switch (s->unit) {
  case REF_PLAIN: n = snprintf(out, cap, "plain  rows=%d cols=%d", s->b, s->cols); break;
  case REF_MASKED:
    n = snprintf(out, cap, "masked b=%d h=%d sq=%d sk=%d mb=%d", s->b, s->heads, s->sq, s->cols,
                 s->mask_batches);
    break;
  default: n = snprintf(out, cap, "causal ab=%d sq=%d sk=%d", s->b, s->sq, s->cols); break;
  }
  if (n >= 0 && (size_t)n < cap)
    snprintf(out + n, cap - (size_t)n, " scale=%g%s", s->scale, s->inplace ? " in-place" : "");
  return out;
}
