/* half.h — host-side fp16 and bf16 conversions for the gpu tests and the
 * benchmarks, bit-exact with the kernels' `cvt.rn.f16.f32` and
 * `cvt.rn.bf16.f32` (round to nearest even, fp16 subnormals kept, overflow
 * to infinity, NaN stays a quiet NaN with its sign). Written out rather than
 * taken from the compiler (_Float16, __bf16) so it builds with any C11
 * compiler and its rounding is the one the test states. */
#ifndef KILN_TESTS_GPU_HALF_H
#define KILN_TESTS_GPU_HALF_H

#include <stdint.h> /* uint16_t, uint32_t */
#include <string.h> /* memcpy */

static inline uint32_t half_bits_of_float(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float half_float_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Rounds u >> shift to nearest, ties to even (1 <= shift <= 24). */
static inline uint32_t half_round_shift(uint32_t u, unsigned shift) {
  const uint32_t q = u >> shift, rem = u & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
  return q + (rem > mid || (rem == mid && (q & 1u)));
}

/* fp32 -> fp16 bits. */
static inline uint16_t f16_from_float(float f) {
  const uint32_t u = half_bits_of_float(f);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN, quiet */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (and inf): inf */
  if (a >= 0x38800000u) /* normal: rebias the exponent 127 -> 15, round 13 bits off */
    return (uint16_t)(sign | half_round_shift(a - 0x38000000u, 13));
  if (a < 0x33000000u) return (uint16_t)sign; /* below 2^-25: 0 */
  /* subnormal: value / 2^-24, from the 24-bit significand; rounding up to
   * 0x400 gives the smallest normal, which is the right encoding too */
  return (uint16_t)(sign | half_round_shift((a & 0x7fffffu) | 0x800000u, 126u - (a >> 23)));
}

/* fp16 bits -> fp32 (exact). */
static inline float f16_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return half_float_of_bits(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    const float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
    return sign ? -v : v;
  }
  return half_float_of_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* fp32 -> bf16 bits. */
static inline uint16_t bf16_from_float(float f) {
  const uint32_t u = half_bits_of_float(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN, quiet */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* carries into inf correctly */
}

/* bf16 bits -> fp32 (exact). */
static inline float bf16_to_float(uint16_t b) {
  return half_float_of_bits((uint32_t)b << 16);
}

#endif
