/* kernels/softmax/<unit>.cu, compiled as host C++ and run on the fiber emulator
 * (runtime.h): every entry point (unit x direction x dtype x variant) computes
 * what docs/kernels.md says, for the column counts at each variant's edges,
 * broadcast and per-batch masks, fully masked rows, causal rows with sq != sk,
 * special values, in place, and grids smaller and larger than the rows.
 *
 * Environment:
 *   KILN_EMU_SEED   seed for inputs and scheduling (default fixed, printed)
 *   KILN_EMU_CASES  random cases on top of the fixed plan (default 100)
 *   KILN_EMU_ONLY   run only entry points whose name contains this text (the
 *                   fixed plan's cases stay the same; random ones are drawn
 *                   among the entry points left)
 *   KILN_EMU_SHARD  I/N: run the I-th of N disjoint shares of the cases
 *                   (0 <= I < N): the entry points whose index is I mod N,
 *                   the random cases whose number is I mod N, and shard 0
 *                   runs the picker's paths and the 64-bit row check; the N
 *                   shards together run exactly the cases one run does
 *                   (ctest runs them side by side)
 * Exit status 0 when every case matches; otherwise each failing case is
 * printed (FAIL and its parameters), then what went wrong.
 */
#include <errno.h>  /* errno */
#include <math.h>   /* fabs, isfinite */
#include <stdarg.h> /* va_list */
#include <stdio.h>  /* printf */
#include <stdlib.h> /* getenv, strtoull */
#include <string.h> /* memcpy, strstr */

#include <algorithm> /* std::max */
#include <chrono>    /* std::chrono */
#include <random>    /* std::mt19937_64, distributions */
#include <string>    /* std::string */
#include <vector>    /* std::vector */

#include "runtime.h"           /* kiln_emu::launch */
#include "softmax_inputs.h"    /* test_case, fill_*_inputs, buffer */
#include "softmax_reference.h" /* reference_forward/backward */

/* Last, as the kernels have them: the prelude (first, through
 * softmax_entries.h) defines `asm`, then the kernel headers. */
#include "softmax_entries.h" /* the entry points */

#include "softmax/softmax_core.cuh" /* kiln_divmod64, kiln_softmax_row_at */

extern "C" {
#include "softmax_launch.h" /* kiln_softmax_pick_launch: the loader's choice */
}

using namespace kiln_emu;

namespace {

/* ---- the entry points, from softmax_variants.def ------------------------ */

struct variant_info {
  const char *name;
  char kind; /* w, b, g */
  bool vec;  /* wv, bv, gv: 16-byte access, cols a multiple of 16 / sizeof(T) */
  int elems, threads;
  int width() const {
    return kind == 'w' ? 32 : threads;
  }
  int rows_per_block() const {
    return kind == 'w' ? threads / 32 : 1;
  }
  int capacity() const { /* 0: any */
    return kind == 'g' ? 0 : width() * elems;
  }
};

#define KILN_EMU_VARIANT_(a, v, kind, elems, threads)                                              \
  {#v, #kind[0], #kind[1] == 'v', elems, threads},
const variant_info kVariants[] = {KILN_SOFTMAX_VARIANTS(KILN_EMU_VARIANT_, ~)};
#undef KILN_EMU_VARIANT_
const int kVariantCount = sizeof kVariants / sizeof *kVariants;

/* The columns a variant's rows come in: 1, or one 16-byte vector of the
 * dtype for the vector kinds (their launch contract: cols % step == 0). */
int col_step(const variant_info &v, int dtype) {
  return v.vec ? (dtype == kF32 ? 4 : 8) : 1;
}

/* The smallest cols the picker sends to a g kind: one step past the
 * capacity of the variant listed before it (b32, v16k). */
int g_first_cols(int variant, int dtype) {
  return kVariants[variant - 1].capacity() + col_step(kVariants[variant], dtype);
}

/* cols rounded up to the variant's step, at most its capacity. */
int to_step(int cols, const variant_info &v, int dtype) {
  const int step = col_step(v, dtype);
  cols = (cols + step - 1) / step * step;
  return v.capacity() && cols > v.capacity() ? v.capacity() : cols;
}

/* Every entry point behind one signature per direction, T * as void *. */
typedef void (*fwd_thunk)(void *y, const void *x, const unsigned char *mask, float scale,
                          long long rows, int cols, int sq, int heads, int mask_batches);
typedef void (*bwd_thunk)(void *dx, const void *y, const void *dy, float scale, long long rows,
                          int cols, int sq);
template <class T,
          void (*F)(T *, const T *, const unsigned char *, float, long long, int, int, int, int)>
void fwd_as_void(void *y, const void *x, const unsigned char *mask, float scale, long long rows,
                 int cols, int sq, int heads, int mb) {
  F((T *)y, (const T *)x, mask, scale, rows, cols, sq, heads, mb);
}
template <class T, void (*F)(T *, const T *, const T *, float, long long, int, int)>
void bwd_as_void(void *dx, const void *y, const void *dy, float scale, long long rows, int cols,
                 int sq) {
  F((T *)dx, (const T *)y, (const T *)dy, scale, rows, cols, sq);
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static const int value = kF32; };
template <> struct dtype_of<kiln_f16> { static const int value = kF16; };
template <> struct dtype_of<kiln_bf16> { static const int value = kBf16; };

struct entry_row {
  const char *unit, *dtype, *variant;
  int dtype_id;
  fwd_thunk fwd;
  bwd_thunk bwd;
};
#define KILN_EMU_ENTRY_(unit, dt, ctype, v)                                                        \
  {#unit,                                                                                          \
   #dt,                                                                                            \
   #v,                                                                                             \
   dtype_of<ctype>::value,                                                                         \
   &fwd_as_void<ctype, kiln_##unit##_fwd_##dt##_##v>,                                              \
   &bwd_as_void<ctype, kiln_##unit##_bwd_##dt##_##v>},
const entry_row kEntryRows[] = {KILN_EMU_SOFTMAX_FOR_EACH(KILN_EMU_ENTRY_)};
#undef KILN_EMU_ENTRY_

/* What the reference computes for each unit of softmax_variants.def. A unit
 * not listed here fails the test: teach softmax_reference.cpp its contract. */
const struct {
  const char *name;
  int kind;
} kUnitKinds[] = {{"scaled_softmax", kUnitPlain},
                  {"scaled_masked_softmax", kUnitMasked},
                  {"scaled_upper_triang_masked_softmax", kUnitCausal}};

struct entry {
  const entry_row *row;
  int unit;    /* kUnitPlain, kUnitMasked, kUnitCausal */
  int dtype;   /* kF32, kF16, kBf16 */
  int variant; /* index into kVariants */
};

/* All entry pairs, in .def order; false when a unit's semantics are unknown. */
bool all_entries(std::vector<entry> *out) {
  for (const entry_row &r : kEntryRows) {
    entry e{&r, -1, r.dtype_id, -1};
    for (const auto &u : kUnitKinds)
      if (!strcmp(u.name, r.unit)) e.unit = u.kind;
    for (int v = 0; v < kVariantCount; ++v)
      if (!strcmp(kVariants[v].name, r.variant)) e.variant = v;
    if (e.unit < 0) {
      fprintf(stderr, "FAIL unit %s: the reference does not know its semantics\n", r.unit);
      return false;
    }
    out->push_back(e);
  }
  return true;
}

std::string entry_name(const entry &e, const char *dir) {
  return std::string("kiln_") + e.row->unit + "_" + dir + "_" + e.row->dtype + "_" + e.row->variant;
}

/* ---- cases ---------------------------------------------------------------- */

/* What a case exercised, for the coverage check at the end. */
enum {
  kCovGridStride = 1 << 0,  /* fewer row slots than rows: a block or warp takes several */
  kCovExtraBlocks = 1 << 1, /* whole blocks with no row */
  kCovInplaceFwd = 1 << 2,
  kCovInplaceDxDy = 1 << 3,
  kCovInplaceDxY = 1 << 4,
  kCovSpecial = 1 << 5,
  kCovColsOne = 1 << 6,
  kCovColsCap = 1 << 7,       /* the variant's largest cols (g: past b32's) */
  kCovMaskBroadcast = 1 << 8, /* mask_batches 1, b > 1 */
  kCovMaskPerBatch = 1 << 9,  /* mask_batches b > 1 */
  kCovFullyMasked = 1 << 10,
  kCovSqAboveCols = 1 << 11,
  kCovSqBelowCols = 1 << 12,
};
const char *const kCovNames[] = {
    "grid-stride",      "extra blocks",     "in-place y=x",    "in-place dx=dy", "in-place dx=y",
    "special values",   "cols 1",           "largest cols",    "mask broadcast", "mask per batch",
    "fully masked row", "causal sq > cols", "causal sq < cols"};

unsigned required_coverage(int unit) {
  unsigned c = kCovGridStride | kCovExtraBlocks | kCovInplaceFwd | kCovInplaceDxDy |
               kCovInplaceDxY | kCovSpecial | kCovColsOne | kCovColsCap;
  if (unit == kUnitMasked) c |= kCovMaskBroadcast | kCovMaskPerBatch | kCovFullyMasked;
  if (unit == kUnitCausal) c |= kCovSqAboveCols | kCovSqBelowCols;
  return c;
}

std::string describe(const test_case &c, const std::vector<entry> &entries) {
  const entry &e = entries[c.entry];
  char buf[400];
  snprintf(buf, sizeof buf,
           "kiln_%s_{fwd,bwd}_%s_%s: b %d heads %d sq %d cols %d mask_batches %d scale %g "
           "grid %u block %d inplace_fwd %d inplace_bwd %d special %d random_y %d shift %d "
           "case-seed %llu",
           e.row->unit, e.row->dtype, e.row->variant, c.b, c.heads, c.sq, c.cols, c.mask_batches,
           (double)c.scale, c.grid, kVariants[e.variant].threads, c.inplace_fwd, c.inplace_bwd,
           c.special, c.random_y, c.shift, (unsigned long long)c.seed);
  return buf;
}

struct stats {
  long cases = 0, launches = 0, failures = 0;
  long long elements = 0;
  double worst = 0.0; /* largest distance from the middle of [lo, hi] as a fraction of half
                         its width, over passing f32 elements (1: on the edge) */
};

/* ---- one case: forward, then backward ------------------------------------ */

uint64_t mix(uint64_t a, uint64_t b) { /* splitmix64 of a combination */
  uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A case's failure output: the case first, then what went wrong. */
struct case_report {
  std::string header;
  long problems = 0;
  void add(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
};

void case_report::add(const char *fmt, ...) {
  if (problems++ == 0) fprintf(stderr, "FAIL %s\n", header.c_str());
  va_list ap;
  va_start(ap, fmt);
  fputs("    ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* Compares every element of out against ref, reporting the first few misses. */
void compare(buffer &out, const std::vector<expected> &ref, const char *what, int cols, stats *st,
             case_report *rep) {
  long bad = 0;
  for (size_t k = 0; k < out.n; ++k) {
    const double got = out.get(k);
    if (meets(got, ref[k])) {
      const expected &e = ref[k];
      if (out.dtype == kF32 && !e.exact_zero && isfinite(e.value) && e.hi > e.lo)
        st->worst = std::max(st->worst, fabs(2.0 * got - e.lo - e.hi) / (e.hi - e.lo));
      continue;
    }
    if (bad++ < 4)
      rep->add("%s row %zu col %zu: got %.9g, want %s%.9g in [%.9g, %.9g]", what, k / cols,
               k % cols, got, ref[k].exact_zero ? "exactly " : "", ref[k].value, ref[k].lo,
               ref[k].hi);
  }
  if (bad > 4) rep->add("%s: %ld more elements wrong", what, bad - 4);
  st->elements += (long long)out.n;
}

/* Runs one direction; false (reported) when the emulator stopped it. */
bool run_launch(const test_case &c, const entry &e, uint64_t salt, const std::function<void()> &k,
                const char *what, stats *st, case_report *rep) {
  launch_options opt;
  opt.grid = c.grid;
  opt.block = (unsigned)kVariants[e.variant].threads;
  opt.seed = mix(c.seed, salt);
  std::string err;
  ++st->launches;
  if (launch(opt, k, &err)) return true;
  rep->add("%s launch: %s", what, err.c_str());
  return false;
}

unsigned coverage_of(const test_case &c, const row_geometry &g, const entry &e) {
  const variant_info &v = kVariants[e.variant];
  unsigned cov = 0;
  const long long slots = (long long)c.grid * v.rows_per_block();
  if (slots < g.rows) cov |= kCovGridStride;
  if (slots >= g.rows + v.rows_per_block()) cov |= kCovExtraBlocks;
  if (c.inplace_fwd) cov |= kCovInplaceFwd;
  if (c.inplace_bwd == 1) cov |= kCovInplaceDxDy;
  if (c.inplace_bwd == 2) cov |= kCovInplaceDxY;
  if (c.special) cov |= kCovSpecial;
  if (c.cols == col_step(v, e.dtype)) cov |= kCovColsOne;
  if (c.cols == (v.kind == 'g' ? g_first_cols(e.variant, e.dtype) : v.capacity()))
    cov |= kCovColsCap;
  if (g.unit == kUnitMasked && c.mask_batches == 1 && c.b > 1) cov |= kCovMaskBroadcast;
  if (g.unit == kUnitMasked && c.mask_batches == c.b && c.b > 1) cov |= kCovMaskPerBatch;
  if (g.unit == kUnitMasked && c.sq >= 2) cov |= kCovFullyMasked;
  if (g.unit == kUnitCausal && c.sq > c.cols) cov |= kCovSqAboveCols;
  if (g.unit == kUnitCausal && c.sq < c.cols) cov |= kCovSqBelowCols;
  return cov;
}

/* Runs one case; returns the coverage it adds (0 when it failed). */
unsigned run_case(const test_case &c, const std::vector<entry> &entries, stats *st) {
  const entry &e = entries[c.entry];
  const variant_info &v = kVariants[e.variant];
  row_geometry g;
  g.unit = e.unit;
  g.rows = (long long)c.b * c.heads * c.sq;
  g.cols = c.cols;
  g.sq = c.sq;
  g.heads = c.heads;
  g.mask_batches = c.mask_batches;
  g.width = v.width();
  const size_t n = (size_t)g.rows * c.cols;
  std::mt19937_64 rng(c.seed);
  case_report rep;
  rep.header = describe(c, entries);
  ++st->cases;

  /* Forward. Arguments a unit ignores get values that would fault if used. */
  const size_t sh = (size_t)c.shift;
  buffer x(e.dtype, n, sh), y(e.dtype, n, sh);
  buffer mask(kMaskBytes, e.unit == kUnitMasked ? (size_t)c.mask_batches * c.sq * c.cols : 0);
  fill_forward_inputs(&x, &mask, c, g, rng);
  std::vector<expected> fref;
  reference_forward(&fref, g, e.dtype, x.values(), mask.at(0), c.scale);
  const std::vector<unsigned char> x_before = x.bytes(), mask_before = mask.bytes();
  buffer &out = c.inplace_fwd ? x : y;
  const unsigned char *mask_arg = e.unit == kUnitMasked ? mask.at(0) : nullptr;
  const int sq_arg = e.unit == kUnitPlain ? 0 : c.sq;
  const int heads_arg = e.unit == kUnitMasked ? c.heads : 0;
  const int mb_arg = e.unit == kUnitMasked ? c.mask_batches : 0;
  void *out_p = out.data();
  const void *x_p = x.data();
  if (run_launch(
          c, e, 1,
          [&] {
            e.row->fwd(out_p, x_p, mask_arg, c.scale, g.rows, c.cols, sq_arg, heads_arg, mb_arg);
          },
          "forward", st, &rep))
    compare(out, fref, "forward", c.cols, st, &rep);
  if (!x.guards_intact() || !y.guards_intact() || !mask.guards_intact())
    rep.add("forward wrote outside its tensors");
  if ((!c.inplace_fwd && x.bytes() != x_before) || mask.bytes() != mask_before)
    rep.add("forward changed an input");

  /* Backward. */
  buffer yb(e.dtype, n, sh), dy(e.dtype, n, sh), dx(e.dtype, n, sh);
  fill_backward_inputs(&yb, &dy, fref, c, g, rng);
  std::vector<expected> bref;
  reference_backward(&bref, g, e.dtype, yb.values(), dy.values(), c.scale);
  const std::vector<unsigned char> y_before = yb.bytes(), dy_before = dy.bytes();
  buffer &dout = c.inplace_bwd == 1 ? dy : c.inplace_bwd == 2 ? yb : dx;
  void *dx_p = dout.data();
  const void *y_p = yb.data(), *dy_p = dy.data();
  const int bsq_arg = e.unit == kUnitCausal ? c.sq : 0;
  if (run_launch(
          c, e, 2, [&] { e.row->bwd(dx_p, y_p, dy_p, c.scale, g.rows, c.cols, bsq_arg); },
          "backward", st, &rep))
    compare(dout, bref, "backward", c.cols, st, &rep);
  if (!yb.guards_intact() || !dy.guards_intact() || !dx.guards_intact())
    rep.add("backward wrote outside its tensors");
  if ((c.inplace_bwd != 2 && yb.bytes() != y_before) ||
      (c.inplace_bwd != 1 && dy.bytes() != dy_before))
    rep.add("backward changed an input");

  if (rep.problems == 0) return coverage_of(c, g, e);
  ++st->failures;
  return 0;
}

/* ---- the plan --------------------------------------------------------------- */

/* Column counts at the edges of a variant's range: 1, the smallest it is
 * picked for (one more than the previous variant's capacity), lane/thread
 * boundaries, its capacity; plus two anywhere in range. Vector kinds: each
 * rounded up to a whole number of vectors. */
std::vector<int> edge_columns(const entry &e, std::mt19937_64 &rng) {
  const variant_info &v = kVariants[e.variant];
  std::vector<int> cols;
  const int cap = v.capacity();
  if (v.kind == 'w')
    cols = {1, cap / 2 + 1, cap - 1, cap};
  else if (v.kind == 'b')
    cols = {1, 33, v.threads + 1, cap / 2 + 1, cap - 1, cap};
  else /* g: chunk edges (threads x 8 unrolled) and the smallest the picker sends here */
    cols = {1, 37, 4096, 4097, 8193, g_first_cols(e.variant, e.dtype)};
  const int hi = cap ? cap : 20000;
  for (int i = 0; i < 2; ++i)
    cols.push_back(1 + (int)(rng() % (unsigned)hi));
  for (int &c : cols)
    c = to_step(c, v, e.dtype);
  return cols;
}

/* Scenario s of four, so that every entry point gets each of them. */
test_case scenario(int index, const entry &e, int s, int cols, uint64_t seed) {
  const variant_info &v = kVariants[e.variant];
  test_case c;
  c.entry = index;
  c.cols = cols;
  c.seed = seed;
  c.random_y = false;
  c.special = false;
  c.inplace_fwd = false;
  c.inplace_bwd = 0;
  switch (s) {
  case 0: /* plain shape, one row per warp or block, per-batch mask */
    c.b = 2, c.heads = 2, c.sq = 3, c.mask_batches = 2, c.scale = 0.7f;
    break;
  case 1: /* one block takes every row; in place; mask broadcast over the batch */
    c.b = 2, c.heads = 1, c.sq = 5, c.mask_batches = 1, c.scale = -1.3f;
    c.inplace_fwd = true, c.inplace_bwd = 1;
    break;
  case 2: /* more blocks than rows; special values; dx overwrites y */
    c.b = 3, c.heads = 2, c.sq = 2, c.mask_batches = 3, c.scale = 1.f;
    c.special = true, c.inplace_bwd = 2;
    break;
  default: /* two blocks, odd rows, backward on arbitrary y */
    c.b = 1, c.heads = 3, c.sq = 4, c.mask_batches = 1, c.scale = 0.125f;
    c.random_y = true;
    break;
  }
  if (e.unit == kUnitCausal && cols <= 40) { /* short rows: sq above, equal to, below cols */
    c.sq = s == 0 ? cols + 1 : s == 1 ? cols + 2 : s == 2 ? cols : (cols + 1) / 2;
    if (c.sq > 8) c.b = 1, c.heads = 1, c.mask_batches = 1;
  }
  const long long rows = (long long)c.b * c.heads * c.sq;
  const unsigned need = (unsigned)((rows + v.rows_per_block() - 1) / v.rows_per_block());
  c.grid = s == 1 ? 1 : s == 2 ? need + 3 : s == 3 ? 2 : need;
  return c;
}

test_case random_case(const std::vector<entry> &entries, const std::vector<int> &pool,
                      uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int idx = pool[rng() % pool.size()];
  const variant_info &v = kVariants[entries[idx].variant];
  const int hi = v.capacity() ? v.capacity() : 40000;
  test_case c = scenario(idx, entries[idx], (int)(rng() % 4),
                         to_step(1 + (int)(rng() % (unsigned)hi), v, entries[idx].dtype), seed);
  c.b = 1 + (int)(rng() % 3), c.heads = 1 + (int)(rng() % 3), c.sq = 1 + (int)(rng() % 6);
  c.mask_batches = rng() % 2 ? 1 : c.b;
  c.scale = (rng() % 2 ? 1.f : -1.f) * std::uniform_real_distribution<float>(0.05f, 4.f)(rng);
  const long long rows = (long long)c.b * c.heads * c.sq;
  c.grid = 1 + (unsigned)(rng() % (unsigned)(rows / v.rows_per_block() + 4));
  c.inplace_fwd = rng() % 2, c.inplace_bwd = (int)(rng() % 3);
  c.special = rng() % 2, c.random_y = rng() % 2;
  return c;
}

/* Row placement with 64-bit rows and offsets, beyond what host buffers can
 * reach: the kernels' own helpers against the formulas of docs/kernels.md.
 * Returns the number of wrong answers. */
long check_row_indexing_beyond_32_bits(uint64_t seed) {
  std::mt19937_64 rng(seed);
  static const unsigned char mask[1] = {0};
  const uintptr_t base = (uintptr_t)mask;
  long bad = 0;
  for (int n = 0; n < 300000; ++n) {
    const long long a = (long long)(rng() >> (1 + rng() % 63));
    const long long d =
        n % 3 ? (long long)(rng() >> (1 + rng() % 63)) + 1 : 1 + (long long)(rng() % 70000);
    long long q, r;
    kiln_divmod64(a, d, &q, &r);
    bad += q != a / d || r != a % d;

    const int cols = 1 + (int)(rng() % (n % 2 ? 65536 : 40));
    const int sq = 1 + (int)(rng() % (n % 3 ? 1u << 20 : 7));
    const int heads = 1 + (int)(rng() % (n % 5 ? 4096 : 3));
    const long long row = (long long)(rng() % (uint64_t)((1LL << 62) / cols)); /* offsets < 2^62 */
    const long long batch = row / ((long long)heads * sq), i = row % sq;
    const int mb = n % 2 ? 1 : (int)(batch + 1); /* any mask_batches > 1 behaves like b */
    const kiln_softmax_row p =
        kiln_softmax_row_at<KILN_SOFTMAX_PLAIN>(row, cols, mask, sq, heads, mb);
    const kiln_softmax_row c =
        kiln_softmax_row_at<KILN_SOFTMAX_CAUSAL>(row, cols, mask, sq, heads, mb);
    const kiln_softmax_row m =
        kiln_softmax_row_at<KILN_SOFTMAX_MASKED>(row, cols, mask, sq, heads, mb);
    const long long off = row * cols;
    const long long mrow = (mb == 1 ? 0 : batch) * sq + i;
    bad += p.off != off || p.lim != cols;
    bad += c.off != off || c.lim != (i < cols ? i + 1 : cols);
    bad += m.off != off || m.lim != cols || (uintptr_t)m.mask - base != (uintptr_t)(mrow * cols);
  }
  return bad;
}

/* The path the launcher picks, run on the tensors it was picked for: rows
 * of whole 16-byte vectors in aligned tensors take a vector variant, and
 * must be right to the last vector of every row (and a causal limit inside
 * a vector); the same shapes one element off a 16-byte boundary, and rows
 * that are not whole vectors, take the scalar variant and must be right
 * there. A pick of the wrong kind is a failure of its own. Returns the
 * number of wrong picks (a wrong result counts in st). */
long run_picked_paths(const std::vector<entry> &entries, uint64_t seed, stats *st) {
  static const int kCols[] = {8, 136, 1000, 1004, 2056, 4092, 8200, 16384, 16392};
  long failures = 0;
  for (int unit : {kUnitPlain, kUnitMasked, kUnitCausal})
    for (int dt = 0; dt < kDtypeCount; ++dt)
      for (int cols : kCols)
        for (int shift = 0; shift < 2; ++shift) {
          const unsigned es = (unsigned)elem_size(dt);
          const bool want_vec = shift == 0 && cols % (int)(16 / es) == 0;
          kiln_softmax_launch p;
          if (kiln_softmax_pick_launch(&p, 4, cols, es, shift == 0) != 0) {
            fprintf(stderr, "FAIL pick for %d columns: refused\n", cols);
            ++failures;
            continue;
          }
          int idx = -1;
          for (size_t i = 0; i < entries.size(); ++i)
            if (entries[i].unit == unit && entries[i].dtype == dt &&
                !strcmp(entries[i].row->variant, p.variant))
              idx = (int)i;
          if (idx < 0 || kVariants[entries[idx].variant].vec != want_vec) {
            fprintf(stderr, "FAIL pick for %d columns of %u bytes, shift %d: %s (%s)\n", cols, es,
                    shift, p.variant, idx < 0 ? "no such entry" : "wrong kind");
            ++failures;
            continue;
          }
          const uint64_t cs = mix(seed, (uint64_t)(unit * 1000003 + dt * 1009 + cols * 2 + shift));
          test_case c = scenario(idx, entries[idx], (int)(cs % 4), cols, cs);
          c.shift = shift;
          c.inplace_fwd = false, c.inplace_bwd = 0; /* the launcher's pointers, as picked */
          if (unit == kUnitCausal) c.b = 1, c.heads = 1, c.sq = 7; /* limits cut vectors */
          run_case(c, entries, st); /* counts its own failure in st */
        }
  return failures;
}

bool env_u64(const char *name, uint64_t *out) {
  const char *s = getenv(name);
  if (!s || !*s) return true;
  char *end = nullptr;
  errno = 0;
  const unsigned long long v = strtoull(s, &end, 0);
  if (errno || *end) {
    fprintf(stderr, "%s=%s: not a number\n", name, s);
    return false;
  }
  *out = v;
  return true;
}

/* KILN_EMU_SHARD: "I/N" into *i, *n (default 0/1). */
bool env_shard(unsigned *i, unsigned *n) {
  const char *s = getenv("KILN_EMU_SHARD");
  *i = 0, *n = 1;
  if (!s || !*s) return true;
  if (sscanf(s, "%u/%u", i, n) != 2 || *n == 0 || *i >= *n) {
    fprintf(stderr, "KILN_EMU_SHARD=%s: expected I/N with 0 <= I < N\n", s);
    return false;
  }
  return true;
}

} // namespace

int main() {
  uint64_t seed = 0x6b696c6e, extra = 100;
  unsigned shard, shards;
  if (!env_u64("KILN_EMU_SEED", &seed) || !env_u64("KILN_EMU_CASES", &extra) ||
      !env_shard(&shard, &shards))
    return 2;
  const char *only = getenv("KILN_EMU_ONLY");
  setvbuf(stdout, nullptr, _IOLBF, 0); /* in order with the failures on stderr */
  printf("seed %llu (KILN_EMU_SEED), extra random cases %llu (KILN_EMU_CASES)%s%s, shard %u/%u\n",
         (unsigned long long)seed, (unsigned long long)extra, only ? ", only " : "",
         only ? only : "", shard, shards);
  fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<entry> entries;
  if (!all_entries(&entries)) return 1;
  std::vector<unsigned> covered(entries.size(), 0);
  std::vector<int> pool, mine; /* every entry point asked for; this shard's of them */
  stats st;
  for (size_t i = 0; i < entries.size(); ++i) {
    const entry &e = entries[i];
    if (only && !strstr(entry_name(e, "fwd").c_str(), only) &&
        !strstr(entry_name(e, "bwd").c_str(), only))
      continue;
    pool.push_back((int)i);
    if (i % shards != shard) continue;
    mine.push_back((int)i);
    /* Seeds per entry, so that KILN_EMU_ONLY re-runs exactly the same cases. */
    std::mt19937_64 plan_rng(mix(seed, i));
    const std::vector<int> cols = edge_columns(e, plan_rng);
    for (size_t k = 0; k < cols.size(); ++k) {
      const test_case c = scenario((int)i, e, (int)(k % 4), cols[k], mix(seed, i * 64 + k));
      covered[i] |= run_case(c, entries, &st);
    }
  }
  if (!only && shard == 0) st.failures += run_picked_paths(entries, seed, &st);
  if (shard == 0)
    if (const long wrong = check_row_indexing_beyond_32_bits(seed)) {
      fprintf(stderr, "FAIL row placement beyond 32 bits: %ld wrong\n", wrong);
      ++st.failures;
    }
  for (uint64_t k = shard; k < extra && !pool.empty(); k += shards)
    run_case(random_case(entries, pool, mix(seed ^ 0x5eed, k)), entries, &st);

  /* Every entry point must have seen every feature its unit has. */
  for (int i : mine) {
    const unsigned missing = required_coverage(entries[i].unit) & ~covered[i];
    if (!missing || st.failures) continue;
    for (unsigned b = 0; b < sizeof kCovNames / sizeof *kCovNames; ++b)
      if (missing & (1u << b))
        fprintf(stderr, "COVERAGE %s: no passing case with %s\n",
                entry_name(entries[i], "fwd").c_str(), kCovNames[b]);
    ++st.failures;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("%zu entry pairs, %ld cases, %ld launches, %lld elements checked (worst f32 error "
         "%.2f of its bound), %ld failures, %.1f s\n",
         mine.size(), st.cases, st.launches, st.elements, st.worst, st.failures, secs);
  return st.failures ? 1 : 0;
}
