/* Single-flight build leases and the builds log. */
#include "cache/lease.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/store.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"

int kiln_pid_gone(long pid) {
  return pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

typedef struct lease_row {
  int present;
  char host[64];
  long pid;
  char token[40];
  int64_t acquired_ms, heartbeat_ms;
} lease_row;

static kiln_status read_lease(sqlite3 *db, const char *key, lease_row *row) {
  static const char *sql =
      "SELECT host, pid, token, acquired_ms, heartbeat_ms FROM leases WHERE key = ?1";
  sqlite3_stmt *st = NULL;
  kiln_status rc;
  memset(row, 0, sizeof *row);
  KILN_CHECK(kiln_sql_prepare(&st, db, sql, SQL_ARGS(SQL_TEXT(key)), "lease: read"));
  KILN_CHECK(kiln_sql_step(&row->present, st, "lease: read"));
  if (row->present) {
    kiln_sql_text(row->host, sizeof row->host, st, 0);
    row->pid = (long)sqlite3_column_int64(st, 1);
    kiln_sql_text(row->token, sizeof row->token, st, 2);
    row->acquired_ms = sqlite3_column_int64(st, 3);
    row->heartbeat_ms = sqlite3_column_int64(st, 4);
  }
out:
  sqlite3_finalize(st);
  return rc;
}

/* A holder on this host whose pid no longer exists is gone for good. */
static int holder_dead(const kiln_cache *c, const char *host, long pid) {
  return strcmp(host, c->host) == 0 && kiln_pid_gone(pid);
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
/* 1 in *done when key has a record or an unexpired failure. */
static kiln_status settled(int *done, sqlite3 *db, const char *key) {
  int64_t one;
  kiln_status rc;
  KILN_CHECK(kiln_sql_int(&one, done, db, "SELECT 1 FROM records WHERE key = ?1",
                          SQL_ARGS(SQL_TEXT(key)), "lease: look up record"));
  if (!*done)
    rc = kiln_sql_int(&one, done, db, "SELECT 1 FROM failures WHERE key = ?1 AND expires > ?2",
                      SQL_ARGS(SQL_TEXT(key), SQL_INT(kiln_now_s())), "lease: look up failure");
out:
  return rc;
}

int kiln_lease_heartbeat_stale(int64_t now_ms, int64_t heartbeat_ms, int64_t stale_ms) {
  return now_ms - heartbeat_ms > stale_ms || heartbeat_ms - now_ms > stale_ms;
}

static kiln_status peek(kiln_cache *c, const char *key, int64_t stale_ms, int ignore_record,
                        kiln_lease_state *state, lease_row *row, int *stale) {
  int done = 0;
  int64_t now = kiln_wall_ms();
  kiln_status rc;
  if (!ignore_record) {
    KILN_CHECK(settled(&done, c->primary.db, key));
    if (done) {
      *state = KILN_LEASE_DONE;
      goto out;
    }
  }
  KILN_CHECK(read_lease(c->primary.db, key, row));
  *stale = row->present && strcmp(row->token, c->token) != 0 &&
           (kiln_lease_heartbeat_stale(now, row->heartbeat_ms, stale_ms) ||
            holder_dead(c, row->host, row->pid));
  *state = row->present && strcmp(row->token, c->token) != 0 && !*stale ? KILN_LEASE_HELD
                                                                        : KILN_LEASE_ACQUIRED;
out:
  return rc;
}

kiln_status kiln_lease_try(kiln_cache *c, const char *key, const char *unit, const char *target,
                           int64_t stale_ms, int ignore_record, kiln_lease_state *state,
                           kiln_lease_holder *holder) {
  static const char *take =
      "INSERT OR REPLACE INTO leases(key, unit, target, host, pid, token, acquired_ms, "
      "heartbeat_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)";
  lease_row row;
  kiln_status rc;
  int stale = 0;
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
  if (rc == KILN_OK && *state == KILN_LEASE_ACQUIRED)
    rc = kiln_sql_run(c->primary.db, take,
                      SQL_ARGS(SQL_TEXT(key), SQL_TEXT(unit), SQL_TEXT(target), SQL_TEXT(c->host),
                               SQL_INT(getpid()), SQL_TEXT(c->token), SQL_INT(now)),
                      "take build lease");
  rc = kiln_txn_end(c, rc, "take build lease");
  if (rc != KILN_OK) goto out;
  if (*state == KILN_LEASE_HELD || (*state == KILN_LEASE_ACQUIRED && stale)) {
    describe(holder, &row, now);
    if (holder && stale) holder->taken_over = 1;
  }
  if (*state == KILN_LEASE_ACQUIRED && stale)
    kiln_log(KILN_LOG_INFO,
             "took over the build of %s %s from %s pid %ld (%s, last heartbeat %.1f s %s)", unit,
             target, row.host, row.pid,
             holder_dead(c, row.host, row.pid) ? "process gone" : "stale",
             llabs(now - row.heartbeat_ms) / 1e3,
             row.heartbeat_ms > now ? "in the future: a clock ahead" : "ago");
out:
  return rc;
}

kiln_status kiln_lease_renew(kiln_cache *c) {
  kiln_status rc;
  pthread_mutex_lock(&c->lock);
  rc = kiln_sql_run(c->primary.db, "UPDATE leases SET heartbeat_ms = ?1 WHERE token = ?2",
                    SQL_ARGS(SQL_INT(kiln_wall_ms()), SQL_TEXT(c->token)), "renew build leases");
  pthread_mutex_unlock(&c->lock);
  return rc;
}

kiln_status kiln_lease_release(kiln_cache *c, const char *key) {
  kiln_status rc;
  pthread_mutex_lock(&c->lock);
  rc = kiln_sql_run(c->primary.db, "DELETE FROM leases WHERE key = ?1 AND token = ?2",
                    SQL_ARGS(SQL_TEXT(key), SQL_TEXT(c->token)), "release build lease");
  pthread_mutex_unlock(&c->lock);
  return rc;
}

static void lease_info_from_row(kiln_lease_info *l, sqlite3_stmt *st, const kiln_cache *c) {
  memset(l, 0, sizeof *l);
  kiln_sql_text(l->key, sizeof l->key, st, 0);
  kiln_sql_text(l->unit, sizeof l->unit, st, 1);
  kiln_sql_text(l->target, sizeof l->target, st, 2);
  kiln_sql_text(l->host, sizeof l->host, st, 3);
  l->pid = (long)sqlite3_column_int64(st, 4);
  l->acquired_ms = sqlite3_column_int64(st, 5);
  l->heartbeat_ms = sqlite3_column_int64(st, 6);
  l->gone = holder_dead(c, l->host, l->pid);
}

kiln_status kiln_lease_list(kiln_lease_info **out, size_t *n, kiln_cache *c) {
  static const char *sql = "SELECT key, unit, target, host, pid, acquired_ms, heartbeat_ms "
                           "FROM leases ORDER BY unit, target";
  kiln_lease_info *v = NULL, *grown;
  sqlite3_stmt *st = NULL;
  size_t cnt = 0;
  kiln_status rc;
  int row = 0;
  *out = NULL;
  *n = 0;
  pthread_mutex_lock(&c->lock);
  KILN_CHECK(kiln_sql_prepare(&st, c->primary.db, sql, NULL, 0, "list build leases"));
  for (;;) {
    KILN_CHECK(kiln_sql_step(&row, st, "list build leases"));
    if (!row) break;
    if (!(grown = realloc(v, (cnt + 1) * sizeof *v))) {
      rc = kiln_fail(KILN_ENOMEM, "out of memory");
      goto out;
    }
    v = grown;
    lease_info_from_row(&v[cnt++], st, c);
  }
  *out = v;
  *n = cnt;
  v = NULL;
out:
  sqlite3_finalize(st);
  pthread_mutex_unlock(&c->lock);
  free(v);
  return rc;
}

kiln_status kiln_builds_add(kiln_cache *c, const char *key, const char *unit, const char *target,
                            int64_t started_s, double ms, int ok) {
  static const char *sql = "INSERT INTO builds(key, unit, target, host, pid, started, ms, ok) "
                           "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
  kiln_status rc;
  pthread_mutex_lock(&c->lock);
  rc = kiln_sql_run(c->primary.db, sql,
                    SQL_ARGS(SQL_TEXT(key), SQL_TEXT(unit), SQL_TEXT(target), SQL_TEXT(c->host),
                             SQL_INT(getpid()), SQL_INT(started_s), SQL_REAL(ms), SQL_INT(ok)),
                    "log build run");
  pthread_mutex_unlock(&c->lock);
  return rc;
}
