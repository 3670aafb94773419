/* fake_activation.cpp — the activation family: every entry point of
 * kernels/activation/bias_gelu.def and bias_swiglu.def
 * (docs/kernels/activation.md, "Entry points"), from the kernel sources
 * tests/emu compiles, with its launch contract:
 *   - blockDim.x is KILN_ACT_THREADS (256) for every entry;
 *   - rows >= 0, cols >= 1, and the tensors' bytes fit in 64 bits;
 *   - bias_gelu: x, y, dy, dx hold rows*cols elements, bias cols (or is
 *     NULL); y may be x and dx may be dy (in place), nothing else overlaps;
 *   - bias_swiglu: x and dx hold rows*2*cols elements, y and dy rows*cols,
 *     bias 2*cols (or NULL); nothing overlaps a written buffer. */
#include <limits.h> /* LLONG_MAX */
#include <stdio.h>  /* snprintf */

#include "fake_kernels.h"

/* Last: the prelude (through activation_entries.h) defines `asm`. */
#include "activation_entries.h" /* the entry points' declarations (tests/emu) */

#include "activation/activation_core.cuh" /* KILN_ACT_THREADS */

namespace kiln_fake {
namespace {

enum { kGelu, kSwiglu };

constexpr bool same(const char *a, const char *b) {
  while (*a && *a == *b)
    ++a, ++b;
  return *a == *b;
}

/* A unit the fake does not know is a compile error here, not a launch with
 * unchecked arguments. */
constexpr int unit_kind(const char *u) {
  return same(u, "bias_gelu") ? kGelu : same(u, "bias_swiglu") ? kSwiglu : -1;
}
template <int K> constexpr int checked_unit() {
  static_assert(K >= 0, "an activation unit tests/fakecuda does not know: add its launch "
                        "contract to fake_activation.cpp");
  return K;
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr int value = kF32; };
template <> struct dtype_of<kiln_f16> { static constexpr int value = kF16; };
template <> struct dtype_of<kiln_bf16> { static constexpr int value = kBf16; };

struct act_info {
  int unit; /* kGelu, kSwiglu */
  bool fwd;
  int dtype;
  unsigned elem_bytes;
};
template <int U, class T, bool F> const act_info kInfo = {U, F, dtype_of<T>::value, sizeof(T)};

bool fail(std::string *why, const char *fmt, long long a, long long b = 0) {
  char buf[200];
  snprintf(buf, sizeof buf, fmt, a, b);
  *why = buf;
  return false;
}

/* Parameters: fwd (y, x, bias, rows, cols), bwd (dx, dy, x, bias, rows, cols). */
bool plan(const entry &e, void *const *p, launch_plan *out, std::string *why) {
  const act_info &s = *(const act_info *)e.info;
  const int k = s.fwd ? 3 : 4; /* index of rows */
  const long long rows = param<long long>(p, k);
  const int cols = param<int>(p, k + 1);
  if (rows < 0) return fail(why, "rows %lld < 0", rows);
  if (cols < 1) return fail(why, "cols %lld < 1", cols);
  const long long width = s.unit == kSwiglu ? 2LL * cols : cols; /* of x and dx */
  if (rows > LLONG_MAX / width / (long long)s.elem_bytes)
    return fail(why, "rows %lld x %lld columns overflows", rows, width);
  const unsigned long long eb = s.elem_bytes;
  const unsigned long long wide = (unsigned long long)(rows * width) * eb;
  const unsigned long long narrow = (unsigned long long)rows * (unsigned long long)cols * eb;
  const unsigned long long bias = (unsigned long long)width * eb;
  const bool gelu = s.unit == kGelu;
  auto add = [&](const char *name, int i, unsigned long long n, bool written, bool in_place_ok) {
    const uintptr_t ptr = param<uintptr_t>(p, i);
    out->buf[out->nbuf++] = buffer_use{name, ptr, ptr ? n : 0, s.elem_bytes, written, in_place_ok};
  };
  auto add_required = [&](const char *name, int i, unsigned long long n, bool written,
                          bool in_place_ok) {
    if (!param<uintptr_t>(p, i) && rows > 0) {
      *why = std::string(name) + " is NULL";
      return false;
    }
    add(name, i, n, written, in_place_ok);
    return true;
  };
  if (s.fwd) {
    if (!add_required("y", 0, narrow, true, gelu) || !add_required("x", 1, wide, false, gelu))
      return false;
    add("bias", 2, bias, false, false);
  } else {
    if (!add_required("dx", 0, wide, true, gelu) || !add_required("dy", 1, narrow, false, gelu) ||
        !add_required("x", 2, wide, false, false))
      return false;
    add("bias", 3, bias, false, false);
  }
  out->out = 0;
  out->out_dtype = s.dtype;
  return true;
}

template <class T, void (*F)(T *, const T *, const T *, long long, int)>
void run_fwd(void *const *p) {
  F(param<T *>(p, 0), param<const T *>(p, 1), param<const T *>(p, 2), param<long long>(p, 3),
    param<int>(p, 4));
}

template <class T, void (*F)(T *, const T *, const T *, const T *, long long, int)>
void run_bwd(void *const *p) {
  F(param<T *>(p, 0), param<const T *>(p, 1), param<const T *>(p, 2), param<const T *>(p, 3),
    param<long long>(p, 4), param<int>(p, 5));
}

#define KILN_FAKE_ACT_CTYPE_f32 float
#define KILN_FAKE_ACT_CTYPE_f16 kiln_f16
#define KILN_FAKE_ACT_CTYPE_bf16 kiln_bf16
#define KILN_FAKE_ACT_RUN_fwd run_fwd
#define KILN_FAKE_ACT_RUN_bwd run_bwd
#define KILN_FAKE_ACT_FWD_fwd true
#define KILN_FAKE_ACT_FWD_bwd false
#define KILN_FAKE_ACT_(unit, dir, dt, v)                                                           \
  {"kiln_" #unit "_" #dir "_" #dt "_" #v, KILN_ACT_THREADS, plan,                                  \
   KILN_FAKE_ACT_RUN_##dir<KILN_FAKE_ACT_CTYPE_##dt, kiln_##unit##_##dir##_##dt##_##v>,            \
   &kInfo<checked_unit<unit_kind(#unit)>(), KILN_FAKE_ACT_CTYPE_##dt, KILN_FAKE_ACT_FWD_##dir>},
const entry kEntries[] = {KILN_BIAS_GELU_ENTRIES(KILN_FAKE_ACT_)
                              KILN_BIAS_SWIGLU_ENTRIES(KILN_FAKE_ACT_)};
#undef KILN_FAKE_ACT_

} // namespace

const family kFamily_activation = {kEntries, (int)(sizeof kEntries / sizeof *kEntries)};

} // namespace kiln_fake
