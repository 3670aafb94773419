/* The entry points an image defines (cache/entries.h). Reads fields with
 * little-endian loads at checked offsets: the image may be
 * anything. */
#include "cache/entries.h"

#include <string.h>

#include "common/bytes.h"

enum {
  EHDR_SIZE = 64, /* Elf64_Ehdr */
  SHDR_SIZE = 64, /* Elf64_Shdr */
  SYM_SIZE = 24,  /* Elf64_Sym */
  SHT_SYMTAB = 2,
  STT_FUNC = 2,
  STB_GLOBAL = 1,
};

/* The symbol table and its string table; 0 when the image has none that
 * lies inside it. */
static int find_symtab(const uint8_t *img, size_t size, const uint8_t **sym, uint64_t *n_sym,
                       const uint8_t **str, uint64_t *str_size) {
  uint64_t shoff, shnum;
  if (size < EHDR_SIZE || memcmp(img, "\177ELF", 4) != 0 || img[4] != 2 || img[5] != 1) return 0;
  shoff = kiln_le(img + 40, 8), shnum = kiln_le(img + 60, 2);
  if (kiln_le(img + 58, 2) != SHDR_SIZE || shnum > size / SHDR_SIZE ||
      !kiln_span_inside(shoff, shnum * SHDR_SIZE, size))
    return 0;
  for (uint64_t i = 0; i < shnum; i++) {
    const uint8_t *sh = img + shoff + i * SHDR_SIZE, *lk;
    uint64_t off = kiln_le(sh + 24, 8), sz = kiln_le(sh + 32, 8), link = kiln_le(sh + 40, 4);
    if (kiln_le(sh + 4, 4) != SHT_SYMTAB) continue;
    if (!kiln_span_inside(off, sz, size) || link >= shnum) return 0;
    lk = img + shoff + link * SHDR_SIZE;
    if (!kiln_span_inside(kiln_le(lk + 24, 8), kiln_le(lk + 32, 8), size)) return 0;
    *sym = img + off, *n_sym = sz / SYM_SIZE;
    *str = img + kiln_le(lk + 24, 8), *str_size = kiln_le(lk + 32, 8);
    return 1;
  }
  return 0;
}

static int cubin_defines(const uint8_t *sym, uint64_t n_sym, const uint8_t *str, uint64_t str_size,
                         const char *name) {
  const size_t len = strlen(name);
  for (uint64_t i = 0; i < n_sym; i++) {
    const uint8_t *s = sym + i * SYM_SIZE;
    const uint64_t at = kiln_le(s, 4), info = s[4], shndx = kiln_le(s + 6, 2);
    if ((info & 0xf) != STT_FUNC || (info >> 4) != STB_GLOBAL || shndx == 0) continue;
    if (at < str_size && len < str_size - at && memcmp(str + at, name, len) == 0 &&
        str[at + len] == '\0')
      return 1;
  }
  return 0;
}

static int is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* An `.entry NAME` directive: `.entry`, blanks, NAME, then `(` or a blank. */
static int ptx_defines(const uint8_t *img, size_t size, const char *name) {
  const size_t len = strlen(name);
  for (size_t i = 0; i + 6 < size; i++) {
    size_t p = i + 6;
    if (memcmp(img + i, ".entry", 6) != 0 || !is_space(img[p])) continue;
    while (p < size && is_space(img[p]))
      p++;
    if (p + len < size && memcmp(img + p, name, len) == 0 &&
        (img[p + len] == '(' || is_space(img[p + len])))
      return 1;
  }
  return 0;
}

const char *kiln_image_missing_entry(const uint8_t *img, size_t size, const char *kind,
                                     const kiln_unit_info *unit) {
  const uint8_t *sym = NULL, *str = NULL;
  uint64_t n_sym = 0, str_size = 0;
  const int cubin = strcmp(kind, "cubin") == 0;
  /* a CUBIN whose symbol table cannot be read is a broken image, not another
   * unit's: the loader's shape check (loader/image.c) judges it */
  if (cubin && !find_symtab(img, size, &sym, &n_sym, &str, &str_size)) return NULL;
  for (size_t e = 0; e < unit->n_entries; e++) {
    const char *name = unit->entries[e].name;
    if (cubin ? !cubin_defines(sym, n_sym, str, str_size, name) : !ptx_defines(img, size, name))
      return name;
  }
  return NULL;
}
