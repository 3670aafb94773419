/* fake_nccl.c — libkiln_fakenccl.so, a test double of libnccl for kiln's NCCL
 * transport (loader/coord_nccl.c), which dlopens it instead of libnccl.so.2
 * (KILN_NCCL_LIBRARY=<path>). README.md describes it.
 *
 * Communicators come from kiln_fake_nccl_comm(rank, nranks), or from
 * ncclCommInitRank with nranks 1 (a program written for the real libnccl,
 * tests/gpu/test_coord_nccl_gpu.c, runs on it); any other pointer is
 * refused (ncclInvalidArgument).
 * This process is the one rank `rank`; the others are simulated: what they
 * contribute to the m-th collective of the process (m counts from 0, see
 * kiln_fake_nccl_collectives) is byte j = kiln_fake_nccl_peer_byte(m, j).
 * So a broadcast from another root writes those bytes, a broadcast from this
 * rank copies send to recv, and a max all-reduce gives max(send, those
 * bytes) with more than one rank and send itself with one. Device memory is
 * host memory in the fake libcuda, so this is plain memory, done when it is
 * enqueued (streams are synchronous).
 *
 * Strict where it matters to the transport: the datatype must be ncclUint8
 * and the reduction ncclMax, the root a rank, buffers non-NULL; and a
 * communicator that was aborted is gone (as after a real ncclCommAbort), so
 * any later call on it is refused with ncclInvalidUsage and counted
 * (kiln_fake_nccl_calls_after_abort).
 *
 * Test hooks, read on every call: KILN_FAKE_NCCL_ASYNC_ERROR=1 makes
 * ncclCommGetAsyncError report ncclRemoteError (a peer died);
 * KILN_FAKE_NCCL_IN_PROGRESS=1 makes the communicator nonblocking: a
 * collective returns ncclInProgress and the next two ncclCommGetAsyncError
 * calls answer ncclInProgress too. */
#include <pthread.h> /* the mutex over the counters */
#include <stddef.h>  /* size_t */
#include <stdlib.h>  /* getenv */
#include <string.h>  /* memmove, memset, strcmp */

#define FAKE_EXPORT __attribute__((visibility("default")))

/* NCCL's ABI, the few parts used (nccl.h, 2.x): results, types, ops. */
typedef int ncclResult_t;
enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum { ncclUint8 = 1 };
enum { ncclMax = 2 };
typedef void *ncclComm_t;
typedef void *cudaStream_t;
typedef struct {
  char internal[128]; /* NCCL_UNIQUE_ID_BYTES */
} ncclUniqueId;

#define FAKE_NCCL_VERSION 22105 /* 2.21.5, as NCCL_VERSION_CODE spells it */
#define MAX_COMMS 64

struct fake_comm {
  int rank, nranks;
  int aborted; /* freed, as far as the caller may know */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_aborts;      /* ncclCommAbort calls */
static int g_after_abort; /* calls on a communicator after its abort */
static int g_collectives; /* ncclBroadcast + ncclAllReduce calls accepted */
static int g_pending;     /* ncclInProgress answers still to give */
static struct fake_comm g_comms[MAX_COMMS];
static int g_n_comms;

/* The communicator behind comm: ncclInvalidArgument for one that is not
 * ours; ncclInvalidUsage (counted) for one that was aborted. */
static ncclResult_t check_comm(ncclComm_t comm, struct fake_comm **out) {
  ncclResult_t r = ncclInvalidArgument;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_n_comms; i++)
    if (comm == (ncclComm_t)&g_comms[i]) {
      r = g_comms[i].aborted ? ncclInvalidUsage : ncclSuccess;
      if (g_comms[i].aborted) g_after_abort++;
      if (out) *out = &g_comms[i];
    }
  pthread_mutex_unlock(&g_mu);
  return r;
}

static int hook(const char *name) {
  const char *v = getenv(name);
  return v && !strcmp(v, "1");
}

FAKE_EXPORT ncclResult_t ncclGetVersion(int *version) {
  if (!version) return ncclInvalidArgument;
  *version = FAKE_NCCL_VERSION;
  return ncclSuccess;
}

FAKE_EXPORT const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) { /* NCCL 2.21's strings */
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}

FAKE_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  struct fake_comm *c = NULL;
  ncclResult_t r = check_comm(comm, &c);
  if (r != ncclSuccess) return r;
  if (!count) return ncclInvalidArgument;
  *count = c->nranks;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  struct fake_comm *c = NULL;
  ncclResult_t r = check_comm(comm, &c);
  if (r != ncclSuccess) return r;
  if (!rank) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error) {
  ncclResult_t r = check_comm(comm, NULL);
  if (r != ncclSuccess) return r;
  if (!async_error) return ncclInvalidArgument;
  *async_error = ncclSuccess;
  pthread_mutex_lock(&g_mu);
  if (g_pending > 0) {
    g_pending--;
    *async_error = ncclInProgress;
  }
  pthread_mutex_unlock(&g_mu);
  if (hook("KILN_FAKE_NCCL_ASYNC_ERROR")) *async_error = ncclRemoteError;
  return ncclSuccess;
}

FAKE_EXPORT void *kiln_fake_nccl_comm(int rank, int nranks);

FAKE_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id) return ncclInvalidArgument;
  memset(id, 0, sizeof *id);
  memcpy(id->internal, "kiln-fake-nccl", 14);
  return ncclSuccess;
}

/* One rank only: a real init of more would wait for the others. */
FAKE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  (void)id;
  if (!comm) return ncclInvalidArgument;
  if (nranks != 1 || rank != 0) return ncclInvalidUsage;
  *comm = kiln_fake_nccl_comm(rank, nranks);
  return *comm ? ncclSuccess : ncclSystemError;
}

/* Destroyed (or aborted) communicators are gone: later calls are refused. */
FAKE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  struct fake_comm *c = NULL;
  ncclResult_t r = check_comm(comm, &c);
  if (r != ncclSuccess) return r;
  pthread_mutex_lock(&g_mu);
  c->aborted = 1;
  pthread_mutex_unlock(&g_mu);
  return ncclSuccess;
}

/* A real abort frees the communicator: it is marked to refuse reuse. */
FAKE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  struct fake_comm *c = NULL;
  ncclResult_t r = check_comm(comm, &c);
  if (r != ncclSuccess) return r;
  pthread_mutex_lock(&g_mu);
  g_aborts++;
  c->aborted = 1;
  pthread_mutex_unlock(&g_mu);
  return ncclSuccess;
}

static unsigned char peer_byte(int m, size_t j) {
  return (unsigned char)(j * 131u + (unsigned)m * 17u + 5u);
}

/* root < 0: a max all-reduce. The result of the simulated exchange is
 * written to recv; see the comment at the top. */
static ncclResult_t exchange(const void *send, void *recv, size_t count, int datatype, int root,
                             ncclComm_t comm) {
  struct fake_comm *c = NULL;
  const unsigned char *s = send;
  unsigned char *d = recv;
  ncclResult_t r = check_comm(comm, &c);
  int m;
  if (r != ncclSuccess) return r;
  if (datatype != ncclUint8 || root >= c->nranks || (count && (!send || !recv)))
    return ncclInvalidArgument;
  pthread_mutex_lock(&g_mu);
  m = g_collectives++;
  pthread_mutex_unlock(&g_mu);
  if (root == c->rank || (root < 0 && c->nranks == 1)) {
    if (count && send != recv) memmove(recv, send, count);
  } else if (root >= 0) {
    for (size_t j = 0; j < count; j++)
      d[j] = peer_byte(m, j);
  } else {
    for (size_t j = 0; j < count; j++) {
      unsigned char p = peer_byte(m, j);
      d[j] = s[j] > p ? s[j] : p;
    }
  }
  if (hook("KILN_FAKE_NCCL_IN_PROGRESS")) {
    pthread_mutex_lock(&g_mu);
    g_pending = 2;
    pthread_mutex_unlock(&g_mu);
    return ncclInProgress;
  }
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, int datatype,
                                       int root, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  if (root < 0) return ncclInvalidArgument;
  return exchange(send, recv, count, datatype, root, comm);
}

FAKE_EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int datatype,
                                       int op, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  if (op != ncclMax) return ncclInvalidArgument; /* the transport only needs max */
  return exchange(send, recv, count, datatype, -1, comm);
}

/* ---- for the tests (not NCCL's) -------------------------------------------------- */

/* A communicator in which this process is rank `rank` of nranks (1..64 of
 * them per process), or NULL. */
FAKE_EXPORT void *kiln_fake_nccl_comm(int rank, int nranks) {
  struct fake_comm *c = NULL;
  if (nranks < 1 || rank < 0 || rank >= nranks) return NULL;
  pthread_mutex_lock(&g_mu);
  if (g_n_comms < MAX_COMMS) {
    c = &g_comms[g_n_comms++];
    c->rank = rank;
    c->nranks = nranks;
  }
  pthread_mutex_unlock(&g_mu);
  return c;
}

/* What the simulated peers contribute to byte j of the m-th collective. */
FAKE_EXPORT unsigned char kiln_fake_nccl_peer_byte(int m, size_t j) {
  return peer_byte(m, j);
}

/* ncclCommAbort calls so far. */
FAKE_EXPORT int kiln_fake_nccl_abort_count(void) {
  int n;
  pthread_mutex_lock(&g_mu);
  n = g_aborts;
  pthread_mutex_unlock(&g_mu);
  return n;
}

/* Calls made on a communicator after it was aborted (a correct transport
 * makes none). */
FAKE_EXPORT int kiln_fake_nccl_calls_after_abort(void) {
  int n;
  pthread_mutex_lock(&g_mu);
  n = g_after_abort;
  pthread_mutex_unlock(&g_mu);
  return n;
}

/* Collectives accepted so far (ncclBroadcast and ncclAllReduce). */
FAKE_EXPORT int kiln_fake_nccl_collectives(void) {
  int n;
  pthread_mutex_lock(&g_mu);
  n = g_collectives;
  pthread_mutex_unlock(&g_mu);
  return n;
}
