/* kiln_loader_warmup with a communicator: the slots are this device's
 * (unit, sm_XY) pairs; "have" means a cache layer held something the device
 * loaded (exact, compatible or PTX), and the fingerprint covers the code
 * actually loaded. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "loader/coord_internal.h"
#include "loader/loader_internal.h"

typedef struct warm {
  kiln_loader *l;
  const size_t *units;
  size_t n;
} warm;

/* A unit loaded from a stand-in (a compatible CUBIN or PTX) whose exact
 * CUBIN the root built for others: unload it so the resolution below picks
 * the exact one once this rank's cache has it (every rank then runs the same
 * code). */
static void prefer_exact(kiln_loader *l, size_t u) {
  kiln_unit_slot *s = &l->units[u];
  char target[16];
  kiln_record rec;
  if (!s->module || s->load.source == KILN_LOAD_EXACT || s->load.source == KILN_LOAD_BUILT) return;
  snprintf(target, sizeof target, "sm_%d", l->cc);
  if (kiln_coord_find(l->cache, s->unit, target, &rec) == KILN_OK) kiln_unload_locked(l, u);
}

static kiln_status warm_local(void *user, uint8_t need[COORD_MAP_BYTES], size_t *n_slots,
                              const uint8_t *built) {
  warm *w = user;
  kiln_loader *l = w->l;
  kiln_target t = {l->cc, 0, KILN_TARGET_CUBIN};
  int code = kiln_coord_target_code(&t);
  kiln_status rc = KILN_OK;
  *n_slots = w->n;
  if (code < 0)
    return kiln_fail(KILN_EUNSUPPORTED, "coordination: sm_%d is outside the map", l->cc);
  pthread_mutex_lock(&l->lock);
  for (size_t i = 0; i < w->n && rc == KILN_OK; i++) {
    size_t u = w->units[i], slot = u * COORD_MAP_TARGETS + (size_t)code;
    if (built && built[slot]) prefer_exact(l, u);
    rc = kiln_resolve_cached_locked(l, u);
    if (rc == KILN_ENOTFOUND) {
      need[slot] = 1;
      rc = KILN_OK;
    } else if (rc == KILN_OK && built && built[slot] &&
               l->units[u].load.source != KILN_LOAD_EXACT) {
      need[slot] = 1; /* a stand-in: ask for the exact CUBIN the root built */
    }
  }
  pthread_mutex_unlock(&l->lock);
  return rc;
}

static kiln_status warm_fp(void *user, uint8_t out[COORD_FP_BYTES]) {
  warm *w = user;
  kiln_fp_builder *b = NULL;
  kiln_status rc;
  KILN_CHECK(kiln_fp_begin(&b));
  pthread_mutex_lock(&w->l->lock);
  for (size_t i = 0; i < w->n && rc == KILN_OK; i++) {
    const kiln_unit_slot *s = &w->l->units[w->units[i]];
    rc = s->module ? kiln_fp_add(b, s->unit->name, s->load.target, s->load.digest)
                   : kiln_fail(KILN_EINTERNAL, "coordination: %s is not loaded", s->unit->name);
  }
  pthread_mutex_unlock(&w->l->lock);
  rc = kiln_fp_end(b, rc, out);
out:
  return rc;
}

kiln_status kiln_warmup_comm(kiln_loader *l, const size_t *units, size_t n, const kiln_comm *comm) {
  warm w = {l, units, n};
  coord_hooks h = {&w, warm_local, warm_fp};
  coord_params p;
  kiln_status rc;
  KILN_CHECK(kiln_comm_check(comm));
  memset(&p, 0, sizeof p);
  p.cache = l->cache;
  p.comm = comm;
  p.kernels = l->kernels;
  p.heartbeat_s = l->heartbeat_s; /* KILN_ENV until kiln_coord_defaults */
  p.timeout_s = l->timeout_s;
  p.peer_timeout_s = l->peer_timeout_s;
  p.jobs = l->jobs;
  p.offline = l->offline;
  rc = kiln_coord_run(&p, &h, kiln_coord_defaults(&p), &l->coord);
  l->have_coord = 1;
out:
  return rc;
}

kiln_status kiln_loader_coord_report(kiln_coord_report *out, kiln_loader *l) {
  if (!l || !out) return kiln_fail(KILN_EINVAL, "kiln_loader_coord_report: NULL argument");
  if (!l->have_coord) return kiln_fail(KILN_ENOTFOUND, "no multi-rank warmup ran on this loader");
  *out = l->coord;
  return KILN_OK;
}
