/* kiln — the runtime loader: resolve kernels for the local GPU and load them.
 *
 * A loader is bound to one CUDA context (a device's primary context, or the
 * context current on the calling thread at open). For each unit it loads, in
 * this order (DESIGN.md, "Resolution order"):
 *   1. the module already loaded in this loader;
 *   2. the cache layers: CUBIN for exactly sm_XY, then CUBIN for sm_XZ with
 *      Z < Y (same major), then PTX compute_VW <= XY whose PTX ISA the
 *      driver accepts (JIT);
 *   3. a build for exactly sm_XY with NVRTC, done by one process per cache
 *      directory (a lease row in the index; others wait, bounded);
 *   4. otherwise a clear error naming the targets the caches hold and the
 *      `kiln build` command that fixes it. KILN_OFFLINE=1 (or options.offline)
 *      turns step 3 into this error.
 * A blob the driver rejects as a bad image is quarantined and the next
 * candidate tried; nothing is retried in a loop.
 *
 * Thread-safe: one loader may be shared by every thread of a process; each
 * module is loaded once per loader. libcuda is loaded with dlopen, so a
 * process that links libkiln runs on a machine without a driver (open then
 * fails with KILN_EDRIVER). See docs/loader.md. */
#ifndef KILN_LOADER_H
#define KILN_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/api.h"
#include "kiln/cache.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The driver's handle types, spelled as cuda.h spells them, so callers that
 * include cuda.h pass CUcontext / CUfunction / CUstream directly. */
struct CUfunc_st;
struct CUstream_st;

typedef struct kiln_loader kiln_loader;
/* A communicator for multi-rank warmup (include/kiln/comm.h). */
typedef struct kiln_comm kiln_comm;
typedef struct kiln_coord_report kiln_coord_report;

/* What the driver says about one device. */
typedef struct kiln_device_info {
  int ordinal;
  char name[128];
  int cc_major, cc_minor; /* compute capability, e.g. 9.0 */
  int sm_count;           /* multiprocessors */
  uint64_t total_mem;     /* bytes */
  int driver_version;     /* CUDA version of the driver, e.g. 12080 for 12.8 */
  int ptx_isa;            /* highest PTX ISA it can JIT, x10: 87 for PTX 8.7 */
} kiln_device_info;

/* Number of CUDA devices; KILN_EDRIVER (with the reason) when there is no
 * usable driver. KILN_CUDA_LIBRARY names another libcuda to load. */
KILN_API kiln_status kiln_device_count(int *out);
KILN_API kiln_status kiln_device_get_info(kiln_device_info *out, int ordinal);
/* The highest PTX ISA (x10) a driver of this CUDA version accepts, which is
 * also the ISA that CUDA version's NVRTC writes: 12080 -> 87, 13000 -> 90,
 * 13050 -> 95. A release kiln has no entry for is estimated from its major's
 * (13020 -> 92), a newer major as (major - 4).minor (14000 -> 100); 0 before
 * CUDA 11.0. */
KILN_API int kiln_driver_ptx_isa(int driver_version);

#define KILN_LOADER_CURRENT_CONTEXT (-1)

/* Fields at KILN_ENV / NULL are taken from the environment (include/kiln/api.h).
 * The log level is process-wide: kiln_log_set_level (include/kiln/log.h). */
typedef struct kiln_loader_options {
  int version; /* KILN_LOADER_OPTIONS_VERSION */
  int device;  /* ordinal (default 0), or KILN_LOADER_CURRENT_CONTEXT */
  /* The cache the loader opens (its directory, read-only layers and remote);
   * NULL: KILN_CACHE_OPTIONS_INIT, i.e. all from the environment. Copied at
   * open; create is ignored (the loader always creates its directory). */
  const kiln_cache_options *cache;
  int offline;          /* 1: never build; 0: may build; KILN_ENV: KILN_OFFLINE (default 0) */
  double lease_stale_s; /* a build lease this old is taken over; KILN_ENV: KILN_LEASE_STALE (30) */
  double build_timeout_s; /* longest wait for one build, own or another process's, and the
                             silence limit of a multi-rank warmup; KILN_ENV: KILN_BUILD_TIMEOUT
                             (1800) */
  int jobs;               /* compile threads; KILN_ENV: KILN_JOBS, else the CPUs it may run on */
  /* A shell glob over unit names (`kiln list`) that kiln_loader_warmup loads,
   * e.g. "scaled_*"; NULL: every unit. Ops resolve their own unit on first
   * use either way. */
  const char *kernels;
  /* The status frame period of a multi-rank warmup (at most half of
   * build_timeout_s); KILN_ENV: KILN_HEARTBEAT_MS (500 ms). */
  double heartbeat_s;
  /* Version 2: a multi-rank warmup's peer timeout (include/kiln/comm.h,
   * kiln_coord_options.peer_timeout_s); KILN_ENV: KILN_PEER_TIMEOUT. A
   * version-1 struct gets KILN_ENV. */
  double peer_timeout_s;
} kiln_loader_options;

#define KILN_LOADER_OPTIONS_VERSION 2
#define KILN_LOADER_OPTIONS_INIT                                                                   \
  {                                                                                                \
    .version = KILN_LOADER_OPTIONS_VERSION, .device = 0, .cache = NULL, .offline = KILN_ENV,       \
    .lease_stale_s = KILN_ENV, .build_timeout_s = KILN_ENV, .jobs = KILN_ENV, .kernels = NULL,     \
    .heartbeat_s = KILN_ENV, .peer_timeout_s = KILN_ENV                                            \
  }

/* Fills opts as KILN_LOADER_OPTIONS_INIT does, for the given version.
 * KILN_EINVAL, naming it, for a version this libkiln does not know. */
KILN_API kiln_status kiln_loader_options_init(kiln_loader_options *opts, int version);

/* Opens a loader: loads libcuda, picks the device (retaining its primary
 * context) or the current context, opens the cache. Nothing is loaded yet. */
KILN_API kiln_status kiln_loader_open(kiln_loader **out, const kiln_loader_options *opts);
/* Unloads every module and releases the context. NULL is fine. Launches
 * still queued on streams must have finished. */
KILN_API void kiln_loader_close(kiln_loader *l);

/* The device the loader is bound to. */
KILN_API kiln_status kiln_loader_device(kiln_device_info *out, kiln_loader *l);

/* Resolves and loads one unit (a name from kiln_unit_at / `kiln list`). */
KILN_API kiln_status kiln_loader_resolve(kiln_loader *l, const char *unit);
/* Resolves and loads every unit (those matching the options' `kernels`
 * glob, when set; KILN_ENOTFOUND when it matches none). comm NULL: this
 * process alone (misses are built under the cache directory's leases).
 * Otherwise every rank of comm calls it: the protocol of include/kiln/comm.h
 * builds each unit missing on any rank once, on rank 0, sends it to every
 * rank, and checks that all ranks loaded the same code (KILN_EMISMATCH if
 * not); every rank gets the same status. The heartbeat and the silence limit
 * are the options' heartbeat_s and build_timeout_s. */
KILN_API kiln_status kiln_loader_warmup(kiln_loader *l, const kiln_comm *comm);
/* What the last multi-rank warmup saw on this rank (longest collective
 * wait, compiles, transfers); KILN_ENOTFOUND before one ran. */
KILN_API kiln_status kiln_loader_coord_report(kiln_coord_report *out, kiln_loader *l);

/* The CUfunction of an entry point (e.g. "kiln_scaled_softmax_fwd_bf16_w8"),
 * resolving its unit first if needed. KILN_ENOTFOUND for an unknown name. */
KILN_API kiln_status kiln_loader_function(struct CUfunc_st **out, kiln_loader *l,
                                          const char *entry);

/* Whether stream (NULL: the legacy default stream of the loader's context) is
 * capturing a CUDA graph, from cuStreamIsCapturing: *out = 1 while a capture
 * is active, or was invalidated and not yet ended, and when the driver says
 * the legacy stream cannot be used because another stream of the context is
 * capturing; 0 otherwise. A unit cannot be loaded then (the driver refuses
 * module loads during a global or thread-local capture), so a host that
 * resolves on first use calls this when a launch fails, to say "load before
 * capturing" instead of the driver's error. Costs one driver call; loads and
 * launches nothing. KILN_EINVAL for NULL out or l, KILN_EDRIVER naming the
 * driver's error (e.g. a stream of another context). */
KILN_API kiln_status kiln_loader_stream_capturing(int *out, kiln_loader *l,
                                                  struct CUstream_st *stream);

/* Where a loaded unit came from. */
typedef enum kiln_load_source {
  KILN_LOAD_NONE = 0,       /* not loaded */
  KILN_LOAD_EXACT = 1,      /* CUBIN for exactly this arch */
  KILN_LOAD_COMPATIBLE = 2, /* CUBIN for a lower minor of the same major */
  KILN_LOAD_PTX = 3,        /* PTX, compiled by the driver's JIT */
  KILN_LOAD_BUILT = 4,      /* built now (by this process or another) for this arch */
} kiln_load_source;

typedef struct kiln_unit_load {
  char unit[64];
  kiln_load_source source;
  char target[16]; /* "sm_90", "compute_80" */
  char digest[65]; /* the blob loaded */
  int layer;       /* 0 primary, 1.. read-only layers */
  double ms;       /* resolve + load wall time */
} kiln_unit_load;

/* KILN_ENOTFOUND if the unit is not loaded (yet). */
KILN_API kiln_status kiln_loader_unit_load(kiln_unit_load *out, kiln_loader *l, const char *unit);
/* "exact CUBIN", "compatible CUBIN", "PTX JIT", "built", "not loaded". */
KILN_API const char *kiln_load_source_str(kiln_load_source s);

/* Known-answer test of every entry point of every loaded softmax unit (the
 * other families are covered by the gpu tests, not here yet): a tiny input
 * run on the GPU and compared with a CPU reference. A unit with a failing
 * entry point has its blob quarantined and is unloaded (the next resolve
 * rebuilds or picks another candidate). KILN_OK when everything passed;
 * KILN_ECORRUPT naming the first failure otherwise. */
typedef struct kiln_loader_verify_summary {
  size_t entries; /* entry points run */
  size_t failed;  /* entry points whose result was wrong */
  size_t units_quarantined;
  char first_failure[256];
} kiln_loader_verify_summary;

KILN_API kiln_status kiln_loader_verify(kiln_loader_verify_summary *out, kiln_loader *l);

#ifdef __cplusplus
}
#endif
#endif
