/* kiln_coord_fill: the coordination protocol over a cache alone (no GPU):
 * the slots are the selected units x the given targets. */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/params.h"
#include "loader/coord_internal.h"

typedef struct fill {
  kiln_cache *cache;
  const kiln_coord_options *o;
} fill;

static int selected(const fill *f, const kiln_unit_info *u) {
  return !f->o->kernels || fnmatch(f->o->kernels, u->name, 0) == 0;
}

/* Calls fn for every slot in slot order; stops at the first failure. */
typedef kiln_status (*slot_fn)(fill *f, size_t slot, const kiln_unit_info *u, const char *target,
                               void *arg);

static kiln_status each_slot(fill *f, slot_fn fn, void *arg) {
  kiln_status rc = KILN_OK;
  for (size_t u = 0; u < kiln_unit_count() && rc == KILN_OK; u++) {
    const kiln_unit_info *unit = kiln_unit_at(u);
    if (!selected(f, unit)) continue;
    for (size_t t = 0; t < f->o->n_targets && rc == KILN_OK; t++) {
      char name[16];
      int code = kiln_coord_target_code(&f->o->targets[t]);
      kiln_target_name(&f->o->targets[t], name);
      if (code < 0)
        return kiln_fail(KILN_EUNSUPPORTED,
                         "coordination: target %s is outside "
                         "what the protocol's map holds (sm_50 .. sm_134)",
                         name);
      rc = fn(f, u * COORD_MAP_TARGETS + (size_t)code, unit, name, arg);
    }
  }
  return rc;
}

typedef struct need_arg {
  uint8_t *need;
  size_t slots;
} need_arg;

static kiln_status mark(fill *f, size_t slot, const kiln_unit_info *u, const char *target,
                        void *arg) {
  need_arg *a = arg;
  kiln_record rec;
  kiln_status st = kiln_coord_find(f->cache, u, target, &rec);
  a->slots++;
  if (st == KILN_ENOTFOUND)
    a->need[slot] = 1;
  else if (st != KILN_OK)
    return st;
  return KILN_OK;
}

static kiln_status fill_local(void *user, uint8_t need[COORD_MAP_BYTES], size_t *n_slots,
                              const uint8_t *built) {
  need_arg a = {need, 0};
  (void)built; /* a cache either holds a target or not: no stand-ins */
  kiln_status rc = each_slot(user, mark, &a);
  *n_slots = a.slots;
  return rc;
}

static kiln_status add_fp(fill *f, size_t slot, const kiln_unit_info *u, const char *target,
                          void *arg) {
  kiln_record rec;
  kiln_status rc;
  (void)slot;
  KILN_CHECK(kiln_coord_find(f->cache, u, target, &rec));
  KILN_CHECK(kiln_fp_add(arg, u->name, target, rec.digest));
out:
  return rc;
}

static kiln_status fill_fp(void *user, uint8_t out[COORD_FP_BYTES]) {
  kiln_fp_builder *b = NULL;
  kiln_status rc;
  KILN_CHECK(kiln_fp_begin(&b));
  rc = each_slot(user, add_fp, b);
  rc = kiln_fp_end(b, rc, out);
out:
  return rc;
}

static int by_code(const void *a, const void *b) {
  return kiln_coord_target_code(a) - kiln_coord_target_code(b);
}

/* Options checked, defaults read, targets in slot order (so the fingerprint
 * does not depend on the order a caller lists them in). */
static kiln_status setup(const kiln_coord_options *o, kiln_cache *cache, coord_params *p,
                         kiln_coord_options *sorted, kiln_target **targets) {
  kiln_status rc = KILN_OK;
  if (!cache || !o || !o->targets || !o->n_targets)
    return kiln_fail(KILN_EINVAL, "kiln_coord_fill: no cache, options or targets");
  KILN_CHECK(kiln_options_check(o->version, KILN_COORD_OPTIONS_VERSION, "kiln_coord_options"));
  p->kernels = o->kernels;
  p->heartbeat_s = o->heartbeat_s;
  p->timeout_s = o->timeout_s;
  p->peer_timeout_s = o->version >= 2 ? o->peer_timeout_s : KILN_ENV;
  p->jobs = o->jobs;
  p->offline = o->offline;
  p->progress = o->progress;
  p->user = o->user;
  KILN_CHECK(kiln_coord_defaults(p));
  if (!(*targets = malloc(o->n_targets * sizeof **targets)))
    return kiln_fail(KILN_ENOMEM, "out of memory");
  memcpy(*targets, o->targets, o->n_targets * sizeof **targets);
  qsort(*targets, o->n_targets, sizeof **targets, by_code);
  *sorted = *o;
  sorted->targets = *targets;
out:
  return rc;
}

kiln_status kiln_coord_options_init(kiln_coord_options *opts, int version) {
  static const kiln_coord_options init = KILN_COORD_OPTIONS_INIT;
  size_t size = version >= 2 ? sizeof init : offsetof(kiln_coord_options, peer_timeout_s);
  return kiln_options_init(opts, &init, size, version, KILN_COORD_OPTIONS_VERSION,
                           "kiln_coord_options");
}

kiln_status kiln_coord_fill(kiln_coord_report *report, kiln_cache *cache,
                            const kiln_coord_options *o, const kiln_comm *comm) {
  kiln_coord_report dummy;
  kiln_coord_options sorted;
  kiln_target *targets = NULL;
  coord_params p;
  fill f = {cache, &sorted};
  coord_hooks h = {&f, fill_local, fill_fp};
  kiln_status rc, st;
  if (!report) report = &dummy;
  memset(report, 0, sizeof *report);
  KILN_CHECK(kiln_comm_check(comm)); /* without a working comm there is no one to tell */
  memset(&p, 0, sizeof p);
  p.cache = cache;
  p.comm = comm;
  st = setup(o, cache, &p, &sorted, &targets);
  rc = kiln_coord_run(&p, &h, st, report);
out:
  free(targets);
  return rc;
}
