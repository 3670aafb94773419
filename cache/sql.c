/* sqlite helpers shared by the store's files. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cache/store.h"
#include "common/error.h"

kiln_status kiln_sql_fail(sqlite3 *db, int sqlite_rc, const char *what) {
  kiln_status st = KILN_EDB;
  int base = sqlite_rc & 0xff;
  if (base == SQLITE_FULL) st = KILN_ENOSPC;
  else if (base == SQLITE_BUSY || base == SQLITE_LOCKED) st = KILN_ELOCKED;
  else if (base == SQLITE_READONLY || base == SQLITE_PERM || base == SQLITE_CANTOPEN) st = KILN_EPERM;
  else if (base == SQLITE_CORRUPT || base == SQLITE_NOTADB) st = KILN_ECORRUPT;
  return kiln_fail(st, "cache index: %s: %s", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(sqlite_rc));
}

kiln_status kiln_sql_exec(sqlite3 *db, const char *sql, const char *what) {
  int r = sqlite3_exec(db, sql, NULL, NULL, NULL);
  if (r != SQLITE_OK) return kiln_sql_fail(db, r, what);
  return KILN_OK;
}

int64_t kiln_now_s(void) {
  return (int64_t)time(NULL);
}

static void copy_text(char *dst, size_t cap, sqlite3_stmt *st, int col) {
  const unsigned char *t = sqlite3_column_text(st, col);
  size_t i = 0;
  if (t)
    for (; t[i] && i + 1 < cap; i++) dst[i] = (char)t[i];
  dst[i] = '\0';
}

void kiln_record_from_row(kiln_record *r, sqlite3_stmt *st, int layer) {
  copy_text(r->key, sizeof r->key, st, 0);
  copy_text(r->unit, sizeof r->unit, st, 1);
  copy_text(r->target, sizeof r->target, st, 2);
  copy_text(r->kind, sizeof r->kind, st, 3);
  copy_text(r->digest, sizeof r->digest, st, 4);
  r->size = (uint64_t)sqlite3_column_int64(st, 5);
  copy_text(r->toolchain, sizeof r->toolchain, st, 6);
  copy_text(r->options, sizeof r->options, st, 7);
  r->build_ms = sqlite3_column_double(st, 8);
  r->registers = sqlite3_column_int(st, 9);
  r->spill_stores = sqlite3_column_int(st, 10);
  r->spill_loads = sqlite3_column_int(st, 11);
  r->shared_bytes = sqlite3_column_int(st, 12);
  r->stack_bytes = sqlite3_column_int(st, 13);
  copy_text(r->log_digest, sizeof r->log_digest, st, 14);
  r->created = sqlite3_column_int64(st, 15);
  r->last_used = sqlite3_column_int64(st, 16);
  r->layer = layer;
}

kiln_status kiln_txn_begin(kiln_cache *c, const char *what) {
  kiln_status rc;
  pthread_mutex_lock(&c->lock);
  rc = kiln_sql_exec(c->primary.db, "BEGIN IMMEDIATE", what);
  if (rc != KILN_OK) pthread_mutex_unlock(&c->lock);
  return rc;
}

kiln_status kiln_txn_end(kiln_cache *c, kiln_status rc, const char *what) {
  if (rc == KILN_OK) rc = kiln_sql_exec(c->primary.db, "COMMIT", what);
  if (rc != KILN_OK) sqlite3_exec(c->primary.db, "ROLLBACK", NULL, NULL, NULL);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

kiln_status kiln_sql_exec_key(sqlite3 *db, const char *sql, const char *key, const char *what) {
  sqlite3_stmt *st = NULL;
  int r = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  kiln_status rc;
  if (r == SQLITE_OK) {
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    r = sqlite3_step(st);
  }
  rc = r == SQLITE_DONE ? KILN_OK : kiln_sql_fail(db, r, what);
  sqlite3_finalize(st);
  return rc;
}
