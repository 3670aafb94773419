/* kiln_cache_import (include/kiln/cache.h): an archive of cache/export.c into
 * the primary layer. Two phases, so that a bad archive leaves nothing behind:
 * read and verify everything (each blob streamed into tmp/, then hashed there
 * on every CPU; each record decoded as the remote's untrusted documents are),
 * then move the blobs into cas/ and store the records in one transaction. */
#include <errno.h>   /* errno */
#include <fcntl.h>   /* open */
#include <jansson.h> /* the manifest */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* calloc, free, mkstemp, realloc */
#include <string.h>  /* memcmp, strcmp */
#include <unistd.h>  /* close, unlink, write */

#include "cache/archive.h"
#include "cache/remote/remote.h" /* kiln_remote_record_decode, KILN_REMOTE_RECORD_MAX */
#include "cache/store.h"
#include "cache/transfer.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/logging.h"
#include "common/pool.h"

typedef struct in_archive {
  kiln_tar_reader r;
  int version;
  uint64_t want_records, want_blobs; /* the manifest's counts */
  kiln_sha256 *sum;                  /* of the stream (kiln_tar_reader.sum until the last member) */
  int summed;                        /* the last member was read and matched */
  unsigned char *buf;                /* CHUNK bytes for the blobs' data */
  kiln_blob_file *blobs;
  size_t n_blobs, cap_blobs;
  kiln_record *recs;
  size_t n_recs, cap_recs;
} in_archive;

/* "<prefix><64 hex>" -> the hex part, or NULL. */
static const char *hex_name(const char *name, const char *prefix) {
  size_t n = strlen(prefix);
  return strncmp(name, prefix, n) == 0 && kiln_is_hex64(name + n) ? name + n : NULL;
}

static kiln_status grow(void **v, size_t *cap, size_t n, size_t size) {
  void *p;
  if (n < *cap) return KILN_OK;
  *cap = *cap ? *cap * 2 : 64;
  if (!(p = realloc(*v, *cap * size))) return kiln_fail(KILN_ENOMEM, "out of memory");
  *v = p;
  return KILN_OK;
}

/* A small member (the manifest, a record) into memory, at most max bytes. */
static kiln_status read_small(in_archive *a, const char *name, uint64_t size, size_t max,
                              char **out) {
  char *buf;
  size_t got = 0, n;
  kiln_status rc = KILN_OK;
  *out = NULL;
  if (size > max)
    return kiln_fail(KILN_ECORRUPT, "%s: member %s is %llu bytes, more than %zu", a->r.what, name,
                     (unsigned long long)size, max);
  if (!(buf = malloc((size_t)size + 1))) return kiln_fail(KILN_ENOMEM, "out of memory");
  while (got < size && rc == KILN_OK) {
    rc = kiln_tar_read(&a->r, buf + got, (size_t)size - got, &n);
    got += n;
  }
  if (rc != KILN_OK) {
    free(buf);
    return rc;
  }
  buf[size] = '\0';
  *out = buf;
  return KILN_OK;
}

/* Member 1: the manifest: format, version (a newer one is refused), counts. */
static kiln_status read_manifest(in_archive *a, const char *name, uint64_t size) {
  json_error_t jerr;
  json_t *m = NULL, *v;
  char *text = NULL;
  kiln_status rc;
  if (strcmp(name, KILN_ARCHIVE_MANIFEST) != 0)
    return kiln_fail(KILN_ECORRUPT,
                     "%s is not a kiln cache archive (its first member is %s, not %s)", a->r.what,
                     name, KILN_ARCHIVE_MANIFEST);
  KILN_CHECK(read_small(a, name, size, 64 * 1024, &text));
  m = json_loads(text, 0, &jerr);
  if (!m || !json_is_object(m) || !json_is_string(json_object_get(m, "format")) ||
      strcmp(json_string_value(json_object_get(m, "format")), KILN_ARCHIVE_FORMAT) != 0 ||
      !json_is_integer(v = json_object_get(m, "version"))) {
    rc = kiln_fail(KILN_ECORRUPT, "%s: its manifest is not a kiln archive's", a->r.what);
    goto out;
  }
  a->version = (int)json_integer_value(v);
  if (a->version > KILN_ARCHIVE_VERSION) {
    rc = kiln_fail(KILN_EUNSUPPORTED,
                   "%s is a kiln archive of format version %d, newer than this kiln's (%d): "
                   "import it with a newer kiln (it was written by kiln %s)",
                   a->r.what, a->version, KILN_ARCHIVE_VERSION,
                   json_is_string(json_object_get(m, "kiln"))
                       ? json_string_value(json_object_get(m, "kiln"))
                       : "?");
    goto out;
  }
  if (a->version < 1 || !json_is_integer(json_object_get(m, "records")) ||
      !json_is_integer(json_object_get(m, "blobs")) ||
      json_integer_value(json_object_get(m, "records")) < 0 ||
      json_integer_value(json_object_get(m, "blobs")) < 0) {
    rc = kiln_fail(KILN_ECORRUPT, "%s: its manifest has no valid version or counts", a->r.what);
    goto out;
  }
  a->want_records = (uint64_t)json_integer_value(json_object_get(m, "records"));
  a->want_blobs = (uint64_t)json_integer_value(json_object_get(m, "blobs"));
out:
  json_decref(m);
  free(text);
  return rc;
}

/* cas/<digest>: streamed into tmp/ (verify_blobs hashes it there). */
#define CHUNK (1u << 20) /* one read and write */

static kiln_status read_blob(in_archive *a, kiln_cache *c, const char *digest, uint64_t size) {
  unsigned char *buf = a->buf;
  kiln_blob_file *b;
  size_t n;
  kiln_status rc;
  int fd = -1;
  for (size_t i = 0; i < a->n_blobs; i++)
    if (strcmp(a->blobs[i].digest, digest) == 0)
      return kiln_fail(KILN_ECORRUPT, "%s: blob %.12s... is in it twice", a->r.what, digest);
  KILN_CHECK(grow((void **)&a->blobs, &a->cap_blobs, a->n_blobs, sizeof *a->blobs));
  b = &a->blobs[a->n_blobs];
  memset(b, 0, sizeof *b);
  memcpy(b->digest, digest, 64); /* hex_name checked it: 64 hex digits */
  b->digest[64] = '\0';
  b->size = size;
  KILN_CHECK(kiln_path_join(b->tmp, sizeof b->tmp, c->tmp_dir, "import-XXXXXX"));
  if ((fd = mkstemp(b->tmp)) < 0) {
    rc = kiln_fail_errno(KILN_EIO, errno, "creating a temp file in %s", c->tmp_dir);
    b->tmp[0] = '\0';
    goto out;
  }
  a->n_blobs++;      /* from here on its temp file is removed with the others */
  a->r.sum_data = 0; /* its own digest covers its bytes: verify_blobs checks it */
  do {
    KILN_CHECK(kiln_tar_read(&a->r, buf, CHUNK, &n));
    for (size_t off = 0; off < n;) {
      ssize_t w = write(fd, buf + off, n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        rc = kiln_fail_errno(KILN_EIO, errno, "writing %s", b->tmp);
        goto out;
      }
      off += (size_t)w;
    }
  } while (n);
out:
  if (fd >= 0) close(fd);
  return rc;
}

/* Hashing is most of an import's CPU: the blobs written to tmp/ are hashed
 * afterwards, from their pages, on every CPU. */
typedef struct verify_job {
  const kiln_blob_file *blobs;
  kiln_status *rc;
  char (*why)[512];
} verify_job;

static void verify_one(size_t i, void *user) {
  verify_job *j = user;
  j->rc[i] = kiln_blob_check(j->blobs[i].tmp, j->blobs[i].digest, j->blobs[i].size, NULL, NULL);
  if (j->rc[i] != KILN_OK) snprintf(j->why[i], sizeof j->why[i], "%s", kiln_last_error());
}

static kiln_status verify_blobs(in_archive *a) {
  kiln_status *rcs = calloc(a->n_blobs ? a->n_blobs : 1, sizeof *rcs), rc;
  char(*why)[512] = calloc(a->n_blobs ? a->n_blobs : 1, sizeof *why);
  verify_job j = {a->blobs, rcs, why};
  if (!rcs || !why) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  KILN_CHECK(kiln_pool_run(a->n_blobs, 0, verify_one, &j));
  for (size_t i = 0; i < a->n_blobs && rc == KILN_OK; i++)
    if (rcs[i] == KILN_ECORRUPT)
      rc = kiln_fail(KILN_ECORRUPT, "%s: blob cas/%.12s... has other bytes: %s", a->r.what,
                     a->blobs[i].digest, why[i]);
    else if (rcs[i] != KILN_OK)
      rc = kiln_fail(rcs[i], "%s: reading back blob %.12s...: %s", a->r.what, a->blobs[i].digest,
                     why[i]);
out:
  free(rcs);
  free(why);
  return rc;
}

/* ac/<key>: the record document, checked as the remote's are. */
static kiln_status read_record(in_archive *a, const char *name, const char *key, uint64_t size) {
  char *doc = NULL;
  kiln_record *rec;
  kiln_status rc;
  KILN_CHECK(read_small(a, name, size, KILN_REMOTE_RECORD_MAX, &doc));
  KILN_CHECK(grow((void **)&a->recs, &a->cap_recs, a->n_recs, sizeof *a->recs));
  rec = &a->recs[a->n_recs];
  rc = kiln_remote_record_decode(doc, (size_t)size, key, NULL, 0, rec);
  if (rc != KILN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    rc = kiln_fail(KILN_ECORRUPT, "%s: record %s: %s", a->r.what, name, why);
    goto out;
  }
  for (size_t i = 0; i < a->n_recs; i++)
    if (strcmp(a->recs[i].key, key) == 0) {
      rc = kiln_fail(KILN_ECORRUPT, "%s: record %.12s... is in it twice", a->r.what, key);
      goto out;
    }
  a->n_recs++;
out:
  free(doc);
  return rc;
}

/* The last member: the stream's sum so far (its own header included) must be
 * its data. */
static kiln_status read_sum(in_archive *a, uint64_t size) {
  char want[66] = "", *got = NULL;
  kiln_status rc;
  KILN_CHECK(kiln_sha256_final_hex(a->sum, want));
  a->r.sum = NULL; /* finished: nothing more is added */
  a->r.sum_data = 0;
  KILN_CHECK(read_small(a, KILN_ARCHIVE_SUM, size, 65, &got));
  if (size != 65 || memcmp(got, want, 64) != 0 || got[64] != '\n')
    rc = kiln_fail(KILN_ECORRUPT, "%s: its bytes do not match its %s (a flipped byte?)", a->r.what,
                   KILN_ARCHIVE_SUM);
  a->summed = rc == KILN_OK;
out:
  free(got);
  return rc;
}

/* Phase 1: every member read and checked; nothing in the cache changes. */
static kiln_status read_archive(in_archive *a, kiln_cache *c) {
  char name[KILN_TAR_NAME_MAX + 1];
  uint64_t size;
  kiln_status rc;
  int end = 0, first = 1;
  for (;;) {
    const char *hex;
    KILN_CHECK(kiln_tar_next(&a->r, name, &size, &end));
    if (end) break;
    if (a->summed) {
      rc = kiln_fail(KILN_ECORRUPT, "%s: member %s after %s, which must be the last", a->r.what,
                     name, KILN_ARCHIVE_SUM);
      goto out;
    }
    if (first) {
      KILN_CHECK(read_manifest(a, name, size));
      first = 0;
    } else if (strcmp(name, KILN_ARCHIVE_SUM) == 0) {
      KILN_CHECK(read_sum(a, size));
    } else if ((hex = hex_name(name, "cas/"))) {
      KILN_CHECK(read_blob(a, c, hex, size));
    } else if ((hex = hex_name(name, "ac/"))) {
      KILN_CHECK(read_record(a, name, hex, size));
    } else {
      rc = kiln_fail(KILN_ECORRUPT, "%s: member %s does not belong in a kiln archive", a->r.what,
                     name);
      goto out;
    }
  }
  if (first) {
    rc = kiln_fail(KILN_ECORRUPT, "%s is an empty archive", a->r.what);
    goto out;
  }
  if (!a->summed) {
    rc = kiln_fail(KILN_ECORRUPT, "%s has no %s (cut short, or not written by kiln)", a->r.what,
                   KILN_ARCHIVE_SUM);
    goto out;
  }
  KILN_CHECK(verify_blobs(a));
  /* a version-1 archive is read as it is; a later version migrates older
   * ones here, before the checks below */
  if (a->n_recs != a->want_records || a->n_blobs != a->want_blobs) {
    rc = kiln_fail(KILN_ECORRUPT,
                   "%s holds %zu records and %zu blobs; its manifest says %llu and %llu", a->r.what,
                   a->n_recs, a->n_blobs, (unsigned long long)a->want_records,
                   (unsigned long long)a->want_blobs);
    goto out;
  }
  for (size_t i = 0; i < a->n_recs; i++) {
    const kiln_blob_file *b = NULL;
    for (size_t j = 0; j < a->n_blobs && !b; j++)
      if (strcmp(a->blobs[j].digest, a->recs[i].digest) == 0) b = &a->blobs[j];
    if (!b || b->size != a->recs[i].size) {
      rc = kiln_fail(KILN_ECORRUPT, "%s: record %.12s... (%s %s) has %s", a->r.what, a->recs[i].key,
                     a->recs[i].unit, a->recs[i].target,
                     b ? "another size than its blob" : "no blob in the archive");
      goto out;
    }
  }
out:
  return rc;
}

/* Phase 2: blobs into cas/ (verified already), then the records. */
static kiln_status commit(in_archive *a, kiln_cache *c, kiln_cache_import_report *rep,
                          const char *source) {
  kiln_record **ptrs = calloc(a->n_recs ? a->n_recs : 1, sizeof *ptrs);
  kiln_status *each = calloc(a->n_recs ? a->n_recs : 1, sizeof *each);
  char(*kept)[65] = calloc(a->n_recs ? a->n_recs : 1, sizeof *kept);
  kiln_status rc = KILN_OK;
  if (!ptrs || !each || !kept) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < a->n_recs; i++)
    ptrs[i] = &a->recs[i];
  KILN_CHECK(kiln_blobs_adopt(c, a->blobs, a->n_blobs)); /* what it leaves, the caller removes */
  /* A record whose blob a concurrent gc removed meanwhile (gc keeps blobs
   * younger than its grace period, so only a clock jump) is an error below:
   * importing again fixes it. */
  KILN_CHECK(kiln_records_import(c, ptrs, a->n_recs, each, kept, source));
  rep->conflict = calloc(a->n_recs ? a->n_recs : 1, sizeof *rep->conflict);
  if (!rep->conflict) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < a->n_recs; i++) {
    const kiln_record *r = &a->recs[i];
    if (each[i] == KILN_OK) {
      rep->added++;
    } else if (each[i] == KILN_EEXISTS) {
      rep->present++;
    } else if (each[i] == KILN_EMISMATCH) {
      kiln_cache_conflict *k = &rep->conflict[rep->n_conflicts++];
      snprintf(k->key, sizeof k->key, "%s", r->key);
      snprintf(k->unit, sizeof k->unit, "%s", r->unit);
      snprintf(k->target, sizeof k->target, "%s", r->target);
      snprintf(k->kept, sizeof k->kept, "%s", kept[i]);
      snprintf(k->refused, sizeof k->refused, "%s", r->digest);
      snprintf(k->source, sizeof k->source, "%s", source);
      k->at = kiln_now_s();
      kiln_log(KILN_LOG_WARN,
               "import: %s %s: key %.12s... is in the cache with digest %.12s..., the archive "
               "has %.12s...: kept the cache's (a build that is not reproducible?)",
               r->unit, r->target, r->key, kept[i], r->digest);
    } else {
      rc = kiln_fail(KILN_EIO,
                     "import: the blob of %s %s vanished while its record was stored "
                     "(a concurrent gc); import again",
                     r->unit, r->target);
      goto out;
    }
  }
  rep->conflicts = rep->n_conflicts;
out:
  free(ptrs);
  free(each);
  free(kept);
  return rc;
}

KILN_API kiln_status kiln_cache_import(kiln_cache_import_report *out, kiln_cache *c,
                                       const char *path) {
  in_archive a;
  kiln_status rc;
  int fd = -1;
  if (!out || !c || !path || !*path)
    return kiln_fail(KILN_EINVAL, "kiln_cache_import: NULL argument");
  memset(out, 0, sizeof *out);
  if (kiln_cache_writable(c, "import") != KILN_OK) return KILN_EPERM;
  memset(&a, 0, sizeof a);
  if (strcmp(path, "-") == 0) {
    fd = 0;
  } else if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    return kiln_fail_errno(errno == ENOENT ? KILN_ENOTFOUND : KILN_EIO, errno, "opening %s", path);
  }
  a.r.fd = fd;
  a.r.what = strcmp(path, "-") == 0 ? "the archive on stdin" : path;
  a.r.sum_data = 1;
  if (!(a.buf = malloc(CHUNK))) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  KILN_CHECK(kiln_sha256_new(&a.sum));
  a.r.sum = a.sum;
  KILN_CHECK(read_archive(&a, c));
  out->records = a.n_recs;
  out->blobs = a.n_blobs;
  for (size_t i = 0; i < a.n_blobs; i++)
    out->bytes += a.blobs[i].size;
  rc = commit(&a, c, out, path);
  kiln_log(KILN_LOG_INFO, "import %s: %llu records: %llu added, %llu present, %llu conflicts", path,
           (unsigned long long)out->records, (unsigned long long)out->added,
           (unsigned long long)out->present, (unsigned long long)out->conflicts);
out:
  for (size_t i = 0; i < a.n_blobs; i++)
    if (a.blobs[i].tmp[0]) unlink(a.blobs[i].tmp);
  if (fd > 0) close(fd);
  free(a.blobs);
  free(a.recs);
  kiln_sha256_free(a.sum);
  free(a.buf);
  if (rc != KILN_OK) kiln_cache_import_report_free(out);
  return rc;
}

KILN_API void kiln_cache_import_report_free(kiln_cache_import_report *r) {
  if (!r) return;
  free(r->conflict);
  r->conflict = NULL;
  r->n_conflicts = 0;
}

KILN_API kiln_status kiln_cache_conflicts(kiln_cache_conflict **out, size_t *n, kiln_cache *c) {
  sqlite3_stmt *st = NULL;
  kiln_cache_conflict *v = NULL;
  size_t cap = 0, m = 0;
  kiln_status rc;
  int row = 0;
  if (!out || !n || !c) return kiln_fail(KILN_EINVAL, "kiln_cache_conflicts: NULL argument");
  *out = NULL;
  *n = 0;
  KILN_CHECK(kiln_sql_prepare(&st, c->primary.db,
                              "SELECT key, unit, target, kept, refused, source, at FROM conflicts "
                              "ORDER BY at, key",
                              NULL, 0, "list conflicts"));
  for (;;) {
    kiln_cache_conflict *k;
    KILN_CHECK(kiln_sql_step(&row, st, "list conflicts"));
    if (!row) break;
    KILN_CHECK(grow((void **)&v, &cap, m, sizeof *v));
    k = &v[m++];
    memset(k, 0, sizeof *k);
    kiln_sql_text(k->key, sizeof k->key, st, 0);
    kiln_sql_text(k->unit, sizeof k->unit, st, 1);
    kiln_sql_text(k->target, sizeof k->target, st, 2);
    kiln_sql_text(k->kept, sizeof k->kept, st, 3);
    kiln_sql_text(k->refused, sizeof k->refused, st, 4);
    kiln_sql_text(k->source, sizeof k->source, st, 5);
    k->at = sqlite3_column_int64(st, 6);
  }
  *out = v;
  *n = m;
  v = NULL;
out:
  sqlite3_finalize(st);
  free(v);
  return rc;
}
