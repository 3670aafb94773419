/* Internal: compile one unit for one target with NVRTC. */
#ifndef KILN_COMPILER_COMPILE_H
#define KILN_COMPILER_COMPILE_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/kernels.h"
#include "kiln/status.h"
#include "kiln/target.h"

/* Resource usage as ptxas reports it (CUBIN only; -1 for PTX). */
typedef struct kiln_resources {
  int registers;    /* max over entry points */
  int spill_stores; /* bytes, summed over entry points */
  int spill_loads;  /* bytes, summed over entry points */
  int shared_bytes; /* static shared memory, max */
  int stack_bytes;  /* stack frame, max */
  int functions;    /* entry points / functions ptxas reported */
} kiln_resources;

typedef struct kiln_artifact {
  uint8_t *data; /* CUBIN (ELF) or PTX text (with its NUL) */
  size_t size;
  char *log; /* NVRTC's log, NUL-terminated ("" if empty) */
  size_t log_len;
  kiln_resources res;
  double ms; /* wall time of the compile */
} kiln_artifact;

/* Compiles unit for target with the given space-separated NVRTC options (the
 * -arch flag is added here). KILN_ECOMPILE with the log in *out when NVRTC
 * rejects the source (out is filled either way when the program was created;
 * free it with kiln_artifact_free). */
kiln_status kiln_compile_unit(kiln_artifact *out, const kiln_unit_info *unit,
                              const kiln_target *target, const char *options);
/* The same compile for a CUBIN target sm_XY that also returns, in *ptx, the
 * PTX NVRTC made on the way: byte for byte what a compile of compute_XY with
 * the same options returns, with its log (the log up to ptxas's lines) and
 * res -1, ms the shared compile's. One NVVM pass where two compiles would
 * each make one. *ptx is left empty when the compile fails. */
kiln_status kiln_compile_unit_pair(kiln_artifact *out, kiln_artifact *ptx,
                                   const kiln_unit_info *unit, const kiln_target *target,
                                   const char *options);
void kiln_artifact_free(kiln_artifact *a);

/* Parses ptxas -v lines in log into res (exposed for tests). */
void kiln_parse_resources(kiln_resources *res, const char *log);

#endif
