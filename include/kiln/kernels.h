/* kiln — the registry of kernel units built into libkiln.
 *
 * A unit is one hermetic CUDA C++ source file plus the kiln headers it
 * includes, with explicit extern "C" entry points. The sources are embedded in
 * libkiln so a JIT build needs nothing on disk but NVRTC. */
#ifndef KILN_KERNELS_H
#define KILN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/api.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_source_file {
  const char *path;          /* relative to kernels/, e.g. "softmax/scaled_softmax.cu" */
  const unsigned char *data; /* the file's bytes */
  size_t size;
} kiln_source_file;

typedef struct kiln_entry_info {
  const char *name;      /* extern "C" symbol, e.g. "kiln_scaled_softmax_fwd_bf16_w8" */
  const char *direction; /* "fwd" or "bwd" */
  const char *dtype;     /* "f32", "f16" or "bf16" */
  const char *variant;   /* "w8", "b16", "g", ... */
} kiln_entry_info;

typedef struct kiln_unit_info {
  const char *name;    /* e.g. "scaled_softmax" */
  const char *summary; /* one line */
  int min_arch;        /* lowest sm it supports, e.g. 80 */
  const kiln_source_file *main_file;
  size_t n_files; /* main file and every header it includes */
  const kiln_source_file *const *files;
  size_t n_entries;
  const kiln_entry_info *entries;
} kiln_unit_info;

/* Number of units, and the i-th (NULL when out of range). Static storage. */
KILN_API size_t kiln_unit_count(void);
KILN_API const kiln_unit_info *kiln_unit_at(size_t i);
/* The unit called name, or NULL. */
KILN_API const kiln_unit_info *kiln_unit_find(const char *name);

/* Every unit's name, ", "-separated, into out (truncated to cap, always
 * NUL-terminated); for messages that list the choices. Returns out. */
KILN_API const char *kiln_unit_names(char *out, size_t cap);

/* SHA-256 over the unit's files sorted by path: path \0 size \0 bytes, each.
 * Writes 64 lowercase hex digits and a NUL. */
KILN_API kiln_status kiln_unit_digest(char out[65], const kiln_unit_info *unit);

#ifdef __cplusplus
}
#endif
#endif
