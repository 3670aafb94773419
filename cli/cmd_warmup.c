/* kiln warmup: resolve and load every unit on the local GPU(s). */
#include <fnmatch.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

static const char *usage =
    "usage: kiln warmup [--device N|all] [--kernels GLOB] [--verify] [--cache DIR] [--offline]\n"
    "                   [--json]\n"
    "       kiln warmup --comm single|mpi [--arch LIST] [--device N] [--kernels GLOB]\n"
    "                   [--cache DIR] [--offline] [--heartbeat MS] [--timeout S]\n"
    "                   [--peer-timeout S] [--json]\n"
    "       kiln warmup --arch LIST [...]   (as --comm single)\n"
    "\n"
    "Resolves and loads every kernel unit for the local GPU(s), as a training\n"
    "process would: from the cache layers (exact CUBIN, then a compatible CUBIN,\n"
    "then PTX the driver can JIT), else by building it for exactly this arch\n"
    "(one process per cache directory builds; others sharing it wait). With\n"
    "KILN_REMOTE_URL (http(s)://, s3://BUCKET/PREFIX or file:///DIR), what the\n"
    "layers lack is fetched from the remote cache before anything is built.\n"
    "\n"
    "  --device N|all  the CUDA device ordinal, or every device (default: all)\n"
    "  --kernels GLOB  only the units whose names match (shell glob, e.g.\n"
    "                  'scaled_*'; default: every unit of `kiln list`)\n"
    "  --verify        also run a tiny known-answer test of every softmax entry\n"
    "                  point against a CPU reference; a unit that fails is\n"
    "                  quarantined\n"
    "  --cache DIR     primary cache directory (default: KILN_CACHE_DIR, else\n"
    "                  $XDG_CACHE_HOME/kiln, else ~/.cache/kiln); KILN_CACHE_PATH\n"
    "                  adds read-only layers\n"
    "  --offline       never build: a unit missing from the caches is an error\n"
    "                  (as KILN_OFFLINE=1)\n"
    "  --json          print what was loaded, per device and unit, as JSON (with\n"
    "                  --comm: one line of JSON per rank, with its protocol report)\n"
    "\n"
    "Many ranks (docs/coordination.md):\n"
    "  --comm single|mpi  run as one rank of a job: every rank checks its cache,\n"
    "                  rank 0 alone builds what any rank misses and sends it to\n"
    "                  the others while it broadcasts a status frame every\n"
    "                  heartbeat (while it builds, no collective waits longer\n"
    "                  than that); every rank ends with the same code, or the\n"
    "                  same error (a rank that fails on its own reports its\n"
    "                  error and the others KILN_EPEER at once). mpi:\n"
    "                  under mpirun, e.g. `mpirun -np 64 kiln warmup --comm mpi\n"
    "                  --arch 90` warms every node of an allocation\n"
    "  --arch LIST     fill the cache for these targets (as `kiln build --arch`)\n"
    "                  without a GPU; when every rank has one, also load\n"
    "  --device N      with --comm: the device (default: the rank's local rank\n"
    "                  modulo the devices)\n"
    "  --heartbeat MS  status frame period (default KILN_HEARTBEAT_MS or 500)\n"
    "  --timeout S     the builder timeout: the longest wait for the first\n"
    "                  exchange and for rank 0's whole build (default\n"
    "                  KILN_BUILD_TIMEOUT or 1800)\n"
    "  --peer-timeout S  once under way, fail with KILN_EPEER naming rank 0 when\n"
    "                  it sends no status frame for this long (at least two\n"
    "                  heartbeats; default KILN_PEER_TIMEOUT, else 10 s or 20\n"
    "                  heartbeats, whichever is longer)\n"
    "  -h, --help      this help\n"
    "\n"
    "Exit status: 0 when every unit loaded (and verified) or the cache was\n"
    "filled, 1 when any failed or there is no usable GPU, 2 for bad usage or\n"
    "input (a malformed KILN_* variable, a --cache that is not a cache).\n";

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct warm_opts {
  const char *dir, *kernels;
  int offline, verify, json;
} warm_opts;

static json_t *load_json(const kiln_unit_load *u) {
  json_t *o = json_object();
  json_object_set_new(o, "unit", json_string(u->unit));
  json_object_set_new(o, "source", json_string(kiln_load_source_str(u->source)));
  json_object_set_new(o, "target", json_string(u->target));
  json_object_set_new(o, "digest", json_string(u->digest));
  json_object_set_new(o, "layer", json_integer(u->layer));
  json_object_set_new(o, "ms", json_real(u->ms));
  return o;
}

/* Units the glob selects (all when NULL). */
static size_t matching_units(const char *glob) {
  size_t n = 0;
  for (size_t u = 0; u < kiln_unit_count(); u++)
    n += !glob || fnmatch(glob, kiln_unit_at(u)->name, 0) == 0;
  return n;
}

/* Warms one device; prints a line per unit (or adds to arr). 0, 1, or 2
 * when the loader refused its input (KILN_EINVAL: a malformed KILN_*
 * variable, a bad --cache) before it started. */
static int warm_device(int ordinal, const warm_opts *w, json_t *arr) {
  kiln_loader_options o = KILN_LOADER_OPTIONS_INIT;
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_loader *l = NULL;
  kiln_device_info dev;
  kiln_loader_verify_summary vs;
  json_t *dj = json_object(), *units = json_array();
  kiln_status st;
  double t0 = now_ms(), ms;
  char err[4096];
  int rc = EXIT_OK;
  o.device = ordinal;
  co.dir = w->dir;
  o.cache = &co;
  o.offline = w->offline ? 1 : KILN_ENV;
  o.kernels = w->kernels;
  json_object_set_new(dj, "device", json_integer(ordinal));
  if ((st = kiln_loader_open(&l, &o)) != KILN_OK) goto fail;
  kiln_loader_device(&dev, l);
  json_object_set_new(dj, "name", json_string(dev.name));
  json_object_set_new(dj, "arch", json_integer(dev.cc_major * 10 + dev.cc_minor));
  if (!w->json)
    fprintf(stderr, "kiln warmup: device %d (%s, sm_%d%d): loading %zu units...\n", ordinal,
            dev.name, dev.cc_major, dev.cc_minor, matching_units(w->kernels));
  st = kiln_loader_warmup(l, NULL);
  ms = now_ms() - t0;
  snprintf(err, sizeof err, "%s", kiln_last_error());
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    kiln_unit_load ul;
    if (kiln_loader_unit_load(&ul, l, kiln_unit_at(u)->name) != KILN_OK) continue;
    if (w->json)
      json_array_append_new(units, load_json(&ul));
    else
      printf("  %-36s %-17s %-11s %.12s  %.1f ms\n", ul.unit, kiln_load_source_str(ul.source),
             ul.target, ul.digest, ul.ms);
  }
  json_object_set_new(dj, "units", units);
  units = NULL;
  json_object_set_new(dj, "wall_ms", json_real(ms));
  if (st != KILN_OK) goto fail_err;
  if (!w->json)
    printf("kiln warmup: device %d (%s, sm_%d%d): %zu units loaded in %.1f ms\n", ordinal, dev.name,
           dev.cc_major, dev.cc_minor, matching_units(w->kernels), ms);
  if (w->verify) {
    st = kiln_loader_verify(&vs, l);
    json_object_set_new(dj, "verified_entries", json_integer((json_int_t)vs.entries));
    json_object_set_new(dj, "verify_failures", json_integer((json_int_t)vs.failed));
    if (st != KILN_OK) goto fail;
    if (!w->json)
      printf("kiln warmup: device %d: %zu entry points passed the known-answer test\n", ordinal,
             vs.entries);
  }
  goto out;
fail:
  snprintf(err, sizeof err, "%s", kiln_last_error());
fail_err:
  json_object_set_new(dj, "error", json_string(err));
  json_object_set_new(dj, "status", json_string(kiln_status_str(st)));
  fprintf(stderr, "kiln warmup: device %d: %s\n", ordinal, err);
  rc = !l && st == KILN_EINVAL ? EXIT_USAGE : EXIT_FAIL;
out:
  json_decref(units);
  json_array_append_new(arr, dj);
  kiln_loader_close(l);
  return rc;
}

/* Checks the multi-rank options, then runs warmup_ranks. */
/* A seconds flag's value: > 0, at most 7 days. */
static int seconds_arg(const char *flag, const char *v, double *out) {
  char *end = NULL;
  double s = strtod(v, &end);
  if (!*v || *end || !(s > 0) || s > 7 * 24 * 3600.0)
    return cli_usage_error("warmup", "%s '%s': seconds, > 0 and at most 604800 (7 days)", flag, v);
  *out = s;
  return EXIT_OK;
}

static int ranks_main(warmup_ranks_opts *ro, int verify, const char *device, const char *heartbeat,
                      const char *timeout, const char *peer_timeout) {
  char *end = NULL;
  if (!ro->comm) ro->comm = "single";
  if (ro->arch) { /* bad targets are bad usage, found before any rank starts */
    kiln_target *t = NULL;
    size_t nt = 0;
    kiln_status st = kiln_targets_parse_list(&t, &nt, ro->arch);
    free(t);
    if (st != KILN_OK) return cli_error("warmup", st);
  }
  if (strcmp(ro->comm, "single") != 0 && strcmp(ro->comm, "mpi") != 0)
    return cli_usage_error("warmup", "--comm '%s': expected single or mpi", ro->comm);
  if (verify) return cli_usage_error("warmup", "--verify runs without --comm or --arch");
  if (device) {
    long d = strtol(device, &end, 10);
    if (!*device || *end || d < 0 || d > 1023)
      return cli_usage_error("warmup", "--device '%s': with --comm, one ordinal (0, 1, ...)",
                             device);
    ro->device = (int)d;
  }
  if (heartbeat) {
    long ms = strtol(heartbeat, &end, 10);
    if (!*heartbeat || *end || ms < 10 || ms > 60000)
      return cli_usage_error("warmup", "--heartbeat '%s': milliseconds in [10, 60000]", heartbeat);
    ro->heartbeat_s = ms / 1e3;
  }
  if (timeout && seconds_arg("--timeout", timeout, &ro->timeout_s) != EXIT_OK) return EXIT_USAGE;
  if (peer_timeout && seconds_arg("--peer-timeout", peer_timeout, &ro->peer_timeout_s) != EXIT_OK)
    return EXIT_USAGE;
  return warmup_ranks(ro);
}

int cmd_warmup(int argc, char **argv) {
  static const struct option longs[] = {{"device", required_argument, 0, 'd'},
                                        {"verify", no_argument, 0, 'v'},
                                        {"cache", required_argument, 0, 'c'},
                                        {"offline", no_argument, 0, 'o'},
                                        {"json", no_argument, 0, 'J'},
                                        {"help", no_argument, 0, 'h'},
                                        {"kernels", required_argument, 0, 'k'},
                                        {"comm", required_argument, 0, 'C'},
                                        {"arch", required_argument, 0, 'a'},
                                        {"heartbeat", required_argument, 0, 'B'},
                                        {"timeout", required_argument, 0, 'T'},
                                        {"peer-timeout", required_argument, 0, 'P'},
                                        {0, 0, 0, 0}};
  warm_opts w = {NULL, NULL, 0, 0, 0};
  warmup_ranks_opts ro = {
      .device = -1, .timeout_s = KILN_ENV, .heartbeat_s = KILN_ENV, .peer_timeout_s = KILN_ENV};
  const char *device = "all", *heartbeat = NULL, *timeout = NULL, *peer_timeout = NULL;
  int device_set = 0;
  json_t *arr = json_array();
  kiln_status st;
  int c, rc = EXIT_OK, n = 0, first = 0, last;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (c) {
    case 'd':
      device = optarg;
      device_set = 1;
      break;
    case 'C': ro.comm = optarg; break;
    case 'a': ro.arch = optarg; break;
    case 'B': heartbeat = optarg; break;
    case 'T': timeout = optarg; break;
    case 'P': peer_timeout = optarg; break;
    case 'v': w.verify = 1; break;
    case 'c':
      if (cli_cache_arg("warmup", optarg, &w.dir)) {
        json_decref(arr);
        return EXIT_USAGE;
      }
      break;
    case 'o': w.offline = 1; break;
    case 'J': w.json = 1; break;
    case 'k': w.kernels = optarg; break;
    case 'h':
      fputs(usage, stdout);
      json_decref(arr);
      return EXIT_OK;
    default: json_decref(arr); return cli_usage_error("warmup", "bad option");
    }
  }
  if (optind < argc) {
    json_decref(arr);
    return cli_usage_error("warmup", "unexpected argument '%s'", argv[optind]);
  }
  if (w.kernels && matching_units(w.kernels) == 0) {
    char names[1024];
    json_decref(arr);
    return cli_usage_error("warmup", "--kernels '%s' matches no unit; units are: %s", w.kernels,
                           kiln_unit_names(names, sizeof names));
  }
  if (ro.comm || ro.arch) {
    ro.kernels = w.kernels;
    ro.dir = w.dir;
    ro.offline = w.offline;
    ro.json = w.json;
    json_decref(arr);
    return ranks_main(&ro, w.verify, device_set ? device : NULL, heartbeat, timeout, peer_timeout);
  }
  if (heartbeat || timeout) {
    json_decref(arr);
    return cli_usage_error("warmup", "--heartbeat and --timeout go with --comm or --arch");
  }
  if (strcmp(device, "all") != 0) {
    char *end = NULL;
    long d = strtol(device, &end, 10);
    if (!*device || *end || d < 0 || d > 1023) {
      json_decref(arr);
      return cli_usage_error("warmup", "--device '%s': expected an ordinal (0, 1, ...) or 'all'",
                             device);
    }
    first = (int)d;
  }
  if ((st = kiln_device_count(&n)) != KILN_OK || n == 0) {
    fprintf(stderr, "kiln warmup: %s\n",
            st != KILN_OK ? kiln_last_error() : "no CUDA device is visible");
    json_decref(arr);
    /* a KILN_CUDA_LIBRARY that will not load is bad input, as every named library */
    return st == KILN_EINVAL ? EXIT_USAGE : EXIT_FAIL;
  }
  if (first >= n) {
    fprintf(stderr, "kiln warmup: --device %d: this machine has %d device%s (0..%d)\n", first, n,
            n == 1 ? "" : "s", n - 1);
    json_decref(arr);
    return EXIT_USAGE;
  }
  last = strcmp(device, "all") == 0 ? n - 1 : first;
  for (int d = first; d <= last; d++) {
    int drc = warm_device(d, &w, arr);
    if (drc > rc) rc = drc; /* bad input (2) over a failure (1) */
  }
  if (w.json) {
    json_t *o = json_object();
    json_object_set_new(o, "devices", arr);
    json_object_set_new(o, "ok", json_boolean(rc == EXIT_OK));
    cli_print_json(o);
  } else {
    json_decref(arr);
  }
  return rc;
}
