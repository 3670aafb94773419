/* Keys, records and failure records of the local store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/entries.h" /* kiln_image_missing_entry */
#include "cache/store.h"
#include "common/clock.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/logging.h"

kiln_status kiln_cache_key(char out[65], const kiln_unit_info *unit, const char *target,
                           const char *options, const char *toolchain) {
  char unit_digest[65];
  const char *parts[6];
  kiln_sha256 *h = NULL;
  kiln_status rc;
  if (!unit || !target || !options || !toolchain)
    return kiln_fail(KILN_EINVAL, "kiln_cache_key: NULL argument");
  KILN_CHECK(kiln_unit_digest(unit_digest, unit));
  parts[0] = "kiln-key-v1";
  parts[1] = unit->name;
  parts[2] = unit_digest;
  parts[3] = target;
  parts[4] = options;
  parts[5] = toolchain;
  KILN_CHECK(kiln_sha256_new(&h));
  for (int i = 0; i < 6; i++) {
    if (i) KILN_CHECK(kiln_sha256_update(h, "", 1));
    KILN_CHECK(kiln_sha256_update(h, parts[i], strlen(parts[i])));
  }
  rc = kiln_sha256_final_hex(h, out);
out:
  kiln_sha256_free(h);
  return rc;
}

/* The record of key in db (KILN_ENOTFOUND when none), its rowid (which a
 * replacement of the row changes), and in *bad whether the row can be held
 * by a kiln_record as it is (why says what not). */
static kiln_status find_record(sqlite3 *db, const char *key, kiln_record *rec, int layer,
                               int64_t *rowid, int *bad, char *why, size_t cap) {
  static const char *sql = "SELECT " KILN_RECORD_COLUMNS ", rowid FROM records WHERE key = ?1";
  sqlite3_stmt *st = NULL;
  kiln_status rc;
  int row = 0;
  KILN_CHECK(kiln_sql_prepare(&st, db, sql, SQL_ARGS(SQL_TEXT(key)), "look up record"));
  KILN_CHECK(kiln_sql_step(&row, st, "look up record"));
  if (row) {
    kiln_record_from_row(rec, st, layer);
    *bad = kiln_record_row_bad(st, why, cap);
    *rowid = sqlite3_column_int64(st, sqlite3_column_count(st) - 1);
  }
  rc = row ? KILN_OK : KILN_ENOTFOUND;
out:
  sqlite3_finalize(st);
  return rc;
}

/* last_used drives LRU eviction; writing it at most once a minute keeps
 * warm reads from turning into index writes. */
static void touch(kiln_cache *c, const kiln_record *rec) {
  int64_t now = kiln_now_s();
  if (now - rec->last_used < 60 || c->read_only) return;
  if (kiln_sql_run(c->primary.db, "UPDATE records SET last_used = ?1 WHERE key = ?2",
                   SQL_ARGS(SQL_INT(now), SQL_TEXT(rec->key)), "touch") != KILN_OK)
    kiln_log(KILN_LOG_DEBUG, "touch %s: %s", rec->key, kiln_last_error());
}

kiln_status kiln_record_drop(int *gone, kiln_cache *c, const char *key, int64_t rowid,
                             const char *digest) {
  kiln_status rc;
  *gone = 0;
  KILN_CHECK(kiln_txn_begin(c, "drop record"));
  rc = digest ? kiln_sql_run(c->primary.db, "DELETE FROM records WHERE key = ?1 AND digest = ?2",
                             SQL_ARGS(SQL_TEXT(key), SQL_TEXT(digest)), "drop record")
              : kiln_sql_run(c->primary.db, "DELETE FROM records WHERE key = ?1 AND rowid = ?2",
                             SQL_ARGS(SQL_TEXT(key), SQL_INT(rowid)), "drop record");
  *gone = rc == KILN_OK && sqlite3_changes(c->primary.db) > 0;
  rc = kiln_txn_end(c, rc, "drop record");
out:
  return rc;
}

/* Drops the primary's row of key that could not be served — that row, by
 * its rowid, not a good one another process has put meanwhile — so the next
 * lookup is a miss that makes progress (a rebuild) instead of the same
 * failure: every loop over a cache must move. */
static void drop_unservable(kiln_cache *c, const char *key, int64_t rowid, const kiln_record *rec,
                            const char *why) {
  int gone = 0;
  if (kiln_record_drop(&gone, c, key, rowid, NULL) != KILN_OK)
    kiln_log(KILN_LOG_WARN,
             "record %.12s (%s %s) cannot be served (%s), and dropping it failed: %s", key,
             rec->unit, rec->target, why, kiln_last_error());
  else if (gone)
    kiln_log(KILN_LOG_WARN,
             "record %.12s (%s %s) cannot be served (%s): dropped; it is built again", key,
             rec->unit, rec->target, why);
}

/* Why rec, read for key, names nothing this caller can use: a field that
 * is not what the key was made of (want's, when want is given and the
 * field there is not ""), or not a SHA-256 digest. 0 when it can be tried. */
static int record_unusable(const kiln_record *rec, const kiln_record *want, char *why, size_t cap) {
  static const char *fields[] = {"unit", "target", "kind", "toolchain", "options"};
  const char *got[] = {rec->unit, rec->target, rec->kind, rec->toolchain, rec->options};
  const char *exp[] = {want ? want->unit : "", want ? want->target : "", want ? want->kind : "",
                       want ? want->toolchain : "", want ? want->options : ""};
  if (!kiln_is_hex64(rec->digest)) {
    snprintf(why, cap, "its digest '%.64s' is not 64 lowercase hex digits", rec->digest);
    return 1;
  }
  if (strcmp(rec->kind, "cubin") != 0 && strcmp(rec->kind, "ptx") != 0) {
    snprintf(why, cap, "its kind '%.8s' is neither cubin nor ptx", rec->kind);
    return 1;
  }
  for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
    if (exp[f][0] && strcmp(got[f], exp[f]) != 0) {
      snprintf(why, cap, "its %s '%.64s' is not the key's '%.64s'", fields[f], got[f], exp[f]);
      return 1;
    }
  return 0;
}

/* A record of layer i that cannot be served: in the primary (i == 0) it is
 * dropped and what was dropped goes to dropped (for the miss's message); in
 * a read-only layer it is skipped, said at warn. */
static void set_aside(kiln_cache *c, const kiln_layer *l, size_t i, const char *key, int64_t rowid,
                      const kiln_record *rec, const char *why, char *dropped, size_t cap) {
  if (i == 0) {
    drop_unservable(c, key, rowid, rec, why);
    snprintf(dropped, cap, "; its record (%s %s) %s", rec->unit, rec->target, why);
  } else {
    kiln_log(KILN_LOG_WARN, "read-only layer %s: record %.12s (%s %s): %s; skipped", l->dir, key,
             rec->unit, rec->target, why);
  }
}

kiln_status kiln_cache_get_want(kiln_record *out_rec, uint8_t **out_blob, size_t *out_size,
                                kiln_cache *c, const char *key, const kiln_record *want) {
  kiln_record rec;
  kiln_status rc;
  char why[512] = "", dropped[640] = "";
  const kiln_unit_info *want_unit = want && want->unit[0] ? kiln_unit_find(want->unit) : NULL;
  uint8_t *bytes = NULL;
  size_t len = 0;
  if (!c || !key) return kiln_fail(KILN_EINVAL, "kiln_cache_get: NULL argument");
  for (size_t i = 0; i <= c->n_layers; i++) {
    kiln_layer *l = i == 0 ? &c->primary : &c->layers[i - 1];
    int64_t rowid = 0;
    int bad = 0;
    rc = find_record(l->db, key, &rec, (int)i, &rowid, &bad, why, sizeof why);
    if (rc == KILN_ENOTFOUND) continue;
    if (rc != KILN_OK && i == 0) return rc;
    if (rc != KILN_OK) {
      kiln_log(KILN_LOG_WARN, "read-only layer %s: %s; skipped", l->dir, kiln_last_error());
      continue;
    }
    if (bad || record_unusable(&rec, want, why, sizeof why)) {
      set_aside(c, l, i, key, rowid, &rec, why, dropped, sizeof dropped);
      continue;
    }
    rc = want_unit ? kiln_blob_read(l->dir, rec.digest, rec.size, &bytes, &len)
                   : kiln_blob_read(l->dir, rec.digest, rec.size, out_blob, out_size);
    if (rc == KILN_OK && want_unit) {
      /* a valid blob of another unit is not this key's (cache/entries.h):
       * the record goes, the blob stays for its own unit */
      const char *missing = kiln_image_missing_entry(bytes, len, rec.kind, want_unit);
      if (missing) {
        snprintf(why, sizeof why, "its blob %.12s has no entry point %s: not %s's image",
                 rec.digest, missing, want_unit->name);
        free(bytes);
        bytes = NULL;
        set_aside(c, l, i, key, rowid, &rec, why, dropped, sizeof dropped);
        continue;
      }
      if (out_blob)
        *out_blob = bytes;
      else
        free(bytes);
      if (out_size) *out_size = len;
      bytes = NULL;
    }
    if (rc == KILN_OK) {
      if (i == 0) touch(c, &rec);
      if (out_rec) *out_rec = rec;
      return KILN_OK;
    }
    snprintf(why, sizeof why, "%s", kiln_last_error());
    if (i == 0 && rc != KILN_ECORRUPT && rc != KILN_ENOTFOUND) {
      /* an io error (EMFILE, EIO, EACCES) says nothing about the bytes */
      return kiln_fail(rc, "record %.12s (%s %s): %s", key, rec.unit, rec.target, why);
    } else if (i == 0) {
      /* Never hand bad bytes on: quarantine, drop the record, read as a miss. */
      /* the record goes first, named (the blob may be intact while the
       * record is not, another size, or the move may fail) */
      drop_unservable(c, key, rowid, &rec, why);
      kiln_blob_quarantine(c, rec.digest, why, 0);
      snprintf(dropped, sizeof dropped, "; its record (%s %s) %s", rec.unit, rec.target, why);
    } else {
      kiln_log(KILN_LOG_WARN, "read-only layer %s: record %.12s has a bad blob (%s); skipped",
               l->dir, key, why);
    }
  }
  return kiln_fail(KILN_ENOTFOUND, "no record for key %.12s... in any cache layer%s", key, dropped);
}

kiln_status kiln_cache_get(kiln_record *out_rec, uint8_t **out_blob, size_t *out_size,
                           kiln_cache *c, const char *key) {
  return kiln_cache_get_want(out_rec, out_blob, out_size, c, key, NULL);
}

/* One record inside an open write transaction. */
static kiln_status insert_locked(kiln_cache *c, kiln_record *rec) {
  char path[KILN_PATH_MAX];
  struct stat sb;
  kiln_status rc;
  KILN_CHECK(kiln_blob_path(path, sizeof path, c->primary.dir, rec->digest));
  if (stat(path, &sb) != 0 || (uint64_t)sb.st_size != rec->size) {
    rc = kiln_fail(KILN_ENOTFOUND, "blob %s disappeared before its record was stored", path);
    goto out;
  }
  rec->created = rec->last_used = kiln_now_s();
  rec->layer = 0;
  KILN_CHECK(kiln_record_store_row(c->primary.db, rec));
  rc = kiln_sql_run(c->primary.db, "DELETE FROM failures WHERE key = ?1",
                    SQL_ARGS(SQL_TEXT(rec->key)), "clear failure");
out:
  return rc;
}

kiln_status kiln_records_insert(kiln_cache *c, kiln_record *const *recs, size_t n,
                                kiln_status *each) {
  kiln_status rc;
  for (size_t i = 0; i < n; i++)
    each[i] = KILN_ENOTFOUND;
  KILN_CHECK(kiln_txn_begin(c, "store records"));
  for (size_t i = 0; i < n && rc == KILN_OK; i++) {
    each[i] = insert_locked(c, recs[i]);
    if (each[i] != KILN_ENOTFOUND && each[i] != KILN_OK) rc = each[i]; /* the index failed */
  }
  rc = kiln_txn_end(c, rc, "store records");
  for (size_t i = 0; i < n && rc != KILN_OK; i++)
    each[i] = rc; /* rolled back */
out:
  return rc;
}

/* One imported record inside the write transaction. */
static kiln_status import_locked(kiln_cache *c, kiln_record *rec, char kept[65],
                                 const char *source) {
  sqlite3_stmt *st = NULL;
  kiln_status rc;
  int row = 0;
  kept[0] = '\0';
  KILN_CHECK(kiln_sql_prepare(&st, c->primary.db, "SELECT digest FROM records WHERE key = ?1",
                              SQL_ARGS(SQL_TEXT(rec->key)), "look the key up"));
  KILN_CHECK(kiln_sql_step(&row, st, "look the key up"));
  if (!row) {
    rc = insert_locked(c, rec);
    goto out;
  }
  kiln_sql_text(kept, 65, st, 0);
  if (strcmp(kept, rec->digest) == 0) {
    rc = KILN_EEXISTS;
    goto out;
  }
  rc = kiln_sql_run(c->primary.db,
                    "INSERT OR REPLACE INTO conflicts(key, unit, target, kept, refused, source, at)"
                    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    SQL_ARGS(SQL_TEXT(rec->key), SQL_TEXT(rec->unit), SQL_TEXT(rec->target),
                             SQL_TEXT(kept), SQL_TEXT(rec->digest), SQL_TEXT(source),
                             SQL_INT(kiln_now_s())),
                    "record a conflict");
  if (rc == KILN_OK) rc = KILN_EMISMATCH;
out:
  sqlite3_finalize(st);
  return rc;
}

kiln_status kiln_records_import(kiln_cache *c, kiln_record *const *recs, size_t n,
                                kiln_status *each, char (*kept)[65], const char *source) {
  kiln_status rc;
  for (size_t i = 0; i < n; i++)
    each[i] = KILN_ENOTFOUND;
  KILN_CHECK(kiln_txn_begin(c, "import records"));
  for (size_t i = 0; i < n && rc == KILN_OK; i++) {
    each[i] = import_locked(c, recs[i], kept[i], source);
    if (each[i] != KILN_OK && each[i] != KILN_EEXISTS && each[i] != KILN_EMISMATCH &&
        each[i] != KILN_ENOTFOUND)
      rc = each[i]; /* the index failed */
  }
  rc = kiln_txn_end(c, rc, "import records");
  for (size_t i = 0; i < n && rc != KILN_OK; i++)
    each[i] = rc; /* rolled back */
out:
  return rc;
}

kiln_status kiln_record_insert(kiln_cache *c, kiln_record *rec) {
  kiln_status each, rc = kiln_records_insert(c, &rec, 1, &each);
  return rc != KILN_OK ? rc : each;
}

kiln_status kiln_cache_put(kiln_cache *c, kiln_record *rec, const void *blob, size_t size,
                           const char *log, size_t log_len) {
  kiln_status rc;
  if (!c || !rec || (!blob && size)) return kiln_fail(KILN_EINVAL, "kiln_cache_put: NULL argument");
  KILN_CHECK(kiln_cache_writable(c, "store a record"));
  if (!size)
    return kiln_fail(KILN_EINVAL, "kiln_cache_put: %s %s: a 0-byte artifact is never stored",
                     rec->unit, rec->target);
  KILN_CHECK(kiln_sha256_hex(rec->digest, blob, size));
  rec->size = size;
  rec->log_digest[0] = '\0';
  if (log && log_len) {
    KILN_CHECK(kiln_sha256_hex(rec->log_digest, log, log_len));
    KILN_CHECK(kiln_blob_write(c, rec->log_digest, log, log_len));
  }
  /* Blob first, record last: a crash in between leaves an unreferenced blob
   * (gc removes it), never a record without its bytes. The record goes in
   * only while the write lock shows the blob still there: gc, rm and
   * quarantine remove blobs under the same lock. */
  for (int attempt = 0;; attempt++) {
    KILN_CHECK(kiln_blob_write(c, rec->digest, blob, size));
    rc = kiln_record_insert(c, rec);
    if (rc != KILN_ENOTFOUND) goto out;
    if (attempt == 3) {
      rc =
          kiln_fail(KILN_EIO, "blob %s keeps disappearing while its record is stored", rec->digest);
      goto out;
    }
  }
out:
  return rc;
}

kiln_status kiln_cache_clear_failure(kiln_cache *c, const char *key) {
  kiln_status rc;
  pthread_mutex_lock(&c->lock);
  rc = kiln_sql_run(c->primary.db, "DELETE FROM failures WHERE key = ?1", SQL_ARGS(SQL_TEXT(key)),
                    "clear failure");
  pthread_mutex_unlock(&c->lock);
  return rc;
}

kiln_status kiln_cache_put_failure(kiln_cache *c, const char *key, const char *unit,
                                   const char *target, const char *log, int ttl_s) {
  static const char *sql = "INSERT OR REPLACE INTO failures(key, unit, target, log, created, "
                           "expires) VALUES(?1,?2,?3,?4,?5,?6)";
  int64_t now = kiln_now_s();
  kiln_status rc;
  pthread_mutex_lock(&c->lock); /* pool threads share the connection and its error text */
  rc = kiln_sql_run(c->primary.db, sql,
                    SQL_ARGS(SQL_TEXT(key), SQL_TEXT(unit), SQL_TEXT(target),
                             SQL_TEXT(log ? log : ""), SQL_INT(now), SQL_INT(now + ttl_s)),
                    "store failure record");
  pthread_mutex_unlock(&c->lock);
  return rc;
}

kiln_status kiln_cache_get_failure(char **out_log, kiln_cache *c, const char *key) {
  static const char *sql = "SELECT log FROM failures WHERE key = ?1 AND expires > ?2";
  sqlite3_stmt *st = NULL;
  const char *log;
  kiln_status rc;
  int row = 0;
  KILN_CHECK(kiln_sql_prepare(&st, c->primary.db, sql,
                              SQL_ARGS(SQL_TEXT(key), SQL_INT(kiln_now_s())), "look up failure"));
  KILN_CHECK(kiln_sql_step(&row, st, "look up failure"));
  rc = row ? KILN_OK : KILN_ENOTFOUND;
  if (!row || !out_log) goto out;
  log = (const char *)sqlite3_column_text(st, 0);
  *out_log = strdup(log ? log : "");
  if (!*out_log) rc = kiln_fail(KILN_ENOMEM, "out of memory");
out:
  sqlite3_finalize(st);
  return rc;
}

kiln_status kiln_cache_pin(kiln_cache *c, const char *key) {
  static const char *sql = "INSERT OR REPLACE INTO pins(key, host, pid, created) "
                           "VALUES(?1,?2,?3,?4)";
  char host[256];
  kiln_host_name(host, sizeof host);
  return kiln_sql_run(
      c->primary.db, sql,
      SQL_ARGS(SQL_TEXT(key), SQL_TEXT(host), SQL_INT(getpid()), SQL_INT(kiln_now_s())), "pin");
}

kiln_status kiln_cache_unpin(kiln_cache *c, const char *key) {
  static const char *sql = "DELETE FROM pins WHERE key = ?1 AND host = ?2 AND pid = ?3";
  char host[256];
  kiln_host_name(host, sizeof host);
  return kiln_sql_run(c->primary.db, sql,
                      SQL_ARGS(SQL_TEXT(key), SQL_TEXT(host), SQL_INT(getpid())), "unpin");
}

kiln_status kiln_cache_quarantine(kiln_cache *c, const char *digest, const char *why) {
  if (!c || !digest || !kiln_is_hex64(digest))
    return kiln_fail(KILN_EINVAL, "kiln_cache_quarantine: bad digest");
  return kiln_blob_quarantine(c, digest, why ? why : "quarantined by the caller", 1);
}

/* Appends the records of one layer for (unit, options) whose key is the key
 * of today's sources. */
static kiln_status find_unit_in(sqlite3 *db, int layer, const kiln_unit_info *unit,
                                const char *options, kiln_record **recs, size_t *n, size_t *cap) {
  static const char *sql = "SELECT " KILN_RECORD_COLUMNS
                           " FROM records WHERE unit = ?1 AND options = ?2 ORDER BY target";
  sqlite3_stmt *st = NULL;
  kiln_status rc;
  int row = 0;
  KILN_CHECK(kiln_sql_prepare(&st, db, sql, SQL_ARGS(SQL_TEXT(unit->name), SQL_TEXT(options)),
                              "look up unit records"));
  for (;;) {
    kiln_record rec;
    char want[65];
    KILN_CHECK(kiln_sql_step(&row, st, "look up unit records"));
    if (!row) break;
    kiln_record_from_row(&rec, st, layer);
    /* The key covers the unit's bytes: a record built from other sources
     * (another kiln version) does not match and is not this unit's code. */
    if (kiln_cache_key(want, unit, rec.target, rec.options, rec.toolchain) != KILN_OK ||
        strcmp(want, rec.key) != 0)
      continue;
    KILN_CHECK(kiln_record_push(recs, n, cap, &rec));
  }
out:
  sqlite3_finalize(st);
  return rc;
}

kiln_status kiln_cache_find_unit(kiln_record **out, size_t *n, kiln_cache *c,
                                 const kiln_unit_info *unit, const char *options) {
  size_t cap = 0;
  kiln_status rc = KILN_OK;
  if (!c || !unit || !options || !out || !n)
    return kiln_fail(KILN_EINVAL, "kiln_cache_find_unit: NULL argument");
  *out = NULL;
  *n = 0;
  pthread_mutex_lock(&c->lock);
  rc = find_unit_in(c->primary.db, 0, unit, options, out, n, &cap);
  pthread_mutex_unlock(&c->lock);
  for (size_t i = 0; rc == KILN_OK && i < c->n_layers; i++)
    if (find_unit_in(c->layers[i].db, (int)i + 1, unit, options, out, n, &cap) != KILN_OK)
      kiln_log(KILN_LOG_WARN, "read-only layer %s: %s; skipped", c->layers[i].dir,
               kiln_last_error());
  if (rc != KILN_OK) {
    free(*out);
    *out = NULL;
    *n = 0;
  }
  return rc;
}
