/* device_buffer.h — a tensor as a kernel sees it: elements of one dtype in
 * device layout, between guard zones. Guards must come back untouched; under
 * AddressSanitizer they are poisoned, so any access to them is reported at
 * once. Values go in and out as float through ptx_host.h's conversions (the
 * hardware's, not the kernel headers'), so a bug in a kernel's own
 * conversion code cannot hide in the test's. */
#ifndef KILN_EMU_DEVICE_BUFFER_H
#define KILN_EMU_DEVICE_BUFFER_H

#include <stddef.h> /* size_t */
#include <string.h> /* memcpy */

#include <vector> /* std::vector */

#include "ptx_host.h" /* f16_bits_to_f32, f32_to_f16_bits, f32_to_bf16_bits */

#include "asan.h" /* KILN_EMU_ASAN, ASAN_(UN)POISON_MEMORY_REGION, fiber switches */

namespace kiln_emu {

/* Element types, in softmax_variants.def's dtype order, and plain bytes. */
enum { kF32, kF16, kBf16, kDtypeCount };
const int kMaskBytes = -1; /* uint8 mask bytes rather than a dtype */

const size_t kGuardElems = 64;
const unsigned char kGuardByte = 0xA5;

inline size_t elem_size(int dtype) {
  return dtype == kF32 ? 4 : dtype == kMaskBytes ? 1 : 2;
}

struct buffer {
  int dtype;
  size_t n;
  size_t shift; /* elements of guard added before element 0: a misaligned tensor */
  std::vector<unsigned char> raw;

  buffer(int dt, size_t count, size_t shift_elems = 0)
      : dtype(dt), n(count), shift(shift_elems),
        raw((count + shift_elems + 2 * kGuardElems) * elem_size(dt), kGuardByte) {
    ASAN_POISON_MEMORY_REGION(raw.data(), front_bytes());
    ASAN_POISON_MEMORY_REGION(raw.data() + raw.size() - guard_bytes(), guard_bytes());
  }
  ~buffer() {
    ASAN_UNPOISON_MEMORY_REGION(raw.data(), raw.size());
  }
  buffer(const buffer &) = delete;
  buffer &operator=(const buffer &) = delete;

  size_t guard_bytes() const {
    return kGuardElems * elem_size(dtype);
  }
  size_t front_bytes() const { /* the guard before element 0 */
    return guard_bytes() + shift * elem_size(dtype);
  }
  void *data() {
    return raw.data() + front_bytes();
  }
  unsigned char *at(size_t i) {
    return raw.data() + front_bytes() + i * elem_size(dtype);
  }

  float get(size_t i) {
    const unsigned char *p = at(i);
    if (dtype == kF32) {
      float f;
      memcpy(&f, p, 4);
      return f;
    }
    unsigned short h;
    memcpy(&h, p, 2);
    if (dtype == kF16) return f16_bits_to_f32(h);
    const uint32_t u = (uint32_t)h << 16; /* bf16 is the top half of an f32 */
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  /* Stores v rounded to the dtype (as the hardware would); returns what it stored. */
  float set(size_t i, float v) {
    unsigned char *p = at(i);
    if (dtype == kF32) {
      memcpy(p, &v, 4);
    } else {
      const unsigned short h = dtype == kF16 ? f32_to_f16_bits(v) : f32_to_bf16_bits(v);
      memcpy(p, &h, 2);
    }
    return get(i);
  }
  std::vector<float> values() {
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i)
      out[i] = get(i);
    return out;
  }
  bool guards_intact() {
    const size_t g = guard_bytes(), f = front_bytes();
    ASAN_UNPOISON_MEMORY_REGION(raw.data(), f);
    ASAN_UNPOISON_MEMORY_REGION(raw.data() + raw.size() - g, g);
    bool ok = true;
    for (size_t i = 0; i < f; ++i)
      ok = ok && raw[i] == kGuardByte;
    for (size_t i = 0; i < g; ++i)
      ok = ok && raw[raw.size() - 1 - i] == kGuardByte;
    ASAN_POISON_MEMORY_REGION(raw.data(), f);
    ASAN_POISON_MEMORY_REGION(raw.data() + raw.size() - g, g);
    return ok;
  }
  std::vector<unsigned char> bytes() {
    return std::vector<unsigned char>(at(0), at(n));
  }
};

} // namespace kiln_emu

#endif /* KILN_EMU_DEVICE_BUFFER_H */
