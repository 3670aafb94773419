/* Fuzzes the remote cache's response sink (cache/remote/sink.c): header lines
 * up to a blank line, then the body in chunks, into a memory sink with a small
 * max_bytes and sometimes an expected digest. Input: byte 0 picks the chunk
 * size, byte 1 the options, then the response text. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/remote/sink.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* the digest of "hello" (so some inputs can match it) */
  static const char hello[] = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
  kiln_http_sink *s = NULL;
  uint8_t *body = NULL;
  size_t len = 0, chunk, i;
  uint8_t opts;
  if (size < 2) return 0;
  chunk = (size_t)(data[0] % 17) + 1;
  opts = data[1];
  data += 2;
  size -= 2;
  if (kiln_http_sink_new(&s, -1, (opts & 1) ? 64 : 4096, (opts & 2) ? hello : NULL) != 0) return 0;
  /* header lines, each with its line break, up to and including an empty one */
  i = 0;
  while (i < size) {
    const uint8_t *nl = memchr(data + i, '\n', size - i);
    size_t end = nl ? (size_t)(nl - data) + 1 : size;
    size_t n = end - i;
    kiln_http_sink_header(s, (const char *)data + i, n);
    i = end;
    if (n <= 2 && (data[end - 1] == '\n')) break; /* "\r\n" or "\n": end of headers */
  }
  /* the body, in chunks; stop as libcurl would when the sink refuses */
  while (i < size) {
    size_t n = size - i < chunk ? size - i : chunk;
    if (kiln_http_sink_body(s, data + i, n) != n) break;
    i += n;
    if (opts & 4) chunk = chunk * 2 + 1;
  }
  if (kiln_http_sink_finish(s, &body, &len) == 0 && body && body[len] != 0) abort();
  free(body);
  kiln_http_sink_free(s);
  return 0;
}
