/* Resolution step 3: the remote cache, asked for what the local layers lack,
 * in the same order as they are searched (exact CUBIN, then CUBIN of the same
 * major with a lower minor, then PTX), before anything is built. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/logging.h"
#include "kiln/build.h"
#include "kiln/remote.h"
#include "kiln/target.h"
#include "loader/loader_internal.h"

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

/* One round: every (unit, target) pair asked at once. */
static void fetch_round(kiln_loader *l, const size_t *units, size_t n, int exact_only,
                        const char *toolchain, char *note, size_t note_cap) {
  char(*targets)[16] = calloc(32, sizeof *targets);
  kiln_remote_item *items = NULL;
  char(*keys)[65] = NULL;
  size_t n_targets, m = 0, got = 0, errors = 0;
  if (!targets) return;
  n_targets = candidate_targets(l->cc, exact_only, targets, 32);
  items = calloc(n * n_targets + 1, sizeof *items);
  keys = calloc(n * n_targets + 1, sizeof *keys);
  if (!items || !keys) goto out;
  for (size_t i = 0; i < n; i++) {
    const kiln_unit_info *unit = l->units[units[i]].unit;
    for (size_t t = 0; t < n_targets; t++) {
      if (kiln_cache_key(keys[m], unit, targets[t], kiln_build_compile_options(), toolchain) !=
          KILN_OK)
        continue;
      items[m].key = keys[m];
      items[m].unit = unit->name;
      items[m].target = targets[t];
      m++;
    }
  }
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
    snprintf(note, note_cap, "remote cache %s does not have it either",
             kiln_cache_remote_url(l->cache));
  kiln_log(KILN_LOG_INFO, "remote cache: %zu of %zu artifacts fetched for %zu unit%s (sm_%d, %s)",
           got, m, n, n == 1 ? "" : "s", l->cc, exact_only ? "exact" : "compatible and PTX");
out:
  free(targets);
  free(items);
  free(keys);
}

kiln_status kiln_resolve_fetch_remote(kiln_loader *l, const size_t *units, size_t n, char *note,
                                      size_t note_cap) {
  char toolchain[32];
  size_t *left = NULL, n_left = n;
  kiln_status rc = KILN_OK;
  note[0] = '\0';
  if (!n || !kiln_cache_remote_url(l->cache)) return KILN_OK;
  left = malloc(n * sizeof *left);
  if (!left) return kiln_fail(KILN_ENOMEM, "out of memory");
  memcpy(left, units, n * sizeof *left);
  /* The key names the NVRTC that built it: this one, or else the one of the
   * toolkit kiln was built with (a machine without NVRTC still fetches). */
  if (kiln_toolchain_id(toolchain) != KILN_OK)
    snprintf(toolchain, sizeof toolchain, "%s", KILN_TOOLKIT_TOOLCHAIN);
  for (int exact_only = 1; exact_only >= 0 && n_left; exact_only--) {
    size_t kept = 0;
    fetch_round(l, left, n_left, exact_only, toolchain, note, note_cap);
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
