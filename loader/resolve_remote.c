/* Resolution step 3: the remote cache, asked for what the local layers lack,
 * in the same order as they are searched (exact CUBIN, then CUBIN of the same
 * major with a lower minor, then PTX), before anything is built.
 *
 * A remote is read by key and a key names one toolchain, so it is asked for
 * the keys of every toolchain kiln knows of here (remote_toolchains): a
 * remote filled by another NVRTC is used wherever its artifacts load, as a
 * local layer's are (docs/loader.md, "Artifacts of another NVRTC"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/logging.h"
#include "kiln/build.h"
#include "kiln/remote.h"
#include "kiln/target.h"
#include "loader/loader_internal.h"
#include "loader/select.h" /* kiln_toolchain_ptx_isa */

/* Virtual architectures to ask PTX for when no NVRTC here says which exist. */
static const int known_archs[] = {75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121};

/* The targets a device of compute capability cc can load, best first; exact
 * first of all. Returns how many (at most cap). */
static size_t candidate_targets(int cc, int exact_only, char (*out)[16], size_t cap) {
  int *archs = NULL;
  size_t n_archs = 0, n = 0;
  const int *list = known_archs;
  size_t n_list = sizeof known_archs / sizeof known_archs[0];
  if (kiln_nvrtc_supported_archs(&archs, &n_archs) == KILN_OK && n_archs) {
    list = archs;
    n_list = n_archs;
  }
  if (exact_only) {
    snprintf(out[n++], 16, "sm_%d", cc);
    goto out;
  }
  for (int minor = cc % 10 - 1; minor >= 0 && n < cap; minor--)
    snprintf(out[n++], 16, "sm_%d", cc / 10 * 10 + minor);
  for (size_t i = n_list; i-- > 0 && n < cap;)
    if (list[i] <= cc) snprintf(out[n++], 16, "compute_%d", list[i]);
out:
  free(archs);
  return n;
}

/* At most this many toolchains are asked for: each multiplies the requests
 * of a round. */
#define MAX_TOOLCHAINS 4

/* "nvrtc-12.9" -> 12090; 0 for anything else. */
static int toolchain_version(const char *id) {
  int ma = 0, mi = 0;
  char end;
  if (sscanf(id, "nvrtc-%d.%d%c", &ma, &mi, &end) != 2 || ma < 1 || ma > 99 || mi < 0 || mi > 99)
    return 0;
  return ma * 1000 + mi * 10;
}

/* Appends id to list[0..*n) unless it is there, is no NVRTC toolchain, or is
 * of a newer CUDA major than the driver (loader/select.c would pass over
 * everything it built). */
static void add_toolchain(char (*list)[32], size_t *n, size_t cap, const char *id, int driver) {
  int v = toolchain_version(id);
  if (!v || *n == cap || (driver && v / 1000 > driver / 1000)) return;
  for (size_t i = 0; i < *n; i++)
    if (strcmp(list[i], id) == 0) return;
  snprintf(list[(*n)++], 32, "%s", id);
}

static int newer_first(const void *a, const void *b) {
  return toolchain_version(b) - toolchain_version(a);
}

/* The toolchains whose keys the remote is asked for, best first: this
 * NVRTC's (none here: the toolkit's kiln was built with), the toolkit's kiln
 * was built with, then those that built the local layers' records of this
 * loader's units, newest first (a remote is usually filled by the builder
 * that filled the image's cache) — only those whose output the driver loads.
 * A remote filled by an NVRTC named by none of these is not found. */
static size_t remote_toolchains(kiln_loader *l, char (*out)[32]) {
  char own[32], seen[16][32];
  size_t n = 0, n_seen = 0;
  int driver = l->info.driver_version;
  if (kiln_toolchain_id(own) != KILN_OK) snprintf(own, sizeof own, "%s", KILN_TOOLKIT_TOOLCHAIN);
  add_toolchain(out, &n, MAX_TOOLCHAINS, own, driver);
  add_toolchain(out, &n, MAX_TOOLCHAINS, KILN_TOOLKIT_TOOLCHAIN, driver);
  for (size_t u = 0; u < l->n_units; u++) {
    kiln_record *recs = NULL;
    size_t m = 0;
    if (kiln_cache_find_unit(&recs, &m, l->cache, l->units[u].unit, kiln_build_compile_options()) !=
        KILN_OK)
      continue; /* the lookup of step 2 said why, if it matters */
    for (size_t i = 0; i < m; i++)
      add_toolchain(seen, &n_seen, sizeof seen / sizeof *seen, recs[i].toolchain, driver);
    free(recs);
  }
  qsort(seen, n_seen, sizeof *seen, newer_first);
  for (size_t i = 0; i < n_seen; i++)
    add_toolchain(out, &n, MAX_TOOLCHAINS, seen[i], driver);
  return n;
}

/* One round: every (unit, target, toolchain) asked at once, leaving out PTX
 * whose ISA the driver does not JIT. */
static void fetch_round(kiln_loader *l, const size_t *units, size_t n, int exact_only,
                        const char (*toolchains)[32], size_t n_tc, char *note, size_t note_cap) {
  char(*targets)[16] = calloc(32, sizeof *targets);
  kiln_remote_item *items = NULL;
  char(*keys)[65] = NULL, asked[160] = "";
  size_t n_targets, m = 0, got = 0, errors = 0, len = 0;
  if (!targets) return;
  n_targets = candidate_targets(l->cc, exact_only, targets, 32);
  items = calloc(n * n_targets * n_tc + 1, sizeof *items);
  keys = calloc(n * n_targets * n_tc + 1, sizeof *keys);
  if (!items || !keys) goto out;
  for (size_t c = 0; c < n_tc && len < sizeof asked; c++)
    len += (size_t)snprintf(asked + len, sizeof asked - len, "%s%s", c ? ", " : "", toolchains[c]);
  for (size_t i = 0; i < n; i++) {
    const kiln_unit_info *unit = l->units[units[i]].unit;
    for (size_t t = 0; t < n_targets; t++)
      for (size_t c = 0; c < n_tc; c++) {
        if (strncmp(targets[t], "compute_", 8) == 0 &&
            kiln_toolchain_ptx_isa(toolchains[c]) > l->info.ptx_isa)
          continue;
        if (kiln_cache_key(keys[m], unit, targets[t], kiln_build_compile_options(),
                           toolchains[c]) != KILN_OK)
          continue;
        items[m].key = keys[m];
        items[m].unit = unit->name;
        items[m].target = targets[t];
        m++;
      }
  }
  if (!m) goto out;
  if (kiln_remote_fetch(l->cache, items, m) != KILN_OK) {
    snprintf(note, note_cap, "remote cache %s: %s", kiln_cache_remote_url(l->cache),
             kiln_last_error());
    goto out;
  }
  for (size_t i = 0; i < m; i++) {
    if (items[i].status == KILN_OK)
      got++;
    else if (items[i].status != KILN_ENOTFOUND && !errors++)
      snprintf(note, note_cap, "remote cache %s: %s %s: %s", kiln_cache_remote_url(l->cache),
               items[i].unit, items[i].target, items[i].error);
  }
  if (!errors && !got && !*note)
    snprintf(note, note_cap, "remote cache %s does not have it either (asked for the builds of %s)",
             kiln_cache_remote_url(l->cache), asked);
  kiln_log(KILN_LOG_INFO,
           "remote cache: %zu of %zu artifacts fetched for %zu unit%s (sm_%d, %s; built by %s)",
           got, m, n, n == 1 ? "" : "s", l->cc, exact_only ? "exact" : "compatible and PTX", asked);
out:
  free(targets);
  free(items);
  free(keys);
}

kiln_status kiln_resolve_fetch_remote(kiln_loader *l, const size_t *units, size_t n, char *note,
                                      size_t note_cap) {
  char toolchains[MAX_TOOLCHAINS][32];
  size_t *left = NULL, n_left = n, n_tc;
  kiln_status rc = KILN_OK;
  note[0] = '\0';
  if (!n || !kiln_cache_remote_url(l->cache)) return KILN_OK;
  n_tc = remote_toolchains(l, toolchains);
  if (!n_tc) {
    snprintf(note, note_cap,
             "the remote cache was not asked: no NVRTC known here builds for this driver (CUDA "
             "%d.%d)",
             l->info.driver_version / 1000, l->info.driver_version % 1000 / 10);
    return KILN_OK;
  }
  left = malloc(n * sizeof *left);
  if (!left) return kiln_fail(KILN_ENOMEM, "out of memory");
  memcpy(left, units, n * sizeof *left);
  for (int exact_only = 1; exact_only >= 0 && n_left; exact_only--) {
    size_t kept = 0;
    fetch_round(l, left, n_left, exact_only, (const char(*)[32])toolchains, n_tc, note, note_cap);
    for (size_t i = 0; i < n_left; i++) {
      rc = kiln_resolve_cached_locked(l, left[i]);
      if (rc == KILN_ENOTFOUND)
        left[kept++] = left[i];
      else if (rc != KILN_OK)
        goto out;
    }
    n_left = kept;
    rc = KILN_OK;
  }
out:
  free(left);
  return rc;
}
