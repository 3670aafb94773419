/* Resolution step 2: the local cache layers. A unit's records, put in
 * selection order by loader/select.c, are handed to the driver one by one
 * until one loads (loader/module.c); when none does, what the layers hold
 * and why each was passed over goes into the error that says what to do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/logging.h"
#include "kiln/build.h"
#include "loader/loader_internal.h"
#include "loader/select.h"

/* What the caches hold for a unit, for the error that says what to do. */
static void describe_holdings(const kiln_record *recs, size_t n, const char *why, char *out,
                              size_t cap) {
  size_t len = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n && len + 20 < cap; i++) {
    int dup = 0;
    for (size_t j = 0; j < i; j++)
      dup |= strcmp(recs[j].target, recs[i].target) == 0;
    if (!dup)
      len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "", recs[i].target);
  }
  if (!n) snprintf(out, cap, "nothing for this unit");
  len = strlen(out);
  if (why && *why && len + 8 < cap) snprintf(out + len, cap - len, " (%s)", why);
}

kiln_status kiln_load_cached(kiln_loader *l, size_t u, char *held, size_t held_cap) {
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
    kiln_module_attempt a = kiln_module_load(l, s, cands[i].rec, cands[i].source, e, sizeof e);
    if (a == KILN_MODULE_LOADED) {
      rc = KILN_OK;
      goto out;
    }
    if (a == KILN_MODULE_REFUSED) { /* a capture: no build either (resolve.c) */
      rc = kiln_fail(KILN_EDRIVER, "%s: %s", s->unit->name, e);
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

kiln_status kiln_resolve_cached_locked(kiln_loader *l, size_t u) {
  kiln_unit_slot *s = &l->units[u];
  char held[1024];
  if (s->module) return KILN_OK;
  if (s->unit->min_arch > l->cc)
    return kiln_fail(KILN_EUNSUPPORTED, "%s needs sm_%d or newer; this GPU (%s) is sm_%d",
                     s->unit->name, s->unit->min_arch, l->info.name, l->cc);
  return kiln_load_cached(l, u, held, sizeof held);
}
