/* dropout_ref.c — Philox-4x32-10, the keep mask, inputs and the float64
 * reference for gpu.dropout (dropout_ref.h). */
#include "tests/gpu/dropout_ref.h"

#include <math.h>   /* fabs, isnan, signbit */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, malloc, free */
#include <string.h> /* memset */

#include "tests/gpu/harness.h" /* elements of a dtype, xorshift64* */

/* ---- Philox-4x32-10 (Salmon et al., SC 2011; Random123 philox4x32) ------------ */

static uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
  const uint64_t p = (uint64_t)a * b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
}

void dref_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k[2] = {key[0], key[1]};
  for (int round = 0; round < 10; round++) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo(0xD2511F53u, c[0], &hi0);
    const uint32_t lo1 = mulhilo(0xCD9E8D57u, c[2], &hi1);
    const uint32_t n[4] = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    memcpy(c, n, sizeof c);
    k[0] += 0x9E3779B9u; /* the bump after the last round is never used */
    k[1] += 0xBB67AE85u;
  }
  memcpy(out, c, sizeof c);
}

int dref_philox_kat(char *msg, size_t cap) {
  static const struct {
    uint32_t ctr[4], key[2], want[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
    uint32_t got[4];
    dref_philox(kat[i].ctr, kat[i].key, got);
    if (memcmp(got, kat[i].want, sizeof got) != 0) {
      snprintf(msg, cap, "vector %zu: got %08x %08x %08x %08x, want %08x %08x %08x %08x", i, got[0],
               got[1], got[2], got[3], kat[i].want[0], kat[i].want[1], kat[i].want[2],
               kat[i].want[3]);
      return 0;
    }
  }
  return 1;
}

size_t dref_mask(unsigned char *keep, size_t n, float p, int training, uint64_t seed,
                 uint64_t offset) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  size_t kept = 0;
  for (size_t g = 0; g * 4 < n; g++) {
    const uint32_t ctr[4] = {(uint32_t)g, (uint32_t)((uint64_t)g >> 32), (uint32_t)offset,
                             (uint32_t)(offset >> 32)};
    uint32_t w[4];
    dref_philox(ctr, key, w);
    for (size_t j = 0; j < 4 && g * 4 + j < n; j++) {
      const double u = (double)(w[j] >> 8) * 0x1p-24;
      keep[g * 4 + j] = !training || u >= (double)p;
      kept += keep[g * 4 + j];
    }
  }
  return kept;
}

/* ---- inputs ---------------------------------------------------------------------- */

/* A random sign times a magnitude uniform in [lo, hi): never 0. */
static float rng_signed(uint64_t *s, float lo, float hi) {
  const uint64_t r = gt_rng_next(s);
  const float m = lo + (hi - lo) * gt_unit24(r);
  return (r & 1) ? -m : m;
}

int dref_make(dref_case *c, kiln_dtype dt, long long rows, int cols, int has_bias, float p,
              int training, uint64_t seed, uint64_t offset, uint64_t data_seed) {
  const size_t es = gt_dtype_size(dt);
  uint64_t rng = data_seed | 1;
  memset(c, 0, sizeof *c);
  c->dt = dt;
  c->rows = rows;
  c->cols = cols;
  c->has_bias = has_bias;
  c->training = training;
  c->p = p;
  c->seed = seed;
  c->offset = offset;
  c->n = (size_t)rows * (size_t)cols;
  c->x = malloc(c->n * es);
  c->bias = malloc((size_t)cols * es);
  c->res = malloc(c->n * es);
  c->dy = malloc(c->n * es);
  c->keep = malloc(c->n);
  if (!c->x || !c->bias || !c->res || !c->dy || !c->keep) {
    dref_free(c);
    return -1;
  }
  for (size_t i = 0; i < c->n; i++) {
    /* |x| in [0.5, 8): 0.5 * 2^[0, 4) */
    gt_set(dt, c->x, i, rng_signed(&rng, 1.f, 2.f) * 0.5f * (float)(1u << (gt_rng_next(&rng) % 4)));
    gt_set(dt, c->res, i, rng_signed(&rng, 0.01f, 1.f));
    gt_set(dt, c->dy, i, rng_signed(&rng, 0.01f, 2.f));
  }
  for (int j = 0; j < cols; j++)
    gt_set(dt, c->bias, (size_t)j, rng_signed(&rng, 0.01f, 0.25f));
  c->kept = dref_mask(c->keep, c->n, p, training, seed, offset);
  return 0;
}

void dref_free(dref_case *c) {
  free(c->x);
  free(c->bias);
  free(c->res);
  free(c->dy);
  free(c->keep);
  memset(c, 0, sizeof *c);
}

/* ---- the reference ---------------------------------------------------------------- */

/* Half an ulp of the dtype, relative; half its smallest subnormal, absolute. */
static double half_ulp(kiln_dtype dt) {
  return dt == KILN_F32 ? 0x1p-24 : dt == KILN_F16 ? 0x1p-11 : 0x1p-8;
}
static double half_sub(kiln_dtype dt) {
  return dt == KILN_F32 ? 0x1p-150 : dt == KILN_F16 ? 0x1p-25 : 0x1p-134;
}

/* v (fp32) rounded to the dtype and widened back: what a store then a load gives. */
static double round_to(kiln_dtype dt, float v) {
  unsigned char buf[4];
  gt_set(dt, buf, 0, v);
  return gt_get(dt, buf, 0);
}

void dref_want(const dref_case *c, int bwd, size_t i, double *want, double *tol) {
  const kiln_dtype dt = c->dt;
  const int identity = !c->training || c->p == 0.f;
  const double s = 1.0 / (1.0 - (double)c->p);
  if (bwd) {
    const double d = gt_get(dt, c->dy, i);
    if (identity || !c->keep[i]) {
      *want = identity ? d : 0.0;
      *tol = 0;
      return;
    }
    *want = d * s;
    /* scale's and the product's fp32 roundings, the store's, want's own */
    *tol = 2 * 0x1p-24 * fabs(*want) * (1 + half_ulp(dt)) + half_ulp(dt) * fabs(*want) +
           half_sub(dt) + 0x1p-50 * fabs(*want);
    return;
  }
  const float xf = (float)gt_get(dt, c->x, i), rf = (float)gt_get(dt, c->res, i);
  const float bf = c->has_bias ? (float)gt_get(dt, c->bias, i % (size_t)c->cols) : 0.f;
  const float t = xf + bf; /* fp32, as the kernel: FLT_EVAL_METHOD 0 on the hosts kiln supports */
  if (identity) {
    const float sum = t + rf;
    *want = round_to(dt, sum);
    *tol = 0;
    return;
  }
  if (!c->keep[i]) {
    *want = rf;
    *tol = 0;
    return;
  }
  {
    const double ts = fabs((double)t * s), e32 = 0x1p-24 * (2 * ts + fabs((double)rf));
    *want = (double)rf + (double)t * s;
    /* the last term: want's own double rounding */
    *tol = e32 + half_ulp(dt) * (fabs(*want) + e32) + half_sub(dt) + 0x1p-50 * fabs(*want);
  }
}

void dref_check(const dref_case *c, int bwd, const void *got, dref_result *r) {
  memset(r, 0, sizeof *r);
  r->first = (size_t)-1;
  for (size_t i = 0; i < c->n; i++) {
    const double g = gt_get(c->dt, got, i);
    double want, tol;
    int ok, kept;
    dref_want(c, bwd, i, &want, &tol);
    if (tol == 0)
      ok = g == want && signbit(g) == signbit(want);
    else {
      ok = !isnan(g) && fabs(g - want) <= tol;
      if (ok && fabs(g - want) / tol > r->worst) r->worst = fabs(g - want) / tol;
    }
    /* the kept set, read back from the output alone */
    kept = bwd ? g != 0.0 : g != gt_get(c->dt, c->res, i);
    if (!ok) r->bad++;
    if (kept != c->keep[i]) r->mask_bad++;
    if ((!ok || kept != c->keep[i]) && r->first == (size_t)-1) {
      r->first = i;
      r->got = g;
      r->want = want;
      r->tol = tol;
    }
  }
}
