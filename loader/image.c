/* The shape check of CUBIN and PTX images (loader/image.h). Reads fields
 * with memcpy at checked offsets: the image may be anything. */
#include "loader/image.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/bytes.h"

enum {
  EHDR_SIZE = 64, /* Elf64_Ehdr */
  PHDR_SIZE = 56, /* Elf64_Phdr */
  SHDR_SIZE = 64, /* Elf64_Shdr */
  EM_CUDA = 190,
  SHT_NOBITS = 8,
};

static int bad(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *why, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, cap, fmt, ap);
  va_end(ap);
  return -1;
}

/* A header table of n entries of ent bytes at off lies inside the image. */
static int table(size_t size, uint64_t off, uint64_t n, uint64_t ent, const char *what, char *why,
                 size_t cap) {
  if (n && (n > size / ent || !kiln_span_inside(off, n * ent, size)))
    return bad(why, cap, "its %llu %s headers at offset %llu run past its end (%zu bytes)",
               (unsigned long long)n, what, (unsigned long long)off, size);
  return 0;
}

static int check_elf(const uint8_t *img, size_t size, char *why, size_t cap) {
  uint64_t phoff, shoff, phnum, shnum, phent, shent, shstrndx;
  if (size < EHDR_SIZE) return bad(why, cap, "%zu bytes is shorter than an ELF header", size);
  if (memcmp(img, "\177ELF", 4) != 0) return bad(why, cap, "not an ELF file");
  if (img[4] != 2 || img[5] != 1) return bad(why, cap, "not a little-endian ELF64 file");
  if (kiln_le(img + 18, 2) != EM_CUDA)
    return bad(why, cap, "ELF machine %llu is not EM_CUDA (190)",
               (unsigned long long)kiln_le(img + 18, 2));
  phoff = kiln_le(img + 32, 8), shoff = kiln_le(img + 40, 8);
  if (kiln_le(img + 52, 2) < EHDR_SIZE) return bad(why, cap, "ELF header size below 64");
  phent = kiln_le(img + 54, 2), phnum = kiln_le(img + 56, 2);
  shent = kiln_le(img + 58, 2), shnum = kiln_le(img + 60, 2), shstrndx = kiln_le(img + 62, 2);
  if (phnum && phent != PHDR_SIZE)
    return bad(why, cap, "program header size %llu, not 56", (unsigned long long)phent);
  if (shnum && shent != SHDR_SIZE)
    return bad(why, cap, "section header size %llu, not 64", (unsigned long long)shent);
  if (!shnum && shoff) return bad(why, cap, "extended section numbering (not written by NVRTC)");
  if (shnum && shstrndx >= shnum)
    return bad(why, cap, "section name table %llu of %llu sections", (unsigned long long)shstrndx,
               (unsigned long long)shnum);
  if (table(size, phoff, phnum, PHDR_SIZE, "program", why, cap) ||
      table(size, shoff, shnum, SHDR_SIZE, "section", why, cap))
    return -1;
  for (uint64_t i = 0; i < phnum; i++) {
    const uint8_t *ph = img + phoff + i * PHDR_SIZE;
    const uint64_t off = kiln_le(ph + 8, 8), filesz = kiln_le(ph + 32, 8);
    if (!kiln_span_inside(off, filesz, size))
      return bad(why, cap, "segment %llu (%llu bytes at %llu) runs past its end (%zu bytes)",
                 (unsigned long long)i, (unsigned long long)filesz, (unsigned long long)off, size);
  }
  for (uint64_t i = 0; i < shnum; i++) {
    const uint8_t *sh = img + shoff + i * SHDR_SIZE;
    const uint64_t type = kiln_le(sh + 4, 4), off = kiln_le(sh + 24, 8), sz = kiln_le(sh + 32, 8);
    if (type != SHT_NOBITS && !kiln_span_inside(off, sz, size))
      return bad(why, cap, "section %llu (%llu bytes at %llu) runs past its end (%zu bytes)",
                 (unsigned long long)i, (unsigned long long)sz, (unsigned long long)off, size);
  }
  return 0;
}

static int check_ptx(const uint8_t *img, size_t size, char *why, size_t cap) {
  for (size_t i = 0; i < size; i++) {
    const uint8_t c = img[i];
    if (c == '\t' || c == '\n' || c == '\r' || (c >= 0x20 && c < 0x7f)) continue;
    return bad(why, cap, "byte 0x%02x at offset %zu: PTX is printable text", c, i);
  }
  return 0;
}

int kiln_image_check(const uint8_t *img, size_t size, const char *kind, char *why, size_t cap) {
  if (!size) return bad(why, cap, "an empty (0-byte) image");
  if (strcmp(kind, "cubin") == 0) return check_elf(img, size, why, cap);
  if (strcmp(kind, "ptx") == 0) return check_ptx(img, size, why, cap);
  return bad(why, cap, "unknown image kind '%s'", kind);
}
