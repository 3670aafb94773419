/* Internal: the HTTP transport's seam for a backend that speaks HTTP with
 * requests of its own making (cache/remote/s3.c: per-request headers, AWS
 * Signature V4, its own reading of error answers). Such a backend keeps
 * http.c's one transfer loop (libcurl multi, timeouts, retries with backoff,
 * the breaker, the bounded body sink) and adds two hooks to it. */
#ifndef KILN_CACHE_REMOTE_HTTP_H
#define KILN_CACHE_REMOTE_HTTP_H

#include <stddef.h>

#include <curl/curl.h>

#include "cache/remote/remote.h"

/* What an answer that is not 2xx means, as a backend reads it. */
typedef enum kiln_http_verdict {
  KILN_HTTP_AS_IS = 0, /* http.c's own rules: 5xx and 429 retried, 404 a miss, 401/403 EPERM... */
  KILN_HTTP_SUCCESS,   /* the request did what it was for (S3: a write-once PUT's 412, the
                          object is there already); never for a GET, whose body is the point */
  KILN_HTTP_RETRY,     /* retried within the retries; when they run out, *rc and detail */
  KILN_HTTP_FAIL       /* *rc and detail, not retried */
} kiln_http_verdict;

typedef struct kiln_http_hooks {
  void *user;
  /* Each attempt, after http.c's own options: the request's headers, appended
   * to *headers (http.c sends them and frees the list after the attempt;
   * with this hook, http.c adds no headers of its own: no bearer token, no
   * "Expect:"), and any other option (CURLOPT_AWS_SIGV4...). */
  kiln_status (*prepare)(void *user, CURL *easy, kiln_remote_req *r, struct curl_slist **headers);
  /* An answer that is not 2xx: its status, its response headers (through
   * curl_easy_header on easy) and the first bytes of its body (at most
   * KILN_HTTP_ERROR_BODY_MAX; none for a HEAD). For RETRY and FAIL, *rc and
   * detail (one line, no secrets) say what failed. */
  kiln_http_verdict (*judge)(void *user, CURL *easy, kiln_remote_req *r, long status,
                             const char *body, size_t body_len, kiln_status *rc, char *detail,
                             size_t cap);
} kiln_http_hooks;

/* How much of an error answer's body is kept for the judge (S3's XML error
 * documents are a few hundred bytes); the rest is counted, not kept. */
#define KILN_HTTP_ERROR_BODY_MAX 2048

/* kiln_http_new with hooks (copied; NULL: none). cfg->token and cfg->netrc
 * must be unset: the hooks make the requests' credentials. */
kiln_status kiln_http_new_hooked(kiln_http **out, const kiln_remote_config *cfg,
                                 const kiln_http_hooks *hooks);
/* The transport's breaker (a backend built on it names it after its own URL). */
kiln_breaker *kiln_http_breaker(kiln_http *h);

#endif
