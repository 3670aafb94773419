/* fake_rope.cpp — the rope family: every entry point of kernels/rope/rope.def
 * (docs/kernels/rope.md), from the kernel source tests/emu compiles, with its
 * launch contract:
 *   - blockDim.x is KILN_ROPE_THREADS (256);
 *   - s, b, h, d >= 1; rot_dim even, 2 <= rot_dim <= d; layout 0 or 1;
 *     1 <= bchunk <= b;
 *   - x and y hold s*b*h*d elements (y may be x, never a partial overlap);
 *     angles holds s * rot_dim/2 floats. */
#include <limits.h> /* LLONG_MAX */
#include <stdio.h>  /* snprintf */

#include "fake_kernels.h"

/* Last: the prelude (through rope_entries.h) defines `asm`. */
#include "rope_entries.h" /* the entry points' declarations (tests/emu) */

namespace kiln_fake {
namespace {

constexpr unsigned kThreads = 256; /* KILN_ROPE_THREADS of rope.cu */

struct rope_info {
  int dtype;
  unsigned elem_bytes;
};
const rope_info kF32Info = {kF32, 4}, kF16Info = {kF16, 2}, kBf16Info = {kBf16, 2};

bool fail(std::string *why, const char *fmt, long long a, long long b = 0, long long c = 0) {
  char buf[200];
  snprintf(buf, sizeof buf, fmt, a, b, c);
  *why = buf;
  return false;
}

/* Parameters: (y, x, angles, s, b, h, d, rot_dim, layout, bchunk). */
bool plan(const entry &e, void *const *p, launch_plan *out, std::string *why) {
  const rope_info &ri = *(const rope_info *)e.info;
  const int s = param<int>(p, 3), b = param<int>(p, 4), h = param<int>(p, 5), d = param<int>(p, 6);
  const int rot = param<int>(p, 7), layout = param<int>(p, 8), bchunk = param<int>(p, 9);
  if (s < 1 || b < 1 || h < 1)
    return fail(why, "s %lld, b %lld, h %lld: each must be >= 1", s, b, h);
  if (d < 1) return fail(why, "d %lld < 1", d);
  if (rot < 2 || rot > d || rot % 2)
    return fail(why, "rot_dim %lld must be even and in [2, d = %lld]", rot, d);
  if (layout != 0 && layout != 1) return fail(why, "layout %lld is neither 0 nor 1", layout);
  if (bchunk < 1 || bchunk > b) return fail(why, "bchunk %lld not in [1, b = %lld]", bchunk, b);
  long long n = 0;
  if (__builtin_mul_overflow((long long)s * b, (long long)h * d, &n) ||
      n > LLONG_MAX / (long long)ri.elem_bytes)
    return fail(why, "s %lld x b %lld x h*d overflows", s, b);
  const unsigned long long bytes = (unsigned long long)n * ri.elem_bytes;
  auto add = [&](const char *name, int i, unsigned long long nb, unsigned align, bool written,
                 bool in_place_ok) {
    out->buf[out->nbuf++] =
        buffer_use{name, param<uintptr_t>(p, i), nb, align, written, in_place_ok};
  };
  add("y", 0, bytes, ri.elem_bytes, true, true);
  add("x", 1, bytes, ri.elem_bytes, false, true);
  add("angles", 2, (unsigned long long)s * (unsigned long long)(rot / 2) * 4u, 4, false, false);
  out->out = 0;
  out->out_dtype = ri.dtype;
  return true;
}

template <class T, void (*F)(T *, const T *, const float *, int, int, int, int, int, int, int)>
void run(void *const *p) {
  F(param<T *>(p, 0), param<const T *>(p, 1), param<const float *>(p, 2), param<int>(p, 3),
    param<int>(p, 4), param<int>(p, 5), param<int>(p, 6), param<int>(p, 7), param<int>(p, 8),
    param<int>(p, 9));
}

#define KILN_FAKE_ROPE_(unit, dir, dt, v)                                                          \
  {"kiln_" #unit "_" #dir "_" #dt "_" #v, kThreads, plan,                                          \
   run<kiln_emu_rope_##dt, kiln_##unit##_##dir##_##dt##_##v>, &k_##dt##_info},
const rope_info &k_f32_info = kF32Info, &k_f16_info = kF16Info, &k_bf16_info = kBf16Info;
const entry kEntries[] = {KILN_ROPE_ENTRIES(KILN_FAKE_ROPE_)};
#undef KILN_FAKE_ROPE_

} // namespace

const family kFamily_rope = {kEntries, (int)(sizeof kEntries / sizeof *kEntries)};

} // namespace kiln_fake
