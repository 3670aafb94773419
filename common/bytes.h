/* Internal: reading untrusted binary images (ELF CUBINs): little-endian
 * fields and bounds checked without overflow. Used by loader/image.c (the
 * loader's shape check) and cache/entries.c (a blob's entry points). */
#ifndef KILN_COMMON_BYTES_H
#define KILN_COMMON_BYTES_H

#include <stddef.h>
#include <stdint.h>

/* The little-endian unsigned integer of n bytes (n <= 8) at p. */
static inline uint64_t kiln_le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;)
    v = v << 8 | p[i];
  return v;
}

/* 1 when [off, off + len) lies inside [0, size), computed without overflow. */
static inline int kiln_span_inside(uint64_t off, uint64_t len, size_t size) {
  return off <= size && len <= size - off;
}

#endif
