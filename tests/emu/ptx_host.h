/* ptx_host.h — what the PTX instructions in kernels/common/kiln_types.cuh do,
 * as host functions on bit patterns (PTX ISA: cvt, ex2). host_prelude.h runs
 * them in place of the inline PTX; the test uses them to read and write
 * 16-bit tensors, so it never relies on the kernel headers' own code. No
 * macros here: safe to include anywhere. */
#ifndef KILN_EMU_PTX_HOST_H
#define KILN_EMU_PTX_HOST_H

#include <math.h>   /* exp2f, fabsf */
#include <stdint.h> /* uint32_t */
#include <string.h> /* memcpy */

namespace kiln_emu {

/* cvt.f32.f16: exact. */
inline float f16_bits_to_f32(unsigned short h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0x1f)
    u = sign | 0x7f800000u | (m << 13); /* inf, NaN (payload kept) */
  else if (e != 0)
    u = sign | ((e + 112u) << 23) | (m << 13); /* rebias 15 -> 127 */
  else {
    const float v = (float)m * 0x1p-24f; /* subnormal or zero: exact in f32 */
    return sign ? -v : v;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* cvt.rn.f16.f32: round to nearest even, overflow to inf, subnormals kept. */
inline unsigned short f32_to_f16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  if (a >= 0x38800000u) {                                        /* normal in f16: >= 2^-14 */
    const uint32_t r = a - 0x38000000u;                          /* exponent 127 -> 15 bias */
    return (unsigned short)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  if (a < 0x33000000u) return (unsigned short)sign; /* <= 2^-25 (a tie): rounds to 0 */
  const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e; /* value / 2^-24 = m >> shift; 14 <= shift <= 24 */
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q; /* may carry into the smallest normal */
  return (unsigned short)(sign | q);
}

/* cvt.rn.bf16.f32: round to nearest even, NaN stays (quiet) NaN. */
inline unsigned short f32_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ex2.approx.ftz.f32: 2^x with subnormal inputs and results flushed to 0.
 * The hardware's approximation error (about 2 ulp) is not modelled: exp2f is
 * correctly rounded or nearly so. */
inline float ex2_approx_ftz(float x) {
  if (fabsf(x) < 0x1p-126f) x = 0.f;
  const float y = exp2f(x);
  return y < 0x1p-126f ? 0.f : y;
}

} // namespace kiln_emu

#endif /* KILN_EMU_PTX_HOST_H */
