/* Internal: the loader state, shared by the files of loader/, and what each
 * of those files offers the others.
 *
 * Layering: a file calls only files below it in this list, never one above
 * (scripts/check-layers checks it on the object files).
 *
 *   verify.c          known-answer tests: the softmax launchers, unload
 *   ops_<family>.c    typed launchers (loader/ops_internal.h)
 *   ops_common.c      launch by entry name: kiln_loader_entry, contexts
 *   loader.c          open/close and the public kiln_loader_* entry points
 *   coord_warmup.c    kiln_loader_warmup with a communicator
 *   coord_fill.c      kiln_coord_fill: the protocol over a cache alone
 *   coord.c           the protocol (loader/coord_internal.h)
 *   coord_wire.c      its bytes
 *   resolve.c         resolution order: step 2, step 3, the build
 *   resolve_remote.c  step 3: the remote, then step 2 on what it sent
 *   resolve_local.c   step 2: the cached candidates, in select.c's order
 *   module.c          contexts, load one record, entry lookup, unload
 *   select.c          which records a device can load, best first
 *   coord_single.c, coord_nccl.c   transports
 *   driver.c          libcuda's function table, device facts
 *   comm.c            kiln_comm_error, kiln_comm_free, kiln_comm_open (a transport by
 *                     name; "mpi" dlopens libkiln_mpi): for any transport
 */
#ifndef KILN_LOADER_INTERNAL_H
#define KILN_LOADER_INTERNAL_H

#include <pthread.h>

#include "kiln/cache.h"
#include "kiln/comm.h"
#include "kiln/kernels.h"
#include "kiln/loader.h"
#include "loader/driver.h"

typedef struct kiln_unit_slot {
  const kiln_unit_info *unit;
  CUmodule module;     /* NULL until loaded */
  kiln_unit_load load; /* where it came from */
  CUfunction *fns;     /* per entry point, filled lazily; read with acquire loads */
} kiln_unit_slot;

struct kiln_loader {
  const kiln_cuda_api *cu;
  CUcontext ctx;
  CUdevice dev;
  int retained; /* ctx is dev's primary context, retained by us */
  kiln_device_info info;
  int cc; /* 90 for 9.0 */
  kiln_cache *cache;
  int offline, jobs;
  double stale_s, timeout_s;
  double heartbeat_s;    /* kiln_loader_options.heartbeat_s as given (KILN_ENV: the variable) */
  double peer_timeout_s; /* kiln_loader_options.peer_timeout_s as given (version 1: KILN_ENV) */
  pthread_mutex_t lock;  /* resolution, module loads, unloads */
  size_t n_units;
  kiln_unit_slot *units;
  char *kernels;           /* kiln_loader_options.kernels (owned copy), or NULL: all units */
  CUdeviceptr op_error;    /* the ops' device error block (loader/ops_common.c); 0 until used */
  kiln_coord_report coord; /* the last multi-rank warmup */
  int have_coord;
};

/* ---- module.c ---- */

/* Makes l's context current for a driver call (pushed only when another one
 * is current); leave pops it again. */
kiln_status kiln_ctx_enter(kiln_loader *l, int *pushed);
void kiln_ctx_leave(kiln_loader *l, int pushed);

typedef enum {
  KILN_MODULE_LOADED,
  KILN_MODULE_SKIPPED,  /* not read, or this device/driver cannot use it */
  KILN_MODULE_REJECTED, /* the driver refused the bytes: quarantined (primary layer) */
  KILN_MODULE_REFUSED,  /* the driver loads nothing now (a CUDA graph capture): no other
                           candidate or build can help, resolution stops with err */
} kiln_module_attempt;

/* Reads want's blob (verified) and hands it to the driver; when it loads,
 * s's module and load are set. Otherwise err gets one line on why (l->lock
 * held). */
kiln_module_attempt kiln_module_load(kiln_loader *l, kiln_unit_slot *s, const kiln_record *want,
                                     kiln_load_source src, char *err, size_t err_cap);
/* The function of entry e of units[u], whose module is loaded; remembered
 * in the slot for kiln_loader_entry's fast path (l->lock held). */
kiln_status kiln_module_function_locked(kiln_loader *l, size_t u, size_t e, CUfunction *out);
/* Unloads units[u] (l->lock held). */
void kiln_unload_locked(kiln_loader *l, size_t u);

/* ---- resolve_local.c ---- */

/* Tries the cached candidates of units[u]. KILN_ENOTFOUND with a description
 * in `held` when none loads; KILN_EDRIVER at once when the driver refuses
 * loads during a CUDA graph capture (l->lock held). */
kiln_status kiln_load_cached(kiln_loader *l, size_t u, char *held, size_t held_cap);
/* Loads units[u] from the cache layers only: KILN_ENOTFOUND when none holds
 * a loadable artifact (l->lock held). */
kiln_status kiln_resolve_cached_locked(kiln_loader *l, size_t u);

/* ---- resolve_remote.c ---- */

/* Resolution step 3: asks the cache's remote, if any, for units[0..n) that
 * no local layer could load — exact CUBIN first, then compatible CUBIN and
 * PTX — and loads what it gets (their modules are set). note gets a line on
 * what the remote said, for the error if some are still missing. */
kiln_status kiln_resolve_fetch_remote(kiln_loader *l, const size_t *units, size_t n, char *note,
                                      size_t note_cap);

/* ---- resolve.c ---- */

/* Resolves and loads units[u] (l->lock held). */
kiln_status kiln_resolve_locked(kiln_loader *l, size_t u);
/* Resolves several units; their misses are built together, in parallel. */
kiln_status kiln_resolve_many(kiln_loader *l, const size_t *units, size_t n);

/* ---- coord_warmup.c ---- */

/* The multi-rank warmup of units. */
kiln_status kiln_warmup_comm(kiln_loader *l, const size_t *units, size_t n, const kiln_comm *comm);

/* ---- loader.c ---- */

/* The function of entry e of unit u, resolving the unit first if needed.
 * The fast path is one atomic load. */
kiln_status kiln_loader_entry(kiln_loader *l, size_t u, size_t e, CUfunction *out);

#endif
