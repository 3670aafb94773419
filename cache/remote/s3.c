/* The s3:// backend (cache/remote/s3.h): the remote's objects in an S3
 * bucket, PREFIX/ac/<key> and PREFIX/cas/<digest>, through http.c's transfer
 * loop (parallel, retried, the breaker) with two hooks: one signs each
 * request (AWS Signature V4 by libcurl), the other reads S3's answers.
 *
 * libcurl 7.88's CURLOPT_AWS_SIGV4, and what kiln does about its limits:
 * - it hashes the body only from POSTFIELDS (an upload's would be the empty
 *   hash): kiln sends x-amz-content-sha256 itself, which libcurl then signs
 *   as the payload's hash;
 * - it signs every CURLOPT_HTTPHEADER entry, and skips signing when one is an
 *   Authorization header: the list holds no "Expect:" (a removal entry would
 *   be signed but not sent: every PUT 403) and no Authorization;
 * - it signs the path as given: the prefix's characters are limited
 *   (s3_config.c) so that nothing needs encoding;
 * - it does not add x-amz-security-token: kiln does, with a session token;
 * - a caller's x-amz-date is signed but sent twice (servers refuse it): kiln
 *   never sets one (the signing tests do, against a listener of their own);
 * - its own "Expect: 100-continue" on a PUT is sent unsigned; kiln does not
 *   wait for the 100 (CURLOPT_EXPECT_100_TIMEOUT_MS 0).
 *
 * Writes are write-once: If-None-Match: * on every PUT; 412 (there already)
 * is success, 409 (a concurrent conditional write) is retried.
 *
 * Temporary credentials that expire mid-job (ExpiredToken,
 * TokenRefreshRequired) are read again from where they came from (the
 * environment, the shared files, web identity through STS) and the request
 * is retried with them; a request refused again after that, or a re-read
 * that finds the same credentials, is an error. Requests signed before a
 * renewal that come back expired are retried with the new ones. */
#include <pthread.h> /* the credentials' mutex */
#include <stdarg.h>  /* va_list */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* calloc, free */
#include <string.h>  /* memcpy, strcmp, strncmp, strstr */
#include <strings.h> /* strncasecmp */
#include <time.h>    /* time */

#include "cache/remote/s3.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/logging.h"

/* SHA-256 of nothing: the payload hash of a GET, HEAD or DELETE. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct kiln_s3 {
  kiln_s3_config cfg;
  kiln_remote_config rcfg; /* the transport's settings, for STS */
  kiln_http *http;
  pthread_mutex_t mu; /* cfg.creds and gen: a renewal replaces them while others sign */
  unsigned gen;       /* bumped by each renewal */
  /* web identity's STS could not be reached when the remote opened: asked
   * again at each run; until it answers, every request fails with this */
  char creds_error[240];
  unsigned warned_gen; /* gen + 1 once a failed renewal was said at warn */
};

/* Says a failed renewal once per generation of credentials (s->mu held). */
__attribute__((format(printf, 2, 3))) static void warn_once(kiln_s3 *s, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  if (s->warned_gen == s->gen + 1) return;
  s->warned_gen = s->gen + 1;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  kiln_log(KILN_LOG_WARN, "remote cache %s: %s", s->cfg.base, msg);
}

const kiln_s3_config *kiln_s3_config_of(const kiln_s3 *s) {
  return &s->cfg;
}

static kiln_status add_header(struct curl_slist **list, const char *line) {
  struct curl_slist *t = curl_slist_append(*list, line);
  if (!t) return kiln_fail(KILN_ENOMEM, "headers");
  *list = t;
  return KILN_OK;
}

/* Signs r's attempt with the credentials of the moment (s->mu held). */
static kiln_status prepare_locked(kiln_s3 *s, CURL *e, kiln_remote_req *r,
                                  struct curl_slist **headers) {
  const kiln_s3_creds *cr = &s->cfg.creds;
  char hash[65], line[4200];
  kiln_status rc = KILN_OK;
  if (r->method == KILN_REMOTE_MKCOL)
    return kiln_fail(KILN_EUNSUPPORTED, "S3 has no collections (MKCOL)");
  r->sign_gen = s->gen;
  if (cr->anonymous) return KILN_OK; /* unsigned: a public bucket's reads */
  if (r->method != KILN_REMOTE_PUT)
    memcpy(hash, EMPTY_SHA256, sizeof hash);
  else if (strncmp(r->path, "cas/", 4) == 0 && kiln_is_hex64(r->path + 4))
    memcpy(hash, r->path + 4, sizeof hash); /* a blob is named by its SHA-256 */
  else
    KILN_CHECK(kiln_sha256_hex(hash, r->body, r->body_len));
  snprintf(line, sizeof line, "x-amz-content-sha256: %s", hash);
  KILN_CHECK(add_header(headers, line));
  if (r->method == KILN_REMOTE_PUT) {
    KILN_CHECK(add_header(headers, "If-None-Match: *"));
    /* libcurl sends every PUT with "Expect: 100-continue" and waits up to a
     * second for the 100; the removal entry http.c uses ("Expect:") would be
     * signed and not sent. So no wait: the body follows the head at once. */
    curl_easy_setopt(e, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
  }
  if (cr->session_token[0]) {
    snprintf(line, sizeof line, "x-amz-security-token: %s", cr->session_token);
    rc = add_header(headers, line);
    memset(line, 0, sizeof line);
    if (rc != KILN_OK) goto out;
  }
  curl_easy_setopt(e, CURLOPT_AWS_SIGV4, s->cfg.sigv4);
  curl_easy_setopt(e, CURLOPT_USERNAME, cr->access_key); /* libcurl copies them */
  curl_easy_setopt(e, CURLOPT_PASSWORD, cr->secret_key);
out:
  return rc;
}

kiln_status kiln_s3_prepare(kiln_s3 *s, CURL *e, kiln_remote_req *r, struct curl_slist **headers) {
  kiln_status rc;
  pthread_mutex_lock(&s->mu);
  rc = prepare_locked(s, e, r, headers);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* ---- credentials: where they come from, and renewed when they expire ---- */

/* The credentials from their sources, web identity's through STS. */
static kiln_status get_creds(kiln_s3 *s, kiln_s3_creds *out) {
  kiln_status rc = kiln_s3_load_creds(out, NULL, 0);
  if (rc == KILN_OK && out->web_identity)
    rc = kiln_sts_web_identity(out, s->cfg.sts_endpoint, &s->rcfg);
  return rc;
}

static int same_creds(const kiln_s3_creds *a, const kiln_s3_creds *b) {
  return a->anonymous == b->anonymous && strcmp(a->access_key, b->access_key) == 0 &&
         strcmp(a->secret_key, b->secret_key) == 0 &&
         strcmp(a->session_token, b->session_token) == 0;
}

/* r came back ExpiredToken (code): retried with credentials renewed since it
 * was signed, or renewed now, once for r. */
static kiln_http_verdict renew(kiln_s3 *s, kiln_remote_req *r, long status, const char *code,
                               kiln_status *rc, char *detail, size_t cap) {
  kiln_s3_creds *fresh = calloc(1, sizeof *fresh);
  kiln_http_verdict v = KILN_HTTP_FAIL;
  kiln_status st;
  *rc = KILN_EPERM;
  pthread_mutex_lock(&s->mu);
  if (!fresh) {
    snprintf(detail, cap, "HTTP %ld %s: out of memory renewing the credentials", status, code);
  } else if (r->sign_gen != s->gen) {
    snprintf(detail, cap, "HTTP %ld %s: signed before the credentials were renewed", status, code);
    v = KILN_HTTP_RETRY;
  } else if (r->renewals > 0) {
    snprintf(detail, cap, "HTTP %ld %s: expired again right after renewal", status, code);
    warn_once(s, "the credentials renewed from %s were refused at once (%s): renew them there",
              s->cfg.creds.source, code);
  } else if ((st = get_creds(s, fresh)) != KILN_OK) {
    snprintf(detail, cap, "HTTP %ld %s: re-reading the credentials failed", status, code);
    warn_once(s, "the credentials have expired (%s), and reading them again failed: %s", code,
              kiln_last_error());
  } else if (same_creds(fresh, &s->cfg.creds)) {
    snprintf(detail, cap, "HTTP %ld %s: expired, and their source has no newer ones", status, code);
    warn_once(s,
              "the credentials have expired (%s), and their source (%s) still has the same "
              "ones: renew them there",
              code, fresh->source);
  } else {
    s->cfg.creds = *fresh;
    s->gen++;
    r->renewals++;
    kiln_log(KILN_LOG_INFO, "remote cache %s: %s: credentials renewed from %s", s->cfg.base, code,
             s->cfg.creds.source);
    snprintf(detail, cap, "HTTP %ld %s: the renewed credentials were refused too", status, code);
    v = KILN_HTTP_RETRY;
  }
  pthread_mutex_unlock(&s->mu);
  if (fresh) {
    volatile char *p = (volatile char *)fresh;
    for (size_t i = 0; i < sizeof *fresh; i++)
      p[i] = 0;
    free(fresh);
  }
  return v;
}

/* ---- S3's answers ---- */

/* The text of the first <tag>...</tag> in body, bounded, of [A-Za-z0-9._-]
 * only (anything else: ""). */
static void xml_field(const char *body, size_t len, const char *tag, char *out, size_t cap) {
  char open[48], close[48];
  const char *a, *b, *end = body + len;
  size_t n;
  out[0] = '\0';
  snprintf(open, sizeof open, "<%s>", tag);
  snprintf(close, sizeof close, "</%s>", tag);
  for (a = body; a + strlen(open) <= end; a++)
    if (memcmp(a, open, strlen(open)) == 0) break;
  if (a + strlen(open) > end) return;
  a += strlen(open);
  for (b = a; b < end && (size_t)(b - a) < cap; b++)
    if (*b == '<') break;
  n = (size_t)(b - a);
  if (b >= end || n >= cap || (size_t)(end - b) < strlen(close) || memcmp(b, close, strlen(close)))
    return;
  for (size_t i = 0; i < n; i++) {
    char c = a[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return;
  }
  memcpy(out, a, n);
  out[n] = '\0';
}

void kiln_s3_error_code(const char *body, size_t len, char *out, size_t cap) {
  xml_field(body ? body : "", body ? len : 0, "Code", out, cap);
}

/* "ahead of"/"behind" the server by how much, from its Date header. */
static void skew_text(char *out, size_t cap, const char *date, time_t now) {
  time_t server = date && *date ? curl_getdate(date, NULL) : -1;
  long long d;
  if (server < 0) {
    snprintf(out, cap, "this host's clock differs from the server's by more than 15 minutes");
    return;
  }
  d = (long long)now - (long long)server;
  snprintf(out, cap, "this host's clock is %lld s %s the server's (Date: %.40s)", d < 0 ? -d : d,
           d < 0 ? "behind" : "ahead of", date);
}

static int is(const char *code, const char *name) {
  return strcmp(code, name) == 0;
}

kiln_http_verdict kiln_s3_judge_answer(const kiln_s3_config *c, kiln_remote_method method,
                                       long status, const char *body, size_t body_len,
                                       const char *date, const char *bucket_region, time_t now,
                                       kiln_status *rc, char *detail, size_t cap) {
  char code[64], region[64], why[160];
  const char *what = method == KILN_REMOTE_GET || method == KILN_REMOTE_HEAD ? "reads" : "writes";
  kiln_s3_error_code(body, body_len, code, sizeof code);
  xml_field(body ? body : "", body ? body_len : 0, "Region", region, sizeof region);
  if (!region[0] && bucket_region && strlen(bucket_region) < sizeof region)
    snprintf(region, sizeof region, "%s", bucket_region);
  *rc = KILN_EREMOTE;
  if (status == 412 && method == KILN_REMOTE_PUT) return KILN_HTTP_SUCCESS; /* there already */
  if (status == 409 && method == KILN_REMOTE_PUT) {
    snprintf(detail, cap, "HTTP 409 %s: another write of this object was under way",
             code[0] ? code : "Conflict");
    return KILN_HTTP_RETRY;
  }
  if (status == 404) {
    if (!is(code, "NoSuchBucket")) return KILN_HTTP_AS_IS; /* NoSuchKey, a HEAD: a miss */
    snprintf(detail, cap,
             "HTTP 404 NoSuchBucket: there is no bucket %s at %.60s (create it, or "
             "fix the URL or KILN_S3_ENDPOINT)",
             c->bucket, c->endpoint);
    return KILN_HTTP_FAIL;
  }
  if ((status == 301 || status == 307 || status == 400) &&
      (region[0] || is(code, "PermanentRedirect") || is(code, "AuthorizationHeaderMalformed") ||
       is(code, "IllegalLocationConstraintException"))) {
    if (region[0] && strcmp(region, c->region) != 0)
      snprintf(detail, cap, "HTTP %ld %s: the bucket is in region %s, not %s: set AWS_REGION=%s",
               status, code[0] ? code : "redirect", region, c->region, region);
    else
      snprintf(detail, cap, "HTTP %ld %s: the bucket is in another region than %s (set AWS_REGION)",
               status, code[0] ? code : "redirect", c->region);
    return KILN_HTTP_FAIL;
  }
  if (is(code, "ExpiredToken") || is(code, "TokenRefreshRequired") || is(code, "InvalidToken")) {
    *rc = KILN_EPERM;
    snprintf(detail, cap,
             "HTTP %ld %s: the session token has expired or is not valid: renew "
             "the credentials",
             status, code);
    return KILN_HTTP_FAIL;
  }
  if (status == 400 && is(code, "RequestTimeout")) {
    snprintf(detail, cap, "HTTP 400 RequestTimeout: the server gave up waiting for the request");
    return KILN_HTTP_RETRY;
  }
  if (status == 401 || status == 403) {
    *rc = KILN_EPERM;
    if (is(code, "SignatureDoesNotMatch"))
      snprintf(why, sizeof why,
               "the signature does not match: the secret key is not the access "
               "key's (AWS_SECRET_ACCESS_KEY, ~/.aws/credentials)");
    else if (is(code, "InvalidAccessKeyId"))
      snprintf(why, sizeof why,
               "the server does not know the access key: wrong credentials, or "
               "another server's (KILN_S3_ENDPOINT)");
    else if (is(code, "RequestTimeTooSkewed"))
      skew_text(why, sizeof why, date, now);
    else if (is(code, "AccessDenied") && c->creds.anonymous)
      snprintf(why, sizeof why,
               "no credentials were found (anonymous) and the bucket does not "
               "allow anonymous %s: set AWS_ACCESS_KEY_ID or AWS_PROFILE",
               what);
    else if (is(code, "AccessDenied"))
      snprintf(why, sizeof why,
               "the credentials are valid but a policy (the bucket's, or the "
               "user's) does not allow %s here",
               what);
    else
      snprintf(why, sizeof why, "refused (the signature, the clock, the credentials or a policy)");
    snprintf(detail, cap, "HTTP %ld%s%s: %s", status, code[0] ? " " : "", code, why);
    return KILN_HTTP_FAIL;
  }
  if (status >= 500 || status == 429) {
    if (is(code, "SlowDown"))
      snprintf(detail, cap,
               "HTTP %ld SlowDown: the server asks for fewer requests at once "
               "(KILN_REMOTE_PARALLEL)",
               status);
    else
      snprintf(detail, cap, "HTTP %ld%s%s", status, code[0] ? " " : "", code);
    return KILN_HTTP_RETRY;
  }
  if (code[0]) {
    snprintf(detail, cap, "HTTP %ld %s", status, code);
    *rc = status == 405 || status == 501 ? KILN_EUNSUPPORTED : KILN_EREMOTE;
    return KILN_HTTP_FAIL;
  }
  return KILN_HTTP_AS_IS;
}

/* ---- the hooks and the backend ---- */

static kiln_status prepare_hook(void *user, CURL *e, kiln_remote_req *r,
                                struct curl_slist **headers) {
  return kiln_s3_prepare(user, e, r, headers);
}

/* A response header's value, or "". */
static const char *header(CURL *e, const char *name) {
  struct curl_header *h = NULL;
  return curl_easy_header(e, name, 0, CURLH_HEADER, -1, &h) == CURLHE_OK && h && h->value ? h->value
                                                                                          : "";
}

static kiln_http_verdict judge_hook(void *user, CURL *e, kiln_remote_req *r, long status,
                                    const char *body, size_t body_len, kiln_status *rc,
                                    char *detail, size_t cap) {
  kiln_s3 *s = user;
  char code[64];
  kiln_s3_error_code(body, body_len, code, sizeof code);
  if (strcmp(code, "ExpiredToken") == 0 || strcmp(code, "TokenRefreshRequired") == 0)
    return renew(s, r, status, code, rc, detail, cap);
  return kiln_s3_judge_answer(&s->cfg, r->method, status, body, body_len, header(e, "Date"),
                              header(e, "x-amz-bucket-region"), time(NULL), rc, detail, cap);
}

kiln_status kiln_s3_new(kiln_s3 **out, const kiln_remote_config *cfg) {
  kiln_status rc = KILN_OK;
  kiln_remote_config hc;
  kiln_s3 *s = NULL;
  kiln_http_hooks hooks;
  if (!out || !cfg) return kiln_fail(KILN_EINVAL, "kiln_s3_new: NULL argument");
  *out = NULL;
  hc = *cfg;
  memset(hc.token, 0, sizeof hc.token); /* S3 signs: no bearer token, no .netrc */
  hc.netrc = 0;
  if (!(s = calloc(1, sizeof *s))) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  pthread_mutex_init(&s->mu, NULL);
  s->rcfg = hc;
  KILN_CHECK(kiln_s3_config_load(&s->cfg, cfg->base));
  if (s->cfg.creds.web_identity) {
    rc = kiln_sts_web_identity(&s->cfg.creds, s->cfg.sts_endpoint, &s->rcfg);
    if (rc == KILN_EREMOTE || rc == KILN_ETIMEDOUT) { /* STS is away: the remote fails, not kiln */
      snprintf(s->creds_error, sizeof s->creds_error, "%s", kiln_last_error());
      kiln_log(KILN_LOG_WARN, "remote cache %s: %s", cfg->base, s->creds_error);
      rc = KILN_OK;
    }
    if (rc != KILN_OK) goto out;
  }
  snprintf(hc.base, sizeof hc.base, "%s", s->cfg.base);
  hooks.user = s;
  hooks.prepare = prepare_hook;
  hooks.judge = judge_hook;
  KILN_CHECK(kiln_http_new_hooked(&s->http, &hc, &hooks));
  /* the breaker's warning names the remote as the user wrote it */
  snprintf(kiln_http_breaker(s->http)->name, sizeof kiln_http_breaker(s->http)->name, "%s",
           cfg->base);
  kiln_log(KILN_LOG_DEBUG,
           "remote cache %s: %s (endpoint from %s, %s-style), region %s (from %s), "
           "credentials: %s",
           cfg->base, s->cfg.base, s->cfg.endpoint_from, s->cfg.virtual_host ? "virtual" : "path",
           s->cfg.region, s->cfg.region_from, s->cfg.creds.source);
  *out = s;
  s = NULL;
out:
  kiln_s3_free(s);
  return rc;
}

void kiln_s3_free(kiln_s3 *s) {
  if (!s) return;
  kiln_http_free(s->http);
  kiln_s3_config_wipe(&s->cfg);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* A HEAD refused with 403 carries no error document: one GET of the same
 * path says why (the signature, the clock, the credentials, a policy), and
 * that reason replaces the bare "HTTP 403" of every such HEAD of the run. */
static void explain_head_403(kiln_s3 *s, kiln_remote_req *reqs, size_t n) {
  kiln_remote_req q;
  char why[256] = "";
  for (size_t i = 0; i < n; i++) {
    kiln_remote_req *r = &reqs[i];
    if (r->method != KILN_REMOTE_HEAD || r->status != 403) continue;
    if (!why[0]) {
      size_t skip = 4 + strlen(r->path) + 2; /* "GET <path>: " */
      memset(&q, 0, sizeof q);
      q.method = KILN_REMOTE_GET;
      q.out_fd = -1;
      q.max_bytes = KILN_REMOTE_RECORD_MAX;
      snprintf(q.path, sizeof q.path, "%s", r->path);
      kiln_http_run(s->http, &q, 1);
      if (q.status == 403 && strlen(q.error) > skip)
        snprintf(why, sizeof why, "%s", q.error + skip);
      kiln_remote_reqs_reset(&q, 1);
      if (!why[0]) return;
    }
    snprintf(r->error, sizeof r->error, "HEAD %.72s: %.170s", r->path, why);
  }
}

/* 1 when the credentials are there; else asks STS again, and when it still
 * cannot answer fails every request with why (each counts towards the
 * breaker, which turns the remote off as for a server that is down). */
static int creds_ready(kiln_s3 *s, kiln_remote_req *reqs, size_t n) {
  kiln_s3_creds *fresh;
  int ready;
  pthread_mutex_lock(&s->mu);
  if (s->creds_error[0] && (fresh = calloc(1, sizeof *fresh))) {
    if (get_creds(s, fresh) == KILN_OK) {
      s->cfg.creds = *fresh;
      s->creds_error[0] = '\0';
    } else {
      snprintf(s->creds_error, sizeof s->creds_error, "%s", kiln_last_error());
    }
    memset(fresh, 0, sizeof *fresh);
    free(fresh);
  }
  ready = !s->creds_error[0];
  for (size_t i = 0; !ready && i < n; i++) {
    reqs[i].rc = KILN_EREMOTE;
    reqs[i].attempts = 1;
    snprintf(reqs[i].error, sizeof reqs[i].error, "%s %.72s: %.170s",
             kiln_remote_method_name(reqs[i].method), reqs[i].path, s->creds_error);
    kiln_breaker_note(kiln_http_breaker(s->http), &reqs[i]);
  }
  pthread_mutex_unlock(&s->mu);
  return ready;
}

static kiln_status backend_run(void *impl, kiln_remote_req *reqs, size_t n, kiln_remote_then then,
                               void *user) {
  kiln_s3 *s = impl;
  kiln_status rc;
  kiln_remote_reqs_clear(reqs, n);
  if (kiln_breaker_is_open(kiln_http_breaker(s->http))) {
    rc = kiln_breaker_fail_all(reqs, n);
    kiln_remote_then_failed(reqs, n, then, user);
    return rc;
  }
  if (!creds_ready(s, reqs, n)) {
    kiln_remote_then_failed(reqs, n, then, user);
    return KILN_OK;
  }
  rc = kiln_http_run_then(s->http, reqs, n, then, user);
  if (rc == KILN_OK) explain_head_403(s, reqs, n);
  return rc;
}

static kiln_breaker *backend_breaker(void *impl) {
  return kiln_http_breaker(((kiln_s3 *)impl)->http);
}

static void backend_free(void *impl) {
  kiln_s3_free(impl);
}

const kiln_remote_backend kiln_remote_s3 = {"s3", backend_run, backend_breaker, backend_free};
