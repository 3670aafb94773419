/* Opening the local store: directory checks, the sqlite index, layers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/remote/remote.h"
#include "cache/store.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/logging.h"
#include "common/params.h"
#include "kiln/version.h"

/* " key TEXT PRIMARY KEY, unit TEXT NOT NULL, ...": byte for byte the text
 * schema 1 wrote, which sqlite keeps in every cache's sqlite_master. */
#define COLUMN_DECL(field, type, column, decl, json, canon, wire) " " column " " decl
#define RECORDS_DECL "records(" KILN_RECORD_FIELDS(COLUMN_DECL, ",") ")"
#define FAILURES_DECL                                                                              \
  "failures("                                                                                      \
  " key TEXT PRIMARY KEY, unit TEXT NOT NULL, target TEXT NOT NULL, log TEXT,"                     \
  " created INTEGER NOT NULL, expires INTEGER NOT NULL)"
#define PINS_DECL                                                                                  \
  "pins("                                                                                          \
  " key TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, created INTEGER NOT NULL,"        \
  " PRIMARY KEY(key, host, pid))"
/* schema 2: single-flight build leases, and one row per compile run */
#define LEASES_DECL                                                                                \
  "leases("                                                                                        \
  " key TEXT PRIMARY KEY, unit TEXT NOT NULL, target TEXT NOT NULL, host TEXT NOT NULL,"           \
  " pid INTEGER NOT NULL, token TEXT NOT NULL, acquired_ms INTEGER NOT NULL,"                      \
  " heartbeat_ms INTEGER NOT NULL)"
#define BUILDS_DECL                                                                                \
  "builds("                                                                                        \
  " id INTEGER PRIMARY KEY, key TEXT NOT NULL, unit TEXT NOT NULL, target TEXT NOT NULL,"          \
  " host TEXT NOT NULL, pid INTEGER NOT NULL, started INTEGER NOT NULL, ms REAL,"                  \
  " ok INTEGER NOT NULL)"
/* schema 3: totals of the remote cache's traffic (include/kiln/remote.h) */
#define REMOTE_STATS_DECL "remote_stats(name TEXT PRIMARY KEY, value INTEGER NOT NULL)"
/* schema 4: reproducibility conflicts met by kiln_cache_import */
#define CONFLICTS_DECL                                                                             \
  "conflicts("                                                                                     \
  " key TEXT NOT NULL, unit TEXT NOT NULL, target TEXT NOT NULL, kept TEXT NOT NULL,"              \
  " refused TEXT NOT NULL, source TEXT NOT NULL, at INTEGER NOT NULL,"                             \
  " PRIMARY KEY(key, refused))"

#define CREATE "CREATE TABLE IF NOT EXISTS "
static const char *schema_sql = CREATE RECORDS_DECL
    ";"
    "CREATE INDEX IF NOT EXISTS records_digest ON records(digest);"
    "CREATE INDEX IF NOT EXISTS records_last_used ON records(last_used);" CREATE FAILURES_DECL
    ";" CREATE PINS_DECL ";" CREATE LEASES_DECL ";" CREATE BUILDS_DECL ";"
    "CREATE INDEX IF NOT EXISTS builds_key ON builds(key);" CREATE REMOTE_STATS_DECL
    ";" CREATE CONFLICTS_DECL ";";

/* Every table by name: a read-only handle on an older index gets the ones
 * that index lacks as empty TEMP tables (in sqlite's temp database, never in
 * the cache), so every reader works on every schema it accepts. */
static const struct {
  const char *name, *decl;
} tables[] = {{"records", RECORDS_DECL},    {"failures", FAILURES_DECL},
              {"pins", PINS_DECL},          {"leases", LEASES_DECL},
              {"builds", BUILDS_DECL},      {"remote_stats", REMOTE_STATS_DECL},
              {"conflicts", CONFLICTS_DECL}};

/* The cache directory must be ours and closed to others: anyone who can write
 * it can plant code that every training process will run. */
static kiln_status check_dir(const char *dir, int read_only) {
  struct stat st;
  if (stat(dir, &st) != 0)
    return read_only && errno == ENOENT
               ? kiln_fail(KILN_ENOTFOUND,
                           "cache directory %s does not exist: nothing to read (the first "
                           "`kiln build --cache %s` creates it)",
                           dir, dir)
               : kiln_fail_errno(KILN_EIO, errno, "cache directory %s", dir);
  if (!S_ISDIR(st.st_mode))
    return kiln_fail(KILN_EIO, "cache directory %s is not a directory", dir);
  /* Read, as a read-only layer is: root's (a cache baked into an image) will do. */
  if (st.st_uid != geteuid() && !(read_only && st.st_uid == 0))
    return kiln_fail(KILN_EPERM,
                     "cache directory %s is owned by uid %u, not by you (uid %u): use a "
                     "directory of your own (--cache DIR or KILN_CACHE_DIR), or share a cache "
                     "read-only through KILN_CACHE_PATH (owned by you or root)",
                     dir, (unsigned)st.st_uid, (unsigned)geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return kiln_fail(
        KILN_EPERM, "cache directory %s is writable by %s (mode %04o): run 'chmod 700 %s'", dir,
        (st.st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(st.st_mode & 07777), dir);
  if (!read_only && access(dir, W_OK | X_OK) != 0)
    return kiln_fail_errno(KILN_EIO, errno, "cache directory %s is not writable", dir);
  return KILN_OK;
}

kiln_status kiln_index_create_schema(sqlite3 *db) {
  char pragma[64];
  kiln_status rc;
  KILN_CHECK(kiln_sql_exec(db, schema_sql, "create schema"));
  snprintf(pragma, sizeof pragma, "PRAGMA user_version=%d", KILN_CACHE_SCHEMA_VERSION);
  rc = kiln_sql_exec(db, pragma, "set schema version");
out:
  return rc;
}

kiln_status kiln_index_quick_check(sqlite3 *db, char *why, size_t cap) {
  sqlite3_stmt *st = NULL;
  int r = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL);
  if (r == SQLITE_OK) r = sqlite3_step(st);
  if (r == SQLITE_ROW) {
    const char *res = (const char *)sqlite3_column_text(st, 0);
    snprintf(why, cap, "%s", res ? res : "quick_check gave no answer");
    r = res && strcmp(res, "ok") == 0 ? SQLITE_OK : SQLITE_CORRUPT;
  } else {
    snprintf(why, cap, "%s", sqlite3_errmsg(db));
  }
  sqlite3_finalize(st);
  return r == SQLITE_OK ? KILN_OK : KILN_ECORRUPT;
}

static kiln_status schema_too_new(const char *dir, int64_t version) {
  return kiln_fail(KILN_EUNSUPPORTED,
                   "cache %s has schema %d, newer than this kiln's %d: upgrade kiln or use "
                   "another --cache",
                   dir, (int)version, KILN_CACHE_SCHEMA_VERSION);
}

static kiln_status init_schema(sqlite3 *db, const char *dir) {
  kiln_status rc;
  int64_t version = 0;
  KILN_CHECK(kiln_sql_exec(db, "BEGIN IMMEDIATE", "begin"));
  rc = kiln_sql_int(&version, NULL, db, "PRAGMA user_version", NULL, 0, "read schema version");
  if (rc != KILN_OK) goto rollback;
  if (version > KILN_CACHE_SCHEMA_VERSION) {
    rc = schema_too_new(dir, version);
    goto rollback;
  }
  if (version < KILN_CACHE_SCHEMA_VERSION) {
    rc = kiln_index_create_schema(db);
    if (rc != KILN_OK) goto rollback;
  }
  return kiln_sql_exec(db, "COMMIT", "commit schema");
rollback:
  sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
out:
  return rc;
}

/* Switching to WAL needs a moment alone with the file; other processes
 * opening the same cache at once can make it report BUSY, so retry (bounded). */
static kiln_status set_wal(sqlite3 *db) {
  kiln_status rc = KILN_OK;
  for (int i = 0; i < 200; i++) {
    rc = kiln_sql_exec(db, "PRAGMA journal_mode=WAL", "enable WAL");
    if (rc != KILN_ELOCKED) return rc;
    struct timespec ts = {0, 25 * 1000000L};
    nanosleep(&ts, NULL);
  }
  return rc;
}

/* A directory kiln may make (or keep) its cache in: one with an index, or
 * one holding nothing but what kiln itself creates. Any other file means it
 * is someone's directory (--cache ~): creating cas/, tmp/ and an index there,
 * and cleaning its tmp/, would be touching files that are not kiln's. */
static kiln_status check_kiln_dir(const char *dir) {
  static const char *const ours[] = {"cas",
                                     "tmp",
                                     "quarantine",
                                     "index.sqlite" /* made since the first look */,
                                     "index.sqlite-wal",
                                     "index.sqlite-shm",
                                     "index.sqlite-journal"};
  char path[KILN_PATH_MAX];
  struct stat st;
  DIR *d;
  struct dirent *e;
  kiln_status rc = KILN_OK;
  if (kiln_path_join(path, sizeof path, dir, "index.sqlite") != KILN_OK || lstat(path, &st) == 0)
    return KILN_OK; /* a cache (its index is checked when opened) */
  if (!(d = opendir(dir))) return kiln_fail_errno(KILN_EIO, errno, "cache directory %s", dir);
  while (rc == KILN_OK && (e = readdir(d))) {
    size_t i = 0;
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    while (i < sizeof ours / sizeof ours[0] && strcmp(e->d_name, ours[i]) != 0)
      i++;
    if (i == sizeof ours / sizeof ours[0])
      rc = kiln_fail(KILN_EINVAL,
                     "%s is not a kiln cache (no index.sqlite) and holds other files ('%s'): "
                     "name a new or empty directory, or an existing cache",
                     dir, e->d_name);
  }
  closedir(d);
  return rc;
}

/* The index's files: sqlite opens each by name, and follows (and blocks on)
 * whatever is there. */
static const char *const index_files[] = {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm",
                                          "index.sqlite-journal"};

/* Before sqlite opens dir's index: each of its files is absent or a regular
 * file this process can read. A symlink would have sqlite read and write a
 * file outside the cache (and its -wal, -shm beside that); a FIFO blocks the
 * open forever; a directory or device is no index. KILN_EPERM (kiln will
 * not open it; `kiln cache verify --repair` would not either) naming the
 * file. */
static kiln_status check_index_files(const char *dir) {
  for (size_t i = 0; i < sizeof index_files / sizeof index_files[0]; i++) {
    char p[KILN_PATH_MAX];
    struct stat st;
    int fd;
    if (snprintf(p, sizeof p, "%s/%s", dir, index_files[i]) >= (int)sizeof p)
      return kiln_fail(KILN_EINVAL, "cache path too long: %s", dir);
    if (lstat(p, &st) != 0) {
      if (errno == ENOENT) continue;
      return kiln_fail_errno(KILN_EIO, errno, "cache index file %s", p);
    }
    if (!S_ISREG(st.st_mode))
      return kiln_fail(KILN_EPERM,
                       "cache index file %s is %s, not a regular file: kiln opens none (move it "
                       "away)",
                       p, kiln_file_kind(st.st_mode));
    /* readable, without waiting on anything (it was a regular file a moment ago) */
    fd = open(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
      return kiln_fail_errno(errno == EACCES ? KILN_EPERM : KILN_EIO, errno, "cache index file %s",
                             p);
    close(fd);
  }
  return KILN_OK;
}

/* "file:<dir>/index.sqlite?mode=ro[&immutable=1]", the characters a URI
 * would read as syntax escaped. */
static kiln_status index_uri(char *uri, size_t cap, const char *dir, int immutable) {
  size_t n = (size_t)snprintf(uri, cap, "file:");
  for (const char *p = dir; *p && n + 4 < cap; p++) {
    if (*p == '%' || *p == '?' || *p == '#')
      n += (size_t)snprintf(uri + n, cap - n, "%%%02X", (unsigned char)*p);
    else
      uri[n++] = *p;
  }
  uri[n] = '\0';
  if (snprintf(uri + n, cap - n, "/index.sqlite?mode=ro%s", immutable ? "&immutable=1" : "") >=
      (int)(cap - n))
    return kiln_fail(KILN_EINVAL, "cache path too long: %s", dir);
  return KILN_OK;
}

/* Whether a read-only connection to dir's index may skip sqlite's locks
 * (immutable) because taking them would create files. A rollback-journal
 * index (an older kiln's) is read under a shared lock, which creates
 * nothing. A WAL index needs its -wal and -shm files: when both are there
 * (a writer has it open, or was killed), they are used as they are; when
 * not, sqlite would create them (and leave them behind, as a read-only
 * connection cannot remove them), so the index is read immutable. That is
 * safe while no checkpoint runs: a writer that starts meanwhile writes to the
 * -wal, not to index.sqlite, until one does (at 1000 pages, or when the last
 * writer closes); an inspection that races a checkpoint can fail with
 * sqlite's "malformed" error, and is run again. */
static int index_immutable(const char *dir) {
  char p[KILN_PATH_MAX];
  unsigned char hdr[20];
  struct stat st;
  FILE *f;
  size_t n = 0;
  if (snprintf(p, sizeof p, "%s/index.sqlite", dir) >= (int)sizeof p) return 1;
  if ((f = fopen(p, "rb"))) {
    n = fread(hdr, 1, sizeof hdr, f);
    fclose(f);
  }
  if (n == sizeof hdr && hdr[18] == 1) return 0; /* rollback journal: shared lock only */
  if (snprintf(p, sizeof p, "%s/index.sqlite-wal", dir) >= (int)sizeof p || stat(p, &st) != 0)
    return 1;
  return snprintf(p, sizeof p, "%s/index.sqlite-shm", dir) >= (int)sizeof p || stat(p, &st) != 0;
}

/* The tables an older index lacks, as empty TEMP tables (see tables[]). */
static kiln_status add_missing_tables(sqlite3 *db) {
  kiln_status rc = KILN_OK;
  for (size_t i = 0; rc == KILN_OK && i < sizeof tables / sizeof tables[0]; i++) {
    char sql[1024];
    int64_t one = 0;
    int found = 0;
    rc = kiln_sql_int(&one, &found, db,
                      "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?1",
                      SQL_ARGS(SQL_TEXT(tables[i].name)), "read schema");
    if (rc != KILN_OK || found) continue;
    snprintf(sql, sizeof sql, "CREATE TEMP TABLE %s", tables[i].decl);
    rc = kiln_sql_exec(db, sql, "read an older schema");
  }
  return rc;
}

/* A directory kiln may make a cache in but has not yet (empty, or its
 * index has no schema yet) reads as an empty cache: an index in memory. */
static kiln_status open_empty(kiln_cache *c) {
  kiln_status rc = KILN_OK;
  sqlite3_close(c->primary.db);
  c->primary.db = NULL;
  kiln_log(KILN_LOG_INFO, "cache %s has no index yet: read as empty", c->primary.dir);
  SQL_CHECK(c->primary.db,
            sqlite3_open_v2(":memory:", &c->primary.db,
                            SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL),
            "an empty index");
  rc = kiln_index_create_schema(c->primary.db);
out:
  return rc;
}

/* The read-only open: no directory, table, journal mode or file is made or
 * changed. A missing directory is KILN_ENOTFOUND; one with no index yet
 * reads as an empty cache (open_empty). */
static kiln_status open_primary_ro(kiln_cache *c) {
  char path[KILN_PATH_MAX + 64], why[512];
  const char *dir = c->primary.dir;
  int64_t version = 0;
  struct stat st;
  kiln_status rc;
  KILN_CHECK(check_dir(dir, 1));
  KILN_CHECK(check_kiln_dir(dir));
  KILN_CHECK(check_index_files(dir));
  KILN_CHECK(kiln_path_join(path, sizeof path, dir, "index.sqlite"));
  if (lstat(path, &st) != 0 ? errno == ENOENT : S_ISREG(st.st_mode) && st.st_size == 0)
    return open_empty(c);
  /* On a shared file system the -shm another host maps is not this one's:
   * read index.sqlite alone, never making or using a -wal or -shm there. */
  if (c->primary.fs.shared) kiln_cache_note_shared_read(dir, &c->primary.fs, "cache");
  KILN_CHECK(index_uri(path, sizeof path, dir, c->primary.fs.shared || index_immutable(dir)));
  SQL_CHECK(c->primary.db,
            sqlite3_open_v2(path, &c->primary.db,
                            SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX |
                                SQLITE_OPEN_NOFOLLOW,
                            NULL),
            path);
  sqlite3_busy_timeout(c->primary.db, 30000);
  if (kiln_index_quick_check(c->primary.db, why, sizeof why) != KILN_OK) {
    rc = kiln_fail(KILN_ECORRUPT,
                   "cache index %s/index.sqlite is corrupt (PRAGMA quick_check: %s): builds and "
                   "loads from it fail; fix with `kiln cache verify --repair --cache %s`",
                   dir, why, dir);
    goto out;
  }
  KILN_CHECK(kiln_sql_int(&version, NULL, c->primary.db, "PRAGMA user_version", NULL, 0,
                          "read schema version"));
  if (version > KILN_CACHE_SCHEMA_VERSION) {
    rc = schema_too_new(dir, version);
    goto out;
  }
  rc = version < 1 ? open_empty(c) : add_missing_tables(c->primary.db);
out:
  return rc;
}

/* mkdir path (0700) unless it is there as a directory of its own. */
static kiln_status own_dir(const char *path) {
  kiln_status rc = kiln_real_dir(path);
  return rc == KILN_ENOTFOUND ? kiln_mkdir(path, 0700) : rc;
}

static kiln_status open_primary(kiln_cache *c, int create) {
  char path[KILN_PATH_MAX];
  kiln_status rc;
  KILN_CHECK(kiln_path_join(c->cas_dir, sizeof c->cas_dir, c->primary.dir, "cas"));
  KILN_CHECK(kiln_path_join(c->tmp_dir, sizeof c->tmp_dir, c->primary.dir, "tmp"));
  KILN_CHECK(
      kiln_path_join(c->quarantine_dir, sizeof c->quarantine_dir, c->primary.dir, "quarantine"));
  /* before anything is made: a failed probe leaves the checks below to say why */
  if (kiln_fs_probe(c->primary.dir, &c->primary.fs) != KILN_OK)
    memset(&c->primary.fs, 0, sizeof c->primary.fs);
  if (c->read_only) return open_primary_ro(c);
  if (c->primary.fs.shared) return kiln_cache_refuse_shared(c->primary.dir, &c->primary.fs);
  if (create) KILN_CHECK(kiln_mkdir_p(c->primary.dir, 0700));
  KILN_CHECK(check_dir(c->primary.dir, 0));
  KILN_CHECK(check_kiln_dir(c->primary.dir));
  /* kiln writes, moves and removes files in these: each must be the cache's
   * own directory, never a link to another */
  KILN_CHECK(own_dir(c->cas_dir));
  KILN_CHECK(own_dir(c->tmp_dir));
  KILN_CHECK(own_dir(c->quarantine_dir));
  KILN_CHECK(check_index_files(c->primary.dir));
  KILN_CHECK(kiln_path_join(path, sizeof path, c->primary.dir, "index.sqlite"));
  SQL_CHECK(c->primary.db,
            sqlite3_open_v2(path, &c->primary.db,
                            SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX |
                                SQLITE_OPEN_NOFOLLOW,
                            NULL),
            path);
  sqlite3_busy_timeout(c->primary.db, 30000);
  KILN_CHECK(set_wal(c->primary.db));
  KILN_CHECK(kiln_sql_exec(c->primary.db, "PRAGMA synchronous=NORMAL", "set synchronous"));
  rc = init_schema(c->primary.db, c->primary.dir);
out:
  return rc;
}

/* KILN_OK when the layer's records table is one this kiln reads (schema 1,
 * the first, up to this kiln's: later schemas only added tables),
 * KILN_EUNSUPPORTED if not, or the sqlite failure (its message stays on db). */
static kiln_status layer_schema(sqlite3 *db) {
  int64_t version = 0;
  kiln_status rc;
  KILN_CHECK(
      kiln_sql_int(&version, NULL, db, "PRAGMA user_version", NULL, 0, "read schema version"));
  if (version < 1 || version > KILN_CACHE_SCHEMA_VERSION) {
    rc = kiln_fail(KILN_EUNSUPPORTED, "cache schema %d is not this kiln's", (int)version);
    goto out;
  }
  rc = kiln_sql_exec(db, "SELECT " KILN_RECORD_COLUMNS " FROM records LIMIT 1", "read records");
out:
  return rc;
}

int kiln_layer_trusted(const char *dir, char *why, size_t cap) {
  static const char *const parts[] = {"", "/index.sqlite", "/cas"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    char p[KILN_PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s%s", dir, parts[i]);
    if (stat(p, &st) != 0) {
      if (i == 2 && errno == ENOENT) continue; /* a layer with no blobs */
      snprintf(why, cap, "%s: %s", p, strerror(errno));
      return 0;
    }
    if (st.st_uid != geteuid() && st.st_uid != 0) {
      snprintf(why, cap,
               "%s is owned by uid %u (neither you, uid %u, nor root): whoever owns it could "
               "plant code",
               p, (unsigned)st.st_uid, (unsigned)geteuid());
      return 0;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
      snprintf(why, cap, "%s is writable by %s (mode %04o): anyone there could plant code", p,
               (st.st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(st.st_mode & 07777));
      return 0;
    }
  }
  return 1;
}

/* Notes a layer that is not opened, and why, for the probes. */
static void skip_layer(kiln_cache *c, const char *dir, const char *why, int untrusted) {
  kiln_log(KILN_LOG_WARN, "read-only cache layer %s skipped: %s", dir, why);
  if (c->n_skipped == KILN_MAX_LAYERS) return;
  snprintf(c->skipped[c->n_skipped].dir, sizeof c->skipped[0].dir, "%s", dir);
  snprintf(c->skipped[c->n_skipped].why, sizeof c->skipped[0].why, "%s", why);
  c->skipped[c->n_skipped++].untrusted = untrusted;
}

/* Read-only layers are opened immutable: nothing is written, no lock taken,
 * so a cache baked into a read-only image layer works as it is. */
static void open_layer(kiln_cache *c, const char *dir) {
  char uri[KILN_PATH_MAX + 64], why[512];
  kiln_layer *l;
  kiln_status rc;
  int r, immutable;
  if (c->n_layers == KILN_MAX_LAYERS) {
    kiln_log(KILN_LOG_WARN, "more than %d read-only cache layers: skipping %s", KILN_MAX_LAYERS,
             dir);
    return;
  }
  if (!kiln_layer_trusted(dir, why, sizeof why)) {
    skip_layer(c, dir, why, 1);
    return;
  }
  if (check_index_files(dir) != KILN_OK) {
    skip_layer(c, dir, kiln_last_error(), 0);
    return;
  }
  l = &c->layers[c->n_layers];
  memset(l, 0, sizeof *l);
  snprintf(l->dir, sizeof l->dir, "%s", dir);
  /* immutable skips locking and the WAL; a layer whose writer is still open
   * (or was killed) has committed rows in index.sqlite-wal, so read it as a
   * plain read-only database then. A cache baked into an image has no WAL:
   * the last writer to close checkpoints it into index.sqlite. Not on a
   * shared file system, whose -shm is another host's (or unknown: immutable
   * is the safe read). */
  if (kiln_fs_probe(dir, &l->fs) != KILN_OK) l->fs.shared = 1;
  immutable = l->fs.shared || !kiln_index_wal_pending(dir);
  if (l->fs.shared)
    kiln_cache_note_shared_read(dir, &l->fs, "read-only cache layer");
  else if (!immutable)
    kiln_log(KILN_LOG_INFO,
             "read-only cache layer %s has a write-ahead log: opened without "
             "immutable",
             dir);
  if (index_uri(uri, sizeof uri, dir, immutable) != KILN_OK) {
    kiln_log(KILN_LOG_WARN, "read-only cache layer %s: path too long, skipped", dir);
    return;
  }
  r = sqlite3_open_v2(uri, &l->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOFOLLOW,
                      NULL);
  rc = r == SQLITE_OK ? layer_schema(l->db) : KILN_EDB;
  if (rc != KILN_OK) {
    skip_layer(c, dir,
               rc == KILN_EUNSUPPORTED ? "its cache schema is not this kiln's"
               : l->db                 ? sqlite3_errmsg(l->db)
                                       : sqlite3_errstr(r),
               0);
    sqlite3_close(l->db);
    l->db = NULL;
    return;
  }
  c->n_layers++;
}

/* The same directory however it is spelled (trailing slash, symlink). */
static int same_dir(const char *a, const char *b) {
  struct stat sa, sb;
  if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return strcmp(a, b) == 0;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static void open_layers(kiln_cache *c, const char *path) {
  const char *p = path;
  while (p && *p) {
    const char *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    char dir[KILN_PATH_MAX];
    if (len && len < sizeof dir) {
      memcpy(dir, p, len);
      dir[len] = '\0';
      if (!same_dir(dir, c->primary.dir)) open_layer(c, dir);
    }
    p = colon ? colon + 1 : NULL;
  }
}

/* 128 random bits as hex: tells this handle's leases from every other's,
 * even another handle of the same process. */
static kiln_status new_token(char out[33]) {
  unsigned char b[16];
  ssize_t n = getrandom(b, sizeof b, 0);
  if (n != (ssize_t)sizeof b) return kiln_fail_errno(KILN_EIO, errno, "getrandom");
  for (int i = 0; i < 16; i++)
    snprintf(out + 2 * i, 3, "%02x", b[i]);
  return KILN_OK;
}

/* Not KILN_DEFINE_OPTIONS_INIT: a caller of version 1 has a struct that
 * ends before read_only, and no byte past it may be written. */
kiln_status kiln_cache_options_init(kiln_cache_options *opts, int version) {
  static const kiln_cache_options init = KILN_CACHE_OPTIONS_INIT;
  size_t size = version >= 2 ? sizeof init : offsetof(kiln_cache_options, read_only);
  return kiln_options_init(opts, &init, size, version, KILN_CACHE_OPTIONS_VERSION,
                           "kiln_cache_options");
}

kiln_status kiln_cache_open(kiln_cache **out, const kiln_cache_options *opts) {
  kiln_cache_options dflt = KILN_CACHE_OPTIONS_INIT;
  kiln_cache *c;
  kiln_status rc;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_cache_open: out is NULL");
  *out = NULL;
  if (!opts) opts = &dflt;
  rc = kiln_options_check(opts->version, KILN_CACHE_OPTIONS_VERSION, "kiln_cache_options");
  if (rc != KILN_OK) return rc;
  c = calloc(1, sizeof *c);
  if (!c) return kiln_fail(KILN_ENOMEM, "out of memory");
  pthread_mutex_init(&c->lock, NULL);
  kiln_host_name(c->host, sizeof c->host);
  KILN_CHECK(new_token(c->token));
  if (opts->dir && !*opts->dir) {
    rc = kiln_fail(KILN_EINVAL, "the cache directory is an empty path (name a directory; unset, "
                                "KILN_CACHE_DIR or the default is used)");
    goto out;
  }
  if (opts->dir) {
    if (snprintf(c->primary.dir, sizeof c->primary.dir, "%s", opts->dir) >=
        (int)sizeof c->primary.dir) {
      rc = kiln_fail(KILN_EINVAL, "cache path too long");
      goto out;
    }
  } else { /* the default may move off a shared file system (cache/store_fs.c) */
    KILN_CHECK(kiln_cache_default_dir(c->primary.dir, sizeof c->primary.dir, NULL, 0));
  }
  /* version 1's struct ends before read_only */
  c->read_only = opts->version >= 2 && opts->read_only;
  KILN_CHECK(open_primary(c, opts->create));
  open_layers(c, kiln_option_str(opts->ro_path, KILN_P_cache_path));
  KILN_CHECK(kiln_cache_set_remote(c, opts->remote));
  *out = c;
  c = NULL;
out:
  kiln_cache_close(c);
  return rc;
}

void kiln_cache_close(kiln_cache *c) {
  if (!c) return;
  kiln_remote_close(c->remote);
  /* Fold the WAL into index.sqlite so the directory can serve as a read-only
   * (immutable) layer as it is; best effort when others still have it open. */
  if (c->primary.db && !c->read_only) {
    /* No waiting: a reader elsewhere (a training process) must not hold up exit. */
    sqlite3_busy_timeout(c->primary.db, 0);
    sqlite3_exec(c->primary.db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
  }
  sqlite3_close(c->primary.db);
  for (size_t i = 0; i < c->n_layers; i++)
    sqlite3_close(c->layers[i].db);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

const char *kiln_cache_dir(const kiln_cache *c) {
  return c->primary.dir;
}
