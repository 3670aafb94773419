/* sqlite helpers shared by the store's files: prepare with binds, step, run,
 * one failure path; and the store's write transaction. */
#include "cache/sql.h"

#include <time.h>

#include "cache/store.h"
#include "common/error.h"

kiln_status kiln_sql_fail(sqlite3 *db, int sqlite_rc, const char *what) {
  kiln_status st = KILN_EDB;
  int base = sqlite_rc & 0xff;
  if (base == SQLITE_FULL)
    st = KILN_ENOSPC;
  else if (base == SQLITE_BUSY || base == SQLITE_LOCKED)
    st = KILN_ELOCKED;
  else if (base == SQLITE_READONLY || base == SQLITE_PERM || base == SQLITE_CANTOPEN)
    st = KILN_EPERM;
  else if (base == SQLITE_CORRUPT || base == SQLITE_NOTADB)
    st = KILN_ECORRUPT;
  /* the file, so that a failure names what to look at (NULL or "" for an
   * index in memory, and for a handle whose open failed) */
  const char *file = db ? sqlite3_db_filename(db, "main") : NULL;
  if (file && *file) return kiln_fail(st, "cache index %s: %s: %s", file, what, sqlite3_errmsg(db));
  return kiln_fail(st, "cache index: %s: %s", what,
                   db ? sqlite3_errmsg(db) : sqlite3_errstr(sqlite_rc));
}

kiln_status kiln_sql_exec(sqlite3 *db, const char *sql, const char *what) {
  kiln_status rc = KILN_OK;
  SQL_CHECK(db, sqlite3_exec(db, sql, NULL, NULL, NULL), what);
out:
  return rc;
}

static int bind(sqlite3_stmt *st, int i, const kiln_sql_arg *a) {
  switch (a->type) {
  case KILN_SQL_TEXT: return sqlite3_bind_text(st, i, a->v.text, -1, SQLITE_STATIC);
  case KILN_SQL_INT: return sqlite3_bind_int64(st, i, (sqlite3_int64)a->v.i);
  case KILN_SQL_REAL: return sqlite3_bind_double(st, i, a->v.real);
  }
  return SQLITE_MISUSE;
}

kiln_status kiln_sql_prepare(sqlite3_stmt **out, sqlite3 *db, const char *sql,
                             const kiln_sql_arg *args, size_t n, const char *what) {
  sqlite3_stmt *st = NULL;
  kiln_status rc = KILN_OK;
  *out = NULL;
  SQL_CHECK(db, sqlite3_prepare_v2(db, sql, -1, &st, NULL), what);
  for (size_t i = 0; i < n; i++)
    SQL_CHECK(db, bind(st, (int)i + 1, &args[i]), what);
  *out = st;
  st = NULL;
out:
  sqlite3_finalize(st);
  return rc;
}

kiln_status kiln_sql_step(int *row, sqlite3_stmt *st, const char *what) {
  int r = sqlite3_step(st);
  *row = r == SQLITE_ROW;
  if (r == SQLITE_ROW || r == SQLITE_DONE) return KILN_OK;
  return kiln_sql_fail(sqlite3_db_handle(st), r, what);
}

kiln_status kiln_sql_run(sqlite3 *db, const char *sql, const kiln_sql_arg *args, size_t n,
                         const char *what) {
  sqlite3_stmt *st = NULL;
  kiln_status rc;
  int r;
  KILN_CHECK(kiln_sql_prepare(&st, db, sql, args, n, what));
  /* A row here is a misuse (a SELECT), reported like any failure. */
  r = sqlite3_step(st);
  rc = r == SQLITE_DONE ? KILN_OK : kiln_sql_fail(db, r, what);
out:
  sqlite3_finalize(st);
  return rc;
}

kiln_status kiln_sql_int(int64_t *out, int *found, sqlite3 *db, const char *sql,
                         const kiln_sql_arg *args, size_t n, const char *what) {
  sqlite3_stmt *st = NULL;
  kiln_status rc;
  int row = 0;
  *out = 0;
  KILN_CHECK(kiln_sql_prepare(&st, db, sql, args, n, what));
  KILN_CHECK(kiln_sql_step(&row, st, what));
  if (row) *out = sqlite3_column_int64(st, 0);
out:
  if (found) *found = row;
  sqlite3_finalize(st);
  return rc;
}

void kiln_sql_text(char *dst, size_t cap, sqlite3_stmt *st, int col) {
  const unsigned char *t = sqlite3_column_text(st, col);
  size_t i = 0;
  if (t)
    for (; t[i] && i + 1 < cap; i++)
      dst[i] = (char)t[i];
  dst[i] = '\0';
}

int64_t kiln_now_s(void) {
  return (int64_t)time(NULL);
}

kiln_status kiln_txn_begin(kiln_cache *c, const char *what) {
  kiln_status rc;
  KILN_CHECK(kiln_cache_writable(c, what)); /* every change to the index starts here */
  pthread_mutex_lock(&c->lock);
  rc = kiln_sql_exec(c->primary.db, "BEGIN IMMEDIATE", what);
  if (rc != KILN_OK) pthread_mutex_unlock(&c->lock);
out:
  return rc;
}

kiln_status kiln_cache_writable(const kiln_cache *c, const char *what) {
  if (!c->read_only) return KILN_OK;
  return kiln_fail(KILN_EPERM, "cache %s is open read-only: cannot %s", c->primary.dir, what);
}

kiln_status kiln_txn_end(kiln_cache *c, kiln_status rc, const char *what) {
  if (rc == KILN_OK) rc = kiln_sql_exec(c->primary.db, "COMMIT", what);
  if (rc != KILN_OK) sqlite3_exec(c->primary.db, "ROLLBACK", NULL, NULL, NULL);
  pthread_mutex_unlock(&c->lock);
  return rc;
}
