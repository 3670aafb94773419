/* fake_embedding.cpp — the embedding family: every entry point of
 * kernels/embedding/embedding.def (docs/kernels/embedding.md), from the
 * kernel source tests/emu's prelude compiles, with its launch contract:
 *   - blockDim.x is 256 (32 for err, 1024 for scan);
 *   - n_tokens >= 0, hidden >= 1, 0 <= vocab_start < vocab_end <= vocab_size
 *     where read; shift in [0, 64) and a multiple of 8; piece >= 1;
 *   - buffers: y, dy [n_tokens, hidden] of dt; weight, dweight [vocab_end -
 *     vocab_start, hidden] (dweight fp32); ids, keys, pos [n_tokens] int64;
 *     hist [256 * ceil(n_tokens / 2048)] int64 (scan: [count]); slots
 *     [(n_tokens - 1) / piece, hidden] fp32 (written by pieces, read by
 *     sorted); the error block 64 bytes. Nothing may partially overlap. */
#include <limits.h> /* LLONG_MAX */
#include <stdio.h>  /* snprintf */

#include "fake_kernels.h"

/* Last: the prelude (through embedding_entries.h) defines `asm`. */
#include "embedding_entries.h" /* the entry points' declarations (tests/emu) */

namespace kiln_fake {
namespace {

enum kind { kFwd, kErr, kBwdAtomic, kBwdSorted, kBwdPieces, kKeys, kHist, kScan, kScatter };

struct emb_info {
  int kind;
  int dtype;
  unsigned elem_bytes;
};

const long long kTile = 2048, kRadix = 256;

bool fail(std::string *why, const char *fmt, long long a, long long b = 0, long long c = 0) {
  char buf[200];
  snprintf(buf, sizeof buf, fmt, a, b, c);
  *why = buf;
  return false;
}

/* a * b * c bytes, or false on overflow */
bool bytes_of(long long a, long long b, long long c, unsigned long long *out) {
  if (a < 0 || b < 0 || c < 0) return false;
  if (a && b > LLONG_MAX / a) return false;
  if (a * b != 0 && c > LLONG_MAX / (a * b)) return false;
  *out = (unsigned long long)(a * b * c);
  return true;
}

bool check_vocab(long long vs, long long ve, long long vsize, bool with_size, std::string *why) {
  if (vs < 0 || ve <= vs) return fail(why, "vocab [%lld, %lld) is not a non-empty range", vs, ve);
  if (with_size && ve > vsize)
    return fail(why, "vocab_end %lld is past vocab_size %lld", ve, vsize);
  return true;
}

bool plan(const entry &e, void *const *p, launch_plan *out, std::string *why) {
  const emb_info &s = *(const emb_info *)e.info;
  auto add = [&](const char *name, int i, unsigned long long n, unsigned align, bool written) {
    out->buf[out->nbuf++] = buffer_use{name, param<uintptr_t>(p, i), n, align, written, false};
  };
  unsigned long long a = 0, b = 0, c = 0;
  switch (s.kind) {
  case kFwd: {
    const long long n = param<long long>(p, 3), vs = param<long long>(p, 5),
                    ve = param<long long>(p, 6), vsize = param<long long>(p, 7);
    const int hidden = param<int>(p, 4);
    if (n < 0) return fail(why, "n_tokens %lld < 0", n);
    if (hidden < 1) return fail(why, "hidden %lld < 1", hidden);
    if (!check_vocab(vs, ve, vsize, true, why)) return false;
    if (!bytes_of(n, hidden, s.elem_bytes, &a) || !bytes_of(ve - vs, hidden, s.elem_bytes, &b) ||
        !bytes_of(n, 8, 1, &c))
      return fail(why, "n_tokens %lld x hidden %lld overflows", n, hidden);
    add("y", 0, a, s.elem_bytes, true);
    add("ids", 1, c, 8, false);
    add("weight", 2, b, s.elem_bytes, false);
    add("err", 8, 64, 8, true);
    out->out = 0;
    break;
  }
  case kErr: {
    const long long n = param<long long>(p, 2), vsize = param<long long>(p, 3);
    if (n < 1) return fail(why, "n_tokens %lld < 1", n);
    if (vsize < 1) return fail(why, "vocab_size %lld < 1", vsize);
    if (!bytes_of(n, 8, 1, &c)) return fail(why, "n_tokens %lld overflows", n);
    add("err", 0, 64, 8, true);
    add("ids", 1, c, 8, false);
    out->out = -1;
    break;
  }
  case kBwdAtomic: {
    const long long n = param<long long>(p, 3), vs = param<long long>(p, 5),
                    ve = param<long long>(p, 6);
    const int hidden = param<int>(p, 4);
    if (n < 0) return fail(why, "n_tokens %lld < 0", n);
    if (hidden < 1) return fail(why, "hidden %lld < 1", hidden);
    if (!check_vocab(vs, ve, 0, false, why)) return false;
    if (!bytes_of(ve - vs, hidden, 4, &a) || !bytes_of(n, hidden, s.elem_bytes, &b) ||
        !bytes_of(n, 8, 1, &c))
      return fail(why, "n_tokens %lld x hidden %lld overflows", n, hidden);
    add("dweight", 0, a, 4, true);
    add("dy", 1, b, s.elem_bytes, false);
    add("ids", 2, c, 8, false);
    out->out = 0;
    break;
  }
  case kBwdSorted:
  case kBwdPieces: {
    const bool sorted = s.kind == kBwdSorted; /* sorted: dweight, dy, keys, pos, slots, ... */
    const int o = sorted ? 1 : 0;             /* pieces: slots, dy, keys, pos, ... */
    const long long n = param<long long>(p, 4 + o), rows = param<long long>(p, 6 + o);
    const int hidden = param<int>(p, 5 + o), piece = param<int>(p, 7 + o);
    unsigned long long sl = 0;
    if (n < 0) return fail(why, "n_tokens %lld < 0", n);
    if (hidden < 1) return fail(why, "hidden %lld < 1", hidden);
    if (rows < 1) return fail(why, "rows %lld < 1", rows);
    if (piece < 1) return fail(why, "piece %lld < 1", piece);
    if (!bytes_of(rows, hidden, 4, &a) || !bytes_of(n, hidden, s.elem_bytes, &b) ||
        !bytes_of(n, 8, 1, &c) || !bytes_of(n > 0 ? (n - 1) / piece : 0, hidden, 4, &sl))
      return fail(why, "n_tokens %lld x hidden %lld overflows", n, hidden);
    if (sorted) add("dweight", 0, a, 4, true);
    add("dy", 1, b, s.elem_bytes, false);
    add("keys", 2, c, 8, false);
    add("pos", 3, c, 8, false);
    add("slots", sorted ? 4 : 0, sl, 4, !sorted);
    out->out = sorted ? 0 : 3; /* dweight, or the slots */
    break;
  }
  case kKeys: {
    const long long n = param<long long>(p, 3), vs = param<long long>(p, 4),
                    ve = param<long long>(p, 5);
    if (n < 0) return fail(why, "n_tokens %lld < 0", n);
    if (!check_vocab(vs, ve, 0, false, why)) return false;
    if (!bytes_of(n, 8, 1, &c)) return fail(why, "n_tokens %lld overflows", n);
    add("keys", 0, c, 8, true);
    add("pos", 1, c, 8, true);
    add("ids", 2, c, 8, false);
    out->out = -1; /* integers: nothing for KILN_FAKE_CUDA_WRONG */
    break;
  }
  case kHist:
  case kScatter: {
    const bool h = s.kind == kHist;
    const long long n = param<long long>(p, h ? 2 : 5);
    const int shift = param<int>(p, h ? 3 : 6);
    if (n < 0) return fail(why, "n_tokens %lld < 0", n);
    if (shift < 0 || shift >= 64 || shift % 8)
      return fail(why, "shift %lld is not a multiple of 8 in [0, 64)", shift);
    if (!bytes_of(n, 8, 1, &c)) return fail(why, "n_tokens %lld overflows", n);
    a = (unsigned long long)((n + kTile - 1) / kTile) * kRadix * 8;
    if (h) {
      add("hist", 0, a, 8, true);
      add("keys", 1, c, 8, false);
    } else {
      add("keys_out", 0, c, 8, true);
      add("pos_out", 1, c, 8, true);
      add("keys_in", 2, c, 8, false);
      add("pos_in", 3, c, 8, false);
      add("hist", 4, a, 8, false);
    }
    out->out = -1;
    break;
  }
  case kScan: {
    const long long count = param<long long>(p, 1);
    if (count < 0) return fail(why, "count %lld < 0", count);
    if (!bytes_of(count, 8, 1, &a)) return fail(why, "count %lld overflows", count);
    add("hist", 0, a, 8, true);
    out->out = -1;
    break;
  }
  }
  out->out_dtype = s.kind == kFwd ? s.dtype : kF32;
  return true;
}

template <class T, void (*F)(T *, const kiln_i64 *, const T *, kiln_i64, int, kiln_i64, kiln_i64,
                             kiln_i64, kiln_op_error *)>
void run_fwd(void *const *p) {
  F(param<T *>(p, 0), param<const kiln_i64 *>(p, 1), param<const T *>(p, 2), param<kiln_i64>(p, 3),
    param<int>(p, 4), param<kiln_i64>(p, 5), param<kiln_i64>(p, 6), param<kiln_i64>(p, 7),
    param<kiln_op_error *>(p, 8));
}
template <class T,
          void (*F)(float *, const T *, const kiln_i64 *, kiln_i64, int, kiln_i64, kiln_i64)>
void run_bwd_atomic(void *const *p) {
  F(param<float *>(p, 0), param<const T *>(p, 1), param<const kiln_i64 *>(p, 2),
    param<kiln_i64>(p, 3), param<int>(p, 4), param<kiln_i64>(p, 5), param<kiln_i64>(p, 6));
}
template <class T, void (*F)(float *, const T *, const kiln_i64 *, const kiln_i64 *, const float *,
                             kiln_i64, int, kiln_i64, int)>
void run_bwd_sorted(void *const *p) {
  F(param<float *>(p, 0), param<const T *>(p, 1), param<const kiln_i64 *>(p, 2),
    param<const kiln_i64 *>(p, 3), param<const float *>(p, 4), param<kiln_i64>(p, 5),
    param<int>(p, 6), param<kiln_i64>(p, 7), param<int>(p, 8));
}
template <class T, void (*F)(float *, const T *, const kiln_i64 *, const kiln_i64 *, kiln_i64, int,
                             kiln_i64, int)>
void run_bwd_pieces(void *const *p) {
  F(param<float *>(p, 0), param<const T *>(p, 1), param<const kiln_i64 *>(p, 2),
    param<const kiln_i64 *>(p, 3), param<kiln_i64>(p, 4), param<int>(p, 5), param<kiln_i64>(p, 6),
    param<int>(p, 7));
}
void run_err(void *const *p) {
  kiln_embedding_err_i64_g(param<kiln_op_error *>(p, 0), param<const kiln_i64 *>(p, 1),
                           param<kiln_i64>(p, 2), param<kiln_i64>(p, 3));
}
void run_keys(void *const *p) {
  kiln_embedding_keys_i64_g(param<kiln_i64 *>(p, 0), param<kiln_i64 *>(p, 1),
                            param<const kiln_i64 *>(p, 2), param<kiln_i64>(p, 3),
                            param<kiln_i64>(p, 4), param<kiln_i64>(p, 5));
}
void run_hist(void *const *p) {
  kiln_embedding_hist_i64_g(param<kiln_i64 *>(p, 0), param<const kiln_i64 *>(p, 1),
                            param<kiln_i64>(p, 2), param<int>(p, 3));
}
void run_scan(void *const *p) {
  kiln_embedding_scan_i64_g(param<kiln_i64 *>(p, 0), param<kiln_i64>(p, 1));
}
void run_scatter(void *const *p) {
  kiln_embedding_scatter_i64_g(param<kiln_i64 *>(p, 0), param<kiln_i64 *>(p, 1),
                               param<const kiln_i64 *>(p, 2), param<const kiln_i64 *>(p, 3),
                               param<const kiln_i64 *>(p, 4), param<kiln_i64>(p, 5),
                               param<int>(p, 6));
}

template <int K, int D, unsigned B> const emb_info kInfo = {K, D, B};

#define KILN_FAKE_EMB_DT_(dt, ctype, D)                                                            \
  {"kiln_embedding_fwd_" #dt "_g", 256, plan, run_fwd<ctype, kiln_embedding_fwd_##dt##_g>,         \
   &kInfo<kFwd, D, sizeof(ctype)>},                                                                \
      {"kiln_embedding_bwd_" #dt "_atomic", 256, plan,                                             \
       run_bwd_atomic<ctype, kiln_embedding_bwd_##dt##_atomic>,                                    \
       &kInfo<kBwdAtomic, D, sizeof(ctype)>},                                                      \
      {"kiln_embedding_bwd_" #dt "_sorted", 256, plan,                                             \
       run_bwd_sorted<ctype, kiln_embedding_bwd_##dt##_sorted>,                                    \
       &kInfo<kBwdSorted, D, sizeof(ctype)>},                                                      \
      {"kiln_embedding_bwd_" #dt "_pieces", 256, plan,                                             \
       run_bwd_pieces<ctype, kiln_embedding_bwd_##dt##_pieces>,                                    \
       &kInfo<kBwdPieces, D, sizeof(ctype)>},
const entry kEntries[] = {
    KILN_FAKE_EMB_DT_(f32, float, kF32) KILN_FAKE_EMB_DT_(f16, kiln_f16, kF16)
        KILN_FAKE_EMB_DT_(bf16, kiln_bf16, kBf16){"kiln_embedding_err_i64_g", 32, plan, run_err,
                                                  &kInfo<kErr, kF32, 8>},
    {"kiln_embedding_keys_i64_g", 256, plan, run_keys, &kInfo<kKeys, kF32, 8>},
    {"kiln_embedding_hist_i64_g", 256, plan, run_hist, &kInfo<kHist, kF32, 8>},
    {"kiln_embedding_scan_i64_g", 1024, plan, run_scan, &kInfo<kScan, kF32, 8>},
    {"kiln_embedding_scatter_i64_g", 256, plan, run_scatter, &kInfo<kScatter, kF32, 8>},
};
#undef KILN_FAKE_EMB_DT_

/* every row of embedding.def has an entry here */
#define KILN_FAKE_EMB_COUNT_(u, d, t, v) +1
static_assert(sizeof kEntries / sizeof *kEntries == 0 KILN_EMBEDDING_ENTRIES(KILN_FAKE_EMB_COUNT_),
              "an embedding.def row without a launch contract in fake_embedding.cpp");
#undef KILN_FAKE_EMB_COUNT_

} // namespace

const family kFamily_embedding = {kEntries, (int)(sizeof kEntries / sizeof *kEntries)};

} // namespace kiln_fake
