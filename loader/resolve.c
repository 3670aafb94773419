/* Resolution: the local layers (loader/resolve_local.c), then the remote
 * (loader/resolve_remote.c), then one build under single flight, then a
 * clear error (DESIGN.md, "Resolution order"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/logging.h"
#include "kiln/build.h"
#include "kiln/target.h"
#include "loader/loader_internal.h"
#include "loader/select.h" /* kiln_build_fits */

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
static kiln_status build_missing(kiln_loader *l, const size_t *units, size_t n,
                                 char (*held)[1024]) {
  kiln_build_options o = KILN_BUILD_OPTIONS_INIT;
  kiln_build_summary *sum = NULL;
  const char **names = NULL;
  kiln_target t = {l->cc, 0, KILN_TARGET_CUBIN};
  kiln_status rc = KILN_OK;
  int *archs = NULL, ma = 0, mi = 0;
  size_t n_archs = 0;
  char reason[600];
  if (kiln_nvrtc_supported_archs(&archs, &n_archs) != KILN_OK) {
    snprintf(reason, sizeof reason, "it cannot be built here: %s", kiln_last_error());
    return no_artifact(l, units[0], held[0], reason);
  }
  kiln_nvrtc_version(&ma, &mi);
  if (!kiln_build_fits(l->cc, l->info.driver_version, ma, mi, archs, n_archs, reason,
                       sizeof reason)) {
    free(archs);
    return no_artifact(l, units[0], held[0], reason);
  }
  free(archs);
  names = calloc(n, sizeof *names);
  if (!names) return kiln_fail(KILN_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++)
    names[i] = l->units[units[i]].unit->name;
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
    while (u < l->n_units && l->units[u].unit != it->unit)
      u++;
    if (u == l->n_units) continue;
    if (it->outcome == KILN_BUILD_FAILED) {
      if (rc == KILN_OK)
        rc = kiln_fail(it->status, "building %s for sm_%d failed: %s%s%s", it->unit->name, l->cc,
                       it->error, it->log_tail ? "\n" : "", it->log_tail ? it->log_tail : "");
      continue;
    }
    if (kiln_module_load(l, &l->units[u], &it->record, KILN_LOAD_BUILT, err, sizeof err) !=
            KILN_MODULE_LOADED &&
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
  char(*held)[1024] = calloc(n ? n : 1, sizeof *held);
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
    r = kiln_load_cached(l, units[i], held[n_missing], sizeof held[n_missing]);
    if (r == KILN_ENOTFOUND)
      missing[n_missing++] = units[i];
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
    char reason[600]; /* note (512) and the words around it */
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
