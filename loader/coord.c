/* The coordination protocol (DESIGN.md, "Coordination protocol"; the frames
 * and failure rules are in docs/coordination.md):
 *   1. every rank checks its slots locally; one max-reduce gives the union of
 *      misses, the configuration fingerprint (min == max) and, when nobody
 *      misses anything, the artifact fingerprint: a warm job is done here;
 *   2. the root builds the union on a thread pool while its main thread
 *      broadcasts a status frame every heartbeat; the others wait for frames,
 *      each wait bounded by the timeout (a silent root is KILN_EPEER);
 *   3. READY: every rank checks again (a shared directory already has the
 *      artifacts); one max-reduce gives what is still needed, and the root
 *      sends those in bounded chunks; receivers verify and insert them;
 *   4. one max-reduce of the artifact fingerprint: min != max is KILN_EMISMATCH.
 * Every rank returns the same status. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/store.h"
#include "common/clock.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/pool.h"
#include "kiln/build.h"
#include "kiln/kernels.h"
#include "loader/coord_internal.h"

#define HDR 256                 /* the exchange buffer's header */
#define CHUNK ((size_t)1 << 20) /* artifact bytes per broadcast */
#define OFF_FAILED 0            /* a rank failed locally */
#define OFF_CFG 32              /* configuration fingerprint, then its complement */
#define OFF_FP 96               /* artifact fingerprint, then its complement */

typedef struct run {
  coord_params p;
  const coord_hooks *h;
  const kiln_comm *c;
  kiln_coord_report *rep;
  double t0;
  int aborted;
  coord_frame last;            /* the last status frame seen */
  uint8_t cfg[COORD_FP_BYTES]; /* this rank's configuration fingerprint */
  uint8_t fp[COORD_FP_BYTES];  /* this rank's artifact fingerprint (when it missed nothing) */
  const uint8_t *uni;          /* the union of misses, once known */
} run;

#define TL(r, ...) timeline(r, __VA_ARGS__)
static void timeline(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void timeline(run *r, const char *fmt, ...) {
  char line[512];
  va_list ap;
  if (!kiln_log_enabled(KILN_LOG_INFO)) return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  kiln_log(KILN_LOG_INFO, "coord rank %d/%d +%.3f s: %s", r->c->rank, r->c->size,
           (kiln_clock_ms() - r->t0) / 1e3, line);
}

/* One collective, timed; a failure aborts the communicator. */
static kiln_status collective(run *r, int bcast, void *buf, size_t n, const char *what) {
  const kiln_comm *c = r->c;
  double t = kiln_clock_ms(), dt;
  kiln_status st;
  if (r->aborted) return kiln_fail(KILN_EPEER, "coordination: the communicator was aborted");
  st = bcast ? c->broadcast(c->self, buf, n, 0, r->p.timeout_s)
             : c->max_reduce(c->self, buf, n, r->p.timeout_s);
  dt = kiln_clock_ms() - t;
  r->rep->collectives++;
  if (dt > r->rep->longest_wait_ms) {
    r->rep->longest_wait_ms = dt;
    snprintf(r->rep->longest_what, sizeof r->rep->longest_what, "%s", what);
  }
  if (st != KILN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    r->aborted = 1;
    if (c->abort) c->abort(c->self, why);
    return kiln_fail(KILN_EPEER,
                     "coordination (rank %d of %d, %s transport): %s did not complete: %s", c->rank,
                     c->size, c->name, what, why);
  }
  return KILN_OK;
}

static void put_fp(uint8_t *at, const uint8_t fp[COORD_FP_BYTES]) {
  for (int i = 0; i < COORD_FP_BYTES; i++) {
    at[i] = fp[i];
    at[COORD_FP_BYTES + i] = (uint8_t)~fp[i];
  }
}

/* After a max-reduce of (x, ~x): every rank had the same x. */
static int fp_agrees(const uint8_t *at) {
  for (int i = 0; i < COORD_FP_BYTES; i++)
    if ((at[i] ^ at[COORD_FP_BYTES + i]) != 0xff) return 0;
  return 1;
}

/* On a disagreement (a byte-wise max is no rank's value): rank 0's value is
 * broadcast, then a max-reduce of a byte per rank says who differs from it. */
static kiln_status disagree(run *r, const uint8_t mine[COORD_FP_BYTES], const char *what) {
  int size = r->c->size, n_odd = 0;
  uint8_t *flags = calloc((size_t)size, 1), root[COORD_FP_BYTES];
  char odd[256] = "";
  kiln_status rc;
  if (!flags) return kiln_fail(KILN_ENOMEM, "out of memory");
  memcpy(root, mine, sizeof root);
  KILN_CHECK(collective(r, 1, root, sizeof root, "rank 0's fingerprint"));
  flags[r->c->rank] = memcmp(mine, root, COORD_FP_BYTES) != 0;
  KILN_CHECK(collective(r, 0, flags, (size_t)size, "naming the ranks that differ"));
  for (int i = 0; i < size; i++) {
    size_t len = strlen(odd);
    if (!flags[i]) continue;
    n_odd++;
    if (len + 16 < sizeof odd)
      snprintf(odd + len, sizeof odd - len, "%s%d", len ? "," : "", i);
    else if (!strstr(odd, "..."))
      snprintf(odd + len, sizeof odd - len, ",...");
  }
  rc = kiln_fail(KILN_EMISMATCH,
                 "coordination: ranks disagree on %s: rank%s %s differ%s from rank 0; refusing "
                 "to run (ranks would run different code)",
                 what, n_odd == 1 ? "" : "s", odd, n_odd == 1 ? "s" : "");
out:
  free(flags);
  return rc;
}

static size_t count_set(const uint8_t *map) {
  size_t n = 0;
  for (size_t i = 0; i < COORD_MAP_BYTES; i++)
    n += map[i] != 0;
  return n;
}

static void slot_names(size_t slot, const kiln_unit_info **unit, char target[16]) {
  kiln_target t;
  kiln_coord_target_decode((int)(slot % COORD_MAP_TARGETS), &t);
  *unit = kiln_unit_at(slot / COORD_MAP_TARGETS);
  kiln_target_name(&t, target);
}

/* ---- step 1: the exchange ---- */

/* Fills buf (HDR + map) for this rank. The rank's own error, if any, is kept
 * in *local_rc (the exchange still happens: the others must not hang). */
static void fill_exchange(run *r, kiln_status setup, uint8_t *buf, kiln_status *local_rc, char *err,
                          size_t cap) {
  size_t slots = 0;
  kiln_status st = setup;
  if (st == KILN_OK) st = kiln_coord_config_fp(r->cfg);
  if (st == KILN_OK) st = r->h->local(r->h->user, buf + HDR, &slots, NULL);
  r->rep->slots = slots;
  if (st == KILN_OK && count_set(buf + HDR) == 0) st = r->h->fingerprint(r->h->user, r->fp);
  put_fp(buf + OFF_CFG, r->cfg);
  put_fp(buf + OFF_FP, r->fp);
  *local_rc = st;
  if (st != KILN_OK) {
    snprintf(err, cap, "%s", kiln_last_error());
    buf[OFF_FAILED] = 1;
    memset(buf + HDR, 0, COORD_MAP_BYTES);
  }
}

/* A rank that failed on its own returns its error; the others a peer error. */
static kiln_status someone_failed(run *r, kiln_status mine, const char *err, const char *when) {
  if (mine != KILN_OK) return kiln_fail(mine, "%s", err);
  return kiln_fail(KILN_EPEER,
                   "coordination: another rank failed %s (its own log says why); "
                   "rank %d of %d stops too",
                   when, r->c->rank, r->c->size);
}

/* ---- step 2: the root builds while it broadcasts status frames ---- */

typedef struct build_state {
  run *r;
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
  struct timespec ts;
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

static void frame_from(build_state *b, coord_frame *f, uint32_t seq) {
  memset(f, 0, sizeof *f);
  f->state = !b->finished ? COORD_BUILDING : b->status == KILN_OK ? COORD_READY : COORD_FAILED;
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

static void tell_progress(run *r, const coord_frame *f) {
  if (r->p.progress) r->p.progress(f->done, f->total, f->unit, f->target, f->elapsed_s, r->p.user);
}

static kiln_status root_build(run *r, const uint8_t *map, size_t missing) {
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
  TL(r, "root: building %zu missing (unit, target) pairs; a status frame every %.0f ms", missing,
     r->p.heartbeat_s * 1e3);
  if (kiln_cpu_count() < kiln_cpu_online() && kiln_cpu_count() < 4 && r->p.jobs == 0)
    kiln_log(KILN_LOG_INFO,
             "coordination: rank 0 may run on %d of this node's %d CPUs (bound by the launcher), "
             "so it compiles on %d thread%s; `mpirun --bind-to none` (or KILN_JOBS with a wider "
             "binding) lets the one build use the node",
             kiln_cpu_count(), kiln_cpu_online(), kiln_cpu_count(),
             kiln_cpu_count() == 1 ? "" : "s");
  for (uint32_t seq = 0;; seq++) {
    char what[48];
    double sent = kiln_clock_ms();
    pthread_mutex_lock(&b.lock);
    frame_from(&b, &f, seq);
    pthread_mutex_unlock(&b.lock);
    kiln_frame_encode(&f, wire);
    snprintf(what, sizeof what, "status frame %u", seq);
    if ((rc = collective(r, 1, wire, sizeof wire, what)) != KILN_OK) break;
    tell_progress(r, &f);
    if (f.state != COORD_BUILDING) break;
    pthread_mutex_lock(&b.lock);
    wait_heartbeat(&b, sent);
    pthread_mutex_unlock(&b.lock);
  }
  if (started) pthread_join(tid, NULL); /* a broken comm still waits for our own build */
  if (rc == KILN_OK && f.state == COORD_FAILED)
    rc = kiln_fail((kiln_status)f.status, "%s", f.message);
  TL(r, "root: %s after %u frames (%zu compiled, %.1f CPU s)",
     f.state == COORD_READY ? "READY" : "FAILED", f.seq + 1, r->rep->compiled,
     r->rep->compile_cpu_s);
  pthread_cond_destroy(&b.cond);
  pthread_mutex_destroy(&b.lock);
  return rc;
}

static kiln_status await_root(run *r) {
  uint8_t wire[COORD_FRAME_BYTES];
  kiln_status rc = KILN_OK;
  for (uint32_t n = 0;; n++) {
    char what[48];
    snprintf(what, sizeof what, "status frame %u", n);
    if (collective(r, 1, wire, sizeof wire, what) != KILN_OK) {
      const coord_frame *l = &r->last;
      char why[512], progress[256];
      snprintf(why, sizeof why, "%s", kiln_last_error());
      if (n == 0)
        snprintf(progress, sizeof progress, "no frame received");
      else
        snprintf(progress, sizeof progress, "frame %u at +%.1f s, %u of %u built%s%s%s%s", l->seq,
                 l->elapsed_s, l->done, l->total, *l->unit ? ", last " : "", l->unit,
                 *l->unit ? " " : "", l->target);
      char who[128] = "";
      if (n) snprintf(who, sizeof who, " on %s, pid %lld", l->host, (long long)l->pid);
      return kiln_fail(
          KILN_EPEER,
          "coordination: the root (rank 0%s) went silent: no status frame within "
          "%.1f s (the builder timeout: --timeout, KILN_BUILD_TIMEOUT); its last progress: %s "
          "(%s)",
          who, r->p.timeout_s, progress, why);
    }
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
  TL(r, "root READY after %u frames (%u missing pairs settled)", r->last.seq + 1, r->last.total);
out:
  return rc;
}

/* ---- step 3: the artifacts still needed ---- */

kiln_status kiln_coord_find(kiln_cache *cache, const kiln_unit_info *unit, const char *target,
                            kiln_record *out) {
  kiln_record *recs = NULL;
  size_t n = 0;
  kiln_status rc;
  KILN_CHECK(kiln_cache_find_unit(&recs, &n, cache, unit, kiln_build_compile_options()));
  rc = kiln_fail(KILN_ENOTFOUND, "no verified record of %s for %s", unit->name, target);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(recs[i].target, target) != 0) continue;
    if (kiln_cache_get(out, NULL, NULL, cache, recs[i].key) == KILN_OK) { /* blob verified */
      rc = KILN_OK;
      break;
    }
  }
out:
  free(recs);
  return rc;
}

/* The root's header and payload (blob, then build log) for one slot. */
static void root_read(run *r, size_t slot, coord_header *h, uint8_t **payload) {
  const kiln_unit_info *unit;
  char target[16];
  uint8_t *blob = NULL, *log = NULL;
  size_t size = 0, log_size = 0;
  memset(h, 0, sizeof *h);
  *payload = NULL;
  slot_names(slot, &unit, target);
  if (kiln_coord_find(r->p.cache, unit, target, &h->rec) != KILN_OK ||
      kiln_cache_get(&h->rec, &blob, &size, r->p.cache, h->rec.key) != KILN_OK) {
    h->status = KILN_ENOTFOUND;
    snprintf(h->message, sizeof h->message,
             "rank 0 cannot read %s %s from its cache after "
             "building it: %s",
             unit->name, target, kiln_last_error());
    goto out;
  }
  if (h->rec.log_digest[0] &&
      kiln_cache_read_blob(&log, &log_size, r->p.cache, h->rec.log_digest) != KILN_OK)
    log_size = 0; /* the log is a convenience, the artifact is what matters */
  *payload = malloc(size + log_size + 1);
  if (!*payload) {
    h->status = KILN_ENOMEM;
    snprintf(h->message, sizeof h->message, "rank 0: out of memory");
    goto out;
  }
  memcpy(*payload, blob, size);
  if (log_size) memcpy(*payload + size, log, log_size);
  h->log_size = log_size;
out:
  free(blob);
  free(log);
}

/* A receiver's copy: digest checked, then stored (idempotent). */
static kiln_status store(run *r, size_t slot, const coord_header *h, const uint8_t *payload) {
  kiln_record rec = h->rec;
  const kiln_unit_info *unit;
  char digest[65], target[16];
  kiln_status rc;
  slot_names(slot, &unit, target);
  if (!unit || strcmp(unit->name, h->rec.unit) != 0 || strcmp(target, h->rec.target) != 0) {
    rc = kiln_fail(KILN_ECORRUPT, "coordination: the root sent %s %s for slot %s %s", h->rec.unit,
                   h->rec.target, unit ? unit->name : "?", target);
    goto out;
  }
  KILN_CHECK(kiln_sha256_hex(digest, payload, (size_t)h->rec.size));
  if (strcmp(digest, h->rec.digest) != 0) {
    rc = kiln_fail(KILN_ECORRUPT, "coordination: %s %s arrived with digest %.12s, expected %.12s",
                   h->rec.unit, h->rec.target, digest, h->rec.digest);
    goto out;
  }
  KILN_CHECK(kiln_cache_put(r->p.cache, &rec, payload, (size_t)h->rec.size,
                            h->log_size ? (const char *)payload + h->rec.size : NULL,
                            (size_t)h->log_size));
  r->rep->received++;
out:
  return rc;
}

/* Sends one slot from the root to every rank; *local_rc keeps a receiver's
 * own failure (the transfer goes on: the others must not hang). A receiver
 * short of memory takes the chunks into scratch (CHUNK bytes) and fails
 * at the end with everyone else. */
static kiln_status transfer(run *r, size_t slot, int want, uint8_t *scratch, kiln_status *local_rc,
                            char *err, size_t cap) {
  uint8_t wire[COORD_HEADER_BYTES], *payload = NULL;
  coord_header h;
  char what[48];
  size_t total;
  kiln_status rc = KILN_OK;
  if (r->c->rank == 0) {
    root_read(r, slot, &h, &payload);
    kiln_header_encode(&h, wire);
  }
  snprintf(what, sizeof what, "artifact header %zu", slot);
  KILN_CHECK(collective(r, 1, wire, sizeof wire, what));
  KILN_CHECK(kiln_header_decode(&h, wire));
  if (h.status != KILN_OK) {
    rc = kiln_fail((kiln_status)h.status, "coordination: %s", h.message);
    goto out;
  }
  total = (size_t)(h.rec.size + h.log_size);
  if (r->c->rank != 0 &&
      (h.rec.size > ((uint64_t)1 << 32) || h.log_size > ((uint64_t)1 << 32) ||
       !(payload = malloc(total + 1))) &&
      *local_rc == KILN_OK) {
    *local_rc = kiln_fail(KILN_ENOMEM, "coordination: no memory for %s %s (%zu bytes)", h.rec.unit,
                          h.rec.target, total);
    snprintf(err, cap, "%s", kiln_last_error());
  }
  for (size_t at = 0; at < total; at += CHUNK) {
    size_t n = total - at < CHUNK ? total - at : CHUNK;
    snprintf(what, sizeof what, "artifact bytes of slot %zu", slot);
    KILN_CHECK(collective(r, 1, payload ? payload + at : scratch, n, what));
  }
  if (r->c->rank != 0) {
    r->rep->bytes_received += total;
    if (want && payload && *local_rc == KILN_OK &&
        (*local_rc = store(r, slot, &h, payload)) != KILN_OK)
      snprintf(err, cap, "%s", kiln_last_error());
  }
out:
  free(payload);
  return rc;
}

/* After READY: what is still needed (a shared directory has it all), then
 * the transfers. */
static kiln_status distribute(run *r, uint8_t *buf, kiln_status *local_rc, char *err, size_t cap) {
  uint8_t *mine = malloc(COORD_MAP_BYTES), *scratch = malloc(CHUNK);
  size_t slots = 0, n = 0;
  kiln_status rc;
  memset(buf, 0, HDR + COORD_MAP_BYTES);
  if (!mine || !scratch)
    *local_rc = kiln_fail(KILN_ENOMEM, "coordination: out of memory");
  else
    *local_rc = r->h->local(r->h->user, buf + HDR, &slots, r->uni);
  if (*local_rc != KILN_OK) {
    snprintf(err, cap, "%s", kiln_last_error());
    buf[OFF_FAILED] = 1;
    memset(buf + HDR, 0, COORD_MAP_BYTES);
  } else {
    memcpy(mine, buf + HDR, COORD_MAP_BYTES);
  }
  KILN_CHECK(collective(r, 0, buf, HDR + COORD_MAP_BYTES, "what is still needed"));
  if (buf[OFF_FAILED]) {
    rc = someone_failed(r, *local_rc, err, "checking its cache after the build");
    goto out;
  }
  n = count_set(buf + HDR);
  TL(r, "%zu artifact%s to send (%zu needed here)", n, n == 1 ? "" : "s", count_set(mine));
  for (size_t slot = 0; slot < COORD_MAP_BYTES; slot++)
    if (buf[HDR + slot]) KILN_CHECK(transfer(r, slot, mine[slot], scratch, local_rc, err, cap));
  rc = KILN_OK;
out:
  free(mine);
  free(scratch);
  return rc;
}

/* ---- step 4: every rank holds the same artifacts ---- */

static kiln_status final_check(run *r, kiln_status local_rc, const char *err_in) {
  uint8_t buf[HDR], fp[COORD_FP_BYTES];
  char err[4096];
  size_t slots = 0;
  kiln_status rc = local_rc;
  uint8_t *need = calloc(1, COORD_MAP_BYTES);
  snprintf(err, sizeof err, "%s", err_in);
  memset(buf, 0, sizeof buf);
  memset(fp, 0, sizeof fp);
  if (rc == KILN_OK && !need) rc = kiln_fail(KILN_ENOMEM, "coordination: out of memory");
  if (rc == KILN_OK && (rc = r->h->local(r->h->user, need, &slots, r->uni)) == KILN_OK &&
      count_set(need) != 0)
    rc = kiln_fail(KILN_EINTERNAL,
                   "coordination: rank %d still lacks %zu artifact(s) after the "
                   "transfers",
                   r->c->rank, count_set(need));
  if (rc == KILN_OK) rc = r->h->fingerprint(r->h->user, fp);
  if (rc != KILN_OK) {
    if (!err_in[0]) snprintf(err, sizeof err, "%s", kiln_last_error());
    buf[OFF_FAILED] = 1;
  }
  free(need);
  put_fp(buf + OFF_FP, fp);
  KILN_CHECK(collective(r, 0, buf, sizeof buf, "fingerprint of the artifacts"));
  if (buf[OFF_FAILED]) {
    rc = someone_failed(r, rc, err, "storing or loading the artifacts");
    goto out;
  }
  if (!fp_agrees(buf + OFF_FP)) {
    rc = disagree(r, fp, "the artifacts they hold (their fingerprints differ)");
    goto out;
  }
  kiln_fp_hex(fp, r->rep->fingerprint);
  rc = KILN_OK;
out:
  return rc;
}

static kiln_status resolve_timeout(double *timeout_s) {
  return kiln_option_seconds(timeout_s, *timeout_s, KILN_P_build_timeout_s, "timeout_s");
}

/* For a rank that is already failing: a bad KILN_BUILD_TIMEOUT (or timeout_s)
 * must not keep it from telling the others; the getter gives the default. */
static double timeout_or_default(double timeout_s) {
  double dflt;
  if (resolve_timeout(&timeout_s) == KILN_OK) return timeout_s;
  kiln_param_build_timeout_s(&dflt);
  return dflt;
}

kiln_status kiln_coord_run(const coord_params *p, const coord_hooks *h, kiln_status setup,
                           kiln_coord_report *rep) {
  static uint8_t spare[HDR + COORD_MAP_BYTES]; /* see below */
  static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
  run r;
  uint8_t *buf = calloc(1, HDR + COORD_MAP_BYTES), *uni = NULL;
  kiln_status rc, local_rc = KILN_OK;
  char err[4096] = "";
  int spared = 0;
  memset(&r, 0, sizeof r);
  r.p = *p;
  r.h = h;
  r.c = p->comm;
  r.rep = rep;
  r.t0 = kiln_clock_ms();
  memset(rep, 0, sizeof *rep);
  rep->rank = p->comm->rank;
  rep->size = p->comm->size;
  if (!buf) { /* still join the exchange, as failed, through a shared spare buffer */
    pthread_mutex_lock(&spare_lock);
    spared = 1;
    buf = spare;
    memset(buf, 0, sizeof spare);
    if (setup == KILN_OK) setup = kiln_fail(KILN_ENOMEM, "coordination: out of memory");
  }
  fill_exchange(&r, setup, buf, &local_rc, err, sizeof err);
  /* after fill_exchange took this rank's error: resolving may set another */
  if (!(r.p.timeout_s > 0)) r.p.timeout_s = timeout_or_default(r.p.timeout_s); /* failed setup */
  TL(&r, "%zu slot%s, %zu missing here%s", rep->slots, rep->slots == 1 ? "" : "s",
     count_set(buf + HDR), local_rc != KILN_OK ? " (failed locally)" : "");
  KILN_CHECK(collective(&r, 0, buf, HDR + COORD_MAP_BYTES, "union of misses"));
  if (buf[OFF_FAILED]) {
    rc = someone_failed(&r, local_rc, err, "before the exchange");
    goto out;
  }
  if (!fp_agrees(buf + OFF_CFG)) {
    rc = disagree(&r, r.cfg,
                  "the build configuration (kiln version, KILN_NVRTC_OPTIONS, kernel sources)");
    goto out;
  }
  rep->missing = count_set(buf + HDR);
  TL(&r, "union of misses: %zu (unit, target) pair%s", rep->missing, rep->missing == 1 ? "" : "s");
  if (rep->missing == 0) { /* warm: this one collective was the whole protocol */
    if (!fp_agrees(buf + OFF_FP)) {
      rc = disagree(&r, r.fp, "the artifacts they hold (their fingerprints differ)");
      goto out;
    }
    kiln_fp_hex(buf + OFF_FP, rep->fingerprint);
    rc = KILN_OK;
    goto out;
  }
  if (!(uni = malloc(COORD_MAP_BYTES))) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  memcpy(uni, buf + HDR, COORD_MAP_BYTES);
  r.uni = uni;
  KILN_CHECK(p->comm->rank == 0 ? root_build(&r, uni, rep->missing) : await_root(&r));
  KILN_CHECK(distribute(&r, buf, &local_rc, err, sizeof err));
  rc = final_check(&r, local_rc, local_rc != KILN_OK ? err : "");
out:
  rep->total_ms = kiln_clock_ms() - r.t0;
  if (rc == KILN_OK)
    TL(&r, "ready: %zu collectives, longest wait %.1f ms (%s), %zu received (%llu bytes)",
       rep->collectives, rep->longest_wait_ms, rep->longest_what, rep->received,
       (unsigned long long)rep->bytes_received);
  else
    TL(&r, "failed (%s): longest collective wait %.1f ms (%s)", kiln_status_str(rc),
       rep->longest_wait_ms, rep->longest_what);
  free(uni);
  if (spared)
    pthread_mutex_unlock(&spare_lock);
  else
    free(buf);
  return rc;
}

/* ---- parameters and communicators ---- */

kiln_status kiln_coord_defaults(coord_params *p) {
  kiln_status rc = KILN_OK;
  KILN_CHECK(kiln_option_ms_as_seconds(&p->heartbeat_s, p->heartbeat_s, KILN_P_heartbeat_ms,
                                       "heartbeat_s"));
  KILN_CHECK(kiln_option_seconds(&p->timeout_s, p->timeout_s, KILN_P_build_timeout_s, "timeout_s"));
  KILN_CHECK(kiln_option_int(&p->jobs, p->jobs, KILN_P_jobs, "jobs"));
  KILN_CHECK(kiln_option_int(&p->offline, p->offline, KILN_P_offline, "offline"));
  if (p->heartbeat_s * 2 > p->timeout_s)
    rc = kiln_fail(KILN_EINVAL,
                   "coordination: the heartbeat (%.0f ms) must be at most half the builder "
                   "timeout (%.1f s), or waiting ranks would give up on a healthy root",
                   p->heartbeat_s * 1e3, p->timeout_s);
out:
  return rc;
}

kiln_status kiln_comm_check(const kiln_comm *c) {
  if (!c) return kiln_fail(KILN_EINVAL, "coordination: comm is NULL");
  if (c->version != KILN_COMM_VERSION)
    return kiln_fail(KILN_EINVAL, "kiln_comm: unknown version %d (this libkiln knows %d)",
                     c->version, KILN_COMM_VERSION);
  if (!c->broadcast || !c->max_reduce)
    return kiln_fail(KILN_EINVAL, "kiln_comm: broadcast and max_reduce are required");
  if (c->size < 1 || c->rank < 0 || c->rank >= c->size)
    return kiln_fail(KILN_EINVAL, "kiln_comm: rank %d of size %d", c->rank, c->size);
  if (kiln_unit_count() > COORD_MAP_UNITS)
    return kiln_fail(KILN_EINTERNAL, "coordination: more than %d units", COORD_MAP_UNITS);
  return KILN_OK;
}

void kiln_comm_free(kiln_comm *c) {
  if (!c) return;
  if (c->destroy) c->destroy(c->self);
  free(c);
}

kiln_status kiln_coord_fail(const kiln_comm *comm, double timeout_s) {
  kiln_coord_report rep;
  coord_params p;
  run r;
  uint8_t *buf = NULL;
  kiln_status rc;
  KILN_CHECK(kiln_comm_check(comm));
  memset(&p, 0, sizeof p);
  memset(&rep, 0, sizeof rep);
  p.comm = comm;
  p.timeout_s = timeout_or_default(timeout_s);
  memset(&r, 0, sizeof r);
  r.p = p;
  r.c = comm;
  r.rep = &rep;
  r.t0 = kiln_clock_ms();
  if (!(buf = calloc(1, HDR + COORD_MAP_BYTES))) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  buf[OFF_FAILED] = 1;
  rc = collective(&r, 0, buf, HDR + COORD_MAP_BYTES, "union of misses");
out:
  free(buf);
  return rc;
}

kiln_status kiln_coord_any(int *flag, const kiln_comm *comm, double timeout_s) {
  uint8_t v;
  kiln_status rc;
  if (!flag) return kiln_fail(KILN_EINVAL, "kiln_coord_any: flag is NULL");
  KILN_CHECK(kiln_comm_check(comm));
  KILN_CHECK(resolve_timeout(&timeout_s));
  v = *flag != 0;
  if ((rc = comm->max_reduce(comm->self, &v, 1, timeout_s)) != KILN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    if (comm->abort) comm->abort(comm->self, why);
    rc = kiln_fail(KILN_EPEER, "coordination: a one-byte max-reduce did not complete: %s", why);
    goto out;
  }
  *flag = v;
out:
  return rc;
}
