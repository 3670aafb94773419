/* kiln check: fail unless every unit has a loadable artifact for every arch —
 * the last step of a container build. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/probe.h"

static const char *usage =
    "usage: kiln check --arch LIST [--cache DIR]... [--kernels GLOB] [--driver X.Y] [--json]\n"
    "\n"
    "Checks that the caches hold, for every kernel unit and every arch in LIST,\n"
    "an artifact the loader would load on a GPU of that arch: the exact CUBIN,\n"
    "a CUBIN of the same major with a lower minor, or PTX the driver can JIT\n"
    "(sm_90a and compute_90 targets need exactly themselves). Each candidate's\n"
    "blob is hashed: a bad one does not count, and is listed (BAD, with the\n"
    "file and what is wrong with it; `kiln cache verify` repairs).\n"
    "Run it as the last step of a container build, so an image never ships\n"
    "without coverage. Nothing is built or changed.\n"
    "\n"
    "  --arch LIST     targets, as `kiln build --arch` (90, sm_90a, compute_90,\n"
    "                  90+ptx, 80,90, all)\n"
    "  --cache DIR     a cache to check; repeat for more (the first is opened as\n"
    "                  the primary layer, the others as read-only layers, and\n"
    "                  KILN_CACHE_PATH is then ignored). Default: the primary\n"
    "                  cache (KILN_CACHE_DIR, ...) and KILN_CACHE_PATH\n"
    "  --kernels GLOB  only the units whose names match\n"
    "  --driver X.Y    the oldest CUDA driver the image must run on (e.g. 12.8):\n"
    "                  PTX newer than it can JIT, or CUBIN built by a newer\n"
    "                  toolkit, does not count (default: any driver)\n"
    "  --json          every (unit, arch) with what would load, as JSON\n"
    "  -h, --help      this help\n"
    "\n"
    "Exit status: 0 when every (unit, arch) is covered, 1 when any is missing\n"
    "(each listed, with the `kiln build` command that fills it), 2 for bad usage\n"
    "or a cache that cannot be opened.\n";

#define MAX_CACHES 16

/* "12.8" -> 12080 */
static int parse_driver(const char *s, int *out) {
  char *end = NULL;
  long ma = strtol(s, &end, 10), mi = 0;
  if (end == s || ma < 1 || ma > 99) return 0;
  if (*end == '.') {
    const char *p = end + 1;
    mi = strtol(p, &end, 10);
    if (end == p || mi < 0 || mi > 99) return 0;
  }
  if (*end) return 0;
  *out = (int)(ma * 1000 + mi * 10);
  return 1;
}

static kiln_status open_caches(kiln_cache **out, const char **dirs, int n) {
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  char ro[8192] = "";
  size_t len = 0;
  o.read_only = 1; /* checking creates, migrates and writes nothing */
  if (n > 0) {
    o.dir = dirs[0];
    for (int i = 1; i < n && len < sizeof ro; i++)
      len += (size_t)snprintf(ro + len, sizeof ro - len, "%s%s", i > 1 ? ":" : "", dirs[i]);
    o.ro_path = ro; /* "" when there is one: no KILN_CACHE_PATH layers */
  }
  return kiln_cache_open(out, &o);
}

static json_t *item_json(const kiln_coverage_item *it) {
  json_t *o = json_object();
  int ok = it->source != KILN_LOAD_NONE;
  json_object_set_new(o, "unit", json_string(it->unit->name));
  json_object_set_new(o, "target", json_string(it->target));
  json_object_set_new(o, "source",
                      ok ? json_string(kiln_load_source_str(it->source)) : json_null());
  json_object_set_new(o, "artifact", ok ? json_string(it->artifact) : json_null());
  json_object_set_new(o, "digest", ok ? json_string(it->digest) : json_null());
  json_object_set_new(o, "layer", ok ? json_integer(it->layer) : json_null());
  return o;
}

/* [{unit, target, artifact, layer, why}] of the candidates whose blob failed */
static json_t *bad_json(const kiln_coverage *c) {
  json_t *v = json_array();
  for (size_t i = 0; i < c->n_bad; i++) {
    json_t *o = json_object();
    json_object_set_new(o, "unit", json_string(c->items[c->bad[i].item].unit->name));
    json_object_set_new(o, "target", json_string(c->items[c->bad[i].item].target));
    json_object_set_new(o, "artifact", json_string(c->bad[i].artifact));
    json_object_set_new(o, "layer", json_integer(c->bad[i].layer));
    json_object_set_new(o, "why", json_string(c->bad[i].why));
    json_array_append_new(v, o);
  }
  return v;
}

static void print_text(const kiln_coverage *c, kiln_cache *cache) {
  size_t by[5] = {0};
  for (size_t i = 0; i < c->n_items; i++)
    by[c->items[i].source]++;
  printf("kiln check: %zu (unit, arch) pairs in %s: %zu loadable (%zu exact CUBIN, %zu compatible "
         "CUBIN, %zu PTX JIT), %zu missing\n",
         c->n_items, kiln_cache_dir(cache), c->n_items - c->missing, by[KILN_LOAD_EXACT],
         by[KILN_LOAD_COMPATIBLE], by[KILN_LOAD_PTX], c->missing);
  for (size_t i = 0; i < c->n_bad; i++) {
    const kiln_coverage_bad *b = &c->bad[i];
    fprintf(stderr, "kiln check: BAD %s %s (layer %d): %s\n", c->items[b->item].unit->name,
            b->artifact, b->layer, b->why);
  }
  for (size_t i = 0; i < c->n_items; i++) {
    const kiln_coverage_item *it = &c->items[i];
    if (it->source != KILN_LOAD_NONE) continue;
    fprintf(stderr,
            "kiln check: MISSING %s for %s: fix with `kiln build --arch %s --kernels %s "
            "--cache %s`\n",
            it->unit->name, it->target, it->target, it->unit->name, kiln_cache_dir(cache));
  }
}

int cmd_check(int argc, char **argv) {
  static const struct option longs[] = {{"arch", required_argument, 0, 'a'},
                                        {"cache", required_argument, 0, 'c'},
                                        {"kernels", required_argument, 0, 'k'},
                                        {"driver", required_argument, 0, 'd'},
                                        {"json", no_argument, 0, 'J'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  const char *arch = NULL, *glob = NULL, *dirs[MAX_CACHES];
  int n_dirs = 0, json = 0, driver = 0, c, rc;
  kiln_target *t = NULL;
  size_t nt = 0;
  kiln_cache *cache = NULL;
  kiln_coverage *cov = NULL;
  kiln_status st;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (c) {
    case 'a': arch = optarg; break;
    case 'k': glob = optarg; break;
    case 'J': json = 1; break;
    case 'c':
      if (n_dirs == MAX_CACHES) return cli_usage_error("check", "at most %d --cache", MAX_CACHES);
      if (cli_cache_arg("check", optarg, &dirs[n_dirs])) return EXIT_USAGE;
      n_dirs++;
      break;
    case 'd':
      if (!parse_driver(optarg, &driver))
        return cli_usage_error("check", "--driver '%s': a CUDA version such as 12.8", optarg);
      break;
    case 'h': fputs(usage, stdout); return EXIT_OK;
    default: return cli_usage_error("check", "bad option");
    }
  }
  if (optind < argc) return cli_usage_error("check", "unexpected argument '%s'", argv[optind]);
  if (!arch) return cli_usage_error("check", "--arch LIST is required (e.g. --arch 80,90)");
  if ((st = kiln_targets_parse_list(&t, &nt, arch)) != KILN_OK) return cli_error("check", st);
  if ((st = open_caches(&cache, dirs, n_dirs)) != KILN_OK) {
    cli_error("check", st);
    rc = EXIT_USAGE;
    goto out;
  }
  if ((st = kiln_coverage_check(&cov, cache, t, nt, glob, driver)) != KILN_OK) {
    rc = cli_error("check", st);
    goto out;
  }
  if (json) {
    json_t *o = json_object(), *items = json_array(), *missing = json_array();
    for (size_t i = 0; i < cov->n_items; i++) {
      json_array_append_new(items, item_json(&cov->items[i]));
      if (cov->items[i].source == KILN_LOAD_NONE) {
        json_t *m = json_object();
        json_object_set_new(m, "unit", json_string(cov->items[i].unit->name));
        json_object_set_new(m, "target", json_string(cov->items[i].target));
        json_array_append_new(missing, m);
      }
    }
    json_object_set_new(o, "cache", json_string(kiln_cache_dir(cache)));
    json_object_set_new(o, "ok", json_boolean(cov->missing == 0));
    json_object_set_new(o, "pairs", json_integer((json_int_t)cov->n_items));
    json_object_set_new(o, "missing", missing);
    json_object_set_new(o, "bad", bad_json(cov));
    json_object_set_new(o, "items", items);
    cli_print_json(o);
  } else {
    print_text(cov, cache);
  }
  rc = cov->missing ? EXIT_FAIL : EXIT_OK;
out:
  kiln_coverage_free(cov);
  kiln_cache_close(cache);
  free(t);
  return rc;
}
