/* fake_dropout.cpp — the dropout family: every entry point of
 * kernels/dropout/bias_dropout_add.def (docs/kernels/dropout.md, "Entry
 * points"), from the kernel source compiled as host C++, with its launch
 * contract:
 *   - blockDim.x is 256 (KILN_BDA_THREADS), any 1-D grid;
 *   - n >= 0; forward: cols >= 1 and n a multiple of cols (n = rows * cols);
 *   - threshold < 2^24 (= ceil(p * 2^24) for p < 1); when it is not 0, scale
 *     is finite and >= 1 (1 / (1 - p)); threshold 0 does not read scale;
 *   - y, x, residual, dx, dy hold n elements, bias cols (when not NULL);
 *     y may be x or residual, dx may be dy (in place); nothing may partially
 *     overlap what is written.
 * seed and offset are any 64-bit values. */
#include <limits.h> /* LLONG_MAX */
#include <math.h>   /* isfinite */
#include <stdio.h>  /* snprintf */

#include "fake_kernels.h"

/* Last: the prelude (through dropout_entries.h) defines `asm`. */
#include "dropout_entries.h" /* the entry points' declarations (tests/emu) */

namespace kiln_fake {
namespace {

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr int value = kF32; };
template <> struct dtype_of<kiln_f16> { static constexpr int value = kF16; };
template <> struct dtype_of<kiln_bf16> { static constexpr int value = kBf16; };

struct dropout_info {
  bool fwd;
  int dtype;
  unsigned elem_bytes;
};
template <class T, bool F> const dropout_info kInfo = {F, dtype_of<T>::value, sizeof(T)};

constexpr unsigned kThreads = 256;           /* KILN_BDA_THREADS */
constexpr unsigned kThresholdEnd = 1u << 24; /* threshold = ceil(p * 2^24) < 2^24 */

bool fail(std::string *why, const char *fmt, double a, double b = 0) {
  char buf[200];
  snprintf(buf, sizeof buf, fmt, a, b);
  *why = buf;
  return false;
}

/* Parameters: fwd (y, x, bias, residual, n, cols, threshold, scale, seed,
 * offset), bwd (dx, dy, n, threshold, scale, seed, offset). */
bool plan(const entry &e, void *const *p, launch_plan *out, std::string *why) {
  const dropout_info &s = *(const dropout_info *)e.info;
  const int k = s.fwd ? 4 : 2; /* index of n */
  const long long n = param<long long>(p, k);
  const unsigned threshold = param<unsigned>(p, s.fwd ? 6 : 3);
  const float scale = param<float>(p, s.fwd ? 7 : 4);
  int cols = 1;
  if (n < 0) return fail(why, "n %.0f < 0", (double)n);
  if (n > LLONG_MAX / (long long)s.elem_bytes) return fail(why, "n %.0f overflows", (double)n);
  if (s.fwd) {
    cols = param<int>(p, 5);
    if (cols < 1) return fail(why, "cols %.0f < 1", cols);
    if (n % cols)
      return fail(why, "n %.0f is not a multiple of cols %.0f (n = rows * cols)", (double)n, cols);
  }
  if (threshold >= kThresholdEnd)
    return fail(why, "threshold %.0f >= 2^24 (p >= 1: the host must refuse it)", threshold);
  if (threshold && !(isfinite(scale) && scale >= 1.f))
    return fail(why, "scale %g with threshold %.0f: must be finite and >= 1 (1 / (1 - p))", scale,
                threshold);
  const unsigned long long bytes = (unsigned long long)n * s.elem_bytes;
  auto add = [&](const char *name, int i, unsigned long long nb, bool written, bool in_place_ok) {
    out->buf[out->nbuf++] =
        buffer_use{name, param<uintptr_t>(p, i), nb, s.elem_bytes, written, in_place_ok};
  };
  if (s.fwd) {
    const bool bias = param<uintptr_t>(p, 2) != 0;
    add("y", 0, bytes, true, true);
    add("x", 1, bytes, false, true);
    if (bias && n) add("bias", 2, (unsigned long long)cols * s.elem_bytes, false, false);
    add("residual", 3, bytes, false, true);
  } else {
    add("dx", 0, bytes, true, true);
    add("dy", 1, bytes, false, true);
  }
  out->out = 0;
  out->out_dtype = s.dtype;
  return true;
}

template <class T, void (*F)(T *, const T *, const T *, const T *, long long, int, unsigned, float,
                             unsigned long long, unsigned long long)>
void run_fwd(void *const *p) {
  F(param<T *>(p, 0), param<const T *>(p, 1), param<const T *>(p, 2), param<const T *>(p, 3),
    param<long long>(p, 4), param<int>(p, 5), param<unsigned>(p, 6), param<float>(p, 7),
    param<unsigned long long>(p, 8), param<unsigned long long>(p, 9));
}

template <class T, void (*F)(T *, const T *, long long, unsigned, float, unsigned long long,
                             unsigned long long)>
void run_bwd(void *const *p) {
  F(param<T *>(p, 0), param<const T *>(p, 1), param<long long>(p, 2), param<unsigned>(p, 3),
    param<float>(p, 4), param<unsigned long long>(p, 5), param<unsigned long long>(p, 6));
}

#define KILN_FAKE_CTYPE_f32 float
#define KILN_FAKE_CTYPE_f16 kiln_f16
#define KILN_FAKE_CTYPE_bf16 kiln_bf16
#define KILN_FAKE_RUN_fwd run_fwd
#define KILN_FAKE_RUN_bwd run_bwd
#define KILN_FAKE_IS_FWD_fwd true
#define KILN_FAKE_IS_FWD_bwd false
#define KILN_FAKE_DROPOUT_(unit, dir, dt, v)                                                       \
  {"kiln_" #unit "_" #dir "_" #dt "_" #v, kThreads, plan,                                          \
   KILN_FAKE_RUN_##dir<KILN_FAKE_CTYPE_##dt, kiln_##unit##_##dir##_##dt##_##v>,                    \
   &kInfo<KILN_FAKE_CTYPE_##dt, KILN_FAKE_IS_FWD_##dir>},
const entry kEntries[] = {KILN_BIAS_DROPOUT_ADD_ENTRIES(KILN_FAKE_DROPOUT_)};
#undef KILN_FAKE_DROPOUT_

} // namespace

const family kFamily_dropout = {kEntries, (int)(sizeof kEntries / sizeof *kEntries)};

} // namespace kiln_fake
