/* harness.c — see harness.h. */
#include "tests/gpu/harness.h"

#include <ftw.h>    /* nftw, to remove the temp directory */
#include <stdarg.h> /* va_list */
#include <stdio.h>  /* printf, snprintf, perror */
#include <stdlib.h> /* getenv, mkdtemp, malloc */
#include <string.h> /* strcmp, strstr */

#include "common/half.h" /* f16/bf16 conversions, as libkiln does them */

/* One run per program: the counters are what the final line reports. */
static int g_pass, g_fail, g_quick, g_trim;

/* ---- counted results ---------------------------------------------------------- */

static void vline(const char *prefix, const char *fmt, va_list ap) {
  printf("%s", prefix);
  vprintf(fmt, ap);
  printf("\n");
}

void gt_pass(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vline("ok   ", fmt, ap);
  va_end(ap);
  g_pass++;
}

void gt_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vline("FAIL ", fmt, ap);
  va_end(ap);
  g_fail++;
}

void gt_check(int ok, const char *fmt, ...) {
  va_list ap;
  if (ok) {
    g_pass++;
    return;
  }
  va_start(ap, fmt);
  vline("FAIL ", fmt, ap);
  va_end(ap);
  g_fail++;
}

/* ---- invalid arguments -------------------------------------------------------- */

/* needle NULL: any message will do. */
static void expect_einval(const char *what, kiln_status st, const char *needle) {
  const char *e = kiln_last_error();
  if (st == KILN_EINVAL && (needle ? strstr(e, needle) != NULL : e[0] != '\0'))
    gt_pass("einval %s: %s", what, e);
  else if (needle)
    gt_fail("einval %s: returned %s (%s), want KILN_EINVAL naming \"%s\"", what,
            kiln_status_str(st), e, needle);
  else
    gt_fail("einval %s: returned %s (%s), want KILN_EINVAL with a message", what,
            kiln_status_str(st), e);
}

void gt_expect_einval(const char *what, kiln_status st) {
  expect_einval(what, st, NULL);
}

void gt_expect_einval_naming(const char *what, kiln_status st, const char *needle) {
  expect_einval(what, st, needle);
}

void gt_expect_empty(const char *what, kiln_status st) {
  if (st == KILN_OK)
    gt_pass("empty %s: KILN_OK, nothing launched", what);
  else
    gt_fail("empty %s: returned %s (%s), want KILN_OK with no launch", what, kiln_status_str(st),
            kiln_last_error());
}

size_t gt_first_not_ff(const void *p, size_t n) {
  const unsigned char *b = p;
  size_t k = 0;
  while (k < n && b[k] == 0xFF)
    k++;
  return k;
}

void gt_expect_untouched(const dbuf *out) {
  char msg[256] = "";
  unsigned char *host = malloc(out->bytes ? out->bytes : 1);
  if (!host) {
    snprintf(msg, sizeof msg, "out of host memory");
  } else if (dev_sync("sync after invalid calls", msg, sizeof msg) &&
             dev_get(out, host, "out", msg, sizeof msg)) {
    const size_t k = gt_first_not_ff(host, out->bytes);
    if (k < out->bytes)
      snprintf(msg, sizeof msg, "an invalid call launched: byte %zu of the output changed", k);
  }
  free(host);
  if (msg[0])
    gt_fail("einval: %s", msg);
  else
    gt_pass("einval: no invalid call launched anything");
}

/* ---- host elements ------------------------------------------------------------ */

size_t gt_dtype_size(kiln_dtype dt) {
  return dt == KILN_F32 ? 4 : 2;
}

double gt_get(kiln_dtype dt, const void *p, size_t i) {
  if (dt == KILN_F32) return ((const float *)p)[i];
  if (dt == KILN_F16) return kiln_f16_to_f32(((const uint16_t *)p)[i]);
  return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
}

void gt_set(kiln_dtype dt, void *p, size_t i, float v) {
  if (dt == KILN_F32)
    ((float *)p)[i] = v;
  else if (dt == KILN_F16)
    ((uint16_t *)p)[i] = kiln_f32_to_f16(v);
  else
    ((uint16_t *)p)[i] = kiln_f32_to_bf16(v);
}

/* ---- random numbers ----------------------------------------------------------- */

uint64_t gt_rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

double gt_rng_uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * gt_unit53(gt_rng_next(s));
}

double gt_unit53(uint64_t draw) {
  return (double)(draw >> 11) * 0x1p-53;
}

float gt_unit24(uint64_t draw) {
  return (float)((draw >> 40) * 0x1p-24);
}

/* ---- the run ------------------------------------------------------------------ */

int gt_quick(void) {
  return g_quick;
}

int gt_trim(void) {
  return g_trim;
}

/* An environment flag: set, not empty and not "0". */
static int flag(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

int gt_init(gt_run *r, const char *family) {
  const char *tmp = getenv("TMPDIR");
  const char *env_cache = getenv("KILN_CACHE_DIR");
  int n = 0;
  kiln_status st;
  memset(r, 0, sizeof *r);
  r->family = family;
  st = kiln_device_count(&n);
  if (st != KILN_OK || n == 0) {
    printf("gpu.%s: skipped: %s\n", family,
           st != KILN_OK ? kiln_last_error() : "the driver reports no CUDA device");
    return r->status = GT_SKIP;
  }
  /* line-buffered: a test killed by its timeout still shows how far it got */
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* trim picks its own shapes, the riskiest at full width: quick's size cap
   * would drop the largest columns, so trim wins when both are set */
  g_trim = flag("KILN_GPU_TEST_TRIM");
  g_quick = !g_trim && flag("KILN_GPU_TEST_QUICK");
  snprintf(r->root, sizeof r->root, "%s/kiln-gpu-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(r->root)) { /* 0700 */
    char what[128];
    snprintf(what, sizeof what, "gpu.%s: mkdtemp", family);
    perror(what);
    return r->status = 1;
  }
  snprintf(r->main_cache, sizeof r->main_cache, "%s/main", r->root);
  /* KILN_CACHE_DIR set: the loader takes it from the environment itself */
  r->cache = env_cache && *env_cache ? env_cache : r->main_cache;
  return 0;
}

int gt_open(gt_run *r) {
  kiln_loader_options o = KILN_LOADER_OPTIONS_INIT;
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_status st;
  co.dir = r->cache == r->main_cache ? r->main_cache : NULL;
  o.device = 0;
  o.cache = &co;
  if ((st = kiln_loader_open(&r->loader, &o)) != KILN_OK ||
      (st = kiln_loader_device(&r->info, r->loader)) != KILN_OK) {
    gt_fail("open a loader on device 0: %s: %s", kiln_status_str(st), kiln_last_error());
    return 0;
  }
  return 1;
}

int gt_context(gt_run *r) {
  char msg[512];
  (void)r; /* device 0, the loader's: dev_open finds its primary context itself */
  if (!dev_open(0, msg, sizeof msg)) {
    gt_fail("make device 0's primary context current: %s", msg);
    return 0;
  }
  return 1;
}

void gt_print_device(const gt_run *r, unsigned show) {
  const kiln_device_info *i = &r->info;
  printf("device 0: %s, sm_%d%d, %d SMs", i->name, i->cc_major, i->cc_minor, i->sm_count);
  if (show & GT_SHOW_DRIVER) printf(", driver %d", i->driver_version);
  if (show & GT_SHOW_PTX_ISA) printf(" (PTX ISA up to %d.%d)", i->ptx_isa / 10, i->ptx_isa % 10);
  if (show & GT_SHOW_CACHE) printf(", cache %s", r->cache);
  printf("%s\n", g_trim ? ", trim" : g_quick ? ", quick" : "");
}

int gt_start(gt_run *r, const char *family, unsigned show) {
  if (gt_init(r, family) != 0 || !gt_open(r)) return 0;
  gt_print_device(r, show);
  return gt_context(r);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

int gt_finish(gt_run *r) {
  if (r->status) return r->status; /* nothing was made */
  dev_close();
  kiln_loader_close(r->loader);
  r->loader = NULL;
  /* the temp caches (of softmax's source comparison too) go with the root */
  if (r->root[0]) nftw(r->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  printf("gpu.%s: %d passed, %d failed\n", r->family, g_pass, g_fail);
  return g_fail ? 1 : 0;
}
