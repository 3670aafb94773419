/* kiln_cache_repair: a corrupt index rebuilt from what can still be read.
 *
 * The old index is read by a connection that holds it exclusively (a kiln
 * with the cache open holds a shared lock, so a busy cache is refused, not
 * pulled from under its users). Its records are salvaged twice over: a scan
 * of the table in rowid order, which stops at the first unreadable page, and
 * then a walk of the key index (a separate b-tree, often intact) that looks
 * up each rowid the scan did not reach. A record goes into the new index
 * only when its blob verifies; the new index is written under tmp/ and
 * renamed over index.sqlite, and the old one (with its -wal) is kept in
 * quarantine/. Leases, pins, failure records and statistics are not carried
 * over: the first are short-lived and the rest are history. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/store.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/fileio.h"

/* The old index's rows by rowid, as far as they can be read. */
typedef struct salvage {
  kiln_record *recs;
  int64_t *rowid;
  size_t n, cap;
  kiln_cache_repair_report *r;
} salvage;

static kiln_status add_row(salvage *s, int64_t rowid, const kiln_record *rec) {
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 64;
    kiln_record *nr = realloc(s->recs, nc * sizeof *nr);
    int64_t *ni;
    if (!nr) return kiln_fail(KILN_ENOMEM, "out of memory");
    s->recs = nr;
    if (!(ni = realloc(s->rowid, nc * sizeof *ni))) return kiln_fail(KILN_ENOMEM, "out of memory");
    s->rowid = ni;
    s->cap = nc;
  }
  s->recs[s->n] = *rec;
  s->rowid[s->n++] = rowid;
  return KILN_OK;
}

static int have_rowid(const salvage *s, int64_t rowid) {
  for (size_t i = 0; i < s->n; i++)
    if (s->rowid[i] == rowid) return 1;
  return 0;
}

static kiln_status lose(kiln_cache_repair_report *r, const char *key, const char *unit,
                        const char *target, const char *why) {
  kiln_cache_lost_record *v = realloc(r->lost_records, (r->n_lost + 1) * sizeof *v);
  if (!v) return kiln_fail(KILN_ENOMEM, "out of memory");
  r->lost_records = v;
  v += r->n_lost++;
  memset(v, 0, sizeof *v);
  snprintf(v->key, sizeof v->key, "%s", key);
  snprintf(v->unit, sizeof v->unit, "%s", unit);
  snprintf(v->target, sizeof v->target, "%s", target);
  snprintf(v->why, sizeof v->why, "%s", why);
  r->lost++;
  return KILN_OK;
}

/* Rows in rowid order until the end or the first page that cannot be read. */
static kiln_status scan_table(salvage *s, sqlite3 *db) {
  sqlite3_stmt *st = NULL;
  kiln_status rc = KILN_OK;
  if (sqlite3_prepare_v2(db,
                         "SELECT " KILN_RECORD_COLUMNS ", rowid FROM records NOT INDEXED "
                         "ORDER BY rowid",
                         -1, &st, NULL) != SQLITE_OK)
    return KILN_OK; /* the schema itself is unreadable: nothing to salvage */
  while (rc == KILN_OK && sqlite3_step(st) == SQLITE_ROW) {
    kiln_record rec;
    kiln_record_from_row(&rec, st, 0);
    rc = add_row(s, sqlite3_column_int64(st, sqlite3_column_count(st) - 1), &rec);
  }
  sqlite3_finalize(st);
  return rc;
}

/* One row by rowid: 1 when read into rec. */
static int read_rowid(sqlite3 *db, int64_t rowid, kiln_record *rec) {
  sqlite3_stmt *st = NULL;
  int ok = 0;
  if (kiln_sql_prepare(&st, db, "SELECT " KILN_RECORD_COLUMNS " FROM records WHERE rowid = ?1",
                       SQL_ARGS(SQL_INT(rowid)), "salvage a record") == KILN_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    kiln_record_from_row(rec, st, 0);
    ok = 1;
  }
  sqlite3_finalize(st);
  return ok;
}

/* Every (rowid, key) the key index holds: the rows the scan missed are looked
 * up one by one, and the ones that cannot be read are lost by key. */
static kiln_status walk_key_index(salvage *s, sqlite3 *db) {
  sqlite3_stmt *st = NULL;
  kiln_status rc = KILN_OK;
  if (sqlite3_prepare_v2(db, "SELECT rowid, key FROM records INDEXED BY sqlite_autoindex_records_1",
                         -1, &st, NULL) != SQLITE_OK)
    return KILN_OK;
  while (rc == KILN_OK && sqlite3_step(st) == SQLITE_ROW) {
    int64_t rowid = sqlite3_column_int64(st, 0);
    char key[65];
    kiln_record rec;
    kiln_sql_text(key, sizeof key, st, 1);
    if (have_rowid(s, rowid)) continue;
    if (read_rowid(db, rowid, &rec))
      rc = add_row(s, rowid, &rec);
    else
      rc = lose(s->r, key, "", "", "record unreadable");
  }
  sqlite3_finalize(st);
  return rc;
}

/* Keeps a record whose blob verifies (its build log too, when that does). */
static kiln_status sort_out(salvage *s, const char *dir, kiln_record *rec, int *keep) {
  kiln_status st;
  *keep = 0;
  if (!kiln_is_hex64(rec->key) || !kiln_is_hex64(rec->digest))
    return lose(s->r, rec->key, rec->unit, rec->target, "key or digest is not 64 hex digits");
  st = kiln_blob_read(dir, rec->digest, rec->size, NULL, NULL);
  if (st != KILN_OK)
    return lose(s->r, rec->key, rec->unit, rec->target,
                st == KILN_ENOTFOUND ? "blob missing" : "blob does not verify");
  if (rec->log_digest[0] &&
      (!kiln_is_hex64(rec->log_digest) ||
       kiln_blob_read(dir, rec->log_digest, UINT64_MAX, NULL, NULL) != KILN_OK))
    rec->log_digest[0] = '\0'; /* the build log is gone: the artifact is still good */
  *keep = 1;
  return KILN_OK;
}

/* The new index at path: the schema, then the records kept, in one go. */
static kiln_status write_index(salvage *s, const char *dir, const char *path) {
  sqlite3 *db = NULL;
  kiln_status rc;
  int keep = 0;
  SQL_CHECK(db, sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), path);
  /* no -journal beside it: a cut write leaves a file that is removed anyway */
  KILN_CHECK(kiln_sql_exec(db, "PRAGMA journal_mode=OFF", "write the new index"));
  KILN_CHECK(kiln_sql_exec(db, "BEGIN", "begin the new index"));
  KILN_CHECK(kiln_index_create_schema(db));
  for (size_t i = 0; i < s->n; i++) {
    KILN_CHECK(sort_out(s, dir, &s->recs[i], &keep));
    if (!keep) continue;
    KILN_CHECK(kiln_record_store_row(db, &s->recs[i]));
    s->r->kept++;
  }
  rc = kiln_sql_exec(db, "COMMIT", "commit the new index");
out:
  if (sqlite3_close(db) != SQLITE_OK && rc == KILN_OK)
    rc = kiln_fail(KILN_EDB, "close the new index %s", path);
  return rc;
}

static kiln_status fsync_file(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  kiln_status rc = KILN_OK;
  if (fd < 0 || fsync(fd) != 0) rc = kiln_fail_errno(KILN_EIO, errno, "fsync %s", path);
  if (fd >= 0) close(fd);
  return rc;
}

/* Moves dir/index.sqlite (kept under its name until the new one replaces it:
 * a hard link) and its -wal and -journal aside to r->moved_to, drops the
 * -shm (derived from the -wal), and renames fresh over index.sqlite. */
static kiln_status swap_in(kiln_cache_repair_report *r, const char *dir, const char *fresh) {
  char index[KILN_PATH_MAX], qdir[KILN_PATH_MAX], from[KILN_PATH_MAX + 16],
      to[sizeof r->moved_to + 16];
  static const char *const sides[] = {"-wal", "-journal"};
  long long now = (long long)kiln_now_s();
  kiln_status rc;
  KILN_CHECK(kiln_path_join(index, sizeof index, dir, "index.sqlite"));
  KILN_CHECK(kiln_path_join(qdir, sizeof qdir, dir, "quarantine"));
  KILN_CHECK(kiln_mkdir(qdir, 0700));
  for (int i = 0;; i++) {
    snprintf(r->moved_to, sizeof r->moved_to,
             i ? "%s/index.sqlite.%lld.%d" : "%s/index.sqlite.%lld", qdir, now, i);
    if (link(index, r->moved_to) == 0) break;
    /* a file system without hard links: moved, so index.sqlite is missing
     * until the rename below */
    if ((errno == EPERM || errno == ENOTSUP) && rename(index, r->moved_to) == 0) break;
    if (errno != EEXIST || i == 99)
      return kiln_fail_errno(KILN_EIO, errno, "keep the old index as %s", r->moved_to);
  }
  for (size_t i = 0; i < sizeof sides / sizeof sides[0]; i++) {
    snprintf(from, sizeof from, "%s%s", index, sides[i]);
    snprintf(to, sizeof to, "%s%s", r->moved_to, sides[i]);
    if (rename(from, to) != 0 && errno != ENOENT)
      return kiln_fail_errno(KILN_EIO, errno, "move %s to %s", from, to);
  }
  snprintf(from, sizeof from, "%s-shm", index);
  if (unlink(from) != 0 && errno != ENOENT)
    return kiln_fail_errno(KILN_EIO, errno, "remove %s", from);
  if (rename(fresh, index) != 0)
    return kiln_fail_errno(KILN_EIO, errno, "move the new index %s to %s", fresh, index);
  KILN_CHECK(kiln_fsync_dir(dir));
  rc = kiln_fsync_dir(qdir);
out:
  return rc;
}

/* Opens the old index alone: KILN_ELOCKED when another process has it open.
 * Closing it neither checkpoints nor removes its -wal: those are kept. */
static kiln_status open_alone(sqlite3 **out, const char *path) {
  kiln_status rc = KILN_OK;
  int r;
  SQL_CHECK(*out, sqlite3_open_v2(path, out, SQLITE_OPEN_READWRITE, NULL), path);
  sqlite3_db_config(*out, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
  sqlite3_busy_timeout(*out, 2000);
  sqlite3_exec(*out, "PRAGMA locking_mode=EXCLUSIVE", NULL, NULL, NULL);
  r = sqlite3_exec(*out, "BEGIN EXCLUSIVE", NULL, NULL, NULL);
  if ((r & 0xff) == SQLITE_BUSY || (r & 0xff) == SQLITE_LOCKED)
    rc = kiln_fail(KILN_ELOCKED,
                   "%s is in use by another process (a build, a training job): stop it, then "
                   "repair; nothing was changed",
                   path);
out:
  return rc;
}

static kiln_status repair_dir(kiln_cache_repair_report *r, const char *dir) {
  char index[KILN_PATH_MAX], tmp_dir[KILN_PATH_MAX], fresh[KILN_PATH_MAX + 32];
  salvage s = {.r = r};
  sqlite3 *db = NULL;
  struct stat st;
  kiln_fs_info fs;
  kiln_status rc;
  int fd;
  fresh[0] = '\0';
  KILN_CHECK(kiln_path_join(index, sizeof index, dir, "index.sqlite"));
  if (lstat(index, &st) != 0) {
    if (errno != ENOENT) rc = kiln_fail_errno(KILN_EIO, errno, "%s", index);
    goto out; /* no index: nothing to repair */
  }
  if (!S_ISREG(st.st_mode)) {
    rc = kiln_fail(KILN_EIO, "%s is not a regular file: not repaired", index);
    goto out;
  }
  if (st.st_uid != geteuid()) {
    rc = kiln_fail(KILN_EPERM, "%s is owned by uid %u, not by you: not repaired", index,
                   (unsigned)st.st_uid);
    goto out;
  }
  /* it writes the index: not where other hosts use it (cache/store_fs.c) */
  if (kiln_fs_probe(dir, &fs) == KILN_OK && fs.shared) {
    rc = kiln_cache_refuse_shared(dir, &fs);
    goto out;
  }
  KILN_CHECK(open_alone(&db, index));
  if (kiln_index_quick_check(db, r->problem, sizeof r->problem) == KILN_OK) {
    r->problem[0] = '\0';
    goto out; /* sound: nothing to do */
  }
  KILN_CHECK(scan_table(&s, db));
  KILN_CHECK(walk_key_index(&s, db));
  KILN_CHECK(kiln_path_join(tmp_dir, sizeof tmp_dir, dir, "tmp"));
  KILN_CHECK(kiln_mkdir(tmp_dir, 0700));
  snprintf(fresh, sizeof fresh, "%s/repair-XXXXXX", tmp_dir);
  if ((fd = mkstemp(fresh)) < 0) {
    rc = kiln_fail_errno(KILN_EIO, errno, "create %s", fresh);
    fresh[0] = '\0';
    goto out;
  }
  close(fd);
  KILN_CHECK(write_index(&s, dir, fresh));
  KILN_CHECK(fsync_file(fresh));
  sqlite3_close(db); /* the lock goes: from here to the rename is a few syscalls */
  db = NULL;
  KILN_CHECK(swap_in(r, dir, fresh));
  fresh[0] = '\0';
  r->repaired = 1;
out:
  sqlite3_close(db);
  if (fresh[0]) unlink(fresh);
  free(s.recs);
  free(s.rowid);
  return rc;
}

kiln_status kiln_cache_repair(kiln_cache_repair_report *out, const char *dir) {
  char path[KILN_PATH_MAX];
  kiln_status rc;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_cache_repair: out is NULL");
  memset(out, 0, sizeof *out);
  if (dir && !*dir) return kiln_fail(KILN_EINVAL, "kiln_cache_repair: the directory is \"\"");
  if (dir) {
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
      return kiln_fail(KILN_EINVAL, "cache path too long");
  } else {
    KILN_CHECK(kiln_cache_default_dir(path, sizeof path, NULL, 0));
  }
  rc = repair_dir(out, path);
  if (rc != KILN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    kiln_cache_repair_report_free(out);
    return kiln_fail(rc, "%s", why);
  }
out:
  return rc;
}

void kiln_cache_repair_report_free(kiln_cache_repair_report *r) {
  if (!r) return;
  free(r->lost_records);
  memset(r, 0, sizeof *r);
}
