/* kiln — communicators for multi-rank warmup, and the coordination protocol.
 *
 * A job of N ranks with a cold cache compiles each missing (unit, target)
 * exactly once: every rank resolves locally, one max-reduce gives the union
 * of misses, the root (rank 0) fetches or builds it on a thread pool while its
 * main thread broadcasts a small status frame every heartbeat, then sends the
 * artifacts in bounded chunks; every rank verifies the digests and inserts them
 * into its own cache. No collective waits longer than about one heartbeat
 * while a build runs, so no NCCL / torch.distributed watchdog fires. See
 * docs/coordination.md for the frames and the failure rules.
 *
 * A kiln_comm is a vtable a host program can fill itself (e.g. on top of
 * torch.distributed); kiln also has three: single process, NCCL (an existing
 * ncclComm_t and stream; libnccl is dlopen'ed) and MPI (libkiln_mpi,
 * include/kiln/comm_mpi.h). */
#ifndef KILN_COMM_H
#define KILN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/api.h"
#include "kiln/cache.h"
#include "kiln/status.h"
#include "kiln/target.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/* Every rank calls the same collectives in the same order with the same
 * sizes. Each call returns within timeout_s: KILN_OK when the collective
 * completed, KILN_ETIMEDOUT when it did not (the collective may still be
 * pending: kiln then calls abort and uses the communicator no more),
 * KILN_EPEER when the transport reported a failed peer. Only the thread that
 * called kiln_loader_warmup / kiln_coord_fill calls these. */
typedef struct kiln_comm {
  int version; /* KILN_COMM_VERSION */
  int rank, size;
  void *self; /* passed to every function */
  /* bytes at buf on root are copied to buf on every rank */
  kiln_status (*broadcast)(void *self, void *buf, size_t bytes, int root, double timeout_s);
  /* buf[i] = max over ranks of buf[i], bytes as uint8 (in place) */
  kiln_status (*max_reduce)(void *self, void *buf, size_t bytes, double timeout_s);
  /* Give up on the communicator (after a timeout or a peer failure): pending
   * collectives are abandoned. why is one line. May be NULL. */
  void (*abort)(void *self, const char *why);
  /* Frees self; called by kiln_comm_free for kiln's own communicators. */
  void (*destroy)(void *self);
  char name[16]; /* "single", "nccl", "mpi", or the host program's */
} kiln_comm;

#define KILN_COMM_VERSION 1

/* For communicator implementations: records the one-line detail of a
 * failure (what kiln_last_error() then returns) and returns st. */
KILN_API kiln_status kiln_comm_error(kiln_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* One rank, no transport: the protocol runs with size 1 (builds here). */
KILN_API kiln_status kiln_comm_single(kiln_comm **out);

/* NCCL: nccl_comm is an ncclComm_t the caller created (and keeps owning),
 * stream a CUstream/cudaStream_t of the device that communicator uses, whose
 * context is current on the calling thread. Frames are staged through a small
 * device buffer (allocated here); each collective is polled on the stream
 * with ncclCommGetAsyncError until its deadline, and on a deadline or an
 * asynchronous error the communicator is aborted (ncclCommAbort): the caller
 * must not use it afterwards. libnccl is loaded with dlopen, found as
 * docs/install.md says; KILN_ENOTFOUND when there is none, KILN_EINVAL when
 * the file KILN_NCCL_LIBRARY names (or the one found) will not load. */
KILN_API kiln_status kiln_comm_nccl(kiln_comm **out, void *nccl_comm, struct CUstream_st *stream);

/* A communicator by name: "single" (kiln_comm_single) or "mpi"
 * (kiln_comm_mpi_world from libkiln_mpi, loaded with dlopen: KILN_MPI_LIBRARY
 * names it, else the one next to this libkiln, else the loader's search
 * path). KILN_EINVAL for another name; KILN_ENOTFOUND, with dlerror(), when
 * libkiln_mpi cannot be loaded. */
KILN_API kiln_status kiln_comm_open(kiln_comm **out, const char *name);

/* Frees a communicator made by kiln_comm_* (not one the caller filled in
 * itself). NULL is fine. */
KILN_API void kiln_comm_free(kiln_comm *comm);

/* What one rank saw of one run of the protocol. */
typedef struct kiln_coord_report {
  int rank, size;
  size_t slots;           /* (unit, target) pairs this rank needed */
  size_t missing;         /* union of misses over all ranks */
  size_t compiled;        /* compiled by this rank (the root) now */
  size_t received;        /* artifacts this rank received and stored */
  size_t collectives;     /* collective calls made */
  double longest_wait_ms; /* longest single collective call */
  char longest_what[48];  /* which one ("status frame 12", "union of misses", ...) */
  uint64_t bytes_received;
  double compile_cpu_s; /* CPU seconds spent compiling on this rank */
  double total_ms;      /* the whole protocol, on this rank */
  char fingerprint[65]; /* of the artifact set this rank holds for its slots */
} kiln_coord_report;

/* Called on the calling thread of every rank after each status frame
 * (about once a heartbeat while the root builds): done of total (unit,
 * target) pairs settled, the last one settled ("" before the first), seconds
 * since the root started. */
typedef void (*kiln_coord_progress_fn)(unsigned done, unsigned total, const char *unit,
                                       const char *target, double elapsed_s, void *user);

/* Fields at KILN_ENV are taken from the environment (include/kiln/api.h). */
typedef struct kiln_coord_options {
  int version;                /* KILN_COORD_OPTIONS_VERSION */
  const kiln_target *targets; /* required: what to fill */
  size_t n_targets;
  const char *kernels; /* unit-name glob; NULL: every unit */
  double heartbeat_s;  /* status frame period; KILN_ENV: KILN_HEARTBEAT_MS (500 ms) */
  double timeout_s;    /* a silent root (or a peer not joining) fails the job
                          after this; KILN_ENV: KILN_BUILD_TIMEOUT (1800 s) */
  int jobs;    /* the root's compile threads; KILN_ENV: KILN_JOBS, else the CPUs it may run on */
  int offline; /* 1: the root may not compile; 0: it may; KILN_ENV: KILN_OFFLINE (default 0) */
  kiln_coord_progress_fn progress; /* or NULL */
  void *user;                      /* passed to progress */
  /* Version 2: once the protocol is under way, a rank gives up on a root
   * that sends no status frame (or artifact) for this long, KILN_EPEER
   * naming it; at least two heartbeats, cut to timeout_s. KILN_ENV:
   * KILN_PEER_TIMEOUT, unset: 10 s or 20 heartbeats, whichever is longer. A
   * version-1 struct gets KILN_ENV. */
  double peer_timeout_s;
} kiln_coord_options;

#define KILN_COORD_OPTIONS_VERSION 2
#define KILN_COORD_OPTIONS_INIT                                                                    \
  {                                                                                                \
    .version = KILN_COORD_OPTIONS_VERSION, .targets = NULL, .n_targets = 0, .kernels = NULL,       \
    .heartbeat_s = KILN_ENV, .timeout_s = KILN_ENV, .jobs = KILN_ENV, .offline = KILN_ENV,         \
    .progress = NULL, .user = NULL, .peer_timeout_s = KILN_ENV                                     \
  }

/* Fills opts as KILN_COORD_OPTIONS_INIT does, for the given version.
 * KILN_EINVAL, naming it, for a version this libkiln does not know. */
KILN_API kiln_status kiln_coord_options_init(kiln_coord_options *opts, int version);

/* Fills cache with every selected unit for every target over comm, with no
 * GPU (e.g. `kiln warmup --comm mpi --arch 90` on every node of an
 * allocation). Every rank gets the same status: KILN_ECOMPILE (unit, target
 * and the log tail) when the root's build failed, KILN_EPEER when the root
 * went silent past timeout_s or the transport failed, KILN_EMISMATCH when
 * ranks run different kiln builds or options, or hold different artifacts at
 * the end. report may be NULL. */
KILN_API kiln_status kiln_coord_fill(kiln_coord_report *report, kiln_cache *cache,
                                     const kiln_coord_options *opts, const kiln_comm *comm);

/* For a rank that cannot take part (its cache or GPU did not open): joins the
 * first exchange of kiln_coord_fill / kiln_loader_warmup as failed, so the
 * other ranks stop at once with KILN_EPEER instead of waiting out the
 * timeout for it. timeout_s KILN_ENV: KILN_BUILD_TIMEOUT. KILN_OK when the
 * exchange completed (the caller still returns its own error). */
KILN_API kiln_status kiln_coord_fail(const kiln_comm *comm, double timeout_s);

/* One small collective outside the protocol: *flag (0 or 1) becomes its
 * maximum over the ranks, e.g. "some rank has no GPU". timeout_s KILN_ENV:
 * KILN_BUILD_TIMEOUT. KILN_EPEER (the communicator aborted) when it does
 * not complete in time. */
KILN_API kiln_status kiln_coord_any(int *flag, const kiln_comm *comm, double timeout_s);

/* The version of the libnccl kiln_comm_nccl would load (docs/install.md), as
 * NCCL_VERSION_CODE: 22803 for 2.28.3. KILN_ENOTFOUND with the reason when
 * there is none; KILN_EINVAL as for kiln_comm_nccl. */
KILN_API kiln_status kiln_nccl_version(int *out);

#ifdef __cplusplus
}
#endif
#endif
