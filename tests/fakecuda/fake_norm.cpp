/* fake_norm.cpp — the norm family: every entry point of
 * kernels/norm/layer_norm.def and rms_norm.def (docs/kernels/norm.md), from
 * the kernel sources tests/emu compiles, with its launch contract:
 *   - blockDim.x is KILN_NORM_THREADS (256) for every entry but the r
 *     backward's, KILN_NORM_BWD_R_THREADS (512);
 *   - fwd: rows >= 0, cols >= 1, eps >= 0; the r path also needs
 *     cols % KILN_VEC(dt) == 0, cols <= its capacity and y, x, gamma (and
 *     beta) 16-byte aligned; x, y hold rows*cols elements (y may be x),
 *     gamma, beta cols weights, mean, rstd rows floats (either may be NULL);
 *   - bwd: rows >= 1, cols >= 1, 1 <= parts <= rows; the r path as above for
 *     dx, dy, x, gamma; dx may be dy; ws_g (and for layer_norm ws_b) hold
 *     parts*cols floats, 16-byte aligned on the r path;
 *   - bwdw: parts >= 1, cols >= 1; dgamma (dbeta) cols weights.
 * rms_norm ignores mean, beta, ws_b and dbeta: they are not looked at. */
#include <limits.h> /* LLONG_MAX */
#include <math.h>   /* isfinite */
#include <stdio.h>  /* snprintf */

#include "fake_kernels.h"

/* Last: the prelude (through norm_entries.h) defines `asm`. */
#include "norm_entries.h" /* the entry points' declarations (tests/emu) */

namespace kiln_fake {
namespace {

constexpr unsigned kThreads = 256;     /* KILN_NORM_THREADS */
constexpr unsigned kBwdRThreads = 512; /* KILN_NORM_BWD_R_THREADS */
constexpr long long kRegVecs = 4;      /* KILN_NORM_R_VECS */

enum { kFwd, kBwd, kBwdw };

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr int value = kF32; };
template <> struct dtype_of<kiln_f16> { static constexpr int value = kF16; };
template <> struct dtype_of<kiln_bf16> { static constexpr int value = kBf16; };

struct norm_info {
  bool ln;
  int dir;
  bool reg; /* r path */
  int dtype;
  unsigned t_bytes, w_bytes;
};
template <bool LN, int D, bool R, class T, class W>
const norm_info kInfo = {LN, D, R, dtype_of<T>::value, sizeof(T), sizeof(W)};

bool fail(std::string *why, const char *fmt, long long a = 0, long long b = 0, long long c = 0) {
  char buf[200];
  snprintf(buf, sizeof buf, fmt, a, b, c);
  *why = buf;
  return false;
}

bool aligned16(uintptr_t p) {
  return (p & 15u) == 0;
}

bool plan(const entry &e, void *const *p, launch_plan *out, std::string *why) {
  const norm_info &s = *(const norm_info *)e.info;
  auto add = [&](const char *name, int i, unsigned long long n, unsigned align, bool written,
                 bool in_place_ok) {
    out->buf[out->nbuf++] =
        buffer_use{name, param<uintptr_t>(p, i), n, align, written, in_place_ok};
  };
  if (s.dir == kBwdw) {
    const int parts = param<int>(p, 4), cols = param<int>(p, 5);
    /* parts = 0: the backward of no rows, whose dgamma (dbeta) are zeros */
    if (parts < 0 || cols < 1)
      return fail(why, "parts %lld, cols %lld: want parts >= 0, cols >= 1", parts, cols);
    add("dgamma", 0, (unsigned long long)cols * s.w_bytes, s.w_bytes, true, false);
    if (s.ln) add("dbeta", 1, (unsigned long long)cols * s.w_bytes, s.w_bytes, true, false);
    const unsigned long long ws = (unsigned long long)parts * cols * 4;
    if (ws) add("ws_g", 2, ws, 4, false, false);
    if (ws && s.ln) add("ws_b", 3, ws, 4, false, false);
    out->out = 0;
    out->out_dtype = s.dtype;
    return true;
  }
  const long long rows = param<long long>(p, s.dir == kFwd ? 6 : 8);
  const int cols = param<int>(p, s.dir == kFwd ? 7 : 9);
  if (rows < (s.dir == kFwd ? 0 : 1)) return fail(why, "rows %lld is too small", rows);
  if (cols < 1) return fail(why, "cols %lld < 1", cols);
  if (rows > LLONG_MAX / cols / (long long)s.t_bytes)
    return fail(why, "rows %lld x cols %lld overflows", rows, cols);
  const unsigned long long bytes = (unsigned long long)(rows * cols) * s.t_bytes;
  const unsigned long long wbytes = (unsigned long long)cols * s.w_bytes;
  const long long vec = 16 / s.t_bytes, cap = kThreads * kRegVecs * vec;
  if (s.reg && (cols % vec || cols > cap))
    return fail(why, "cols %lld is not a multiple of %lld at most %lld (a wrong path pick)", cols,
                vec, cap);
  if (s.dir == kFwd) {
    const float eps = param<float>(p, 8);
    if (!(eps >= 0.f) || !isfinite(eps)) return fail(why, "eps is negative or not finite");
    add("y", 0, bytes, s.t_bytes, true, true);
    add("mean", 1, s.ln && param<uintptr_t>(p, 1) ? (unsigned long long)rows * 4 : 0, 4, true,
        false);
    add("rstd", 2, param<uintptr_t>(p, 2) ? (unsigned long long)rows * 4 : 0, 4, true, false);
    add("x", 3, bytes, s.t_bytes, false, true);
    add("gamma", 4, wbytes, s.w_bytes, false, false);
    if (s.ln) add("beta", 5, wbytes, s.w_bytes, false, false);
    if (s.reg)
      for (int i : {0, 3, 4, 5})
        if ((i != 5 || s.ln) && !aligned16(param<uintptr_t>(p, i)))
          return fail(why, "r path: argument %lld is not 16-byte aligned", i);
  } else {
    const int parts = param<int>(p, 10);
    if (parts < 1 || parts > rows)
      return fail(why, "parts %lld outside [1, rows %lld]", parts, rows);
    const unsigned long long ws = (unsigned long long)parts * cols * 4;
    add("dx", 0, bytes, s.t_bytes, true, true);
    add("ws_g", 1, ws, 4, true, false);
    if (s.ln) add("ws_b", 2, ws, 4, true, false);
    add("dy", 3, bytes, s.t_bytes, false, true);
    add("x", 4, bytes, s.t_bytes, false, false);
    if (s.ln) add("mean", 5, (unsigned long long)rows * 4, 4, false, false);
    add("rstd", 6, (unsigned long long)rows * 4, 4, false, false);
    add("gamma", 7, wbytes, s.w_bytes, false, false);
    if (s.reg)
      for (int i : {0, 1, 2, 3, 4, 7})
        if ((i != 2 || s.ln) && !aligned16(param<uintptr_t>(p, i)))
          return fail(why, "r path: argument %lld is not 16-byte aligned", i);
  }
  out->out = 0;
  out->out_dtype = s.dtype;
  return true;
}

template <class T, class W,
          void (*F)(T *, float *, float *, const T *, const W *, const W *, long long, int, float)>
void run_fwd(void *const *p) {
  F(param<T *>(p, 0), param<float *>(p, 1), param<float *>(p, 2), param<const T *>(p, 3),
    param<const W *>(p, 4), param<const W *>(p, 5), param<long long>(p, 6), param<int>(p, 7),
    param<float>(p, 8));
}

template <class T, class W,
          void (*F)(T *, float *, float *, const T *, const T *, const float *, const float *,
                    const W *, long long, int, int)>
void run_bwd(void *const *p) {
  F(param<T *>(p, 0), param<float *>(p, 1), param<float *>(p, 2), param<const T *>(p, 3),
    param<const T *>(p, 4), param<const float *>(p, 5), param<const float *>(p, 6),
    param<const W *>(p, 7), param<long long>(p, 8), param<int>(p, 9), param<int>(p, 10));
}

template <class W, void (*F)(W *, W *, const float *, const float *, int, int)>
void run_bwdw(void *const *p) {
  F(param<W *>(p, 0), param<W *>(p, 1), param<const float *>(p, 2), param<const float *>(p, 3),
    param<int>(p, 4), param<int>(p, 5));
}

#define KILN_FAKE_LN_layer_norm true
#define KILN_FAKE_LN_rms_norm false
#define KILN_FAKE_REG_wf32_r true
#define KILN_FAKE_REG_wf16_r true
#define KILN_FAKE_REG_wbf16_r true
#define KILN_FAKE_REG_wf32_g false
#define KILN_FAKE_REG_wf16_g false
#define KILN_FAKE_REG_wbf16_g false
#define KILN_FAKE_REG_g false

#define KILN_FAKE_NORM_fwd(unit, dt, v)                                                            \
  {"kiln_" #unit "_fwd_" #dt "_" #v, kThreads, plan,                                               \
   run_fwd<KILN_EMU_NORM_CT_##dt, KILN_EMU_NORM_W_##v, kiln_##unit##_fwd_##dt##_##v>,              \
   &kInfo<KILN_FAKE_LN_##unit, kFwd, KILN_FAKE_REG_##v, KILN_EMU_NORM_CT_##dt,                     \
          KILN_EMU_NORM_W_##v>},
#define KILN_FAKE_NORM_bwd(unit, dt, v)                                                            \
  {"kiln_" #unit "_bwd_" #dt "_" #v, KILN_FAKE_REG_##v ? kBwdRThreads : kThreads, plan,            \
   run_bwd<KILN_EMU_NORM_CT_##dt, KILN_EMU_NORM_W_##v, kiln_##unit##_bwd_##dt##_##v>,              \
   &kInfo<KILN_FAKE_LN_##unit, kBwd, KILN_FAKE_REG_##v, KILN_EMU_NORM_CT_##dt,                     \
          KILN_EMU_NORM_W_##v>},
#define KILN_FAKE_NORM_bwdw(unit, dt, v)                                                           \
  {"kiln_" #unit "_bwdw_" #dt "_" #v, kThreads, plan,                                              \
   run_bwdw<KILN_EMU_NORM_CT_##dt, kiln_##unit##_bwdw_##dt##_##v>,                                 \
   &kInfo<KILN_FAKE_LN_##unit, kBwdw, false, KILN_EMU_NORM_CT_##dt, KILN_EMU_NORM_CT_##dt>},
#define KILN_FAKE_NORM_(unit, dir, dt, v) KILN_FAKE_NORM_##dir(unit, dt, v)
const entry kEntries[] = {KILN_LAYER_NORM_ENTRIES(KILN_FAKE_NORM_)
                              KILN_RMS_NORM_ENTRIES(KILN_FAKE_NORM_)};
#undef KILN_FAKE_NORM_

} // namespace

const family kFamily_norm = {kEntries, (int)(sizeof kEntries / sizeof *kEntries)};

} // namespace kiln_fake
