/* Single-flight build leases and the builds log. */
#include "cache/lease.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/store.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"

static int exists(sqlite3 *db, const char *sql, const char *key, int64_t now_s, int *out) {
  sqlite3_stmt *st = NULL;
  int r = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (r == SQLITE_OK) {
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now_s);
    r = sqlite3_step(st);
    *out = r == SQLITE_ROW;
    if (r == SQLITE_ROW || r == SQLITE_DONE) r = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return r;
}

typedef struct lease_row {
  int present;
  char host[64];
  long pid;
  char token[40];
  int64_t acquired_ms, heartbeat_ms;
} lease_row;

static int read_lease(sqlite3 *db, const char *key, lease_row *row) {
  sqlite3_stmt *st = NULL;
  int r = sqlite3_prepare_v2(
      db, "SELECT host, pid, token, acquired_ms, heartbeat_ms FROM leases WHERE key = ?1", -1, &st,
      NULL);
  memset(row, 0, sizeof *row);
  if (r == SQLITE_OK) {
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    r = sqlite3_step(st);
    if (r == SQLITE_ROW) {
      row->present = 1;
      snprintf(row->host, sizeof row->host, "%s", (const char *)sqlite3_column_text(st, 0));
      row->pid = (long)sqlite3_column_int64(st, 1);
      snprintf(row->token, sizeof row->token, "%s", (const char *)sqlite3_column_text(st, 2));
      row->acquired_ms = sqlite3_column_int64(st, 3);
      row->heartbeat_ms = sqlite3_column_int64(st, 4);
    }
    if (r == SQLITE_ROW || r == SQLITE_DONE) r = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return r;
}

/* A holder on this host whose pid no longer exists is gone for good. */
static int holder_dead(const kiln_cache *c, const lease_row *row) {
  if (strcmp(row->host, c->host) != 0 || row->pid <= 0) return 0;
  return kill((pid_t)row->pid, 0) != 0 && errno == ESRCH;
}

static void describe(kiln_lease_holder *h, const lease_row *row, int64_t now) {
  if (!h) return;
  memset(h, 0, sizeof *h);
  snprintf(h->host, sizeof h->host, "%s", row->host);
  h->pid = row->pid;
  h->heartbeat_age_ms = now - row->heartbeat_ms;
  h->held_ms = now - row->acquired_ms;
}

/* DONE if a record or an unexpired failure is there; HELD if a live holder
 * has the lease; ACQUIRED if it is free (not taken yet). */
static kiln_status peek(kiln_cache *c, const char *key, int64_t stale_ms, int ignore_record,
                        kiln_lease_state *state, lease_row *row, int *stale) {
  int have = 0, r;
  int64_t now = kiln_wall_ms();
  if (!ignore_record) {
    r = exists(c->primary.db, "SELECT 1 FROM records WHERE key = ?1 AND ?2 = ?2", key, 0, &have);
    if (r != SQLITE_OK) return kiln_sql_fail(c->primary.db, r, "lease: look up record");
    if (!have) {
      r = exists(c->primary.db, "SELECT 1 FROM failures WHERE key = ?1 AND expires > ?2", key,
                 kiln_now_s(), &have);
      if (r != SQLITE_OK) return kiln_sql_fail(c->primary.db, r, "lease: look up failure");
    }
    if (have) {
      *state = KILN_LEASE_DONE;
      return KILN_OK;
    }
  }
  r = read_lease(c->primary.db, key, row);
  if (r != SQLITE_OK) return kiln_sql_fail(c->primary.db, r, "lease: read");
  *stale = row->present && strcmp(row->token, c->token) != 0 &&
           (now - row->heartbeat_ms > stale_ms || holder_dead(c, row));
  *state = row->present && strcmp(row->token, c->token) != 0 && !*stale ? KILN_LEASE_HELD
                                                                          : KILN_LEASE_ACQUIRED;
  return KILN_OK;
}

kiln_status kiln_lease_try(kiln_cache *c, const char *key, const char *unit, const char *target,
                           int64_t stale_ms, int ignore_record, kiln_lease_state *state,
                           kiln_lease_holder *holder) {
  static const char *take =
      "INSERT OR REPLACE INTO leases(key, unit, target, host, pid, token, acquired_ms, "
      "heartbeat_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)";
  sqlite3_stmt *st = NULL;
  lease_row row;
  kiln_status rc;
  int stale = 0, r;
  int64_t now;
  if (holder) memset(holder, 0, sizeof *holder);
  /* A read first: waiters poll, and only a free or stale lease needs the
   * write lock. */
  pthread_mutex_lock(&c->lock);
  rc = peek(c, key, stale_ms, ignore_record, state, &row, &stale);
  pthread_mutex_unlock(&c->lock);
  if (rc != KILN_OK) return rc;
  if (*state != KILN_LEASE_ACQUIRED) {
    if (*state == KILN_LEASE_HELD) describe(holder, &row, kiln_wall_ms());
    return KILN_OK;
  }
  KILN_CHECK(kiln_txn_begin(c, "take build lease"));
  rc = peek(c, key, stale_ms, ignore_record, state, &row, &stale);
  now = kiln_wall_ms();
  if (rc == KILN_OK && *state == KILN_LEASE_ACQUIRED) {
    r = sqlite3_prepare_v2(c->primary.db, take, -1, &st, NULL);
    if (r == SQLITE_OK) {
      sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
      sqlite3_bind_text(st, 2, unit, -1, SQLITE_STATIC);
      sqlite3_bind_text(st, 3, target, -1, SQLITE_STATIC);
      sqlite3_bind_text(st, 4, c->host, -1, SQLITE_STATIC);
      sqlite3_bind_int64(st, 5, (sqlite3_int64)getpid());
      sqlite3_bind_text(st, 6, c->token, -1, SQLITE_STATIC);
      sqlite3_bind_int64(st, 7, now);
      r = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    if (r != SQLITE_DONE) rc = kiln_sql_fail(c->primary.db, r, "take build lease");
  }
  rc = kiln_txn_end(c, rc, "take build lease");
  if (rc != KILN_OK) goto out;
  if (*state == KILN_LEASE_HELD || (*state == KILN_LEASE_ACQUIRED && stale)) {
    describe(holder, &row, now);
    if (holder && stale) holder->taken_over = 1;
  }
  if (*state == KILN_LEASE_ACQUIRED && stale)
    kiln_log(KILN_LOG_INFO, "took over the build of %s %s from %s pid %ld (%s, last heartbeat %.1f s ago)",
             unit, target, row.host, row.pid, holder_dead(c, &row) ? "process gone" : "stale",
             (now - row.heartbeat_ms) / 1e3);
out:
  return rc;
}

kiln_status kiln_lease_renew(kiln_cache *c) {
  sqlite3_stmt *st = NULL;
  kiln_status rc = KILN_OK;
  int r;
  pthread_mutex_lock(&c->lock);
  r = sqlite3_prepare_v2(c->primary.db, "UPDATE leases SET heartbeat_ms = ?1 WHERE token = ?2", -1,
                         &st, NULL);
  if (r == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, kiln_wall_ms());
    sqlite3_bind_text(st, 2, c->token, -1, SQLITE_STATIC);
    r = sqlite3_step(st);
  }
  if (r != SQLITE_DONE) rc = kiln_sql_fail(c->primary.db, r, "renew build leases");
  sqlite3_finalize(st);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

kiln_status kiln_lease_release(kiln_cache *c, const char *key) {
  sqlite3_stmt *st = NULL;
  kiln_status rc = KILN_OK;
  int r;
  pthread_mutex_lock(&c->lock);
  r = sqlite3_prepare_v2(c->primary.db, "DELETE FROM leases WHERE key = ?1 AND token = ?2", -1,
                         &st, NULL);
  if (r == SQLITE_OK) {
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, c->token, -1, SQLITE_STATIC);
    r = sqlite3_step(st);
  }
  if (r != SQLITE_DONE) rc = kiln_sql_fail(c->primary.db, r, "release build lease");
  sqlite3_finalize(st);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

kiln_status kiln_builds_add(kiln_cache *c, const char *key, const char *unit, const char *target,
                            int64_t started_s, double ms, int ok) {
  sqlite3_stmt *st = NULL;
  kiln_status rc = KILN_OK;
  int r;
  pthread_mutex_lock(&c->lock);
  r = sqlite3_prepare_v2(c->primary.db,
                         "INSERT INTO builds(key, unit, target, host, pid, started, ms, ok) "
                         "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                         -1, &st, NULL);
  if (r == SQLITE_OK) {
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, unit, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, target, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, c->host, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)getpid());
    sqlite3_bind_int64(st, 6, started_s);
    sqlite3_bind_double(st, 7, ms);
    sqlite3_bind_int(st, 8, ok);
    r = sqlite3_step(st);
  }
  if (r != SQLITE_DONE) rc = kiln_sql_fail(c->primary.db, r, "log build run");
  sqlite3_finalize(st);
  pthread_mutex_unlock(&c->lock);
  return rc;
}
