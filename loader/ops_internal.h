/* Internal: what every typed launcher (loader/ops_<family>.c) shares:
 * argument checks that fail with KILN_EINVAL naming the op and the argument,
 * the launch of an entry point by name, and the device error block
 * (kernels/common/kiln_errors.cuh). Each check returns KILN_OK or the error;
 * use them with KILN_CHECK. */
#ifndef KILN_LOADER_OPS_INTERNAL_H
#define KILN_LOADER_OPS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/ops.h"
#include "loader/loader_internal.h"

/* loader non-NULL, dt one of KILN_F32/F16/BF16. */
kiln_status kiln_op_check_common(const char *op, kiln_loader *l, kiln_dtype dt);
/* wdt is KILN_F32 or dt (mixed-precision weights). */
kiln_status kiln_op_check_wdtype(const char *op, kiln_dtype dt, kiln_dtype wdt);
kiln_status kiln_op_need_ptr(const char *op, const void *p, const char *name);
/* Several at once, in order: KILN_OP_NEED_PTRS(op, {"y", y}, {"x", x}). */
typedef struct kiln_op_ptr {
  const char *name;
  const void *p;
} kiln_op_ptr;
kiln_status kiln_op_need_ptrs(const char *op, const kiln_op_ptr *ptrs, size_t n);
#define KILN_OP_NEED_PTRS(op, ...)                                                                 \
  kiln_op_need_ptrs(op, (const kiln_op_ptr[]){__VA_ARGS__},                                        \
                    sizeof((const kiln_op_ptr[]){__VA_ARGS__}) / sizeof(kiln_op_ptr))
/* A row width (cols, hidden, sk, d, a vocabulary): >= 1. */
kiln_status kiln_op_need_positive(const char *op, long long v, const char *name);
/* A batch count (rows, tokens, b, heads, sq, s, h): >= 0. A launcher whose
 * batch is empty checks its other arguments as always, then returns KILN_OK
 * without reading its tensor pointers (NULL is fine) or launching anything
 * (include/kiln/ops.h, "Empty batches"). */
kiln_status kiln_op_need_count(const char *op, long long v, const char *name);
kiln_status kiln_op_need_finite(const char *op, float v, const char *name);
/* *out = a * b * c, or an error naming the op when it overflows 64 bits. */
kiln_status kiln_op_product(const char *op, long long a, long long b, long long c, long long *out);

/* Bytes of one element of dt (4 or 2). */
unsigned kiln_dtype_size(kiln_dtype dt);

/* buf = parts joined by '_' (kiln_<unit>_<dir>_<dt>_<variant>): an entry
 * point's name, made on every launch, in a few nanoseconds where snprintf
 * took a third of a launcher's host time (docs/performance.md, "The
 * launchers' own time halved"). A name longer than cap - 1 bytes is
 * cut there (no entry point has it: kiln_op_launch then says it is not
 * registered). Returns buf. Use KILN_OP_ENTRY(buf, "kiln", unit, ...) with
 * an array buf. */
const char *kiln_op_entry_name(char *buf, size_t cap, const char *const *parts, size_t n);
#define KILN_OP_ENTRY(buf, ...)                                                                    \
  kiln_op_entry_name(buf, sizeof buf, (const char *const[]){__VA_ARGS__},                          \
                     sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

/* Launches the entry point called entry (kiln_<unit>_<dir>_<dt>_<v>) with
 * grid x block threads, no dynamic shared memory, on stream, resolving its
 * unit first if needed. Errors name op, the entry and the launch shape. */
kiln_status kiln_op_launch(kiln_loader *l, const char *op, const char *entry,
                           unsigned long long grid, unsigned block, void **args,
                           struct CUstream_st *stream);

/* The loader's device error block (64 bytes, kiln_errors.cuh), allocated and
 * initialised on first use; for kernels that note data errors. */
kiln_status kiln_op_error_block(kiln_loader *l, CUdeviceptr *out);

#endif
