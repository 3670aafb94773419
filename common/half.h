/* Internal: fp16 / bf16 <-> fp32 on the host, round to nearest even (as the
 * kernels' cvt.rn), for known-answer tests and reference data. */
#ifndef KILN_COMMON_HALF_H
#define KILN_COMMON_HALF_H

#include <stdint.h>

uint16_t kiln_f32_to_f16(float f);
float kiln_f16_to_f32(uint16_t h);
uint16_t kiln_f32_to_bf16(float f);
float kiln_bf16_to_f32(uint16_t b);

#endif
