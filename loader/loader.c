/* The loader's lifetime and its public entry points: open on a device or
 * the current context, close, resolve and warm up units, entry-point lookup
 * (resolving on first use), and what it loaded. */
#include <fnmatch.h>
#include <stddef.h> /* offsetof */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "kiln/build.h"
#include "loader/loader_internal.h"

static kiln_status bind_context(kiln_loader *l, int device) {
  kiln_status rc = KILN_OK;
  int ordinal = device;
  if (device == KILN_LOADER_CURRENT_CONTEXT) {
    CU_CHECK(l->cu->CtxGetCurrent(&l->ctx), "cuCtxGetCurrent");
    if (!l->ctx)
      return kiln_fail(KILN_EINVAL, "kiln_loader_open: no CUDA context is current on this "
                                    "thread (make one current first, or open by device ordinal)");
    CU_CHECK(l->cu->CtxGetDevice(&l->dev), "cuCtxGetDevice");
    ordinal = (int)l->dev; /* a CUdevice is its ordinal */
  } else {
    KILN_CHECK(kiln_device_get_info(&l->info, device)); /* checks the ordinal */
    CU_CHECK(l->cu->DeviceGet(&l->dev, device), "cuDeviceGet");
    CU_CHECK(l->cu->DevicePrimaryCtxRetain(&l->ctx, l->dev), "cuDevicePrimaryCtxRetain");
    l->retained = 1;
  }
  KILN_CHECK(kiln_device_get_info(&l->info, ordinal));
  l->cc = l->info.cc_major * 10 + l->info.cc_minor;
out:
  return rc;
}

static kiln_status settings(kiln_loader *l, const kiln_loader_options *o) {
  kiln_status rc = KILN_OK;
  KILN_CHECK(
      kiln_option_int(&l->offline, o->offline, KILN_P_offline, "kiln_loader_options.offline"));
  KILN_CHECK(kiln_option_seconds(&l->stale_s, o->lease_stale_s, KILN_P_lease_stale_s,
                                 "kiln_loader_options.lease_stale_s"));
  KILN_CHECK(kiln_option_seconds(&l->timeout_s, o->build_timeout_s, KILN_P_build_timeout_s,
                                 "kiln_loader_options.build_timeout_s"));
  KILN_CHECK(kiln_option_int(&l->jobs, o->jobs, KILN_P_jobs, "kiln_loader_options.jobs"));
  {
    double hb; /* checked now, kept as given: the warmup's own checks read it */
    KILN_CHECK(kiln_option_ms_as_seconds(&hb, o->heartbeat_s, KILN_P_heartbeat_ms,
                                         "kiln_loader_options.heartbeat_s"));
    l->heartbeat_s = o->heartbeat_s;
  }
  l->peer_timeout_s = o->version >= 2 ? o->peer_timeout_s : KILN_ENV; /* the warmup checks it */
  if (o->kernels && !(l->kernels = strdup(o->kernels)))
    KILN_CHECK(kiln_fail(KILN_ENOMEM, "out of memory"));
out:
  return rc;
}

kiln_status kiln_loader_options_init(kiln_loader_options *opts, int version) {
  static const kiln_loader_options init = KILN_LOADER_OPTIONS_INIT;
  size_t size = version >= 2 ? sizeof init : offsetof(kiln_loader_options, peer_timeout_s);
  return kiln_options_init(opts, &init, size, version, KILN_LOADER_OPTIONS_VERSION,
                           "kiln_loader_options");
}

kiln_status kiln_loader_open(kiln_loader **out, const kiln_loader_options *opts) {
  kiln_loader_options dflt = KILN_LOADER_OPTIONS_INIT;
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_loader *l = NULL;
  kiln_status rc;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_loader_open: out is NULL");
  *out = NULL;
  if (!opts) opts = &dflt;
  rc = kiln_options_check(opts->version, KILN_LOADER_OPTIONS_VERSION, "kiln_loader_options");
  if (rc != KILN_OK) return rc;
  if (opts->device < KILN_LOADER_CURRENT_CONTEXT)
    return kiln_fail(KILN_EINVAL, "kiln_loader_options: device %d is not an ordinal", opts->device);
  l = calloc(1, sizeof *l);
  if (!l) return kiln_fail(KILN_ENOMEM, "out of memory");
  pthread_mutex_init(&l->lock, NULL);
  KILN_CHECK(settings(l, opts));
  KILN_CHECK(kiln_cuda(&l->cu));
  KILN_CHECK(bind_context(l, opts->device));
  if (opts->cache) co = *opts->cache;
  co.create = 1;
  KILN_CHECK(kiln_cache_open(&l->cache, &co));
  l->n_units = kiln_unit_count();
  l->units = calloc(l->n_units ? l->n_units : 1, sizeof *l->units);
  if (!l->units) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t u = 0; u < l->n_units; u++) {
    l->units[u].unit = kiln_unit_at(u);
    l->units[u].fns = calloc(l->units[u].unit->n_entries + 1, sizeof(CUfunction));
    if (!l->units[u].fns) {
      rc = kiln_fail(KILN_ENOMEM, "out of memory");
      goto out;
    }
  }
  kiln_log(KILN_LOG_DEBUG, "loader on device %d (%s, sm_%d, driver %d, PTX ISA %d.%d), cache %s",
           l->info.ordinal, l->info.name, l->cc, l->info.driver_version, l->info.ptx_isa / 10,
           l->info.ptx_isa % 10, kiln_cache_dir(l->cache));
  *out = l;
  l = NULL;
out:
  kiln_loader_close(l);
  return rc;
}

void kiln_loader_close(kiln_loader *l) {
  if (!l) return;
  if (l->units) {
    for (size_t u = 0; u < l->n_units; u++) {
      if (l->ctx) kiln_unload_locked(l, u);
      free(l->units[u].fns);
    }
    free(l->units);
  }
  if (l->op_error) {
    int pushed = 0;
    if (kiln_ctx_enter(l, &pushed) == KILN_OK) {
      l->cu->MemFree(l->op_error);
      kiln_ctx_leave(l, pushed);
    }
  }
  if (l->retained) l->cu->DevicePrimaryCtxRelease(l->dev);
  kiln_cache_close(l->cache);
  free(l->kernels);
  pthread_mutex_destroy(&l->lock);
  free(l);
}

kiln_status kiln_loader_device(kiln_device_info *out, kiln_loader *l) {
  if (!l || !out) return kiln_fail(KILN_EINVAL, "kiln_loader_device: NULL argument");
  *out = l->info;
  return KILN_OK;
}

kiln_status kiln_loader_stream_capturing(int *out, kiln_loader *l, struct CUstream_st *stream) {
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  kiln_status rc;
  CUresult r;
  int pushed = 0;
  if (!out || !l) return kiln_fail(KILN_EINVAL, "kiln_loader_stream_capturing: NULL argument");
  *out = 0;
  KILN_CHECK(kiln_ctx_enter(l, &pushed)); /* the legacy stream is the current context's */
  r = l->cu->StreamIsCapturing(stream, &cs);
  kiln_ctx_leave(l, pushed);
  /* IMPLICIT: the legacy stream while a blocking stream of the context
   * captures; the capture is not invalidated, but nothing may load either */
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) {
    *out = 1;
  } else if (r != CUDA_SUCCESS) {
    rc = kiln_cuda_fail(r, "cuStreamIsCapturing");
  } else {
    *out = cs != CU_STREAM_CAPTURE_STATUS_NONE;
  }
out:
  return rc;
}

static kiln_status unit_index(const char *name, size_t *out) {
  char names[1024];
  for (size_t u = 0; u < kiln_unit_count(); u++)
    if (strcmp(kiln_unit_at(u)->name, name) == 0) {
      *out = u;
      return KILN_OK;
    }
  return kiln_fail(KILN_ENOTFOUND, "no kernel unit '%s'; units are: %s", name,
                   kiln_unit_names(names, sizeof names));
}

kiln_status kiln_loader_resolve(kiln_loader *l, const char *unit) {
  kiln_status rc;
  size_t u = 0;
  if (!l || !unit) return kiln_fail(KILN_EINVAL, "kiln_loader_resolve: NULL argument");
  KILN_CHECK(unit_index(unit, &u));
  pthread_mutex_lock(&l->lock);
  rc = kiln_resolve_locked(l, u);
  pthread_mutex_unlock(&l->lock);
out:
  return rc;
}

kiln_status kiln_loader_warmup(kiln_loader *l, const kiln_comm *comm) {
  size_t *all, n = 0;
  kiln_status rc;
  if (!l) return kiln_fail(KILN_EINVAL, "kiln_loader_warmup: loader is NULL");
  all = malloc((l->n_units ? l->n_units : 1) * sizeof *all);
  if (!all) return kiln_fail(KILN_ENOMEM, "out of memory");
  for (size_t u = 0; u < l->n_units; u++)
    if (!l->kernels || fnmatch(l->kernels, l->units[u].unit->name, 0) == 0) all[n++] = u;
  if (n == 0 && l->n_units) {
    char names[1024];
    rc =
        kiln_fail(KILN_ENOTFOUND, "kiln_loader_warmup: kernels '%s' matches no unit; units are: %s",
                  l->kernels, kiln_unit_names(names, sizeof names));
    if (comm) { /* the other ranks must hear of it now, not at their timeout */
      char why[1200];
      snprintf(why, sizeof why, "%s", kiln_last_error());
      kiln_coord_fail(comm, l->timeout_s);
      rc = kiln_fail(rc, "%s", why);
    }
  } else {
    rc = comm ? kiln_warmup_comm(l, all, n, comm) : kiln_resolve_many(l, all, n);
  }
  free(all);
  return rc;
}

kiln_status kiln_loader_entry(kiln_loader *l, size_t u, size_t e, CUfunction *out) {
  kiln_status rc;
  CUfunction f = __atomic_load_n(&l->units[u].fns[e], __ATOMIC_ACQUIRE);
  if (f) {
    *out = f;
    return KILN_OK;
  }
  pthread_mutex_lock(&l->lock);
  KILN_CHECK(kiln_resolve_locked(l, u));
  rc = kiln_module_function_locked(l, u, e, out);
out:
  pthread_mutex_unlock(&l->lock);
  return rc;
}

kiln_status kiln_loader_function(struct CUfunc_st **out, kiln_loader *l, const char *entry) {
  if (!l || !entry || !out) return kiln_fail(KILN_EINVAL, "kiln_loader_function: NULL argument");
  *out = NULL;
  for (size_t u = 0; u < l->n_units; u++) {
    const kiln_unit_info *unit = l->units[u].unit;
    size_t len = strlen(unit->name);
    /* entry names are kiln_<unit>_...: skip units that cannot hold it */
    if (strncmp(entry, "kiln_", 5) != 0 || strncmp(entry + 5, unit->name, len) != 0 ||
        entry[5 + len] != '_')
      continue;
    for (size_t e = 0; e < unit->n_entries; e++)
      if (strcmp(unit->entries[e].name, entry) == 0) return kiln_loader_entry(l, u, e, out);
  }
  return kiln_fail(KILN_ENOTFOUND, "no entry point '%s' (see `kiln list`)", entry);
}

kiln_status kiln_loader_unit_load(kiln_unit_load *out, kiln_loader *l, const char *unit) {
  kiln_status rc;
  size_t u = 0;
  if (!l || !unit || !out) return kiln_fail(KILN_EINVAL, "kiln_loader_unit_load: NULL argument");
  KILN_CHECK(unit_index(unit, &u));
  pthread_mutex_lock(&l->lock);
  *out = l->units[u].load;
  rc = l->units[u].module ? KILN_OK : KILN_ENOTFOUND;
  pthread_mutex_unlock(&l->lock);
  if (rc != KILN_OK) rc = kiln_fail(rc, "%s is not loaded", unit);
out:
  return rc;
}
