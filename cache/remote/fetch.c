/* Fetching from the remote cache (kiln_remote_fetch, include/kiln/remote.h):
 * the records first, checked and signature-verified, then the blobs of the
 * records that passed, streamed into temp files and verified as they arrive,
 * then moved into the store, record last (docs/remote-cache.md). */
#include <errno.h>  /* errno */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, free, mkstemp */
#include <string.h> /* memset, strcmp */
#include <unistd.h> /* close, unlink */

#include "cache/remote/remote.h"
#include "cache/store.h"
#include "common/clock.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/logging.h"
#include "common/pool.h"

#define PENDING KILN_EINTERNAL /* an item between its record and its blob */

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
static void fetch_records(kiln_cache *c, kiln_remote_item *items, size_t n, kiln_remote_req *reqs,
                          kiln_record *recs, kiln_remote_stats *d) {
  struct kiln_remote *r = c->remote;
  for (size_t i = 0; i < n; i++) {
    reqs[i].method = KILN_REMOTE_GET;
    reqs[i].out_fd = -1;
    reqs[i].max_bytes = KILN_REMOTE_RECORD_MAX;
    snprintf(reqs[i].path, sizeof reqs[i].path, "ac/%.64s", items[i].key);
  }
  kiln_remote_run(r, reqs, n);
  for (size_t i = 0; i < n; i++) {
    kiln_remote_item *it = &items[i];
    kiln_remote_req *q = &reqs[i];
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
      char msg[256]; /* named by its path: ac/<the whole key> */
      snprintf(msg, sizeof msg, "ac/%.64s: %s", it->key, kiln_last_error());
      item_fail(it, st == KILN_EPERM ? KILN_EPERM : KILN_ECORRUPT, msg);
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
static void settle_blob(const char *url, kiln_remote_item *it, kiln_remote_req *q, kiln_status st,
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
  kiln_remote_req *reqs;
  kiln_record *recs;
  kiln_status *st;
  char (*err)[256];
} adopt_ctx;

/* On the pool: fsync, rename and fsync-dir overlap across blobs. */
static void adopt_task(size_t k, void *user) {
  adopt_ctx *a = user;
  blob_job *j = &a->jobs[k];
  kiln_remote_req *q = j->req >= 0 ? &a->reqs[j->req] : NULL;
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
                               size_t n_jobs, kiln_remote_req *reqs, kiln_record *recs,
                               kiln_remote_stats *d) {
  adopt_ctx a = {c, jobs, reqs, recs, NULL, NULL};
  kiln_record **ins = calloc(n_jobs ? n_jobs : 1, sizeof *ins);
  kiln_status *each = calloc(n_jobs ? n_jobs : 1, sizeof *each);
  size_t *which = calloc(n_jobs ? n_jobs : 1, sizeof *which), m = 0;
  kiln_status rc = KILN_OK;
  a.st = calloc(n_jobs ? n_jobs : 1, sizeof *a.st);
  a.err = calloc(n_jobs ? n_jobs : 1, sizeof *a.err);
  for (size_t k = 0; k < n_jobs; k++) {
    kiln_remote_req *q = jobs[k].req >= 0 ? &reqs[jobs[k].req] : NULL;
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
                               kiln_remote_req *reqs, kiln_record *recs, kiln_remote_stats *d) {
  blob_job *jobs = calloc(n ? n : 1, sizeof *jobs);
  size_t n_jobs = 0;
  int n_reqs = 0;
  kiln_status rc;
  if (!jobs) return kiln_fail(KILN_ENOMEM, "out of memory");
  kiln_remote_reqs_reset(reqs, n);
  for (size_t i = 0; i < n; i++) {
    blob_job *j = &jobs[n_jobs];
    kiln_remote_req *q = &reqs[n_reqs];
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
    q->method = KILN_REMOTE_GET;
    q->out_fd = fd;
    q->max_bytes = recs[i].size ? recs[i].size : 1;
    q->expect_digest = recs[i].digest;
    snprintf(q->path, sizeof q->path, "cas/%.64s", recs[i].digest);
    j->req = n_reqs++;
    n_jobs++;
  }
  kiln_remote_run(c->remote, reqs, (size_t)n_reqs);
  rc = store_blobs(c, items, jobs, n_jobs, reqs, recs, d);
  free(jobs);
  return rc;
}

kiln_status kiln_remote_fetch(kiln_cache *c, kiln_remote_item *items, size_t n) {
  kiln_remote_req *reqs = NULL;
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
  if (!r || kiln_remote_breaker_open(r))
    return kiln_fail(KILN_ENOTFOUND, "%s",
                     r ? "remote cache turned off for this process" : "no remote cache configured");
  if (!n) return KILN_OK;
  memset(&d, 0, sizeof d);
  trips = kiln_remote_breaker_trips(r);
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
  d.breaker_trips = (uint64_t)(kiln_remote_breaker_trips(r) - trips);
  kiln_remote_stats_add(c, &d);
  if (reqs) kiln_remote_reqs_reset(reqs, n);
  free(reqs);
  free(recs);
  return rc;
}
