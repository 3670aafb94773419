/* fake_cross_entropy.cpp — the cross_entropy family: every entry point of
 * kernels/cross_entropy/cross_entropy.def (docs/kernels/cross_entropy.md),
 * from the kernel source compiled as host C++, with its launch contract:
 *   - blockDim.x: 512 for fwd, stats, bwd; 256 for rescale, loss; 32 for err;
 *   - rows >= 0; vocab_size / vocab_part >= 1; stats: 0 <= vocab_start and
 *     vocab_start + vocab_part <= vocab_size; bwd: vocab_start >= 0;
 *   - logits hold rows * vocab elements; loss, lse, row_max, sumexp, tgt,
 *     gmax, dloss hold rows floats, target rows int64; the error block is
 *     64 bytes. Nothing may overlap (no op works in place but bwd, whose
 *     logits are its only tensor argument). */
#include <limits.h> /* LLONG_MAX */
#include <stdio.h>  /* snprintf */

#include "fake_kernels.h"

/* Last: the prelude (through the entries header) defines `asm`. */
#include "cross_entropy_entries.h"

namespace kiln_fake {
namespace {

enum kind { kFwd, kStats, kBwd, kRescale, kLoss, kErr };

struct ce_info {
  int kind;
  int dtype;
  unsigned elem_bytes;
};

bool fail(std::string *why, const char *fmt, long long a, long long b = 0, long long c = 0) {
  char buf[200];
  snprintf(buf, sizeof buf, fmt, a, b, c);
  *why = buf;
  return false;
}

struct adder {
  void *const *p;
  launch_plan *out;
  void operator()(const char *name, int i, unsigned long long n, unsigned align, bool written) {
    out->buf[out->nbuf++] = buffer_use{name, param<uintptr_t>(p, i), n, align, written, false};
  }
};

/* rows * cols * elem bytes, or false when it overflows. */
bool extent(long long rows, long long cols, unsigned elem, unsigned long long *bytes,
            std::string *why) {
  if (cols > 0 && rows > LLONG_MAX / cols / (long long)elem)
    return fail(why, "rows %lld x %lld columns overflows", rows, cols);
  *bytes = (unsigned long long)(rows * cols) * elem;
  return true;
}

bool plan(const entry &e, void *const *p, launch_plan *out, std::string *why) {
  const ce_info &s = *(const ce_info *)e.info;
  adder add{p, out};
  unsigned long long lb = 0;
  long long rows;
  switch (s.kind) {
  case kFwd: { /* loss, lse, logits, target, rows, vocab_size, ignore_index, err */
    rows = param<long long>(p, 4);
    const int v = param<int>(p, 5);
    if (rows < 0) return fail(why, "rows %lld < 0", rows);
    if (v < 1) return fail(why, "vocab_size %lld < 1", v);
    if (!extent(rows, v, s.elem_bytes, &lb, why)) return false;
    add("loss", 0, (unsigned long long)rows * 4, 4, true);
    add("lse", 1, (unsigned long long)rows * 4, 4, true);
    add("logits", 2, lb, s.elem_bytes, false);
    add("target", 3, (unsigned long long)rows * 8, 8, false);
    add("err", 7, 64, 8, true);
    out->out = 0;
    break;
  }
  case kStats: { /* row_max, sumexp, tgt, logits, target, rows, vocab_part, vocab_start,
                    vocab_size, ignore_index, err */
    rows = param<long long>(p, 5);
    const int vp = param<int>(p, 6);
    const long long vs = param<long long>(p, 7), vz = param<long long>(p, 8);
    if (rows < 0) return fail(why, "rows %lld < 0", rows);
    if (vp < 1) return fail(why, "vocab_part %lld < 1", vp);
    if (vs < 0 || vz < 1 || vs > vz - vp)
      return fail(why, "partition [%lld, +%lld) is not inside the vocabulary [0, %lld)", vs, vp,
                  vz);
    if (!extent(rows, vp, s.elem_bytes, &lb, why)) return false;
    add("row_max", 0, (unsigned long long)rows * 4, 4, true);
    add("sumexp", 1, (unsigned long long)rows * 4, 4, true);
    add("tgt", 2, (unsigned long long)rows * 4, 4, true);
    add("logits", 3, lb, s.elem_bytes, false);
    add("target", 4, (unsigned long long)rows * 8, 8, false);
    add("err", 10, 64, 8, true);
    out->out = 0;
    break;
  }
  case kBwd: { /* logits, lse, dloss, target, rows, vocab_part, vocab_start, ignore_index */
    rows = param<long long>(p, 4);
    const int vp = param<int>(p, 5);
    const long long vs = param<long long>(p, 6);
    if (rows < 0) return fail(why, "rows %lld < 0", rows);
    if (vp < 1) return fail(why, "vocab_part %lld < 1", vp);
    if (vs < 0 || vs > LLONG_MAX - vp) return fail(why, "vocab_start %lld out of range", vs);
    if (!extent(rows, vp, s.elem_bytes, &lb, why)) return false;
    add("logits", 0, lb, s.elem_bytes, true);
    add("lse", 1, (unsigned long long)rows * 4, 4, false);
    add("dloss", 2, (unsigned long long)rows * 4, 4, false);
    add("target", 3, (unsigned long long)rows * 8, 8, false);
    out->out = 0;
    out->out_dtype = s.dtype;
    return true;
  }
  case kRescale: { /* sumexp, row_max, gmax, rows */
    rows = param<long long>(p, 3);
    if (rows < 0) return fail(why, "rows %lld < 0", rows);
    add("sumexp", 0, (unsigned long long)rows * 4, 4, true);
    add("row_max", 1, (unsigned long long)rows * 4, 4, false);
    add("gmax", 2, (unsigned long long)rows * 4, 4, false);
    out->out = 0;
    break;
  }
  case kLoss: { /* loss, lse, gmax, sumexp, tgt, target, rows, ignore_index */
    rows = param<long long>(p, 6);
    if (rows < 0) return fail(why, "rows %lld < 0", rows);
    add("loss", 0, (unsigned long long)rows * 4, 4, true);
    add("lse", 1, (unsigned long long)rows * 4, 4, true);
    add("gmax", 2, (unsigned long long)rows * 4, 4, false);
    add("sumexp", 3, (unsigned long long)rows * 4, 4, false);
    add("tgt", 4, (unsigned long long)rows * 4, 4, false);
    add("target", 5, (unsigned long long)rows * 8, 8, false);
    out->out = 0;
    break;
  }
  default: { /* err, target, rows, vocab_size */
    rows = param<long long>(p, 2);
    if (rows < 1) return fail(why, "rows %lld < 1", rows);
    if (param<long long>(p, 3) < 1) return fail(why, "vocab_size %lld < 1", param<long long>(p, 3));
    add("err", 0, 64, 8, true);
    add("target", 1, (unsigned long long)rows * 8, 8, false);
    out->out = -1;
    return true;
  }
  }
  out->out_dtype = kF32;
  return true;
}

template <class T, void (*F)(float *, float *, const T *, const long long *, long long, int,
                             long long, kiln_op_error *)>
void run_fwd(void *const *p) {
  F(param<float *>(p, 0), param<float *>(p, 1), param<const T *>(p, 2),
    param<const long long *>(p, 3), param<long long>(p, 4), param<int>(p, 5),
    param<long long>(p, 6), param<kiln_op_error *>(p, 7));
}

template <class T, void (*F)(float *, float *, float *, const T *, const long long *, long long,
                             int, long long, long long, long long, kiln_op_error *)>
void run_stats(void *const *p) {
  F(param<float *>(p, 0), param<float *>(p, 1), param<float *>(p, 2), param<const T *>(p, 3),
    param<const long long *>(p, 4), param<long long>(p, 5), param<int>(p, 6),
    param<long long>(p, 7), param<long long>(p, 8), param<long long>(p, 9),
    param<kiln_op_error *>(p, 10));
}

template <class T, void (*F)(T *, const float *, const float *, const long long *, long long, int,
                             long long, long long)>
void run_bwd(void *const *p) {
  F(param<T *>(p, 0), param<const float *>(p, 1), param<const float *>(p, 2),
    param<const long long *>(p, 3), param<long long>(p, 4), param<int>(p, 5),
    param<long long>(p, 6), param<long long>(p, 7));
}

void run_rescale(void *const *p) {
  kiln_cross_entropy_rescale_f32_g(param<float *>(p, 0), param<const float *>(p, 1),
                                   param<const float *>(p, 2), param<long long>(p, 3));
}

void run_loss(void *const *p) {
  kiln_cross_entropy_loss_f32_g(param<float *>(p, 0), param<float *>(p, 1),
                                param<const float *>(p, 2), param<const float *>(p, 3),
                                param<const float *>(p, 4), param<const long long *>(p, 5),
                                param<long long>(p, 6), param<long long>(p, 7));
}

void run_err(void *const *p) {
  kiln_cross_entropy_err_i64_g(param<kiln_op_error *>(p, 0), param<const long long *>(p, 1),
                               param<long long>(p, 2), param<long long>(p, 3));
}

const ce_info kFwdF32 = {kFwd, kF32, 4}, kFwdF16 = {kFwd, kF16, 2}, kFwdBf16 = {kFwd, kBf16, 2};
const ce_info kStF32 = {kStats, kF32, 4}, kStF16 = {kStats, kF16, 2}, kStBf16 = {kStats, kBf16, 2};
const ce_info kBwdF32 = {kBwd, kF32, 4}, kBwdF16 = {kBwd, kF16, 2}, kBwdBf16 = {kBwd, kBf16, 2};
const ce_info kRescaleI = {kRescale, kF32, 4}, kLossI = {kLoss, kF32, 4}, kErrI = {kErr, kF32, 8};

#define KILN_FAKE_CE_DT_(dt, T, fi, si, bi)                                                        \
  {"kiln_cross_entropy_fwd_" #dt "_g", 512, plan, run_fwd<T, kiln_cross_entropy_fwd_##dt##_g>,     \
   &fi},                                                                                           \
      {"kiln_cross_entropy_stats_" #dt "_g", 512, plan,                                            \
       run_stats<T, kiln_cross_entropy_stats_##dt##_g>, &si},                                      \
      {"kiln_cross_entropy_bwd_" #dt "_g", 512, plan, run_bwd<T, kiln_cross_entropy_bwd_##dt##_g>, \
       &bi},
const entry kEntries[] = {
    KILN_FAKE_CE_DT_(f32, float, kFwdF32, kStF32, kBwdF32)
        KILN_FAKE_CE_DT_(f16, kiln_f16, kFwdF16, kStF16, kBwdF16)
            KILN_FAKE_CE_DT_(bf16, kiln_bf16, kFwdBf16, kStBf16, kBwdBf16){
                "kiln_cross_entropy_rescale_f32_g", 256, plan, run_rescale, &kRescaleI},
    {"kiln_cross_entropy_loss_f32_g", 256, plan, run_loss, &kLossI},
    {"kiln_cross_entropy_err_i64_g", 32, plan, run_err, &kErrI},
};
#undef KILN_FAKE_CE_DT_

/* Every row of cross_entropy.def has an entry here, and no other. */
#define KILN_FAKE_CE_COUNT_(...) +1
static_assert(sizeof kEntries / sizeof *kEntries ==
                  0 KILN_CROSS_ENTROPY_ENTRIES(KILN_FAKE_CE_COUNT_),
              "fake_cross_entropy.cpp: an entry of cross_entropy.def is missing");
#undef KILN_FAKE_CE_COUNT_

} // namespace

const family kFamily_cross_entropy = {kEntries, (int)(sizeof kEntries / sizeof *kEntries)};

} // namespace kiln_fake
