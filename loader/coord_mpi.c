/* The MPI transport (libkiln_mpi): non-blocking collectives polled against a
 * deadline, so a dead or silent peer is an error, never a hang. Uses the
 * public API only (it links libkiln). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/comm_mpi.h"

typedef struct mpi_self {
  MPI_Comm comm;
  int aborted;
  int finalize;    /* we initialized MPI */
  uint8_t *bounce; /* what MPI reads and writes: kiln's buffers may be gone after a timeout */
  size_t cap;
} mpi_self;

/* A collective that timed out is still pending on its bounce buffer (MPI
 * cannot cancel it) and may complete into it at any later MPI call: the
 * buffer is kept, reachable, until exit. */
static void *abandoned[64];
static int n_abandoned;

static void abandon(mpi_self *m) {
  if (n_abandoned < (int)(sizeof abandoned / sizeof *abandoned))
    abandoned[n_abandoned++] = m->bounce;
  m->bounce = NULL;
  m->cap = 0;
}

static kiln_status reserve(mpi_self *m, size_t bytes) {
  uint8_t *b;
  if (bytes <= m->cap) return KILN_OK;
  if (!(b = realloc(m->bounce, bytes))) return kiln_comm_error(KILN_ENOMEM, "MPI: out of memory");
  m->bounce = b;
  m->cap = bytes;
  return KILN_OK;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static kiln_status mpi_error(int e, const char *what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(e, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error %d", e);
  return kiln_comm_error(KILN_EPEER, "MPI %s failed: %s", what, text);
}

/* Polls req until done: sleeps start at 20 us and double up to 2 ms, so a
 * waiting rank costs almost no CPU (ranks are often oversubscribed while
 * the root compiles) and sees a frame within ~2 ms. */
static kiln_status wait_req(mpi_self *m, MPI_Request *req, double timeout_s, const char *what,
                            size_t bytes) {
  double deadline = now_s() + timeout_s;
  long sleep_ns = 20000;
  for (;;) {
    int done = 0, e = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS) return mpi_error(e, what);
    if (done) return KILN_OK;
    if (now_s() > deadline)
      return kiln_comm_error(KILN_ETIMEDOUT, "MPI %s of %zu bytes did not complete within %.1f s",
                             what, bytes, timeout_s);
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    if (sleep_ns < 2000000) sleep_ns *= 2;
  }
  (void)m;
}

static kiln_status finish(mpi_self *m, MPI_Request *req, void *buf, size_t bytes, double timeout_s,
                          const char *what) {
  kiln_status st = wait_req(m, req, timeout_s, what, bytes);
  if (st == KILN_ETIMEDOUT)
    abandon(m);
  else if (st == KILN_OK)
    memcpy(buf, m->bounce, bytes);
  return st;
}

/* Checks a call and stages buf into the bounce buffer. */
static kiln_status begin(mpi_self *m, const void *buf, size_t bytes, const char *what) {
  kiln_status st;
  if (m->aborted) return kiln_comm_error(KILN_EPEER, "MPI communicator was aborted");
  if (bytes > (size_t)1 << 30)
    return kiln_comm_error(KILN_EINVAL, "MPI %s: %zu bytes", what, bytes);
  if ((st = reserve(m, bytes ? bytes : 1)) != KILN_OK) return st;
  memcpy(m->bounce, buf, bytes);
  return KILN_OK;
}

static kiln_status mpi_broadcast(void *self, void *buf, size_t bytes, int root, double timeout_s) {
  mpi_self *m = self;
  MPI_Request req;
  kiln_status st;
  int e;
  if ((st = begin(m, buf, bytes, "broadcast")) != KILN_OK) return st;
  e = MPI_Ibcast(m->bounce, (int)bytes, MPI_UNSIGNED_CHAR, root, m->comm, &req);
  if (e != MPI_SUCCESS) return mpi_error(e, "Ibcast");
  return finish(m, &req, buf, bytes, timeout_s, "broadcast");
}

static kiln_status mpi_max_reduce(void *self, void *buf, size_t bytes, double timeout_s) {
  mpi_self *m = self;
  MPI_Request req;
  kiln_status st;
  int e;
  if ((st = begin(m, buf, bytes, "max-reduce")) != KILN_OK) return st;
  e = MPI_Iallreduce(MPI_IN_PLACE, m->bounce, (int)bytes, MPI_UNSIGNED_CHAR, MPI_MAX, m->comm,
                     &req);
  if (e != MPI_SUCCESS) return mpi_error(e, "Iallreduce");
  return finish(m, &req, buf, bytes, timeout_s, "max-reduce");
}

/* No MPI_Abort: a library does not end the job. The caller returns its
 * error; its process exits and the launcher decides about the others. */
static void mpi_abort(void *self, const char *why) {
  mpi_self *m = self;
  (void)why;
  m->aborted = 1;
}

static void mpi_destroy(void *self) {
  mpi_self *m = self;
  if (!m) return;
  if (!m->aborted) {
    MPI_Comm_free(&m->comm);
    if (m->finalize) MPI_Finalize();
  }
  free(m->bounce); /* NULL once abandoned */
  free(m);
}

static kiln_status wrap(kiln_comm **out, MPI_Comm parent, int finalize) {
  kiln_comm *c = calloc(1, sizeof *c);
  mpi_self *m = calloc(1, sizeof *m);
  int e;
  if (!c || !m) {
    free(c);
    free(m);
    return kiln_comm_error(KILN_ENOMEM, "out of memory");
  }
  if ((e = MPI_Comm_dup(parent, &m->comm)) != MPI_SUCCESS) {
    free(c);
    free(m);
    return mpi_error(e, "Comm_dup");
  }
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(m->comm, &c->rank);
  MPI_Comm_size(m->comm, &c->size);
  m->finalize = finalize;
  c->version = KILN_COMM_VERSION;
  c->self = m;
  c->broadcast = mpi_broadcast;
  c->max_reduce = mpi_max_reduce;
  c->abort = mpi_abort;
  c->destroy = mpi_destroy;
  snprintf(c->name, sizeof c->name, "mpi");
  *out = c;
  return KILN_OK;
}

kiln_status kiln_comm_mpi(kiln_comm **out, const void *mpi_comm) {
  int init = 0;
  if (!out || !mpi_comm) return kiln_comm_error(KILN_EINVAL, "kiln_comm_mpi: NULL argument");
  *out = NULL;
  MPI_Initialized(&init);
  if (!init) return kiln_comm_error(KILN_EINVAL, "kiln_comm_mpi: MPI is not initialized");
  return wrap(out, *(const MPI_Comm *)mpi_comm, 0);
}

kiln_status kiln_comm_mpi_world(kiln_comm **out) {
  int init = 0, provided = 0, e;
  if (!out) return kiln_comm_error(KILN_EINVAL, "kiln_comm_mpi_world: out is NULL");
  *out = NULL;
  MPI_Initialized(&init);
  if (!init && (e = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
    return mpi_error(e, "Init_thread");
  return wrap(out, MPI_COMM_WORLD, !init);
}
