/* Internal: the store's sqlite helpers. One way to prepare, bind, step and
 * fail, so that every statement's failure names what failed and carries
 * sqlite's message, mapped to a kiln_status (DESIGN.md: a check macro per
 * dependency, one exit path). */
#ifndef KILN_CACHE_SQL_H
#define KILN_CACHE_SQL_H

#include <sqlite3.h> /* sqlite3, sqlite3_stmt, SQLITE_OK */
#include <stddef.h>  /* size_t */
#include <stdint.h>  /* int64_t */

#include "kiln/status.h"

/* sqlite error -> kiln_status (SQLITE_FULL -> KILN_ENOSPC, BUSY -> ELOCKED,
 * READONLY -> EPERM, CORRUPT -> ECORRUPT, else EDB), with the detail
 * "cache index <file>: <what>: <sqlite's message>" (the index's path; just
 * "cache index: ..." for one in memory or a handle whose open failed). */
kiln_status kiln_sql_fail(sqlite3 *db, int sqlite_rc, const char *what);

/* Propagates a failing sqlite call (one that returns SQLITE_OK on success):
 * rc = kiln_sql_fail(db, ..., what); goto out. */
#define SQL_CHECK(db, expr, what)                                                                  \
  do {                                                                                             \
    int sql_check_rc_ = (expr);                                                                    \
    if (sql_check_rc_ != SQLITE_OK) {                                                              \
      rc = kiln_sql_fail((db), sql_check_rc_, (what));                                             \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

/* One parameter of a statement: args[i] is bound to ?i+1. Text is bound
 * SQLITE_STATIC, so it must outlive the statement; NULL text binds NULL. */
typedef struct kiln_sql_arg {
  enum { KILN_SQL_TEXT, KILN_SQL_INT, KILN_SQL_REAL } type;
  union {
    const char *text;
    int64_t i;
    double real;
  } v;
} kiln_sql_arg;

#define SQL_TEXT(x) ((kiln_sql_arg){KILN_SQL_TEXT, {.text = (x)}})
#define SQL_INT(x) ((kiln_sql_arg){KILN_SQL_INT, {.i = (x)}})
#define SQL_REAL(x) ((kiln_sql_arg){KILN_SQL_REAL, {.real = (x)}})
/* The (args, n) pair of the functions below from a list of SQL_TEXT/INT/REAL:
 * kiln_sql_run(db, sql, SQL_ARGS(SQL_TEXT(key), SQL_INT(now)), what). */
#define SQL_ARGS(...)                                                                              \
  (const kiln_sql_arg[]){__VA_ARGS__},                                                             \
      sizeof((const kiln_sql_arg[]){__VA_ARGS__}) / sizeof(kiln_sql_arg)

/* Runs sql (any number of statements, no parameters) on db. */
kiln_status kiln_sql_exec(sqlite3 *db, const char *sql, const char *what);
/* Prepares sql on db and binds args[0..n) to ?1..?n. On failure *out is
 * NULL. The statement is freed with sqlite3_finalize (which accepts NULL). */
kiln_status kiln_sql_prepare(sqlite3_stmt **out, sqlite3 *db, const char *sql,
                             const kiln_sql_arg *args, size_t n, const char *what);
/* Steps st: KILN_OK with *row 1 when a row is there to read, 0 when the
 * statement is done. */
kiln_status kiln_sql_step(int *row, sqlite3_stmt *st, const char *what);
/* Prepares, binds and runs a statement that returns no rows (INSERT,
 * UPDATE, DELETE), then finalizes it. */
kiln_status kiln_sql_run(sqlite3 *db, const char *sql, const kiln_sql_arg *args, size_t n,
                         const char *what);
/* Column 0 of the first row of a query, as an integer (a count, a PRAGMA, a
 * "SELECT 1 ... LIMIT 1"): *found is 0 (and *out 0) when there is no row.
 * found may be NULL for queries that always return a row. */
kiln_status kiln_sql_int(int64_t *out, int *found, sqlite3 *db, const char *sql,
                         const kiln_sql_arg *args, size_t n, const char *what);
/* Copies the text of column col of the current row into dst (cap bytes,
 * truncated, always terminated; "" for NULL). */
void kiln_sql_text(char *dst, size_t cap, sqlite3_stmt *st, int col);

#endif
