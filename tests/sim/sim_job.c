/* One job of simulated ranks (tests/sim/sim_job.h). */
#include "tests/sim/sim_job.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct rank_arg {
  const sim_job *job;
  sim_world *w;
  int rank;
  kiln_cache *cache;
  kiln_status st;
  kiln_coord_report rep;
  pthread_t tid;
  int started;
} rank_arg;

static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_outcome *err_out; /* where rank threads leave the first errors */

static void *rank_main(void *p) {
  rank_arg *a = p;
  const sim_job *j = a->job;
  kiln_coord_options o = KILN_COORD_OPTIONS_INIT;
  o.targets = &j->target;
  o.n_targets = 1;
  o.kernels = j->kernels;
  o.heartbeat_s = j->heartbeat_s;
  o.peer_timeout_s = j->peer_timeout_s;
  o.timeout_s = j->timeout_s;
  o.jobs = 1;
  sim_rank_enter(a->w, a->rank);
  a->st = kiln_coord_fill(&a->rep, a->cache, &o, sim_comm(a->w, a->rank));
  if (a->st != KILN_OK) {
    pthread_mutex_lock(&err_lock);
    if (a->rank == 0)
      snprintf(err_out->root_err, sizeof err_out->root_err, "%s", kiln_last_error());
    else if (!err_out->other_err[0]) {
      snprintf(err_out->other_err, sizeof err_out->other_err, "%s", kiln_last_error());
      err_out->other_err_rank = a->rank;
    }
    pthread_mutex_unlock(&err_lock);
  }
  sim_rank_leave(a->w, a->rank);
  return NULL;
}

static kiln_status open_cache(kiln_cache **out, const char *dir, const char *layer) {
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_remote_options ro = KILN_REMOTE_OPTIONS_INIT;
  co.dir = dir;
  co.ro_path = layer ? layer : "";
  ro.url = ""; /* no remote: the layer is the root's source */
  co.remote = &ro;
  return kiln_cache_open(out, &co);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sum_up(sim_outcome *o, const sim_job *j, sim_world *w, const rank_arg *a) {
  int n = j->sim.n, first_ok = -1;
  double cpu = 0;
  uint64_t bytes = 0;
  o->fingerprints_agree = 1;
  o->collectives_min = (size_t)-1;
  for (int r = 0; r < n; r++) {
    const sim_rank_stats *s = sim_stats(w, r);
    const kiln_coord_report *rep = &a[r].rep;
    if (a[r].st == KILN_OK)
      o->n_ok++;
    else if (a[r].st == KILN_EPEER)
      o->n_epeer++;
    else
      o->n_other++;
    if (s->clock_ms > o->ready_ms) o->ready_ms = s->clock_ms;
    if (rep->longest_wait_ms > o->longest_wait_ms) {
      o->longest_wait_ms = rep->longest_wait_ms;
      snprintf(o->longest_what, sizeof o->longest_what, "%s", rep->longest_what);
      o->longest_rank = r;
    }
    if (rep->collectives < o->collectives_min) o->collectives_min = rep->collectives;
    if (rep->collectives > o->collectives_max) o->collectives_max = rep->collectives;
    o->compiled += rep->compiled;
    o->received += rep->received;
    if (rep->missing > o->missing) o->missing = rep->missing;
    if (a[r].st == KILN_OK) {
      if (first_ok < 0)
        first_ok = r;
      else if (strcmp(rep->fingerprint, a[first_ok].rep.fingerprint) != 0)
        o->fingerprints_agree = 0;
    }
    if (r == 0) {
      o->root_cpu_us = s->cpu_s * 1e6;
      o->root_frame_bytes = s->root_frame_bytes;
      o->frames = s->frames;
    } else {
      cpu += s->cpu_s;
      if (s->cpu_s * 1e6 > o->cpu_us_max) o->cpu_us_max = s->cpu_s * 1e6;
    }
    bytes += s->bytes_sent;
    if (s->bytes_sent > o->bytes_max) o->bytes_max = s->bytes_sent, o->bytes_max_rank = r;
    if (r == j->sim.freeze_rank)
      o->freeze_ms = s->freeze_ms;
    else if (s->clock_ms > o->others_end_max_ms)
      o->others_end_max_ms = s->clock_ms;
  }
  o->root_status = a[0].st;
  if (n > 1) o->bytes_received = a[1].rep.bytes_received;
  if (first_ok >= 0)
    snprintf(o->fingerprint, sizeof o->fingerprint, "%s", a[first_ok].rep.fingerprint);
  o->cpu_us_mean = n > 1 ? cpu * 1e6 / (n - 1) : 0;
  o->bytes_mean = (double)bytes / n;
}

kiln_status sim_job_run(sim_outcome *out, const sim_job *j) {
  int n = j->sim.n;
  rank_arg *a = calloc((size_t)n, sizeof *a);
  kiln_cache *root = NULL, *others = NULL;
  sim_world *w = NULL;
  pthread_attr_t attr;
  double t0 = now_s();
  kiln_status rc = KILN_OK;
  memset(out, 0, sizeof *out);
  out->other_err_rank = -1;
  err_out = out;
  if (!a) return kiln_comm_error(KILN_ENOMEM, "sim: out of memory");
  if ((rc = open_cache(&root, j->root_dir, j->root_layer)) != KILN_OK) goto out;
  if (n > 1 && (rc = open_cache(&others, j->others_dir, NULL)) != KILN_OK) goto out;
  if ((rc = sim_world_new(&w, &j->sim)) != KILN_OK) goto out;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, (j->stack_kib ? j->stack_kib : 256) << 10);
  for (int r = 0; r < n; r++) {
    a[r].job = j;
    a[r].w = w;
    a[r].rank = r;
    a[r].cache = r == 0 ? root : others;
    if (pthread_create(&a[r].tid, &attr, rank_main, &a[r]) != 0) {
      /* the ranks started stop waiting for the rest: their collectives time out */
      rc = kiln_comm_error(KILN_ENOMEM, "sim: cannot start the thread of rank %d of %d", r, n);
      for (int k = r; k < n; k++) {
        a[k].st = rc;
        sim_rank_leave(w, k);
      }
      break;
    }
    a[r].started = 1;
  }
  pthread_attr_destroy(&attr);
  for (int r = 0; r < n; r++)
    if (a[r].started && r != j->sim.freeze_rank) pthread_join(a[r].tid, NULL);
  if (j->sim.freeze_rank >= 0 && j->sim.freeze_rank < n) {
    sim_thaw(w);
    if (a[j->sim.freeze_rank].started) pthread_join(a[j->sim.freeze_rank].tid, NULL);
  }
  sum_up(out, j, w, a);
  out->real_s = now_s() - t0;
out:
  sim_world_free(w);
  kiln_cache_close(others);
  kiln_cache_close(root);
  free(a);
  return rc;
}
