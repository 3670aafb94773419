/* Internal: the body sink that every remote cache response goes through
 * (cache/remote/sink.c): bounded, streaming, hashed. The transport
 * (cache/remote/http.c) feeds it from libcurl's callbacks; it is on its own
 * so the fuzz target tests/fuzz/fuzz_http_response.c can drive it directly. */
#ifndef KILN_CACHE_REMOTE_SINK_H
#define KILN_CACHE_REMOTE_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/status.h"

typedef struct kiln_http_sink kiln_http_sink;
/* A sink for one attempt: a 2xx body goes to out_fd when >= 0, else to
 * memory; more than max_bytes (0: no limit) is refused; with expect_digest
 * (64 lowercase hex) the body is hashed as it arrives. KILN_EINVAL for a bad
 * digest, KILN_ENOMEM. */
kiln_status kiln_http_sink_new(kiln_http_sink **out, int out_fd, uint64_t max_bytes,
                               const char *expect_digest);
/* Feeds a header line as libcurl hands it ("HTTP/1.1 200 OK\r\n",
 * "Content-Length: 12\r\n", ...). Malformed lines are ignored. */
void kiln_http_sink_header(kiln_http_sink *s, const char *line, size_t len);
/* Feeds body bytes; returns len, or 0 to abort the transfer (too long,
 * write failed). */
size_t kiln_http_sink_body(kiln_http_sink *s, const void *data, size_t len);
/* At the end: KILN_OK, or KILN_ECORRUPT for too long / shorter than
 * Content-Length / digest mismatch, or KILN_EIO for a failed write, with
 * kiln_fail's detail. Moves a memory body (NUL-terminated) into *data. */
kiln_status kiln_http_sink_finish(kiln_http_sink *s, uint8_t **data, size_t *len);
void kiln_http_sink_free(kiln_http_sink *s);

#endif
