/* Coverage: which artifact the loader would load for each (unit, target),
 * by the loader's own selection rules (loader/select.c), blobs verified.
 * Read-only, as every probe: blobs are hashed in place (no quarantine, no
 * last-used update, which kiln_cache_get would do). */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/entries.h" /* kiln_image_missing_entry */
#include "cache/store.h"
#include "common/error.h"
#include "kiln/build.h"
#include "kiln/probe.h"
#include "loader/select.h"

/* Newer than any driver kiln knows: PTX of every ISA is JIT-able. */
#define ANY_DRIVER 99990

/* Notes a candidate whose blob failed verification, with kiln_last_error()
 * (which names the file) as why. 0, or -1 when out of memory. */
static int note_bad(kiln_coverage *c, size_t item, const kiln_record *rec) {
  kiln_coverage_bad *b = realloc(c->bad, (c->n_bad + 1) * sizeof *b);
  if (!b) return -1;
  c->bad = b;
  b += c->n_bad++;
  b->item = item;
  snprintf(b->artifact, sizeof b->artifact, "%s", rec->target);
  b->layer = rec->layer;
  snprintf(b->why, sizeof b->why, "%s", kiln_last_error());
  return 0;
}

/* The record's blob is there and hashes to its digest, and, for PTX, the ISA
 * its text names is one the driver JITs: what the loader checks before the
 * driver sees it (loader/module.c). A blob that fails verification leaves
 * its reason in kiln_last_error() and *bad set. */
static int blob_ok(kiln_cache *cache, const kiln_record *rec, int driver, int *bad) {
  const char *dir = rec->layer == 0                         ? cache->primary.dir
                    : (size_t)rec->layer <= cache->n_layers ? cache->layers[rec->layer - 1].dir
                                                            : NULL;
  uint8_t *bytes = NULL;
  size_t len = 0;
  int ok, ptx = strcmp(rec->kind, "ptx") == 0;
  *bad = 0;
  if (!dir) return 0;
  ok = kiln_blob_read(dir, rec->digest, rec->size, &bytes, &len) == KILN_OK;
  *bad = !ok;
  if (ok) { /* a valid blob of another unit (cache/entries.h) is as bad as a broken one */
    const kiln_unit_info *unit = kiln_unit_find(rec->unit);
    const char *missing = unit ? kiln_image_missing_entry(bytes, len, rec->kind, unit) : NULL;
    if (missing) {
      kiln_fail(KILN_ECORRUPT, "record %.12s: blob %.12s has no entry point %s: not %s's image",
                rec->key, rec->digest, missing, rec->unit);
      ok = 0, *bad = 1;
    }
  }
  if (ok && ptx) ok = kiln_ptx_text_isa((const char *)bytes, len) <= kiln_driver_ptx_isa(driver);
  free(bytes);
  return ok;
}

static void take(kiln_coverage_item *it, const kiln_record *rec, kiln_load_source src) {
  it->source = src;
  snprintf(it->artifact, sizeof it->artifact, "%s", rec->target);
  snprintf(it->digest, sizeof it->digest, "%s", rec->digest);
  it->layer = rec->layer;
}

/* The first candidate, in the loader's order, whose blob verifies. sm_XYa and
 * compute_XY targets are covered only by themselves, under the same rules
 * (the driver's PTX ISA, the toolkit's CUDA major). */
static kiln_status cover(kiln_cache *cache, kiln_coverage *c, const kiln_target *t,
                         const kiln_record *recs, size_t n, int driver, const char *toolchain,
                         kiln_candidate *cands) {
  kiln_coverage_item *it = &c->items[c->n_items - 1];
  int only_itself = t->kind == KILN_TARGET_PTX || t->arch_specific;
  size_t m = kiln_select(recs, n, t->arch, driver, toolchain, cands, NULL, 0);
  for (size_t i = 0; i < m; i++) {
    int bad = 0;
    if (only_itself && strcmp(cands[i].rec->target, it->target) != 0) continue;
    if (blob_ok(cache, cands[i].rec, driver, &bad)) {
      take(it, cands[i].rec, cands[i].source);
      return KILN_OK;
    }
    if (bad && note_bad(c, c->n_items - 1, cands[i].rec) != 0)
      return kiln_fail(KILN_ENOMEM, "out of memory");
  }
  return KILN_OK;
}

kiln_status kiln_coverage_check(kiln_coverage **out, kiln_cache *cache, const kiln_target *targets,
                                size_t n_targets, const char *glob, int driver_version) {
  kiln_coverage *c = NULL;
  kiln_record *recs = NULL;
  kiln_candidate *cands = NULL;
  char toolchain[32] = "";
  size_t n_units = 0;
  kiln_status rc = KILN_OK;
  if (!out || !cache || !targets || !n_targets)
    return kiln_fail(KILN_EINVAL, "kiln_coverage_check: no cache or targets");
  *out = NULL;
  for (size_t u = 0; u < kiln_unit_count(); u++)
    n_units += !glob || fnmatch(glob, kiln_unit_at(u)->name, 0) == 0;
  if (!n_units) {
    char names[1024];
    return kiln_fail(KILN_ENOTFOUND, "--kernels '%s' matches no unit; units are: %s", glob,
                     kiln_unit_names(names, sizeof names));
  }
  for (size_t i = 0; i < cache->n_skipped; i++) /* the loader would skip it: never vouch for it */
    if (cache->skipped[i].untrusted)
      return kiln_fail(KILN_EPERM, "read-only cache layer %s is not trusted: %s",
                       cache->skipped[i].dir, cache->skipped[i].why);
  if (kiln_toolchain_id(toolchain) != KILN_OK) toolchain[0] = '\0'; /* no NVRTC: fine */
  if (!(c = calloc(1, sizeof *c)) || !(c->items = calloc(n_units * n_targets, sizeof *c->items))) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    const kiln_unit_info *unit = kiln_unit_at(u);
    size_t n = 0;
    if (glob && fnmatch(glob, unit->name, 0) != 0) continue;
    free(recs);
    recs = NULL;
    KILN_CHECK(kiln_cache_find_unit(&recs, &n, cache, unit, kiln_build_compile_options()));
    free(cands);
    if (!(cands = calloc(n ? n : 1, sizeof *cands))) {
      rc = kiln_fail(KILN_ENOMEM, "out of memory");
      goto out;
    }
    for (size_t t = 0; t < n_targets; t++) {
      kiln_coverage_item *it = &c->items[c->n_items++];
      it->unit = unit;
      kiln_target_name(&targets[t], it->target);
      KILN_CHECK(cover(cache, c, &targets[t], recs, n,
                       driver_version > 0 ? driver_version : ANY_DRIVER, toolchain, cands));
      c->missing += it->source == KILN_LOAD_NONE;
    }
  }
  *out = c;
  c = NULL;
out:
  free(recs);
  free(cands);
  kiln_coverage_free(c);
  return rc;
}

void kiln_coverage_free(kiln_coverage *c) {
  if (!c) return;
  free(c->bad);
  free(c->items);
  free(c);
}

KILN_API kiln_status kiln_probe_can_build(int cc, int driver_version) {
  int *archs = NULL, ma = 0, mi = 0, fits;
  size_t n_archs = 0;
  char why[600];
  if (kiln_nvrtc_supported_archs(&archs, &n_archs) == KILN_OK) kiln_nvrtc_version(&ma, &mi);
  fits = kiln_build_fits(cc, driver_version, ma, mi, archs, n_archs, why, sizeof why);
  free(archs);
  return fits ? KILN_OK : kiln_fail(KILN_EUNSUPPORTED, "%s", why);
}
