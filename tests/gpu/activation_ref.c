/* activation_ref.c — the float64 reference of gpu.activation
 * (activation_ref.h). */
#include "tests/gpu/activation_ref.h"

#include <math.h>   /* tanh, exp, fabs, isnan */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, free */

#include "tests/gpu/harness.h" /* elements of a dtype, xorshift64* */

/* The kernel's constants, as the fp32 values it computes with. */
#define K0 ((double)0.79788456f)
#define K1 ((double)0.044715f)
#define K2 ((double)0.1070322243f)

/* Tolerances (docs/kernels/activation.md, "Tests"):
 * - REL: fp32's few roundings per element (bias add, the polynomial, tanhf
 *   or expf at 2 ulp, __fdividef at 2 ulp) stay far below 1e-5 relative.
 * - ABS_ULP: an absolute term, in units of |u|-scaled fp32 ulps of 1, for
 *   the cancellations the formulas have in fp32 (1 + t and 1 - t^2 with
 *   t = tanh near -1 or 1; 1 + a'(1 - s) near a' = -1.28): there the error is
 *   a few ulps of 1 times the factor in front, not relative to the result.
 * - 16-bit outputs add half an ulp of the result: 2^-11 (f16) or 2^-8
 *   (bf16) relative, and half fp16's subnormal spacing. */
#define REL 1e-5
#define ABS_ULP 0x1p-20
#define F16_HALF_ULP 0x1p-11
#define BF16_HALF_ULP 0x1p-8
#define F16_HALF_SUB 0x1p-25

/* Uniform in [lo, hi), never a value that rounds to 0 in dt. */
static void fill(kiln_dtype dt, void *p, size_t n, uint64_t *s, float lo, float hi) {
  for (size_t i = 0; i < n; i++) {
    float v = lo + (hi - lo) * gt_unit24(gt_rng_next(s));
    gt_set(dt, p, i, v);
    if (gt_get(dt, p, i) == 0) gt_set(dt, p, i, 0.375f);
  }
}

/* Half an ulp of the output (16-bit) on top of the fp32 tolerance. */
static double out_tol(kiln_dtype dt, double ref, double f32_tol) {
  const double m = fabs(ref) + f32_tol;
  if (dt == KILN_F16) return f32_tol + m * F16_HALF_ULP + F16_HALF_SUB;
  if (dt == KILN_BF16) return f32_tol + m * BF16_HALF_ULP;
  return f32_tol;
}

static double bias_at(const act_case *c, int j) {
  return c->s.bias ? gt_get(c->dt, c->bias, (size_t)j) : 0.0;
}

static void gelu_ref(act_case *c) {
  const int cols = c->s.cols;
  for (size_t i = 0; i < c->n_out; i++) {
    const double u = gt_get(c->dt, c->x, i) + bias_at(c, (int)(i % cols));
    const double t = tanh(K0 * u * (1 + K1 * u * u)), au = fabs(u);
    const double g = 0.5 * u * ((1 - t * t) * (K0 + K2 * u * u)) + 0.5 * (1 + t);
    const double dy = gt_get(c->dt, c->dy, i);
    c->y_ref[i] = u * 0.5 * (1 + t);
    c->y_tol[i] = out_tol(c->dt, c->y_ref[i], REL * fabs(c->y_ref[i]) + ABS_ULP * (1 + au));
    c->dx_ref[i] = dy * g;
    c->dx_tol[i] =
        out_tol(c->dt, c->dx_ref[i],
                REL * fabs(c->dx_ref[i]) + ABS_ULP * fabs(dy) * (1 + au * (K0 + K2 * u * u)));
  }
}

static void swiglu_ref(act_case *c) {
  const int cols = c->s.cols;
  for (size_t i = 0; i < c->n_out; i++) {
    const size_t r = i / (size_t)cols, j = i % (size_t)cols;
    const size_t ia = r * (size_t)c->width + j, ib = ia + (size_t)cols;
    const double u = gt_get(c->dt, c->x, ia) + bias_at(c, (int)j);
    const double w = gt_get(c->dt, c->x, ib) + bias_at(c, cols + (int)j);
    const double s = 1 / (1 + exp(-u)), dy = gt_get(c->dt, c->dy, i), au = fabs(u);
    /* relative: fp32 roundings, and sigmoid's conditioning |u| (1 - s) */
    const double rel = REL + 0x1p-22 * au;
    c->y_ref[i] = u * s * w;
    c->y_tol[i] = out_tol(c->dt, c->y_ref[i], rel * fabs(c->y_ref[i]) + 1e-30);
    c->dx_ref[ia] = dy * w * s * (1 + u * (1 - s));
    c->dx_tol[ia] = out_tol(c->dt, c->dx_ref[ia],
                            rel * fabs(c->dx_ref[ia]) + ABS_ULP * fabs(dy * w * s) * (1 + au));
    c->dx_ref[ib] = dy * u * s;
    c->dx_tol[ib] = out_tol(c->dt, c->dx_ref[ib], rel * fabs(c->dx_ref[ib]) + 1e-30);
  }
}

int act_case_make(act_case *c, const act_shape *s, kiln_dtype dt, uint64_t seed) {
  const size_t es = gt_dtype_size(dt);
  uint64_t rng = seed | 1;
  c->s = *s;
  c->dt = dt;
  c->width = s->unit == ACT_SWIGLU ? 2 * s->cols : s->cols;
  c->n_out = (size_t)s->rows * (size_t)s->cols;
  c->n_in = (size_t)s->rows * (size_t)c->width;
  c->x = calloc(c->n_in, es);
  c->bias = calloc((size_t)c->width, es);
  c->dy = calloc(c->n_out, es);
  c->y_ref = calloc(c->n_out, sizeof(double));
  c->y_tol = calloc(c->n_out, sizeof(double));
  c->dx_ref = calloc(c->n_in, sizeof(double));
  c->dx_tol = calloc(c->n_in, sizeof(double));
  if (!c->x || !c->bias || !c->dy || !c->y_ref || !c->y_tol || !c->dx_ref || !c->dx_tol) {
    act_case_free(c);
    return -1;
  }
  /* u = x + bias spans [-10, 10]: tanh and sigmoid saturate at the ends */
  fill(dt, c->x, c->n_in, &rng, -8.f, 8.f);
  fill(dt, c->bias, (size_t)c->width, &rng, -2.f, 2.f);
  fill(dt, c->dy, c->n_out, &rng, -2.f, 2.f);
  if (s->unit == ACT_GELU)
    gelu_ref(c);
  else
    swiglu_ref(c);
  return 0;
}

void act_case_free(act_case *c) {
  free(c->x);
  free(c->bias);
  free(c->dy);
  free(c->y_ref);
  free(c->y_tol);
  free(c->dx_ref);
  free(c->dx_tol);
  c->x = c->bias = c->dy = NULL;
  c->y_ref = c->y_tol = c->dx_ref = c->dx_tol = NULL;
}

size_t act_check(kiln_dtype dt, const void *got, const double *ref, const double *tol, size_t n,
                 size_t *first, double *worst) {
  size_t bad = 0;
  *worst = 0;
  for (size_t i = 0; i < n; i++) {
    const double g = gt_get(dt, got, i), e = fabs(g - ref[i]);
    if (isnan(g) || !(e <= tol[i])) {
      if (!bad++) *first = i;
    } else if (e / tol[i] > *worst) {
      *worst = e / tol[i];
    }
  }
  return bad;
}

const char *act_shape_str(const act_shape *s, char *out, size_t cap) {
  snprintf(out, cap, "%s rows=%lld cols=%d%s%s%s", s->unit == ACT_GELU ? "gelu" : "swiglu", s->rows,
           s->cols, s->bias ? " bias" : " no-bias", s->inplace ? " in-place" : "",
           s->misalign ? " misaligned" : "");
  return out;
}
