/* loader_warm — warm start: with every unit already in a local cache for
 * this device's arch, how long does kiln_loader_warmup take to load every
 * unit? Target: 50 ms for that load (bench/README.md). The open before it
 * (libcuda, cuInit, the context, the cache) is timed and reported apart.
 *
 * The cache is built first with kiln_build for sm_XY (outside any timed
 * region) into a temp directory; loaders open it alone (ro_path "") and
 * offline, so a miss is an error, never a compile. Three figures, each the
 * median over its runs:
 *   in-process       --runs loaders opened and closed in one process, while
 *                    the process holds the device's primary context (as a
 *                    framework that initialised CUDA does);
 *   fresh, CUDA up   the bench re-executes itself --procs times; each child
 *                    loads libcuda, runs cuInit and retains the context,
 *                    then times one open and one warmup;
 *   fresh, cold      as above, but without CUDA set up first: libcuda's
 *                    load, cuInit and creating the context fall in the
 *                    open, never in the load.
 *
 * usage: loader_warm [--runs N] [--procs N]
 * Without a GPU it prints why and exits 0. */
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h" /* bench_have_device: the skip line */
#include "kiln/build.h"
#include "kiln/kernels.h"
#include "kiln/loader.h"
#include "loader/driver.h" /* kiln_cuda(): hold the primary context */

#define TARGET_MS 50.0
#define MAX_RUNS 100

extern char **environ;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One warm start on dir: open, then warmup, every unit from an exact CUBIN.
 * *open_ms gets the open (driver and context set-up included where the
 * process had none), *load_ms the warmup alone. */
static int warm_start(const char *dir, double *load_ms, double *open_ms) {
  kiln_loader_options o = KILN_LOADER_OPTIONS_INIT;
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_loader *l = NULL;
  int ok = 1;
  double t0, t1, t2;
  co.dir = dir;
  co.ro_path = "";
  o.device = 0;
  o.cache = &co;
  o.offline = 1;
  t0 = now_ms();
  if (kiln_loader_open(&l, &o) != KILN_OK) goto fail;
  t1 = now_ms();
  if (kiln_loader_warmup(l, NULL) != KILN_OK) goto fail;
  t2 = now_ms();
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    kiln_unit_load ul;
    if (kiln_loader_unit_load(&ul, l, kiln_unit_at(u)->name) != KILN_OK ||
        ul.source != KILN_LOAD_EXACT) {
      fprintf(stderr, "loader_warm: %s was not loaded from an exact CUBIN\n",
              kiln_unit_at(u)->name);
      ok = 0;
    }
  }
  *load_ms = t2 - t1;
  *open_ms = t1 - t0;
  kiln_loader_close(l);
  return ok;
fail:
  fprintf(stderr, "loader_warm: %s\n", kiln_last_error());
  kiln_loader_close(l);
  return 0;
}

/* The holder of the primary context, as a framework would be. */
static int hold_context(CUcontext *ctx, CUdevice *dev) {
  const kiln_cuda_api *cu;
  return kiln_cuda(&cu) == KILN_OK && cu->DeviceGet(dev, 0) == CUDA_SUCCESS &&
         cu->DevicePrimaryCtxRetain(ctx, *dev) == CUDA_SUCCESS;
}

/* Child: "cold" or "ctx"; prints "<load ms> <open ms>". */
static int child(const char *mode, const char *dir) {
  CUcontext ctx;
  CUdevice dev;
  double load, open_ms;
  if (strcmp(mode, "ctx") == 0 && !hold_context(&ctx, &dev)) return 1;
  if (!warm_start(dir, &load, &open_ms)) return 1;
  printf("%.3f %.3f\n", load, open_ms);
  return 0;
}

/* Runs this binary as a child in mode; its figures into load/open_ms. */
static int spawn_child(const char *mode, const char *dir, double *load, double *open_ms) {
  char *args[] = {"/proc/self/exe", "--child", (char *)mode, (char *)dir, NULL};
  posix_spawn_file_actions_t fa;
  char buf[128] = "";
  int fds[2], status = 0, ok = 0;
  pid_t pid;
  ssize_t got;
  if (pipe(fds) != 0) return 0;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  if (posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, environ) == 0) {
    close(fds[1]);
    size_t len = 0;
    while (len < sizeof buf - 1 && (got = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0)
      len += (size_t)got;
    buf[len] = '\0';
    waitpid(pid, &status, 0);
    ok =
        WIFEXITED(status) && WEXITSTATUS(status) == 0 && sscanf(buf, "%lf %lf", load, open_ms) == 2;
  } else {
    close(fds[1]);
  }
  close(fds[0]);
  posix_spawn_file_actions_destroy(&fa);
  return ok;
}

/* Builds every unit for sm_XY into dir (no other layer). */
static int build_cache(const char *dir, const kiln_device_info *info, double *ms) {
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_build_options bo = KILN_BUILD_OPTIONS_INIT;
  kiln_build_summary *sum = NULL;
  kiln_cache *cache = NULL;
  kiln_target *t = NULL;
  size_t nt = 0;
  char list[16];
  int ok = 0;
  double t0 = now_ms();
  co.dir = dir;
  co.ro_path = "";
  snprintf(list, sizeof list, "sm_%d%d", info->cc_major, info->cc_minor);
  if (kiln_cache_open(&cache, &co) == KILN_OK &&
      kiln_targets_parse_list(&t, &nt, list) == KILN_OK) {
    bo.targets = t;
    bo.n_targets = nt;
    ok = kiln_build(&sum, cache, &bo) == KILN_OK && sum->failed == 0;
  }
  if (!ok) fprintf(stderr, "loader_warm: build %s: %s\n", list, kiln_last_error());
  *ms = now_ms() - t0;
  kiln_build_summary_free(sum);
  free(t);
  kiln_cache_close(cache);
  return ok;
}

/* One line of the table; 0 when a run failed. */
static int row(const char *what, double *t, double *o, int n, int want) {
  double med, omed;
  if (n == 0) {
    printf("%-40s %10s\n", what, "failed");
    return 0;
  }
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  qsort(o, (size_t)n, sizeof *o, cmp_double);
  med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  omed = n % 2 ? o[n / 2] : 0.5 * (o[n / 2 - 1] + o[n / 2]);
  printf("%-40s %10.2f %10.2f %10.2f %10.2f %8.2f  (%d runs)\n", what, omed, med, t[0], t[n - 1],
         med / TARGET_MS, n);
  return n == want;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static int parse_count(const char *s, int *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < 1 || v > MAX_RUNS) return 0;
  *out = (int)v;
  return 1;
}

int main(int argc, char **argv) {
  kiln_device_info info;
  double t[MAX_RUNS], o[MAX_RUNS], build_ms = 0;
  const char *tmp = getenv("TMPDIR");
  char dir[4096];
  CUcontext ctx = NULL;
  CUdevice dev = 0;
  int runs = 10, procs = 5, n = 0, k, rc = 1;
  if (argc == 4 && strcmp(argv[1], "--child") == 0) return child(argv[2], argv[3]);
  for (int i = 1; i < argc; i++) {
    int ok = i + 1 < argc;
    if (ok && strcmp(argv[i], "--runs") == 0)
      ok = parse_count(argv[++i], &runs);
    else if (ok && strcmp(argv[i], "--procs") == 0)
      ok = parse_count(argv[++i], &procs);
    else
      ok = 0;
    if (!ok) {
      fprintf(stderr, "usage: loader_warm [--runs N] [--procs N]   (N <= %d)\n", MAX_RUNS);
      return 2;
    }
  }
  if (!bench_have_device("loader_warm")) return 0;
  if (kiln_device_get_info(&info, 0) != KILN_OK) {
    fprintf(stderr, "loader_warm: %s\n", kiln_last_error());
    return 1;
  }
  snprintf(dir, sizeof dir, "%s/kiln-loader-warm-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("loader_warm: mkdtemp");
    return 1;
  }
  if (!build_cache(dir, &info, &build_ms)) goto out;
  printf("# loader_warm: %s (sm_%d%d), driver %d; %zu units as sm_%d%d CUBIN in %s (built in %.0f "
         "ms, not timed); target %.0f ms\n",
         info.name, info.cc_major, info.cc_minor, info.driver_version, kiln_unit_count(),
         info.cc_major, info.cc_minor, dir, build_ms, TARGET_MS);
  printf("%-40s %10s %10s %10s %10s %8s\n", "medians", "open ms", "load ms", "min", "max",
         "load/50");
  if (!hold_context(&ctx, &dev)) {
    fprintf(stderr, "loader_warm: could not retain the primary context\n");
    goto out;
  }
  for (k = n = 0; k < runs; k++)
    if (warm_start(dir, &t[n], &o[n])) n++;
  rc = !row("in-process (context held)", t, o, n, runs);
  for (k = n = 0; k < procs; k++)
    if (spawn_child("ctx", dir, &t[n], &o[n])) n++;
  rc |= !row("fresh process, CUDA up", t, o, n, procs);
  for (k = n = 0; k < procs; k++)
    if (spawn_child("cold", dir, &t[n], &o[n])) n++;
  rc |= !row("fresh process, cold (cuInit, context)", t, o, n, procs);
out:
  if (ctx) {
    const kiln_cuda_api *cu;
    if (kiln_cuda(&cu) == KILN_OK) cu->DevicePrimaryCtxRelease(dev);
  }
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return rc;
}
