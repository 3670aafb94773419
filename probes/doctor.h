/* Internal: kiln doctor's checks (probes/doctor.c, probes/doctor_env.c). */
#ifndef KILN_PROBES_DOCTOR_H
#define KILN_PROBES_DOCTOR_H

#include "kiln/probe.h"

/* Appends a check; summary is printf-style, fix may be NULL. */
void doctor_add(kiln_doctor_report *r, const char *id, kiln_doctor_status st, const char *fix,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* `env`: KILN_* variables kiln does not know (with the nearest known name). */
void doctor_env_names(kiln_doctor_report *r);
/* `timeouts`: kiln's own settings, parsed as kiln parses them, and the
 * job-killing watchdogs of PyTorch/NCCL set in the environment. */
void doctor_timeouts(kiln_doctor_report *r);

#endif
