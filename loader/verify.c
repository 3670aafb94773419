/* Known-answer test of every entry point of the loaded softmax units: a tiny
 * input per (direction, dtype, variant), run through the typed launchers,
 * against a double-precision CPU reference. A failing unit's blob is
 * quarantined. The other families are checked by their gpu tests
 * (tests/gpu), which have no known-answer form here yet. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/half.h"
#include "common/logging.h"
#include "kernels/softmax_launch.h"
#include "kiln/ops.h"
#include "loader/loader_internal.h"

enum { PLAIN, MASKED, CAUSAL };

typedef struct kat {
  int kind;
  kiln_dtype dt;
  int bwd;
  int b, heads, sq, cols; /* rows = b*heads*sq */
  long long rows;
  float scale;
  double *x, *y, *dy, *ref; /* inputs as the dtype holds them, and the expected output */
  uint8_t *mask;
} kat;

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static double uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * (double)(next(s) >> 11) / 9007199254740992.0;
}

static uint16_t to16(kiln_dtype dt, double v) {
  return dt == KILN_F16 ? kiln_f32_to_f16((float)v) : kiln_f32_to_bf16((float)v);
}

static double from16(kiln_dtype dt, uint16_t h) {
  return dt == KILN_F16 ? kiln_f16_to_f32(h) : kiln_bf16_to_f32(h);
}

/* v as the dtype stores it */
static double round_to(kiln_dtype dt, double v) {
  return dt == KILN_F32 ? (double)(float)v : from16(dt, to16(dt, v));
}

static int masked_at(const kat *k, long long r, int j) {
  if (k->kind == CAUSAL) return j > (int)(r % k->sq);
  if (k->kind == MASKED) {
    long long batch = r / ((long long)k->heads * k->sq), i = r % k->sq;
    return k->mask[(batch * k->sq + i) * k->cols + j] != 0;
  }
  return 0;
}

static void reference(kat *k) {
  for (long long r = 0; r < k->rows; r++) {
    const double *x = k->x + r * k->cols, *y = k->y + r * k->cols, *dy = k->dy + r * k->cols;
    double *out = k->ref + r * k->cols, m = -INFINITY, sum = 0, dot = 0;
    if (k->bwd) {
      for (int j = 0; j < k->cols; j++)
        dot += dy[j] * y[j];
      for (int j = 0; j < k->cols; j++)
        out[j] = k->kind == CAUSAL && masked_at(k, r, j) ? 0 : k->scale * y[j] * (dy[j] - dot);
      continue;
    }
    for (int j = 0; j < k->cols; j++)
      if (!masked_at(k, r, j) && k->scale * x[j] > m) m = k->scale * x[j];
    for (int j = 0; j < k->cols; j++)
      if (!masked_at(k, r, j)) sum += exp(k->scale * x[j] - m);
    for (int j = 0; j < k->cols; j++)
      out[j] = masked_at(k, r, j) || sum == 0 ? 0 : exp(k->scale * x[j] - m) / sum;
  }
}

/* sum_i |dy[i] * y[i]| over row r: the scale of the backward's dot product,
 * which bounds its rounding error (0 for the forward, which needs none). */
static double row_magnitude(const kat *k, long long r) {
  double mag = 0;
  if (!k->bwd) return 0;
  for (int i = 0; i < k->cols; i++)
    mag += fabs(k->dy[r * k->cols + i] * k->y[r * k->cols + i]);
  return mag;
}

/* The error allowed at (r, j); mag is row_magnitude(k, r), computed once per
 * row (per element, the check was quadratic in cols: seconds a unit). */
static double tolerance(const kat *k, long long r, int j, double mag) {
  double rel = k->dt == KILN_F32 ? 2e-5 : k->dt == KILN_F16 ? 2e-3 : 1.6e-2;
  size_t at = (size_t)r * k->cols + j;
  if (!k->bwd) return 1e-6 + rel * fabs(k->ref[at]) + (k->dt == KILN_F32 ? 0 : 1e-4);
  return 1e-6 + rel * fabs(k->scale * k->y[at]) * (fabs(k->dy[at]) + mag) * 2;
}

/* Host staging of one tensor in the dtype. */
static void *pack(const kat *k, const double *v, size_t n) {
  size_t es = k->dt == KILN_F32 ? 4 : 2;
  unsigned char *p = malloc(n * es);
  if (!p) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (es == 4) {
      float f = (float)v[i];
      memcpy(p + 4 * i, &f, 4);
    } else {
      uint16_t h = to16(k->dt, v[i]);
      memcpy(p + 2 * i, &h, 2);
    }
  }
  return p;
}

static double unpack(const kat *k, const void *p, size_t i) {
  if (k->dt == KILN_F32) {
    float f;
    memcpy(&f, (const char *)p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, (const char *)p + 2 * i, 2);
  return from16(k->dt, h);
}

static kiln_status launch(kiln_loader *l, const kat *k, CUdeviceptr out, CUdeviceptr a,
                          CUdeviceptr b, CUdeviceptr mask) {
  void *o = (void *)(uintptr_t)out, *pa = (void *)(uintptr_t)a, *pb = (void *)(uintptr_t)b;
  switch (k->kind * 2 + k->bwd) {
  case PLAIN * 2: return kiln_scaled_softmax_fwd(l, k->dt, o, pa, k->rows, k->cols, k->scale, NULL);
  case PLAIN * 2 + 1:
    return kiln_scaled_softmax_bwd(l, k->dt, o, pa, pb, k->rows, k->cols, k->scale, NULL);
  case MASKED * 2:
    return kiln_scaled_masked_softmax_fwd(l, k->dt, o, pa, (const uint8_t *)(uintptr_t)mask, k->b,
                                          k->heads, k->sq, k->cols, k->b, k->scale, NULL);
  case MASKED * 2 + 1:
    return kiln_scaled_masked_softmax_bwd(l, k->dt, o, pa, pb, k->b, k->heads, k->sq, k->cols,
                                          k->scale, NULL);
  case CAUSAL * 2:
    return kiln_scaled_upper_triang_masked_softmax_fwd(l, k->dt, o, pa, k->b, k->sq, k->cols,
                                                       k->scale, NULL);
  default:
    return kiln_scaled_upper_triang_masked_softmax_bwd(l, k->dt, o, pa, pb, k->b, k->sq, k->cols,
                                                       k->scale, NULL);
  }
}

/* Runs one case on the device; *ok = 0 with a description when it is wrong. */
static kiln_status run_case(kiln_loader *l, kat *k, int *ok, char *why, size_t why_cap) {
  const kiln_cuda_api *cu = l->cu;
  size_t n = (size_t)k->rows * k->cols, es = k->dt == KILN_F32 ? 4 : 2;
  CUdeviceptr d_out = 0, d_a = 0, d_b = 0, d_mask = 0;
  void *h_a = NULL, *h_b = NULL, *h_out = malloc(n * es);
  kiln_status rc = KILN_OK;
  *ok = 1;
  h_a = pack(k, k->bwd ? k->y : k->x, n);
  h_b = pack(k, k->dy, n);
  if (!h_a || !h_b || !h_out) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  CU_CHECK(cu->MemAlloc(&d_out, n * es), "verify: cuMemAlloc");
  CU_CHECK(cu->MemAlloc(&d_a, n * es), "verify: cuMemAlloc");
  CU_CHECK(cu->MemAlloc(&d_b, n * es), "verify: cuMemAlloc");
  CU_CHECK(cu->MemAlloc(&d_mask, (size_t)k->b * k->sq * k->cols), "verify: cuMemAlloc");
  CU_CHECK(cu->MemcpyHtoD(d_a, h_a, n * es), "verify: cuMemcpyHtoD");
  CU_CHECK(cu->MemcpyHtoD(d_b, h_b, n * es), "verify: cuMemcpyHtoD");
  CU_CHECK(cu->MemcpyHtoD(d_mask, k->mask, (size_t)k->b * k->sq * k->cols), "verify: cuMemcpyHtoD");
  CU_CHECK(cu->MemsetD8(d_out, 0xff, n * es), "verify: cuMemsetD8"); /* poison: NaN */
  KILN_CHECK(launch(l, k, d_out, d_a, d_b, d_mask));
  CU_CHECK(cu->CtxSynchronize(), "verify: kernel");
  CU_CHECK(cu->MemcpyDtoH(h_out, d_out, n * es), "verify: cuMemcpyDtoH");
  for (long long r = 0; r < k->rows && *ok; r++) {
    double mag = row_magnitude(k, r);
    for (int j = 0; j < k->cols; j++) {
      double got = unpack(k, h_out, (size_t)r * k->cols + j), want = k->ref[r * k->cols + j];
      if (!(fabs(got - want) <= tolerance(k, r, j, mag))) {
        *ok = 0;
        snprintf(why, why_cap, "row %lld col %d: got %.8g, expected %.8g", r, j, got, want);
        break;
      }
    }
  }
out:
  if (d_out) cu->MemFree(d_out);
  if (d_a) cu->MemFree(d_a);
  if (d_b) cu->MemFree(d_b);
  if (d_mask) cu->MemFree(d_mask);
  free(h_a);
  free(h_b);
  free(h_out);
  return rc;
}

/* Columns that make the launch picker choose variant v for elements of es
 * bytes in 16-byte aligned tensors (cuMemAlloc's, as run_case allocates):
 * the largest of its range (the most elements), or just past the start of
 * the open-ended general paths. 0 when no cols up to 20000 picks it. */
static int cols_for(const char *v, unsigned es) {
  int first = 0, last = 0;
  for (int cols = 1; cols <= 20000; cols++) {
    kiln_softmax_launch p;
    if (kiln_softmax_pick_launch(&p, 1, cols, es, 1) == 0 && strcmp(p.variant, v) == 0) {
      if (!first) first = cols;
      last = cols;
    }
  }
  if (last > 20000 - 16) return first + 37 * (int)(16 / es); /* g, vg: same residue mod 16/es */
  return last;
}

static void fill(kat *k, uint64_t seed) {
  size_t n = (size_t)k->rows * k->cols;
  for (size_t i = 0; i < n; i++) {
    k->x[i] = round_to(k->dt, uniform(&seed, -4, 4));
    k->dy[i] = round_to(k->dt, uniform(&seed, -1, 1));
  }
  for (size_t i = 0; i < (size_t)k->b * k->sq * k->cols; i++)
    k->mask[i] = next(&seed) % 4 == 0;
  if (k->kind == MASKED) memset(k->mask, 1, (size_t)k->cols); /* a fully masked row */
  if (k->bwd) { /* y: a softmax output as the dtype holds it */
    int bwd = k->bwd;
    k->bwd = 0;
    reference(k);
    k->bwd = bwd;
    for (size_t i = 0; i < n; i++)
      k->y[i] = round_to(k->dt, k->ref[i]);
  }
  reference(k);
}

static kiln_status verify_unit(kiln_loader *l, size_t u, kiln_loader_verify_summary *sum, char *bad,
                               size_t bad_cap) {
  const kiln_unit_info *unit = l->units[u].unit;
  int kind = strcmp(unit->name, "scaled_masked_softmax") == 0                ? MASKED
             : strcmp(unit->name, "scaled_upper_triang_masked_softmax") == 0 ? CAUSAL
                                                                             : PLAIN;
  kiln_status rc = KILN_OK;
  bad[0] = '\0';
  for (size_t e = 0; e < unit->n_entries && rc == KILN_OK; e++) {
    const kiln_entry_info *ent = &unit->entries[e];
    kat k;
    char why[160];
    int ok = 1;
    size_t n;
    memset(&k, 0, sizeof k);
    k.kind = kind;
    k.bwd = strcmp(ent->direction, "bwd") == 0;
    k.dt = strcmp(ent->dtype, "f32") == 0   ? KILN_F32
           : strcmp(ent->dtype, "f16") == 0 ? KILN_F16
                                            : KILN_BF16;
    k.cols = cols_for(ent->variant, k.dt == KILN_F32 ? 4 : 2);
    k.b = 2;
    k.heads = kind == MASKED ? 2 : 1;
    k.sq = kind == PLAIN ? 1 : 3;
    k.rows = (long long)k.b * k.heads * k.sq;
    k.scale = 0.75f;
    if (!k.cols) return kiln_fail(KILN_EINTERNAL, "verify: no cols pick variant %s", ent->variant);
    n = (size_t)k.rows * k.cols;
    k.x = calloc(n, sizeof *k.x);
    k.y = calloc(n, sizeof *k.y);
    k.dy = calloc(n, sizeof *k.dy);
    k.ref = calloc(n, sizeof *k.ref);
    k.mask = calloc((size_t)k.b * k.sq * k.cols, 1);
    if (!k.x || !k.y || !k.dy || !k.ref || !k.mask) rc = kiln_fail(KILN_ENOMEM, "out of memory");
    if (rc == KILN_OK) {
      fill(&k, 0x9e3779b97f4a7c15ULL ^ (e * 7919 + 1));
      rc = run_case(l, &k, &ok, why, sizeof why);
    }
    if (rc == KILN_OK) {
      sum->entries++;
      if (!ok) {
        sum->failed++;
        if (!bad[0]) snprintf(bad, bad_cap, "%s (%lld x %d): %s", ent->name, k.rows, k.cols, why);
        kiln_log(KILN_LOG_ERROR, "verify: %s (%lld x %d) is wrong: %s", ent->name, k.rows, k.cols,
                 why);
        if (!sum->first_failure[0])
          snprintf(sum->first_failure, sizeof sum->first_failure, "%s (%lld x %d): %s", ent->name,
                   k.rows, k.cols, why);
      }
    }
    free(k.x);
    free(k.y);
    free(k.dy);
    free(k.ref);
    free(k.mask);
  }
  return rc;
}

kiln_status kiln_loader_verify(kiln_loader_verify_summary *out, kiln_loader *l) {
  kiln_status rc = KILN_OK;
  int pushed = 0;
  if (!l || !out) return kiln_fail(KILN_EINVAL, "kiln_loader_verify: NULL argument");
  memset(out, 0, sizeof *out);
  KILN_CHECK(kiln_ctx_enter(l, &pushed));
  for (size_t u = 0; u < l->n_units && rc == KILN_OK; u++) {
    kiln_unit_load load;
    char bad[256];
    if (!l->units[u].module) continue;
    if (strncmp(l->units[u].unit->main_file->path, "softmax/", 8) != 0) continue;
    rc = verify_unit(l, u, out, bad, sizeof bad);
    if (rc != KILN_OK || !bad[0]) continue;
    pthread_mutex_lock(&l->lock);
    load = l->units[u].load;
    kiln_unload_locked(l, u);
    pthread_mutex_unlock(&l->lock);
    out->units_quarantined++;
    if (load.layer == 0) {
      char why[300];
      snprintf(why, sizeof why, "failed its known-answer test: %s", bad);
      if (kiln_cache_quarantine(l->cache, load.digest, why) != KILN_OK)
        kiln_log(KILN_LOG_WARN, "%s", kiln_last_error());
    } else {
      kiln_log(KILN_LOG_WARN,
               "%s %s in read-only layer %d failed its known-answer test; it "
               "cannot be quarantined there: rebuild that cache",
               load.unit, load.target, load.layer);
    }
  }
  kiln_ctx_leave(l, pushed);
  if (rc == KILN_OK && out->failed)
    rc = kiln_fail(KILN_ECORRUPT, "%zu of %zu entry points failed the known-answer test; first: %s",
                   out->failed, out->entries, out->first_failure);
out:
  return rc;
}
