/* POSIX ustar, written and read as a stream (cache/archive.h). */
#include "cache/archive.h"

#include <errno.h>  /* EINTR */
#include <stdio.h>  /* snprintf */
#include <string.h> /* memset, memcpy, strnlen */
#include <unistd.h> /* read, write */

#include "common/error.h"

/* ustar's header fields: offset, length. */
enum {
  H_NAME = 0,
  H_MODE = 100,
  H_UID = 108,
  H_GID = 116,
  H_SIZE = 124,
  H_MTIME = 136,
  H_CHKSUM = 148,
  H_TYPE = 156,
  H_MAGIC = 257,
  H_VERSION = 263,
  H_UNAME = 265,
  H_GNAME = 297,
  H_PREFIX = 345
};

static kiln_status write_all(kiln_tar_writer *w, const void *data, size_t len, int sum) {
  const unsigned char *p = data;
  if (sum && w->sum && len) {
    kiln_status rc = kiln_sha256_update(w->sum, data, len);
    if (rc != KILN_OK) return rc;
  }
  while (len) {
    ssize_t n = write(w->fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return kiln_fail_errno(KILN_EIO, errno, "writing the archive");
    p += n;
    len -= (size_t)n;
    w->offset += (uint64_t)n;
  }
  return KILN_OK;
}

/* The sum of the header's bytes, its checksum field counted as spaces. */
static unsigned long checksum(const unsigned char *b) {
  unsigned long sum = 0;
  for (int i = 0; i < KILN_TAR_BLOCK; i++)
    sum += (i >= H_CHKSUM && i < H_CHKSUM + 8) ? (unsigned char)' ' : b[i];
  return sum;
}

/* A numeric field: width - 1 octal digits, then NUL (values that do not fit
 * are refused before this is called). */
static void octal_field(unsigned char *f, int width, unsigned long long v) {
  char tmp[32];
  snprintf(tmp, sizeof tmp, "%0*llo", width - 1, v);
  memcpy(f, tmp, (size_t)width - 1);
  f[width - 1] = '\0';
}

/* The header of a member of len bytes into h. */
static kiln_status make_header(unsigned char h[KILN_TAR_BLOCK], const char *name, size_t len,
                               int64_t mtime) {
  size_t nlen = strlen(name);
  if (!nlen || nlen > KILN_TAR_NAME_MAX || (uint64_t)len > KILN_TAR_SIZE_MAX)
    return kiln_fail(KILN_EINVAL, "archive member '%s' (%zu bytes) does not fit ustar", name, len);
  memset(h, 0, KILN_TAR_BLOCK);
  memcpy(h + H_NAME, name, nlen);
  octal_field(h + H_MODE, 8, 0444);
  octal_field(h + H_UID, 8, 0);
  octal_field(h + H_GID, 8, 0);
  octal_field(h + H_SIZE, 12, (unsigned long long)len);
  octal_field(h + H_MTIME, 12, mtime > 0 && mtime < 077777777777LL ? (unsigned long long)mtime : 0);
  h[H_TYPE] = '0';
  memcpy(h + H_MAGIC, "ustar", 6); /* "ustar\0" */
  memcpy(h + H_VERSION, "00", 2);
  memcpy(h + H_UNAME, "kiln", 4);
  memcpy(h + H_GNAME, "kiln", 4);
  octal_field(h + H_CHKSUM, 7, checksum(h)); /* six digits, NUL, then a space */
  h[H_CHKSUM + 7] = ' ';
  return KILN_OK;
}

static const unsigned char zeros[2 * KILN_TAR_BLOCK];

kiln_status kiln_tar_write(kiln_tar_writer *w, const char *name, const void *data, size_t len,
                           int64_t mtime, int sum_data) {
  unsigned char h[KILN_TAR_BLOCK];
  kiln_status rc;
  KILN_CHECK(make_header(h, name, len, mtime));
  KILN_CHECK(write_all(w, h, sizeof h, 1));
  if (len) KILN_CHECK(write_all(w, data, len, sum_data));
  if (len % KILN_TAR_BLOCK)
    KILN_CHECK(write_all(w, zeros, KILN_TAR_BLOCK - len % KILN_TAR_BLOCK, 1));
out:
  return rc;
}

kiln_status kiln_tar_write_sum(kiln_tar_writer *w, const char *name, int64_t mtime) {
  unsigned char h[KILN_TAR_BLOCK];
  char hex[66];
  kiln_status rc;
  if (!w->sum) return kiln_fail(KILN_EINVAL, "kiln_tar_write_sum: the writer keeps no sum");
  KILN_CHECK(make_header(h, name, 65, mtime));
  KILN_CHECK(write_all(w, h, sizeof h, 1));
  KILN_CHECK(kiln_sha256_final_hex(w->sum, hex));
  hex[64] = '\n';
  KILN_CHECK(write_all(w, hex, 65, 0));
  rc = write_all(w, zeros, KILN_TAR_BLOCK - 65, 0);
out:
  return rc;
}

kiln_status kiln_tar_write_end(kiln_tar_writer *w) {
  return write_all(w, zeros, sizeof zeros, 0);
}

/* An octal field: digits, then NUL or spaces. 0 when it is not one. */
static int octal(const unsigned char *f, size_t len, uint64_t *out) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < len && f[i] == ' ')
    i++;
  if (i == len || f[i] < '0' || f[i] > '7') return 0;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
    if (v > (UINT64_MAX >> 3)) return 0;
    v = v * 8 + (uint64_t)(f[i] - '0');
  }
  for (; i < len; i++)
    if (f[i] != ' ' && f[i] != '\0') return 0;
  *out = v;
  return 1;
}

kiln_status kiln_tar_parse_header(const unsigned char b[KILN_TAR_BLOCK],
                                  char name[KILN_TAR_NAME_MAX + 1], uint64_t *size, int *zero) {
  uint64_t sum = 0;
  size_t nlen;
  int all_zero = 1;
  for (int i = 0; i < KILN_TAR_BLOCK && all_zero; i++)
    all_zero = b[i] == 0;
  *zero = all_zero;
  if (all_zero) return KILN_OK;
  if (!octal(b + H_CHKSUM, 8, &sum) || sum != checksum(b))
    return kiln_fail(KILN_ECORRUPT, "a header's checksum is wrong");
  if (memcmp(b + H_MAGIC, "ustar", 5) != 0)
    return kiln_fail(KILN_ECORRUPT, "a header is not ustar (magic)");
  if (b[H_TYPE] != '0' && b[H_TYPE] != '\0')
    return kiln_fail(KILN_ECORRUPT, "a member of type '%c' (only regular files belong here)",
                     b[H_TYPE] >= 0x20 && b[H_TYPE] < 0x7f ? b[H_TYPE] : '?');
  if (b[H_PREFIX] != '\0') return kiln_fail(KILN_ECORRUPT, "a member name with a ustar prefix");
  nlen = strnlen((const char *)b + H_NAME, KILN_TAR_NAME_MAX);
  if (!nlen) return kiln_fail(KILN_ECORRUPT, "a member without a name");
  memcpy(name, b + H_NAME, nlen);
  name[nlen] = '\0';
  for (size_t i = 0; i < nlen; i++)
    if ((unsigned char)name[i] < 0x21 || (unsigned char)name[i] > 0x7e)
      return kiln_fail(KILN_ECORRUPT, "a member name with a control or non-ASCII byte");
  if (!octal(b + H_SIZE, 12, size) || *size > KILN_TAR_SIZE_MAX)
    return kiln_fail(KILN_ECORRUPT, "member %s: a size field that is not a size", name);
  return KILN_OK;
}

/* Exactly len bytes, or KILN_ECORRUPT "truncated"; added to the sum when sum. */
static kiln_status read_all(kiln_tar_reader *r, void *buf, size_t len, int sum) {
  unsigned char *p = buf;
  size_t want = len;
  while (len) {
    ssize_t n = read(r->fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return kiln_fail_errno(KILN_EIO, errno, "reading %s", r->what);
    if (n == 0)
      return kiln_fail(KILN_ECORRUPT, "%s is truncated (it ends at byte %llu)", r->what,
                       (unsigned long long)r->offset);
    p += n;
    len -= (size_t)n;
    r->offset += (uint64_t)n;
  }
  return sum && r->sum ? kiln_sha256_update(r->sum, buf, want) : KILN_OK;
}

/* Skips the rest of the member's data, then its padding, which must be zeros. */
static kiln_status skip(kiln_tar_reader *r) {
  unsigned char buf[16384];
  kiln_status rc = KILN_OK;
  while (r->left && rc == KILN_OK) {
    size_t k = r->left < sizeof buf ? (size_t)r->left : sizeof buf;
    rc = read_all(r, buf, k, r->sum_data);
    r->left -= k;
  }
  if (rc == KILN_OK && r->padding) {
    uint64_t at = r->offset;
    KILN_CHECK(read_all(r, buf, (size_t)r->padding, 1));
    for (size_t i = 0; i < r->padding; i++)
      if (buf[i])
        return kiln_fail(KILN_ECORRUPT, "%s: at byte %llu: padding that is not zeros", r->what,
                         (unsigned long long)(at + i));
    r->padding = 0;
  }
out:
  return rc;
}

kiln_status kiln_tar_next(kiln_tar_reader *r, char name[KILN_TAR_NAME_MAX + 1], uint64_t *size,
                          int *end) {
  unsigned char b[KILN_TAR_BLOCK];
  uint64_t at;
  kiln_status rc;
  int zero = 0;
  *end = 0;
  KILN_CHECK(skip(r));
  r->sum_data = 1;
  at = r->offset;
  KILN_CHECK(read_all(r, b, sizeof b, 1));
  rc = kiln_tar_parse_header(b, name, size, &zero);
  if (rc != KILN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    return kiln_fail(KILN_ECORRUPT, "%s: at byte %llu: %s", r->what, (unsigned long long)at, why);
  }
  if (zero) { /* the end: a second zero block must follow */
    KILN_CHECK(read_all(r, b, sizeof b, 1));
    rc = kiln_tar_parse_header(b, name, size, &zero);
    if (rc != KILN_OK || !zero)
      return kiln_fail(KILN_ECORRUPT, "%s: at byte %llu: one zero block, then more data", r->what,
                       (unsigned long long)at);
    *end = 1;
    return KILN_OK;
  }
  r->left = *size;
  r->padding = (KILN_TAR_BLOCK - *size % KILN_TAR_BLOCK) % KILN_TAR_BLOCK;
out:
  return rc;
}

kiln_status kiln_tar_read(kiln_tar_reader *r, void *buf, size_t cap, size_t *got) {
  size_t n = r->left < cap ? (size_t)r->left : cap;
  kiln_status rc = KILN_OK;
  *got = 0;
  if (n) {
    KILN_CHECK(read_all(r, buf, n, r->sum_data));
    r->left -= n;
    *got = n;
  }
out:
  return rc;
}
