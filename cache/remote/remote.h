/* Internal: the one remote cache and its backends (docs/remote-cache.md).
 * The remote's rules live once, above the backends:
 *   cache/remote/remote.c   attach, settings, stats, check (include/kiln/remote.h)
 *   cache/remote/fetch.c    kiln_remote_fetch: records, then blobs into the store
 *   cache/remote/upload.c   kiln_remote_upload: HEAD record, PUT blob, PUT record
 *   cache/remote/record.c   the record document (JSON) and its signature
 *   cache/remote/breaker.c  the breaker every backend counts its failures on
 * A backend only carries requests (GET, HEAD, PUT, MKCOL, DELETE of a path
 * under its base) to one kind of storage:
 *   cache/remote/http.c     http(s)://: libcurl, parallel, retries
 *                           (its bounded, hashing body sink: cache/remote/sink.c)
 *   cache/remote/file.c     file://: a shared file system; temp name, fsync, rename
 *   cache/remote/s3.c       s3://: an S3 bucket, http.c's loop with AWS Signature V4
 *                           (its settings and credentials: cache/remote/s3_config.c,
 *                           cache/remote/s3.h; http.c's hooks: cache/remote/http.h) */
#ifndef KILN_CACHE_REMOTE_H
#define KILN_CACHE_REMOTE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/cache.h"
#include "kiln/remote.h"
#include "kiln/status.h"

/* ---- the requests every backend serves -------------------------------------- */

typedef struct kiln_remote_config {
  char base[2048];    /* "http://host:port/prefix", "file:///path" or "s3://bucket/prefix",
                         no trailing '/' */
  char token[1024];   /* http: bearer token ("" none); sent as a header, never logged */
  int netrc;          /* http: let libcurl read credentials from .netrc ($NETRC or ~/.netrc) */
  char ca_file[4096]; /* http: "" the system's CA store */
  long connect_timeout_ms;
  long timeout_ms;       /* whole request */
  int retries;           /* extra attempts on transient failures (connection errors,
                            timeouts, 5xx; a stale NFS handle) */
  long backoff_ms;       /* first retry delay; doubles, with jitter; capped at 2 s */
  int parallel;          /* transfers at once */
  int breaker_threshold; /* consecutive failed requests (after their retries) that
                            turn the remote off for this process */
} kiln_remote_config;

typedef enum kiln_remote_method {
  KILN_REMOTE_GET = 0,
  KILN_REMOTE_HEAD = 1,
  KILN_REMOTE_PUT = 2,
  KILN_REMOTE_MKCOL = 3, /* make the collection (a path ending in '/') */
  KILN_REMOTE_DELETE = 4
} kiln_remote_method;

typedef struct kiln_remote_req {
  kiln_remote_method method;
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
  long status;    /* HTTP status (file://: the status HTTP would give: 200, 404,
                     403, 409, 500); 0 when no answer came */
  kiln_status rc; /* OK: 2xx; ENOTFOUND: 404; EPERM: 401/403; EUNSUPPORTED: 405/501
                     (e.g. PUT refused); ECORRUPT: body too long, short or wrong
                     digest, or not a regular file; ETIMEDOUT: timed out; EREMOTE:
                     anything else (connection refused, 5xx after retries, an I/O
                     error, breaker open; 409, which alone never counts towards
                     the breaker) */
  uint8_t *data;  /* GET into memory: the body (NUL-terminated), free() */
  size_t len;
  uint64_t bytes_down, bytes_up; /* over every attempt */
  int attempts;
  char error[256]; /* one line: method, path, status or the transport's error; no secrets */
  /* a backend's notes on the request (s3.c: the credentials' generation its
   * last attempt was signed with, and how often they were renewed for it) */
  unsigned sign_gen;
  int renewals;
} kiln_remote_req;

/* Frees the bodies of reqs (data) and zeroes their results. */
void kiln_remote_reqs_reset(kiln_remote_req *reqs, size_t n);
/* Zeroes the results before a run (a backend's first step). */
void kiln_remote_reqs_clear(kiln_remote_req *reqs, size_t n);
/* "GET", "PUT", ... for messages. */
const char *kiln_remote_method_name(kiln_remote_method m);

/* A follow-up chained to each first request of a run (a fetch: a record's
 * blob, whose digest only the record says). For a run of n first requests,
 * then(user, i), i < n, is called once first request i's result is final
 * (rc, data) and returns a request (the caller's memory; the backend clears
 * its results) that runs in the same batch, or NULL; then(user, n + i) is
 * called once that follow-up's result is final (its return value ignored).
 * Calls are serialized (kiln_remote_run_then); a follow-up gets no
 * follow-up. */
typedef kiln_remote_req *(*kiln_remote_then)(void *user, size_t i);

/* ---- the breaker (cache/remote/breaker.c) ----------------------------------- */

/* Consecutive failed requests (after their retries) turn the remote off for
 * the process. One per backend instance; thread-safe. */
typedef struct kiln_breaker {
  pthread_mutex_t mu;
  int threshold; /* <= 0: never opens */
  int consecutive;
  int open;
  int trips;
  char name[2048]; /* the remote's base, for the warning */
} kiln_breaker;

void kiln_breaker_init(kiln_breaker *b, int threshold, const char *name);
void kiln_breaker_destroy(kiln_breaker *b);
/* Counts a finished request: OK and ENOTFOUND reset the count; EREMOTE (but
 * an HTTP 409, an answer about one path) and ETIMEDOUT add to it; others
 * (EPERM, ECORRUPT, EUNSUPPORTED: answers about one object) leave it. */
void kiln_breaker_note(kiln_breaker *b, const kiln_remote_req *r);
int kiln_breaker_is_open(kiln_breaker *b);
int kiln_breaker_trips(kiln_breaker *b);
/* Fails every request of a run that the open breaker stops; KILN_EREMOTE. */
kiln_status kiln_breaker_fail_all(kiln_remote_req *reqs, size_t n);
/* A run that ended before it started (the breaker, no credentials): then
 * for each first request, already failed; a follow-up fails as it did. */
void kiln_remote_then_failed(kiln_remote_req *reqs, size_t n, kiln_remote_then then, void *user);

/* ---- backends ---------------------------------------------------------------- */

/* What the remote asks of a backend. run: every request, at most
 * cfg.parallel at once, each with its retries, bounded by the timeouts, and
 * with then (may be NULL) each first request's follow-up, in the same
 * window of cfg.parallel; KILN_OK when they ran (each has its own rc);
 * KILN_EREMOTE, every rc EREMOTE and nothing sent, when the breaker is open
 * (then is still called for each: kiln_remote_then_failed). */
typedef struct kiln_remote_backend {
  const char *scheme; /* "http", "file", "s3" */
  kiln_status (*run)(void *impl, kiln_remote_req *reqs, size_t n, kiln_remote_then then,
                     void *user);
  kiln_breaker *(*breaker)(void *impl);
  void (*free)(void *impl);
} kiln_remote_backend;

/* http(s):// (cache/remote/http.c). */
typedef struct kiln_http kiln_http;
extern const kiln_remote_backend kiln_remote_http;
kiln_status kiln_http_new(kiln_http **out, const kiln_remote_config *cfg);
void kiln_http_free(kiln_http *h);
kiln_status kiln_http_run(kiln_http *h, kiln_remote_req *reqs, size_t n);
/* kiln_http_run with each first request's follow-up (kiln_remote_then). */
kiln_status kiln_http_run_then(kiln_http *h, kiln_remote_req *reqs, size_t n, kiln_remote_then then,
                               void *user);
/* 1 once the breaker has turned the remote off for this process. */
int kiln_http_breaker_open(const kiln_http *h);
/* Times the breaker opened (0 or 1), for the stats. */
int kiln_http_breaker_trips(const kiln_http *h);

/* file:// (cache/remote/file.c). cfg->base is "file:///abs/path"; the
 * directory must exist. */
typedef struct kiln_file_remote kiln_file_remote;
extern const kiln_remote_backend kiln_remote_file;
kiln_status kiln_file_remote_new(kiln_file_remote **out, const kiln_remote_config *cfg);
/* The directory a file:// URL names ("file:///a/b" -> "/a/b"), checked:
 * absolute, no "." or ".." component, no control characters. */
kiln_status kiln_file_url_path(const char *url, char *out, size_t cap);
/* Removes the temp files (".tmp.*" in ac/ and cas/) at least max_age_s old:
 * what writers killed mid-upload left. Counts what it removed. */
kiln_status kiln_file_remote_gc(kiln_file_remote *f, double max_age_s, uint64_t *removed,
                                uint64_t *bytes);

/* ---- the remote on top (cache/remote/remote.c, remote_fetch.c, remote_upload.c) ---- */

/* The most a record document may be (it is a few hundred bytes); larger
 * answers are refused. */
#define KILN_REMOTE_RECORD_MAX (64 * 1024)

/* The remote attached to a cache (kiln_cache_set_remote; kiln_cache.remote). */
struct kiln_remote {
  const kiln_remote_backend *be;
  void *impl; /* the backend's own state */
  char url[2048];
  int upload, tls;
  uint8_t *key; /* HMAC key, or NULL */
  size_t key_len;
};

/* The remote's requests, through its backend (kiln_remote_backend.run). */
kiln_status kiln_remote_run(struct kiln_remote *r, kiln_remote_req *reqs, size_t n);
/* The same with a follow-up for each (kiln_remote_then), then's calls
 * serialized here, whatever threads the backend runs them on. */
kiln_status kiln_remote_run_then(struct kiln_remote *r, kiln_remote_req *reqs, size_t n,
                                 kiln_remote_then then, void *user);
/* 1 once the backend's breaker has turned the remote off for this process. */
int kiln_remote_breaker_open(struct kiln_remote *r);
/* Where the remote's credentials come from, for kiln doctor ("environment
 * (AWS_ACCESS_KEY_ID)", "file ~/.aws/credentials, profile ci", "anonymous
 * ..."): an s3:// remote's; NULL for the others. Never a secret. */
const char *kiln_remote_credentials(const struct kiln_remote *r);
/* Times the breaker opened (0 or 1), for the stats. */
int kiln_remote_breaker_trips(struct kiln_remote *r);

/* Adds d's counts to the totals in the index (kiln_remote_stats_get reads
 * them). Best effort: a failure is logged at debug, never returned. */
void kiln_remote_stats_add(kiln_cache *c, kiln_remote_stats *d);

/* For kiln doctor: whether an upload can land. PUTs a small object at
 * cas/kiln-doctor-<host>-<pid> (making the collections with MKCOL when the
 * server says one is missing, as an upload does), then DELETEs it. KILN_OK when it landed; else the
 * failure, naming the request. Only with uploads on. */
kiln_status kiln_remote_probe_upload(kiln_cache *c);

/* ---- the record document (cache/remote/record.c) ---------------------------- */

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
