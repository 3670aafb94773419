/* The simulated communicator (tests/sim/sim_comm.h): a rendezvous per
 * collective, carried out by the last rank to arrive, with each rank's end
 * time from a cost model of the chosen algorithm. */
#include "tests/sim/sim_comm.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "loader/coord_internal.h" /* COORD_FRAME_BYTES: which broadcasts are status frames */

/* A ring broadcast forwards slices of this size as they arrive (NCCL's LL128 and
 * LL protocols pipeline finer still; its Simple protocol, for large messages,
 * in steps of up to 512 KiB): the first slice crosses N - 1 hops, the rest
 * follow one hop behind each other. */
#define RING_CHUNK ((size_t)4 << 10)

typedef struct sim_rank {
  sim_world *w;
  int rank;
  kiln_comm comm;
  /* this rank's part in the pending collective */
  uint8_t *buf;
  size_t bytes;
  int root; /* -1: max-reduce */
  double limit_ms, arrival_ms;
  unsigned long gen;
  kiln_status result;
  int calls, left, frozen, aborted;
  int out; /* no longer counted in w->live (frozen, or left) */
  double cpu0, sim_cpu;
  sim_rank_stats st;
} sim_rank;

struct sim_world {
  sim_params p;
  double alpha_ms, beta_ms;
  pthread_mutex_t m;
  pthread_cond_t cv, thaw_cv;
  int live;    /* ranks that still take part: not left, not frozen */
  int arrived; /* in the pending collective */
  unsigned long gen;
  int thawed;
  double build_end_ms; /* the root's build ends (virtual); set after its first collective */
  sim_rank *ranks;
  double *t; /* scratch: per-rank times */
  kiln_clock_hook hook;
};

/* Virtual times closer than this are the same time: the clock is summed in
 * doubles, and a frame due at the build's end must not come out as "before". */
#define EPS_MS 1e-6

static __thread sim_rank *me; /* the rank this thread runs, or NULL */

static double real_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int sim_alg_parse(const char *name) {
  if (strcmp(name, "ring") == 0) return SIM_RING;
  if (strcmp(name, "tree") == 0) return SIM_TREE;
  if (strcmp(name, "rd") == 0) return SIM_RD;
  return -1;
}

const char *sim_alg_name(sim_alg alg) {
  return alg == SIM_RING ? "ring" : alg == SIM_TREE ? "tree" : "rd";
}

/* ---- virtual time ---- */

static double hook_now(void *user) {
  (void)user;
  return me ? me->st.clock_ms : real_ms(); /* other threads (the root's build) run in real time */
}

/* The root's pause between frames: the next heartbeat while its virtual
 * build lasts; after that, the real build's end (a real wait), then on. */
static void hook_wait(void *user, pthread_cond_t *cond, pthread_mutex_t *lock, const int *done,
                      double until_ms) {
  sim_world *w = user;
  sim_rank *r = me;
  if (!r) return;
  if (until_ms <= w->build_end_ms + EPS_MS) {
    r->st.clock_ms = until_ms;
    return;
  }
  {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* coord_root.c's condition waits on this clock */
    ts.tv_sec += (time_t)w->p.real_limit_s;
    while (!*done)
      if (pthread_cond_timedwait(cond, lock, &ts) == ETIMEDOUT) break;
  }
  if (r->st.clock_ms < w->build_end_ms) r->st.clock_ms = w->build_end_ms;
}

/* The root's build lasts until its virtual clock reaches build_end_ms. */
static int hook_build_held(void *user) {
  sim_world *w = user;
  return me && me->st.clock_ms < w->build_end_ms - EPS_MS;
}

/* ---- cost models: each participant's end time, from the arrival times ---- */

static int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n)
    k++;
  return k;
}

static double hop(const sim_world *w, size_t bytes) {
  return w->alpha_ms + w->beta_ms * (double)bytes;
}

/* Broadcast from rank 0. Binomial tree (tree, rd): in round k, rank r <
 * 2^k sends to r + 2^k once it has the data and is free, one message at a
 * time. Ring (NCCL): rank d receives from d - 1, pipelined in chunks. */
static void bcast_times(sim_world *w, size_t bytes) {
  int n = w->p.n;
  sim_rank *R = w->ranks;
  double *t = w->t; /* free[r]: when r has the data and its last send ended */
  if (w->p.alg == SIM_RING) {
    size_t chunks = bytes ? (bytes + RING_CHUNK - 1) / RING_CHUNK : 1;
    double h = hop(w, bytes < RING_CHUNK ? bytes : RING_CHUNK), first = R[0].arrival_ms;
    R[0].st.clock_ms = first + (double)chunks * h;
    for (int d = 1; d < n; d++) {
      first = fmax(first, R[d].arrival_ms) + h;
      R[d].st.clock_ms = first + (double)(chunks - 1) * h;
      if (d < n - 1) R[d].st.bytes_sent += bytes;
    }
    if (n > 1) R[0].st.bytes_sent += bytes;
    return;
  }
  t[0] = R[0].arrival_ms;
  for (int mask = 1; mask < n; mask <<= 1)
    for (int r = 0; r < mask && r + mask < n; r++) {
      int c = r + mask;
      double got = fmax(t[r], R[c].arrival_ms) + hop(w, bytes);
      t[r] = got; /* busy until this send ended */
      t[c] = got;
      R[r].st.bytes_sent += bytes;
    }
  for (int r = 0; r < n; r++)
    R[r].st.clock_ms = t[r];
}

/* Max-reduce: everyone's bytes are needed, so it starts at the last
 * arrival. Ring: reduce-scatter + all-gather, 2(N-1) steps of bytes/N.
 * Tree: reduce up a binomial tree and broadcast down, 2 log2 N steps of all
 * the bytes. Recursive doubling: log2 N exchanges of all the bytes, two more
 * when N is not a power of two. */
static void reduce_times(sim_world *w, size_t bytes) {
  int n = w->p.n, lg = ceil_log2(n);
  double start = 0, cost;
  uint64_t sent;
  for (int r = 0; r < n; r++)
    start = fmax(start, w->ranks[r].arrival_ms);
  if (n == 1) {
    cost = 0;
    sent = 0;
  } else if (w->p.alg == SIM_RING) {
    cost = 2.0 * (n - 1) * hop(w, (bytes + (size_t)n - 1) / (size_t)n);
    sent = (uint64_t)(2.0 * (n - 1) * ((bytes + (size_t)n - 1) / (size_t)n));
  } else if (w->p.alg == SIM_TREE) {
    cost = 2.0 * lg * hop(w, bytes);
    sent = 2 * (uint64_t)bytes; /* up once, down to about one child on average */
  } else {
    int pow2 = (1 << lg) == n ? lg : lg - 1;
    cost = (pow2 + ((1 << pow2) < n ? 2 : 0)) * hop(w, bytes);
    sent = (uint64_t)(pow2 + ((1 << pow2) < n ? 1 : 0)) * bytes;
  }
  for (int r = 0; r < n; r++) {
    w->ranks[r].st.clock_ms = start + cost;
    w->ranks[r].st.bytes_sent += sent;
  }
}

/* The last rank in: the collective for all (under w->m). Incomplete (a
 * rank frozen or gone): every participant times out at arrival + limit. */
static void carry_out(sim_world *w) {
  int n = w->p.n, complete = w->arrived == n;
  sim_rank *R = w->ranks;
  size_t bytes = R[0].bytes;
  int same = 1;
  for (int r = 0; r < n && complete; r++)
    if (R[r].bytes != R[0].bytes || R[r].root != R[0].root) complete = 0, same = 0;
  if (complete && R[0].root >= 0) {
    uint64_t before = R[0].st.bytes_sent;
    for (int r = 1; r < n; r++)
      memcpy(R[r].buf, R[0].buf, bytes);
    bcast_times(w, bytes);
    if (bytes == COORD_FRAME_BYTES) {
      R[0].st.frames++;
      R[0].st.root_frame_bytes += R[0].st.bytes_sent - before;
    }
  } else if (complete) {
    for (size_t i = 0; i < bytes; i++) {
      uint8_t m = 0;
      for (int r = 0; r < n; r++)
        m = R[r].buf[i] > m ? R[r].buf[i] : m;
      for (int r = 0; r < n; r++)
        R[r].buf[i] = m;
    }
    reduce_times(w, bytes);
  }
  for (int r = 0; r < n; r++) {
    sim_rank *x = &R[r];
    if (x->out || x->gen != w->gen) continue;
    x->result = KILN_OK;
    if (!complete || x->st.clock_ms - x->arrival_ms > x->limit_ms) {
      x->result = same ? KILN_ETIMEDOUT : KILN_EINTERNAL;
      x->st.clock_ms = x->arrival_ms + x->limit_ms;
    }
  }
  w->arrived = 0;
  w->gen++;
  pthread_cond_broadcast(&w->cv);
}

/* ---- the communicator ---- */

static kiln_status collective(sim_rank *x, void *buf, size_t bytes, int root, double timeout_s) {
  sim_world *w = x->w;
  double c0 = cpu_s();
  kiln_status st;
  unsigned long gen;
  pthread_mutex_lock(&w->m);
  if (x->aborted) {
    pthread_mutex_unlock(&w->m);
    return kiln_comm_error(KILN_EPEER, "sim rank %d: the communicator was aborted", x->rank);
  }
  if (x->rank == w->p.freeze_rank && x->calls == w->p.freeze_at) {
    struct timespec ts; /* stopped: not counted among those who take part */
    x->frozen = 1;
    x->out = 1;
    x->st.freeze_ms = x->st.clock_ms;
    if (--w->live == w->arrived && w->arrived) carry_out(w);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)w->p.real_limit_s;
    while (!w->thawed)
      if (pthread_cond_timedwait(&w->thaw_cv, &w->m, &ts) == ETIMEDOUT) break;
    x->frozen = 0; /* the others have gone: nobody completes it */
    x->result = KILN_ETIMEDOUT;
    x->st.clock_ms += timeout_s * 1e3;
    pthread_mutex_unlock(&w->m);
    return kiln_comm_error(KILN_ETIMEDOUT, "sim rank %d: no peer within %.2f s (virtual)", x->rank,
                           timeout_s);
  }
  x->calls++;
  x->buf = buf;
  x->bytes = bytes;
  x->root = root;
  x->limit_ms = timeout_s * 1e3;
  x->arrival_ms = x->st.clock_ms;
  x->gen = gen = w->gen;
  if (++w->arrived == w->live) {
    carry_out(w);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)w->p.real_limit_s;
    while (w->gen == gen)
      if (pthread_cond_timedwait(&w->cv, &w->m, &ts) == ETIMEDOUT) break;
    if (w->gen == gen) { /* a bug in the simulation or the protocol: never hang */
      w->arrived--;
      x->result = KILN_EINTERNAL;
    }
  }
  st = x->result;
  if (x->rank == 0 && x->calls == 1) w->build_end_ms = x->st.clock_ms + w->p.build_ms;
  pthread_mutex_unlock(&w->m);
  x->sim_cpu += cpu_s() - c0;
  if (st == KILN_ETIMEDOUT)
    return kiln_comm_error(st, "sim rank %d: collective not complete within %.2f s (virtual)",
                           x->rank, timeout_s);
  if (st != KILN_OK)
    return kiln_comm_error(st, "sim rank %d: ranks out of step, or no progress in %.0f s real",
                           x->rank, w->p.real_limit_s);
  return KILN_OK;
}

static kiln_status sim_bcast(void *self, void *buf, size_t bytes, int root, double timeout_s) {
  if (root != 0) return kiln_comm_error(KILN_EINVAL, "sim: root %d is not rank 0", root);
  return collective(self, buf, bytes, root, timeout_s);
}

static kiln_status sim_max(void *self, void *buf, size_t bytes, double timeout_s) {
  return collective(self, buf, bytes, -1, timeout_s);
}

/* This rank gives up: it leaves, and the others' collectives stop waiting. */
static void sim_abort(void *self, const char *why) {
  sim_rank *x = self;
  sim_world *w = x->w;
  (void)why;
  pthread_mutex_lock(&w->m);
  x->aborted = 1;
  pthread_mutex_unlock(&w->m);
}

/* ---- the world ---- */

kiln_status sim_world_new(sim_world **out, const sim_params *p) {
  sim_world *w;
  *out = NULL;
  if (p->n < 1) return kiln_comm_error(KILN_EINVAL, "sim: %d ranks", p->n);
  if (!(w = calloc(1, sizeof *w))) return kiln_comm_error(KILN_ENOMEM, "sim: out of memory");
  w->p = *p;
  if (!(w->p.real_limit_s > 0)) w->p.real_limit_s = 300;
  w->alpha_ms = p->alpha_us / 1e3;
  w->beta_ms = p->beta_ns / 1e6;
  w->build_end_ms = INFINITY;
  w->ranks = calloc((size_t)p->n, sizeof *w->ranks);
  w->t = calloc((size_t)p->n, sizeof *w->t);
  if (!w->ranks || !w->t) {
    sim_world_free(w);
    return kiln_comm_error(KILN_ENOMEM, "sim: out of memory for %d ranks", p->n);
  }
  pthread_mutex_init(&w->m, NULL);
  pthread_cond_init(&w->cv, NULL);
  pthread_cond_init(&w->thaw_cv, NULL);
  w->live = p->n;
  for (int r = 0; r < p->n; r++) {
    sim_rank *x = &w->ranks[r];
    x->w = w;
    x->rank = r;
    x->comm.version = KILN_COMM_VERSION;
    x->comm.rank = r;
    x->comm.size = p->n;
    x->comm.self = x;
    x->comm.broadcast = sim_bcast;
    x->comm.max_reduce = sim_max;
    x->comm.abort = sim_abort;
    snprintf(x->comm.name, sizeof x->comm.name, "sim-%s", sim_alg_name(p->alg));
  }
  w->hook.now_ms = hook_now;
  w->hook.wait = hook_wait;
  w->hook.build_held = hook_build_held;
  w->hook.user = w;
  kiln_clock_set_hook(&w->hook);
  *out = w;
  return KILN_OK;
}

void sim_world_free(sim_world *w) {
  if (!w) return;
  kiln_clock_set_hook(NULL);
  if (w->ranks) {
    pthread_cond_destroy(&w->thaw_cv);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->m);
  }
  free(w->ranks);
  free(w->t);
  free(w);
}

const kiln_comm *sim_comm(sim_world *w, int rank) {
  return &w->ranks[rank].comm;
}

void sim_rank_enter(sim_world *w, int rank) {
  me = &w->ranks[rank];
  me->cpu0 = cpu_s();
}

void sim_rank_leave(sim_world *w, int rank) {
  sim_rank *x = &w->ranks[rank];
  x->st.cpu_s = cpu_s() - x->cpu0 - x->sim_cpu;
  pthread_mutex_lock(&w->m);
  x->left = 1;
  if (!x->out) {
    x->out = 1;
    if (--w->live == w->arrived && w->arrived) carry_out(w);
  }
  pthread_mutex_unlock(&w->m);
  me = NULL;
}

void sim_thaw(sim_world *w) {
  double latest = 0;
  pthread_mutex_lock(&w->m);
  for (int r = 0; r < w->p.n; r++)
    if (w->ranks[r].left) latest = fmax(latest, w->ranks[r].st.clock_ms);
  if (w->p.freeze_rank >= 0 && w->p.freeze_rank < w->p.n &&
      w->ranks[w->p.freeze_rank].st.clock_ms < latest)
    w->ranks[w->p.freeze_rank].st.clock_ms = latest;
  w->thawed = 1;
  pthread_cond_broadcast(&w->thaw_cv);
  pthread_mutex_unlock(&w->m);
}

const sim_rank_stats *sim_stats(sim_world *w, int rank) {
  return &w->ranks[rank].st;
}
