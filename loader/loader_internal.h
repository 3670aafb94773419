/* Internal: the loader state, shared by the files of loader/. */
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
  CUmodule module;       /* NULL until loaded */
  kiln_unit_load load;   /* where it came from */
  CUfunction *fns;       /* per entry point, filled lazily; read with acquire loads */
} kiln_unit_slot;

struct kiln_loader {
  const kiln_cuda_api *cu;
  CUcontext ctx;
  CUdevice dev;
  int retained;          /* ctx is dev's primary context, retained by us */
  kiln_device_info info;
  int cc;                /* 90 for 9.0 */
  kiln_cache *cache;
  int offline, jobs;
  double stale_s, timeout_s;
  double heartbeat_s;    /* kiln_loader_options.heartbeat_s as given (KILN_ENV: the variable) */
  pthread_mutex_t lock;  /* resolution, module loads, unloads */
  size_t n_units;
  kiln_unit_slot *units;
  char *kernels;         /* kiln_loader_options.kernels (owned copy), or NULL: all units */
  CUdeviceptr op_error;  /* the ops' device error block (loader/ops_common.c); 0 until used */
  kiln_coord_report coord; /* the last multi-rank warmup */
  int have_coord;
};

/* Makes l's context current for a driver call (pushed only when another one
 * is current); leave pops it again. */
kiln_status kiln_ctx_enter(kiln_loader *l, int *pushed);
void kiln_ctx_leave(kiln_loader *l, int pushed);

/* Resolves and loads units[u] (l->lock held). */
kiln_status kiln_resolve_locked(kiln_loader *l, size_t u);
/* Loads units[u] from the cache layers only: KILN_ENOTFOUND when none holds
 * a loadable artifact (l->lock held). */
kiln_status kiln_resolve_cached_locked(kiln_loader *l, size_t u);
/* Resolution step 3 (loader/resolve_remote.c): asks the cache's remote, if
 * any, for units[0..n) that no local layer could load — exact CUBIN first,
 * then compatible CUBIN and PTX — and loads what it gets (their modules are
 * set). note gets a line on what the remote said, for the error if some are
 * still missing. */
kiln_status kiln_resolve_fetch_remote(kiln_loader *l, const size_t *units, size_t n, char *note,
                                      size_t note_cap);
/* The multi-rank warmup of units (loader/coord_warmup.c). */
kiln_status kiln_warmup_comm(kiln_loader *l, const size_t *units, size_t n, const kiln_comm *comm);
/* Resolves several units; their misses are built together, in parallel. */
kiln_status kiln_resolve_many(kiln_loader *l, const size_t *units, size_t n);
/* Unloads units[u] (l->lock held). */
void kiln_unload_locked(kiln_loader *l, size_t u);

/* The function of entry e of unit u, resolving the unit first if needed.
 * The fast path is one atomic load. */
kiln_status kiln_loader_entry(kiln_loader *l, size_t u, size_t e, CUfunction *out);

#endif
