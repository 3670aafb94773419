/* gpu.coord_nccl — the NCCL transport of kiln_comm (loader/coord_nccl.c)
 * end to end on a GPU with the real libnccl: a one-rank communicator
 * (ncclGetUniqueId + ncclCommInitRank, nranks 1) on device 0's primary
 * context and the legacy default stream, then
 *   1. kiln_comm_nccl gives rank 0 of 1;
 *   2. broadcast and max_reduce of 1, 4096 and 1 MiB + 7 bytes (two staging
 *      chunks) come back exact;
 *   3. the round trip of a 4 KiB frame (broadcast), median of 200 after 20
 *      warm-up calls: "nccl frame round trip: X us (median of 200)";
 *   4. the coordination protocol over it: kiln_loader_warmup(l, comm) of
 *      scaled_softmax into an empty cache (no KILN_CACHE_PATH layer either)
 *      builds and loads it (one compile), and a second warmup is one
 *      collective; skipped with a note when there is no NVRTC to build with
 *      (a bundle's run: docs/gpu.md).
 * Exits 77 (skipped) with a one-line reason when there is no CUDA device or
 * no libnccl (KILN_NCCL_LIBRARY names one), 1 on any failure.
 *
 * libnccl is dlopen'ed here as well (for the setup calls kiln does not make:
 * the caller owns the ncclComm_t); nccl.h is not needed to build this. In CI
 * it also runs on the fake libcuda and libnccl of tests/fakecuda
 * (integration.gpu_on_fake.coord_nccl), where the timing means nothing. */
#include <dlfcn.h>  /* dlopen */
#include <stdarg.h> /* va_list */
#include <stdint.h> /* uint8_t */
#include <stdio.h>  /* printf */
#include <stdlib.h> /* getenv, malloc, qsort */
#include <string.h> /* memcmp */
#include <time.h>   /* clock_gettime */

#include "kiln/comm.h"         /* kiln_comm_nccl */
#include "kiln/loader.h"       /* kiln_device_count */
#include "kiln/target.h"       /* kiln_nvrtc_version */
#include "loader/coord_nccl.h" /* KILN_NCCL_STAGING_BYTES */
#include "tests/gpu/device.h"  /* dev_open: device 0's primary context current */

#define SKIP 77
#define FRAMES 200
#define WARMUP 20

/* The part of NCCL's ABI this test uses beyond kiln's (common/gpu_abi.h):
 * setting up a communicator, which kiln never does. */
typedef struct {
  char internal[128]; /* NCCL_UNIQUE_ID_BYTES */
} ncclUniqueId;

static struct {
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  const char *(*GetErrorString)(ncclResult_t);
} nc;

static int g_pass, g_fail;

/* "ok   <what>" or "FAIL <what>: <kiln's last error>", counted. */
static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
  va_list ap;
  printf(ok ? "ok   " : "FAIL ");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  if (!ok) printf(": %s", kiln_last_error());
  printf("\n");
  *(ok ? &g_pass : &g_fail) += 1;
}

/* The library kiln will load too (same search), or NULL with why. */
static void *open_nccl(char *why, size_t cap) {
  const char *names[] = {getenv("KILN_NCCL_LIBRARY"), "libnccl.so.2", "libnccl.so"};
  for (size_t i = 0; i < 3; i++) {
    void *h;
    if (!names[i] || !*names[i]) continue;
    if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) return h;
    snprintf(why, cap, "%s", dlerror());
    if (i == 0) break; /* an explicit library is the only one tried, as in kiln */
  }
  return NULL;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void round_trips(kiln_comm *c) {
  static const size_t sizes[] = {1, 4096, ((size_t)1 << 20) + 7};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t n = sizes[i];
    uint8_t *want = malloc(n), *buf = malloc(n);
    if (!want || !buf) {
      check(0, "%zu bytes of host memory", n);
      free(want);
      free(buf);
      return;
    }
    for (size_t j = 0; j < n; j++)
      want[j] = (uint8_t)(j * 131u + 7u);
    memcpy(buf, want, n);
    check(c->broadcast(c->self, buf, n, 0, 10.0) == KILN_OK && !memcmp(buf, want, n),
          "broadcast of %zu bytes comes back exact", n);
    check(c->max_reduce(c->self, buf, n, 10.0) == KILN_OK && !memcmp(buf, want, n),
          "max_reduce of %zu bytes comes back exact", n);
    free(want);
    free(buf);
  }
}

static void frame_round_trip(kiln_comm *c) {
  static uint8_t frame[4096];
  double t[FRAMES];
  for (int i = 0; i < WARMUP + FRAMES; i++) {
    double t0 = now_us();
    if (c->broadcast(c->self, frame, sizeof frame, 0, 10.0) != KILN_OK) {
      check(0, "frame round trip, call %d", i);
      return;
    }
    if (i >= WARMUP) t[i - WARMUP] = now_us() - t0;
  }
  qsort(t, FRAMES, sizeof *t, cmp_double);
  printf("nccl frame round trip: %.1f us (median of %d)\n", (t[FRAMES / 2 - 1] + t[FRAMES / 2]) / 2,
         FRAMES);
  g_pass++;
}

/* The protocol end to end over NCCL, in a fresh cache directory. */
static void warmup_over_nccl(kiln_comm *c) {
  char dir[] = "/tmp/kiln-gpu-coord-XXXXXX";
  kiln_loader_options o = KILN_LOADER_OPTIONS_INIT;
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_loader *l = NULL;
  kiln_coord_report rep;
  int ma, mi;
  if (kiln_nvrtc_version(&ma, &mi) != KILN_OK) {
    printf("note: warmup over NCCL skipped: its cold step builds, and there is no NVRTC (%s)\n",
           kiln_last_error());
    return;
  }
  if (!mkdtemp(dir)) {
    check(0, "mkdtemp");
    return;
  }
  co.dir = dir;
  co.ro_path = ""; /* cold means cold: no layer from KILN_CACHE_PATH */
  o.device = KILN_LOADER_CURRENT_CONTEXT;
  o.cache = &co;
  o.kernels = "scaled_softmax";
  if (kiln_loader_open(&l, &o) != KILN_OK) {
    check(0, "kiln_loader_open on the current context");
    return;
  }
  check(kiln_loader_warmup(l, c) == KILN_OK, "warmup over NCCL, cold cache");
  if (kiln_loader_coord_report(&rep, l) == KILN_OK) {
    check(rep.compiled == 1 && rep.missing == 1, "cold: %zu missing, %zu compiled", rep.missing,
          rep.compiled);
    printf("nccl warmup (cold): %.1f ms, %zu collectives, longest wait %.1f ms (%s)\n",
           rep.total_ms, rep.collectives, rep.longest_wait_ms, rep.longest_what);
  }
  kiln_loader_close(l);
  l = NULL;
  if (kiln_loader_open(&l, &o) != KILN_OK) {
    check(0, "kiln_loader_open again");
    return;
  }
  check(kiln_loader_warmup(l, c) == KILN_OK, "warmup over NCCL, warm cache");
  if (kiln_loader_coord_report(&rep, l) == KILN_OK) {
    check(rep.collectives == 1 && rep.compiled == 0, "warm: %zu collective(s), %zu compiled",
          rep.collectives, rep.compiled);
    printf("nccl warmup (warm): %.2f ms, %zu collective\n", rep.total_ms, rep.collectives);
  }
  kiln_loader_close(l);
  {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
  }
}

int main(void) {
  char why[512] = "", msg[256];
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  kiln_comm *c = NULL;
  ncclResult_t r;
  void *h;
  kiln_status st;
  int n = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if ((st = kiln_device_count(&n)) != KILN_OK || n == 0) {
    printf("gpu.coord_nccl: skipped: %s\n",
           st != KILN_OK ? kiln_last_error() : "the driver reports no CUDA device");
    return SKIP;
  }
  if (!(h = open_nccl(why, sizeof why))) {
    printf("gpu.coord_nccl: skipped: no libnccl (%s)\n", why);
    return SKIP;
  }
  *(void **)&nc.GetUniqueId = dlsym(h, "ncclGetUniqueId");
  *(void **)&nc.CommInitRank = dlsym(h, "ncclCommInitRank");
  *(void **)&nc.CommDestroy = dlsym(h, "ncclCommDestroy");
  *(void **)&nc.GetErrorString = dlsym(h, "ncclGetErrorString");
  if (!nc.GetUniqueId || !nc.CommInitRank || !nc.CommDestroy || !nc.GetErrorString) {
    printf("gpu.coord_nccl: skipped: the libnccl found lacks ncclGetUniqueId/ncclCommInitRank\n");
    return SKIP;
  }
  if (!dev_open(0, msg, sizeof msg)) {
    printf("FAIL device 0: %s\n", msg);
    return 1;
  }
  if ((r = nc.GetUniqueId(&id)) != 0 || (r = nc.CommInitRank(&comm, 1, id, 0)) != 0) {
    printf("FAIL ncclCommInitRank (1 rank): %s\n", nc.GetErrorString(r));
    dev_close();
    return 1;
  }
  if (kiln_comm_nccl(&c, comm, NULL) != KILN_OK) {
    check(0, "kiln_comm_nccl");
  } else {
    check(c->rank == 0 && c->size == 1, "kiln_comm_nccl gives rank %d of %d", c->rank, c->size);
    round_trips(c);
    frame_round_trip(c);
    warmup_over_nccl(c);
    kiln_comm_free(c);
  }
  nc.CommDestroy(comm); /* not aborted: still the caller's */
  dev_close();
  printf("gpu.coord_nccl: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
