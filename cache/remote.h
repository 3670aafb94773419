/* Internal: the remote cache's parts.
 *   cache/remote_http.c    libcurl transport: parallel GET/HEAD/PUT, retries, breaker
 *   cache/remote_sink.c    the transport's bounded, hashing body sink (cache/remote_sink.h)
 *   cache/remote_record.c  the record document (JSON) and its signature
 *   cache/remote.c         attach, settings, stats, check on top (include/kiln/remote.h)
 *   cache/remote_fetch.c   kiln_remote_fetch: records, then blobs into the store
 *   cache/remote_upload.c  kiln_remote_upload: HEAD record, PUT blob, PUT record */
#ifndef KILN_CACHE_REMOTE_H
#define KILN_CACHE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/cache.h"
#include "kiln/remote.h"
#include "kiln/status.h"

/* ---- transport (cache/remote_http.c) ---------------------------------------- */

typedef struct kiln_http kiln_http;

typedef struct kiln_http_config {
  char base[2048];    /* "http://host:port/prefix", no trailing '/' */
  char token[1024];   /* bearer token ("" none); sent as a header, never logged */
  int netrc;          /* let libcurl read credentials from .netrc ($NETRC or ~/.netrc) */
  char ca_file[4096]; /* "" the system's CA store */
  long connect_timeout_ms;
  long timeout_ms;       /* whole request */
  int retries;           /* extra attempts on connection errors, timeouts and 5xx */
  long backoff_ms;       /* first retry delay; doubles, with jitter; capped at 2 s */
  int parallel;          /* transfers at once */
  int breaker_threshold; /* consecutive failed requests (after their retries) that
                            turn the remote off for this process */
} kiln_http_config;

typedef enum kiln_http_method {
  KILN_HTTP_GET = 0,
  KILN_HTTP_HEAD = 1,
  KILN_HTTP_PUT = 2,
  KILN_HTTP_MKCOL = 3, /* WebDAV: make the collection (a path ending in '/') */
  KILN_HTTP_DELETE = 4
} kiln_http_method;

typedef struct kiln_http_req {
  kiln_http_method method;
  char path[160]; /* relative to base: "ac/<key>" or "cas/<digest>" */
  /* PUT: the body */
  const void *body;
  size_t body_len;
  /* GET: the body goes to out_fd when >= 0 (streamed, e.g. a temp file), else
   * to memory (data/len, free()). More than max_bytes (0: no limit) fails the
   * request with KILN_ECORRUPT. With expect_digest, the body is hashed as it
   * arrives and a mismatch (or a short body) is KILN_ECORRUPT. */
  int out_fd;
  uint64_t max_bytes;
  const char *expect_digest;
  /* results */
  long status;    /* HTTP status; 0 when no answer came */
  kiln_status rc; /* OK: 2xx; ENOTFOUND: 404; EPERM: 401/403; EUNSUPPORTED: 405/501
                     (e.g. PUT refused); ECORRUPT: body too long, short or wrong
                     digest; ETIMEDOUT: timed out; EREMOTE: anything else
                     (connection refused, 5xx after retries, breaker open; 409,
                     which alone never counts towards the breaker) */
  uint8_t *data;  /* GET into memory: the body (NUL-terminated), free() */
  size_t len;
  uint64_t bytes_down, bytes_up; /* over every attempt */
  int attempts;
  char error[256]; /* one line: method, path, status or curl's error; no secrets */
} kiln_http_req;

kiln_status kiln_http_new(kiln_http **out, const kiln_http_config *cfg);
void kiln_http_free(kiln_http *h);
/* Runs every request, at most cfg.parallel at once, each with its retries;
 * bounded by the timeouts. KILN_OK when they ran (each has its own rc);
 * KILN_EREMOTE, every rc EREMOTE and nothing sent, when the breaker is open. */
kiln_status kiln_http_run(kiln_http *h, kiln_http_req *reqs, size_t n);
/* 1 once the breaker has turned the remote off for this process. */
int kiln_http_breaker_open(const kiln_http *h);
/* Times the breaker opened (0 or 1), for the stats. */
int kiln_http_breaker_trips(const kiln_http *h);
/* Frees the bodies of reqs (data) and zeroes their results. */
void kiln_http_reqs_reset(kiln_http_req *reqs, size_t n);

/* ---- the remote on top (cache/remote.c, remote_fetch.c, remote_upload.c) ---- */

/* The most a record document may be (it is a few hundred bytes); larger
 * answers are refused. */
#define KILN_REMOTE_RECORD_MAX (64 * 1024)

/* The remote attached to a cache (kiln_cache_set_remote; kiln_cache.remote). */
struct kiln_remote {
  kiln_http *http;
  char url[2048];
  int upload, tls;
  uint8_t *key; /* HMAC key, or NULL */
  size_t key_len;
};

/* Adds d's counts to the totals in the index (kiln_remote_stats_get reads
 * them). Best effort: a failure is logged at debug, never returned. */
void kiln_remote_stats_add(kiln_cache *c, kiln_remote_stats *d);

/* For kiln doctor: whether an upload can land. PUTs a small object at
 * cas/kiln-doctor-<host>-<pid> (making the collections with MKCOL when the
 * server says one is missing, as an upload does), then DELETEs it. KILN_OK when it landed; else the
 * failure, naming the request. Only with uploads on. */
kiln_status kiln_remote_probe_upload(kiln_cache *c);

/* ---- the record document (cache/remote_record.c) ---------------------------- */

/* The canonical text a signature covers: "kiln-record-v1\n" then one
 * "name=value\n" line per field, in the fixed order of docs/remote-cache.md. */
kiln_status kiln_remote_record_canonical(const kiln_record *rec, char **out, size_t *len);
/* The JSON document for rec, schema "kiln-record/1", with "signature":
 * "hmac-sha256:<hex>" over the canonical text when key is not NULL. *out
 * (NUL-terminated) freed with free(). */
kiln_status kiln_remote_record_encode(const kiln_record *rec, const uint8_t *key, size_t key_len,
                                      char **out, size_t *len);
/* Parses and checks a document: valid JSON object, schema, every field
 * present with the right type and within its field's size, key == want_key,
 * 64-hex key/digest (log_digest "" or 64-hex), kind "cubin"|"ptx", target a
 * valid target name, size <= 1 GiB. KILN_ECORRUPT otherwise (detail says
 * which). With key: a missing or wrong signature is KILN_EPERM. rec->layer,
 * created and last_used are left 0 (the local store sets them). */
kiln_status kiln_remote_record_decode(const char *doc, size_t len, const char *want_key,
                                      const uint8_t *key, size_t key_len, kiln_record *rec);

#endif
