/* The NCCL transport of kiln_comm (include/kiln/comm.h): an existing
 * ncclComm_t and stream, libnccl dlopen'ed into one function table.
 *
 * Each collective call moves at most KILN_NCCL_STAGING_BYTES: host bytes are
 * copied into a page-locked bounce buffer, then on the caller's stream to a
 * device staging buffer, the NCCL collective runs in place on it, and the
 * bytes come back the same way. Both copies are asynchronous (a copy to
 * pageable memory would block the thread until the collective finished,
 * which is exactly the wait that must stay bounded), and the thread polls
 * cuStreamQuery and ncclCommGetAsyncError with short sleeps until the stream
 * drains or the call's deadline passes. A deadline or an asynchronous NCCL
 * error aborts the communicator (ncclCommAbort): a collective that one rank
 * gave up on can never complete on the others, so nothing after it could. */
#include "loader/coord_nccl.h"

#include <errno.h>   /* EINTR */
#include <pthread.h> /* pthread_once */
#include <stddef.h>  /* offsetof */
#include <stdint.h>  /* uintptr_t */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* calloc, free */
#include <string.h>  /* memcpy, strlen */
#include <time.h>    /* clock_gettime, nanosleep */

#include "common/clock.h"
#include "common/error.h" /* kiln_fail, KILN_CHECK */
#include "common/gpu_libs.h"
#include "common/logging.h" /* kiln_log */
#include "common/params.h"  /* kiln_param_nccl_library */
#include "kiln/probe.h"     /* kiln_nccl_version */
#include "loader/driver.h"  /* kiln_cuda: memory, copies, stream queries */

typedef struct nccl_api {
  kiln_gpu_lib lib;     /* the library loaded, and how it was found */
  int version;          /* NCCL_VERSION_CODE, 0 when ncclGetVersion is missing */
  char version_str[32]; /* "2.28.9", or "unknown" */
  // clang-format off
#define KILN_SYM(ret, name, params) ret(*name) params;
#define KILN_SYM_OPTIONAL KILN_SYM
#include "common/nccl_syms.def"
#undef KILN_SYM_OPTIONAL
#undef KILN_SYM
  // clang-format on
} nccl_api;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static nccl_api api;
static kiln_status load_rc = KILN_ENOTFOUND;
static char load_error[1024];

static const char *result_name(ncclResult_t r) {
  static const char *const names[] = {
      "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
      "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};
  return r >= 0 && r < (int)(sizeof names / sizeof *names) ? names[r] : "ncclResult?";
}

/* "ncclRemoteError (remote process exited ...)" into buf; the last error
 * text too when this libnccl has one (call before an abort frees comm). */
static const char *nccl_text(char *buf, size_t cap, ncclResult_t r, ncclComm_t comm) {
  const char *text = api.GetErrorString ? api.GetErrorString(r) : NULL;
  const char *last = api.GetLastError && comm ? api.GetLastError(comm) : NULL;
  snprintf(buf, cap, "%s (%s)%s%s", result_name(r), text ? text : "no text",
           last && *last ? ": " : "", last && *last ? last : "");
  return buf;
}

static const kiln_gpu_sym syms[] = {
#define KILN_SYM(ret, name, params) {"nccl" #name, offsetof(nccl_api, name), 1},
#define KILN_SYM_OPTIONAL(ret, name, params) {"nccl" #name, offsetof(nccl_api, name), 0},
#include "common/nccl_syms.def"
#undef KILN_SYM_OPTIONAL
#undef KILN_SYM
};

static void load(void) {
  load_rc = kiln_gpu_lib_open(&api.lib, KILN_GPU_LIB_NCCL);
  if (load_rc == KILN_OK) {
    load_rc = kiln_gpu_lib_bind(&api, syms, sizeof syms / sizeof *syms, &api.lib, KILN_GPU_LIB_NCCL,
                                NULL, NULL);
  }
  if (load_rc != KILN_OK) {
    snprintf(load_error, sizeof load_error, "%s", kiln_last_error());
    return;
  }
  if (api.GetVersion && api.GetVersion(&api.version) != ncclSuccess) api.version = 0;
  if (api.version) {
    int v = api.version, big = v >= 10000; /* 2.9 changed NCCL_VERSION_CODE's layout */
    snprintf(api.version_str, sizeof api.version_str, "%d.%d.%d", big ? v / 10000 : v / 1000,
             big ? v % 10000 / 100 : v % 1000 / 100, v % 100);
  } else {
    snprintf(api.version_str, sizeof api.version_str, "unknown");
  }
  kiln_log(KILN_LOG_INFO, "NCCL %s from %s (%s)", api.version_str, api.lib.path, api.lib.found_by);
}

/* Fills `api`, once per process. KILN_ENOTFOUND with the reason. */
static kiln_status nccl_load(void) {
  pthread_once(&once, load);
  if (load_rc != KILN_OK) return kiln_fail(load_rc, "%s", load_error);
  return KILN_OK;
}

kiln_status kiln_nccl_library(const char **path, const char **found_by, const char **version) {
  kiln_status rc = nccl_load();
  if (rc != KILN_OK) return rc;
  *path = api.lib.path;
  *found_by = api.lib.found_by;
  *version = api.version_str;
  return KILN_OK;
}

KILN_API kiln_status kiln_nccl_version(int *out) {
  kiln_status rc;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_nccl_version: out is NULL");
  *out = 0;
  KILN_CHECK(nccl_load());
  if (!api.version) rc = kiln_fail(KILN_ENOTFOUND, "%s has no ncclGetVersion", api.lib.path);
  *out = api.version;
out:
  return rc;
}

/* ---- the communicator ------------------------------------------------------------ */

typedef struct nccl_comm {
  kiln_comm base; /* rank, size; the caller gets a copy (kiln_comm_free frees it) */
  const kiln_cuda_api *cu;
  ncclComm_t comm;
  CUstream stream;
  CUcontext ctx;       /* current at creation: the one the buffers belong to */
  CUdeviceptr dev;     /* KILN_NCCL_STAGING_BYTES on the device */
  unsigned char *host; /* KILN_NCCL_STAGING_BYTES, page-locked */
  int aborted;
  char why[448]; /* why it was aborted, repeated by every later call */
} nccl_comm;

/* Poll intervals: a few immediate polls first (a small frame on one node
 * completes in tens of microseconds), then sleeps doubling from 50 us to
 * 2 ms, so a long wait costs little CPU and a deadline is overshot by at
 * most 2 ms. */
#define SPIN_S 20e-6
#define FIRST_SLEEP_S 50e-6
#define LONGEST_SLEEP_S 2e-3

static void sleep_s(double s) {
  struct timespec ts;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Aborts the NCCL communicator once (it is freed by NCCL then: no NCCL call
 * on it may follow) and remembers why. */
static void comm_abort(nccl_comm *c, const char *why) {
  ncclResult_t r;
  if (c->aborted) return;
  c->aborted = 1;
  snprintf(c->why, sizeof c->why, "%s", why && *why ? why : "aborted by the caller");
  r = api.CommAbort(c->comm);
  kiln_log(KILN_LOG_WARN, "nccl: rank %d of %d: communicator aborted: %s%s%s", c->base.rank,
           c->base.size, c->why, r != ncclSuccess ? "; ncclCommAbort returned " : "",
           r != ncclSuccess ? result_name(r) : "");
}

/* Describes the collective for messages: "broadcast of 3 bytes (root 0)". */
typedef struct call {
  int reduce; /* 0: broadcast, 1: max-reduce */
  size_t bytes;
  int root;
  double timeout_s, deadline;
  char what[96];
} call;

/* Fails the call: aborts the communicator and returns st with a one-line
 * message "nccl <what>: <detail>: communicator aborted". */
static kiln_status call_fail(nccl_comm *c, const call *k, kiln_status st, const char *detail) {
  char why[448];
  snprintf(why, sizeof why, "%s: %s", k->what, detail);
  comm_abort(c, why);
  return kiln_fail(st, "nccl %s: communicator aborted", why);
}

/* Waits until the stream has drained (want_stream) or until a nonblocking
 * communicator's last call has been enqueued (NCCL no longer answers
 * ncclInProgress), checking for an asynchronous NCCL error on every poll. */
static kiln_status poll_until(nccl_comm *c, const call *k, int want_stream) {
  double start = (kiln_clock_ms() / 1e3), pause = FIRST_SLEEP_S, t;
  char detail[320], text[256];
  for (;;) {
    ncclResult_t async = ncclSuccess, r;
    CUresult q = CUDA_SUCCESS;
    if (want_stream) q = c->cu->StreamQuery(c->stream);
    r = api.CommGetAsyncError(c->comm, &async);
    if (r != ncclSuccess) async = r;
    if (async != ncclSuccess && async != ncclInProgress) {
      snprintf(detail, sizeof detail, "ncclCommGetAsyncError: %s",
               nccl_text(text, sizeof text, async, c->comm));
      return call_fail(c, k, KILN_EPEER, detail);
    }
    if (want_stream && q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY) {
      snprintf(detail, sizeof detail, "cuStreamQuery: %s", kiln_cuda_error_name(q));
      return call_fail(c, k, KILN_EDRIVER, detail);
    }
    if (want_stream ? q == CUDA_SUCCESS : async == ncclSuccess) return KILN_OK;
    t = (kiln_clock_ms() / 1e3);
    if (t >= k->deadline) {
      snprintf(detail, sizeof detail,
               "did not complete within %g s (a rank did not join, or the link is too slow)",
               k->timeout_s);
      return call_fail(c, k, KILN_ETIMEDOUT, detail);
    }
    if (t - start < SPIN_S) continue;
    sleep_s(pause < k->deadline - t ? pause : k->deadline - t);
    pause = pause * 2 < LONGEST_SLEEP_S ? pause * 2 : LONGEST_SLEEP_S;
  }
}

/* A driver call inside a collective: on failure the communicator goes too
 * (the peers are inside the collective and can never finish it). */
#define CU_CALL(call_, what_)                                                                      \
  do {                                                                                             \
    CUresult cu_r_ = (call_);                                                                      \
    if (cu_r_ != CUDA_SUCCESS) {                                                                   \
      char d_[160];                                                                                \
      snprintf(d_, sizeof d_, "%s: %s", what_, kiln_cuda_error_name(cu_r_));                       \
      rc = call_fail(c, k, KILN_EDRIVER, d_);                                                      \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

/* One chunk of at most KILN_NCCL_STAGING_BYTES, in place at p. */
static kiln_status chunk(nccl_comm *c, const call *k, unsigned char *p, size_t n) {
  const kiln_cuda_api *cu = c->cu;
  int sends = k->reduce || c->base.rank == k->root;    /* its bytes matter */
  int receives = k->reduce || c->base.rank != k->root; /* it gets new bytes */
  void *d = (void *)(uintptr_t)c->dev;
  kiln_status rc = KILN_OK;
  ncclResult_t r;
  char detail[320], text[256];
  if (sends) {
    memcpy(c->host, p, n);
    CU_CALL(cu->MemcpyHtoDAsync(c->dev, c->host, n, c->stream), "cuMemcpyHtoDAsync");
  }
  r = k->reduce ? api.AllReduce(d, d, n, ncclUint8, ncclMax, c->comm, c->stream)
                : api.Broadcast(d, d, n, ncclUint8, k->root, c->comm, c->stream);
  if (r == ncclInProgress) { /* a nonblocking communicator: enqueued later */
    KILN_CHECK(poll_until(c, k, 0));
  } else if (r != ncclSuccess) {
    snprintf(detail, sizeof detail, "%s: %s", k->reduce ? "ncclAllReduce" : "ncclBroadcast",
             nccl_text(text, sizeof text, r, c->comm));
    rc = call_fail(c, k, KILN_EPEER, detail);
    goto out;
  }
  if (receives) CU_CALL(cu->MemcpyDtoHAsync(c->host, c->dev, n, c->stream), "cuMemcpyDtoHAsync");
  KILN_CHECK(poll_until(c, k, 1));
  if (receives) memcpy(p, c->host, n);
out:
  return rc;
}

/* The caller's thread normally has the communicator's context current
 * (comm.h); when it has another or none, the call pushes the one the
 * buffers were allocated in, so they are never used in a foreign context. */
static CUresult enter(nccl_comm *c, int *pushed) {
  CUcontext cur = NULL;
  CUresult r = c->cu->CtxGetCurrent(&cur);
  *pushed = 0;
  if (r != CUDA_SUCCESS || cur == c->ctx) return r;
  r = c->cu->CtxPushCurrent(c->ctx);
  *pushed = r == CUDA_SUCCESS;
  return r;
}

static void leave(nccl_comm *c, int pushed) {
  CUcontext popped;
  if (pushed) c->cu->CtxPopCurrent(&popped);
}

static kiln_status collective(nccl_comm *c, call *k, void *buf) {
  unsigned char *p = buf;
  kiln_status rc = KILN_OK;
  int pushed = 0;
  CUresult r;
  if (k->reduce)
    snprintf(k->what, sizeof k->what, "max_reduce of %zu bytes", k->bytes);
  else
    snprintf(k->what, sizeof k->what, "broadcast of %zu bytes (root %d)", k->bytes, k->root);
  if (c->aborted)
    return kiln_fail(KILN_EPEER, "nccl %s: the communicator was aborted earlier (%s)", k->what,
                     c->why);
  if (!(k->timeout_s > 0)) /* NaN too */
    return kiln_fail(KILN_EINVAL, "nccl %s: timeout %g s, want > 0", k->what, k->timeout_s);
  if (!buf && k->bytes) return kiln_fail(KILN_EINVAL, "nccl %s: buf is NULL", k->what);
  if (!k->reduce && (k->root < 0 || k->root >= c->base.size))
    return kiln_fail(KILN_EINVAL, "nccl %s: no rank %d in a communicator of %d", k->what, k->root,
                     c->base.size);
  if (k->bytes == 0) return KILN_OK; /* every rank calls with the same size: none sends */
  if ((r = enter(c, &pushed)) != CUDA_SUCCESS) {
    rc = kiln_cuda_fail(r, "nccl: making the communicator's context current");
    goto out;
  }
  k->deadline = (kiln_clock_ms() / 1e3) + k->timeout_s;
  for (size_t off = 0; off < k->bytes; off += KILN_NCCL_STAGING_BYTES) {
    size_t n = k->bytes - off < KILN_NCCL_STAGING_BYTES ? k->bytes - off : KILN_NCCL_STAGING_BYTES;
    KILN_CHECK(chunk(c, k, p + off, n));
  }
out:
  leave(c, pushed);
  return rc;
}

static kiln_status nccl_broadcast(void *self, void *buf, size_t bytes, int root, double timeout_s) {
  call k = {0, bytes, root, timeout_s, 0, ""};
  if (!self) return kiln_fail(KILN_EINVAL, "nccl broadcast: self is NULL");
  return collective(self, &k, buf);
}

static kiln_status nccl_max_reduce(void *self, void *buf, size_t bytes, double timeout_s) {
  call k = {1, bytes, 0, timeout_s, 0, ""};
  if (!self) return kiln_fail(KILN_EINVAL, "nccl max_reduce: self is NULL");
  return collective(self, &k, buf);
}

static void nccl_abort(void *self, const char *why) {
  if (self) comm_abort(self, why);
}

/* Frees the staging buffers and the state. After an abort the stream may
 * never drain (a collective stuck on a dead peer, or copies still queued
 * behind it that would write into the buffers): freeing device memory
 * synchronizes, so it could hang, and freeing memory a queued copy still
 * targets would corrupt whatever reuses it. So after an abort the buffers are
 * freed only when the stream is already idle; otherwise they are left to the
 * context (2 x KILN_NCCL_STAGING_BYTES, reclaimed when it is destroyed or
 * the process exits), and the log says so. */
static void nccl_destroy(void *self) {
  nccl_comm *c = self;
  int pushed = 0;
  if (!c) return;
  if (c->dev || c->host) {
    if (enter(c, &pushed) != CUDA_SUCCESS) {
      kiln_log(KILN_LOG_INFO, "nccl: the communicator's context is gone: its staging buffers "
                              "went with it");
    } else if (c->aborted && c->cu->StreamQuery(c->stream) != CUDA_SUCCESS) {
      kiln_log(KILN_LOG_INFO,
               "nccl: aborted communicator's stream still busy: its %zu-byte staging buffers are "
               "left to the CUDA context",
               KILN_NCCL_STAGING_BYTES);
    } else {
      if (c->dev) c->cu->MemFree(c->dev);
      if (c->host) c->cu->MemFreeHost(c->host);
    }
    leave(c, pushed);
  }
  free(c);
}

static kiln_status query_comm(nccl_comm *c) {
  char text[256];
  ncclResult_t r = api.CommCount(c->comm, &c->base.size);
  if (r == ncclSuccess) r = api.CommUserRank(c->comm, &c->base.rank);
  if (r != ncclSuccess)
    return kiln_fail(KILN_EINVAL, "kiln_comm_nccl: ncclCommCount/ncclCommUserRank: %s",
                     nccl_text(text, sizeof text, r, c->comm));
  if (c->base.size < 1 || c->base.rank < 0 || c->base.rank >= c->base.size)
    return kiln_fail(KILN_EINVAL, "kiln_comm_nccl: NCCL says rank %d of %d", c->base.rank,
                     c->base.size);
  return KILN_OK;
}

KILN_API kiln_status kiln_comm_nccl(kiln_comm **out, void *nccl_comm_, struct CUstream_st *stream) {
  nccl_comm *c = NULL;
  kiln_status rc;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_comm_nccl: out is NULL");
  *out = NULL;
  if (!nccl_comm_) return kiln_fail(KILN_EINVAL, "kiln_comm_nccl: nccl_comm is NULL");
  KILN_CHECK(nccl_load());
  c = calloc(1, sizeof *c);
  if (!c) {
    rc = kiln_fail(KILN_ENOMEM, "kiln_comm_nccl: out of memory");
    goto out;
  }
  KILN_CHECK(kiln_cuda(&c->cu));
  c->comm = nccl_comm_;
  c->stream = stream;
  CU_CHECK(c->cu->CtxGetCurrent(&c->ctx), "cuCtxGetCurrent");
  if (!c->ctx) {
    rc = kiln_fail(KILN_EINVAL, "kiln_comm_nccl: no CUDA context is current on this thread (make "
                                "the context of the communicator's device current first)");
    goto out;
  }
  KILN_CHECK(query_comm(c));
  CU_CHECK(c->cu->MemAlloc(&c->dev, KILN_NCCL_STAGING_BYTES), "kiln_comm_nccl: cuMemAlloc");
  CU_CHECK(c->cu->MemAllocHost((void **)&c->host, KILN_NCCL_STAGING_BYTES),
           "kiln_comm_nccl: cuMemAllocHost");
  c->base.version = KILN_COMM_VERSION;
  c->base.self = c;
  c->base.broadcast = nccl_broadcast;
  c->base.max_reduce = nccl_max_reduce;
  c->base.abort = nccl_abort;
  c->base.destroy = nccl_destroy;
  snprintf(c->base.name, sizeof c->base.name, "nccl");
  kiln_log(KILN_LOG_DEBUG, "nccl: rank %d of %d (%s), staging %zu bytes", c->base.rank,
           c->base.size, api.lib.path, KILN_NCCL_STAGING_BYTES);
  if (!(*out = malloc(sizeof **out))) {
    rc = kiln_fail(KILN_ENOMEM, "kiln_comm_nccl: out of memory");
    goto out;
  }
  **out = c->base;
  c = NULL;
out:
  nccl_destroy(c);
  return rc;
}
