/* Fuzz target: the shape check every image passes before it reaches the
 * driver (loader/image.c). The input is tried as a CUBIN and as PTX. Whatever
 * passes as a CUBIN has every header, segment and section inside the
 * buffer: the target then touches the first and last byte of each, so a
 * check that lets one past the end is an ASan report here (the buffer is
 * exactly the input's size). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loader/image.h"

static volatile uint8_t sink;

static uint64_t rd(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;)
    v = v << 8 | p[i];
  return v;
}

static void touch(const uint8_t *img, uint64_t off, uint64_t len) {
  if (!len) return;
  sink ^= img[off];
  sink ^= img[off + len - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char why[256];
  uint8_t *img = malloc(size ? size : 1);
  if (!img) return 0;
  memcpy(img, data, size);
  if (kiln_image_check(img, size, "cubin", why, sizeof why) == 0) {
    const uint64_t phoff = rd(img + 32, 8), shoff = rd(img + 40, 8);
    const uint64_t phnum = rd(img + 56, 2), shnum = rd(img + 60, 2);
    touch(img, 0, 64);
    for (uint64_t i = 0; i < phnum; i++) {
      const uint8_t *ph = img + phoff + i * 56;
      touch(img, phoff + i * 56, 56);
      touch(img, rd(ph + 8, 8), rd(ph + 32, 8));
    }
    for (uint64_t i = 0; i < shnum; i++) {
      const uint8_t *sh = img + shoff + i * 64;
      touch(img, shoff + i * 64, 64);
      if (rd(sh + 4, 4) != 8) touch(img, rd(sh + 24, 8), rd(sh + 32, 8));
    }
  } else if (!why[0]) {
    abort(); /* a refusal always says why */
  }
  why[0] = '\0';
  if (kiln_image_check(img, size, "ptx", why, sizeof why) == 0) {
    if (memchr(img, 0, size)) abort(); /* PTX that passes has no NUL inside */
  } else if (!why[0]) {
    abort();
  }
  free(img);
  return 0;
}
