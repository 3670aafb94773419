/* kiln — probes: what this machine and its caches can run (read-only).
 *
 * Coverage answers the question a container build must answer before it
 * ships: for each unit and each target GPU arch, is there an artifact the
 * loader would load (exact CUBIN, a compatible CUBIN of the same major, or PTX
 * the driver can JIT)? `kiln check` is its command. */
#ifndef KILN_PROBE_H
#define KILN_PROBE_H

#include <stddef.h>

#include "kiln/api.h"
#include "kiln/cache.h"
#include "kiln/loader.h"
#include "kiln/status.h"
#include "kiln/target.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_coverage_item {
  const kiln_unit_info *unit;
  char target[16];         /* asked for: "sm_90", "sm_90a", "compute_90" */
  kiln_load_source source; /* EXACT, COMPATIBLE or PTX; NONE when nothing loads */
  char artifact[16];       /* the target of what would load ("sm_80", "compute_90") */
  char digest[65];
  int layer; /* 0 primary, 1.. read-only layers */
} kiln_coverage_item;

typedef struct kiln_coverage {
  size_t n_items;
  kiln_coverage_item *items; /* units (registry order) x targets (as given) */
  size_t missing;            /* items with source NONE */
} kiln_coverage;

/* For every unit matching kernels_glob (NULL: all) and every target: the
 * artifact the loader would pick on a GPU of that arch, by the loader's own
 * rules, with each candidate's blob hashed in place (read-only: nothing is
 * quarantined or touched). A CUBIN target (sm_XY) is
 * covered by sm_XY, a lower sm_XZ of the same major, or PTX compute_VW <= XY;
 * sm_XYa and compute_XY only by themselves. driver_version (e.g. 12080)
 * limits PTX to what that driver can JIT; 0: any. *out is freed with
 * kiln_coverage_free. KILN_ENOTFOUND when the glob matches no unit. */
KILN_API kiln_status kiln_coverage_check(kiln_coverage **out, kiln_cache *cache,
                                         const kiln_target *targets, size_t n_targets,
                                         const char *kernels_glob, int driver_version);
KILN_API void kiln_coverage_free(kiln_coverage *c);

/* KILN_OFFLINE as the loader reads it: *out = 1 when it may not build.
 * KILN_EINVAL (and *out = 0) for a malformed value. */
KILN_API kiln_status kiln_probe_offline(int *out);

/* The version of the libnccl kiln would load (KILN_NCCL_LIBRARY, else
 * libnccl.so.2), as NCCL_VERSION_CODE: 22803 for 2.28.3. KILN_ENOTFOUND with
 * the reason when there is none. */
KILN_API kiln_status kiln_nccl_version(int *out);

#ifdef __cplusplus
}
#endif
#endif
