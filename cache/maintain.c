/* Listing, statistics, verification, garbage collection and removal. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/entries.h" /* kiln_image_missing_entry */
#include "cache/lease.h"
#include "cache/store.h"
#include "common/clock.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/logging.h"

/* A temp file younger than this may belong to a writer on another host. */
#define TMP_GRACE_S 3600
/* An unreferenced blob younger than this may be a put whose record is on its way. */
#define ORPHAN_GRACE_S 600

/* st is NULL for an entry of cas/ that is not walked (not a directory of its
 * own): digest is then kiln_last_error(), which names it and says why. */
typedef void (*blob_fn)(const char *path, const char *digest, const struct stat *st, void *user);

/* The directory at path, opened only when it is one of its own (never
 * through a symlink: a cas/xx, tmp/ or quarantine/ pointing elsewhere would
 * have gc remove, verify move and stats count files that are not the
 * cache's); else NULL, warned about naming it unless it is absent. */
static DIR *open_own_dir(const char *path) {
  kiln_status rc = kiln_real_dir(path);
  DIR *d = NULL;
  if (rc == KILN_OK && !(d = opendir(path))) rc = kiln_fail_errno(KILN_EIO, errno, "open %s", path);
  if (rc != KILN_OK && rc != KILN_ENOTFOUND)
    kiln_log(KILN_LOG_WARN, "cache: %s; skipped", kiln_last_error());
  return d;
}

/* Calls fn for every file under cas/<2 hex>/; digest is "" for names that are
 * not a digest. An entry of cas/ that is not a directory of its own is
 * reported (fn with st NULL, and a warning) and never walked. */
static kiln_status walk_cas(kiln_cache *c, blob_fn fn, void *user) {
  kiln_status rc = kiln_real_dir(c->cas_dir);
  struct dirent *d;
  DIR *top;
  if (rc != KILN_OK) return rc == KILN_ENOTFOUND ? KILN_OK : rc; /* absent: no blobs yet */
  if (!(top = opendir(c->cas_dir))) return kiln_fail_errno(KILN_EIO, errno, "open %s", c->cas_dir);
  while ((d = readdir(top))) {
    char sub[KILN_PATH_MAX];
    DIR *in;
    struct dirent *e;
    if (d->d_name[0] == '.') continue;
    if (snprintf(sub, sizeof sub, "%s/%s", c->cas_dir, d->d_name) >= (int)sizeof sub) continue;
    if (!(in = open_own_dir(sub))) {
      fn(sub, kiln_last_error(), NULL, user);
      continue;
    }
    while ((e = readdir(in))) {
      char path[KILN_PATH_MAX], digest[65] = "";
      struct stat st;
      if (e->d_name[0] == '.') continue;
      if (snprintf(path, sizeof path, "%s/%s", sub, e->d_name) >= (int)sizeof path) continue;
      if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (strlen(d->d_name) == 2 && strlen(e->d_name) == 62) {
        snprintf(digest, sizeof digest, "%.2s%.62s", d->d_name, e->d_name);
        if (!kiln_is_hex64(digest)) digest[0] = '\0';
      }
      fn(path, digest, &st, user);
    }
    closedir(in);
  }
  closedir(top);
  return KILN_OK;
}

static uint64_t count_files(const char *dir) {
  DIR *d = open_own_dir(dir);
  struct dirent *e;
  uint64_t n = 0;
  if (!d) return 0;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* An aggregate (count, sum): one row, always. */
static kiln_status query_u64(uint64_t *out, sqlite3 *db, const char *sql, const kiln_sql_arg *args,
                             size_t n) {
  int64_t v = 0;
  kiln_status rc = kiln_sql_int(&v, NULL, db, sql, args, n, "count");
  if (rc == KILN_OK) *out = (uint64_t)v;
  return rc;
}

#define BY_NAME "unit, target"
#define BY_LRU "last_used, created"

/* Appends the records of one layer, ordered by `order` (BY_NAME or BY_LRU). */
static kiln_status list_layer(sqlite3 *db, int layer, const char *order, kiln_record **v, size_t *n,
                              size_t *cap) {
  char sql[256];
  sqlite3_stmt *st = NULL;
  kiln_status rc;
  int row = 0;
  snprintf(sql, sizeof sql, "SELECT " KILN_RECORD_COLUMNS " FROM records ORDER BY %s", order);
  KILN_CHECK(kiln_sql_prepare(&st, db, sql, NULL, 0, "list records"));
  for (;;) {
    kiln_record rec;
    KILN_CHECK(kiln_sql_step(&row, st, "list records"));
    if (!row) break;
    kiln_record_from_row(&rec, st, layer);
    KILN_CHECK(kiln_record_push(v, n, cap, &rec));
  }
out:
  sqlite3_finalize(st);
  return rc;
}

kiln_status kiln_cache_list(kiln_record **out, size_t *n, kiln_cache *c) {
  kiln_record *v = NULL;
  size_t cnt = 0, cap = 0;
  kiln_status rc = list_layer(c->primary.db, 0, BY_NAME, &v, &cnt, &cap);
  for (size_t i = 0; rc == KILN_OK && i < c->n_layers; i++) {
    size_t before = cnt;
    if (list_layer(c->layers[i].db, (int)i + 1, BY_NAME, &v, &cnt, &cap) == KILN_OK) continue;
    kiln_log(KILN_LOG_WARN, "read-only layer %s: %s; skipped", c->layers[i].dir, kiln_last_error());
    cnt = before;
  }
  if (rc != KILN_OK) {
    free(v);
    return rc;
  }
  *out = v;
  *n = cnt;
  return KILN_OK;
}

static void stat_blob(const char *path, const char *digest, const struct stat *st, void *user) {
  kiln_cache_stats *s = user;
  (void)path;
  (void)digest;
  if (!st) return;
  s->blobs++;
  s->blob_bytes += (uint64_t)st->st_size;
}

kiln_status kiln_cache_stats_get(kiln_cache_stats *out, kiln_cache *c) {
  kiln_status rc;
  memset(out, 0, sizeof *out);
  KILN_CHECK(query_u64(&out->records, c->primary.db, "SELECT count(*) FROM records", NULL, 0));
  KILN_CHECK(query_u64(&out->failures, c->primary.db,
                       "SELECT count(*) FROM failures WHERE expires > ?1",
                       SQL_ARGS(SQL_INT(kiln_now_s()))));
  KILN_CHECK(walk_cas(c, stat_blob, out));
  out->quarantined = count_files(c->quarantine_dir);
  out->layers = c->n_layers;
  for (size_t i = 0; i < c->n_layers; i++) {
    uint64_t n = 0;
    KILN_CHECK(query_u64(&n, c->layers[i].db, "SELECT count(*) FROM records", NULL, 0));
    out->layer_records += n;
  }
out:
  return rc;
}

static kiln_status layer_info(sqlite3 *db, const char *dir, int layer, kiln_cache_layer_info *out) {
  kiln_status rc;
  memset(out, 0, sizeof *out);
  out->layer = layer;
  snprintf(out->path, sizeof out->path, "%s", dir);
  out->writable = layer == 0 && access(dir, W_OK) == 0;
  KILN_CHECK(query_u64(&out->records, db, "SELECT count(*) FROM records", NULL, 0));
  KILN_CHECK(query_u64(&out->bytes, db, "SELECT coalesce(sum(size), 0) FROM records", NULL, 0));
out:
  return rc;
}

kiln_status kiln_cache_layers(kiln_cache_layer_info **out, size_t *n, kiln_cache *c) {
  kiln_cache_layer_info *v;
  kiln_status rc;
  if (!c || !out || !n) return kiln_fail(KILN_EINVAL, "kiln_cache_layers: NULL argument");
  *out = NULL;
  *n = 0;
  if (!(v = calloc(c->n_layers + 1, sizeof *v))) return kiln_fail(KILN_ENOMEM, "out of memory");
  pthread_mutex_lock(&c->lock);
  rc = layer_info(c->primary.db, c->primary.dir, 0, &v[0]);
  pthread_mutex_unlock(&c->lock);
  for (size_t i = 0; rc == KILN_OK && i < c->n_layers; i++)
    rc = layer_info(c->layers[i].db, c->layers[i].dir, (int)i + 1, &v[i + 1]);
  if (rc != KILN_OK) {
    free(v);
    return rc;
  }
  *out = v;
  *n = c->n_layers + 1;
  return KILN_OK;
}

/* ---- verify ---- */

typedef struct verify_ctx {
  kiln_cache *c;
  kiln_cache_verify_report *r;
  kiln_status rc;
} verify_ctx;

static void add_issue(verify_ctx *v, const char *path, const char *what) {
  kiln_cache_verify_issue *ni = realloc(v->r->issues, (v->r->n_issues + 1) * sizeof *ni);
  v->r->bad++;
  if (!ni) {
    v->rc = kiln_fail(KILN_ENOMEM, "out of memory");
    return;
  }
  v->r->issues = ni;
  snprintf(ni[v->r->n_issues].path, sizeof ni->path, "%s", path);
  snprintf(ni[v->r->n_issues].what, sizeof ni->what, "%s", what);
  v->r->n_issues++;
}

static void verify_blob(const char *path, const char *digest, const struct stat *st, void *user) {
  verify_ctx *v = user;
  kiln_status rc;
  if (!st) { /* a cas/ entry that is no directory of its own: left as it is */
    add_issue(v, path, digest);
    return;
  }
  v->r->checked++;
  if (!digest[0]) {
    add_issue(v, path, "file name is not a content digest");
    return;
  }
  rc = kiln_blob_read(v->c->primary.dir, digest, UINT64_MAX, NULL, NULL);
  if (rc == KILN_OK) return;
  add_issue(v, path,
            rc == KILN_ECORRUPT ? "content does not match its digest (quarantined)"
                                : kiln_last_error());
  if (rc == KILN_ECORRUPT) kiln_blob_quarantine(v->c, digest, "verify: digest mismatch", 0);
}

/* A record of the primary layer as its row is, for verify. */
typedef struct verify_row {
  kiln_record rec;
  int64_t rowid;
  char why[160]; /* "" when the row can be held by a kiln_record as it is */
} verify_row;

static kiln_status list_rows(sqlite3 *db, verify_row **v, size_t *n) {
  static const char *sql = "SELECT " KILN_RECORD_COLUMNS ", rowid FROM records ORDER BY " BY_NAME;
  sqlite3_stmt *st = NULL;
  size_t cap = 0;
  kiln_status rc;
  int row = 0;
  KILN_CHECK(kiln_sql_prepare(&st, db, sql, NULL, 0, "list records"));
  for (;;) {
    verify_row r;
    KILN_CHECK(kiln_sql_step(&row, st, "list records"));
    if (!row) break;
    kiln_record_from_row(&r.rec, st, 0);
    r.rowid = sqlite3_column_int64(st, sqlite3_column_count(st) - 1);
    if (!kiln_record_row_bad(st, r.why, sizeof r.why)) r.why[0] = '\0';
    if (*n == cap) {
      verify_row *nv = realloc(*v, (cap = cap ? cap * 2 : 64) * sizeof *nv);
      if (!nv) {
        rc = kiln_fail(KILN_ENOMEM, "out of memory");
        goto out;
      }
      *v = nv;
    }
    (*v)[(*n)++] = r;
  }
out:
  sqlite3_finalize(st);
  return rc;
}

/* Drops the record of r (by its rowid) and reports it with why. */
static void drop_row(verify_ctx *v, const verify_row *r, const char *why) {
  char path[KILN_PATH_MAX], what[512];
  int gone = 0;
  snprintf(path, sizeof path, "record %s (%s %s)", r->rec.key, r->rec.unit, r->rec.target);
  if (kiln_record_drop(&gone, v->c, r->rec.key, r->rowid, NULL) == KILN_OK)
    snprintf(what, sizeof what, "%s (record dropped)", why);
  else
    snprintf(what, sizeof what, "%s (dropping the record failed: %s)", why, kiln_last_error());
  add_issue(v, path, what);
}

/* A record whose blob verifies but is another unit's image (it lacks one of
 * its unit's entry points, cache/entries.h): dropped, the blob kept (it is
 * good for its own unit). A unit this kiln does not know is not judged. */
static void verify_entries(verify_ctx *v, const verify_row *r) {
  const kiln_unit_info *unit = kiln_unit_find(r->rec.unit);
  const char *missing;
  uint8_t *bytes = NULL;
  size_t len = 0;
  char why[256];
  if (!unit ||
      kiln_blob_read(v->c->primary.dir, r->rec.digest, r->rec.size, &bytes, &len) != KILN_OK)
    return; /* a bad blob is the walk's to report */
  missing = kiln_image_missing_entry(bytes, len, r->rec.kind, unit);
  if (missing) {
    snprintf(why, sizeof why, "its blob %.12s has no entry point %s: not %s's image", r->rec.digest,
             missing, r->rec.unit);
    drop_row(v, r, why);
  }
  free(bytes);
}

/* Records nothing can use: a row a kiln_record cannot hold, a digest that
 * is not one, a blob missing or of another size than the record's, another
 * unit's image. Each is reported and dropped, so the next verify is clean. */
static void verify_records(verify_ctx *v) {
  verify_row *rows = NULL;
  size_t n = 0;
  if (list_rows(v->c->primary.db, &rows, &n) != KILN_OK) {
    v->rc = KILN_EDB;
    free(rows);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    const verify_row *r = &rows[i];
    char path[KILN_PATH_MAX], why[256];
    struct stat st;
    int lr;
    if (r->why[0]) { /* cut, of another type or NULL: it names no blob it can be trusted with */
      drop_row(v, r, r->why);
      continue;
    }
    if (!kiln_is_hex64(r->rec.digest)) {
      /* unservable for good: every build would fail on it ("not a SHA-256 digest") */
      drop_row(v, r, "its digest is not 64 lowercase hex digits");
      continue;
    }
    if (kiln_blob_path(path, sizeof path, v->c->primary.dir, r->rec.digest) != KILN_OK) {
      /* cas/ or its fan-out is not a directory of its own: reported by the
       * walk, and nothing is moved through it */
      continue;
    }
    lr = lstat(path, &st); /* the blob itself, never a link's target */
    if (lr == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == r->rec.size) {
      verify_entries(v, r);
      continue;
    }
    if (lr != 0) {
      add_issue(v, path, "record's blob is missing (record dropped)");
    } else if (!S_ISREG(st.st_mode)) {
      add_issue(v, path, "blob is not a regular file (a symlink, FIFO or directory; quarantined)");
    } else if (kiln_blob_read(v->c->primary.dir, r->rec.digest, UINT64_MAX, NULL, NULL) ==
               KILN_OK) {
      /* the blob is intact, the record is not: only the record goes */
      snprintf(why, sizeof why, "its size is %llu, but its blob %.12s, intact, has %llu bytes",
               (unsigned long long)r->rec.size, r->rec.digest, (unsigned long long)st.st_size);
      drop_row(v, r, why);
      continue;
    } else {
      add_issue(v, path, "blob size differs from the record (truncated; quarantined)");
    }
    kiln_blob_quarantine(v->c, r->rec.digest, "verify: missing, not a file or truncated", 0);
    kiln_record_drop(&(int){0}, v->c, r->rec.key, r->rowid, NULL); /* whatever the move did */
  }
  free(rows);
}

/* 6 characters mkstemp may write */
static int mkstemp_suffix(const char *p) {
  size_t n = 0;
  for (; p[n]; n++)
    if (!isalnum((unsigned char)p[n])) return 0;
  return n == 6;
}

/* The temp names kiln writes in tmp/: 1 for tmp.<pid>.<host>.XXXXXX
 * (common/fileio.c), 2 for import-XXXXXX, remote-XXXXXX and repair-XXXXXX
 * (cache/import.c, cache/remote/fetch.c, cache/repair.c); 0 for any other
 * name. */
static int tmp_name_kind(const char *name) {
  const char *dot;
  if (strncmp(name, "import-", 7) == 0) return mkstemp_suffix(name + 7) ? 2 : 0;
  if (strncmp(name, "remote-", 7) == 0) return mkstemp_suffix(name + 7) ? 2 : 0;
  if (strncmp(name, "repair-", 7) == 0) return mkstemp_suffix(name + 7) ? 2 : 0;
  if (strncmp(name, "tmp.", 4) != 0 || !isdigit((unsigned char)name[4])) return 0;
  dot = strrchr(name, '.');
  return dot && dot > name + 4 && mkstemp_suffix(dot + 1) ? 1 : 0;
}

/* Temp files of writers that are gone (killed mid-write) are debris: named
 * tmp.<pid>.<host>.<random>, one is removed when it is a minute old and its
 * pid is gone on this host (the minute covers a live writer in another pid
 * namespace with the same host name), or when it is older than TMP_GRACE_S. */
static void clean_tmp(kiln_cache *c) {
  DIR *d;
  struct dirent *e;
  char host[256];
  int64_t now = kiln_now_s();
  /* only a real tmp/ directory: through a symlink it would be another's files */
  if (!(d = open_own_dir(c->tmp_dir))) return;
  kiln_host_name(host, sizeof host);
  while ((e = readdir(d))) {
    char path[KILN_PATH_MAX];
    struct stat st;
    long pid = 0;
    int off = 0;
    int64_t age;
    const int kind = tmp_name_kind(e->d_name);
    if (!kind) continue; /* not a name kiln writes: never kiln's to remove */
    if (snprintf(path, sizeof path, "%s/%s", c->tmp_dir, e->d_name) >= (int)sizeof path) continue;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    age = now - (int64_t)st.st_mtime;
    if (age > TMP_GRACE_S) {
      unlink(path);
      continue;
    }
    if (kind != 1 || age < 60 || sscanf(e->d_name, "tmp.%ld.%n", &pid, &off) != 1 || off == 0 ||
        pid <= 0)
      continue;
    if (strncmp(e->d_name + off, host, strlen(host)) != 0 || e->d_name[off + strlen(host)] != '.')
      continue;
    if (pid != (long)getpid() && kiln_pid_gone(pid)) unlink(path);
  }
  closedir(d);
}

/* sqlite's own check of the index. A corrupt one is the only issue
 * reported: what the rest would do (drop records, quarantine blobs) rests on
 * reading the index, and kiln_cache_repair is the fix. 1 when corrupt. */
static int index_corrupt(verify_ctx *v) {
  char path[KILN_PATH_MAX + 16], why[96], what[sizeof v->r->issues->what];
  if (kiln_index_quick_check(v->c->primary.db, why, sizeof why) == KILN_OK) return 0;
  snprintf(path, sizeof path, "%s/index.sqlite", v->c->primary.dir);
  snprintf(what, sizeof what, "index corrupt (%s)", why);
  add_issue(v, path, what);
  return 1;
}

kiln_status kiln_cache_verify(kiln_cache_verify_report *out, kiln_cache *c) {
  verify_ctx v = {c, out, KILN_OK};
  kiln_status rc;
  memset(out, 0, sizeof *out);
  KILN_CHECK(kiln_cache_writable(c, "verify (it quarantines what it finds)"));
  if (index_corrupt(&v)) goto done;
  clean_tmp(c);
  KILN_CHECK(walk_cas(c, verify_blob, &v));
  verify_records(&v);
done:
  rc = v.rc;
out:
  return rc;
}

void kiln_cache_verify_report_free(kiln_cache_verify_report *r) {
  if (!r) return;
  free(r->issues);
  memset(r, 0, sizeof *r);
}

/* ---- gc and rm ---- */

typedef struct blob_list {
  char (*digest)[65];
  uint64_t *size;
  int64_t *mtime;
  size_t n, cap;
  uint64_t total;
} blob_list;

static void collect_blob(const char *path, const char *digest, const struct stat *st, void *user) {
  blob_list *b = user;
  (void)path;
  if (!st) return;
  b->total += (uint64_t)st->st_size;
  if (!digest[0]) return;
  if (b->n == b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 256;
    void *d = realloc(b->digest, nc * sizeof *b->digest);
    if (!d) return;
    b->digest = d;
    if (!(d = realloc(b->size, nc * sizeof *b->size))) return;
    b->size = d;
    if (!(d = realloc(b->mtime, nc * sizeof *b->mtime))) return;
    b->mtime = d;
    b->cap = nc;
  }
  snprintf(b->digest[b->n], 65, "%s", digest);
  b->size[b->n] = (uint64_t)st->st_size;
  b->mtime[b->n++] = (int64_t)st->st_mtime;
}

static void blob_list_free(blob_list *b) {
  free(b->digest);
  free(b->size);
  free(b->mtime);
}

static int referenced(sqlite3 *db, const char *digest) {
  static const char *sql = "SELECT 1 FROM records WHERE digest = ?1 OR log_digest = ?1 LIMIT 1";
  int64_t one;
  int found = 0;
  if (kiln_sql_int(&one, &found, db, sql, SQL_ARGS(SQL_TEXT(digest)), "look up blob users") !=
      KILN_OK)
    return 1; /* on error, keep the blob */
  return found;
}

/* Deletes blobs no record references and older than the grace period: a
 * younger one may be a put whose record is on its way. Returns bytes freed. */
static uint64_t drop_orphans(kiln_cache *c, uint64_t *removed) {
  blob_list b = {0};
  uint64_t freed = 0;
  int64_t now = kiln_now_s();
  walk_cas(c, collect_blob, &b);
  for (size_t i = 0; i < b.n; i++) {
    char path[KILN_PATH_MAX];
    struct stat st;
    if (now - b.mtime[i] < ORPHAN_GRACE_S) continue;
    if (kiln_blob_path(path, sizeof path, c->primary.dir, b.digest[i]) != KILN_OK) continue;
    if (kiln_txn_begin(c, "gc") != KILN_OK) break;
    /* Re-checked under the write lock: a put may have reused it meanwhile. */
    if (!referenced(c->primary.db, b.digest[i]) && lstat(path, &st) == 0 &&
        now - (int64_t)st.st_mtime >= ORPHAN_GRACE_S && unlink(path) == 0) {
      freed += b.size[i];
      if (removed) (*removed)++;
    }
    kiln_txn_end(c, KILN_OK, "gc");
  }
  blob_list_free(&b);
  return freed;
}

/* Deletes a blob the index no longer references; adds what it freed. */
static void drop_unreferenced(kiln_cache *c, const char *digest, uint64_t *freed,
                              uint64_t *removed) {
  char path[KILN_PATH_MAX];
  struct stat st;
  if (!digest[0] || referenced(c->primary.db, digest)) return;
  if (kiln_blob_path(path, sizeof path, c->primary.dir, digest) != KILN_OK) return;
  if (lstat(path, &st) != 0 || unlink(path) != 0) return;
  *freed += (uint64_t)st.st_size;
  (*removed)++;
}

/* A pin from a live process on this host, or a recent one from another host
 * (whose pid cannot be checked from here). */
static int pinned(kiln_cache *c, const char *key) {
  char host[256];
  sqlite3_stmt *st = NULL;
  int live = 0, row = 0;
  kiln_host_name(host, sizeof host);
  if (kiln_sql_prepare(&st, c->primary.db, "SELECT host, pid, created FROM pins WHERE key = ?1",
                       SQL_ARGS(SQL_TEXT(key)), "look up pins") != KILN_OK)
    return 1; /* on error, keep the record */
  while (!live && kiln_sql_step(&row, st, "look up pins") == KILN_OK && row) {
    const char *h = (const char *)sqlite3_column_text(st, 0);
    if (h && strcmp(h, host) == 0)
      live = !kiln_pid_gone((long)sqlite3_column_int64(st, 1));
    else
      live = kiln_now_s() - sqlite3_column_int64(st, 2) < 24 * 3600;
  }
  sqlite3_finalize(st);
  return live;
}

/* Deletes a record, then its artifact and log blobs unless another record
 * shares them, in one write transaction (so a put cannot slip its record in
 * between the check and the unlink). With check_pin, a pinned record is kept
 * and KILN_ELOCKED returned. */
static kiln_status remove_record(kiln_cache *c, const kiln_record *rec, int check_pin,
                                 uint64_t *freed, uint64_t *removed_blobs) {
  kiln_status rc = kiln_txn_begin(c, "remove record");
  if (rc != KILN_OK) return rc;
  if (check_pin && pinned(c, rec->key)) {
    kiln_txn_end(c, KILN_OK, "remove record");
    return KILN_ELOCKED;
  }
  rc = kiln_sql_run(c->primary.db, "DELETE FROM records WHERE key = ?1",
                    SQL_ARGS(SQL_TEXT(rec->key)), "delete record");
  if (rc == KILN_OK) {
    drop_unreferenced(c, rec->digest, freed, removed_blobs);
    drop_unreferenced(c, rec->log_digest, freed, removed_blobs);
  }
  return kiln_txn_end(c, rc, "remove record");
}

kiln_status kiln_cache_gc(kiln_cache_gc_report *out, kiln_cache *c, uint64_t max_bytes) {
  kiln_record *recs = NULL;
  size_t n = 0, cap = 0;
  blob_list b = {0};
  uint64_t total;
  kiln_status rc;
  memset(out, 0, sizeof *out);
  out->freed_bytes = drop_orphans(c, &out->removed_blobs);
  KILN_CHECK(walk_cas(c, collect_blob, &b));
  total = b.total;
  KILN_CHECK(list_layer(c->primary.db, 0, BY_LRU, &recs, &n, &cap));
  for (size_t i = 0; i < n && total > max_bytes; i++) {
    uint64_t freed = 0;
    rc = remove_record(c, &recs[i], 1, &freed, &out->removed_blobs);
    if (rc == KILN_ELOCKED) {
      out->pinned_skipped++;
      continue;
    }
    if (rc != KILN_OK) goto out;
    out->removed_records++;
    out->freed_bytes += freed;
    total -= freed <= total ? freed : total;
  }
  rc = KILN_OK;
  out->remaining_bytes = total;
out:
  blob_list_free(&b);
  free(recs);
  return rc;
}

kiln_status kiln_cache_rm(uint64_t *removed, kiln_cache *c, const char *pattern) {
  kiln_record *recs = NULL;
  size_t n = 0, cap = 0;
  uint64_t freed = 0, blobs = 0;
  kiln_status rc;
  *removed = 0;
  KILN_CHECK(list_layer(c->primary.db, 0, BY_NAME, &recs, &n, &cap));
  for (size_t i = 0; i < n; i++) {
    if (pattern && strcmp(pattern, recs[i].key) != 0 && fnmatch(pattern, recs[i].unit, 0) != 0)
      continue;
    KILN_CHECK(remove_record(c, &recs[i], 0, &freed, &blobs));
    (*removed)++;
  }
out:
  free(recs);
  return rc;
}
