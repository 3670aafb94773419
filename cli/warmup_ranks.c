/* `kiln warmup --comm single|mpi`: every rank of a job runs this; the
 * coordination protocol builds what any rank misses once, on rank 0. With
 * --arch it fills the cache for those targets (no GPU needed) and then, when
 * every rank has a GPU, also loads; without --arch it loads on the rank's GPU. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* The rank's index among the ranks of its node, as the launchers export it. */
static int local_rank(int rank) {
  static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                               "LOCAL_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    char *end = NULL;
    long r;
    if (!v || !*v) continue;
    r = strtol(v, &end, 10);
    if (*end == '\0' && r >= 0 && r < 1 << 20) return (int)r;
  }
  return rank;
}

static json_t *report_json(const kiln_coord_report *r) {
  json_t *o = json_object();
  json_object_set_new(o, "slots", json_integer((json_int_t)r->slots));
  json_object_set_new(o, "missing", json_integer((json_int_t)r->missing));
  json_object_set_new(o, "compiled", json_integer((json_int_t)r->compiled));
  json_object_set_new(o, "received", json_integer((json_int_t)r->received));
  json_object_set_new(o, "bytes_received", json_integer((json_int_t)r->bytes_received));
  json_object_set_new(o, "collectives", json_integer((json_int_t)r->collectives));
  json_object_set_new(o, "longest_wait_ms", json_real(r->longest_wait_ms));
  json_object_set_new(o, "longest_wait", json_string(r->longest_what));
  json_object_set_new(o, "compile_cpu_s", json_real(r->compile_cpu_s));
  json_object_set_new(o, "total_ms", json_real(r->total_ms));
  json_object_set_new(o, "fingerprint", json_string(r->fingerprint));
  return o;
}

/* What the cache holds for the filled slots: [{unit, target, digest}]. */
static json_t *artifacts_json(kiln_cache *cache, const kiln_target *t, size_t nt,
                              const char *glob) {
  json_t *a = json_array();
  char toolchain[32];
  if (kiln_toolchain_id(toolchain) != KILN_OK) return a;
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    const kiln_unit_info *unit = kiln_unit_at(u);
    if (glob && fnmatch(glob, unit->name, 0) != 0) continue;
    for (size_t i = 0; i < nt; i++) {
      char name[16], key[65];
      kiln_record rec;
      json_t *o = json_object();
      kiln_target_name(&t[i], name);
      json_object_set_new(o, "unit", json_string(unit->name));
      json_object_set_new(o, "target", json_string(name));
      if (kiln_cache_key(key, unit, name, kiln_build_compile_options(), toolchain) == KILN_OK &&
          kiln_cache_get(&rec, NULL, NULL, cache, key) == KILN_OK)
        json_object_set_new(o, "digest", json_string(rec.digest));
      else
        json_object_set_new(o, "digest", json_null());
      json_array_append_new(a, o);
    }
  }
  return a;
}

/* One small collective: 1 when any rank has no usable GPU. */
static kiln_status any_without_gpu(const kiln_comm *c, double timeout_s, int *out) {
  int n = 0;
  *out = kiln_device_count(&n) != KILN_OK || n == 0;
  return kiln_coord_any(out, c, timeout_s);
}

/* This rank cannot take part (st, with kiln's last error, says why): it
 * still joins the others' first exchange, as failed, so they stop now
 * instead of waiting out the timeout for it. */
static kiln_status cannot_start(const kiln_comm *c, double timeout_s, kiln_status st, char *err,
                                size_t cap) {
  snprintf(err, cap, "%s", kiln_last_error());
  kiln_coord_fail(c, timeout_s); /* if even that fails, the others time out */
  return st;
}

/* Loads on this rank's GPU through the protocol (a warm cache: one collective). */
static kiln_status load_here(const warmup_ranks_opts *o, const kiln_comm *c, json_t *out,
                             kiln_coord_report *rep, char *err, size_t cap) {
  kiln_loader_options lo = KILN_LOADER_OPTIONS_INIT;
  kiln_cache_options lco = KILN_CACHE_OPTIONS_INIT;
  kiln_loader *l = NULL;
  kiln_device_info dev;
  json_t *units = json_array();
  int n = 0;
  kiln_status st;
  if ((st = kiln_device_count(&n)) != KILN_OK || n == 0) {
    st = kiln_comm_error(KILN_EDRIVER,
                         "no usable GPU on this rank (%s); `kiln warmup --comm %s --arch LIST` "
                         "fills caches without one",
                         st != KILN_OK ? kiln_last_error() : "the driver reports no device",
                         c->name);
    st = cannot_start(c, o->timeout_s, st, err, cap);
    goto out;
  }
  lo.device = o->device >= 0 ? o->device : local_rank(c->rank) % (n ? n : 1);
  lco.dir = o->dir;
  lo.cache = &lco;
  lo.offline = o->offline ? 1 : KILN_ENV;
  lo.kernels = o->kernels;
  lo.build_timeout_s = o->timeout_s;
  lo.heartbeat_s = o->heartbeat_s;
  lo.peer_timeout_s = o->peer_timeout_s;
  if ((st = kiln_loader_open(&l, &lo)) != KILN_OK) {
    st = cannot_start(c, o->timeout_s, st, err, cap);
    goto out;
  }
  kiln_loader_device(&dev, l);
  json_object_set_new(out, "device", json_integer(dev.ordinal));
  json_object_set_new(out, "gpu", json_string(dev.name));
  st = kiln_loader_warmup(l, c);
  if (st != KILN_OK) snprintf(err, cap, "%s", kiln_last_error()); /* before the lookups below */
  kiln_loader_coord_report(rep, l);
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    kiln_unit_load ul;
    json_t *j;
    if (kiln_loader_unit_load(&ul, l, kiln_unit_at(u)->name) != KILN_OK) continue;
    j = json_object();
    json_object_set_new(j, "unit", json_string(ul.unit));
    json_object_set_new(j, "source", json_string(kiln_load_source_str(ul.source)));
    json_object_set_new(j, "target", json_string(ul.target));
    json_object_set_new(j, "digest", json_string(ul.digest));
    json_array_append_new(units, j);
  }
out:
  if (st != KILN_OK && !*err) snprintf(err, cap, "%s", kiln_last_error());
  json_object_set_new(out, "units", units);
  kiln_loader_close(l);
  return st;
}

/* Rank 0 shows the build on stderr, a line per settled (unit, target). */
static void show_progress(unsigned done, unsigned total, const char *unit, const char *target,
                          double elapsed_s, void *user) {
  unsigned *shown = user;
  if (done == *shown || !*unit) return;
  *shown = done;
  fprintf(stderr, "kiln warmup: rank 0 built %u/%u: %s %s (%.1f s)\n", done, total, unit, target,
          elapsed_s);
}

static kiln_status fill_here(const warmup_ranks_opts *o, const kiln_comm *c, json_t *out,
                             kiln_coord_report *rep, char *err, size_t cap) {
  kiln_coord_options co = KILN_COORD_OPTIONS_INIT;
  kiln_cache *cache = NULL;
  unsigned shown = 0;
  kiln_target *t = NULL;
  size_t nt = 0;
  kiln_status st;
  if ((st = kiln_targets_parse_list(&t, &nt, o->arch)) != KILN_OK ||
      (st = cli_open_cache(&cache, o->dir, 1)) != KILN_OK) {
    st = cannot_start(c, o->timeout_s, st, err, cap);
    goto out;
  }
  co.targets = t;
  co.n_targets = nt;
  co.kernels = o->kernels;
  co.timeout_s = o->timeout_s;
  co.heartbeat_s = o->heartbeat_s;
  co.peer_timeout_s = o->peer_timeout_s;
  co.offline = o->offline ? 1 : KILN_ENV;
  if (c->rank == 0 && !o->json) {
    co.progress = show_progress;
    co.user = &shown;
  }
  st = kiln_coord_fill(rep, cache, &co, c);
out:
  if (st != KILN_OK && !*err) snprintf(err, cap, "%s", kiln_last_error()); /* before lookups */
  if (cache) json_object_set_new(out, "artifacts", artifacts_json(cache, t, nt, o->kernels));
  kiln_cache_close(cache);
  free(t);
  return st;
}

static void print_summary(const kiln_comm *c, const kiln_coord_report *r, const char *what) {
  printf("kiln warmup: %d rank%s (%s): %s: %zu slot%s per rank, %zu missing in the union, "
         "%zu compiled on rank 0 (%.1f CPU s), %zu received here; longest collective wait "
         "%.1f ms (%s); %zu collectives, %.2f s\n",
         c->size, c->size == 1 ? "" : "s", c->name, what, r->slots, r->slots == 1 ? "" : "s",
         r->missing, r->compiled, r->compile_cpu_s, r->received, r->longest_wait_ms,
         r->longest_what, r->collectives, r->total_ms / 1e3);
}

int warmup_ranks(const warmup_ranks_opts *o) {
  kiln_comm *c = NULL;
  kiln_coord_report rep, fill_rep;
  json_t *out = json_object();
  char err[4096] = "";
  kiln_status st;
  int no_gpu = 0, rc = EXIT_OK;
  memset(&rep, 0, sizeof rep);
  memset(&fill_rep, 0, sizeof fill_rep);
  if ((st = kiln_comm_open(&c, o->comm)) != KILN_OK) {
    json_decref(out);
    return cli_error("warmup", st);
  }
  json_object_set_new(out, "rank", json_integer(c->rank));
  json_object_set_new(out, "size", json_integer(c->size));
  json_object_set_new(out, "comm", json_string(c->name));
  if (o->arch) {
    st = fill_here(o, c, out, &fill_rep, err, sizeof err);
    if (st == KILN_OK && !o->json && c->rank == 0) print_summary(c, &fill_rep, "cache filled");
    json_object_set_new(out, "fill", report_json(&fill_rep));
    if (st == KILN_OK && (st = any_without_gpu(c, o->timeout_s, &no_gpu)) != KILN_OK)
      snprintf(err, sizeof err, "%s", kiln_last_error());
    if (st == KILN_OK && no_gpu) {
      json_object_set_new(out, "loaded", json_false());
      if (!o->json && c->rank == 0)
        printf("kiln warmup: %s: the cache is filled, nothing loaded\n",
               c->size == 1 ? "no GPU here" : "not every rank has a GPU");
    } else if (st == KILN_OK) {
      st = load_here(o, c, out, &rep, err, sizeof err);
      json_object_set_new(out, "loaded", json_boolean(st == KILN_OK));
      json_object_set_new(out, "load", report_json(&rep));
    }
  } else {
    st = load_here(o, c, out, &rep, err, sizeof err);
    json_object_set_new(out, "load", report_json(&rep));
  }
  if (st == KILN_OK && !o->json && c->rank == 0 && !no_gpu) print_summary(c, &rep, "loaded");
  if (st != KILN_OK) {
    fprintf(stderr, "kiln warmup: rank %d/%d: %s: %s\n", c->rank, c->size, kiln_status_str(st),
            err);
    json_object_set_new(out, "error", json_string(err));
    /* EINVAL: input refused where it is first read (a malformed KILN_*
     * variable, a --cache that is not a cache): bad input, as in kiln build */
    rc = st == KILN_EINVAL ? EXIT_USAGE : EXIT_FAIL;
  }
  json_object_set_new(out, "status", json_string(kiln_status_str(st)));
  json_object_set_new(out, "ok", json_boolean(st == KILN_OK));
  if (o->json) {
    double longest = rep.longest_wait_ms > fill_rep.longest_wait_ms ? rep.longest_wait_ms
                                                                    : fill_rep.longest_wait_ms;
    json_object_set_new(out, "longest_wait_ms", json_real(longest));
    char *line = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (line) printf("%s\n", line); /* one line per rank: ranks share mpirun's stdout */
    free(line);
    json_decref(out);
  } else {
    json_decref(out);
  }
  fflush(stdout);
  fflush(stderr);
  kiln_comm_free(c);
  return rc;
}
