/* kiln_philox.cuh — kiln's counter-based random numbers: Philox-4x32-10
 * (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
 * SC 2011; the philox4x32 of Random123 with 10 rounds).
 *
 * A counter-based generator is a keyed bijection of a 128-bit counter: the
 * words for counter c under key k depend on (c, k) alone, so every thread
 * computes exactly the numbers it needs, in any order, on any launch shape,
 * and a backward pass regenerates a forward pass's numbers instead of storing
 * them. Hermetic like every kernel header (kiln_types.cuh): __umulhi is an
 * NVRTC built-in.
 *
 * Known answers (Random123's kat_vectors; tests/gpu checks its own C version
 * of this function against them and the kernels against that C version):
 *   ctr 0, key 0                      -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8
 *   ctr ffffffff x4, key ffffffff x2  -> 408f276d 41c83b0e a20bc7c6 6d5451fd
 *   ctr 243f6a88 85a308d3 13198a2e 03707344, key a4093822 299f31d0
 *                                     -> d16cfe09 94fdcceb 5001e420 24126ea1
 */
#ifndef KILN_PHILOX_CUH
#define KILN_PHILOX_CUH

#include "common/kiln_types.cuh"

#define KILN_PHILOX_M0 0xD2511F53u /* round multipliers */
#define KILN_PHILOX_M1 0xCD9E8D57u
#define KILN_PHILOX_W0 0x9E3779B9u /* Weyl key increments: golden ratio, sqrt(3) - 1 */
#define KILN_PHILOX_W1 0xBB67AE85u

/* Four 32-bit words: a counter or an output block. */
struct kiln_philox4 {
  unsigned x, y, z, w;
};

/* One round: two 32x32 -> 64-bit products, their halves swapped and xored
 * with the other two words and the round key. */
__device__ __forceinline__ kiln_philox4 kiln_philox_round(kiln_philox4 c, unsigned k0,
                                                          unsigned k1) {
  const unsigned hi0 = __umulhi(KILN_PHILOX_M0, c.x), lo0 = KILN_PHILOX_M0 * c.x;
  const unsigned hi1 = __umulhi(KILN_PHILOX_M1, c.z), lo1 = KILN_PHILOX_M1 * c.z;
  kiln_philox4 r;
  r.x = hi1 ^ c.y ^ k0;
  r.y = lo1;
  r.z = hi0 ^ c.w ^ k1;
  r.w = lo0;
  return r;
}

/* Philox-4x32-10 of counter c under key (k0, k1): ten rounds, the key bumped
 * by the Weyl constants between rounds (nine bumps). */
__device__ __forceinline__ kiln_philox4 kiln_philox4x32_10(kiln_philox4 c, unsigned k0,
                                                           unsigned k1) {
#pragma unroll
  for (int r = 0; r < 9; ++r) {
    c = kiln_philox_round(c, k0, k1);
    k0 += KILN_PHILOX_W0;
    k1 += KILN_PHILOX_W1;
  }
  return kiln_philox_round(c, k0, k1);
}

/* kiln's dropout stream (docs/kernels/dropout.md, "Random numbers"): the
 * block for element group g = i / 4 (elements 4g .. 4g+3, word i % 4 each)
 * of a launch seeded with (seed, offset):
 *   key     = (seed lo, seed hi)
 *   counter = (g lo, g hi, offset lo, offset hi)
 * Two launches with different offsets (or seeds) draw from disjoint counters
 * (or keys), so they are independent however many elements each has. */
__device__ __forceinline__ kiln_philox4 kiln_philox_group(unsigned long long seed,
                                                          unsigned long long offset,
                                                          unsigned long long g) {
  kiln_philox4 c;
  c.x = (unsigned)g;
  c.y = (unsigned)(g >> 32);
  c.z = (unsigned)offset;
  c.w = (unsigned)(offset >> 32);
  return kiln_philox4x32_10(c, (unsigned)seed, (unsigned)(seed >> 32));
}

/* Word j (0..3) of a block. */
__device__ __forceinline__ unsigned kiln_philox_word(const kiln_philox4 &b, int j) {
  return j == 0 ? b.x : j == 1 ? b.y : j == 2 ? b.z : b.w;
}

#endif /* KILN_PHILOX_CUH */
