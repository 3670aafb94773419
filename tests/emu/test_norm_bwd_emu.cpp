/* test_norm_bwd_emu.cpp — the norm backward's deterministic dgamma/dbeta
 * (kernels/norm/norm_core.cuh, docs/kernels/norm.md) on the emulator:
 *   - bwdw's column tile (kiln_norm_bwdw_width) gives at least
 *     KILN_NORM_BWDW_MIN_TILES blocks of work from 1024 columns up, the widest
 *     tile that does;
 *   - bwdw's result is bit for bit the documented order (per column: S = 256 /
 *     width streams, stream s summing parts s, s + S, ... from 0, then the S
 *     stream sums in order from 0), whatever the grid and the thread
 *     schedule, and within fp32 rounding of a float64 sum;
 *   - the r backward (512 threads, one accumulator in shared memory) and the g
 *     backward give dgamma/dbeta within tolerance of a float64 reference and
 *     the same bits for two grids and schedules.
 * Exit 0 when every check holds. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "norm_entries.h" /* first: the prelude, then the entry points */

#include "device_buffer.h"    /* kiln_emu::buffer */
#include "emu_check.h"        /* CHECK, emu_run, emu_unit */
#include "norm/norm_core.cuh" /* kiln_norm_bwdw_width, the constants */

using kiln_emu::buffer;

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static float uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)emu_unit(&g_rng);
}

/* ---- bwdw ------------------------------------------------------------------------ */

static void test_bwdw_width() {
  for (int cols : {1, 31, 1000, 1024, 2048, 4096, 8192, 12288, 16384, 1 << 20}) {
    const int w = kiln_norm_bwdw_width(cols), tiles = (cols + w - 1) / w;
    CHECK(w == 4 || w == 8 || w == 16 || w == 32, "cols %d: width %d", cols, w);
    if (cols >= 1024)
      CHECK(tiles >= KILN_NORM_BWDW_MIN_TILES, "cols %d: %d tiles of %d < %d", cols, tiles, w,
            KILN_NORM_BWDW_MIN_TILES);
    if (w < 32) /* the widest that makes enough tiles */
      CHECK(w == 4 || (cols + 2 * w - 1) / (2 * w) < KILN_NORM_BWDW_MIN_TILES,
            "cols %d: width %d, but %d would do", cols, w, 2 * w);
  }
}

/* The documented order, rounded to the weights' dtype like the kernel. */
static float bwdw_emulated(const std::vector<float> &ws, int parts, int cols, int col) {
  const int w = kiln_norm_bwdw_width(cols), streams = KILN_NORM_THREADS / w;
  volatile float total = 0.f;
  for (int s = 0; s < streams; ++s) {
    volatile float a = 0.f;
    for (int p = s; p < parts; p += streams)
      a = a + ws[(size_t)p * cols + col];
    total = total + a;
  }
  return total;
}

/* layer_norm's f32 bwdw (dgamma and dbeta) and rms_norm's bf16 one. */
static void test_bwdw_case(int parts, int cols) {
  const size_t n = (size_t)parts * cols;
  std::vector<float> hg(n), hb(n);
  buffer wg(kiln_emu::kF32, n), wb(kiln_emu::kF32, n);
  for (size_t i = 0; i < n; ++i) {
    hg[i] = wg.set(i, uniform(-1.f, 1.f));
    hb[i] = wb.set(i, uniform(-1.f, 1.f) * 1000.f);
  }
  const int w = kiln_norm_bwdw_width(cols);
  const unsigned tiles = (unsigned)((cols + w - 1) / w);
  std::vector<unsigned char> first_g, first_b, first_r;
  for (int r = 0; r < 2; ++r) {
    buffer dg(kiln_emu::kF32, (size_t)cols), db(kiln_emu::kF32, (size_t)cols);
    buffer rg(kiln_emu::kBf16, (size_t)cols);
    const unsigned grid = r == 0 ? tiles : 3; /* the launcher's grid, then a grid-stride one */
    float *pg = (float *)dg.data(), *pb = (float *)db.data();
    kiln_bf16 *prg = (kiln_bf16 *)rg.data();
    const float *sg = (const float *)wg.data(), *sb = (const float *)wb.data();
    if (!emu_run(grid, KILN_NORM_THREADS, 11 + r,
                 [&] { kiln_layer_norm_bwdw_f32_g(pg, pb, sg, sb, parts, cols); }) ||
        !emu_run(grid, KILN_NORM_THREADS, 23 + r,
                 [&] { kiln_rms_norm_bwdw_bf16_g(prg, NULL, sg, NULL, parts, cols); }))
      return;
    CHECK(dg.guards_intact() && db.guards_intact() && rg.guards_intact(),
          "bwdw parts %d cols %d: guard bytes overwritten", parts, cols);
    if (r == 0) {
      first_g = dg.bytes(), first_b = db.bytes(), first_r = rg.bytes();
      int bad = 0, bad_ref = 0;
      for (int c = 0; c < cols; ++c) {
        const float eg = bwdw_emulated(hg, parts, cols, c), eb = bwdw_emulated(hb, parts, cols, c);
        buffer one(kiln_emu::kBf16, 1);
        const float er = one.set(0, eg);
        bad += memcmp(dg.at(c), &eg, 4) != 0 || memcmp(db.at(c), &eb, 4) != 0 || rg.get(c) != er;
        double sum = 0, mag = 0;
        for (int p = 0; p < parts; ++p) {
          sum += hg[(size_t)p * cols + c];
          mag += fabs(hg[(size_t)p * cols + c]);
        }
        bad_ref += !(fabs(dg.get(c) - sum) <= 2.0 * parts * ldexp(mag, -24));
      }
      CHECK(!bad, "bwdw parts %d cols %d (width %d): %d columns differ from the documented order",
            parts, cols, w, bad);
      CHECK(!bad_ref, "bwdw parts %d cols %d: %d columns outside the float64 bound", parts, cols,
            bad_ref);
    } else {
      CHECK(dg.bytes() == first_g && db.bytes() == first_b && rg.bytes() == first_r,
            "bwdw parts %d cols %d: grid %u and grid 3 differ", parts, cols, tiles);
    }
  }
}

/* ---- the whole backward ------------------------------------------------------------ */

/* layer_norm bf16 x/dy with fp32 weights: the r path when r, else the g path
 * (the same entry's g variant). */
static void test_bwd_case(bool r_path, long long rows, int cols) {
  const size_t n = (size_t)rows * cols;
  buffer x(kiln_emu::kBf16, n), dy(kiln_emu::kBf16, n), gamma(kiln_emu::kF32, (size_t)cols);
  buffer mean(kiln_emu::kF32, (size_t)rows), rstd(kiln_emu::kF32, (size_t)rows);
  std::vector<double> ref_g((size_t)cols, 0.0), ref_b((size_t)cols, 0.0), mag((size_t)cols, 0.0);
  for (int c = 0; c < cols; ++c)
    gamma.set(c, uniform(0.5f, 1.5f));
  for (long long row = 0; row < rows; ++row) {
    double s = 0, ss = 0;
    for (int c = 0; c < cols; ++c) {
      const double v = x.set(row * cols + c, uniform(-3.f, 3.f));
      dy.set(row * cols + c, uniform(-1.f, 1.f));
      s += v;
    }
    const double mu = s / cols;
    for (int c = 0; c < cols; ++c)
      ss += (x.get(row * cols + c) - mu) * (x.get(row * cols + c) - mu);
    const float m = mean.set(row, (float)mu), rs = rstd.set(row, (float)(1.0 / sqrt(ss / cols)));
    for (int c = 0; c < cols; ++c) {
      const double d = dy.get(row * cols + c), xh = ((double)x.get(row * cols + c) - m) * rs;
      ref_g[c] += d * xh;
      ref_b[c] += d;
      mag[c] += fabs(d * xh) + fabs(d);
    }
  }
  const int parts = rows < 512 ? (int)rows : 512;
  const size_t nws = (size_t)parts * cols;
  const unsigned block = r_path ? KILN_NORM_BWD_R_THREADS : KILN_NORM_THREADS;
  std::vector<unsigned char> first_g, first_b;
  for (int run_i = 0; run_i < 2; ++run_i) {
    buffer dx(kiln_emu::kBf16, n), wsg(kiln_emu::kF32, nws), wsb(kiln_emu::kF32, nws);
    buffer dg(kiln_emu::kF32, (size_t)cols), db(kiln_emu::kF32, (size_t)cols);
    for (size_t i = 0; i < nws; ++i) /* the workspace's contents on entry do not matter */
      wsg.set(i, NAN), wsb.set(i, 1e30f);
    kiln_bf16 *pdx = (kiln_bf16 *)dx.data();
    float *pg = (float *)wsg.data(), *pb = (float *)wsb.data();
    const kiln_bf16 *pdy = (const kiln_bf16 *)dy.data(), *px = (const kiln_bf16 *)x.data();
    const float *pm = (const float *)mean.data(), *pr = (const float *)rstd.data();
    const float *pgam = (const float *)gamma.data();
    const unsigned grid = run_i == 0 ? (unsigned)parts : 5;
    const bool ok = emu_run(grid, block, 101 + run_i, [&] {
      if (r_path)
        kiln_layer_norm_bwd_bf16_wf32_r(pdx, pg, pb, pdy, px, pm, pr, pgam, rows, cols, parts);
      else
        kiln_layer_norm_bwd_bf16_wf32_g(pdx, pg, pb, pdy, px, pm, pr, pgam, rows, cols, parts);
    });
    const int w = kiln_norm_bwdw_width(cols);
    if (!ok || !emu_run((unsigned)((cols + w - 1) / w), KILN_NORM_THREADS, 7 + run_i, [&] {
          kiln_layer_norm_bwdw_f32_g((float *)dg.data(), (float *)db.data(), pg, pb, parts, cols);
        }))
      return;
    CHECK(dx.guards_intact() && wsg.guards_intact() && wsb.guards_intact() && dg.guards_intact() &&
              db.guards_intact(),
          "bwd %s rows %lld cols %d: guard bytes overwritten", r_path ? "r" : "g", rows, cols);
    if (run_i == 0) {
      int bad = 0;
      for (int c = 0; c < cols; ++c) {
        const double tol = 1e-5 * mag[c] + 1e-6;
        bad += !(fabs(dg.get(c) - ref_g[c]) <= tol) || !(fabs(db.get(c) - ref_b[c]) <= tol);
      }
      CHECK(!bad, "bwd %s rows %lld cols %d: %d columns of dgamma/dbeta outside tolerance",
            r_path ? "r" : "g", rows, cols, bad);
      first_g = dg.bytes(), first_b = db.bytes();
    } else {
      CHECK(dg.bytes() == first_g && db.bytes() == first_b,
            "bwd %s rows %lld cols %d: two grids and schedules differ", r_path ? "r" : "g", rows,
            cols);
    }
  }
}

int main() {
  test_bwdw_width();
  for (int parts : {512, 37})
    for (int cols : {100, 1024, 2048, 4096, 12288})
      test_bwdw_case(parts, cols);
  test_bwd_case(true, 40, 8192);  /* r: both vectors of every thread */
  test_bwd_case(true, 530, 1000); /* r: a partial vector row, several rows per part */
  test_bwd_case(false, 45, 1001); /* g */
  return emu_report();
}
