/* kiln — build a plan (units x targets) into a cache.
 *
 * For every (unit, target): a record whose blob verifies is a hit; an
 * unexpired failure record is a failure (unless rebuild); otherwise NVRTC
 * compiles it on a thread pool and the result is stored. Many processes may
 * build into one directory at once: each target is compiled by exactly one of
 * them (a lease in the index, renewed by a heartbeat; a lease whose holder
 * died or stopped renewing is taken over), the others wait, bounded. */
#ifndef KILN_BUILD_H
#define KILN_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/api.h"
#include "kiln/cache.h"
#include "kiln/status.h"
#include "kiln/target.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_build_outcome {
  KILN_BUILD_HIT = 0,     /* already in the cache */
  KILN_BUILD_BUILT = 1,   /* compiled and stored now */
  KILN_BUILD_FAILED = 2,  /* compile or store failed (see error) */
  KILN_BUILD_SHARED = 3,  /* built by another process sharing the cache while this one waited */
  KILN_BUILD_FETCHED = 4, /* fetched from the remote cache (include/kiln/remote.h) */
} kiln_build_outcome;

typedef struct kiln_build_item {
  const kiln_unit_info *unit;
  kiln_target target;
  char target_name[16];
  kiln_build_outcome outcome;
  kiln_status status; /* KILN_OK unless FAILED */
  char error[512];    /* one line, when FAILED */
  char *log_tail;     /* last lines of the build log when the compile failed */
  kiln_record record; /* valid for HIT, BUILT, SHARED and FETCHED */
} kiln_build_item;

typedef struct kiln_build_summary {
  size_t n_items;
  kiln_build_item *items;
  size_t targets, hits, built, failed;
  size_t shared;             /* built by another process (single flight) */
  size_t fetched;            /* from the remote cache */
  size_t uploaded;           /* written back to the remote cache now */
  kiln_status upload_status; /* KILN_OK, or why the write-back failed (the build did not) */
  char upload_error[512];
  size_t taken_over; /* leases taken over from a stale or dead builder */
  uint64_t bytes;    /* bytes of every artifact in the plan */
  double wall_ms;
  double compile_cpu_s; /* CPU seconds of this process's compile threads */
} kiln_build_summary;

/* Called from the building threads, serialised by kiln, after each item. */
typedef void (*kiln_build_progress_fn)(const kiln_build_item *item, size_t done, size_t total,
                                       void *user);

typedef struct kiln_build_options {
  int version;                /* KILN_BUILD_OPTIONS_VERSION */
  const kiln_target *targets; /* required */
  size_t n_targets;
  const char *kernels_glob; /* fnmatch over unit names; NULL: every unit */
  int jobs;    /* compile threads; KILN_ENV: KILN_JOBS, else the CPUs this process may run on */
  int rebuild; /* compile even on a hit */
  kiln_build_progress_fn progress;
  void *user;
  /* Single flight: each missing (unit, target) is compiled by one process per
   * cache directory, under a lease row in its index; the others wait. */
  /* take over a lease not renewed for this long; KILN_ENV: KILN_LEASE_STALE */
  double lease_stale_s;
  /* give up waiting for another builder after this; KILN_ENV: KILN_BUILD_TIMEOUT */
  double wait_timeout_s;
  const char *const *units; /* exact unit names (instead of kernels_glob), or NULL */
  size_t n_units;
  /* The cache's remote (kiln_cache_set_remote), if any: what this process
   * wins the lease for is fetched from it before anything is compiled, and
   * with upload on, every target of the plan that is in the cache afterwards
   * is written back (a failed write-back is reported, never a failed build).
   * no_remote skips both. */
  int no_remote;
  /* 1: compile nothing: what neither the local layers nor the remote have
   * fails with KILN_ENOTFOUND; 0: compile what is missing; KILN_ENV:
   * KILN_OFFLINE (default 0). */
  int offline;
} kiln_build_options;

/* Fields at KILN_ENV are taken from the environment (include/kiln/api.h). */
#define KILN_BUILD_OPTIONS_VERSION 1
#define KILN_BUILD_OPTIONS_INIT                                                                    \
  {                                                                                                \
    .version = KILN_BUILD_OPTIONS_VERSION, .targets = NULL, .n_targets = 0, .kernels_glob = NULL,  \
    .jobs = KILN_ENV, .rebuild = 0, .progress = NULL, .user = NULL, .lease_stale_s = KILN_ENV,     \
    .wait_timeout_s = KILN_ENV, .units = NULL, .n_units = 0, .no_remote = 0, .offline = KILN_ENV   \
  }

/* Fills opts as KILN_BUILD_OPTIONS_INIT does, for the given version.
 * KILN_EINVAL, naming it, for a version this libkiln does not know. */
KILN_API kiln_status kiln_build_options_init(kiln_build_options *opts, int version);

/* Builds the plan. KILN_OK when the plan ran (check summary->failed);
 * KILN_ENOTFOUND when the glob matches no unit; other codes when nothing could
 * run. *out is freed with kiln_build_summary_free. */
KILN_API kiln_status kiln_build(kiln_build_summary **out, kiln_cache *cache,
                                const kiln_build_options *opts);
KILN_API void kiln_build_summary_free(kiln_build_summary *s);

/* The compile options that go into every key (NVRTC flags, space-separated):
 * kiln's own, then KILN_NVRTC_OPTIONS (read once per process). */
KILN_API const char *kiln_build_compile_options(void);

#ifdef __cplusplus
}
#endif
#endif
