/* The remote cache's transport (cache/remote/remote.h): parallel GET/HEAD/PUT over
 * libcurl's multi interface, per-attempt timeouts, retries scheduled by time
 * inside the multi loop (a backoff never blocks other transfers), a breaker
 * that turns the remote off for the process. Every response goes through the
 * bounded body sink (cache/remote/sink.c).
 *
 * Redirects are not followed: a 3xx is an error (EREMOTE). A cache that
 * moves should be configured with its new URL, and following a Location to
 * another host would hand it the bearer token.
 *
 * Secrets: the token travels only in an "Authorization" header built here; it
 * is never in the URL, a log line or an error string. URLs with userinfo are
 * refused at kiln_http_new, so printing base or a path cannot leak one.
 *
 * A backend whose requests need headers and signing of their own (S3) runs
 * on this same loop through two hooks (cache/remote/http.h): one prepares
 * each attempt, the other reads each answer that is not 2xx. The first
 * KILN_HTTP_ERROR_BODY_MAX bytes of such an answer's body are kept for it,
 * apart from the sink: an error page never reaches a download's file. */
#include <errno.h>   /* errno */
#include <pthread.h> /* the breaker's mutex, curl_global_init once */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* calloc, free */
#include <string.h>  /* memcpy, strcspn */
#include <unistd.h>  /* ftruncate, lseek */

#include <curl/curl.h>

#include "cache/remote/http.h"
#include "cache/remote/remote.h"
#include "cache/remote/sink.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"

struct kiln_http {
  kiln_remote_config cfg;
  /* Connections (and DNS, TLS sessions) are kept between runs: a fetch's
   * records and then its blobs, or the loader's later lookups, reuse them. */
  CURLSH *share;
  pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST]; /* one per kind: curl nests them */
  kiln_breaker breaker;
  kiln_http_hooks hooks; /* all NULL: plain HTTP */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init_once(void) {
  curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* "http[s]://authority/..." with no userinfo in the authority. */
static kiln_status check_base(const char *base) {
  const char *a, *end;
  if (strncmp(base, "http://", 7) == 0)
    a = base + 7;
  else if (strncmp(base, "https://", 8) == 0)
    a = base + 8;
  else
    return kiln_fail(KILN_EINVAL, "remote cache URL must start with http:// or https://");
  end = a + strcspn(a, "/?#");
  if (memchr(a, '@', (size_t)(end - a)))
    return kiln_fail(KILN_EINVAL, "remote cache URL has credentials: put credentials in .netrc "
                                  "or KILN_REMOTE_TOKEN_FILE, not in the URL");
  if (end == a) return kiln_fail(KILN_EINVAL, "remote cache URL has no host");
  if (strpbrk(base, " \t\r\n"))
    return kiln_fail(KILN_EINVAL, "remote cache URL contains whitespace");
  return KILN_OK;
}

static void share_lock(CURL *e, curl_lock_data d, curl_lock_access a, void *user) {
  (void)e, (void)a;
  if (d >= 0 && d < CURL_LOCK_DATA_LAST) pthread_mutex_lock(&((kiln_http *)user)->share_mu[d]);
}

static void share_unlock(CURL *e, curl_lock_data d, void *user) {
  (void)e;
  if (d >= 0 && d < CURL_LOCK_DATA_LAST) pthread_mutex_unlock(&((kiln_http *)user)->share_mu[d]);
}

kiln_status kiln_http_new(kiln_http **out, const kiln_remote_config *cfg) {
  return kiln_http_new_hooked(out, cfg, NULL);
}

kiln_status kiln_http_new_hooked(kiln_http **out, const kiln_remote_config *cfg,
                                 const kiln_http_hooks *hooks) {
  kiln_status rc = KILN_OK;
  kiln_http *h = NULL;
  if (!out || !cfg) return kiln_fail(KILN_EINVAL, "kiln_http_new: NULL argument");
  *out = NULL;
  if (!memchr(cfg->base, 0, sizeof cfg->base) || !memchr(cfg->token, 0, sizeof cfg->token) ||
      !memchr(cfg->ca_file, 0, sizeof cfg->ca_file)) {
    rc = kiln_fail(KILN_EINVAL, "remote cache config: unterminated string");
    goto out;
  }
  KILN_CHECK(check_base(cfg->base));
  if (strpbrk(cfg->token, "\r\n")) {
    rc = kiln_fail(KILN_EINVAL, "remote cache token contains a line break");
    goto out;
  }
  pthread_once(&curl_once, curl_init_once);
  if (curl_init_rc != CURLE_OK) {
    rc = kiln_fail(KILN_EREMOTE, "curl_global_init: %s", curl_easy_strerror(curl_init_rc));
    goto out;
  }
  h = calloc(1, sizeof *h);
  if (!h) {
    rc = kiln_fail(KILN_ENOMEM, "kiln_http");
    goto out;
  }
  h->cfg = *cfg;
  if (hooks) h->hooks = *hooks;
  if (h->cfg.parallel < 1) h->cfg.parallel = 1;
  if (h->cfg.retries < 0) h->cfg.retries = 0;
  if (h->cfg.backoff_ms < 0) h->cfg.backoff_ms = 0;
  kiln_breaker_init(&h->breaker, h->cfg.breaker_threshold, h->cfg.base);
  for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
    pthread_mutex_init(&h->share_mu[i], NULL);
  h->share = curl_share_init();
  if (h->share) { /* without one, each run opens its own connections: slower, not wrong */
    curl_share_setopt(h->share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(h->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(h->share, CURLSHOPT_USERDATA, h);
    curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  }
  *out = h;
out:
  return rc;
}

void kiln_http_free(kiln_http *h) {
  if (!h) return;
  if (h->share) curl_share_cleanup(h->share);
  for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
    pthread_mutex_destroy(&h->share_mu[i]);
  kiln_breaker_destroy(&h->breaker);
  memset(h->cfg.token, 0, sizeof h->cfg.token);
  free(h);
}

kiln_breaker *kiln_http_breaker(kiln_http *h) {
  return &h->breaker;
}

int kiln_http_breaker_open(const kiln_http *h) {
  return h ? kiln_breaker_is_open((kiln_breaker *)&h->breaker) : 0;
}

int kiln_http_breaker_trips(const kiln_http *h) {
  return h ? kiln_breaker_trips((kiln_breaker *)&h->breaker) : 0;
}

/* One request's progress through the run. */
typedef enum { XF_WAITING, XF_RUNNING, XF_DONE } xf_phase;

/* Times are whole milliseconds of kiln_clock_ms() (monotonic), truncated to
 * uint64_t so the scheduling arithmetic stays integer. */
typedef struct xfer {
  kiln_remote_req *req;
  xf_phase phase;
  uint64_t ready_at; /* WAITING: not before */
  uint64_t started;  /* first attempt */
  CURL *easy;
  kiln_http_sink *sink;
  size_t up_off;
  struct curl_slist *hdrs; /* this attempt's own headers (a hooked backend's) */
  char errbuf[CURL_ERROR_SIZE];
  char errbody[KILN_HTTP_ERROR_BODY_MAX + 1]; /* the start of an error answer's body */
  size_t errlen;
} xfer;

typedef struct run {
  kiln_http *h;
  kiln_remote_then then; /* each first request's follow-up, or NULL */
  void *then_user;
  CURLM *multi;
  struct curl_slist *hdr_get, *hdr_put;
  CURL **pool; /* idle easy handles, reused so connections and TLS sessions stay warm */
  size_t npool;
  unsigned seed;
} run;

static size_t on_header(char *p, size_t size, size_t n, void *u) {
  xfer *x = u;
  kiln_http_sink_header(x->sink, p, size * n);
  return size * n;
}

static size_t on_body(char *p, size_t size, size_t n, void *u) {
  xfer *x = u;
  size_t len = size * n;
  long st = 0;
  x->req->bytes_down += len;
  curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &st);
  if (st < 200 || st > 299) { /* an error answer: its start is kept for the judge, apart */
    size_t keep = sizeof x->errbody - 1 - x->errlen;
    if (keep > len) keep = len;
    memcpy(x->errbody + x->errlen, p, keep);
    x->errlen += keep;
    x->errbody[x->errlen] = '\0';
    return len;
  }
  if (x->req->method != KILN_REMOTE_GET) return len; /* PUT/HEAD answers are not kept */
  return kiln_http_sink_body(x->sink, p, len);
}

static size_t on_read(char *p, size_t size, size_t n, void *u) {
  xfer *x = u;
  size_t left = x->req->body_len - x->up_off, len = size * n;
  if (len > left) len = left;
  if (len) memcpy(p, (const uint8_t *)x->req->body + x->up_off, len);
  x->up_off += len;
  x->req->bytes_up += len;
  return len;
}

/* Settles r with rc and the one-line error "GET ac/<key>: <detail> (N attempts)". */
static void finish_req(kiln_remote_req *r, kiln_status rc, const char *detail) {
  r->rc = rc;
  snprintf(r->error, sizeof r->error, "%s %.72s: %.150s (%d attempt%s)",
           kiln_remote_method_name(r->method), r->path, detail, r->attempts,
           r->attempts == 1 ? "" : "s");
}

/* Sets up x's easy handle for its next attempt. */
static kiln_status xfer_setup(run *R, xfer *x) {
  kiln_status rc = KILN_OK;
  const kiln_remote_config *c = &R->h->cfg;
  kiln_remote_req *r = x->req;
  char url[2048 + 200];
  const char *netrc_file = getenv("NETRC");
  CURL *e = NULL;
  int n = snprintf(url, sizeof url, "%s/%s", c->base, r->path);
  if (n < 0 || (size_t)n >= sizeof url) {
    rc = kiln_fail(KILN_EINVAL, "URL too long");
    goto out;
  }
  if (r->method == KILN_REMOTE_GET && r->out_fd >= 0 && r->attempts > 0) {
    /* A retry starts the file over. */
    if (ftruncate(r->out_fd, 0) != 0 || lseek(r->out_fd, 0, SEEK_SET) != 0) {
      rc = kiln_fail_errno(KILN_EIO, errno, "truncating the download file");
      goto out;
    }
  }
  kiln_http_sink_free(x->sink);
  x->sink = NULL;
  KILN_CHECK(kiln_http_sink_new(&x->sink, r->method == KILN_REMOTE_GET ? r->out_fd : -1,
                                r->method == KILN_REMOTE_GET ? r->max_bytes : 0,
                                r->method == KILN_REMOTE_GET ? r->expect_digest : NULL));
  if (R->npool) {
    e = R->pool[--R->npool];
    curl_easy_reset(e);
  } else if (!(e = curl_easy_init())) {
    rc = kiln_fail(KILN_ENOMEM, "curl_easy_init");
    goto out;
  }
  x->easy = e;
  x->up_off = 0;
  x->errbuf[0] = 0;
  x->errbody[0] = 0;
  x->errlen = 0;
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_PRIVATE, x);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_VERBOSE, 0L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
  curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
  if (R->h->share) curl_easy_setopt(e, CURLOPT_SHARE, R->h->share);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  if (c->ca_file[0]) curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file);
  if (c->connect_timeout_ms > 0)
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
  if (c->timeout_ms > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
  if (c->netrc) {
    curl_easy_setopt(e, CURLOPT_NETRC, (long)CURL_NETRC_OPTIONAL);
    /* libcurl does not read $NETRC itself. */
    if (netrc_file && netrc_file[0]) curl_easy_setopt(e, CURLOPT_NETRC_FILE, netrc_file);
  }
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
  if (r->method == KILN_REMOTE_HEAD) {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (r->method == KILN_REMOTE_PUT) {
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(e, CURLOPT_READDATA, x);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
  } else if (r->method == KILN_REMOTE_MKCOL || r->method == KILN_REMOTE_DELETE) {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, kiln_remote_method_name(r->method));
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  }
  if (R->h->hooks.prepare) {
    KILN_CHECK(R->h->hooks.prepare(R->h->hooks.user, e, r, &x->hdrs));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs);
  } else {
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->method == KILN_REMOTE_PUT ? R->hdr_put : R->hdr_get);
  }
  if (curl_multi_add_handle(R->multi, e) != CURLM_OK) {
    rc = kiln_fail(KILN_EREMOTE, "curl_multi_add_handle failed");
    goto out;
  }
  r->attempts++;
  x->phase = XF_RUNNING;
out:
  if (rc != KILN_OK && e) {
    x->easy = NULL;
    R->pool[R->npool++] = e;
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
  }
  return rc;
}

static int retryable_curl(CURLcode cc) {
  switch (cc) {
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_CONNECT:
  case CURLE_RECV_ERROR:
  case CURLE_SEND_ERROR:
  case CURLE_PARTIAL_FILE:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_GOT_NOTHING:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
  case CURLE_SSL_CONNECT_ERROR: return 1;
  default: return 0;
  }
}

static kiln_status status_rc(long st) {
  if (st >= 200 && st <= 299) return KILN_OK;
  if (st == 404) return KILN_ENOTFOUND;
  if (st == 401 || st == 403) return KILN_EPERM;
  if (st == 405 || st == 501) return KILN_EUNSUPPORTED;
  return KILN_EREMOTE;
}

static void release_easy(run *R, xfer *x) {
  if (!x->easy) return;
  curl_multi_remove_handle(R->multi, x->easy);
  R->pool[R->npool++] = x->easy;
  x->easy = NULL;
  curl_slist_free_all(x->hdrs); /* after the handle is done with them */
  x->hdrs = NULL;
}

static void finalize(run *R, xfer *x) {
  kiln_remote_req *r = x->req;
  x->phase = XF_DONE;
  kiln_http_sink_free(x->sink);
  x->sink = NULL;
  kiln_breaker_note(&R->h->breaker, r);
  kiln_log(KILN_LOG_DEBUG,
           "remote %s %s: status %ld, %llu bytes down, %llu up, %llu ms, %d attempt%s: %s",
           kiln_remote_method_name(r->method), r->path, r->status,
           (unsigned long long)r->bytes_down, (unsigned long long)r->bytes_up,
           (unsigned long long)((uint64_t)kiln_clock_ms() - x->started), r->attempts,
           r->attempts == 1 ? "" : "s", r->rc == KILN_OK ? "ok" : r->error);
}

static uint64_t backoff_for(run *R, int attempts) {
  uint64_t d = (uint64_t)R->h->cfg.backoff_ms;
  for (int i = 1; i < attempts && d < 2000; i++)
    d *= 2;
  if (d > 2000) d = 2000;
  /* jitter: between half and all of the delay */
  return d / 2 + (d ? (uint64_t)rand_r(&R->seed) % (d / 2 + 1) : 0);
}

/* One attempt of x ended with curl code cc: retry it, or settle its result. */
static void on_done(run *R, xfer *x, CURLcode cc) {
  kiln_remote_req *r = x->req;
  long st = 0;
  kiln_status rc, judged_rc = KILN_EREMOTE;
  kiln_http_verdict v = KILN_HTTP_AS_IS;
  int retry;
  char detail[200], judged[200] = "";
  curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &st);
  r->status = st;
  if (cc == CURLE_OK && (st < 200 || st > 299) && R->h->hooks.judge)
    v = R->h->hooks.judge(R->h->hooks.user, x->easy, r, st, x->errbody, x->errlen, &judged_rc,
                          judged, sizeof judged);
  release_easy(R, x);
  retry = cc == CURLE_OK ? (st >= 500 || st == 429) : retryable_curl(cc);
  if (v != KILN_HTTP_AS_IS) retry = v == KILN_HTTP_RETRY;
  if (retry && r->attempts <= R->h->cfg.retries && !kiln_http_breaker_open(R->h)) {
    x->phase = XF_WAITING;
    x->ready_at = (uint64_t)kiln_clock_ms() + backoff_for(R, r->attempts);
    return;
  }
  if (v == KILN_HTTP_RETRY || v == KILN_HTTP_FAIL) {
    finish_req(r, judged_rc, judged);
  } else if (v == KILN_HTTP_SUCCESS && r->method != KILN_REMOTE_GET) {
    r->rc = KILN_OK;
    r->error[0] = 0;
  } else if (cc == CURLE_OK && st >= 200 && st <= 299) {
    if (r->method == KILN_REMOTE_GET) {
      rc = kiln_http_sink_finish(x->sink, r->out_fd >= 0 ? NULL : &r->data, &r->len);
      if (rc != KILN_OK) {
        snprintf(detail, sizeof detail, "%s", kiln_last_error());
        finish_req(r, rc, detail);
        goto out;
      }
    }
    r->rc = KILN_OK;
    r->error[0] = 0;
  } else if (cc == CURLE_OK) {
    snprintf(detail, sizeof detail, "HTTP %ld", st);
    finish_req(r, status_rc(st), detail);
  } else if (cc == CURLE_WRITE_ERROR || cc == CURLE_PARTIAL_FILE) {
    /* The sink stopped the transfer, or the body came short: the sink says why. */
    rc = kiln_http_sink_finish(x->sink, NULL, NULL);
    if (rc == KILN_OK) rc = KILN_ECORRUPT;
    snprintf(detail, sizeof detail, "%s",
             rc == KILN_ECORRUPT || rc == KILN_EIO ? kiln_last_error() : curl_easy_strerror(cc));
    if (cc == CURLE_PARTIAL_FILE && strncmp(detail, "truncated", 9) != 0)
      snprintf(detail, sizeof detail, "truncated: %s", curl_easy_strerror(cc));
    finish_req(r, rc, detail);
  } else {
    snprintf(detail, sizeof detail, "%s", curl_easy_strerror(cc));
    finish_req(r, cc == CURLE_OPERATION_TIMEDOUT ? KILN_ETIMEDOUT : KILN_EREMOTE, detail);
  }
out:
  finalize(R, x);
}

static void fail_breaker(run *R, xfer *x) {
  kiln_remote_req *r = x->req;
  r->rc = KILN_EREMOTE;
  snprintf(r->error, sizeof r->error, "%s %s: remote cache turned off (breaker open)",
           kiln_remote_method_name(r->method), r->path);
  x->phase = XF_DONE;
  kiln_http_sink_free(x->sink);
  x->sink = NULL;
  (void)R;
}

/* xs[0..n) are the first requests; xs[n + i], XF_DONE with no request until
 * first request i is done, is its follow-up (R->then), queued then; its end
 * is told to R->then too. chained[i]: 1 asked, 2 its follow-up's end told. */
static void chain(run *R, xfer *xs, size_t n, unsigned char *chained) {
  for (size_t i = 0; R->then && i < n; i++) {
    kiln_remote_req *q;
    if (chained[i] == 1 && xs[n + i].req && xs[n + i].phase == XF_DONE) {
      chained[i] = 2;
      R->then(R->then_user, n + i);
    }
    if (xs[i].phase != XF_DONE || chained[i]) continue;
    chained[i] = 1;
    if (!(q = R->then(R->then_user, i))) continue;
    kiln_remote_reqs_clear(q, 1);
    xs[n + i].req = q;
    xs[n + i].phase = XF_WAITING;
  }
}

static kiln_status run_loop(run *R, xfer *xs, size_t n, unsigned char *chained) {
  kiln_status rc = KILN_OK;
  size_t done = 0, running = 0, total = R->then ? 2 * n : n;
  while (done < total) {
    uint64_t now = (uint64_t)kiln_clock_ms(), wait = 1000;
    int still = 0, left = 0;
    CURLMsg *m;
    int open = kiln_http_breaker_open(R->h);
    done = 0;
    chain(R, xs, n, chained);
    for (size_t k = 0; k < total; k++) {
      /* follow-ups first: a record's blob starts before the next record */
      xfer *x = &xs[total > n ? (k + n) % total : k];
      if (x->phase == XF_WAITING && open) fail_breaker(R, x);
      if (x->phase == XF_WAITING && running < (size_t)R->h->cfg.parallel) {
        if (x->ready_at <= now) {
          if (!x->started) x->started = now;
          if (xfer_setup(R, x) != KILN_OK) {
            finish_req(x->req, KILN_EREMOTE, kiln_last_error());
            finalize(R, x);
          } else {
            running++;
          }
        } else if (x->ready_at - now < wait) {
          wait = x->ready_at - now;
        }
      }
      if (x->phase == XF_DONE) done++;
    }
    if (done == total) {
      chain(R, xs, n, chained); /* what finished in the scan: follow-ups, ends told */
      for (size_t i = n; i < total; i++)
        if (xs[i].phase != XF_DONE) done--;
      if (done == total) {
        chain(R, xs, n, chained);
        break;
      }
      continue;
    }
    if (curl_multi_perform(R->multi, &still) != CURLM_OK) {
      rc = kiln_fail(KILN_EREMOTE, "curl_multi_perform failed");
      goto out;
    }
    while ((m = curl_multi_info_read(R->multi, &left))) {
      char *priv = NULL;
      xfer *x;
      if (m->msg != CURLMSG_DONE) continue;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
      x = (xfer *)(void *)priv;
      running--;
      on_done(R, x, m->data.result);
      wait = 0; /* a slot is free or a retry may be due: look again now */
    }
    if (wait && curl_multi_poll(R->multi, NULL, 0, (int)wait, NULL) != CURLM_OK) {
      rc = kiln_fail(KILN_EREMOTE, "curl_multi_poll failed");
      goto out;
    }
  }
out:
  return rc;
}

kiln_status kiln_http_run(kiln_http *h, kiln_remote_req *reqs, size_t n) {
  return kiln_http_run_then(h, reqs, n, NULL, NULL);
}

kiln_status kiln_http_run_then(kiln_http *h, kiln_remote_req *reqs, size_t n, kiln_remote_then then,
                               void *user) {
  kiln_status rc = KILN_OK;
  run R = {0};
  xfer *xs = NULL;
  unsigned char *chained = NULL;
  size_t total = then ? 2 * n : n;
  char auth[1100];
  if (!h || (!reqs && n)) return kiln_fail(KILN_EINVAL, "kiln_http_run: NULL argument");
  kiln_remote_reqs_clear(reqs, n);
  if (kiln_http_breaker_open(h)) {
    rc = kiln_breaker_fail_all(reqs, n);
    kiln_remote_then_failed(reqs, n, then, user);
    goto out;
  }
  if (n == 0) goto out;
  R.h = h;
  R.then = then;
  R.then_user = user;
  R.seed = (unsigned)(uint64_t)kiln_clock_ms() ^ (unsigned)(uintptr_t)&R;
  xs = calloc(total, sizeof *xs);
  chained = calloc(n, 1);
  R.pool = calloc((size_t)h->cfg.parallel, sizeof *R.pool);
  R.multi = curl_multi_init();
  if (!xs || !chained || !R.pool || !R.multi) {
    rc = kiln_fail(KILN_ENOMEM, "remote transfers");
    goto out;
  }
  curl_multi_setopt(R.multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
  curl_multi_setopt(R.multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)h->cfg.parallel);
  if (h->cfg.token[0]) {
    int k = snprintf(auth, sizeof auth, "Authorization: Bearer %s", h->cfg.token);
    if (k < 0 || (size_t)k >= sizeof auth) {
      rc = kiln_fail(KILN_EINVAL, "remote cache token too long");
      goto out;
    }
    if (!(R.hdr_get = curl_slist_append(NULL, auth))) {
      rc = kiln_fail(KILN_ENOMEM, "headers");
      goto out;
    }
    if (!(R.hdr_put = curl_slist_append(NULL, auth))) {
      rc = kiln_fail(KILN_ENOMEM, "headers");
      goto out;
    }
  }
  /* PUT: no "Expect: 100-continue" round trip; bodies are small and idempotent. */
  {
    struct curl_slist *t = curl_slist_append(R.hdr_put, "Expect:");
    if (!t) {
      rc = kiln_fail(KILN_ENOMEM, "headers");
      goto out;
    }
    R.hdr_put = t;
  }
  for (size_t i = 0; i < total; i++) /* follow-ups: none until their first is done */
    xs[i].phase = i < n ? XF_WAITING : XF_DONE;
  for (size_t i = 0; i < n; i++)
    xs[i].req = &reqs[i];
  rc = run_loop(&R, xs, n, chained);
out:
  for (size_t i = 0; xs && i < total; i++) {
    kiln_remote_req *r = xs[i].req;
    if (xs[i].phase != XF_DONE && r) {
      release_easy(&R, &xs[i]);
      r->rc = KILN_EREMOTE;
      snprintf(r->error, sizeof r->error, "%s %s: transfer aborted",
               kiln_remote_method_name(r->method), r->path);
    }
    kiln_http_sink_free(xs[i].sink);
  }
  for (size_t i = 0; then && chained && i < n; i++) { /* stopped early: asked and told */
    kiln_remote_req *q = xs[n + i].req;
    if (!chained[i] && (q = then(user, i))) {
      kiln_remote_reqs_clear(q, 1);
      q->rc = KILN_EREMOTE;
      snprintf(q->error, sizeof q->error, "%s %s: transfer aborted",
               kiln_remote_method_name(q->method), q->path);
    }
    if (chained[i] != 2 && q) then(user, n + i);
  }
  for (size_t i = 0; i < R.npool; i++)
    curl_easy_cleanup(R.pool[i]);
  if (R.multi) curl_multi_cleanup(R.multi);
  curl_slist_free_all(R.hdr_get);
  curl_slist_free_all(R.hdr_put);
  memset(auth, 0, sizeof auth);
  free(R.pool);
  free(xs);
  free(chained);
  return rc;
}

static kiln_status backend_run(void *impl, kiln_remote_req *reqs, size_t n, kiln_remote_then then,
                               void *user) {
  return kiln_http_run_then(impl, reqs, n, then, user);
}

static kiln_breaker *backend_breaker(void *impl) {
  return &((kiln_http *)impl)->breaker;
}

static void backend_free(void *impl) {
  kiln_http_free(impl);
}

const kiln_remote_backend kiln_remote_http = {"http", backend_run, backend_breaker, backend_free};
