/* kiln — the remote cache (libcurl): an HTTP server, an S3 bucket or a
 * directory on a shared file system.
 *
 * Layout (bazel-remote compatible; any WebDAV server with PUT, e.g. nginx
 * `dav_methods PUT`):
 *   {base}/ac/{key}      the record: JSON, schema "kiln-record/1", optionally
 *                        signed (HMAC-SHA256 over its canonical text)
 *   {base}/cas/{digest}  the artifact bytes, SHA-256 = digest
 *
 * A remote is attached to an open cache (kiln_cache_open: from
 * kiln_cache_options.remote, or from the environment, KILN_REMOTE_URL). Then
 * kiln_build reads through it before compiling (and writes back after, with
 * upload on), the loader fetches from it before building (resolution step 3),
 * and the coordination root fetches before it compiles. Every download is
 * streamed to a temp file and verified against its digest before it enters
 * the local store. Transfers run in parallel (curl multi, HTTP/2 where the
 * server offers it), with connect and total timeouts, bounded retries with
 * backoff on connection errors and 5xx, and a breaker that turns the remote
 * off for the rest of the process after repeated failures (said once, at
 * warn). A remote failure is never fatal: kiln falls back to building (or,
 * offline, to the usual clear error). Secrets (token, HMAC key, .netrc) are
 * never logged. See docs/remote-cache.md. */
#ifndef KILN_REMOTE_H
#define KILN_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/api.h"
#include "kiln/cache.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fields at KILN_ENV / NULL are taken from the environment (include/kiln/api.h). */
typedef struct kiln_remote_options {
  int version;            /* KILN_REMOTE_OPTIONS_VERSION */
  const char *url;        /* base URL: http(s)://, s3://BUCKET[/PREFIX] or file:///DIR; NULL:
                             KILN_REMOTE_URL; "": none */
  int upload;             /* 1 write back, 0 read only; KILN_ENV: KILN_REMOTE_UPLOAD (default 0) */
  const char *token_file; /* bearer token; NULL: KILN_REMOTE_TOKEN_FILE (else .netrc, if any) */
  const char
      *hmac_key_file;  /* sign uploads, reject unsigned records; NULL: KILN_REMOTE_HMAC_KEY_FILE */
  const char *ca_file; /* CA bundle for TLS; NULL: KILN_REMOTE_CA_FILE (else the system's) */
  double connect_timeout_s; /* KILN_ENV: KILN_REMOTE_CONNECT_TIMEOUT (default 5) */
  double timeout_s;         /* one request, in total; KILN_ENV: KILN_REMOTE_TIMEOUT (default 60) */
  int retries;  /* extra attempts on connection errors and 5xx; KILN_ENV: KILN_REMOTE_RETRIES (2) */
  int parallel; /* transfers at once; KILN_ENV: KILN_REMOTE_PARALLEL (default 16) */
} kiln_remote_options;

#define KILN_REMOTE_OPTIONS_VERSION 1
#define KILN_REMOTE_OPTIONS_INIT                                                                   \
  {                                                                                                \
    .version = KILN_REMOTE_OPTIONS_VERSION, .url = NULL, .upload = KILN_ENV, .token_file = NULL,   \
    .hmac_key_file = NULL, .ca_file = NULL, .connect_timeout_s = KILN_ENV, .timeout_s = KILN_ENV,  \
    .retries = KILN_ENV, .parallel = KILN_ENV                                                      \
  }

/* Fills opts as KILN_REMOTE_OPTIONS_INIT does, for the given version.
 * KILN_EINVAL, naming it, for a version this libkiln does not know. */
KILN_API kiln_status kiln_remote_options_init(kiln_remote_options *opts, int version);

/* Attaches a remote to an open cache (replacing any). KILN_OK with no remote
 * when the URL is unset or ""; KILN_EINVAL for a bad URL or setting,
 * KILN_EIO/KILN_EPERM for an unreadable token/key file (named, never its
 * contents). Contacts nothing. */
KILN_API kiln_status kiln_cache_set_remote(kiln_cache *cache, const kiln_remote_options *opts);
/* The base URL in use (without credentials), or NULL when there is none. */
KILN_API const char *kiln_cache_remote_url(const kiln_cache *cache);
/* 1 when records are written back. */
KILN_API int kiln_cache_remote_upload(const kiln_cache *cache);
/* An s3:// remote's credentials: where they came from ("environment
 * (AWS_ACCESS_KEY_ID)", "file /home/u/.aws/credentials, profile ci",
 * "anonymous (no credentials found)"), never what they are. NULL for a remote
 * of another kind, or none. */
KILN_API const char *kiln_cache_remote_credentials(const kiln_cache *cache);

/* One thing to fetch: the record under key, which must describe unit and
 * target, and its artifact. */
typedef struct kiln_remote_item {
  const char *key;
  const char *unit;
  const char *target;
  /* out */
  kiln_status status; /* KILN_OK now in the local store; KILN_ENOTFOUND not on
                         the remote; KILN_ECORRUPT bad bytes/record; KILN_EPERM
                         missing or wrong signature, or auth refused;
                         KILN_EREMOTE/KILN_ETIMEDOUT transport (detail in error) */
  char error[256];
  kiln_record record; /* as stored, when status is KILN_OK */
} kiln_remote_item;

/* Fetches every item that is not already in the local store: the records in
 * parallel, then the blobs they name, each verified and stored (blob first,
 * record last). KILN_OK when the batch ran (see each item; misses and bad
 * answers are counted, never fatal); KILN_ENOTFOUND when the cache has no
 * remote or its breaker is open (every item ENOTFOUND). */
KILN_API kiln_status kiln_remote_fetch(kiln_cache *cache, kiln_remote_item *items, size_t n);

/* Writes back the local records with these keys (and their blobs) unless the
 * remote has them: HEAD first, blob before record, records signed when a key
 * is configured. KILN_OK when every one is on the remote afterwards;
 * KILN_EREMOTE (or the first item's failure) otherwise, e.g. a read-only
 * server answering 403/405 — the caller warns and goes on. *uploaded counts
 * records written now. KILN_EINVAL when upload is off. */
KILN_API kiln_status kiln_remote_upload(size_t *uploaded, kiln_cache *cache,
                                        const char *const *keys, size_t n);

/* A file:// remote's clean-up: removes the temp files that writers killed
 * mid-upload left (".tmp.*" in its ac/ and cas/) once they are at least
 * max_age_s old (a live upload's temp file lives for seconds). Objects are
 * never removed. KILN_EUNSUPPORTED for a remote of another kind (an HTTP
 * server keeps no temp files in the namespace), KILN_EINVAL for none. */
typedef struct kiln_remote_gc_report {
  uint64_t removed; /* temp files removed */
  uint64_t bytes;   /* their bytes */
} kiln_remote_gc_report;

KILN_API kiln_status kiln_remote_gc(kiln_remote_gc_report *out, kiln_cache *cache,
                                    double max_age_s);

/* Totals kept in the primary index, over every process that used it. */
typedef struct kiln_remote_stats {
  uint64_t hits;       /* records fetched and stored */
  uint64_t misses;     /* 404 */
  uint64_t errors;     /* transport failures, 5xx, timeouts, auth refused */
  uint64_t rejected;   /* bad signature, bad JSON, wrong bytes, truncated */
  uint64_t bytes_down; /* response bytes received */
  uint64_t uploads;    /* records written back */
  uint64_t bytes_up;   /* request bytes sent */
  uint64_t breaker_trips;
} kiln_remote_stats;

KILN_API kiln_status kiln_remote_stats_get(kiln_remote_stats *out, kiln_cache *cache);

/* For kiln doctor: one round trip to the remote (GET of a record that cannot
 * exist) and what it says. */
typedef struct kiln_remote_check_result {
  int configured; /* a URL is set */
  int reachable;  /* an HTTP answer came back */
  int authorized; /* not 401/403 */
  int signing;    /* an HMAC key is configured */
  int upload;     /* write back is on */
  int tls;        /* https */
  long http_status;
  double ms;        /* the round trip */
  char detail[512]; /* the transport error or the status line, no secrets */
} kiln_remote_check_result;

KILN_API kiln_status kiln_remote_check(kiln_remote_check_result *out, kiln_cache *cache);

#ifdef __cplusplus
}
#endif
#endif
