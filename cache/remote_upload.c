/* Uploading to the remote cache (kiln_remote_upload, include/kiln/remote.h):
 * three rounds of parallel requests: HEAD each record (one already there is
 * skipped), then PUT the blobs, then PUT the records (docs/remote-cache.md). */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, free */
#include <string.h> /* memset */

#include "cache/remote.h"
#include "cache/store.h"
#include "common/error.h"
#include "common/logging.h"

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
    reqs[m].max_bytes = KILN_REMOTE_RECORD_MAX;
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
  kiln_remote_stats_add(c, &d);
  if (reqs) kiln_http_reqs_reset(reqs, n);
  for (size_t i = 0; u && i < n; i++) {
    free(u[i].blob);
    free(u[i].doc);
  }
  free(u);
  free(reqs);
  return rc;
}
