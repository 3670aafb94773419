/* Building a plan (units x targets) into the cache on a thread pool. */
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/pool.h"
#include "compiler/compile.h"
#include "kiln/build.h"

/* Everything here goes into the key. -v only makes ptxas report resources. */
#define KILN_COMPILE_OPTIONS "-std=c++17 --ptxas-options=-v"

typedef struct build_ctx {
  kiln_cache *cache;
  kiln_build_summary *s;
  const kiln_build_options *opts;
  char toolchain[32];
  char (*keys)[65];
  size_t *todo; /* indices of items to compile */
  size_t n_todo, done;
  int failure_ttl;
  pthread_mutex_t lock;
} build_ctx;

const char *kiln_build_compile_options(void) {
  return KILN_COMPILE_OPTIONS;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The last lines of a build log, for error messages. */
static char *log_tail(const char *log, int lines) {
  if (!log) return strdup("");
  size_t len = strlen(log);
  const char *p = log + len;
  while (len && (p[-1] == '\n' || p[-1] == ' ')) p--, len--;
  while (p > log && lines > 0) {
    p--;
    if (*p == '\n') lines--;
  }
  if (p > log || (p == log && *p == '\n')) p++;
  return strndup(p, (size_t)(log + len - p));
}

static void report(build_ctx *b, kiln_build_item *it) {
  pthread_mutex_lock(&b->lock);
  b->done++;
  if (b->opts->progress) b->opts->progress(it, b->done, b->s->n_items, b->opts->user);
  pthread_mutex_unlock(&b->lock);
}

static void fail_item(kiln_build_item *it, kiln_status st, const char *msg) {
  it->outcome = KILN_BUILD_FAILED;
  it->status = st;
  snprintf(it->error, sizeof it->error, "%s", msg);
}

static void compile_task(size_t i, void *user) {
  build_ctx *b = user;
  size_t idx = b->todo[i];
  kiln_build_item *it = &b->s->items[idx];
  kiln_artifact a;
  kiln_record *rec = &it->record;
  kiln_status rc = kiln_compile_unit(&a, it->unit, &it->target, KILN_COMPILE_OPTIONS);
  if (rc != KILN_OK) {
    fail_item(it, rc, kiln_last_error());
    if (rc == KILN_ECOMPILE && a.log) {
      it->log_tail = log_tail(a.log, 20);
      kiln_cache_put_failure(b->cache, b->keys[idx], it->unit->name, it->target_name, a.log,
                             b->failure_ttl);
    }
    goto out;
  }
  memset(rec, 0, sizeof *rec);
  snprintf(rec->key, sizeof rec->key, "%s", b->keys[idx]);
  snprintf(rec->unit, sizeof rec->unit, "%s", it->unit->name);
  snprintf(rec->target, sizeof rec->target, "%s", it->target_name);
  snprintf(rec->kind, sizeof rec->kind, "%s", it->target.kind == KILN_TARGET_PTX ? "ptx" : "cubin");
  snprintf(rec->toolchain, sizeof rec->toolchain, "%s", b->toolchain);
  snprintf(rec->options, sizeof rec->options, "%s", KILN_COMPILE_OPTIONS);
  rec->build_ms = a.ms;
  rec->registers = a.res.registers;
  rec->spill_stores = a.res.spill_stores;
  rec->spill_loads = a.res.spill_loads;
  rec->shared_bytes = a.res.shared_bytes;
  rec->stack_bytes = a.res.stack_bytes;
  rc = kiln_cache_put(b->cache, rec, a.data, a.size, a.log, a.log_len);
  if (rc != KILN_OK) {
    fail_item(it, rc, kiln_last_error());
    goto out;
  }
  it->outcome = KILN_BUILD_BUILT;
  it->status = KILN_OK;
out:
  kiln_artifact_free(&a);
  report(b, it);
}

/* Hits and remembered failures are settled here, before any thread starts. */
static kiln_status settle(build_ctx *b, size_t idx) {
  kiln_build_item *it = &b->s->items[idx];
  char *log = NULL;
  kiln_status rc;
  KILN_CHECK(kiln_cache_key(b->keys[idx], it->unit, it->target_name, KILN_COMPILE_OPTIONS,
                            b->toolchain));
  if (b->opts->rebuild) {
    kiln_cache_clear_failure(b->cache, b->keys[idx]);
  } else {
    rc = kiln_cache_get(b->cache, b->keys[idx], &it->record, NULL, NULL);
    if (rc == KILN_OK) {
      it->outcome = KILN_BUILD_HIT;
      report(b, it);
      return KILN_OK;
    }
    if (rc != KILN_ENOTFOUND) return rc;
    if (kiln_cache_get_failure(b->cache, b->keys[idx], &log) == KILN_OK) {
      char msg[512];
      snprintf(msg, sizeof msg,
               "%s for %s failed to compile recently (remembered for KILN_FAILURE_TTL "
               "seconds; --rebuild retries now)",
               it->unit->name, it->target_name);
      fail_item(it, KILN_ECOMPILE, msg);
      it->log_tail = log_tail(log, 20);
      free(log);
      report(b, it);
      return KILN_OK;
    }
  }
  b->todo[b->n_todo++] = idx;
  rc = KILN_OK;
out:
  return rc;
}

static kiln_status make_plan(kiln_build_summary *s, const kiln_build_options *o) {
  size_t n = 0;
  for (size_t u = 0; u < kiln_unit_count(); u++)
    if (!o->kernels_glob || fnmatch(o->kernels_glob, kiln_unit_at(u)->name, 0) == 0) n++;
  if (n == 0) {
    char names[1024];
    return kiln_fail(KILN_ENOTFOUND, "--kernels '%s' matches no unit; units are: %s",
                     o->kernels_glob, kiln_unit_names(names, sizeof names));
  }
  s->items = calloc(n * o->n_targets, sizeof *s->items);
  if (!s->items) return kiln_fail(KILN_ENOMEM, "out of memory");
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    const kiln_unit_info *unit = kiln_unit_at(u);
    if (o->kernels_glob && fnmatch(o->kernels_glob, unit->name, 0) != 0) continue;
    for (size_t t = 0; t < o->n_targets; t++) {
      kiln_build_item *it = &s->items[s->n_items++];
      it->unit = unit;
      it->target = o->targets[t];
      kiln_target_name(&it->target, it->target_name);
    }
  }
  return KILN_OK;
}

static void summarise(kiln_build_summary *s) {
  s->targets = s->n_items;
  for (size_t i = 0; i < s->n_items; i++) {
    kiln_build_item *it = &s->items[i];
    if (it->outcome == KILN_BUILD_HIT) s->hits++;
    else if (it->outcome == KILN_BUILD_BUILT) s->built++;
    else s->failed++;
    if (it->outcome != KILN_BUILD_FAILED) s->bytes += it->record.size;
  }
}

kiln_status kiln_build(kiln_build_summary **out, kiln_cache *cache, const kiln_build_options *o) {
  build_ctx b;
  kiln_build_summary *s = NULL;
  kiln_status rc;
  double t0 = now_ms();
  int jobs = 0;
  memset(&b, 0, sizeof b);
  pthread_mutex_init(&b.lock, NULL);
  if (!out || !cache || !o || !o->targets || !o->n_targets) {
    rc = kiln_fail(KILN_EINVAL, "kiln_build: no cache, options or targets");
    goto out;
  }
  if (o->version != KILN_BUILD_OPTIONS_VERSION) {
    rc = kiln_fail(KILN_EINVAL, "kiln_build_options: unknown version %d", o->version);
    goto out;
  }
  s = calloc(1, sizeof *s);
  if (!s) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  jobs = o->jobs;
  if (jobs <= 0) KILN_CHECK(kiln_param_jobs(&jobs));
  KILN_CHECK(kiln_toolchain_id(b.toolchain));
  KILN_CHECK(kiln_param_failure_ttl(&b.failure_ttl));
  KILN_CHECK(make_plan(s, o));
  b.cache = cache;
  b.s = s;
  b.opts = o;
  b.keys = calloc(s->n_items, sizeof *b.keys);
  b.todo = calloc(s->n_items, sizeof *b.todo);
  if (!b.keys || !b.todo) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < s->n_items; i++) KILN_CHECK(settle(&b, i));
  KILN_CHECK(kiln_pool_run(b.n_todo, jobs, compile_task, &b));
  summarise(s);
  s->wall_ms = now_ms() - t0;
  *out = s;
  s = NULL;
out:
  kiln_build_summary_free(s);
  free(b.keys);
  free(b.todo);
  pthread_mutex_destroy(&b.lock);
  return rc;
}

void kiln_build_summary_free(kiln_build_summary *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n_items; i++) free(s->items[i].log_tail);
  free(s->items);
  free(s);
}
