/* test_norm_merge.cpp — kiln_norm_merge (kernels/norm/norm_core.cuh) gives
 * the same bits for (a, b) and (b, a), so both lanes of a butterfly step of
 * the layer-norm / RMSNorm statistics agree. Compiled with FMA contraction on
 * (-mfma -ffp-contract=fast), as NVRTC compiles device code: a merge written
 * as plain a.n * a.m + b.n * b.m is contracted differently on the two lanes
 * and fails here. Skips (77) on a CPU without FMA. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "host_prelude.h" /* first: CUDA built-ins for the kernel header */

#include "norm/norm_core.cuh"

static uint64_t g_state = 0x9e3779b97f4a7c15ull;
static float uniform(float lo, float hi) { /* xorshift64* */
  g_state ^= g_state >> 12, g_state ^= g_state << 25, g_state ^= g_state >> 27;
  const uint64_t r = g_state * 0x2545f4914f6cdd1dull;
  return lo + (hi - lo) * (float)((r >> 40) * (1.0 / 16777216.0));
}

/* One lane's merge, out of line: inlined into main, both calls could be
 * canonicalised to one expression and hide the asymmetry. */
[[gnu::noinline]] static kiln_norm_stat lane_merge(kiln_norm_stat mine, kiln_norm_stat other) {
  return kiln_norm_merge(mine, other);
}

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

int main() {
  if (!__builtin_cpu_supports("fma")) {
    puts("no FMA on this CPU: the contraction this test guards against cannot happen; skipped");
    return 77;
  }
  int bad = 0;
  for (int i = 0; i < 200000; ++i) {
    kiln_norm_stat a = {(float)(1 + (i % 97)), uniform(-3.f, 3.f), uniform(0.f, 50.f)};
    kiln_norm_stat b = {(float)(1 + (i % 89)), uniform(-3.f, 3.f), uniform(0.f, 50.f)};
    const kiln_norm_stat ab = lane_merge(a, b), ba = lane_merge(b, a);
    if (bits(ab.n) != bits(ba.n) || bits(ab.m) != bits(ba.m) || bits(ab.m2) != bits(ba.m2)) {
      if (bad++ < 5)
        printf("merge(a, b) != merge(b, a): a = {%a, %a, %a}, b = {%a, %a, %a}: m %a vs %a, m2 %a "
               "vs %a\n",
               a.n, a.m, a.m2, b.n, b.m, b.m2, ab.m, ba.m, ab.m2, ba.m2);
    }
  }
  printf("%d of 200000 merges not symmetric\n", bad);
  return bad ? 1 : 0;
}
