/* kiln_cache_export (include/kiln/cache.h): a cache as one tar file
 * (cache/archive.h; the format is docs/cache-format.md, "Archives"). */
#include <errno.h>    /* errno */
#include <fcntl.h>    /* open */
#include <fnmatch.h>  /* the --kernels glob */
#include <jansson.h>  /* the manifest */
#include <stdio.h>    /* snprintf, rename */
#include <stdlib.h>   /* calloc, free, mkstemp, qsort */
#include <string.h>   /* strcmp */
#include <sys/stat.h> /* fchmod */
#include <unistd.h>   /* close, fsync, getpid, unlink */

#include "cache/archive.h"
#include "cache/remote/remote.h" /* kiln_remote_record_encode: a record is the remote's document */
#include "cache/store.h"
#include "cache/transfer.h"
#include "common/error.h"
#include "common/params.h" /* KILN_DEFINE_OPTIONS_INIT */
#include "common/pool.h"
#include "kiln/target.h"
#include "kiln/version.h"

KILN_DEFINE_OPTIONS_INIT(kiln_cache_export_options, KILN_CACHE_EXPORT_OPTIONS_VERSION,
                         KILN_CACHE_EXPORT_OPTIONS_INIT)

static int by_key(const void *a, const void *b) {
  return strcmp(((const kiln_record *)a)->key, ((const kiln_record *)b)->key);
}
static int by_digest(const void *a, const void *b) {
  return strcmp(((const kiln_record *)a)->digest, ((const kiln_record *)b)->digest);
}

/* The records to export: matching opts, one per key (the first layer's),
 * ordered by key. Moves them to the front of recs; returns how many. */
static size_t select_records(kiln_record *recs, size_t n, const kiln_target *t, size_t nt,
                             const char *glob) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    int want = !glob || fnmatch(glob, recs[i].unit, 0) == 0;
    if (want && nt) {
      want = 0;
      for (size_t k = 0; k < nt && !want; k++) {
        char name[16];
        want = strcmp(kiln_target_name(&t[k], name), recs[i].target) == 0;
      }
    }
    for (size_t j = 0; want && j < m; j++)
      want = strcmp(recs[j].key, recs[i].key) != 0; /* a lower layer's copy of a key */
    if (want) recs[m++] = recs[i];
  }
  qsort(recs, m, sizeof *recs, by_key);
  return m;
}

static const char *layer_dir(const kiln_cache *c, int layer) {
  return layer == 0 ? c->primary.dir : c->layers[layer - 1].dir;
}

/* Member 1: the manifest. */
static kiln_status write_manifest(kiln_tar_writer *w, size_t records, size_t blobs, uint64_t bytes,
                                  int64_t now) {
  json_t *m = json_object();
  char *text;
  kiln_status rc;
  json_object_set_new(m, "format", json_string(KILN_ARCHIVE_FORMAT));
  json_object_set_new(m, "version", json_integer(KILN_ARCHIVE_VERSION));
  json_object_set_new(m, "kiln", json_string(kiln_version()));
  json_object_set_new(m, "created", json_integer(now));
  json_object_set_new(m, "records", json_integer((json_int_t)records));
  json_object_set_new(m, "blobs", json_integer((json_int_t)blobs));
  json_object_set_new(m, "bytes", json_integer((json_int_t)bytes));
  text = json_dumps(m, JSON_SORT_KEYS | JSON_INDENT(2));
  json_decref(m);
  if (!text) return kiln_fail(KILN_ENOMEM, "out of memory");
  rc = kiln_tar_write(w, KILN_ARCHIVE_MANIFEST, text, strlen(text), now, 1);
  free(text);
  return rc;
}

/* A batch of blobs read and verified in parallel, then written in order. */
typedef struct blob_batch {
  kiln_cache *c;
  const kiln_record *recs; /* one per blob */
  uint8_t **data;
  size_t *len;
  kiln_status *rc;
  char (*why)[512];
} blob_batch;

static void read_one(size_t i, void *user) {
  blob_batch *b = user;
  const kiln_record *r = &b->recs[i];
  b->rc[i] = kiln_blob_read(layer_dir(b->c, r->layer), r->digest, r->size, &b->data[i], &b->len[i]);
  if (b->rc[i] != KILN_OK)
    snprintf(b->why[i], sizeof b->why[i], "%s %s: %s (run `kiln cache verify`)", r->unit, r->target,
             kiln_last_error());
}

#define BATCH_BYTES (64u << 20) /* read ahead at most this much */
#define BATCH_BLOBS 256

/* The blobs (one per digest, in digest order): hashing is most of the cost,
 * so batches of them are read and verified on every CPU, then written. */
static kiln_status write_blobs(kiln_tar_writer *w, kiln_cache *c, const kiln_record *blobs,
                               size_t n, int64_t now) {
  uint8_t *data[BATCH_BLOBS];
  size_t len[BATCH_BLOBS];
  kiln_status rcs[BATCH_BLOBS], rc = KILN_OK;
  char(*why)[512] = calloc(BATCH_BLOBS, sizeof *why);
  if (!why) return kiln_fail(KILN_ENOMEM, "out of memory");
  for (size_t lo = 0; lo < n && rc == KILN_OK;) {
    size_t hi = lo;
    uint64_t bytes = 0;
    blob_batch b = {c, blobs + lo, data, len, rcs, why};
    while (hi < n && hi - lo < BATCH_BLOBS && (hi == lo || bytes + blobs[hi].size <= BATCH_BYTES))
      bytes += blobs[hi++].size;
    memset(data, 0, sizeof data);
    rc = kiln_pool_run(hi - lo, 0, read_one, &b);
    for (size_t i = 0; i < hi - lo; i++) {
      char name[KILN_TAR_NAME_MAX + 1];
      if (rc == KILN_OK && rcs[i] != KILN_OK) rc = kiln_fail(rcs[i], "%s", why[i]);
      snprintf(name, sizeof name, "cas/%s", blobs[lo + i].digest);
      if (rc == KILN_OK) rc = kiln_tar_write(w, name, data[i], len[i], now, 0);
      free(data[i]);
    }
    lo = hi;
  }
  free(why);
  return rc;
}

/* The manifest, the blobs (each read and verified from its layer), then the
 * records. */
static kiln_status write_members(kiln_tar_writer *w, kiln_cache *c, kiln_record *recs, size_t n,
                                 kiln_cache_export_report *rep, int64_t now) {
  kiln_record *by_blob = calloc(n ? n : 1, sizeof *by_blob);
  size_t nb = 0;
  kiln_status rc = KILN_OK;
  if (!by_blob) return kiln_fail(KILN_ENOMEM, "out of memory");
  memcpy(by_blob, recs, n * sizeof *recs);
  qsort(by_blob, n, sizeof *by_blob, by_digest);
  for (size_t i = 0; i < n; i++) { /* one per digest */
    if (nb && strcmp(by_blob[i].digest, by_blob[nb - 1].digest) == 0) continue;
    by_blob[nb++] = by_blob[i];
    rep->bytes += by_blob[i].size;
  }
  rep->blobs = nb;
  KILN_CHECK(write_manifest(w, n, nb, rep->bytes, now));
  KILN_CHECK(write_blobs(w, c, by_blob, nb, now));
  for (size_t i = 0; i < n; i++) {
    char *doc = NULL, name[KILN_TAR_NAME_MAX + 1];
    size_t len = 0;
    recs[i].log_digest[0] = '\0'; /* build logs stay behind */
    KILN_CHECK(kiln_remote_record_encode(&recs[i], NULL, 0, &doc, &len));
    snprintf(name, sizeof name, "ac/%s", recs[i].key);
    rc = kiln_tar_write(w, name, doc, len, now, 1);
    free(doc);
    if (rc != KILN_OK) goto out;
    rep->records++;
  }
  KILN_CHECK(kiln_tar_write_sum(w, KILN_ARCHIVE_SUM, now));
  rc = kiln_tar_write_end(w);
out:
  free(by_blob);
  return rc;
}

KILN_API kiln_status kiln_cache_export(kiln_cache_export_report *out, kiln_cache *c,
                                       const char *path, const kiln_cache_export_options *opts) {
  kiln_cache_export_options o = KILN_CACHE_EXPORT_OPTIONS_INIT;
  kiln_tar_writer w = {-1, 0, NULL};
  kiln_record *recs = NULL;
  kiln_target *t = NULL;
  size_t n = 0, nt = 0;
  char tmp[KILN_PATH_MAX] = "";
  kiln_status rc;
  if (!out || !c || !path || !*path)
    return kiln_fail(KILN_EINVAL, "kiln_cache_export: NULL argument");
  memset(out, 0, sizeof *out);
  if (opts) {
    KILN_CHECK(kiln_options_check(opts->version, KILN_CACHE_EXPORT_OPTIONS_VERSION,
                                  "kiln_cache_export_options"));
    o = *opts;
  }
  if (o.arch) KILN_CHECK(kiln_targets_parse_list(&t, &nt, o.arch));
  KILN_CHECK(kiln_cache_list(&recs, &n, c));
  n = select_records(recs, n, t, nt, o.kernels);
  if (!n) {
    rc = kiln_fail(KILN_ENOTFOUND, "no record in the cache matches%s%s%s%s",
                   o.arch ? " --arch " : "", o.arch ? o.arch : "", o.kernels ? " --kernels " : "",
                   o.kernels ? o.kernels : "");
    goto out;
  }
  if (strcmp(path, "-") == 0) {
    w.fd = 1;
  } else {
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld.XXXXXX", path, (long)getpid()) >= (int)sizeof tmp) {
      rc = kiln_fail(KILN_EINVAL, "path too long: %s", path);
      tmp[0] = '\0';
      goto out;
    }
    if ((w.fd = mkstemp(tmp)) < 0) {
      rc = kiln_fail_errno(KILN_EIO, errno, "creating %s", tmp);
      tmp[0] = '\0';
      goto out;
    }
    fchmod(w.fd, 0644);
  }
  KILN_CHECK(kiln_sha256_new(&w.sum));
  KILN_CHECK(write_members(&w, c, recs, n, out, kiln_now_s()));
  if (tmp[0]) {
    /* Renamed into place whole, but not fsync'ed (as tar does not): an
     * archive cut short by a power loss is refused by import, never
     * half-read. */
    if (close(w.fd) != 0) {
      w.fd = -1;
      rc = kiln_fail_errno(KILN_EIO, errno, "writing %s", tmp);
      goto out;
    }
    w.fd = -1;
    if (rename(tmp, path) != 0) {
      rc = kiln_fail_errno(KILN_EIO, errno, "moving %s to %s", tmp, path);
      goto out;
    }
    tmp[0] = '\0';
  }
out:
  if (w.fd > 1) close(w.fd);
  kiln_sha256_free(w.sum);
  if (tmp[0]) unlink(tmp);
  free(recs);
  free(t);
  return rc;
}
