/* The remote cache on top of the transport: attach, fetch, upload, stats,
 * check (include/kiln/remote.h; layout and document in docs/remote-cache.md). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/remote.h"
#include "cache/store.h"
#include "common/clock.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/pool.h"

#define RECORD_MAX (64 * 1024) /* a record document is a few hundred bytes */
#define BREAKER_THRESHOLD 5    /* failed requests in a row that turn the remote off */
#define PENDING KILN_EINTERNAL /* an item between its record and its blob */

struct kiln_remote {
  kiln_http *http;
  char url[2048];
  int upload, tls;
  uint8_t *key; /* HMAC key, or NULL */
  size_t key_len;
};

void kiln_remote_close(struct kiln_remote *r) {
  if (!r) return;
  kiln_http_free(r->http);
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
  if (rc != KILN_OK) return kiln_fail(rc, "%s %s cannot be read", what, path);
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

static kiln_status http_config(kiln_http_config *cfg, const kiln_remote_options *o) {
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

kiln_status kiln_remote_options_init(kiln_remote_options *opts, int version) {
  static const kiln_remote_options init = KILN_REMOTE_OPTIONS_INIT;
  return kiln_options_init(opts, &init, sizeof init, version, KILN_REMOTE_OPTIONS_VERSION,
                           "kiln_remote_options");
}

kiln_status kiln_cache_set_remote(kiln_cache *c, const kiln_remote_options *opts) {
  kiln_remote_options dflt = KILN_REMOTE_OPTIONS_INIT;
  const kiln_remote_options *o = opts ? opts : &dflt;
  kiln_http_config *cfg = NULL;
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
  if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
    /* not echoed: a mistyped URL may still carry a password */
    rc = kiln_fail(KILN_EINVAL, "the remote cache URL must start with http:// or https://");
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
  KILN_CHECK(kiln_option_int(&r->upload, o->upload, KILN_P_remote_upload,
                             "kiln_remote_options.upload"));
  keyfile = kiln_option_str(o->hmac_key_file, KILN_P_remote_hmac_key_file);
  if (keyfile && *keyfile)
    KILN_CHECK(read_secret(keyfile, "the HMAC key file", &r->key, &r->key_len));
  KILN_CHECK(http_config(cfg, o));
  KILN_CHECK(kiln_http_new(&r->http, cfg));
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

const char *kiln_cache_remote_url(const kiln_cache *c) {
  return c && c->remote ? c->remote->url : NULL;
}

int kiln_cache_remote_upload(const kiln_cache *c) {
  return c && c->remote ? c->remote->upload : 0;
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
static void stats_add(kiln_cache *c, kiln_remote_stats *d) {
  static const char *sql = "INSERT INTO remote_stats(name, value) VALUES(?1, ?2) "
                           "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value";
  kiln_status rc = kiln_txn_begin(c, "count remote traffic");
  if (rc != KILN_OK) goto out;
  for (int i = 0; i < N_STATS && rc == KILN_OK; i++) {
    sqlite3_stmt *st = NULL;
    int r;
    if (!*stat_field(d, i)) continue;
    r = sqlite3_prepare_v2(c->primary.db, sql, -1, &st, NULL);
    if (r == SQLITE_OK) {
      sqlite3_bind_text(st, 1, stat_names[i], -1, SQLITE_STATIC);
      sqlite3_bind_int64(st, 2, (sqlite3_int64)*stat_field(d, i));
      r = sqlite3_step(st);
    }
    if (r != SQLITE_DONE) rc = kiln_sql_fail(c->primary.db, r, "count remote traffic");
    sqlite3_finalize(st);
  }
  rc = kiln_txn_end(c, rc, "count remote traffic");
out:
  if (rc != KILN_OK) kiln_log(KILN_LOG_DEBUG, "%s", kiln_last_error());
}

kiln_status kiln_remote_stats_get(kiln_remote_stats *out, kiln_cache *c) {
  sqlite3_stmt *st = NULL;
  int r;
  if (!c || !out) return kiln_fail(KILN_EINVAL, "kiln_remote_stats_get: NULL argument");
  memset(out, 0, sizeof *out);
  r = sqlite3_prepare_v2(c->primary.db, "SELECT name, value FROM remote_stats", -1, &st, NULL);
  while (r == SQLITE_OK && (r = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    for (int i = 0; i < N_STATS; i++)
      if (name && strcmp(name, stat_names[i]) == 0)
        *stat_field(out, i) = (uint64_t)sqlite3_column_int64(st, 1);
    r = SQLITE_OK;
  }
  sqlite3_finalize(st);
  if (r != SQLITE_DONE) return kiln_sql_fail(c->primary.db, r, "read remote totals");
  return KILN_OK;
}

/* ---- fetch ---- */

static void item_fail(kiln_remote_item *it, kiln_status st, const char *msg) {
  it->status = st;
  snprintf(it->error, sizeof it->error, "%s", msg);
}

/* The first failed request of a batch is said at warn (with its HTTP status
 * or transport error), the count at the end. */
static void count_error(kiln_remote_stats *d, const char *url, const char *msg) {
  if (d->errors++ == 0) kiln_log(KILN_LOG_WARN, "remote cache %s: %s", url, msg);
}

/* Phase 1: the records. rec[i] is valid where items[i].status is KILN_OK. */
static void fetch_records(kiln_cache *c, kiln_remote_item *items, size_t n, kiln_http_req *reqs,
                          kiln_record *recs, kiln_remote_stats *d) {
  struct kiln_remote *r = c->remote;
  for (size_t i = 0; i < n; i++) {
    reqs[i].method = KILN_HTTP_GET;
    reqs[i].out_fd = -1;
    reqs[i].max_bytes = RECORD_MAX;
    snprintf(reqs[i].path, sizeof reqs[i].path, "ac/%.64s", items[i].key);
  }
  kiln_http_run(r->http, reqs, n);
  for (size_t i = 0; i < n; i++) {
    kiln_remote_item *it = &items[i];
    kiln_http_req *q = &reqs[i];
    kiln_status st;
    d->bytes_down += q->bytes_down;
    if (q->rc == KILN_ENOTFOUND) {
      d->misses++;
      item_fail(it, KILN_ENOTFOUND, "not on the remote");
      continue;
    }
    if (q->rc == KILN_ECORRUPT) {
      item_fail(it, KILN_ECORRUPT, q->error); /* e.g. larger than any record */
    } else if (q->rc != KILN_OK) {
      item_fail(it, q->rc, q->error);
      count_error(d, r->url, q->error);
      continue;
    } else if ((st = kiln_remote_record_decode((const char *)q->data, q->len, it->key, r->key,
                                               r->key_len, &recs[i])) != KILN_OK) {
      item_fail(it, st == KILN_EPERM ? KILN_EPERM : KILN_ECORRUPT, kiln_last_error());
    } else if (strcmp(recs[i].unit, it->unit) != 0 || strcmp(recs[i].target, it->target) != 0) {
      char msg[256];
      snprintf(msg, sizeof msg, "the record under %.12s... describes %s %s, not %s %s", it->key,
               recs[i].unit, recs[i].target, it->unit, it->target);
      item_fail(it, KILN_ECORRUPT, msg);
    } else {
      /* the record passed; OK only once its blob and record are stored */
      item_fail(it, PENDING, "the fetch stopped before its blob was stored");
      continue;
    }
    d->rejected++;
    kiln_log(KILN_LOG_WARN, "remote cache %s: rejected the record of %s %s: %s", r->url, it->unit,
             it->target, it->error);
  }
}

/* Phase 2: the blobs of the records that passed, streamed into temp files
 * (verified as they arrive), then moved into the store, record last. */
typedef struct blob_job {
  size_t item;
  int req; /* index into the requests, or -1: the bytes are here already */
  char tmp[KILN_PATH_MAX];
} blob_job;

/* Settles one item from its download (q, NULL when the bytes were here) and
 * what storing it gave (st, with the detail in err). */
static void settle_blob(const char *url, kiln_remote_item *it, kiln_http_req *q, kiln_status st,
                        const char *err, kiln_remote_stats *d) {
  if (st == KILN_OK) {
    d->hits++;
    it->status = KILN_OK;
  } else if (!q || q->rc == KILN_OK) {
    item_fail(it, st == KILN_ENOTFOUND ? KILN_EIO : st, err); /* the local store failed */
    kiln_log(KILN_LOG_WARN, "remote cache: storing %s %s failed: %s", it->unit, it->target,
             it->error);
  } else if (q->rc == KILN_ENOTFOUND || q->rc == KILN_ECORRUPT) {
    d->rejected++;
    item_fail(it, KILN_ECORRUPT,
              q->rc == KILN_ENOTFOUND ? "the remote has the record but not its blob" : q->error);
    kiln_log(KILN_LOG_WARN, "remote cache %s: rejected the bytes of %s %s: %s", url, it->unit,
             it->target, it->error);
  } else {
    item_fail(it, q->rc, q->error);
    count_error(d, url, q->error);
  }
}

typedef struct adopt_ctx {
  kiln_cache *c;
  blob_job *jobs;
  kiln_http_req *reqs;
  kiln_record *recs;
  kiln_status *st;
  char (*err)[256];
} adopt_ctx;

/* On the pool: fsync, rename and fsync-dir overlap across blobs. */
static void adopt_task(size_t k, void *user) {
  adopt_ctx *a = user;
  blob_job *j = &a->jobs[k];
  kiln_http_req *q = j->req >= 0 ? &a->reqs[j->req] : NULL;
  a->st[k] = KILN_OK;
  if (!q) return;
  if (q->rc != KILN_OK) {
    unlink(j->tmp);
    a->st[k] = q->rc;
    return;
  }
  a->st[k] = kiln_blob_adopt(a->c, a->recs[j->item].digest, j->tmp);
  if (a->st[k] != KILN_OK) snprintf(a->err[k], sizeof a->err[k], "%s", kiln_last_error());
}

/* Blobs first (in parallel), then every record in one transaction. */
static kiln_status store_blobs(kiln_cache *c, kiln_remote_item *items, blob_job *jobs,
                               size_t n_jobs, kiln_http_req *reqs, kiln_record *recs,
                               kiln_remote_stats *d) {
  adopt_ctx a = {c, jobs, reqs, recs, NULL, NULL};
  kiln_record **ins = calloc(n_jobs ? n_jobs : 1, sizeof *ins);
  kiln_status *each = calloc(n_jobs ? n_jobs : 1, sizeof *each);
  size_t *which = calloc(n_jobs ? n_jobs : 1, sizeof *which), m = 0;
  kiln_status rc = KILN_OK;
  a.st = calloc(n_jobs ? n_jobs : 1, sizeof *a.st);
  a.err = calloc(n_jobs ? n_jobs : 1, sizeof *a.err);
  for (size_t k = 0; k < n_jobs; k++) {
    kiln_http_req *q = jobs[k].req >= 0 ? &reqs[jobs[k].req] : NULL;
    if (!q) continue;
    close(q->out_fd);
    q->out_fd = -1;
    d->bytes_down += q->bytes_down;
  }
  if (!ins || !each || !which || !a.st || !a.err) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto drop;
  }
  rc = kiln_pool_run(n_jobs, 8, adopt_task, &a);
  if (rc != KILN_OK) goto drop; /* adopted blobs without records are orphans: gc removes them */
  for (size_t k = 0; k < n_jobs; k++) {
    if (a.st[k] != KILN_OK) continue;
    which[m] = k;
    ins[m++] = &recs[jobs[k].item];
  }
  if (m && kiln_records_insert(c, ins, m, each) != KILN_OK)
    kiln_log(KILN_LOG_WARN, "remote cache: storing records failed: %s", kiln_last_error());
  for (size_t i = 0; i < m; i++) {
    a.st[which[i]] = each[i];
    if (each[i] != KILN_OK)
      snprintf(a.err[which[i]], sizeof a.err[which[i]], "%s",
               each[i] == KILN_ENOTFOUND ? "its blob disappeared before the record was stored"
                                         : kiln_last_error());
  }
  for (size_t k = 0; k < n_jobs; k++) {
    settle_blob(c->remote->url, &items[jobs[k].item], jobs[k].req >= 0 ? &reqs[jobs[k].req] : NULL,
                a.st[k], a.err[k], d);
    if (a.st[k] == KILN_OK) items[jobs[k].item].record = recs[jobs[k].item];
  }
  goto out;
drop: /* the items stay PENDING: not stored, not fetched */
  for (size_t k = 0; k < n_jobs; k++)
    if (jobs[k].req >= 0) unlink(jobs[k].tmp);
out:
  free(ins);
  free(each);
  free(which);
  free(a.st);
  free(a.err);
  return rc;
}

static kiln_status fetch_blobs(kiln_cache *c, kiln_remote_item *items, size_t n,
                               kiln_http_req *reqs, kiln_record *recs, kiln_remote_stats *d) {
  blob_job *jobs = calloc(n ? n : 1, sizeof *jobs);
  size_t n_jobs = 0;
  int n_reqs = 0;
  kiln_status rc;
  if (!jobs) return kiln_fail(KILN_ENOMEM, "out of memory");
  kiln_http_reqs_reset(reqs, n);
  for (size_t i = 0; i < n; i++) {
    blob_job *j = &jobs[n_jobs];
    kiln_http_req *q = &reqs[n_reqs];
    int fd;
    if (items[i].status != PENDING) continue;
    recs[i].log_digest[0] = '\0'; /* build logs stay where they were built */
    j->item = i;
    j->req = -1;
    if (kiln_blob_read(c->primary.dir, recs[i].digest, recs[i].size, NULL, NULL) == KILN_OK) {
      n_jobs++; /* the bytes are here already: no download */
      continue;
    }
    fd = kiln_path_join(j->tmp, sizeof j->tmp, c->tmp_dir, "remote-XXXXXX") == KILN_OK
             ? mkstemp(j->tmp)
             : -1;
    if (fd < 0) {
      kiln_fail_errno(KILN_EIO, errno, "create a temp file in %s", c->tmp_dir);
      item_fail(&items[i], KILN_EIO, kiln_last_error());
      kiln_log(KILN_LOG_WARN, "remote cache: %s", items[i].error);
      continue;
    }
    q->method = KILN_HTTP_GET;
    q->out_fd = fd;
    q->max_bytes = recs[i].size ? recs[i].size : 1;
    q->expect_digest = recs[i].digest;
    snprintf(q->path, sizeof q->path, "cas/%.64s", recs[i].digest);
    j->req = n_reqs++;
    n_jobs++;
  }
  kiln_http_run(c->remote->http, reqs, (size_t)n_reqs);
  rc = store_blobs(c, items, jobs, n_jobs, reqs, recs, d);
  free(jobs);
  return rc;
}

kiln_status kiln_remote_fetch(kiln_cache *c, kiln_remote_item *items, size_t n) {
  kiln_http_req *reqs = NULL;
  kiln_record *recs = NULL;
  kiln_remote_stats d;
  struct kiln_remote *r;
  size_t got = 0, missing = 0, failed = 0;
  int trips;
  double t0 = kiln_clock_ms();
  kiln_status rc = KILN_OK;
  if (!c || (n && !items)) return kiln_fail(KILN_EINVAL, "kiln_remote_fetch: NULL argument");
  r = c->remote;
  for (size_t i = 0; i < n; i++) {
    if (!items[i].key || !items[i].unit || !items[i].target || !kiln_is_hex64(items[i].key))
      return kiln_fail(KILN_EINVAL, "kiln_remote_fetch: item %zu has no valid key, unit or target",
                       i);
    item_fail(&items[i], KILN_ENOTFOUND,
              r ? "remote cache turned off for this process" : "no remote cache");
  }
  if (!r || kiln_http_breaker_open(r->http))
    return kiln_fail(KILN_ENOTFOUND, "%s",
                     r ? "remote cache turned off for this process" : "no remote cache configured");
  if (!n) return KILN_OK;
  memset(&d, 0, sizeof d);
  trips = kiln_http_breaker_trips(r->http);
  reqs = calloc(n, sizeof *reqs);
  recs = calloc(n, sizeof *recs);
  if (!reqs || !recs) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  fetch_records(c, items, n, reqs, recs, &d);
  KILN_CHECK(fetch_blobs(c, items, n, reqs, recs, &d));
  for (size_t i = 0; i < n; i++) {
    if (items[i].status == KILN_OK)
      got++;
    else if (items[i].status == KILN_ENOTFOUND)
      missing++;
    else
      failed++;
  }
  if (d.errors > 1)
    kiln_log(KILN_LOG_WARN, "remote cache %s: %llu requests failed in all", r->url,
             (unsigned long long)d.errors);
  kiln_log(KILN_LOG_INFO,
           "remote cache %s: %zu of %zu fetched, %zu not there, %zu failed (%.0f ms, "
           "%llu bytes)",
           r->url, got, n, missing, failed, kiln_clock_ms() - t0, (unsigned long long)d.bytes_down);
out:
  d.breaker_trips = (uint64_t)(kiln_http_breaker_trips(r->http) - trips);
  stats_add(c, &d);
  if (reqs) kiln_http_reqs_reset(reqs, n);
  free(reqs);
  free(recs);
  return rc;
}

/* ---- upload ---- */

typedef struct up_item {
  kiln_record rec;
  uint8_t *blob;
  size_t size;
  char *doc;
  size_t doc_len;
  int state; /* 0 needs upload, 1 on the remote, -1 failed */
} up_item;

/* The three rounds of an upload: what is there already, then blobs before
 * records, so a reader never finds a record whose bytes are missing (a crash
 * between leaves an orphan blob). */
typedef enum up_round { UP_HEAD_RECORD, UP_PUT_BLOB, UP_PUT_RECORD } up_round;

static void up_prepare(up_item *u, kiln_http_req *q, up_round round) {
  q->method = round == UP_HEAD_RECORD ? KILN_HTTP_HEAD : KILN_HTTP_PUT;
  q->body = round == UP_PUT_BLOB ? (const void *)u->blob : u->doc;
  q->body_len = round == UP_PUT_BLOB ? u->size : round == UP_PUT_RECORD ? u->doc_len : 0;
  if (round == UP_PUT_BLOB)
    snprintf(q->path, sizeof q->path, "cas/%s", u->rec.digest);
  else
    snprintf(q->path, sizeof q->path, "ac/%s", u->rec.key);
}

/* Runs one round for the items in state 0; a failed item goes to state -1
 * (the first failure is kept), a record found by HEAD to state 1. */
static void up_run(struct kiln_remote *r, up_item *u, size_t n, kiln_http_req *reqs, up_round round,
                   kiln_remote_stats *d, kiln_status *first, char *first_err, size_t cap) {
  size_t *idx = calloc(n ? n : 1, sizeof *idx), m = 0;
  if (!idx) {
    *first = kiln_fail(KILN_ENOMEM, "out of memory");
    return;
  }
  kiln_http_reqs_reset(reqs, n);
  for (size_t i = 0; i < n; i++) {
    if (u[i].state != 0) continue;
    reqs[m].out_fd = -1;
    reqs[m].max_bytes = RECORD_MAX;
    up_prepare(&u[i], &reqs[m], round);
    idx[m++] = i;
  }
  kiln_http_run(r->http, reqs, m);
  for (size_t j = 0; j < m; j++) {
    kiln_http_req *q = &reqs[j];
    up_item *it = &u[idx[j]];
    d->bytes_down += q->bytes_down;
    d->bytes_up += q->bytes_up;
    if (round == UP_HEAD_RECORD && q->rc == KILN_OK) it->state = 1; /* already there */
    if (q->rc == KILN_OK || (round == UP_HEAD_RECORD && q->rc == KILN_ENOTFOUND)) continue;
    it->state = -1;
    d->errors++;
    if (*first == KILN_OK) {
      *first = q->rc;
      snprintf(first_err, cap, "%s", q->error);
    }
  }
  free(idx);
}

kiln_status kiln_remote_upload(size_t *uploaded, kiln_cache *c, const char *const *keys, size_t n) {
  struct kiln_remote *r;
  up_item *u = NULL;
  kiln_http_req *reqs = NULL;
  kiln_remote_stats d;
  kiln_status rc = KILN_OK, first = KILN_OK;
  char first_err[256] = "";
  size_t done = 0, failed = 0;
  int trips = 0;
  if (uploaded) *uploaded = 0;
  if (!c || (n && !keys)) return kiln_fail(KILN_EINVAL, "kiln_remote_upload: NULL argument");
  r = c->remote;
  if (!r) return kiln_fail(KILN_EINVAL, "no remote cache configured (--remote or KILN_REMOTE_URL)");
  if (!r->upload)
    return kiln_fail(KILN_EINVAL, "uploads to %s are off (--upload or KILN_REMOTE_UPLOAD=1)",
                     r->url);
  if (kiln_http_breaker_open(r->http))
    return kiln_fail(KILN_EREMOTE, "remote cache %s turned off for this process", r->url);
  if (!n) return KILN_OK;
  memset(&d, 0, sizeof d);
  trips = kiln_http_breaker_trips(r->http);
  u = calloc(n, sizeof *u);
  reqs = calloc(n, sizeof *reqs);
  if (!u || !reqs) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    KILN_CHECK(kiln_cache_get(&u[i].rec, &u[i].blob, &u[i].size, c, keys[i]));
    u[i].rec.log_digest[0] = '\0'; /* logs are not uploaded */
    KILN_CHECK(kiln_remote_record_encode(&u[i].rec, r->key, r->key_len, &u[i].doc, &u[i].doc_len));
  }
  for (up_round round = UP_HEAD_RECORD; round <= UP_PUT_RECORD; round++)
    up_run(r, u, n, reqs, round, &d, &first, first_err, sizeof first_err);
  for (size_t i = 0; i < n; i++) {
    if (u[i].state == 0)
      done++;
    else if (u[i].state < 0)
      failed++;
  }
  d.uploads = done;
  if (uploaded) *uploaded = done;
  if (failed) {
    const char *hint = first == KILN_EPERM || first == KILN_EUNSUPPORTED
                           ? " (a read-only server? builds go on without write-back)"
                           : "";
    rc = kiln_fail(first == KILN_OK ? KILN_EREMOTE : first,
                   "remote cache %s: %zu of %zu uploads failed: %s%s", r->url, failed, n, first_err,
                   hint);
  }
  kiln_log(KILN_LOG_INFO, "remote cache %s: %zu uploaded, %zu there already, %zu failed", r->url,
           done, n - done - failed, failed);
out:
  d.breaker_trips = (uint64_t)(kiln_http_breaker_trips(r->http) - trips);
  stats_add(c, &d);
  if (reqs) kiln_http_reqs_reset(reqs, n);
  for (size_t i = 0; u && i < n; i++) {
    free(u[i].blob);
    free(u[i].doc);
  }
  free(u);
  free(reqs);
  return rc;
}

/* ---- check (kiln doctor) ---- */

kiln_status kiln_remote_check(kiln_remote_check_result *out, kiln_cache *c) {
  struct kiln_remote *r;
  kiln_http_req q;
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
  q.method = KILN_HTTP_GET;
  q.out_fd = -1;
  q.max_bytes = RECORD_MAX;
  /* a key no build produces: any answer but 401/403 shows the way is open */
  snprintf(q.path, sizeof q.path, "ac/%064d", 0);
  t0 = kiln_clock_ms();
  kiln_http_run(r->http, &q, 1);
  out->ms = kiln_clock_ms() - t0;
  out->http_status = q.status;
  out->reachable = q.status != 0;
  out->authorized = out->reachable && q.status != 401 && q.status != 403;
  if (q.error[0])
    snprintf(out->detail, sizeof out->detail, "%s", q.error);
  else
    snprintf(out->detail, sizeof out->detail, "HTTP %ld", q.status);
  kiln_http_reqs_reset(&q, 1);
  return KILN_OK;
}
