/* One call of a boxed kernel (shim.h): its tensor arguments, the outputs it
 * allocates through torch, and its one error.
 *
 * Every kernel follows the same steps: kt_begin adopts every tensor argument
 * (the kernel owns them from the first instruction), the checks and the
 * launch record at most one error (kt_fail, kt_status), and kt_end hands the
 * outputs to torch or, on an error, frees everything and only then raises it
 * through torch's check function: a C++ exception unwinds through this file's
 * frames (built with -fexceptions) with nothing left to free or unlock. The
 * error's status stays in a thread-local slot for kiln.torch to map to its
 * KilnError subclass (kiln_torch_take_error). */
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
  kt_tensor_handle out[KT_MAX_OUT];
  int n_out;
  kiln_status st;
  char msg[1024];
} kt_call;

/* Adopts the arguments in the slots of tensors (bit i: slot i is a Tensor)
 * and opt (bit i: slot i is a Tensor?). */
void kt_begin(kt_call *c, const char *op, kt_ivalue *stack, unsigned tensors, unsigned opt);
/* Outputs to torch, or the error raised (then kt_end does not return). */
void kt_end(kt_call *c);

double kt_double(const kt_call *c, int slot);
int64_t kt_int(const kt_call *c, int slot);
int kt_bool_arg(const kt_call *c, int slot);

/* Records KILN_EINVAL with a printf message (the first error wins); -1. */
int kt_fail(kt_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records a launcher's failure with kiln_last_error(); st == KILN_OK: 0. */
int kt_status(kt_call *c, kiln_status st);

/* torch's repr of a shape ("(2, 3)", "(3,)") and a device ("cpu", "cuda:0") */
const char *kt_shape(char *buf, size_t n, int64_t dim, const int64_t *sizes);
const char *kt_device(char *buf, size_t n, const kt_arg *a);
const char *kt_dtype(char *buf, size_t n, const kt_arg *a);

/* a's kiln dtype, or kt_fail "kiln.torch: <what> is <dtype>; kiln ops take
 * float32, float16 or bfloat16" */
int kt_dtype_code(kt_call *c, const kt_arg *a, const char *what, kiln_dtype *out);
/* a made contiguous (a copy, kept until kt_end) */
int kt_contig(kt_call *c, kt_arg *a);
/* a new contiguous tensor on like's device: *out_data its memory; the output
 * (kt_out) or scratch (kt_tmp) */
int kt_out(kt_call *c, int64_t dim, const int64_t *sizes, int32_t dtype, const kt_arg *like,
           void **out_data);
int kt_tmp(kt_call *c, int64_t dim, const int64_t *sizes, int32_t dtype, const kt_arg *like,
           void **out_data);
/* zeros into output i */
int kt_zero_out(kt_call *c, int i);
/* the loader and stream ops on like's device launch on */
int kt_target(kt_call *c, const kt_arg *like, kiln_loader **l, struct CUstream_st **stream);
/* a and b have the same device (torch.device equality) */
int kt_same_device(const kt_arg *a, const kt_arg *b);
int64_t kt_numel(const kt_arg *a);

/* ops.py _rows_cols: x's last dimension is the row (kt_fail "x of shape ...
 * has no last dimension to use") */
int kt_rows_cols(kt_call *c, const kt_arg *x, long long *rows, int *cols);
/* ops.py _match: t (name) has ref's dtype, shape and device */
int kt_match(kt_call *c, const char *ref_name, const kt_arg *ref, const char *name,
             const kt_arg *t);

/* the loader of device dev (libkiln_torch's table; opened on first use) */
kiln_status kt_loader_get(kiln_loader **out, int dev, const kiln_loader_options *opts);

#endif
