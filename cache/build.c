/* Building a plan (units x targets) into the cache on a thread pool. */
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/lease.h"
#include "cache/store.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/pool.h"
#include "compiler/compile.h"
#include "kiln/build.h"
#include "kiln/remote.h"

/* Everything here goes into the key. -v only makes ptxas report resources. */
#define KILN_COMPILE_OPTIONS "-std=c++17 --ptxas-options=-v"

#define NO_PAIR ((size_t)-1)

/* What one pool task compiles: item idx, and item ptx (the PTX of the same
 * unit and arch) from the same compile unless NO_PAIR. */
typedef struct build_task {
  size_t idx, ptx;
  /* the order (longest_first) */
  const kiln_unit_info *unit;
  size_t unit_bytes;
  int rank; /* 3 a pair, 2 a CUBIN, 1 a PTX alone */
  int arch;
} build_task;

typedef struct build_ctx {
  kiln_cache *cache;
  kiln_build_summary *s;
  const kiln_build_options *opts;
  char toolchain[32];
  const char *options; /* kiln_build_compile_options() */
  char (*keys)[65];
  size_t *todo; /* indices of items to compile */
  build_task *tasks;
  size_t n_tasks;
  size_t n_todo, done;
  int failure_ttl;
  int64_t stale_ms, wait_ms;
  int jobs, offline; /* resolved from the options and the environment */
  pthread_mutex_t lock;
  /* the heartbeat that renews this handle's leases while it compiles */
  pthread_t hb_thread;
  pthread_cond_t hb_cond;
  int hb_started, hb_stop;
} build_ctx;

static char compile_options[256] = KILN_COMPILE_OPTIONS;
static pthread_once_t compile_options_once = PTHREAD_ONCE_INIT;

/* KILN_NVRTC_OPTIONS is read once per process: every key of a run agrees. A
 * malformed value leaves the base options (kiln_build then fails on it). */
static void read_compile_options(void) {
  const char *extra = NULL;
  size_t len = strlen(compile_options);
  if (kiln_param_nvrtc_options_checked(&extra) != KILN_OK || !extra) return;
  /* one space between options, whatever the variable had: same options, same key */
  for (const char *p = extra; *p && len + 2 < sizeof compile_options; p++) {
    if (*p == ' ' && (p[1] == ' ' || p[1] == '\0')) continue;
    if (*p == ' ' && compile_options[len - 1] == ' ') continue;
    if (*p != ' ' && (p == extra || p[-1] == ' ') && compile_options[len - 1] != ' ')
      compile_options[len++] = ' ';
    compile_options[len++] = *p;
  }
  compile_options[len] = '\0';
}

const char *kiln_build_compile_options(void) {
  pthread_once(&compile_options_once, read_compile_options);
  return compile_options;
}

/* The last lines of a build log, for error messages. */
static char *log_tail(const char *log, int lines) {
  if (!log) return strdup("");
  size_t len = strlen(log);
  const char *p = log + len;
  while (len && (p[-1] == '\n' || p[-1] == ' '))
    p--, len--;
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

/* Stores what compiling item idx gave (a record, or a remembered failure),
 * logs the run, releases the item's lease and reports it. */
static void finish_item(build_ctx *b, size_t idx, kiln_status rc, kiln_artifact *a, int64_t started,
                        double ms) {
  kiln_build_item *it = &b->s->items[idx];
  kiln_record *rec = &it->record;
  if (kiln_builds_add(b->cache, b->keys[idx], it->unit->name, it->target_name, started, ms,
                      rc == KILN_OK) != KILN_OK)
    kiln_log(KILN_LOG_WARN, "%s", kiln_last_error());
  if (rc != KILN_OK) {
    fail_item(it, rc, kiln_last_error());
    if (rc == KILN_ECOMPILE && a->log) {
      it->log_tail = log_tail(a->log, 20);
      kiln_cache_put_failure(b->cache, b->keys[idx], it->unit->name, it->target_name, a->log,
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
  snprintf(rec->options, sizeof rec->options, "%s", b->options);
  rec->build_ms = a->ms;
  rec->registers = a->res.registers;
  rec->spill_stores = a->res.spill_stores;
  rec->spill_loads = a->res.spill_loads;
  rec->shared_bytes = a->res.shared_bytes;
  rec->stack_bytes = a->res.stack_bytes;
  rc = kiln_cache_put(b->cache, rec, a->data, a->size, a->log, a->log_len);
  if (rc != KILN_OK) {
    char msg[sizeof it->error];
    snprintf(msg, sizeof msg, "storing its record %.12s: %s", rec->key, kiln_last_error());
    fail_item(it, rc, msg);
    goto out;
  }
  it->outcome = KILN_BUILD_BUILT;
  it->status = KILN_OK;
out:
  /* After the record (or the failure) is in: a waiter that sees the lease
   * gone finds the result. */
  if (kiln_lease_release(b->cache, b->keys[idx]) != KILN_OK)
    kiln_log(KILN_LOG_WARN, "%s", kiln_last_error());
  report(b, it);
}

/* One task: an item's compile, or a CUBIN's and the PTX of the same unit
 * and arch from that one compile (kiln_compile_unit_pair). */
static void compile_task(size_t i, void *user) {
  build_ctx *b = user;
  const build_task *t = &b->tasks[i];
  kiln_build_item *it = &b->s->items[t->idx];
  kiln_artifact a, p;
  int64_t started = kiln_wall_ms() / 1000;
  double t0 = kiln_clock_ms(), cpu0 = kiln_thread_cpu_s(), ms;
  kiln_status rc = t->ptx == NO_PAIR
                       ? kiln_compile_unit(&a, it->unit, &it->target, b->options)
                       : kiln_compile_unit_pair(&a, &p, it->unit, &it->target, b->options);
  double cpu = kiln_thread_cpu_s() - cpu0;
  ms = kiln_clock_ms() - t0;
  finish_item(b, t->idx, rc, &a, started, ms);
  kiln_artifact_free(&a);
  if (t->ptx != NO_PAIR) {
    kiln_build_item *pt = &b->s->items[t->ptx];
    kiln_status prc = rc;
    if (rc != KILN_OK) { /* ptxas may reject what compute_XY's PTX alone allows */
      t0 = kiln_clock_ms();
      cpu0 = kiln_thread_cpu_s();
      prc = kiln_compile_unit(&p, pt->unit, &pt->target, b->options);
      cpu += kiln_thread_cpu_s() - cpu0;
      ms = kiln_clock_ms() - t0;
    }
    finish_item(b, t->ptx, prc, &p, started, ms);
    kiln_artifact_free(&p);
  }
  pthread_mutex_lock(&b->lock);
  b->s->compile_cpu_s += cpu;
  pthread_mutex_unlock(&b->lock);
}

/* Settles idx from the cache: a record is `hit` (HIT, or SHARED when another
 * process built it while we waited), an unexpired failure is FAILED.
 * *settled = 0 when there is neither. */
static kiln_status settle_from_cache(build_ctx *b, size_t idx, kiln_build_outcome hit,
                                     int *settled) {
  kiln_build_item *it = &b->s->items[idx];
  char *log = NULL;
  kiln_record want;
  kiln_status rc;
  /* a record must be what its key was made of: any other is dropped */
  memset(&want, 0, sizeof want);
  snprintf(want.unit, sizeof want.unit, "%s", it->unit->name);
  snprintf(want.target, sizeof want.target, "%s", it->target_name);
  snprintf(want.kind, sizeof want.kind, "%s", it->target.kind == KILN_TARGET_PTX ? "ptx" : "cubin");
  snprintf(want.toolchain, sizeof want.toolchain, "%s", b->toolchain);
  snprintf(want.options, sizeof want.options, "%s", b->options);
  rc = kiln_cache_get_want(&it->record, NULL, NULL, b->cache, b->keys[idx], &want);
  *settled = 1;
  if (rc == KILN_OK) {
    it->outcome = hit;
    report(b, it);
    return KILN_OK;
  }
  if (rc != KILN_ENOTFOUND) { /* a blob that cannot be read (EACCES, EIO): this item fails */
    fail_item(it, rc, kiln_last_error());
    report(b, it);
    return KILN_OK;
  }
  if (kiln_cache_get_failure(&log, b->cache, b->keys[idx]) == KILN_OK) {
    char msg[512];
    snprintf(msg, sizeof msg,
             "%s for %s failed to compile%s (remembered for KILN_FAILURE_TTL seconds; "
             "--rebuild retries now)",
             it->unit->name, it->target_name,
             hit == KILN_BUILD_SHARED ? " in another process sharing the cache" : " recently");
    fail_item(it, KILN_ECOMPILE, msg);
    it->log_tail = log_tail(log, 20);
    free(log);
    report(b, it);
    return KILN_OK;
  }
  *settled = 0;
  return KILN_OK;
}

/* Hits and remembered failures are settled here, before any thread starts. */
static kiln_status settle(build_ctx *b, size_t idx) {
  kiln_build_item *it = &b->s->items[idx];
  kiln_status rc;
  int settled = 0;
  KILN_CHECK(kiln_cache_key(b->keys[idx], it->unit, it->target_name, b->options, b->toolchain));
  if (b->opts->rebuild) {
    kiln_cache_clear_failure(b->cache, b->keys[idx]);
  } else {
    KILN_CHECK(settle_from_cache(b, idx, KILN_BUILD_HIT, &settled));
    if (settled) return KILN_OK;
  }
  b->todo[b->n_todo++] = idx;
  rc = KILN_OK;
out:
  return rc;
}

/* ---- single flight ---- */

static void *heartbeat_main(void *user) {
  build_ctx *b = user;
  int64_t every = b->stale_ms / 4;
  if (every < 20) every = 20;
  if (every > 5000) every = 5000;
  pthread_mutex_lock(&b->lock);
  while (!b->hb_stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += every / 1000;
    ts.tv_nsec += (every % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&b->hb_cond, &b->lock, &ts);
    if (b->hb_stop) break;
    pthread_mutex_unlock(&b->lock);
    if (kiln_lease_renew(b->cache) != KILN_OK)
      kiln_log(KILN_LOG_WARN, "build lease heartbeat: %s", kiln_last_error());
    pthread_mutex_lock(&b->lock);
  }
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

static void heartbeat_start(build_ctx *b) {
  if (b->hb_started) return;
  b->hb_started = pthread_create(&b->hb_thread, NULL, heartbeat_main, b) == 0;
  if (!b->hb_started) kiln_log(KILN_LOG_WARN, "could not start the build lease heartbeat");
}

static void heartbeat_stop(build_ctx *b) {
  if (!b->hb_started) return;
  pthread_mutex_lock(&b->lock);
  b->hb_stop = 1;
  pthread_cond_signal(&b->hb_cond);
  pthread_mutex_unlock(&b->lock);
  pthread_join(b->hb_thread, NULL);
  b->hb_started = 0;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Fetches the items this process holds the lease for from the remote cache
 * (one parallel batch); those it gets are settled (FETCHED) and their leases
 * released, the rest stay in mine[] to be compiled. */
static kiln_status fetch_mine(build_ctx *b, size_t *mine, size_t *n_mine) {
  kiln_remote_item *items;
  size_t kept = 0;
  if (b->opts->no_remote || b->opts->rebuild || !kiln_cache_remote_url(b->cache)) return KILN_OK;
  items = calloc(*n_mine, sizeof *items);
  if (!items) return kiln_fail(KILN_ENOMEM, "out of memory");
  for (size_t i = 0; i < *n_mine; i++) {
    kiln_build_item *it = &b->s->items[mine[i]];
    items[i].key = b->keys[mine[i]];
    items[i].unit = it->unit->name;
    items[i].target = it->target_name;
  }
  kiln_remote_fetch(b->cache, items, *n_mine); /* never fatal: misses are compiled */
  for (size_t i = 0; i < *n_mine; i++) {
    size_t idx = mine[i];
    kiln_build_item *it = &b->s->items[idx];
    if (items[i].status != KILN_OK) {
      mine[kept++] = idx;
      continue;
    }
    it->record = items[i].record; /* verified as it arrived: no second hash */
    it->outcome = KILN_BUILD_FETCHED;
    report(b, it);
    if (kiln_lease_release(b->cache, b->keys[idx]) != KILN_OK)
      kiln_log(KILN_LOG_WARN, "%s", kiln_last_error());
  }
  *n_mine = kept;
  free(items);
  return KILN_OK;
}

/* Offline: what is in no cache layer and not on the remote fails. */
static void refuse_offline(build_ctx *b, size_t *mine, size_t *n_mine) {
  for (size_t i = 0; i < *n_mine; i++) {
    kiln_build_item *it = &b->s->items[mine[i]];
    char msg[512];
    snprintf(msg, sizeof msg,
             "%s for %s is in no cache layer%s, and KILN_OFFLINE=1 forbids building it: run `kiln "
             "build --arch %s` where it may build (e.g. in the image)",
             it->unit->name, it->target_name,
             kiln_cache_remote_url(b->cache) ? " and not on the remote" : "", it->target_name);
    fail_item(it, KILN_ENOTFOUND, msg);
    if (kiln_lease_release(b->cache, b->keys[mine[i]]) != KILN_OK)
      kiln_log(KILN_LOG_WARN, "%s", kiln_last_error());
    report(b, it);
  }
  *n_mine = 0;
}

/* Writes back every target of the plan that is in the cache now and did not
 * come from the remote. A failure is reported in the summary, not fatal. */
static void upload_plan(build_ctx *b) {
  kiln_build_summary *s = b->s;
  const char **keys;
  size_t n = 0;
  if (b->opts->no_remote || !kiln_cache_remote_upload(b->cache)) return;
  keys = calloc(s->n_items ? s->n_items : 1, sizeof *keys);
  if (!keys) {
    s->upload_status = kiln_fail(KILN_ENOMEM, "out of memory");
    snprintf(s->upload_error, sizeof s->upload_error, "%s", kiln_last_error());
    return;
  }
  for (size_t i = 0; i < s->n_items; i++) {
    kiln_build_outcome o = s->items[i].outcome;
    if (o == KILN_BUILD_HIT || o == KILN_BUILD_BUILT || o == KILN_BUILD_SHARED)
      keys[n++] = b->keys[i];
  }
  s->upload_status = kiln_remote_upload(&s->uploaded, b->cache, keys, n);
  if (s->upload_status != KILN_OK) {
    snprintf(s->upload_error, sizeof s->upload_error, "%s", kiln_last_error());
    kiln_log(KILN_LOG_WARN, "%s", s->upload_error);
  }
  free(keys);
}

/* Longest first, as far as it can be told before compiling: the unit with
 * the most source first (the softmax units, which instantiate the most entry
 * points, are the largest and the slowest); within a unit a CUBIN with its
 * PTX, then the CUBINs from the highest arch down (ptxas takes longer for
 * sm_100 and up), then a PTX alone (no ptxas: about half a CUBIN). */
static size_t unit_bytes(const kiln_unit_info *u) {
  size_t n = 0;
  for (size_t f = 0; f < u->n_files; f++)
    n += u->files[f]->size;
  return n;
}

static int longest_first(const void *x, const void *y) {
  const build_task *a = x, *b = y;
  if (a->unit_bytes != b->unit_bytes) return a->unit_bytes < b->unit_bytes ? 1 : -1;
  if (a->unit != b->unit) return strcmp(a->unit->name, b->unit->name);
  if (a->rank != b->rank) return b->rank - a->rank;
  if (a->arch != b->arch) return b->arch - a->arch;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static build_task make_task(const build_ctx *b, size_t idx, size_t ptx) {
  const kiln_build_item *it = &b->s->items[idx];
  build_task t = {idx, ptx, it->unit, unit_bytes(it->unit), 1, it->target.arch};
  if (ptx != NO_PAIR)
    t.rank = 3;
  else if (it->target.kind == KILN_TARGET_CUBIN)
    t.rank = 2;
  return t;
}

/* The tasks for the items in mine[]: a PTX target whose unit has the CUBIN
 * of the same arch in mine[] rides on that CUBIN's compile. Longest first,
 * so that no core is left with a long compile at the end while the others
 * idle. */
static kiln_status plan_tasks(build_ctx *b, const size_t *mine, size_t n_mine) {
  size_t n = 0;
  char *paired = calloc(n_mine ? n_mine : 1, 1);
  free(b->tasks);
  b->tasks = calloc(n_mine ? n_mine : 1, sizeof *b->tasks);
  if (!b->tasks || !paired) {
    free(paired);
    return kiln_fail(KILN_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < n_mine; i++) {
    const kiln_build_item *p = &b->s->items[mine[i]];
    if (p->target.kind != KILN_TARGET_PTX) continue;
    for (size_t j = 0; j < n_mine; j++) {
      const kiln_build_item *c = &b->s->items[mine[j]];
      if (paired[j] || c->unit != p->unit || c->target.kind != KILN_TARGET_CUBIN ||
          c->target.arch_specific || c->target.arch != p->target.arch)
        continue;
      paired[i] = paired[j] = 1;
      b->tasks[n++] = make_task(b, mine[j], mine[i]);
      break;
    }
  }
  for (size_t i = 0; i < n_mine; i++)
    if (!paired[i]) b->tasks[n++] = make_task(b, mine[i], NO_PAIR);
  qsort(b->tasks, n, sizeof *b->tasks, longest_first);
  b->n_tasks = n;
  free(paired);
  return KILN_OK;
}

/* Compiles every pending item this process wins the lease for, waits for
 * the others (polling, bounded), and takes over leases whose holder died. */
static kiln_status single_flight(build_ctx *b) {
  size_t n_pending = b->n_todo, *pending = NULL, *mine = NULL;
  char *told = NULL;     /* waiting for this item was logged */
  char *unusable = NULL; /* its key's record cannot be served: built over it */
  double deadline = kiln_clock_ms() + (double)b->wait_ms;
  int64_t poll = 20;
  kiln_status rc = KILN_OK;
  if (!n_pending) return KILN_OK;
  pending = malloc(n_pending * sizeof *pending);
  mine = malloc(n_pending * sizeof *mine);
  told = calloc(b->s->n_items, 1);
  unusable = calloc(b->s->n_items, 1);
  if (!pending || !mine || !told || !unusable) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  memcpy(pending, b->todo, n_pending * sizeof *pending);
  heartbeat_start(b);
  while (n_pending) {
    size_t n_mine = 0, n_wait = 0;
    for (size_t i = 0; i < n_pending; i++) {
      size_t idx = pending[i];
      kiln_build_item *it = &b->s->items[idx];
      kiln_lease_state state;
      kiln_lease_holder h;
      int settled = 0;
      rc = kiln_lease_try(b->cache, b->keys[idx], it->unit->name, it->target_name, b->stale_ms,
                          b->opts->rebuild || unusable[idx], &state, &h);
      if (rc != KILN_OK) goto out;
      if (state == KILN_LEASE_ACQUIRED) {
        mine[n_mine++] = idx;
        if (h.taken_over) b->s->taken_over++;
        continue;
      }
      if (state == KILN_LEASE_DONE) {
        KILN_CHECK(settle_from_cache(b, idx, KILN_BUILD_SHARED, &settled));
        if (settled) continue;
        /* The index holds a row for the key that nothing can use (and it
         * could not be dropped, or came back): waiting for it would wait
         * out the timeout. Its key is built again, over it. */
        unusable[idx] = 1;
        snprintf(it->error, sizeof it->error,
                 "%s %s: key %.12s has a record nothing can use, which could not be dropped "
                 "(%s); it was built again over it",
                 it->unit->name, it->target_name, b->keys[idx], kiln_last_error());
        kiln_log(KILN_LOG_WARN, "%s", it->error);
      } else {
        if (!told[idx])
          kiln_log(KILN_LOG_INFO,
                   "%s %s: another process builds it (%s pid %ld, for %.1f s); waiting",
                   it->unit->name, it->target_name, h.host, h.pid, h.held_ms / 1e3);
        told[idx] = 1;
        snprintf(it->error, sizeof it->error,
                 "gave up after %.0f s waiting for %s pid %ld to build %s for %s (its last "
                 "heartbeat was %.1f s ago; KILN_BUILD_TIMEOUT raises the limit)",
                 b->wait_ms / 1e3, h.host, h.pid, it->unit->name, it->target_name,
                 h.heartbeat_age_ms / 1e3);
      }
      pending[n_wait++] = idx;
    }
    n_pending = n_wait;
    if (n_mine) KILN_CHECK(fetch_mine(b, mine, &n_mine));
    if (n_mine && b->offline) refuse_offline(b, mine, &n_mine);
    if (n_mine) {
      KILN_CHECK(plan_tasks(b, mine, n_mine));
      KILN_CHECK(kiln_pool_run(b->n_tasks, b->jobs, compile_task, b));
      poll = 20;
      continue;
    }
    if (!n_pending) break;
    if (kiln_clock_ms() > deadline) {
      for (size_t i = 0; i < n_pending; i++) {
        kiln_build_item *it = &b->s->items[pending[i]];
        it->outcome = KILN_BUILD_FAILED;
        it->status = KILN_ETIMEDOUT;
        if (!it->error[0]) /* never an empty reason */
          snprintf(it->error, sizeof it->error,
                   "gave up after %.0f s waiting for key %.12s to be built or served",
                   b->wait_ms / 1e3, b->keys[pending[i]]);
        report(b, it);
      }
      break;
    }
    sleep_ms(poll);
    poll = poll * 2 > 250 ? 250 : poll * 2;
  }
out:
  heartbeat_stop(b);
  free(pending);
  free(mine);
  free(b->tasks);
  b->tasks = NULL;
  free(told);
  free(unusable);
  return rc;
}

static int selected(const kiln_build_options *o, const char *name) {
  if (o->units) {
    for (size_t i = 0; i < o->n_units; i++)
      if (o->units[i] && strcmp(o->units[i], name) == 0) return 1;
    return 0;
  }
  return !o->kernels_glob || fnmatch(o->kernels_glob, name, 0) == 0;
}

static kiln_status make_plan(kiln_build_summary *s, const kiln_build_options *o) {
  size_t n = 0;
  for (size_t u = 0; u < kiln_unit_count(); u++)
    if (selected(o, kiln_unit_at(u)->name)) n++;
  if (n == 0) {
    char names[1024];
    return kiln_fail(KILN_ENOTFOUND, "--kernels '%s' matches no unit; units are: %s",
                     o->units ? "(list)" : o->kernels_glob, kiln_unit_names(names, sizeof names));
  }
  s->items = calloc(n * o->n_targets, sizeof *s->items);
  if (!s->items) return kiln_fail(KILN_ENOMEM, "out of memory");
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    const kiln_unit_info *unit = kiln_unit_at(u);
    if (!selected(o, unit->name)) continue;
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
    if (it->outcome == KILN_BUILD_HIT)
      s->hits++;
    else if (it->outcome == KILN_BUILD_BUILT)
      s->built++;
    else if (it->outcome == KILN_BUILD_SHARED)
      s->shared++;
    else if (it->outcome == KILN_BUILD_FETCHED)
      s->fetched++;
    else
      s->failed++;
    if (it->outcome != KILN_BUILD_FAILED) s->bytes += it->record.size;
  }
}

KILN_DEFINE_OPTIONS_INIT(kiln_build_options, KILN_BUILD_OPTIONS_VERSION, KILN_BUILD_OPTIONS_INIT)

kiln_status kiln_build(kiln_build_summary **out, kiln_cache *cache, const kiln_build_options *o) {
  build_ctx b;
  kiln_build_summary *s = NULL;
  kiln_status rc;
  double t0 = kiln_clock_ms(), stale_s, wait_s;
  size_t *todo = NULL;
  memset(&b, 0, sizeof b);
  pthread_mutex_init(&b.lock, NULL);
  pthread_cond_init(&b.hb_cond, NULL);
  if (!out || !cache || !o || !o->targets || !o->n_targets) {
    rc = kiln_fail(KILN_EINVAL, "kiln_build: no cache, options or targets");
    goto out;
  }
  KILN_CHECK(kiln_options_check(o->version, KILN_BUILD_OPTIONS_VERSION, "kiln_build_options"));
  s = calloc(1, sizeof *s);
  if (!s) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  KILN_CHECK(kiln_option_int(&b.jobs, o->jobs, KILN_P_jobs, "kiln_build_options.jobs"));
  KILN_CHECK(kiln_option_int(&b.offline, o->offline, KILN_P_offline, "kiln_build_options.offline"));
  KILN_CHECK(kiln_option_seconds(&stale_s, o->lease_stale_s, KILN_P_lease_stale_s,
                                 "kiln_build_options.lease_stale_s"));
  KILN_CHECK(kiln_option_seconds(&wait_s, o->wait_timeout_s, KILN_P_build_timeout_s,
                                 "kiln_build_options.wait_timeout_s"));
  b.stale_ms = (int64_t)(stale_s * 1000);
  b.wait_ms = (int64_t)(wait_s * 1000);
  KILN_CHECK(kiln_toolchain_id(b.toolchain));
  {
    const char *extra = NULL;
    KILN_CHECK(kiln_param_nvrtc_options_checked(&extra));
  }
  b.options = kiln_build_compile_options();
  KILN_CHECK(kiln_param_failure_ttl(&b.failure_ttl));
  KILN_CHECK(make_plan(s, o));
  b.cache = cache;
  b.s = s;
  b.opts = o;
  b.keys = calloc(s->n_items, sizeof *b.keys);
  b.todo = todo = calloc(s->n_items, sizeof *b.todo);
  if (!b.keys || !b.todo) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < s->n_items; i++)
    KILN_CHECK(settle(&b, i));
  KILN_CHECK(single_flight(&b));
  summarise(s);
  upload_plan(&b);
  s->wall_ms = kiln_clock_ms() - t0;
  *out = s;
  s = NULL;
out:
  kiln_build_summary_free(s);
  free(b.keys);
  free(todo);
  pthread_cond_destroy(&b.hb_cond);
  pthread_mutex_destroy(&b.lock);
  return rc;
}

void kiln_build_summary_free(kiln_build_summary *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n_items; i++)
    free(s->items[i].log_tail);
  free(s->items);
  free(s);
}
