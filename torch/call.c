/* One call of a boxed kernel: arguments, outputs, the error (call.h). */
#include "torch/call.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kernels.h" /* kiln_unit_count, kiln_unit_at */
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

/* Adopts the arguments in op's Tensor, Tensor? and str slots. */
static void kt_begin(kt_call *c, const kt_op *op, kt_ivalue *stack) {
  memset(c, 0, sizeof *c);
  kt_err.pending = 0; /* a record nobody took belongs to an earlier call */
  c->op = op->name;
  c->stack = stack;
  for (int i = 0; i < KT_MAX_ARGS; i++) {
    kt_tensor_handle h = NULL;
    if (op->strs & (1u << i)) /* an owning StringHandle (torch >= 2.10) */
      memcpy(&c->str[i], &stack[i], sizeof c->str[i]);
    if (op->tensors & (1u << i)) {
      memcpy(&h, &stack[i], sizeof h);
    } else if (op->opt & (1u << i)) {
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
    if (c->str[i]) kt_torch.delete_string(c->str[i]);
    c->str[i] = NULL;
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

/* Outputs to torch, or the error raised (then kt_end does not return). */
static void kt_end(kt_call *c) {
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

void kt_run(const kt_op *op, kt_ivalue *stack) {
  kt_call c;
  kt_begin(&c, op, stack);
  op->body(&c);
  kt_end(&c);
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

const char *kt_str(const kt_call *c, int slot, size_t *len) {
  const char *p = NULL;
  *len = 0;
  kt_string_handle h = c->str[slot];
  if (!h || kt_torch.string_length(h, len) != 0 || kt_torch.string_c_str(h, &p) != 0 || !p) {
    *len = 0;
    return "";
  }
  return p;
}

const char *kt_pyfloat(char *buf, size_t n, double v) {
  if (isnan(v)) {
    snprintf(buf, n, "nan");
    return buf;
  }
  if (isinf(v)) {
    snprintf(buf, n, "%sinf", v < 0 ? "-" : "");
    return buf;
  }
  /* repr: the fewest digits that read back as v, fixed notation for a
   * decimal exponent in [-4, 16), else d.ddde+XX */
  char e[40];
  int prec = 1;
  for (; prec < 17; prec++) {
    snprintf(e, sizeof e, "%.*e", prec - 1, v);
    if (strtod(e, NULL) == v) break;
  }
  snprintf(e, sizeof e, "%.*e", prec - 1, v);
  const char *ep = strchr(e, 'e');
  long exp10 = ep ? strtol(ep + 1, NULL, 10) : 0;
  if (exp10 < -4 || exp10 >= 16) {
    snprintf(buf, n, "%s", e);
    return buf;
  }
  int frac = prec - 1 - (int)exp10;
  snprintf(buf, n, "%.*f%s", frac > 0 ? frac : 0, v, frac > 0 ? "" : ".0");
  return buf;
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

/* The unit op runs (kiln_<unit>_... launchers): the longest unit name that
 * op's name starts with, up to an '_' ("scaled_masked_softmax_backward" ->
 * scaled_masked_softmax, not scaled_softmax). NULL when none does. */
static const char *kt_unit_of(const char *op) {
  const char *best = NULL;
  size_t best_len = 0;
  for (size_t i = 0; i < kiln_unit_count(); i++) {
    const char *name = kiln_unit_at(i)->name;
    size_t n = strlen(name);
    if (n > best_len && strncmp(op, name, n) == 0 && (op[n] == '\0' || op[n] == '_')) {
      best = name;
      best_len = n;
    }
  }
  return best;
}

/* A launch that failed while the stream captures a CUDA graph, with the op's
 * unit not loaded: the driver refused (or would refuse) to load it. Says what
 * the Python impls' resolve guard says (kiln/torch/_runtime.py, resolve), with
 * its status, so both paths raise the same KilnUnsupported. Only on a
 * failure: the success path asks nothing. */
static void kt_capture_refusal(kt_call *c) {
  kiln_unit_load ul;
  int capturing = 0;
  const char *unit = kt_unit_of(c->op);
  if (!c->l || !unit || kiln_loader_stream_capturing(&capturing, c->l, c->s) != KILN_OK ||
      !capturing || kiln_loader_unit_load(&ul, c->l, unit) != KILN_ENOTFOUND)
    return;
  c->st = KILN_EUNSUPPORTED;
  snprintf(c->msg, sizeof c->msg,
           "kiln.torch: unit '%s' is not loaded yet and a CUDA graph is being captured (loading "
           "or building kernels cannot be captured); call kiln.torch.init() before capturing",
           unit);
}

int kt_status(kt_call *c, kiln_status st) {
  if (st == KILN_OK) return 0;
  if (c->st == KILN_OK) {
    c->st = st;
    snprintf(c->msg, sizeof c->msg, "%s", kiln_last_error());
    kt_capture_refusal(c);
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
  int64_t strides[KT_MAX_DIM];
  if (dim > KT_MAX_DIM)
    return kt_fail(c, "kiln.torch.%s: %lld dimensions; kiln takes at most %d", c->op,
                   (long long)dim, KT_MAX_DIM);
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

/* a new tensor kept in slots[*n] (the outputs, or scratch freed at kt_end) */
static int kt_keep(kt_call *c, kt_tensor_handle *slots, int *n, int max, int64_t dim,
                   const int64_t *sizes, int32_t dtype, const kt_arg *like, void **out_data) {
  if (*n >= max) return kt_fail(c, "kiln.torch.%s: too many tensors", c->op);
  int rc = kt_new(c, &slots[*n], dim, sizes, dtype, like, out_data);
  if (slots[*n]) (*n)++;
  return rc;
}

int kt_out(kt_call *c, int64_t dim, const int64_t *sizes, int32_t dtype, const kt_arg *like,
           void **out_data) {
  return kt_keep(c, c->out, &c->n_out, KT_MAX_OUT, dim, sizes, dtype, like, out_data);
}

int kt_tmp(kt_call *c, int64_t dim, const int64_t *sizes, int32_t dtype, const kt_arg *like,
           void **out_data) {
  return kt_keep(c, c->temp, &c->n_temp, KT_MAX_TEMP, dim, sizes, dtype, like, out_data);
}

int kt_out_like(kt_call *c, const kt_arg *like, void **out_data) {
  return kt_out(c, like->dim, like->sizes, like->dtype, like, out_data);
}

int kt_workspace(kt_call *c, size_t nbytes, const kt_arg *like, void **out) {
  *out = NULL;
  if (nbytes == 0) return 0;
  int64_t n = (int64_t)(nbytes + 256);
  void *p;
  if (kt_tmp(c, 1, &n, kt_u8, like, &p)) return -1;
  uintptr_t a = (uintptr_t)p;
  *out = (void *)(a + (-a % 256));
  return 0;
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

int kt_on_host(kt_call *c, kt_arg *a) {
  if (a->devtype == kt_cpu) return kt_contig(c, a);
  kt_arg host = *a;
  host.devtype = kt_cpu;
  host.devidx = 0;
  void *data = NULL;
  if (kt_tmp(c, a->dim, a->sizes, a->dtype, &host, &data) != 0) return -1;
  kt_tensor_handle copy = c->temp[c->n_temp - 1];
  if (kt_torch.copy_(copy, a->h, 0) != 0)
    return kt_fail(c, "kiln.torch.%s: copy to the CPU failed", c->op);
  kt_torch.get_sizes(copy, &a->sizes);
  a->data = data;
  a->devtype = kt_cpu;
  a->devidx = 0;
  return 0;
}

int kt_same_device(const kt_arg *a, const kt_arg *b) {
  return a->devtype == b->devtype && a->devidx == b->devidx;
}

int kt_skip(kt_call *c, const kt_arg *like, long long count) {
  if (count == 0) return 1;
  int dev = 0;
  c->s = NULL;
  if (like->devtype == kt_cuda) {
    dev = like->devidx;
    void *s = NULL;
    if (!kt_torch.get_current_cuda_stream || kt_torch.get_current_cuda_stream(dev, &s) != 0)
      return kt_fail(c, "kiln.torch.%s: torch gave no current CUDA stream", c->op);
    c->s = (struct CUstream_st *)s;
  }
  /* a CPU tensor reaches a kernel only in the tests' CPU-tensor mode (the C
   * kernels are registered for CPU only then): the fake driver's device 0 */
  return kt_status(c, kt_loader_get(&c->l, dev, NULL));
}

/* ops.py _rows_cols: x's last dimension is the row */
int kt_rows_cols(kt_call *c, const kt_arg *x, long long *rows, int *cols) {
  char s[256];
  if (x->dim < 1 || x->sizes[x->dim - 1] == 0)
    return kt_fail(c, "kiln.torch.%s: x of shape %s has no last dimension to use", c->op,
                   KT_SHAPE(s, x));
  *cols = (int)x->sizes[x->dim - 1];
  *rows = (long long)(kt_numel(x) / x->sizes[x->dim - 1]);
  return 0;
}

int kt_sizes_are(const kt_arg *t, int64_t dim, const int64_t *sizes) {
  int same = t->dim == dim;
  for (int64_t i = 0; same && i < dim; i++)
    same = t->sizes[i] == sizes[i];
  return same;
}

int kt_same_shape(const kt_arg *a, const kt_arg *b) {
  return kt_sizes_are(a, b->dim, b->sizes);
}

/* ops.py _match: a gradient has its tensor's dtype, shape and device */
int kt_match(kt_call *c, const char *ref_name, const kt_arg *ref, const char *name,
             const kt_arg *t) {
  if (t->dtype == ref->dtype && kt_same_device(t, ref) && kt_same_shape(t, ref)) return 0;
  char td[48], rd[48], ts[256], rs[256], tv[48], rv[48];
  return kt_fail(c, "kiln.torch.%s: %s is %s %s on %s, %s %s %s on %s; they must match", c->op,
                 name, kt_dtype(td, sizeof td, t), KT_SHAPE(ts, t), kt_device(tv, sizeof tv, t),
                 ref_name, kt_dtype(rd, sizeof rd, ref), KT_SHAPE(rs, ref),
                 kt_device(rv, sizeof rv, ref));
}

int kt_float32(kt_call *c, const char *op, const char *name, const kt_arg *t, int64_t dim,
               const int64_t *sizes, const kt_arg *like) {
  if (t->dtype == kt_f32 && kt_same_device(t, like) && kt_sizes_are(t, dim, sizes)) return 0;
  char td[48], ts[256], tv[48], ws[256], lv[48];
  return kt_fail(c, "kiln.torch.%s: %s is %s %s on %s; want float32 %s on %s", op, name,
                 kt_dtype(td, sizeof td, t), KT_SHAPE(ts, t), kt_device(tv, sizeof tv, t),
                 kt_shape(ws, sizeof ws, dim, sizes), kt_device(lv, sizeof lv, like));
}

int kt_same_dtype(kt_call *c, const char *name, const kt_arg *t, const kt_arg *x) {
  char d1[48], d2[48];
  if (!t->h) return 0;
  if (t->dtype != x->dtype)
    return kt_fail(c, "kiln.torch.%s: %s is %s, x is %s; they must match", c->op, name,
                   kt_dtype(d1, sizeof d1, t), kt_dtype(d2, sizeof d2, x));
  if (!kt_same_device(t, x))
    return kt_fail(c, "kiln.torch.%s: %s is on %s, x on %s", c->op, name,
                   kt_device(d1, sizeof d1, t), kt_device(d2, sizeof d2, x));
  return 0;
}

int kt_bias(kt_call *c, const kt_arg *x, const kt_arg *bias, int cols) {
  char s[256];
  if (kt_same_dtype(c, "bias", bias, x)) return -1;
  if (bias->h && (bias->dim != 1 || bias->sizes[0] != cols))
    return kt_fail(c, "kiln.torch.%s: bias must be [%d]; got %s", c->op, cols, KT_SHAPE(s, bias));
  return 0;
}

int kt_ids(kt_call *c, const char *op, kt_arg *ids, const kt_arg *like) {
  char d1[48], d2[48];
  if (ids->dtype != kt_i64)
    return kt_fail(c, "kiln.torch.%s: token ids/targets are %s; want int64", op,
                   kt_dtype(d1, sizeof d1, ids));
  if (!kt_same_device(ids, like))
    return kt_fail(c, "kiln.torch.%s: ids are on %s, the weights/logits on %s", op,
                   kt_device(d1, sizeof d1, ids), kt_device(d2, sizeof d2, like));
  return kt_contig(c, ids);
}
