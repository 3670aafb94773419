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

/* A candidate an index holds whose blob failed verification (and so does
 * not count): what a user needs to see a "missing" pair is a bad file. */
typedef struct kiln_coverage_bad {
  size_t item;       /* the items[] entry it was a candidate for */
  char artifact[16]; /* its target ("sm_90") */
  int layer;         /* 0 primary, 1.. read-only layers */
  char why[1024];    /* the failure, naming the file ("<path> is a FIFO, not a regular file") */
} kiln_coverage_bad;

typedef struct kiln_coverage {
  size_t n_items;
  kiln_coverage_item *items; /* units (registry order) x targets (as given) */
  size_t missing;            /* items with source NONE */
  /* appended (the struct is only ever allocated by kiln_coverage_check) */
  size_t n_bad;
  kiln_coverage_bad *bad; /* candidates whose blob failed verification, in items order */
} kiln_coverage;

/* For every unit matching kernels_glob (NULL: all) and every target: the
 * artifact the loader would pick on a GPU of that arch, by the loader's own
 * rules, with each candidate's blob hashed in place (read-only: nothing is
 * quarantined or touched). A CUBIN target (sm_XY) is
 * covered by sm_XY, a lower sm_XZ of the same major, or PTX compute_VW <= XY;
 * sm_XYa and compute_XY only by themselves. driver_version (e.g. 12080)
 * limits PTX to what that driver can JIT; 0: any. A candidate whose blob
 * fails verification does not count and is listed in bad[] with the reason.
 * *out is freed with kiln_coverage_free. KILN_ENOTFOUND when the glob
 * matches no unit. */
KILN_API kiln_status kiln_coverage_check(kiln_coverage **out, kiln_cache *cache,
                                         const kiln_target *targets, size_t n_targets,
                                         const char *kernels_glob, int driver_version);
KILN_API void kiln_coverage_free(kiln_coverage *c);

/* Whether building here would help a GPU of compute capability cc (e.g. 90)
 * under a driver of driver_version (e.g. 12080; 0: any), by the loader's own
 * rule (docs/loader.md): KILN_OK when this NVRTC can build sm_<cc> and that
 * driver can load what it builds; else KILN_EUNSUPPORTED with the reason (no
 * NVRTC; an NVRTC of a newer CUDA major than the driver; an arch it cannot
 * build). KILN_OFFLINE is not considered (kiln_probe_offline). */
KILN_API kiln_status kiln_probe_can_build(int cc, int driver_version);

/* KILN_OFFLINE as the loader reads it: *out = 1 when it may not build.
 * KILN_EINVAL (and *out = 0) for a malformed value. */
KILN_API kiln_status kiln_probe_offline(int *out);

/* The GPU libraries kiln loads with dlopen, and where each came from
 * (docs/install.md: KILN_*_LIBRARY, NVIDIA's Python wheels, CUDA_HOME,
 * /usr/local/cuda, the dynamic loader's search). */
typedef enum kiln_library {
  KILN_LIBRARY_CUDA = 0,  /* libcuda: the driver */
  KILN_LIBRARY_NVRTC = 1, /* libnvrtc */
  KILN_LIBRARY_NCCL = 2,  /* libnccl */
} kiln_library;

typedef struct kiln_library_info {
  char path[512];     /* the file loaded, as the dynamic loader resolved it */
  char found_by[600]; /* "KILN_NVRTC_LIBRARY", "NVIDIA's wheels under /venv (VIRTUAL_ENV)",
                         "CUDA_HOME (/opt/cuda)", "the CUDA toolkit (/usr/local/cuda)",
                         "the dynamic loader's search" */
  char version[32];   /* NVRTC "13.0", NCCL "2.28.3", the driver's CUDA version "13.0" */
} kiln_library_info;

/* Loads the library if this process has not yet, and says which file it is.
 * Fails as its first use would: KILN_ENONVRTC / KILN_EDRIVER / KILN_ENOTFOUND
 * when there is none; KILN_EINVAL when the file KILN_*_LIBRARY names (or the
 * one found) will not load or is not that library; KILN_EUNSUPPORTED for an
 * NVRTC older than kiln supports; KILN_EDRIVER when cuInit fails. */
KILN_API kiln_status kiln_library_get_info(kiln_library_info *out, kiln_library which);

/* kiln doctor: health checks of this machine, its settings and its caches.
 * Read-only: the caches are opened without creating anything and nothing in
 * them is written (one exception: the `remote` check makes one request to a
 * configured remote and, with uploads on, PUTs and DELETEs a test object
 * there: docs/remote-cache.md). */
typedef enum kiln_doctor_status {
  KILN_DOCTOR_PASS = 0,
  KILN_DOCTOR_WARN = 1,
  KILN_DOCTOR_FAIL = 2,
  KILN_DOCTOR_SKIP = 3, /* does not apply here; does not count for the exit status */
} kiln_doctor_status;

typedef struct kiln_doctor_check {
  char id[32]; /* "driver", "nvrtc", "cache_dir", ... (docs/operations.md) */
  kiln_doctor_status status;
  char summary[1024]; /* one line */
  char fix[512];      /* one line naming the command or variable; "" for PASS/SKIP */
} kiln_doctor_check;

typedef struct kiln_doctor_report {
  size_t n_checks;
  kiln_doctor_check *checks;
  size_t counts[4]; /* by kiln_doctor_status */
  int exit_status;  /* 0 all pass, 1 warnings, 2 failures */
} kiln_doctor_report;

typedef struct kiln_doctor_options {
  int version;             /* KILN_DOCTOR_OPTIONS_VERSION */
  const char *const *dirs; /* caches: the first primary, the others read-only layers
                              (NULL: KILN_CACHE_DIR... and KILN_CACHE_PATH) */
  size_t n_dirs;
} kiln_doctor_options;

#define KILN_DOCTOR_OPTIONS_VERSION 1
#define KILN_DOCTOR_OPTIONS_INIT                                                                   \
  { .version = KILN_DOCTOR_OPTIONS_VERSION, .dirs = NULL, .n_dirs = 0 }

/* Fills opts as KILN_DOCTOR_OPTIONS_INIT does, for the given version.
 * KILN_EINVAL, naming it, for a version this libkiln does not know. */
KILN_API kiln_status kiln_doctor_options_init(kiln_doctor_options *opts, int version);

/* Runs every check, in a fixed order. *out is freed with
 * kiln_doctor_report_free. KILN_EINVAL for options of an unknown version,
 * else KILN_ENOMEM only: what a check finds is in the report, never an error. */
KILN_API kiln_status kiln_doctor_run(kiln_doctor_report **out, const kiln_doctor_options *opts);
KILN_API void kiln_doctor_report_free(kiln_doctor_report *r);
/* "PASS", "WARN", "FAIL", "SKIP" */
KILN_API const char *kiln_doctor_status_str(kiln_doctor_status s);

#ifdef __cplusplus
}
#endif
#endif
