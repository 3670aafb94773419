/* One call of a boxed kernel: arguments, outputs, the error (call.h). */
#include "torch/call.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "torch/kiln_torch.h"

/* The last error a kernel raised on this thread, for kiln.torch to map to its
 * KilnError subclass; taken (cleared) by kiln_torch_take_error. */
static _Thread_local struct {
  int pending;
  kiln_status st;
  char msg[1024];
} kt_err;

static void kt_read(kt_arg *a) {
  kt_torch.get_dtype(a->h, &a->dtype);
  kt_torch.get_device_type(a->h, &a->devtype);
  kt_torch.get_device_index(a->h, &a->devidx);
  kt_torch.get_dim(a->h, &a->dim);
  kt_torch.get_sizes(a->h, &a->sizes);
  kt_torch.get_data_ptr(a->h, &a->data);
}

void kt_begin(kt_call *c, const char *op, kt_ivalue *stack, unsigned tensors, unsigned opt) {
  memset(c, 0, sizeof *c);
  kt_err.pending = 0; /* a record nobody took belongs to an earlier call */
  c->op = op;
  c->stack = stack;
  for (int i = 0; i < KT_MAX_ARGS; i++) {
    kt_tensor_handle h = NULL;
    if (tensors & (1u << i)) {
      memcpy(&h, &stack[i], sizeof h);
    } else if (opt & (1u << i)) {
      /* T?: NULL (None) or a heap StableIValue holding the handle, which the
       * kernel frees (torch's to<std::optional<T>>) */
      kt_ivalue *boxed = NULL;
      memcpy(&boxed, &stack[i], sizeof boxed);
      if (boxed) {
        memcpy(&h, boxed, sizeof h);
        kt_torch.delete_stable_ivalue(boxed);
      }
    }
    c->arg[i].h = h;
    if (h) kt_read(&c->arg[i]);
  }
}

static void kt_free(kt_call *c, int outputs_too) {
  for (int i = 0; i < KT_MAX_ARGS; i++) {
    if (c->arg[i].h) kt_torch.delete_tensor_object(c->arg[i].h);
    c->arg[i].h = NULL;
  }
  for (int i = 0; i < c->n_temp; i++)
    kt_torch.delete_tensor_object(c->temp[i]);
  c->n_temp = 0;
  if (outputs_too) {
    for (int i = 0; i < c->n_out; i++)
      kt_torch.delete_tensor_object(c->out[i]);
    c->n_out = 0;
  }
}

void kt_end(kt_call *c) {
  if (c->st == KILN_OK) {
    for (int i = 0; i < c->n_out; i++)
      memcpy(&c->stack[i], &c->out[i], sizeof c->out[i]);
    kt_free(c, 0);
    return;
  }
  kt_free(c, 1);
  kt_err.pending = 1;
  kt_err.st = c->st;
  snprintf(kt_err.msg, sizeof kt_err.msg, "%s", c->msg);
  /* throws (c10::Error): nothing of this call is left to free; torch copies
   * the message */
  kt_torch.check(false, c->op, __FILE__, __LINE__, kt_err.msg);
}

int kiln_torch_take_error(int *status, char *msg, size_t n) {
  if (!kt_err.pending) return 0;
  kt_err.pending = 0;
  *status = kt_err.st;
  snprintf(msg, n, "%s", kt_err.msg);
  return 1;
}

double kt_double(const kt_call *c, int slot) {
  double v;
  memcpy(&v, &c->stack[slot], sizeof v);
  return v;
}

int64_t kt_int(const kt_call *c, int slot) {
  int64_t v;
  memcpy(&v, &c->stack[slot], sizeof v);
  return v;
}

int kt_bool_arg(const kt_call *c, int slot) {
  bool v;
  memcpy(&v, &c->stack[slot], sizeof v);
  return v ? 1 : 0;
}

int kt_fail(kt_call *c, const char *fmt, ...) {
  if (c->st != KILN_OK) return -1;
  c->st = KILN_EINVAL;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->msg, sizeof c->msg, fmt, ap);
  va_end(ap);
  return -1;
}

int kt_status(kt_call *c, kiln_status st) {
  if (st == KILN_OK) return 0;
  if (c->st == KILN_OK) {
    c->st = st;
    snprintf(c->msg, sizeof c->msg, "%s", kiln_last_error());
  }
  return -1;
}

const char *kt_shape(char *buf, size_t n, int64_t dim, const int64_t *sizes) {
  size_t at = 0;
  int w = snprintf(buf, n, "(");
  at = w > 0 ? (size_t)w : 0;
  for (int64_t i = 0; i < dim && at < n; i++) {
    w = snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", (long long)sizes[i]);
    at += w > 0 ? (size_t)w : 0;
  }
  if (at < n) snprintf(buf + at, n - at, dim == 1 ? ",)" : ")");
  return buf;
}

const char *kt_device(char *buf, size_t n, const kt_arg *a) {
  if (a->devtype == kt_cpu)
    snprintf(buf, n, "cpu");
  else if (a->devtype == kt_cuda)
    snprintf(buf, n, "cuda:%d", (int)a->devidx);
  else
    snprintf(buf, n, "<device %d:%d>", (int)a->devtype, (int)a->devidx);
  return buf;
}

const char *kt_dtype(char *buf, size_t n, const kt_arg *a) {
  return kt_dtype_name(a->dtype, buf, n);
}

int kt_dtype_code(kt_call *c, const kt_arg *a, const char *what, kiln_dtype *out) {
  if (a->dtype == kt_f32)
    *out = KILN_F32;
  else if (a->dtype == kt_f16)
    *out = KILN_F16;
  else if (a->dtype == kt_bf16)
    *out = KILN_BF16;
  else {
    char d[48];
    return kt_fail(c, "kiln.torch: %s is %s; kiln ops take float32, float16 or bfloat16", what,
                   kt_dtype(d, sizeof d, a));
  }
  return 0;
}

int64_t kt_numel(const kt_arg *a) {
  int64_t n = 1;
  for (int64_t i = 0; i < a->dim; i++)
    n *= a->sizes[i];
  return n;
}

static int kt_new(kt_call *c, kt_tensor_handle *slot, int64_t dim, const int64_t *sizes,
                  int32_t dtype, const kt_arg *like, void **out_data) {
  int64_t strides[16];
  if (dim > 16)
    return kt_fail(c, "kiln.torch.%s: %lld dimensions; kiln takes at most 16", c->op,
                   (long long)dim);
  int64_t s = 1;
  for (int64_t i = dim - 1; i >= 0; i--) {
    strides[i] = s;
    s *= sizes[i] > 1 ? sizes[i] : 1;
  }
  if (kt_torch.empty_strided(dim, sizes, strides, dtype, like->devtype, like->devidx, slot) != 0) {
    c->st = KILN_ENOMEM;
    snprintf(c->msg, sizeof c->msg, "kiln.torch.%s: torch could not allocate an output", c->op);
    return -1;
  }
  return kt_torch.get_data_ptr(*slot, out_data) == 0 ? 0 : -1;
}

int kt_out(kt_call *c, int64_t dim, const int64_t *sizes, int32_t dtype, const kt_arg *like,
           void **out_data) {
  if (c->n_out >= KT_MAX_OUT) return -1;
  int rc = kt_new(c, &c->out[c->n_out], dim, sizes, dtype, like, out_data);
  if (c->out[c->n_out]) c->n_out++;
  return rc;
}

int kt_tmp(kt_call *c, int64_t dim, const int64_t *sizes, int32_t dtype, const kt_arg *like,
           void **out_data) {
  if (c->n_temp >= KT_MAX_TEMP) return -1;
  int rc = kt_new(c, &c->temp[c->n_temp], dim, sizes, dtype, like, out_data);
  if (c->temp[c->n_temp]) c->n_temp++;
  return rc;
}

int kt_zero_out(kt_call *c, int i) {
  return kt_torch.zero_(c->out[i]) == 0 ? 0 : kt_fail(c, "kiln.torch.%s: zero_ failed", c->op);
}

int kt_contig(kt_call *c, kt_arg *a) {
  bool contig = true;
  if (!a->h || (kt_torch.is_contiguous(a->h, &contig) == 0 && contig)) return 0;
  void *data = NULL;
  if (kt_tmp(c, a->dim, a->sizes, a->dtype, a, &data) != 0) return -1;
  kt_tensor_handle copy = c->temp[c->n_temp - 1];
  if (kt_torch.copy_(copy, a->h, 0) != 0)
    return kt_fail(c, "kiln.torch.%s: copy to a contiguous tensor failed", c->op);
  /* the copy stands for a from here on; a's own handle is still freed by kt_end
   * (temp and arg slots are both owned) */
  kt_torch.get_sizes(copy, &a->sizes);
  a->data = data;
  return 0;
}

int kt_same_device(const kt_arg *a, const kt_arg *b) {
  return a->devtype == b->devtype && a->devidx == b->devidx;
}

int kt_target(kt_call *c, const kt_arg *like, kiln_loader **l, struct CUstream_st **stream) {
  int dev = 0;
  *stream = NULL;
  if (like->devtype == kt_cuda) {
    dev = like->devidx;
    void *s = NULL;
    if (!kt_torch.get_current_cuda_stream || kt_torch.get_current_cuda_stream(dev, &s) != 0)
      return kt_fail(c, "kiln.torch.%s: torch gave no current CUDA stream", c->op);
    *stream = (struct CUstream_st *)s;
  }
  /* a CPU tensor reaches a kernel only in the tests' CPU-tensor mode (the C
   * kernels are registered for CPU only then): the fake driver's device 0 */
  return kt_status(c, kt_loader_get(l, dev, NULL));
}

#define SHAPE(buf, a) kt_shape(buf, sizeof buf, (a)->dim, (a)->sizes)

/* ops.py _rows_cols: x's last dimension is the row */
int kt_rows_cols(kt_call *c, const kt_arg *x, long long *rows, int *cols) {
  char s[256];
  if (x->dim < 1 || x->sizes[x->dim - 1] == 0)
    return kt_fail(c, "kiln.torch.%s: x of shape %s has no last dimension to use", c->op,
                   SHAPE(s, x));
  *cols = (int)x->sizes[x->dim - 1];
  *rows = (long long)(kt_numel(x) / x->sizes[x->dim - 1]);
  return 0;
}

/* ops.py _match: a gradient has its tensor's dtype, shape and device */
int kt_match(kt_call *c, const char *ref_name, const kt_arg *ref, const char *name,
             const kt_arg *t) {
  int same = t->dtype == ref->dtype && t->dim == ref->dim && kt_same_device(t, ref);
  for (int64_t i = 0; same && i < t->dim; i++)
    same = t->sizes[i] == ref->sizes[i];
  if (same) return 0;
  char td[48], rd[48], ts[256], rs[256], tv[48], rv[48];
  return kt_fail(c, "kiln.torch.%s: %s is %s %s on %s, %s %s %s on %s; they must match", c->op,
                 name, kt_dtype(td, sizeof td, t), SHAPE(ts, t), kt_device(tv, sizeof tv, t),
                 ref_name, kt_dtype(rd, sizeof rd, ref), SHAPE(rs, ref),
                 kt_device(rv, sizeof rv, ref));
}
