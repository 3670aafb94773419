/* The remote cache's body sink (cache/remote/sink.h): every response of the
 * transport (cache/remote/http.c) goes through it. It tracks the status line
 * and Content-Length, keeps the start of an error body for the message, and
 * streams a 2xx body to a file or memory, bounded by max_bytes and hashed
 * against the expected digest as it arrives. */
#include <errno.h>   /* EINTR, EIO */
#include <stdint.h>  /* INT64_MAX, SIZE_MAX */
#include <stdlib.h>  /* calloc, realloc, free */
#include <string.h>  /* memcpy, memcmp, strcmp */
#include <strings.h> /* strncasecmp */
#include <unistd.h>  /* write */

#include "cache/remote/sink.h"
#include "common/digest.h"
#include "common/error.h"

/* Error bodies (non-2xx) are kept only this far, never validated. */
#define KILN_HTTP_ERROR_BODY_MAX 4096

struct kiln_http_sink {
  int fd;
  uint64_t max;
  char expect[65];
  kiln_sha256 *sha;
  long status;         /* from the last status line, 0 none seen */
  int64_t content_len; /* -1 unknown */
  uint64_t got;        /* 2xx body bytes */
  uint8_t *buf;
  size_t len, cap;
  int too_long, write_err, sha_err;
  uint8_t *err_body; /* non-2xx body, capped */
  size_t err_len;
};

static int sink_is_error(const kiln_http_sink *s) {
  return s->status != 0 && (s->status < 200 || s->status > 299);
}

kiln_status kiln_http_sink_new(kiln_http_sink **out, int out_fd, uint64_t max_bytes,
                               const char *expect_digest) {
  kiln_status rc = KILN_OK;
  kiln_http_sink *s = NULL;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_http_sink_new: out is NULL");
  *out = NULL;
  if (expect_digest && !kiln_is_hex64(expect_digest)) {
    rc = kiln_fail(KILN_EINVAL, "expected digest is not 64 lowercase hex digits");
    goto out;
  }
  s = calloc(1, sizeof *s);
  if (!s) {
    rc = kiln_fail(KILN_ENOMEM, "http sink");
    goto out;
  }
  s->fd = out_fd;
  s->max = max_bytes;
  s->content_len = -1;
  if (expect_digest) {
    memcpy(s->expect, expect_digest, 65);
    KILN_CHECK(kiln_sha256_new(&s->sha));
  }
  *out = s;
  s = NULL;
out:
  kiln_http_sink_free(s);
  return rc;
}

/* The value of "Content-Length:" when it is only digits (and whitespace) and
 * fits; -1 otherwise. */
static int64_t parse_content_length(const char *p, const char *end) {
  int64_t v = 0;
  int digits = 0;
  while (p < end && (*p == ' ' || *p == '\t'))
    p++;
  for (; p < end && *p >= '0' && *p <= '9'; p++) {
    if (v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (*p - '0');
    digits++;
  }
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
    p++;
  return (digits && p == end) ? v : -1;
}

/* "HTTP/1.1 200 OK" -> 200; 0 when malformed. */
static long parse_status_line(const char *p, const char *end) {
  long v = 0;
  int digits = 0;
  p += 5;
  while (p < end && *p != ' ')
    p++;
  while (p < end && *p == ' ')
    p++;
  for (; p < end && *p >= '0' && *p <= '9' && digits < 3; p++, digits++)
    v = v * 10 + (*p - '0');
  return digits == 3 ? v : 0;
}

void kiln_http_sink_header(kiln_http_sink *s, const char *line, size_t len) {
  static const char cl[] = "content-length:";
  const char *end = line + len;
  if (!s || !line) return;
  if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
    /* A new response (after 100-continue, or a retry): its headers count. */
    s->status = parse_status_line(line, end);
    s->content_len = -1;
    return;
  }
  if (len > sizeof cl - 1 && strncasecmp(line, cl, sizeof cl - 1) == 0)
    s->content_len = parse_content_length(line + sizeof cl - 1, end);
}

static int sink_write_fd(kiln_http_sink *s, const uint8_t *p, size_t len) {
  while (len > 0) {
    ssize_t w = write(s->fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

static int sink_write_mem(kiln_http_sink *s, const uint8_t *p, size_t len) {
  if (s->cap - s->len < len + 1) {
    size_t cap = s->cap ? s->cap : 4096;
    uint8_t *nb;
    while (cap - s->len < len + 1) {
      if (cap > SIZE_MAX / 2) return -1;
      cap *= 2;
    }
    nb = realloc(s->buf, cap);
    if (!nb) return -1;
    s->buf = nb;
    s->cap = cap;
  }
  memcpy(s->buf + s->len, p, len);
  s->len += len;
  s->buf[s->len] = 0;
  return 0;
}

size_t kiln_http_sink_body(kiln_http_sink *s, const void *data, size_t len) {
  if (!s || (!data && len)) return 0;
  if (len == 0) return 0;
  if (sink_is_error(s)) {
    /* Keep the start of an error body for the message; drop the rest. */
    size_t keep = KILN_HTTP_ERROR_BODY_MAX - s->err_len;
    if (keep > len) keep = len;
    if (keep) {
      uint8_t *nb = realloc(s->err_body, s->err_len + keep + 1);
      if (nb) {
        s->err_body = nb;
        memcpy(nb + s->err_len, data, keep);
        s->err_len += keep;
        nb[s->err_len] = 0;
      }
    }
    return len;
  }
  if (s->max && (s->got > s->max || len > s->max - s->got)) {
    s->too_long = 1;
    return 0;
  }
  if (s->sha && kiln_sha256_update(s->sha, data, len) != KILN_OK) {
    s->sha_err = 1;
    return 0;
  }
  if (s->fd >= 0 ? sink_write_fd(s, data, len) : sink_write_mem(s, data, len)) {
    s->write_err = errno ? errno : EIO;
    return 0;
  }
  s->got += len;
  return len;
}

kiln_status kiln_http_sink_finish(kiln_http_sink *s, uint8_t **data, size_t *len) {
  kiln_status rc = KILN_OK;
  char hex[65];
  if (data) *data = NULL;
  if (len) *len = 0;
  if (!s) return kiln_fail(KILN_EINVAL, "kiln_http_sink_finish: sink is NULL");
  if (sink_is_error(s)) goto out; /* nothing to validate: the status says it all */
  if (s->too_long) {
    rc = kiln_fail(KILN_ECORRUPT, "body larger than %llu bytes", (unsigned long long)s->max);
    goto out;
  }
  if (s->write_err) {
    rc = kiln_fail_errno(KILN_EIO, s->write_err, "writing the downloaded body");
    goto out;
  }
  if (s->sha_err) {
    rc = kiln_fail(KILN_EINTERNAL, "hashing the downloaded body");
    goto out;
  }
  if (s->content_len >= 0 && s->got != (uint64_t)s->content_len) {
    rc = kiln_fail(KILN_ECORRUPT, "%s: got %llu of %lld bytes",
                   s->got < (uint64_t)s->content_len ? "truncated" : "too long",
                   (unsigned long long)s->got, (long long)s->content_len);
    goto out;
  }
  if (s->sha) {
    KILN_CHECK(kiln_sha256_final_hex(s->sha, hex));
    if (strcmp(hex, s->expect) != 0) {
      rc = kiln_fail(KILN_ECORRUPT, "digest mismatch: expected %.12s..., got %.12s...", s->expect,
                     hex);
      goto out;
    }
  }
  if (s->fd < 0 && data) {
    if (!s->buf) s->buf = calloc(1, 1); /* an empty body is "" */
    if (!s->buf) {
      rc = kiln_fail(KILN_ENOMEM, "http body");
      goto out;
    }
    *data = s->buf;
    if (len) *len = s->len;
    s->buf = NULL;
    s->len = s->cap = 0;
  }
out:
  return rc;
}

void kiln_http_sink_free(kiln_http_sink *s) {
  if (!s) return;
  kiln_sha256_free(s->sha);
  free(s->buf);
  free(s->err_body);
  free(s);
}
