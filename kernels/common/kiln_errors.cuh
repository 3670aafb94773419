/* kiln_errors.cuh — data errors found on the device (a token id outside the
 * vocabulary, a target outside it), reported to the host without a fault.
 *
 * A kernel never traps or asserts on bad data: it writes something defined
 * (zeros) where the bad element would have gone and notes the element's
 * position in the loader's error block. The unit's `err` entry point, launched
 * right after on the same stream with one thread, moves the smallest noted
 * position and the offending value into the block's report (the first one
 * since the host last looked) and clears the note for the next launch.
 * kiln_ops_check() (loader/ops_common.c) reads the report. Stream order makes
 * this exact: the values array is still alive when `err` reads it.
 *
 * The layout is shared with loader/ops_common.c (kiln_op_error_host):
 * eight 64-bit words, 64 bytes.
 */
#ifndef KILN_ERRORS_CUH
#define KILN_ERRORS_CUH

#include "common/kiln_types.cuh"

#define KILN_OP_ERROR_NONE 0xffffffffffffffffULL

/* What the report is about (the message the host prints). */
enum { KILN_OP_ERROR_TOKEN_ID = 1, KILN_OP_ERROR_TARGET = 2 };

struct kiln_op_error {
  unsigned long long note;     /* smallest bad position of the running launch; NONE: none */
  unsigned long long reported; /* 0: nothing since the last check; 1: the fields below */
  kiln_i64 pos, value, lo, hi; /* the first bad element: its position, value, valid [lo, hi) */
  kiln_i64 what;               /* KILN_OP_ERROR_* */
  kiln_i64 unused;
};

/* Notes a bad element at pos (any thread, any block). */
__device__ __forceinline__ void kiln_op_error_note(kiln_op_error *e, kiln_i64 pos) {
  atomicMin(&e->note, (unsigned long long)pos);
}

/* The body of an `err` entry point (one thread, after the launch that noted):
 * the first report since the last check wins. values holds n elements: a
 * note at or past n was left by a launch on another stream (the block is one
 * per loader) and is not this launch's to read; it is left for that launch's
 * own `err`. */
__device__ __forceinline__ void kiln_op_error_record(kiln_op_error *e, const kiln_i64 *values,
                                                     kiln_i64 n, kiln_i64 lo, kiln_i64 hi,
                                                     kiln_i64 what) {
  const unsigned long long p = e->note;
  if (p == KILN_OP_ERROR_NONE || p >= (unsigned long long)n) return;
  if (!e->reported) {
    e->pos = (kiln_i64)p;
    e->value = values[p];
    e->lo = lo;
    e->hi = hi;
    e->what = what;
    e->reported = 1;
  }
  e->note = KILN_OP_ERROR_NONE;
}

#endif /* KILN_ERRORS_CUH */
