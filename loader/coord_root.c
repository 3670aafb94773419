/* Step 2 of the coordination protocol (loader/coord.c): the root builds the
 * union of misses on a build thread while its main thread broadcasts a
 * status frame every heartbeat; the other ranks wait for the frames, each
 * wait bounded by the builder timeout (a silent root is KILN_EPEER). */
#include <pthread.h> /* the build thread, its lock and condition */
#include <stdio.h>   /* snprintf */
#include <string.h>  /* memset */
#include <time.h>    /* clock_gettime: the condition waits on CLOCK_MONOTONIC */
#include <unistd.h>  /* getpid */

#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/pool.h"
#include "kiln/build.h"
#include "kiln/kernels.h"
#include "loader/coord_internal.h"

/* ---- step 2: the root builds while it broadcasts status frames ---- */

typedef struct build_state {
  coord_run *r;
  const uint8_t *map; /* the union of misses */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int finished;
  uint32_t done, total;
  char unit[64], target[16];
  kiln_status status;
  char message[3800];
} build_state;

static void on_progress(const kiln_build_item *it, size_t done, size_t total, void *user) {
  build_state *b = user;
  (void)done;
  (void)total;
  pthread_mutex_lock(&b->lock);
  b->done++;
  snprintf(b->unit, sizeof b->unit, "%s", it->unit->name);
  snprintf(b->target, sizeof b->target, "%s", it->target_name);
  pthread_mutex_unlock(&b->lock);
}

/* Builds the units of one target; the first failure is kept. */
static kiln_status build_target(build_state *b, int code, const char **names, size_t n) {
  const coord_params *p = &b->r->p;
  kiln_build_options o = KILN_BUILD_OPTIONS_INIT;
  kiln_build_summary *sum = NULL;
  kiln_target t;
  kiln_status rc;
  kiln_coord_target_decode(code, &t);
  o.targets = &t;
  o.n_targets = 1;
  o.units = names;
  o.n_units = n;
  o.jobs = p->jobs;
  o.progress = on_progress;
  o.user = b;
  o.wait_timeout_s = p->timeout_s;
  o.offline = p->offline; /* the remote may still have it */
  KILN_CHECK(kiln_build(&sum, p->cache, &o));
  pthread_mutex_lock(&b->lock);
  b->r->rep->compiled += sum->built;
  b->r->rep->compile_cpu_s += sum->compile_cpu_s;
  pthread_mutex_unlock(&b->lock);
  for (size_t i = 0; i < sum->n_items; i++) {
    kiln_build_item *it = &sum->items[i];
    if (it->outcome != KILN_BUILD_FAILED) continue;
    rc = kiln_fail(it->status, "building %s for %s failed on rank 0: %s%s%s", it->unit->name,
                   it->target_name, it->error, it->log_tail && *it->log_tail ? "\n" : "",
                   it->log_tail ? it->log_tail : "");
    goto out;
  }
out:
  kiln_build_summary_free(sum);
  return rc;
}

static void *build_main(void *user) {
  build_state *b = user;
  const char *names[COORD_MAP_UNITS];
  kiln_status rc = KILN_OK;
  for (int code = 0; code < COORD_MAP_TARGETS && rc == KILN_OK; code++) {
    size_t n = 0;
    for (size_t u = 0; u < kiln_unit_count() && u < COORD_MAP_UNITS; u++)
      if (b->map[u * COORD_MAP_TARGETS + (size_t)code]) names[n++] = kiln_unit_at(u)->name;
    if (n) rc = build_target(b, code, names, n);
  }
  pthread_mutex_lock(&b->lock);
  b->status = rc;
  if (rc != KILN_OK) snprintf(b->message, sizeof b->message, "%s", kiln_last_error());
  b->finished = 1;
  pthread_cond_signal(&b->cond);
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

/* Waits until the build finished or one heartbeat passed since `since`. */
static void wait_heartbeat(build_state *b, double since) {
  double until = since + b->r->p.heartbeat_s * 1e3;
  const kiln_clock_hook *hook = kiln_clock_hook_get();
  struct timespec ts;
  if (hook) { /* virtual time (tests/sim/): the hook decides how long a pause is */
    hook->wait(hook->user, &b->cond, &b->lock, &b->finished, until);
    return;
  }
  clock_gettime(CLOCK_MONOTONIC, &ts); /* the cond waits on this clock (root_build) */
  {
    double left = until - kiln_clock_ms();
    long long ns = left > 0 ? (long long)(left * 1e6) : 0;
    ts.tv_sec += ns / 1000000000LL;
    ts.tv_nsec += ns % 1000000000LL;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  }
  while (!b->finished && kiln_clock_ms() < until)
    if (pthread_cond_timedwait(&b->cond, &b->lock, &ts) != 0) break;
}

/* Whether the frames may say the build ended: its threads are done and no
 * clock hook (tests/sim/, virtual time) holds it. */
static int build_over(const build_state *b) {
  const kiln_clock_hook *hook = kiln_clock_hook_get();
  return b->finished && !(hook && hook->build_held && hook->build_held(hook->user));
}

static void frame_from(build_state *b, coord_frame *f, uint32_t seq) {
  memset(f, 0, sizeof *f);
  f->state = !build_over(b) ? COORD_BUILDING : b->status == KILN_OK ? COORD_READY : COORD_FAILED;
  f->seq = seq;
  f->done = b->done;
  f->total = b->total;
  f->status = b->status;
  f->pid = (int64_t)getpid();
  f->elapsed_s = (kiln_clock_ms() - b->r->t0) / 1e3;
  kiln_host_name(f->host, sizeof f->host);
  snprintf(f->unit, sizeof f->unit, "%s", b->unit);
  snprintf(f->target, sizeof f->target, "%s", b->target);
  snprintf(f->message, sizeof f->message, "%s", b->message);
}

static void tell_progress(coord_run *r, const coord_frame *f) {
  if (r->p.progress) r->p.progress(f->done, f->total, f->unit, f->target, f->elapsed_s, r->p.user);
}

kiln_status kiln_coord_root_build(coord_run *r, const uint8_t *map, size_t missing) {
  build_state b;
  pthread_t tid;
  uint8_t wire[COORD_FRAME_BYTES];
  coord_frame f;
  kiln_status rc = KILN_OK;
  int started = 0;
  memset(&b, 0, sizeof b);
  b.r = r;
  b.map = map;
  b.total = (uint32_t)missing;
  pthread_mutex_init(&b.lock, NULL);
  {
    pthread_condattr_t ca; /* a wall-clock step must not stall the frames */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b.cond, &ca);
    pthread_condattr_destroy(&ca);
  }
  if (pthread_create(&tid, NULL, build_main, &b) == 0) {
    started = 1;
  } else {
    b.finished = 1;
    b.status = KILN_EINTERNAL;
    snprintf(b.message, sizeof b.message, "coordination: could not start the build thread");
  }
  kiln_coord_timeline(
      r, "root: building %zu missing (unit, target) pairs; a status frame every %.0f ms", missing,
      r->p.heartbeat_s * 1e3);
  if (kiln_cpu_count() < kiln_cpu_online() && kiln_cpu_count() < 4 && r->p.jobs == 0)
    kiln_log(KILN_LOG_INFO,
             "coordination: rank 0 may run on %d of this node's %d CPUs (bound by the launcher), "
             "so it compiles on %d thread%s; `mpirun --bind-to none` (or KILN_JOBS with a wider "
             "binding) lets the one build use the node",
             kiln_cpu_count(), kiln_cpu_online(), kiln_cpu_count(),
             kiln_cpu_count() == 1 ? "" : "s");
  r->peer = 1; /* every frame's broadcast is bounded by the peer timeout */
  for (uint32_t seq = 0;; seq++) {
    char what[48];
    double sent = kiln_clock_ms();
    pthread_mutex_lock(&b.lock);
    frame_from(&b, &f, seq);
    pthread_mutex_unlock(&b.lock);
    kiln_frame_encode(&f, wire);
    snprintf(what, sizeof what, "status frame %u", seq);
    if ((rc = kiln_coord_collective(r, 1, wire, sizeof wire, what)) != KILN_OK) break;
    tell_progress(r, &f);
    if (f.state != COORD_BUILDING) break;
    pthread_mutex_lock(&b.lock);
    wait_heartbeat(&b, sent);
    pthread_mutex_unlock(&b.lock);
  }
  if (started) pthread_join(tid, NULL); /* a broken comm still waits for our own build */
  if (rc == KILN_OK && f.state == COORD_FAILED)
    rc = kiln_fail((kiln_status)f.status, "%s", f.message);
  kiln_coord_timeline(r, "root: %s after %u frames (%zu compiled, %.1f CPU s)",
                      f.state == COORD_READY ? "READY" : "FAILED", f.seq + 1, r->rep->compiled,
                      r->rep->compile_cpu_s);
  pthread_cond_destroy(&b.cond);
  pthread_mutex_destroy(&b.lock);
  return rc;
}

kiln_status kiln_coord_await_root(coord_run *r) {
  uint8_t wire[COORD_FRAME_BYTES];
  kiln_status rc = KILN_OK;
  int peer = r->p.peer_timeout_s > 0 && r->p.peer_timeout_s < r->p.timeout_s;
  r->peer = 1; /* the root promised a frame every heartbeat: the peer timeout */
  r->last_frame_ms = kiln_clock_ms();
  for (uint32_t n = 0;; n++) {
    char what[48];
    snprintf(what, sizeof what, "status frame %u", n);
    if (kiln_coord_collective(r, 1, wire, sizeof wire, what) != KILN_OK) {
      const coord_frame *l = &r->last;
      char why[512], progress[256], who[128] = "";
      snprintf(why, sizeof why, "%s", kiln_last_error());
      if (n == 0)
        snprintf(progress, sizeof progress, "no frame received");
      else
        snprintf(progress, sizeof progress, "frame %u at +%.1f s, %u of %u built%s%s%s%s", l->seq,
                 l->elapsed_s, l->done, l->total, *l->unit ? ", last " : "", l->unit,
                 *l->unit ? " " : "", l->target);
      if (n) snprintf(who, sizeof who, " on %s, pid %lld", l->host, (long long)l->pid);
      return kiln_fail(KILN_EPEER,
                       "coordination: the root (rank 0%s) went silent: no status frame for %.1f s "
                       "(the %s: %s); its last progress: %s (%s)",
                       who, (kiln_clock_ms() - r->last_frame_ms) / 1e3,
                       peer ? "peer timeout" : "builder timeout",
                       peer ? "--peer-timeout, KILN_PEER_TIMEOUT" : "--timeout, KILN_BUILD_TIMEOUT",
                       progress, why);
    }
    r->last_frame_ms = kiln_clock_ms();
    KILN_CHECK(kiln_frame_decode(&r->last, wire));
    tell_progress(r, &r->last);
    if (n == 0 || r->last.done != 0)
      kiln_log(KILN_LOG_DEBUG, "coord rank %d: frame %u: %u/%u done (last %s %s)", r->c->rank,
               r->last.seq, r->last.done, r->last.total, r->last.unit, r->last.target);
    if (r->last.state == COORD_READY) break;
    if (r->last.state == COORD_FAILED) {
      rc = kiln_fail((kiln_status)r->last.status, "%s", r->last.message);
      goto out;
    }
  }
  kiln_coord_timeline(r, "root READY after %u frames (%u missing pairs settled)", r->last.seq + 1,
                      r->last.total);
out:
  return rc;
}
