/* Fetching from the remote cache (kiln_remote_fetch, include/kiln/remote.h):
 * each record, checked and signature-verified as it arrives, then its blob
 * (its GET chained to the record's in the same batch, kiln_remote_run_then:
 * no round of records before the first blob), streamed into a temp file and
 * verified as it arrives; then the blobs moved into the store, the records
 * last (docs/remote-cache.md). */
#include <errno.h>   /* errno */
#include <pthread.h> /* the adopting threads */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* calloc, free, mkstemp */
#include <string.h>  /* memset, strcmp */
#include <unistd.h>  /* close, unlink */

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

/* Phase 2's jobs: the blobs of the records that passed. */
typedef struct blob_job {
  size_t item;
  int req; /* index into the blob requests, or -1: the bytes are here already */
  char tmp[KILN_PATH_MAX];
} blob_job;

/* One fetch: the records' GETs (reqs[i] for items[i]) and the blobs' GETs
 * chained to them (blobs[i]). */
typedef struct fetch_run {
  kiln_cache *c;
  kiln_remote_item *items;
  size_t n;
  kiln_remote_req *reqs, *blobs;
  kiln_record *recs; /* recs[i] valid where items[i] is PENDING or OK */
  blob_job *jobs;
  size_t n_jobs;
  size_t *job_of;  /* items[i]'s job */
  kiln_status *st; /* each job's storing */
  char (*err)[256];
  kiln_remote_stats *d;
  /* blobs to move into the store as they arrive: jobs' indices, for the
   * adopting threads (their fsyncs overlap the downloads still under way) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t *queue, head, tail;
  int closed;
} fetch_run;

/* Record i's answer, checked: the item PENDING (the record passed) or failed. */
static void settle_record(fetch_run *F, size_t i) {
  struct kiln_remote *r = F->c->remote;
  kiln_remote_item *it = &F->items[i];
  kiln_remote_req *q = &F->reqs[i];
  kiln_record *rec = &F->recs[i];
  kiln_remote_stats *d = F->d;
  kiln_status st;
  d->bytes_down += q->bytes_down;
  if (q->rc == KILN_ENOTFOUND) {
    d->misses++;
    item_fail(it, KILN_ENOTFOUND, "not on the remote");
    return;
  }
  if (q->rc == KILN_ECORRUPT) {
    item_fail(it, KILN_ECORRUPT, q->error); /* e.g. larger than any record */
  } else if (q->rc != KILN_OK) {
    item_fail(it, q->rc, q->error);
    count_error(d, r->url, q->error);
    return;
  } else if ((st = kiln_remote_record_decode((const char *)q->data, q->len, it->key, r->key,
                                             r->key_len, rec)) != KILN_OK) {
    char msg[256]; /* named by its path: ac/<the whole key> */
    snprintf(msg, sizeof msg, "ac/%.64s: %s", it->key, kiln_last_error());
    item_fail(it, st == KILN_EPERM ? KILN_EPERM : KILN_ECORRUPT, msg);
  } else if (strcmp(rec->unit, it->unit) != 0 || strcmp(rec->target, it->target) != 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "the record under %.12s... describes %s %s, not %s %s", it->key,
             rec->unit, rec->target, it->unit, it->target);
    item_fail(it, KILN_ECORRUPT, msg);
  } else {
    /* the record passed; OK only once its blob and record are stored */
    item_fail(it, PENDING, "the fetch stopped before its blob was stored");
    return;
  }
  d->rejected++;
  kiln_log(KILN_LOG_WARN, "remote cache %s: rejected the record of %s %s: %s", r->url, it->unit,
           it->target, it->error);
}

/* Chained to record i's GET (kiln_remote_then): the record checked, then
 * its blob's GET into a temp file, unless the bytes are here already. */
static kiln_remote_req *blob_for(void *user, size_t i) {
  fetch_run *F = user;
  kiln_remote_item *it;
  kiln_record *rec;
  kiln_remote_req *q;
  blob_job *j;
  int fd;
  if (i >= F->n) { /* blob i - n is down (or failed): to the adopting threads */
    pthread_mutex_lock(&F->mu);
    F->queue[F->tail++] = F->job_of[i - F->n];
    pthread_cond_signal(&F->cv);
    pthread_mutex_unlock(&F->mu);
    return NULL;
  }
  it = &F->items[i];
  rec = &F->recs[i];
  q = &F->blobs[i];
  settle_record(F, i);
  free(F->reqs[i].data); /* the document is decoded: its bytes are not needed again */
  F->reqs[i].data = NULL;
  if (it->status != PENDING) return NULL;
  rec->log_digest[0] = '\0'; /* build logs stay where they were built */
  j = &F->jobs[F->n_jobs];
  j->item = i;
  j->req = -1;
  F->job_of[i] = F->n_jobs;
  F->st[F->n_jobs] = KILN_OK;
  if (kiln_blob_read(F->c->primary.dir, rec->digest, rec->size, NULL, NULL) == KILN_OK) {
    F->n_jobs++; /* the bytes are here already: no download */
    return NULL;
  }
  fd = kiln_path_join(j->tmp, sizeof j->tmp, F->c->tmp_dir, "remote-XXXXXX") == KILN_OK
           ? mkstemp(j->tmp)
           : -1;
  if (fd < 0) {
    kiln_fail_errno(KILN_EIO, errno, "create a temp file in %s", F->c->tmp_dir);
    item_fail(it, KILN_EIO, kiln_last_error());
    kiln_log(KILN_LOG_WARN, "remote cache: %s", it->error);
    return NULL;
  }
  memset(q, 0, sizeof *q);
  q->method = KILN_REMOTE_GET;
  q->out_fd = fd;
  q->max_bytes = rec->size ? rec->size : 1;
  q->expect_digest = rec->digest;
  snprintf(q->path, sizeof q->path, "cas/%.64s", rec->digest);
  j->req = (int)i;
  F->st[F->n_jobs] = PENDING; /* until adopt() has stored it */
  snprintf(F->err[F->n_jobs], sizeof F->err[0], "the fetch stopped before its blob was stored");
  F->n_jobs++;
  return q;
}

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

/* Job k's blob into the store: fsync, rename, fsync of its folder (its
 * record is stored after every blob, in one transaction). */
static void adopt(fetch_run *F, size_t k) {
  blob_job *j = &F->jobs[k];
  kiln_remote_req *q = &F->blobs[j->item];
  close(q->out_fd);
  q->out_fd = -1;
  if (q->rc != KILN_OK) {
    unlink(j->tmp);
    F->st[k] = q->rc;
    return;
  }
  F->st[k] = kiln_blob_adopt(F->c, F->recs[j->item].digest, j->tmp);
  if (F->st[k] != KILN_OK) snprintf(F->err[k], sizeof F->err[k], "%s", kiln_last_error());
}

/* An adopting thread: the queue's jobs until it is closed and empty. */
static void adopt_worker(size_t w, void *user) {
  fetch_run *F = user;
  (void)w;
  for (;;) {
    size_t k;
    pthread_mutex_lock(&F->mu);
    while (F->head == F->tail && !F->closed)
      pthread_cond_wait(&F->cv, &F->mu);
    if (F->head == F->tail) {
      pthread_mutex_unlock(&F->mu);
      return;
    }
    k = F->queue[F->head++];
    pthread_mutex_unlock(&F->mu);
    adopt(F, k);
  }
}

#define ADOPTERS 8 /* fsyncs at once */

static void *adopters_main(void *user) {
  kiln_pool_run(ADOPTERS, ADOPTERS, adopt_worker, user);
  return NULL;
}

/* Every record whose blob was stored, in one transaction; then each item
 * settled. */
static void store_records(fetch_run *F) {
  kiln_cache *c = F->c;
  size_t n_jobs = F->n_jobs, m = 0;
  kiln_record **ins = calloc(n_jobs ? n_jobs : 1, sizeof *ins);
  kiln_status *each = calloc(n_jobs ? n_jobs : 1, sizeof *each);
  size_t *which = calloc(n_jobs ? n_jobs : 1, sizeof *which);
  if (!ins || !each || !which) {
    for (size_t k = 0; k < n_jobs; k++)
      if (F->st[k] == KILN_OK) {
        F->st[k] = KILN_ENOMEM; /* the blob stays: an orphan gc removes */
        snprintf(F->err[k], sizeof F->err[k], "out of memory storing its record");
      }
  }
  for (size_t k = 0; ins && each && which && k < n_jobs; k++) {
    if (F->st[k] != KILN_OK) continue;
    which[m] = k;
    ins[m++] = &F->recs[F->jobs[k].item];
  }
  if (m && kiln_records_insert(c, ins, m, each) != KILN_OK)
    kiln_log(KILN_LOG_WARN, "remote cache: storing records failed: %s", kiln_last_error());
  for (size_t i = 0; i < m; i++) {
    F->st[which[i]] = each[i];
    if (each[i] != KILN_OK)
      snprintf(F->err[which[i]], sizeof F->err[which[i]], "%s",
               each[i] == KILN_ENOTFOUND ? "its blob disappeared before the record was stored"
                                         : kiln_last_error());
  }
  for (size_t k = 0; k < n_jobs; k++) {
    blob_job *j = &F->jobs[k];
    kiln_remote_req *q = j->req >= 0 ? &F->blobs[j->item] : NULL;
    if (q) F->d->bytes_down += q->bytes_down;
    settle_blob(c->remote->url, &F->items[j->item], q, F->st[k], F->err[k], F->d);
    if (F->st[k] == KILN_OK) F->items[j->item].record = F->recs[j->item];
  }
  free(ins);
  free(each);
  free(which);
}

/* The records' GETs, each blob's chained to its record's, each blob moved
 * into the store as it arrives, then the records. */
static void fetch_all(fetch_run *F) {
  pthread_t adopters;
  int threaded;
  for (size_t i = 0; i < F->n; i++) {
    kiln_remote_req *q = &F->reqs[i];
    q->method = KILN_REMOTE_GET;
    q->out_fd = -1;
    q->max_bytes = KILN_REMOTE_RECORD_MAX;
    snprintf(q->path, sizeof q->path, "ac/%.64s", F->items[i].key);
    F->blobs[i].out_fd = -1;
  }
  pthread_mutex_init(&F->mu, NULL);
  pthread_cond_init(&F->cv, NULL);
  threaded = pthread_create(&adopters, NULL, adopters_main, F) == 0;
  kiln_remote_run_then(F->c->remote, F->reqs, F->n, blob_for, F);
  pthread_mutex_lock(&F->mu);
  F->closed = 1;
  pthread_cond_broadcast(&F->cv);
  pthread_mutex_unlock(&F->mu);
  if (threaded) pthread_join(adopters, NULL);
  adopt_worker(0, F); /* whatever no thread took (none could start) */
  pthread_cond_destroy(&F->cv);
  pthread_mutex_destroy(&F->mu);
  store_records(F);
}

kiln_status kiln_remote_fetch(kiln_cache *c, kiln_remote_item *items, size_t n) {
  fetch_run F;
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
  memset(&F, 0, sizeof F);
  F.c = c;
  F.items = items;
  F.n = n;
  F.d = &d;
  F.reqs = calloc(2 * n, sizeof *F.reqs); /* the records', then the blobs' */
  F.blobs = F.reqs ? F.reqs + n : NULL;
  F.recs = calloc(n, sizeof *F.recs);
  F.jobs = calloc(n, sizeof *F.jobs);
  F.job_of = calloc(n, sizeof *F.job_of);
  F.st = calloc(n, sizeof *F.st);
  F.err = calloc(n, sizeof *F.err);
  F.queue = calloc(n, sizeof *F.queue);
  if (!F.reqs || !F.recs || !F.jobs || !F.job_of || !F.st || !F.err || !F.queue) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  fetch_all(&F);
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
  if (F.reqs) kiln_remote_reqs_reset(F.reqs, 2 * n);
  free(F.reqs);
  free(F.recs);
  free(F.jobs);
  free(F.job_of);
  free(F.st);
  free(F.err);
  free(F.queue);
  return rc;
}
