/* test_embedding_bwd_emu.cpp — the deterministic embedding backward's run
 * splitting (kernels/embedding/embedding.cu, docs/kernels/embedding.md) on
 * the emulator, for skewed ids: one id repeated 2048 times among uniform
 * ones, and a Zipf distribution. From the sorted (keys, pos) — sorted here,
 * stably, on the host — bwd_<dt>_pieces sums the tail pieces of long runs
 * and bwd_<dt>_sorted adds head + tails in order to dweight. Checks:
 *   - dweight is bit for bit the documented order (each piece summed in
 *     position order from 0; the head, then + each tail in order; then
 *     dweight + that), so a kernel that walks a run serially fails here;
 *   - within fp32 rounding of a float64 sum;
 *   - the same bits for two grids and thread schedules;
 *   - the slots the pieces write are the only ones the sorted pass reads
 *     (slots poisoned with NaN on entry).
 * Exit 0 when every check holds. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "embedding_entries.h" /* first: the prelude, then the entry points */

#include "device_buffer.h" /* kiln_emu::buffer */
#include "emu_check.h"     /* CHECK, emu_run, emu_unit */

using kiln_emu::buffer;

static uint64_t g_rng = 0x13198a2e03707344ull;

static double unit() {
  return emu_unit(&g_rng);
}

/* The launcher's piece for hidden (loader/ops_embedding.c emb_piece). */
static int piece_for(int hidden) {
  const int p = (hidden * 4 + 127) / 128;
  return p > 64 ? p : 64;
}

/* ids: the Zipf distribution over [0, vocab) with exponent s, or uniform ids
 * with one id (vocab / 3) at `repeat` random positions. */
static std::vector<kiln_i64> make_ids(long long n, long long vocab, double s, long long repeat) {
  std::vector<kiln_i64> ids((size_t)n);
  if (s > 0) {
    std::vector<double> cdf((size_t)vocab);
    double z = 0;
    for (long long k = 0; k < vocab; ++k)
      cdf[(size_t)k] = z += pow((double)(k + 1), -s);
    for (auto &id : ids)
      id = std::lower_bound(cdf.begin(), cdf.end(), unit() * z) - cdf.begin();
    return ids;
  }
  for (auto &id : ids)
    id = (kiln_i64)(unit() * (double)vocab);
  for (long long k = 0; k < repeat;) { /* distinct positions */
    const size_t t = (size_t)(unit() * (double)n);
    if (ids[t] != vocab / 3) ids[t] = vocab / 3, ++k;
  }
  return ids;
}

/* pieces on grid g1, then sorted on grid g2 (schedules from seed). */
template <class T,
          void (*P)(float *, const T *, const kiln_i64 *, const kiln_i64 *, kiln_i64, int, kiln_i64,
                    int),
          void (*S)(float *, const T *, const kiln_i64 *, const kiln_i64 *, const float *, kiln_i64,
                    int, kiln_i64, int)>
static bool run_sums(unsigned g1, unsigned g2, uint64_t seed, float *dw, float *slots, buffer &dy,
                     const kiln_i64 *keys, const kiln_i64 *pos, long long n, int hidden,
                     long long rows, int piece) {
  const T *pdy = (const T *)dy.data();
  return emu_run(g1, 256, seed, [&] { P(slots, pdy, keys, pos, n, hidden, rows, piece); }) &&
         emu_run(g2, 256, seed + 1, [&] { S(dw, pdy, keys, pos, slots, n, hidden, rows, piece); });
}

/* One case: bf16 dy (vectorised when hidden % 8 == 0) or f32 dy. */
static void test_case(const char *what, int dtype, long long n, int hidden, long long vocab,
                      const std::vector<kiln_i64> &ids) {
  const int piece = piece_for(hidden);
  const long long rows = vocab, tails = (n - 1) / piece;
  const size_t ny = (size_t)n * hidden, nw = (size_t)rows * hidden;
  buffer dy(dtype, ny), keys(kiln_emu::kF32, 2 * (size_t)n), pos(kiln_emu::kF32, 2 * (size_t)n);
  std::vector<float> dw0(nw);
  for (size_t i = 0; i < ny; ++i)
    dy.set(i, (float)((unit() * 2 - 1) * (unit() < 0.5 ? 1.0 : 1.0 / 64)));
  for (auto &v : dw0)
    v = (float)(unit() * 8 - 4);
  /* the stable sort of the deterministic path, on the host */
  std::vector<kiln_i64> order((size_t)n);
  for (long long t = 0; t < n; ++t)
    order[(size_t)t] = t;
  std::stable_sort(order.begin(), order.end(),
                   [&](kiln_i64 a, kiln_i64 b) { return ids[(size_t)a] < ids[(size_t)b]; });
  kiln_i64 *pk = (kiln_i64 *)keys.data(), *pp = (kiln_i64 *)pos.data();
  for (long long i = 0; i < n; ++i)
    pk[i] = ids[(size_t)order[(size_t)i]], pp[i] = order[(size_t)i];
  /* the documented order, and float64 */
  std::vector<float> want(nw);
  std::vector<double> ref(nw), mag(nw);
  for (size_t i = 0; i < nw; ++i)
    want[i] = dw0[i], ref[i] = dw0[i], mag[i] = fabs(dw0[i]);
  long long longest = 0;
  for (long long i = 0; i < n;) {
    long long e = i;
    while (e < n && pk[e] == pk[i])
      ++e;
    longest = std::max(longest, e - i);
    for (int c = 0; c < hidden; ++c) {
      volatile float total = 0.f, part = 0.f;
      bool head = true;
      for (long long j = i; j < e; ++j) {
        if (j > i && j % piece == 0) {
          if (!head) total = total + part;
          head = false;
          part = 0.f;
        }
        const float v = dy.get((size_t)(pp[j] * hidden + c));
        if (head)
          total = total + v;
        else
          part = part + v;
        ref[(size_t)(pk[i] * hidden + c)] += v;
        mag[(size_t)(pk[i] * hidden + c)] += fabs(v);
      }
      if (!head) total = total + part;
      volatile float w = want[(size_t)(pk[i] * hidden + c)] + total;
      want[(size_t)(pk[i] * hidden + c)] = w;
    }
    i = e;
  }
  CHECK(longest > 2 * piece, "%s: the longest run (%lld) should span several pieces of %d", what,
        longest, piece);
  std::vector<unsigned char> first;
  for (int r = 0; r < 2; ++r) {
    buffer dw(kiln_emu::kF32, nw), slots(kiln_emu::kF32, (size_t)tails * hidden);
    for (size_t i = 0; i < nw; ++i)
      dw.set(i, dw0[i]);
    for (size_t i = 0; i < slots.n; ++i)
      slots.set(i, NAN);
    float *pdw = (float *)dw.data(), *psl = (float *)slots.data();
    const unsigned g1 = r == 0 ? 64 : 5, g2 = r == 0 ? 256 : 3;
    const bool ok =
        dtype == kiln_emu::kF32
            ? run_sums<float, kiln_embedding_bwd_f32_pieces, kiln_embedding_bwd_f32_sorted>(
                  g1, g2, 31 + r, pdw, psl, dy, pk, pp, n, hidden, rows, piece)
            : run_sums<kiln_bf16, kiln_embedding_bwd_bf16_pieces, kiln_embedding_bwd_bf16_sorted>(
                  g1, g2, 31 + r, pdw, psl, dy, pk, pp, n, hidden, rows, piece);
    if (!ok) return;
    CHECK(dw.guards_intact() && slots.guards_intact(), "%s: guard bytes overwritten", what);
    if (r == 0) {
      size_t bits = 0, far = 0;
      for (size_t i = 0; i < nw; ++i) {
        bits += memcmp(dw.at(i), &want[i], 4) != 0;
        far += !(fabs(dw.get(i) - ref[i]) <= 2.0 * (double)(longest + 1) * ldexp(mag[i], -24));
      }
      CHECK(!bits, "%s: %zu of %zu elements differ from the documented piece order", what, bits,
            nw);
      CHECK(!far, "%s: %zu elements outside the float64 bound", what, far);
      first = dw.bytes();
    } else {
      CHECK(dw.bytes() == first, "%s: two grids and schedules give different bits", what);
    }
  }
}

int main() {
  {
    const auto ids = make_ids(4096, 500, 0, 2048);
    test_case("bf16, one id x 2048, hidden 64", kiln_emu::kBf16, 4096, 64, 500, ids);
    test_case("f32, one id x 2048, hidden 3", kiln_emu::kF32, 4096, 3, 500, ids);
  }
  {
    const auto ids = make_ids(3000, 2000, 1.1, 0);
    test_case("bf16, Zipf 1.1, hidden 72", kiln_emu::kBf16, 3000, 72, 2000, ids);
  }
  return emu_report();
}
