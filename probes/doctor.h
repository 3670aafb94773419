/* Internal: kiln doctor's checks (probes/doctor.c, probes/doctor_env.c). */
#ifndef KILN_PROBES_DOCTOR_H
#define KILN_PROBES_DOCTOR_H

#include "kiln/probe.h"

/* Appends a check; summary is printf-style, fix may be NULL. */
void doctor_add(kiln_doctor_report *r, const char *id, kiln_doctor_status st, const char *fix,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* `cache_fs` (probes/doctor_fs.c), one per directory: the file system of the
 * primary (moved_from: the default it replaced, or "") and of each read-only
 * layer (colon-separated), and whether it is shared between hosts. */
void doctor_cache_fs(kiln_doctor_report *r, const char *primary, const char *moved_from,
                     const char *layers);
/* `env`: KILN_* variables kiln does not know (with the nearest known name). */
void doctor_env_names(kiln_doctor_report *r);
/* `timeouts`: kiln's own settings, parsed as kiln parses them, and the
 * job-killing watchdogs of PyTorch/NCCL set in the environment. */
void doctor_timeouts(kiln_doctor_report *r);

#endif
