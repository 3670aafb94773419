/* Resolution: cached artifacts in selection order, then one build under
 * single flight, then a clear error (DESIGN.md, "Resolution order"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "kiln/build.h"
#include "kiln/target.h"
#include "loader/loader_internal.h"
#include "loader/select.h"

/* The driver refused the bytes themselves: such a blob is quarantined.
 * NO_BINARY_FOR_GPU, UNSUPPORTED_PTX_VERSION and INVALID_PTX say this device
 * or driver cannot use it (sound bytes, wrong place): the next candidate is
 * tried and the blob stays for the machines that can. */
static int image_is_bad(CUresult r) {
  return r == CUDA_ERROR_INVALID_IMAGE;
}

/* ".version A.B" of a PTX text, x10; 0 if absent. */
static int ptx_version(const char *ptx) {
  const char *p = strstr(ptx, "\n.version ");
  int a = 0, b = 0;
  if (!p || sscanf(p + 10, "%d.%d", &a, &b) != 2) return 0;
  return a * 10 + b;
}

typedef enum { LOADED, SKIPPED, REJECTED } attempt;

/* Reads rec's blob (verified) and hands it to the driver. */
static attempt try_load(kiln_loader *l, kiln_unit_slot *s, const kiln_record *want,
                        kiln_load_source src, char *err, size_t err_cap) {
  kiln_record rec;
  uint8_t *blob = NULL;
  size_t size = 0;
  CUmodule mod = NULL;
  CUresult r = CUDA_SUCCESS;
  attempt a = SKIPPED;
  int pushed = 0;
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
    isa = ptx_version((const char *)blob);
    if (isa > l->info.ptx_isa) {
      snprintf(err, err_cap, "%s: PTX ISA %d.%d is newer than the driver accepts (%d.%d)",
               rec.target, isa / 10, isa % 10, l->info.ptx_isa / 10, l->info.ptx_isa % 10);
      goto out;
    }
  }
  if (kiln_ctx_enter(l, &pushed) != KILN_OK) {
    snprintf(err, err_cap, "%s", kiln_last_error());
    goto out;
  }
  r = l->cu->ModuleLoadDataEx(&mod, blob, 0, NULL, NULL);
  kiln_ctx_leave(l, pushed);
  if (r != CUDA_SUCCESS) {
    const char *text = NULL;
    l->cu->GetErrorString(r, &text);
    snprintf(err, err_cap, "%s (%.12s): the driver refused it: %s (%s)", rec.target, rec.digest,
             kiln_cuda_error_name(r), text ? text : "?");
    if (!image_is_bad(r)) goto out;
    a = REJECTED;
    if (rec.layer == 0) {
      kiln_log(KILN_LOG_WARN, "%s %s: %s; quarantined", s->unit->name, rec.target, err);
      if (kiln_cache_quarantine(l->cache, rec.digest, err) != KILN_OK)
        kiln_log(KILN_LOG_WARN, "%s", kiln_last_error());
    } else {
      kiln_log(KILN_LOG_WARN, "%s %s in read-only layer %d: %s; skipped", s->unit->name,
               rec.target, rec.layer, err);
    }
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
    kiln_log(KILN_LOG_INFO, "%s: loaded %s %s on sm_%d%s", s->unit->name,
             kiln_load_source_str(src), rec.target, l->cc,
             src == KILN_LOAD_BUILT ? "" : " (no CUBIN for exactly this arch is cached)");
  a = LOADED;
out:
  free(blob);
  return a;
}

/* What the caches hold for a unit, for the error that says what to do. */
static void describe_holdings(const kiln_record *recs, size_t n, const char *why, char *out,
                              size_t cap) {
  size_t len = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n && len + 20 < cap; i++) {
    int dup = 0;
    for (size_t j = 0; j < i; j++) dup |= strcmp(recs[j].target, recs[i].target) == 0;
    if (!dup) len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "", recs[i].target);
  }
  if (!n) snprintf(out, cap, "nothing for this unit");
  len = strlen(out);
  if (why && *why && len + 8 < cap) snprintf(out + len, cap - len, " (%s)", why);
}

/* Tries the cached candidates of units[u]. KILN_ENOTFOUND with a description
 * in `held` when none loads. */
static kiln_status load_cached(kiln_loader *l, size_t u, char *held, size_t held_cap) {
  kiln_unit_slot *s = &l->units[u];
  kiln_record *recs = NULL;
  kiln_candidate *cands = NULL;
  char toolchain[32] = "", why[1024], err[512] = "";
  size_t n = 0, m;
  kiln_status rc;
  KILN_CHECK(kiln_cache_find_unit(&recs, &n, l->cache, s->unit, kiln_build_compile_options()));
  if (kiln_toolchain_id(toolchain) != KILN_OK) toolchain[0] = '\0';
  cands = calloc(n ? n : 1, sizeof *cands);
  if (!cands) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  m = kiln_select(recs, n, l->cc, l->info.driver_version, toolchain, cands, why, sizeof why);
  for (size_t i = 0; i < m; i++) {
    char e[384];
    attempt a = try_load(l, s, cands[i].rec, cands[i].source, e, sizeof e);
    if (a == LOADED) {
      rc = KILN_OK;
      goto out;
    }
    kiln_log(KILN_LOG_DEBUG, "%s: candidate %s", s->unit->name, e);
    snprintf(err + strlen(err), sizeof err - strlen(err), "%s%s", *err ? "; " : "", e);
  }
  if (*err) snprintf(why + strlen(why), sizeof why - strlen(why), "%s%s", *why ? "; " : "", err);
  describe_holdings(recs, n, why, held, held_cap);
  rc = KILN_ENOTFOUND;
out:
  free(recs);
  free(cands);
  return rc;
}

static kiln_status no_artifact(kiln_loader *l, size_t u, const char *held, const char *reason) {
  return kiln_fail(KILN_ENOTFOUND,
                   "no loadable %s for this GPU (%s, sm_%d; the driver accepts PTX up to %d.%d): "
                   "the caches hold %s; %s. Fix: run `kiln build --arch %d --cache %s` (e.g. "
                   "in the container image), or add a cache that has it to KILN_CACHE_PATH",
                   l->units[u].unit->name, l->info.name, l->cc, l->info.ptx_isa / 10,
                   l->info.ptx_isa % 10, held, reason, l->cc, kiln_cache_dir(l->cache));
}

/* Builds sm_<cc> for the missing units, all at once (in parallel; one process
 * per cache directory builds each: the others wait), then loads each. */
static kiln_status build_missing(kiln_loader *l, const size_t *units, size_t n, char (*held)[1024]) {
  kiln_build_options o = KILN_BUILD_OPTIONS_INIT;
  kiln_build_summary *sum = NULL;
  const char **names = NULL;
  kiln_target t = {l->cc, 0, KILN_TARGET_CUBIN};
  kiln_status rc = KILN_OK;
  int *archs = NULL, supported = 0;
  size_t n_archs = 0;
  if (kiln_nvrtc_supported_archs(&archs, &n_archs) != KILN_OK) {
    char reason[600];
    snprintf(reason, sizeof reason, "it cannot be built here: %s", kiln_last_error());
    return no_artifact(l, units[0], held[0], reason);
  }
  for (size_t i = 0; i < n_archs; i++) supported |= archs[i] == l->cc;
  free(archs);
  {
    int ma = 0, mi = 0;
    kiln_nvrtc_version(&ma, &mi);
    if (ma > l->info.driver_version / 1000) {
      char reason[256];
      snprintf(reason, sizeof reason,
               "NVRTC %d.%d builds code that this driver (CUDA %d.%d) cannot load: update the "
               "NVIDIA driver, or point KILN_NVRTC_LIBRARY at an NVRTC %d.x",
               ma, mi, l->info.driver_version / 1000, l->info.driver_version % 1000 / 10,
               l->info.driver_version / 1000);
      return no_artifact(l, units[0], held[0], reason);
    }
  }
  if (!supported) {
    char reason[256];
    int ma = 0, mi = 0;
    kiln_nvrtc_version(&ma, &mi);
    snprintf(reason, sizeof reason, "NVRTC %d.%d cannot build for sm_%d (a newer CUDA toolkit can)",
             ma, mi, l->cc);
    return no_artifact(l, units[0], held[0], reason);
  }
  names = calloc(n, sizeof *names);
  if (!names) return kiln_fail(KILN_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) names[i] = l->units[units[i]].unit->name;
  o.targets = &t;
  o.n_targets = 1;
  o.units = names;
  o.n_units = n;
  o.jobs = l->jobs;
  o.lease_stale_s = l->stale_s;
  o.wait_timeout_s = l->timeout_s;
  o.no_remote = 1; /* step 3 asked it already */
  o.offline = 0;   /* an offline loader never gets here */
  kiln_log(KILN_LOG_INFO, "building %zu unit%s for sm_%d with NVRTC (not in any cache layer)", n,
           n == 1 ? "" : "s", l->cc);
  KILN_CHECK(kiln_build(&sum, l->cache, &o));
  for (size_t i = 0; i < sum->n_items; i++) {
    kiln_build_item *it = &sum->items[i];
    size_t u = 0;
    char err[384];
    while (u < l->n_units && l->units[u].unit != it->unit) u++;
    if (u == l->n_units) continue;
    if (it->outcome == KILN_BUILD_FAILED) {
      if (rc == KILN_OK)
        rc = kiln_fail(it->status, "building %s for sm_%d failed: %s%s%s", it->unit->name, l->cc,
                       it->error, it->log_tail ? "\n" : "", it->log_tail ? it->log_tail : "");
      continue;
    }
    if (try_load(l, &l->units[u], &it->record, KILN_LOAD_BUILT, err, sizeof err) != LOADED &&
        rc == KILN_OK)
      rc = kiln_fail(KILN_EDRIVER, "%s: the freshly built %s", it->unit->name, err);
  }
out:
  kiln_build_summary_free(sum);
  free(names);
  return rc;
}

static kiln_status resolve_units_locked(kiln_loader *l, const size_t *units, size_t n) {
  size_t *missing = calloc(n ? n : 1, sizeof *missing), n_missing = 0;
  char note[512] = "";
  char (*held)[1024] = calloc(n ? n : 1, sizeof *held);
  kiln_status rc = KILN_OK;
  if (!missing || !held) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    kiln_unit_slot *s = &l->units[units[i]];
    kiln_status r;
    if (s->module) continue;
    if (s->unit->min_arch > l->cc) {
      rc = kiln_fail(KILN_EUNSUPPORTED, "%s needs sm_%d or newer; this GPU (%s) is sm_%d",
                     s->unit->name, s->unit->min_arch, l->info.name, l->cc);
      goto out;
    }
    r = load_cached(l, units[i], held[n_missing], sizeof held[n_missing]);
    if (r == KILN_ENOTFOUND) missing[n_missing++] = units[i];
    else if (r != KILN_OK) {
      rc = r;
      goto out;
    }
  }
  if (!n_missing) goto out;
  /* step 3: the remote cache */
  KILN_CHECK(kiln_resolve_fetch_remote(l, missing, n_missing, note, sizeof note));
  for (size_t i = 0, kept = n_missing; i < kept; i++) {
    if (!l->units[missing[i]].module) continue;
    memmove(&missing[i], &missing[i + 1], (kept - i - 1) * sizeof *missing);
    memmove(&held[i], &held[i + 1], (kept - i - 1) * sizeof *held);
    kept--, n_missing--, i--;
  }
  if (!n_missing) goto out;
  if (l->offline) {
    char reason[512];
    snprintf(reason, sizeof reason, "KILN_OFFLINE=1 forbids building it here%s%s",
             *note ? "; " : "", note);
    rc = no_artifact(l, missing[0], held[0], reason);
    goto out;
  }
  rc = build_missing(l, missing, n_missing, held);
out:
  free(missing);
  free(held);
  return rc;
}

kiln_status kiln_resolve_cached_locked(kiln_loader *l, size_t u) {
  kiln_unit_slot *s = &l->units[u];
  char held[1024];
  if (s->module) return KILN_OK;
  if (s->unit->min_arch > l->cc)
    return kiln_fail(KILN_EUNSUPPORTED, "%s needs sm_%d or newer; this GPU (%s) is sm_%d",
                     s->unit->name, s->unit->min_arch, l->info.name, l->cc);
  return load_cached(l, u, held, sizeof held);
}

kiln_status kiln_resolve_locked(kiln_loader *l, size_t u) {
  if (l->units[u].module) return KILN_OK;
  return resolve_units_locked(l, &u, 1);
}

kiln_status kiln_resolve_many(kiln_loader *l, const size_t *units, size_t n) {
  kiln_status rc;
  pthread_mutex_lock(&l->lock);
  rc = resolve_units_locked(l, units, n);
  pthread_mutex_unlock(&l->lock);
  return rc;
}
