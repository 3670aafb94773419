/* Uploading to the remote cache (kiln_remote_upload, include/kiln/remote.h):
 * three rounds of parallel requests: HEAD each record (one already there is
 * skipped), then PUT the blobs, then PUT the records (docs/remote-cache.md).
 * Until this process has seen its collections exist, the first PUT of a
 * round goes alone: a WebDAV server without them answers 409 Conflict (RFC
 * 4918) or, like nginx without create_full_put_path, 500; kiln then makes them
 * with MKCOL (parents first; each once per process, remembered in a table
 * every thread shares) and sends the round: the failed PUT is retried once. */
#include <pthread.h> /* the table of known collections */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* calloc, free */
#include <string.h>  /* memset, strcmp */
#include <unistd.h>  /* getpid */

#include "cache/remote/remote.h"
#include "cache/store.h"
#include "common/clock.h" /* kiln_host_name */
#include "common/error.h"
#include "common/logging.h"

/* The deepest base path whose missing parents kiln makes (MKCOL). */
#define KILN_REMOTE_MAX_DEPTH 8

typedef struct up_item {
  kiln_record rec;
  uint8_t *blob;
  size_t size;
  char *doc;
  size_t doc_len;
  int state;   /* 0 needs upload, 1 on the remote, -1 failed */
  int piloted; /* its PUT of this round went alone, first, and landed */
} up_item;

/* The three rounds of an upload: what is there already, then blobs before
 * records, so a reader never finds a record whose bytes are missing (a crash
 * between leaves an orphan blob). */
typedef enum up_round { UP_HEAD_RECORD, UP_PUT_BLOB, UP_PUT_RECORD } up_round;

static void up_prepare(up_item *u, kiln_remote_req *q, up_round round) {
  q->method = round == UP_HEAD_RECORD ? KILN_REMOTE_HEAD : KILN_REMOTE_PUT;
  q->body = round == UP_PUT_BLOB ? (const void *)u->blob : u->doc;
  q->body_len = round == UP_PUT_BLOB ? u->size : round == UP_PUT_RECORD ? u->doc_len : 0;
  if (round == UP_PUT_BLOB)
    snprintf(q->path, sizeof q->path, "cas/%s", u->rec.digest);
  else
    snprintf(q->path, sizeof q->path, "ac/%s", u->rec.key);
}

/* Runs one round for the items in state 0; a failed item goes to state -1
 * (the first failure is kept), a record found by HEAD to state 1. */
static void up_run(struct kiln_remote *r, up_item *u, size_t n, kiln_remote_req *reqs,
                   up_round round, kiln_remote_stats *d, kiln_status *first, char *first_err,
                   size_t cap) {
  size_t *idx = calloc(n ? n : 1, sizeof *idx), m = 0;
  if (!idx) {
    *first = kiln_fail(KILN_ENOMEM, "out of memory");
    return;
  }
  kiln_remote_reqs_reset(reqs, n);
  for (size_t i = 0; i < n; i++) {
    if (u[i].state != 0 || u[i].piloted) continue;
    reqs[m].out_fd = -1;
    reqs[m].max_bytes = KILN_REMOTE_RECORD_MAX;
    up_prepare(&u[i], &reqs[m], round);
    idx[m++] = i;
  }
  kiln_remote_run(r, reqs, m);
  for (size_t j = 0; j < m; j++) {
    kiln_remote_req *q = &reqs[j];
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

/* How many path components the base URL has: 2 for http://h:p/team/kiln. */
static int base_depth(const char *url) {
  const char *p = strstr(url, "://");
  int depth = 0;
  p = p ? strchr(p + 3, '/') : NULL;
  for (; p && *p; p++)
    if (*p != '/' && (p[-1] == '/')) depth++;
  return depth;
}

/* Collections this process has seen exist (201 made, 405 there already), by
 * absolute URL. One table for every cache handle and thread, guarded by a
 * mutex, so each collection is made once per process; a full table forgets
 * its oldest entry (that collection is then MKCOLed again: a 405, harmless). */
#define KILN_REMOTE_KNOWN_MAX 64
#define KILN_REMOTE_KNOWN_LEN 2304 /* a base URL (2048) and a path (160), with room */
static pthread_mutex_t known_mu = PTHREAD_MUTEX_INITIALIZER;
static char known_urls[KILN_REMOTE_KNOWN_MAX][KILN_REMOTE_KNOWN_LEN];
static size_t known_n, known_next;

static int known_has(const char *url) {
  int hit = 0;
  pthread_mutex_lock(&known_mu);
  for (size_t i = 0; i < known_n && !hit; i++)
    hit = strcmp(known_urls[i], url) == 0;
  pthread_mutex_unlock(&known_mu);
  return hit;
}

static void known_add(const char *url) {
  pthread_mutex_lock(&known_mu);
  int hit = 0;
  for (size_t i = 0; i < known_n && !hit; i++)
    hit = strcmp(known_urls[i], url) == 0;
  if (!hit) {
    snprintf(known_urls[known_next], KILN_REMOTE_KNOWN_LEN, "%s", url);
    known_next = (known_next + 1) % KILN_REMOTE_KNOWN_MAX;
    if (known_n < KILN_REMOTE_KNOWN_MAX) known_n++;
  }
  pthread_mutex_unlock(&known_mu);
}

/* The absolute URL of the collection at rel ("../../", "", "ac/") under base:
 * each "../" drops base's last path component, as libcurl's dot-segment
 * removal does. */
static void collection_url(char *out, size_t cap, const char *base, const char *rel) {
  size_t len = strlen(base);
  while (strncmp(rel, "../", 3) == 0) {
    rel += 3;
    while (len > 0 && base[len - 1] != '/')
      len--;
    if (len > 0) len--;
  }
  snprintf(out, cap, "%.*s/%s", (int)len, base, rel);
}

/* The collections an upload needs, parents first: the base URL's own path
 * ("../" reaches a parent), then ac/ and cas/ in it. Returns how many, and in
 * *n_base how many of them are the base path's. */
#define KILN_REMOTE_REL_LEN (3 * KILN_REMOTE_MAX_DEPTH + 1)
static int collection_paths(char paths[][KILN_REMOTE_REL_LEN], const char *url, int *n_base) {
  int depth = base_depth(url), n = 0;
  if (depth > KILN_REMOTE_MAX_DEPTH) depth = KILN_REMOTE_MAX_DEPTH; /* deeper ones must exist */
  for (int up = depth - 1; up >= 0; up--, n++) {                    /* "../../", "../", "" */
    size_t len = 0;
    paths[n][0] = '\0';
    for (int k = 0; k < up; k++)
      len += (size_t)snprintf(paths[n] + len, KILN_REMOTE_REL_LEN - len, "../");
  }
  *n_base = n;
  snprintf(paths[n++], KILN_REMOTE_REL_LEN, "ac/");
  snprintf(paths[n++], KILN_REMOTE_REL_LEN, "cas/");
  return n;
}

/* 1 when this process has seen every collection r's uploads need. */
static int collections_known(const struct kiln_remote *r) {
  char paths[KILN_REMOTE_MAX_DEPTH + 2][KILN_REMOTE_REL_LEN], url[KILN_REMOTE_KNOWN_LEN];
  int n_base, n = collection_paths(paths, r->url, &n_base);
  for (int i = 0; i < n; i++) {
    collection_url(url, sizeof url, r->url, paths[i]);
    if (!known_has(url)) return 0;
  }
  return 1;
}

/* A PUT at path ("ac/..." or "cas/...") landed: its collection and the base
 * path's exist. */
static void collections_seen(const struct kiln_remote *r, const char *path) {
  char paths[KILN_REMOTE_MAX_DEPTH + 2][KILN_REMOTE_REL_LEN], url[KILN_REMOTE_KNOWN_LEN];
  int n_base, n = collection_paths(paths, r->url, &n_base);
  for (int i = 0; i < n; i++) {
    if (i >= n_base && strncmp(path, paths[i], strlen(paths[i])) != 0) continue;
    collection_url(url, sizeof url, r->url, paths[i]);
    known_add(url);
  }
}

/* MKCOL, parents first, of the collections not known to exist (201 made, 405
 * there already: RFC 4918), each remembered once it does. KILN_OK when all
 * exist; else the first failure, with the request's one-line error. */
static kiln_status make_collections(struct kiln_remote *r, kiln_remote_stats *d) {
  char paths[KILN_REMOTE_MAX_DEPTH + 2][KILN_REMOTE_REL_LEN], url[KILN_REMOTE_KNOWN_LEN];
  kiln_remote_req reqs[KILN_REMOTE_MAX_DEPTH + 2];
  int n_base, all = collection_paths(paths, r->url, &n_base), n = 0, n_parents = 0;
  kiln_status rc = KILN_OK;
  memset(reqs, 0, sizeof reqs);
  for (int i = 0; i < all; i++) {
    collection_url(url, sizeof url, r->url, paths[i]);
    if (known_has(url)) continue;
    snprintf(reqs[n].path, sizeof reqs[n].path, "%.*s", KILN_REMOTE_REL_LEN - 1, paths[i]);
    reqs[n].method = KILN_REMOTE_MKCOL;
    reqs[n].out_fd = -1;
    reqs[n].max_bytes = KILN_REMOTE_RECORD_MAX;
    if (i < n_base) n_parents++;
    n++;
  }
  /* one at a time down the base path, then ac/ and cas/ together */
  for (int lo = 0; lo < n && rc == KILN_OK;) {
    int hi = lo < n_parents ? lo + 1 : n;
    kiln_remote_run(r, reqs + lo, (size_t)(hi - lo));
    for (int i = lo; i < hi; i++) {
      d->bytes_down += reqs[i].bytes_down;
      d->bytes_up += reqs[i].bytes_up;
      if (reqs[i].rc == KILN_OK || reqs[i].status == 405) {
        collection_url(url, sizeof url, r->url, reqs[i].path);
        known_add(url);
      } else if (rc == KILN_OK) {
        rc =
            kiln_fail(reqs[i].rc == KILN_OK ? KILN_EREMOTE : reqs[i].rc,
                      "remote cache %s: making its collections (MKCOL): %s", r->url, reqs[i].error);
      }
    }
    lo = hi;
  }
  kiln_remote_reqs_reset(reqs, (size_t)n);
  if (rc == KILN_OK && n)
    kiln_log(KILN_LOG_INFO, "remote cache %s: made its collections ac/ and cas/ (MKCOL)", r->url);
  return rc;
}

/* What a server without the collections answers a PUT: 409 (RFC 4918), or
 * 500 (nginx without create_full_put_path). Collections are WebDAV's: the
 * file:// backend makes ac/ and cas/ itself, and its 409 and 500 mean
 * something else (a directory where an object belongs, an I/O error). */
static int missing_collection(const struct kiln_remote *r, const kiln_remote_req *q) {
  return r->be == &kiln_remote_http && (q->status == 409 || q->status == 500);
}

/* Until the collections are known to exist: the round's first PUT, alone.
 * If the server says a collection is missing, they are made (MKCOL) and the
 * item is sent again with the round. */
static void pilot(struct kiln_remote *r, up_item *u, size_t n, kiln_remote_req *q, up_round round,
                  kiln_remote_stats *d) {
  size_t i = 0;
  for (size_t k = 0; k < n; k++)
    u[k].piloted = 0;
  while (i < n && u[i].state != 0)
    i++;
  if (round == UP_HEAD_RECORD || i == n || collections_known(r)) return;
  kiln_remote_reqs_reset(q, 1);
  q->out_fd = -1;
  q->max_bytes = KILN_REMOTE_RECORD_MAX;
  up_prepare(&u[i], q, round);
  kiln_remote_run(r, q, 1);
  d->bytes_down += q->bytes_down;
  d->bytes_up += q->bytes_up;
  if (q->rc == KILN_OK) {
    u[i].piloted = 1;
    collections_seen(r, q->path); /* a server that makes them itself: no more pilots */
  } else if (missing_collection(r, q) && make_collections(r, d) != KILN_OK)
    kiln_log(KILN_LOG_WARN, "%s", kiln_last_error()); /* the round's PUTs will say what fails */
  kiln_remote_reqs_reset(q, 1);
}

kiln_status kiln_remote_upload(size_t *uploaded, kiln_cache *c, const char *const *keys, size_t n) {
  struct kiln_remote *r;
  up_item *u = NULL;
  kiln_remote_req *reqs = NULL;
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
  if (kiln_remote_breaker_open(r))
    return kiln_fail(KILN_EREMOTE, "remote cache %s turned off for this process", r->url);
  if (!n) return KILN_OK;
  memset(&d, 0, sizeof d);
  trips = kiln_remote_breaker_trips(r);
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
  for (up_round round = UP_HEAD_RECORD; round <= UP_PUT_RECORD; round++) {
    pilot(r, u, n, reqs, round, &d);
    up_run(r, u, n, reqs, round, &d, &first, first_err, sizeof first_err);
  }
  for (size_t i = 0; i < n; i++) {
    if (u[i].state == 0)
      done++;
    else if (u[i].state < 0)
      failed++;
  }
  d.uploads = done;
  if (uploaded) *uploaded = done;
  if (failed) {
    /* (an S3 refusal says its likely cause itself: cache/remote/s3.c) */
    const char *hint =
        (first == KILN_EPERM || first == KILN_EUNSUPPORTED) && strcmp(r->be->scheme, "s3") != 0
            ? " (a read-only server? builds go on without write-back)"
            : "";
    rc = kiln_fail(first == KILN_OK ? KILN_EREMOTE : first,
                   "remote cache %s: %zu of %zu uploads failed: %s%s", r->url, failed, n, first_err,
                   hint);
    /* Refused (403) with nothing landing: a remote this process may read but
     * not write (a read-only bucket, token or directory). Uploads go off for
     * the process; reads go on (the breaker counts none of this). */
    if (first == KILN_EPERM && !done && r->upload) {
      r->upload = 0;
      kiln_log(KILN_LOG_WARN,
               "remote cache %s refuses uploads (%s): uploads are off for this process, "
               "fetches go on",
               r->url, first_err);
    }
  }
  kiln_log(KILN_LOG_INFO, "remote cache %s: %zu uploaded, %zu there already, %zu failed", r->url,
           done, n - done - failed, failed);
out:
  d.breaker_trips = (uint64_t)(kiln_remote_breaker_trips(r) - trips);
  kiln_remote_stats_add(c, &d);
  if (reqs) kiln_remote_reqs_reset(reqs, n);
  for (size_t i = 0; u && i < n; i++) {
    free(u[i].blob);
    free(u[i].doc);
  }
  free(u);
  free(reqs);
  return rc;
}

/* One request; a missing collection's answer is met by making them, once. */
static kiln_status probe_request(struct kiln_remote *r, kiln_remote_req *q, kiln_remote_stats *d) {
  kiln_remote_run(r, q, 1);
  if (missing_collection(r, q) && !collections_known(r)) {
    kiln_status mk = make_collections(r, d);
    if (mk != KILN_OK) return mk;
    kiln_remote_reqs_reset(q, 1);
    kiln_remote_run(r, q, 1);
  }
  if (q->rc != KILN_OK) return kiln_fail(q->rc, "remote cache %s: %s", r->url, q->error);
  return KILN_OK;
}

kiln_status kiln_remote_probe_upload(kiln_cache *c) {
  static const char body[] = "kiln doctor: a test upload, deleted at once\n";
  struct kiln_remote *r = c ? c->remote : NULL;
  kiln_remote_req q;
  kiln_remote_stats d;
  kiln_status rc;
  char host[256];
  if (!r || !r->upload) return kiln_fail(KILN_EINVAL, "kiln_remote_probe_upload: uploads are off");
  memset(&q, 0, sizeof q);
  memset(&d, 0, sizeof d);
  kiln_host_name(host, sizeof host);
  for (char *h = host; *h; h++) /* the object's name goes into a URL as is */
    if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9') ||
          *h == '.' || *h == '-'))
      *h = '-';
  q.method = KILN_REMOTE_PUT;
  q.out_fd = -1;
  q.body = body;
  q.body_len = sizeof body - 1;
  snprintf(q.path, sizeof q.path, "cas/kiln-doctor-%.64s-%ld", host, (long)getpid());
  rc = probe_request(r, &q, &d);
  if (rc == KILN_OK) {
    kiln_remote_reqs_reset(&q, 1);
    q.method = KILN_REMOTE_DELETE;
    q.body = NULL;
    q.body_len = 0;
    kiln_remote_run(r, &q, 1);
    if (q.rc != KILN_OK && q.status != 404) /* landed; only the clean-up failed */
      kiln_log(KILN_LOG_WARN, "remote cache %s: could not delete the test object: %s", r->url,
               q.error);
  }
  kiln_remote_reqs_reset(&q, 1);
  return rc;
}
