/* kiln probe: what this machine can run and what its caches hold. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/probe.h"

#define PROBE_SCHEMA "kiln-probe/1"

static const char *usage =
    "usage: kiln probe [--cache DIR] [--json]\n"
    "\n"
    "Says what kiln sees, changing nothing: every GPU (name, compute capability,\n"
    "SMs, memory, the driver's CUDA version and the newest PTX ISA it can JIT;\n"
    "no GPU is a valid answer), NVRTC (version and targets, or why not), NCCL\n"
    "(version, or why not), the cache layers (path, writable or read-only,\n"
    "records, bytes), the remote cache (URL, uploads, and for s3:// where its\n"
    "credentials came from, never what they are; nothing is contacted), and for\n"
    "every unit and GPU what the loader would load:\n"
    "exact CUBIN, compatible CUBIN, PTX JIT, or missing (then: would build, or\n"
    "would fail because of KILN_OFFLINE or no NVRTC).\n"
    "\n"
    "  --cache DIR  primary cache (default: KILN_CACHE_DIR, ...); KILN_CACHE_PATH\n"
    "               adds read-only layers\n"
    "  --json       the same as JSON, schema \"" PROBE_SCHEMA "\" (docs/operations.md)\n"
    "  -h, --help   this help\n"
    "\n"
    "Exit status: 0 (whatever it finds), 2 for bad usage.\n";

/* The remote the caches would use (KILN_REMOTE_URL): where it is, whether
 * uploads are on, and for s3:// where its credentials came from (never what
 * they are). Contacts nothing: `kiln doctor` checks it. */
static json_t *remote_json(const kiln_cache *c) {
  const char *url = kiln_cache_remote_url(c), *creds = kiln_cache_remote_credentials(c);
  json_t *o;
  if (!url) return json_null();
  o = json_object();
  json_object_set_new(o, "url", json_string(url));
  json_object_set_new(o, "upload", json_boolean(kiln_cache_remote_upload(c)));
  json_object_set_new(o, "credentials", creds ? json_string(creds) : json_null());
  return o;
}

static json_t *gpu_json(const kiln_device_info *d) {
  json_t *o = json_object();
  char cc[16], drv[16], isa[16];
  snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
  snprintf(drv, sizeof drv, "%d.%d", d->driver_version / 1000, d->driver_version % 1000 / 10);
  snprintf(isa, sizeof isa, "%d.%d", d->ptx_isa / 10, d->ptx_isa % 10);
  json_object_set_new(o, "ordinal", json_integer(d->ordinal));
  json_object_set_new(o, "name", json_string(d->name));
  json_object_set_new(o, "compute_capability", json_string(cc));
  json_object_set_new(o, "sm_count", json_integer(d->sm_count));
  json_object_set_new(o, "memory_bytes", json_integer((json_int_t)d->total_mem));
  json_object_set_new(o, "driver_cuda", json_string(drv));
  json_object_set_new(o, "ptx_isa", json_string(isa));
  return o;
}

/* "library" (the file loaded) and "found_by" of a library already loaded. */
static void library_json(json_t *o, kiln_library which) {
  kiln_library_info info;
  if (kiln_library_get_info(&info, which) != KILN_OK) return;
  json_object_set_new(o, "library", json_string(info.path));
  json_object_set_new(o, "found_by", json_string(info.found_by));
}

static json_t *nvrtc_json(int *have) {
  json_t *o = json_object(), *t = json_array();
  int ma = 0, mi = 0, *archs = NULL;
  size_t n = 0;
  char v[16];
  *have =
      kiln_nvrtc_version(&ma, &mi) == KILN_OK && kiln_nvrtc_supported_archs(&archs, &n) == KILN_OK;
  json_object_set_new(o, "found", json_boolean(*have));
  if (*have) {
    snprintf(v, sizeof v, "%d.%d", ma, mi);
    json_object_set_new(o, "version", json_string(v));
    library_json(o, KILN_LIBRARY_NVRTC);
    for (size_t i = 0; i < n; i++) {
      char name[16];
      snprintf(name, sizeof name, "sm_%d", archs[i]);
      json_array_append_new(t, json_string(name));
    }
    json_object_set_new(o, "targets", t);
  } else {
    json_decref(t);
    json_object_set_new(o, "error", json_string(kiln_last_error()));
  }
  free(archs);
  return o;
}

static json_t *nccl_json(void) {
  json_t *o = json_object();
  kiln_library_info info;
  int v = 0;
  int found = kiln_nccl_version(&v) == KILN_OK &&
              kiln_library_get_info(&info, KILN_LIBRARY_NCCL) == KILN_OK;
  json_object_set_new(o, "found", json_boolean(found));
  if (found) { /* the version as the library formats it (NCCL_VERSION_CODE's two layouts) */
    json_object_set_new(o, "version", json_string(info.version));
    json_object_set_new(o, "library", json_string(info.path));
    json_object_set_new(o, "found_by", json_string(info.found_by));
  } else {
    json_object_set_new(o, "error", json_string(kiln_last_error()));
  }
  return o;
}

static json_t *caches_json(kiln_cache *cache) {
  json_t *a = json_array();
  kiln_cache_layer_info *v = NULL;
  size_t n = 0;
  if (kiln_cache_layers(&v, &n, cache) != KILN_OK) return a;
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_object();
    json_object_set_new(o, "layer", json_integer(v[i].layer));
    json_object_set_new(o, "path", json_string(v[i].path));
    json_object_set_new(o, "writable", json_boolean(v[i].writable));
    json_object_set_new(o, "records", json_integer((json_int_t)v[i].records));
    json_object_set_new(o, "bytes", json_integer((json_int_t)v[i].bytes));
    json_array_append_new(a, o);
  }
  free(v);
  return a;
}

/* What the loader would do for every unit on one GPU. */
static void units_json(json_t *a, kiln_cache *cache, const kiln_device_info *d, int nvrtc,
                       int offline) {
  kiln_target t = {d->cc_major * 10 + d->cc_minor, 0, KILN_TARGET_CUBIN};
  kiln_coverage *cov = NULL;
  if (kiln_coverage_check(&cov, cache, &t, 1, NULL, d->driver_version) != KILN_OK) return;
  for (size_t i = 0; i < cov->n_items; i++) {
    const kiln_coverage_item *it = &cov->items[i];
    json_t *o = json_object();
    int ok = it->source != KILN_LOAD_NONE;
    json_object_set_new(o, "unit", json_string(it->unit->name));
    json_object_set_new(o, "gpu", json_integer(d->ordinal));
    json_object_set_new(o, "target", json_string(it->target));
    json_object_set_new(o, "would_load",
                        json_string(ok ? kiln_load_source_str(it->source) : "missing"));
    json_object_set_new(o, "artifact", ok ? json_string(it->artifact) : json_null());
    json_object_set_new(o, "layer", ok ? json_integer(it->layer) : json_null());
    if (!ok) {
      char why[800] = "would build (NVRTC, once per cache)";
      if (offline)
        snprintf(why, sizeof why, "would fail: KILN_OFFLINE=1 forbids building");
      else if (!nvrtc)
        snprintf(why, sizeof why, "would fail: no NVRTC to build with");
      else if (kiln_probe_can_build(t.arch, d->driver_version) != KILN_OK)
        snprintf(why, sizeof why, "would fail: %s", kiln_last_error());
      json_object_set_new(o, "if_missing", json_string(why));
    }
    json_array_append_new(a, o);
  }
  kiln_coverage_free(cov);
}

static void print_text(json_t *o) {
  json_t *g = json_object_get(o, "gpus"), *v;
  size_t i;
  printf("kiln %s\n", json_string_value(json_object_get(o, "kiln")));
  if (json_array_size(g) == 0)
    printf("GPUs: none (%s)\n", json_string_value(json_object_get(o, "gpu_error")));
  v = json_object_get(o, "driver");
  if (json_is_string(json_object_get(v, "library")))
    printf("CUDA driver: %s (found by %s)\n", json_string_value(json_object_get(v, "library")),
           json_string_value(json_object_get(v, "found_by")));
  json_array_foreach(g, i, v) {
    printf("GPU %lld: %s, sm %s, %lld SMs, %.1f GiB, driver CUDA %s (PTX ISA up to %s)\n",
           (long long)json_integer_value(json_object_get(v, "ordinal")),
           json_string_value(json_object_get(v, "name")),
           json_string_value(json_object_get(v, "compute_capability")),
           (long long)json_integer_value(json_object_get(v, "sm_count")),
           (double)json_integer_value(json_object_get(v, "memory_bytes")) / (1 << 30),
           json_string_value(json_object_get(v, "driver_cuda")),
           json_string_value(json_object_get(v, "ptx_isa")));
  }
  if (json_is_string(json_object_get(o, "offline_error")))
    printf("KILN_OFFLINE: %s\n", json_string_value(json_object_get(o, "offline_error")));
  v = json_object_get(o, "nvrtc");
  if (json_is_true(json_object_get(v, "found")))
    printf("NVRTC %s: %zu targets, %s (found by %s)\n",
           json_string_value(json_object_get(v, "version")),
           json_array_size(json_object_get(v, "targets")),
           json_string_value(json_object_get(v, "library")),
           json_string_value(json_object_get(v, "found_by")));
  else
    printf("NVRTC: not found (%s)\n", json_string_value(json_object_get(v, "error")));
  v = json_object_get(o, "nccl");
  if (json_is_true(json_object_get(v, "found")))
    printf("NCCL %s: %s (found by %s)\n", json_string_value(json_object_get(v, "version")),
           json_string_value(json_object_get(v, "library")),
           json_string_value(json_object_get(v, "found_by")));
  else
    printf("NCCL: not found (%s)\n", json_string_value(json_object_get(v, "error")));
  json_array_foreach(json_object_get(o, "caches"), i, v) {
    char size[32];
    printf("cache layer %lld: %s (%s), %lld records, %s\n",
           (long long)json_integer_value(json_object_get(v, "layer")),
           json_string_value(json_object_get(v, "path")),
           json_is_true(json_object_get(v, "writable")) ? "writable" : "read-only",
           (long long)json_integer_value(json_object_get(v, "records")),
           cli_human_size(size, (uint64_t)json_integer_value(json_object_get(v, "bytes"))));
  }
  v = json_object_get(o, "remote");
  if (json_is_object(v)) {
    json_t *cr = json_object_get(v, "credentials");
    printf("remote: %s (%s)%s%s\n", json_string_value(json_object_get(v, "url")),
           json_is_true(json_object_get(v, "upload")) ? "uploads on" : "read only",
           json_is_string(cr) ? ", credentials: " : "",
           json_is_string(cr) ? json_string_value(cr) : "");
  }
  json_array_foreach(json_object_get(o, "units"), i, v) {
    json_t *art = json_object_get(v, "artifact");
    printf("  GPU %lld %-36s %-17s %s\n", (long long)json_integer_value(json_object_get(v, "gpu")),
           json_string_value(json_object_get(v, "unit")),
           json_string_value(json_object_get(v, "would_load")),
           json_is_string(art) ? json_string_value(art)
                               : json_string_value(json_object_get(v, "if_missing")));
  }
}

int cmd_probe(int argc, char **argv) {
  static const struct option longs[] = {{"cache", required_argument, 0, 'c'},
                                        {"json", no_argument, 0, 'J'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  const char *dir = NULL;
  int json = 0, c, n = 0, nvrtc = 0, offline = 0;
  json_t *o, *gpus = json_array(), *units = json_array();
  kiln_cache *cache = NULL;
  kiln_status st;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (c) {
    case 'c':
      if (cli_cache_arg("probe", optarg, &dir)) {
        json_decref(gpus);
        json_decref(units);
        return EXIT_USAGE;
      }
      break;
    case 'J': json = 1; break;
    case 'h': fputs(usage, stdout); goto usage_out;
    default:
      json_decref(gpus);
      json_decref(units);
      return cli_usage_error("probe", "bad option");
    }
  }
  if (optind < argc) {
    json_decref(gpus);
    json_decref(units);
    return cli_usage_error("probe", "unexpected argument '%s'", argv[optind]);
  }
  o = json_object();
  json_object_set_new(o, "schema", json_string(PROBE_SCHEMA));
  json_object_set_new(o, "kiln", json_string(kiln_version()));
  st = kiln_device_count(&n);
  json_object_set_new(o, "gpu_error",
                      st != KILN_OK ? json_string(kiln_last_error())
                      : n == 0      ? json_string("the driver reports no device")
                                    : json_null());
  if (st == KILN_OK) { /* the driver's library (the error above says why there is none) */
    json_t *drv = json_object();
    library_json(drv, KILN_LIBRARY_CUDA);
    json_object_set_new(o, "driver", drv);
  }
  json_object_set_new(o, "nvrtc", nvrtc_json(&nvrtc));
  json_object_set_new(o, "nccl", nccl_json());
  if (kiln_probe_offline(&offline) != KILN_OK) /* the loader would refuse to open */
    json_object_set_new(o, "offline_error", json_string(kiln_last_error()));
  json_object_set_new(o, "offline", json_boolean(offline));
  if (cli_open_cache(&cache, dir, CLI_CACHE_READ_ONLY) == KILN_OK) {
    json_object_set_new(o, "caches", caches_json(cache));
    json_object_set_new(o, "remote", remote_json(cache));
  } else {
    json_object_set_new(o, "caches", json_array());
    json_object_set_new(o, "cache_error", json_string(kiln_last_error()));
  }
  for (int d = 0; st == KILN_OK && d < n; d++) {
    kiln_device_info info;
    if (kiln_device_get_info(&info, d) != KILN_OK) continue;
    json_array_append_new(gpus, gpu_json(&info));
    if (cache) units_json(units, cache, &info, nvrtc, offline);
  }
  json_object_set_new(o, "gpus", gpus);
  json_object_set_new(o, "units", units);
  gpus = units = NULL;
  if (json)
    cli_print_json(o);
  else {
    print_text(o);
    json_decref(o);
  }
  kiln_cache_close(cache);
  return EXIT_OK;
usage_out:
  json_decref(gpus);
  json_decref(units);
  return EXIT_OK;
}
