/* fp16 / bf16 conversions on the host (round to nearest even). */
#include "common/half.h"

#include <math.h>
#include <string.h>

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t kiln_f32_to_bf16(float f) {
  uint32_t u = bits_of(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, sign kept */
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

float kiln_bf16_to_f32(uint16_t b) {
  return float_of((uint32_t)b << 16);
}

uint16_t kiln_f32_to_f16(float f) {
  uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000, mant;
  int32_t exp;
  if (isnan(f)) return (uint16_t)(sign | 0x7e00);
  u &= 0x7fffffff;
  if (u >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
  exp = (int32_t)(u >> 23) - 127;
  mant = u & 0x7fffff;
  if (exp < -14) { /* subnormal or zero in fp16 */
    int shift;
    uint32_t m, half, rest;
    if (exp < -25) return (uint16_t)sign;
    m = mant | 0x800000;
    shift = -exp - 14 + 13; /* bits dropped */
    half = 1u << (shift - 1);
    rest = m & ((1u << shift) - 1);
    m >>= shift;
    if (rest > half || (rest == half && (m & 1))) m++;
    return (uint16_t)(sign | m);
  }
  {
    uint32_t h = (uint32_t)(exp + 15) << 10 | mant >> 13, rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++; /* may carry into the exponent: fine */
    return (uint16_t)(sign | h);
  }
}

float kiln_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return float_of(sign | 0x7f800000 | mant << 13);
  if (exp == 0) {
    float v = ldexpf((float)mant, -24);
    return sign ? -v : v;
  }
  return float_of(sign | (exp + 112) << 23 | mant << 13);
}
