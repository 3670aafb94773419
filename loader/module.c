/* Modules: the context a driver call runs in, one cached record loaded into
 * a unit's slot, an entry point looked up in a loaded module, a unit
 * unloaded. The bottom of the loader's files: it calls the driver and the
 * cache, no other loader file (the layering is in loader_internal.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/entries.h" /* kiln_image_missing_entry */
#include "cache/store.h"   /* kiln_record_drop */
#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "loader/image.h"
#include "loader/loader_internal.h"
#include "loader/select.h" /* kiln_ptx_text_isa */

kiln_status kiln_ctx_enter(kiln_loader *l, int *pushed) {
  CUcontext cur = NULL;
  kiln_status rc = KILN_OK;
  *pushed = 0;
  CU_CHECK(l->cu->CtxGetCurrent(&cur), "cuCtxGetCurrent");
  if (cur != l->ctx) {
    CU_CHECK(l->cu->CtxPushCurrent(l->ctx), "cuCtxPushCurrent");
    *pushed = 1;
  }
out:
  return rc;
}

void kiln_ctx_leave(kiln_loader *l, int pushed) {
  CUcontext popped;
  if (pushed) l->cu->CtxPopCurrent(&popped);
}

/* The driver refused the bytes themselves: such a blob is quarantined.
 * NO_BINARY_FOR_GPU, UNSUPPORTED_PTX_VERSION and INVALID_PTX say this device
 * or driver cannot use it (sound bytes, wrong place): the next candidate is
 * tried and the blob stays for the machines that can. */
static int image_is_bad(CUresult r) {
  return r == CUDA_ERROR_INVALID_IMAGE;
}

/* The driver refuses to load anything while a stream of the process (global
 * capture mode) or of this thread (thread-local) captures a CUDA graph, and
 * the refusal invalidates that capture; the legacy stream is unusable while
 * any blocking stream captures. Not about the bytes, and the same for every
 * candidate. */
static int load_refused_by_capture(CUresult r) {
  return r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
         r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
}

/* cuModuleLoadDataEx with the JIT's error and info logs captured: a PTX the
 * driver's JIT refuses says why (its first lines, one line in log), not only
 * an error code. */
static CUresult load_with_log(kiln_loader *l, CUmodule *mod, const void *image, char *log,
                              size_t cap) {
  char err_buf[1024] = "", info_buf[1024] = "";
  CUjit_option opt[4] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void *val[4] = {err_buf, (void *)(uintptr_t)sizeof err_buf, info_buf,
                  (void *)(uintptr_t)sizeof info_buf};
  CUresult r = l->cu->ModuleLoadDataEx(mod, image, 4, opt, val);
  const char *src = err_buf[0] ? err_buf : info_buf;
  size_t n = 0;
  err_buf[sizeof err_buf - 1] = info_buf[sizeof info_buf - 1] = '\0';
  for (; *src && n + 1 < cap; ++src) /* newlines become "; ", other controls spaces */
    if (*src == '\n') {
      if (src[1] && n + 3 < cap) log[n++] = ';', log[n++] = ' ';
    } else {
      log[n++] = (unsigned char)*src < 0x20 ? ' ' : *src;
    }
  log[n] = '\0';
  return r;
}

/* A bad image: quarantined in the primary layer, skipped in a read-only one;
 * the next candidate is tried either way. */
static kiln_module_attempt reject(kiln_loader *l, const kiln_unit_slot *s, const kiln_record *rec,
                                  const char *err) {
  if (rec->layer == 0) {
    kiln_log(KILN_LOG_WARN, "%s %s: %s; quarantined", s->unit->name, rec->target, err);
    if (kiln_cache_quarantine(l->cache, rec->digest, err) != KILN_OK)
      kiln_log(KILN_LOG_WARN, "%s", kiln_last_error());
  } else {
    kiln_log(KILN_LOG_WARN, "%s %s in read-only layer %d: %s; skipped", s->unit->name, rec->target,
             rec->layer, err);
  }
  return KILN_MODULE_REJECTED;
}

/* A sound image of another unit (a record pointing at its blob): the
 * record goes, not the blob, which is good for its own unit. A read-only
 * layer's record is skipped. The next candidate is tried either way. */
static kiln_module_attempt reject_record(kiln_loader *l, const kiln_unit_slot *s,
                                         const kiln_record *rec, const char *err) {
  int gone = 0;
  if (rec->layer != 0) {
    kiln_log(KILN_LOG_WARN, "%s %s in read-only layer %d: %s; skipped", s->unit->name, rec->target,
             rec->layer, err);
  } else if (kiln_record_drop(&gone, l->cache, rec->key, 0, rec->digest) != KILN_OK) {
    kiln_log(KILN_LOG_WARN, "%s %s: record %.12s: %s; dropping it failed: %s", s->unit->name,
             rec->target, rec->key, err, kiln_last_error());
  } else {
    kiln_log(KILN_LOG_WARN, "%s %s: record %.12s: %s; record dropped (the blob is kept)",
             s->unit->name, rec->target, rec->key, err);
  }
  return KILN_MODULE_REJECTED;
}

/* Looks every entry point of the unit up in a freshly loaded module (the
 * context current) and keeps the handles: a record that names another
 * unit's blob loads fine but has none of them. NULL when all are there, else
 * the first missing name (and no handle is kept). */
static const char *bind_entries(kiln_loader *l, kiln_unit_slot *s, CUmodule mod) {
  for (size_t e = 0; e < s->unit->n_entries; e++) {
    CUfunction f = NULL;
    if (l->cu->ModuleGetFunction(&f, mod, s->unit->entries[e].name) != CUDA_SUCCESS) {
      for (size_t k = 0; k < e; k++)
        __atomic_store_n(&s->fns[k], NULL, __ATOMIC_RELEASE);
      return s->unit->entries[e].name;
    }
    __atomic_store_n(&s->fns[e], f, __ATOMIC_RELEASE);
  }
  return NULL;
}

kiln_module_attempt kiln_module_load(kiln_loader *l, kiln_unit_slot *s, const kiln_record *want,
                                     kiln_load_source src, char *err, size_t err_cap) {
  kiln_record rec;
  uint8_t *blob = NULL;
  size_t size = 0;
  CUmodule mod = NULL;
  CUresult r = CUDA_SUCCESS;
  kiln_module_attempt a = KILN_MODULE_SKIPPED;
  int pushed = 0;
  char jit_log[512];
  const char *missing = NULL;
  double t0 = kiln_clock_ms();
  if (kiln_cache_get(&rec, &blob, &size, l->cache, want->key) != KILN_OK) {
    snprintf(err, err_cap, "%s: %s", want->target, kiln_last_error());
    goto out;
  }
  if (strcmp(rec.kind, "ptx") == 0) {
    uint8_t *z = realloc(blob, size + 1); /* the driver reads PTX up to a NUL */
    int isa;
    if (!z) goto out;
    blob = z;
    blob[size] = '\0';
    isa = kiln_ptx_text_isa((const char *)blob, size);
    if (isa > l->info.ptx_isa) {
      snprintf(err, err_cap, "%s: PTX ISA %d.%d is newer than the driver accepts (%d.%d)",
               rec.target, isa / 10, isa % 10, l->info.ptx_isa / 10, l->info.ptx_isa % 10);
      goto out;
    }
  }
  /* the image's own shape first: headers pointing past its end must never
   * reach the driver, which would read past the buffer */
  if (kiln_image_check(blob, size, rec.kind, jit_log, sizeof jit_log) != 0) {
    snprintf(err, err_cap, "%s (%.12s): not a loadable %s: %s", rec.target, rec.digest, rec.kind,
             jit_log);
    a = reject(l, s, &rec, err);
    goto out;
  }
  /* the unit's entry points, from the image's own symbols, before the
   * driver loads another unit's code (bind_entries asks the driver too) */
  if ((missing = kiln_image_missing_entry(blob, size, rec.kind, s->unit)) != NULL) {
    snprintf(err, err_cap, "%s (%.12s): not %s's image: it has no entry point %s", rec.target,
             rec.digest, s->unit->name, missing);
    a = reject_record(l, s, &rec, err);
    goto out;
  }
  if (kiln_ctx_enter(l, &pushed) != KILN_OK) {
    snprintf(err, err_cap, "%s", kiln_last_error());
    goto out;
  }
  r = load_with_log(l, &mod, blob, jit_log, sizeof jit_log);
  if (r == CUDA_SUCCESS && (missing = bind_entries(l, s, mod)) != NULL) {
    l->cu->ModuleUnload(mod); /* another unit's image (a record pointing at its blob) */
    mod = NULL;
  }
  kiln_ctx_leave(l, pushed);
  if (missing) {
    snprintf(err, err_cap, "%s (%.12s): not %s's image: it has no entry point %s", rec.target,
             rec.digest, s->unit->name, missing);
    a = reject_record(l, s, &rec, err);
    goto out;
  }
  if (r != CUDA_SUCCESS) {
    const char *text = NULL;
    l->cu->GetErrorString(r, &text);
    snprintf(err, err_cap, "%s (%.12s): the driver refused it: %s (%s)%s%s", rec.target, rec.digest,
             kiln_cuda_error_name(r), text ? text : "?", jit_log[0] ? ": " : "", jit_log);
    if (image_is_bad(r)) a = reject(l, s, &rec, err);
    if (load_refused_by_capture(r)) a = KILN_MODULE_REFUSED;
    goto out;
  }
  s->module = mod;
  memset(&s->load, 0, sizeof s->load);
  snprintf(s->load.unit, sizeof s->load.unit, "%s", s->unit->name);
  s->load.source = src;
  snprintf(s->load.target, sizeof s->load.target, "%s", rec.target);
  snprintf(s->load.digest, sizeof s->load.digest, "%s", rec.digest);
  s->load.layer = rec.layer;
  s->load.ms = kiln_clock_ms() - t0;
  if (src != KILN_LOAD_EXACT)
    kiln_log(KILN_LOG_INFO, "%s: loaded %s %s on sm_%d%s", s->unit->name, kiln_load_source_str(src),
             rec.target, l->cc,
             src == KILN_LOAD_BUILT ? "" : " (no CUBIN for exactly this arch is cached)");
  a = KILN_MODULE_LOADED;
out:
  free(blob);
  return a;
}

kiln_status kiln_module_function_locked(kiln_loader *l, size_t u, size_t e, CUfunction *out) {
  kiln_unit_slot *s = &l->units[u];
  kiln_status rc = KILN_OK;
  CUfunction f = s->fns[e];
  int pushed = 0;
  if (!f) {
    KILN_CHECK(kiln_ctx_enter(l, &pushed));
    CUresult r = l->cu->ModuleGetFunction(&f, s->module, s->unit->entries[e].name);
    kiln_ctx_leave(l, pushed);
    if (r != CUDA_SUCCESS) {
      char what[192];
      snprintf(what, sizeof what, "cuModuleGetFunction(%s) in %s %s", s->unit->entries[e].name,
               s->unit->name, s->load.target);
      rc = kiln_cuda_fail(r, what);
      goto out;
    }
    __atomic_store_n(&s->fns[e], f, __ATOMIC_RELEASE);
  }
  *out = f;
out:
  return rc;
}

void kiln_unload_locked(kiln_loader *l, size_t u) {
  kiln_unit_slot *s = &l->units[u];
  int pushed = 0;
  if (!s->module) return;
  for (size_t e = 0; e < s->unit->n_entries; e++)
    __atomic_store_n(&s->fns[e], NULL, __ATOMIC_RELEASE);
  if (kiln_ctx_enter(l, &pushed) == KILN_OK) {
    l->cu->ModuleUnload(s->module);
    kiln_ctx_leave(l, pushed);
  }
  s->module = NULL;
  memset(&s->load, 0, sizeof s->load);
}

const char *kiln_load_source_str(kiln_load_source s) {
  switch (s) {
  case KILN_LOAD_EXACT: return "exact CUBIN";
  case KILN_LOAD_COMPATIBLE: return "compatible CUBIN";
  case KILN_LOAD_PTX: return "PTX JIT";
  case KILN_LOAD_BUILT: return "built";
  default: return "not loaded";
  }
}
