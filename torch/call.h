/* One call of a boxed kernel (shim.h): its tensor and str arguments, the
 * outputs it allocates through torch, and its one error.
 *
 * Every kernel is an op body (kt_op) run by kt_run, which takes the same steps
 * for all: kt_begin adopts every tensor and str argument (the kernel owns them
 * from the first instruction), the body's checks and launch record at most one
 * error (kt_fail, kt_status), and kt_end hands the outputs to torch or, on an
 * error, frees everything and only then raises it through torch's check
 * function: a C++ exception unwinds through this file's frames (built with
 * -fexceptions) with nothing left to free or unlock. The error's status stays
 * in a thread-local slot for kiln.torch to map to its KilnError subclass
 * (kiln_torch_take_error). An op file holds only the bodies and a table of
 * KT_KERNEL entries (ops.h). */
#ifndef KILN_TORCH_CALL_H
#define KILN_TORCH_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/loader.h"
#include "kiln/ops.h"
#include "kiln/status.h"
#include "torch/shim.h"

#define KT_MAX_ARGS 8
#define KT_MAX_OUT 3
#define KT_MAX_TEMP 8
#define KT_MAX_DIM 16 /* kiln's launchers take at most this many dimensions */

typedef struct kt_arg {
  kt_tensor_handle h; /* NULL: an absent optional tensor */
  int32_t dtype, devtype, devidx;
  int64_t dim;
  int64_t *sizes; /* torch's, valid while h lives */
  void *data;
} kt_arg;

typedef struct kt_call {
  const char *op; /* "scaled_softmax": messages say kiln.torch.<op> */
  kt_ivalue *stack;
  kt_arg arg[KT_MAX_ARGS]; /* the tensor arguments, by stack slot */
  kt_tensor_handle temp[KT_MAX_TEMP];
  int n_temp;
  kt_string_handle str[KT_MAX_ARGS]; /* the str arguments, by stack slot */
  kt_tensor_handle out[KT_MAX_OUT];
  int n_out;
  kiln_loader *l; /* kt_skip's: the loader and stream to launch on */
  struct CUstream_st *s;
  kiln_status st;
  char msg[1024];
} kt_call;

/* One op's kernel: its kiln:: name, its body (the checks and the launch, in
 * the order of ops.py's impl; errors recorded in c), and which stack slots
 * hold a Tensor, a Tensor? and a str (bit i: slot i). */
typedef struct kt_op {
  const char *name;
  void (*body)(kt_call *c);
  unsigned tensors, opt, strs;
} kt_op;

/* The boxed kernel torch calls: begin, body, end. */
void kt_run(const kt_op *op, kt_ivalue *stack);

/* Declares body fn (defined after it) with its kt_op and the boxed kernel
 * torch calls, fn_boxed; KT_KERNEL(fn) is its entry in a family's table. */
#define KT_OP(fn, tensors, opt, strs)                                                              \
  static void fn(kt_call *c);                                                                      \
  static const kt_op fn##_op = {#fn, fn, tensors, opt, strs};                                      \
  static void fn##_boxed(kt_ivalue *stack, uint64_t nargs, uint64_t nout) {                        \
    (void)nargs, (void)nout;                                                                       \
    kt_run(&fn##_op, stack);                                                                       \
  }
#define KT_KERNEL(fn)                                                                              \
  { &fn##_op, fn##_boxed }

double kt_double(const kt_call *c, int slot);
int64_t kt_int(const kt_call *c, int slot);
int kt_bool_arg(const kt_call *c, int slot);
/* the str in slot (its bytes, *len of them; valid until kt_end) */
const char *kt_str(const kt_call *c, int slot, size_t *len);
/* Python's repr of a float ("0.5", "1.0", "1e-05", "nan"), for messages */
const char *kt_pyfloat(char *buf, size_t n, double v);

/* Records KILN_EINVAL with a printf message (the first error wins); -1. */
int kt_fail(kt_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records a launcher's failure with kiln_last_error(); st == KILN_OK: 0. */
int kt_status(kt_call *c, kiln_status st);

/* torch's repr of a shape ("(2, 3)", "(3,)") and a device ("cpu", "cuda:0") */
const char *kt_shape(char *buf, size_t n, int64_t dim, const int64_t *sizes);
#define KT_SHAPE(buf, a) kt_shape(buf, sizeof buf, (a)->dim, (a)->sizes)
const char *kt_device(char *buf, size_t n, const kt_arg *a);
const char *kt_dtype(char *buf, size_t n, const kt_arg *a);

/* a's kiln dtype, or kt_fail "kiln.torch: <what> is <dtype>; kiln ops take
 * float32, float16 or bfloat16" */
int kt_dtype_code(kt_call *c, const kt_arg *a, const char *what, kiln_dtype *out);
/* a made contiguous (a copy, kept until kt_end) */
int kt_contig(kt_call *c, kt_arg *a);
/* a's copy on the CPU (kept until kt_end), for reading a small tensor's
 * values on the host; a itself where it is there already */
int kt_on_host(kt_call *c, kt_arg *a);
/* a new contiguous tensor on like's device: *out_data its memory; the output
 * (kt_out) or scratch (kt_tmp) */
int kt_out(kt_call *c, int64_t dim, const int64_t *sizes, int32_t dtype, const kt_arg *like,
           void **out_data);
int kt_tmp(kt_call *c, int64_t dim, const int64_t *sizes, int32_t dtype, const kt_arg *like,
           void **out_data);
/* an output of like's shape and dtype */
int kt_out_like(kt_call *c, const kt_arg *like, void **out_data);
/* zeros into output i */
int kt_zero_out(kt_call *c, int i);
/* nbytes of scratch from torch's allocator on like's device, 256-byte aligned
 * (what cuMemAlloc returns; ops.py _workspace); NULL for 0 bytes */
int kt_workspace(kt_call *c, size_t nbytes, const kt_arg *like, void **out);
/* Nonzero (the body stops) when there is nothing to launch (count == 0: an
 * empty batch, outputs already made) or an error; 0 with c->l and c->s the
 * loader and stream of like's device. */
int kt_skip(kt_call *c, const kt_arg *like, long long count);
/* a and b have the same device (torch.device equality), the same shape; t
 * has shape [dim]sizes */
int kt_same_device(const kt_arg *a, const kt_arg *b);
int kt_same_shape(const kt_arg *a, const kt_arg *b);
int kt_sizes_are(const kt_arg *t, int64_t dim, const int64_t *sizes);
int64_t kt_numel(const kt_arg *a);

/* what a row-wise op's body works out before its launch: x's rows and
 * columns, its kiln dtype, the output */
typedef struct kt_rows {
  long long rows;
  int cols;
  kiln_dtype dt;
  void *out;
} kt_rows;

/* ops.py _rows_cols: x's last dimension is the row (kt_fail "x of shape ...
 * has no last dimension to use") */
int kt_rows_cols(kt_call *c, const kt_arg *x, long long *rows, int *cols);
/* ops.py _match: t (name) has ref's dtype, shape and device */
int kt_match(kt_call *c, const char *ref_name, const kt_arg *ref, const char *name,
             const kt_arg *t);
/* ops.py _f32: t (name) is float32 of shape [dim]sizes on like's device */
int kt_float32(kt_call *c, const char *op, const char *name, const kt_arg *t, int64_t dim,
               const int64_t *sizes, const kt_arg *like);
/* ops.py _same_dtype: t (name; absent: no check) has x's dtype and device */
int kt_same_dtype(kt_call *c, const char *name, const kt_arg *t, const kt_arg *x);
/* ops.py _bias_check: bias (absent: no check) is [cols] of x's dtype and device */
int kt_bias(kt_call *c, const kt_arg *x, const kt_arg *bias, int cols);
/* ops.py _ids: ids are int64 on like's device, then made contiguous */
int kt_ids(kt_call *c, const char *op, kt_arg *ids, const kt_arg *like);

/* the loader of device dev (libkiln_torch's table; opened on first use) */
kiln_status kt_loader_get(kiln_loader **out, int dev, const kiln_loader_options *opts);

#endif
