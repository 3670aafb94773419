/* kiln — compile targets and the NVRTC toolchain.
 *
 * A target is sm_XY (CUBIN), sm_XYa (arch-specific CUBIN) or compute_XY (PTX).
 * Lists accept "80,90,100" (CUBIN each), "sm_90,compute_80", "90+ptx" (CUBIN
 * and PTX for 90), and "all": every CUBIN NVRTC supports from sm_80 up plus
 * PTX for the lowest and the highest of them. */
#ifndef KILN_TARGET_H
#define KILN_TARGET_H

#include <stddef.h>

#include "kiln/api.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_target_kind { KILN_TARGET_CUBIN = 0, KILN_TARGET_PTX = 1 } kiln_target_kind;

typedef struct kiln_target {
  int arch;              /* 90 for sm_90 */
  int arch_specific;     /* 1 for sm_90a */
  kiln_target_kind kind; /* CUBIN or PTX */
} kiln_target;

/* Lowest architecture kiln builds for. */
#define KILN_MIN_ARCH 80

/* Canonical name: "sm_90", "sm_90a" or "compute_90". Returns out. */
KILN_API const char *kiln_target_name(const kiln_target *t, char out[16]);
/* Parses one target (no "all"); KILN_EINVAL with the accepted forms on error. */
KILN_API kiln_status kiln_target_parse(kiln_target *out, const char *s);
/* Parses a list and checks every target against NVRTC; duplicates dropped,
 * sorted (CUBINs by arch, then PTX). KILN_EUNSUPPORTED names the supported
 * list. *out is freed with free(). */
KILN_API kiln_status kiln_targets_parse_list(kiln_target **out, size_t *n, const char *list);

/* NVRTC's version; KILN_ENONVRTC when libnvrtc cannot be loaded. */
KILN_API kiln_status kiln_nvrtc_version(int *major, int *minor);
/* The sm numbers NVRTC can build for, ascending; *out freed with free(). */
KILN_API kiln_status kiln_nvrtc_supported_archs(int **out, size_t *n);
/* "nvrtc-<major>.<minor>": the toolchain part of the cache key. */
KILN_API kiln_status kiln_toolchain_id(char out[32]);

#ifdef __cplusplus
}
#endif
#endif
