/* fake_softmax.cpp — the softmax family: every entry point of
 * kernels/softmax/softmax_variants.def (docs/kernels.md, "Entry points"),
 * from the kernel sources tests/emu compiles, with its launch contract:
 *   - blockDim.x is the variant's thread count (the table's `threads`);
 *   - rows >= 0, 1 <= cols <= the variant's capacity (w: 32*elems,
 *     b: threads*elems, g: any);
 *   - the vector kinds (wv, bv, gv: 16-byte access): cols a multiple of
 *     16 / sizeof(element) and every tensor, the mask included, 16-byte
 *     aligned;
 *   - masked unit: sq, heads, mask_batches >= 1, rows = b*heads*sq and
 *     mask_batches 1 or b; the mask is [mask_batches, sq, cols] bytes;
 *   - causal unit: sq >= 1 and rows = attn_batches*sq;
 *   - x, y, dy, dx hold rows*cols elements; y may be x, dx may be dy or y
 *     (in place), nothing may partially overlap.
 * Arguments a unit ignores (the plain unit's mask, ...) are not looked at. */
#include <limits.h> /* LLONG_MAX */
#include <stdio.h>  /* snprintf */

#include "fake_kernels.h"

/* Last: the prelude (through softmax_entries.h) defines `asm`. */
#include "softmax_entries.h" /* the entry points' declarations (tests/emu) */

namespace kiln_fake {
namespace {

enum { kPlain, kMasked, kCausal };

constexpr bool same(const char *a, const char *b) {
  while (*a && *a == *b)
    ++a, ++b;
  return *a == *b;
}

/* What a unit of softmax_variants.def computes: a unit the fake does not know
 * is a compile error here, not a launch with unchecked arguments. */
constexpr int unit_kind(const char *u) {
  return same(u, "scaled_softmax")                       ? kPlain
         : same(u, "scaled_masked_softmax")              ? kMasked
         : same(u, "scaled_upper_triang_masked_softmax") ? kCausal
                                                         : -1;
}
template <int K> constexpr int checked_unit() {
  static_assert(K >= 0, "a softmax unit tests/fakecuda does not know: add its launch contract "
                        "to fake_softmax.cpp");
  return K;
}

struct variant {
  const char *name;
  char kind; /* w, b, g */
  bool vec;  /* wv, bv, gv */
  int elems;
  unsigned threads;
};
#define KILN_FAKE_VARIANT_(a, v, kind, elems, threads)                                             \
  {#v, #kind[0], #kind[1] == 'v', elems, threads},
constexpr variant kVariants[] = {KILN_SOFTMAX_VARIANTS(KILN_FAKE_VARIANT_, ~)};
#undef KILN_FAKE_VARIANT_

constexpr int variant_index(const char *v) {
  for (int i = 0; i < (int)(sizeof kVariants / sizeof *kVariants); ++i)
    if (same(kVariants[i].name, v)) return i;
  return -1;
}
template <int I> constexpr int checked_variant() {
  static_assert(I >= 0, "unreachable: every variant name comes from the same table");
  return I;
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr int value = kF32; };
template <> struct dtype_of<kiln_f16> { static constexpr int value = kF16; };
template <> struct dtype_of<kiln_bf16> { static constexpr int value = kBf16; };

struct softmax_info {
  int unit; /* kPlain, kMasked, kCausal */
  bool fwd;
  int dtype;
  unsigned elem_bytes;
  int variant; /* index into kVariants */
};
template <int U, class T, int V, bool F>
const softmax_info kInfo = {U, F, dtype_of<T>::value, sizeof(T), V};

bool fail(std::string *why, const char *fmt, long long a, long long b = 0, long long c = 0) {
  char buf[200];
  snprintf(buf, sizeof buf, fmt, a, b, c);
  *why = buf;
  return false;
}

/* Parameters: fwd (y, x, mask, scale, rows, cols, sq, heads, mask_batches),
 * bwd (dx, y, dy, scale, rows, cols, sq). */
bool plan(const entry &e, void *const *p, launch_plan *out, std::string *why) {
  const softmax_info &s = *(const softmax_info *)e.info;
  const variant &v = kVariants[s.variant];
  const long long rows = param<long long>(p, 4);
  const int cols = param<int>(p, 5), sq = param<int>(p, 6);
  if (rows < 0) return fail(why, "rows %lld < 0", rows);
  if (cols < 1) return fail(why, "cols %lld < 1", cols);
  const long long cap = v.kind == 'w'   ? 32LL * v.elems
                        : v.kind == 'b' ? (long long)v.threads * v.elems
                                        : 0;
  if (cap && cols > cap)
    return fail(why, "cols %lld is past this variant's capacity %lld (a wrong variant pick)", cols,
                cap);
  if (v.vec && cols % (16 / (int)s.elem_bytes) != 0)
    return fail(why,
                "cols %lld is not a whole number of 16-byte vectors of %lld-byte elements (a "
                "wrong variant pick)",
                cols, s.elem_bytes);
  if (rows > LLONG_MAX / cols / (long long)s.elem_bytes)
    return fail(why, "rows %lld x cols %lld overflows", rows, cols);
  const unsigned long long bytes = (unsigned long long)(rows * cols) * s.elem_bytes;
  long long mask_bytes = 0;
  if (s.fwd && s.unit == kMasked) {
    const int heads = param<int>(p, 7), mb = param<int>(p, 8);
    if (sq < 1 || heads < 1 || mb < 1)
      return fail(why, "sq %lld, heads %lld, mask_batches %lld: each must be >= 1", sq, heads, mb);
    const long long per_batch = (long long)heads * sq;
    if (rows % per_batch)
      return fail(why, "rows %lld is not a multiple of heads x sq = %lld", rows, per_batch);
    if (mb != 1 && mb != rows / per_batch)
      return fail(why, "mask_batches %lld is neither 1 nor the batch %lld", mb, rows / per_batch);
    mask_bytes = rows ? (long long)mb * sq * cols : 0;
  }
  if (s.unit == kCausal) {
    if (sq < 1) return fail(why, "sq %lld < 1", sq);
    if (rows % sq) return fail(why, "rows %lld is not a multiple of sq %lld", rows, sq);
  }
  auto add = [&](const char *name, int i, unsigned long long n, unsigned align, bool written,
                 bool in_place_ok) {
    out->buf[out->nbuf++] =
        buffer_use{name, param<uintptr_t>(p, i), n, v.vec ? 16u : align, written, in_place_ok};
  };
  if (s.fwd) {
    add("y", 0, bytes, s.elem_bytes, true, true);
    add("x", 1, bytes, s.elem_bytes, false, true);
    if (s.unit == kMasked) add("mask", 2, (unsigned long long)mask_bytes, 1, false, false);
  } else {
    add("dx", 0, bytes, s.elem_bytes, true, true);
    add("y", 1, bytes, s.elem_bytes, false, true);
    add("dy", 2, bytes, s.elem_bytes, false, true);
  }
  out->out = 0;
  out->out_dtype = s.dtype;
  return true;
}

template <class T,
          void (*F)(T *, const T *, const unsigned char *, float, long long, int, int, int, int)>
void run_fwd(void *const *p) {
  F(param<T *>(p, 0), param<const T *>(p, 1), param<const unsigned char *>(p, 2),
    param<float>(p, 3), param<long long>(p, 4), param<int>(p, 5), param<int>(p, 6),
    param<int>(p, 7), param<int>(p, 8));
}

template <class T, void (*F)(T *, const T *, const T *, float, long long, int, int)>
void run_bwd(void *const *p) {
  F(param<T *>(p, 0), param<const T *>(p, 1), param<const T *>(p, 2), param<float>(p, 3),
    param<long long>(p, 4), param<int>(p, 5), param<int>(p, 6));
}

#define KILN_FAKE_UNIT_(unit) checked_unit<unit_kind(#unit)>()
#define KILN_FAKE_VI_(v) checked_variant<variant_index(#v)>()
#define KILN_FAKE_SOFTMAX_(unit, dt, ctype, v)                                                     \
  {"kiln_" #unit "_fwd_" #dt "_" #v, kVariants[KILN_FAKE_VI_(v)].threads, plan,                    \
   run_fwd<ctype, kiln_##unit##_fwd_##dt##_##v>,                                                   \
   &kInfo<KILN_FAKE_UNIT_(unit), ctype, KILN_FAKE_VI_(v), true>},                                  \
      {"kiln_" #unit "_bwd_" #dt "_" #v, kVariants[KILN_FAKE_VI_(v)].threads, plan,                \
       run_bwd<ctype, kiln_##unit##_bwd_##dt##_##v>,                                               \
       &kInfo<KILN_FAKE_UNIT_(unit), ctype, KILN_FAKE_VI_(v), false>},
const entry kEntries[] = {KILN_EMU_SOFTMAX_FOR_EACH(KILN_FAKE_SOFTMAX_)};
#undef KILN_FAKE_SOFTMAX_

} // namespace

const family kFamily_softmax = {kEntries, (int)(sizeof kEntries / sizeof *kEntries)};

} // namespace kiln_fake
