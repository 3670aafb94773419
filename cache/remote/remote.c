/* The one remote cache on top of its backends: attaching it to a cache (the
 * URL's scheme picks the backend), its settings, the traffic totals in the
 * index and the doctor's check (include/kiln/remote.h; layout and document in
 * docs/remote-cache.md). Fetch is cache/remote/fetch.c, upload
 * cache/remote/upload.c. */
#include <ctype.h>   /* isspace */
#include <errno.h>   /* errno */
#include <pthread.h> /* a chained run's then, serialized */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* calloc, free */
#include <string.h>  /* memcpy, memset, strcmp, strlen, strncmp */
#include <unistd.h>  /* access */

#include "cache/remote/remote.h"
#include "cache/remote/s3.h"
#include "cache/sql.h"
#include "cache/store.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/logging.h"
#include "common/params.h"

#define BREAKER_THRESHOLD 5 /* failed requests in a row that turn the remote off */

static int anonymous_said; /* "uploads are off" for an anonymous s3:// remote: once a process */

void kiln_remote_close(struct kiln_remote *r) {
  if (!r) return;
  if (r->be) r->be->free(r->impl);
  if (r->key) {
    memset(r->key, 0, r->key_len);
    free(r->key);
  }
  free(r);
}

/* A secret from a file, trailing whitespace trimmed. Never echoed. */
static kiln_status read_secret(const char *path, const char *what, uint8_t **out, size_t *len) {
  uint8_t *data = NULL;
  size_t n = 0;
  kiln_status rc = kiln_read_file(path, &data, &n);
  if (rc == KILN_ENOTFOUND) return kiln_fail(KILN_EIO, "%s %s does not exist", what, path);
  if (rc != KILN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    return kiln_fail(rc, "%s %s cannot be read: %s", what, path, why);
  }
  while (n && isspace(data[n - 1]))
    n--;
  if (!n) {
    free(data);
    return kiln_fail(KILN_EINVAL, "%s %s is empty", what, path);
  }
  data[n] = '\0'; /* kiln_read_file leaves room for it */
  *out = data;
  *len = n;
  return KILN_OK;
}

static kiln_status remote_config(kiln_remote_config *cfg, const kiln_remote_options *o) {
  const char *ca = kiln_option_str(o->ca_file, KILN_P_remote_ca_file);
  const char *token = kiln_option_str(o->token_file, KILN_P_remote_token_file);
  double connect_s, total_s;
  kiln_status rc = KILN_OK;
  KILN_CHECK(kiln_option_seconds(&connect_s, o->connect_timeout_s, KILN_P_remote_connect_timeout_s,
                                 "kiln_remote_options.connect_timeout_s"));
  KILN_CHECK(kiln_option_seconds(&total_s, o->timeout_s, KILN_P_remote_timeout_s,
                                 "kiln_remote_options.timeout_s"));
  KILN_CHECK(kiln_option_int(&cfg->retries, o->retries, KILN_P_remote_retries,
                             "kiln_remote_options.retries"));
  KILN_CHECK(kiln_option_int(&cfg->parallel, o->parallel, KILN_P_remote_parallel,
                             "kiln_remote_options.parallel"));
  cfg->connect_timeout_ms = (long)(connect_s * 1000);
  cfg->timeout_ms = (long)(total_s * 1000);
  cfg->backoff_ms = 100;
  cfg->breaker_threshold = BREAKER_THRESHOLD;
  if (ca && *ca) {
    if (access(ca, R_OK) != 0) {
      rc = kiln_fail_errno(KILN_EIO, errno, "KILN_REMOTE_CA_FILE %s", ca);
      goto out;
    }
    snprintf(cfg->ca_file, sizeof cfg->ca_file, "%s", ca);
  }
  if (token && *token) {
    uint8_t *t = NULL;
    size_t n = 0;
    KILN_CHECK(read_secret(token, "the token file", &t, &n));
    for (size_t i = 0; i < n && rc == KILN_OK; i++)
      if (t[i] < 0x21 || t[i] > 0x7e)
        rc = kiln_fail(KILN_EINVAL,
                       "the token file %s holds more than one token (or a control "
                       "character): put only the token in it",
                       token);
    if (rc == KILN_OK && n >= sizeof cfg->token)
      rc = kiln_fail(KILN_EINVAL, "the token in %s is longer than %zu bytes", token,
                     sizeof cfg->token - 1);
    if (rc == KILN_OK) memcpy(cfg->token, t, n + 1);
    memset(t, 0, n);
    free(t);
  } else {
    cfg->netrc = 1; /* credentials, if any, from .netrc */
  }
out:
  return rc;
}

KILN_DEFINE_OPTIONS_INIT(kiln_remote_options, KILN_REMOTE_OPTIONS_VERSION, KILN_REMOTE_OPTIONS_INIT)

kiln_status kiln_cache_set_remote(kiln_cache *c, const kiln_remote_options *opts) {
  kiln_remote_options dflt = KILN_REMOTE_OPTIONS_INIT;
  const kiln_remote_options *o = opts ? opts : &dflt;
  kiln_remote_config *cfg = NULL;
  struct kiln_remote *r = NULL;
  const char *url, *keyfile;
  size_t len;
  kiln_status rc = KILN_OK;
  if (!c) return kiln_fail(KILN_EINVAL, "kiln_cache_set_remote: no cache");
  rc = kiln_options_check(o->version, KILN_REMOTE_OPTIONS_VERSION, "kiln_remote_options");
  if (rc != KILN_OK) return rc;
  url = kiln_option_str(o->url, KILN_P_remote_url);
  if (!url || !*url) goto attach; /* no remote */
  len = strlen(url);
  while (len && url[len - 1] == '/')
    len--;
  if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0 &&
      strncmp(url, "file://", 7) != 0 && strncmp(url, "s3://", 5) != 0) {
    /* not echoed: a mistyped URL may still carry a password */
    rc = kiln_fail(KILN_EINVAL,
                   "the remote cache URL must start with http://, https://, s3:// or file:///");
    goto out;
  }
  r = calloc(1, sizeof *r);
  cfg = calloc(1, sizeof *cfg);
  if (!r || !cfg) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  if (len >= sizeof r->url || len >= sizeof cfg->base) {
    rc = kiln_fail(KILN_EINVAL, "remote cache URL is longer than %zu bytes", sizeof r->url - 1);
    goto out;
  }
  memcpy(r->url, url, len);
  memcpy(cfg->base, url, len);
  r->tls = strncmp(url, "https://", 8) == 0;
  KILN_CHECK(
      kiln_option_int(&r->upload, o->upload, KILN_P_remote_upload, "kiln_remote_options.upload"));
  keyfile = kiln_option_str(o->hmac_key_file, KILN_P_remote_hmac_key_file);
  if (keyfile && *keyfile)
    KILN_CHECK(read_secret(keyfile, "the HMAC key file", &r->key, &r->key_len));
  KILN_CHECK(remote_config(cfg, o));
  if (strncmp(url, "file://", 7) == 0) {
    kiln_file_remote *f = NULL;
    KILN_CHECK(kiln_file_remote_new(&f, cfg));
    r->be = &kiln_remote_file;
    r->impl = f;
  } else if (strncmp(url, "s3://", 5) == 0) {
    kiln_s3 *s = NULL;
    KILN_CHECK(kiln_s3_new(&s, cfg));
    r->be = &kiln_remote_s3;
    r->impl = s;
    r->tls = strncmp(kiln_s3_config_of(s)->base, "https://", 8) == 0;
    if (r->upload && kiln_s3_config_of(s)->creds.anonymous) {
      r->upload = 0; /* anonymous requests are unsigned: reads of a public bucket only */
      if (!__atomic_exchange_n(&anonymous_said, 1, __ATOMIC_RELAXED))
        kiln_log(KILN_LOG_INFO,
                 "remote cache %s: no AWS credentials found (anonymous): reading only, uploads "
                 "are off (docs/remote-cache.md, \"S3\")",
                 r->url);
    }
  } else {
    kiln_http *h = NULL;
    KILN_CHECK(kiln_http_new(&h, cfg));
    r->be = &kiln_remote_http;
    r->impl = h;
  }
  kiln_log(KILN_LOG_DEBUG, "remote cache %s (%s%s)", r->url, r->upload ? "read-write" : "read-only",
           r->key ? ", records signed" : "");
attach:
  kiln_remote_close(c->remote);
  c->remote = r;
  r = NULL;
out:
  if (cfg) {
    memset(cfg->token, 0, sizeof cfg->token);
    free(cfg);
  }
  kiln_remote_close(r);
  return rc;
}

kiln_status kiln_remote_run(struct kiln_remote *r, kiln_remote_req *reqs, size_t n) {
  return r->be->run(r->impl, reqs, n, NULL, NULL);
}

typedef struct serial_then {
  pthread_mutex_t mu;
  kiln_remote_then then;
  void *user;
} serial_then;

static kiln_remote_req *serialized(void *user, size_t i) {
  serial_then *s = user;
  kiln_remote_req *q;
  pthread_mutex_lock(&s->mu);
  q = s->then(s->user, i);
  pthread_mutex_unlock(&s->mu);
  return q;
}

kiln_status kiln_remote_run_then(struct kiln_remote *r, kiln_remote_req *reqs, size_t n,
                                 kiln_remote_then then, void *user) {
  serial_then s = {PTHREAD_MUTEX_INITIALIZER, then, user};
  kiln_status rc;
  if (!then) return kiln_remote_run(r, reqs, n);
  rc = r->be->run(r->impl, reqs, n, serialized, &s);
  pthread_mutex_destroy(&s.mu);
  return rc;
}

int kiln_remote_breaker_open(struct kiln_remote *r) {
  return kiln_breaker_is_open(r->be->breaker(r->impl));
}

const char *kiln_remote_credentials(const struct kiln_remote *r) {
  return r && r->be == &kiln_remote_s3 ? kiln_s3_config_of(r->impl)->creds.source : NULL;
}

int kiln_remote_breaker_trips(struct kiln_remote *r) {
  return kiln_breaker_trips(r->be->breaker(r->impl));
}

const char *kiln_cache_remote_url(const kiln_cache *c) {
  return c && c->remote ? c->remote->url : NULL;
}

const char *kiln_cache_remote_credentials(const kiln_cache *c) {
  return c ? kiln_remote_credentials(c->remote) : NULL;
}

int kiln_cache_remote_upload(const kiln_cache *c) {
  return c && c->remote ? c->remote->upload : 0;
}

kiln_status kiln_remote_gc(kiln_remote_gc_report *out, kiln_cache *c, double max_age_s) {
  struct kiln_remote *r;
  if (!out || !c) return kiln_fail(KILN_EINVAL, "kiln_remote_gc: NULL argument");
  memset(out, 0, sizeof *out);
  r = c->remote;
  if (!r) return kiln_fail(KILN_EINVAL, "no remote cache configured (--remote or KILN_REMOTE_URL)");
  if (r->be != &kiln_remote_file)
    return kiln_fail(KILN_EUNSUPPORTED,
                     "remote cache %s keeps no temp files: only a file:// remote has any to clean",
                     r->url);
  if (!(max_age_s >= 0)) return kiln_fail(KILN_EINVAL, "kiln_remote_gc: max_age_s must be >= 0");
  return kiln_file_remote_gc(r->impl, max_age_s, &out->removed, &out->bytes);
}

/* ---- totals in the index ---- */

#define N_STATS 8
static const char *const stat_names[N_STATS] = {
    "hits", "misses", "errors", "rejected", "bytes_down", "uploads", "bytes_up", "breaker_trips"};

static uint64_t *stat_field(kiln_remote_stats *s, int i) {
  uint64_t *f[N_STATS] = {&s->hits,       &s->misses,  &s->errors,   &s->rejected,
                          &s->bytes_down, &s->uploads, &s->bytes_up, &s->breaker_trips};
  return f[i];
}

/* Best effort: the totals are for operators; a failure to count never fails
 * a fetch. */
void kiln_remote_stats_add(kiln_cache *c, kiln_remote_stats *d) {
  static const char *sql = "INSERT INTO remote_stats(name, value) VALUES(?1, ?2) "
                           "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value";
  kiln_status rc = kiln_txn_begin(c, "count remote traffic");
  if (rc != KILN_OK) goto out;
  for (int i = 0; i < N_STATS && rc == KILN_OK; i++)
    if (*stat_field(d, i))
      rc = kiln_sql_run(c->primary.db, sql,
                        SQL_ARGS(SQL_TEXT(stat_names[i]), SQL_INT((int64_t)*stat_field(d, i))),
                        "count remote traffic");
  rc = kiln_txn_end(c, rc, "count remote traffic");
out:
  if (rc != KILN_OK) kiln_log(KILN_LOG_DEBUG, "%s", kiln_last_error());
}

kiln_status kiln_remote_stats_get(kiln_remote_stats *out, kiln_cache *c) {
  sqlite3_stmt *st = NULL;
  kiln_status rc;
  int row = 0;
  if (!c || !out) return kiln_fail(KILN_EINVAL, "kiln_remote_stats_get: NULL argument");
  memset(out, 0, sizeof *out);
  KILN_CHECK(kiln_sql_prepare(&st, c->primary.db, "SELECT name, value FROM remote_stats", NULL, 0,
                              "read remote totals"));
  while ((rc = kiln_sql_step(&row, st, "read remote totals")) == KILN_OK && row) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    for (int i = 0; i < N_STATS; i++)
      if (name && strcmp(name, stat_names[i]) == 0)
        *stat_field(out, i) = (uint64_t)sqlite3_column_int64(st, 1);
  }
out:
  sqlite3_finalize(st);
  return rc;
}

/* ---- check (kiln doctor) ---- */

kiln_status kiln_remote_check(kiln_remote_check_result *out, kiln_cache *c) {
  struct kiln_remote *r;
  kiln_remote_req q;
  double t0;
  if (!c || !out) return kiln_fail(KILN_EINVAL, "kiln_remote_check: NULL argument");
  memset(out, 0, sizeof *out);
  r = c->remote;
  if (!r) return KILN_OK;
  out->configured = 1;
  out->signing = r->key != NULL;
  out->upload = r->upload;
  out->tls = r->tls;
  memset(&q, 0, sizeof q);
  q.method = KILN_REMOTE_GET;
  q.out_fd = -1;
  q.max_bytes = KILN_REMOTE_RECORD_MAX;
  /* a key no build produces: any answer but 401/403 shows the way is open */
  snprintf(q.path, sizeof q.path, "ac/%064d", 0);
  t0 = kiln_clock_ms();
  kiln_remote_run(r, &q, 1);
  out->ms = kiln_clock_ms() - t0;
  out->http_status = q.status;
  /* an answer that says this remote cannot serve at all (S3's NoSuchBucket, a
   * wrong region: EREMOTE below 500) is no working remote either */
  out->reachable = q.status != 0 && !(q.rc == KILN_EREMOTE && q.status >= 300 && q.status < 500);
  out->authorized = out->reachable && q.status != 401 && q.status != 403;
  if (q.error[0])
    snprintf(out->detail, sizeof out->detail, "%s", q.error);
  else
    snprintf(out->detail, sizeof out->detail, "HTTP %ld", q.status);
  kiln_remote_reqs_reset(&q, 1);
  return KILN_OK;
}
