/* cache/sql.c: prepare with binds, step, run, the integer query, and the
 * failure path every statement of the store shares (kiln_sql_fail, SQL_CHECK). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/sql.h"
#include "kiln/status.h"

static int setup(void **state) {
  sqlite3 *db = NULL;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) return -1;
  if (kiln_sql_exec(db, "CREATE TABLE t(k TEXT PRIMARY KEY, n INTEGER, x REAL)", "create") !=
      KILN_OK)
    return -1;
  *state = db;
  return 0;
}

static int teardown(void **state) {
  sqlite3_close(*state);
  return 0;
}

static void expect_error(const char *word) {
  if (!strstr(kiln_last_error(), word)) fail_msg("'%s' not in '%s'", word, kiln_last_error());
}

static void test_run_binds_every_type_in_order(void **state) {
  sqlite3 *db = *state;
  sqlite3_stmt *st = NULL;
  int row = 0;
  assert_int_equal(kiln_sql_run(db, "INSERT INTO t VALUES(?1, ?2, ?3)",
                                SQL_ARGS(SQL_TEXT("a"), SQL_INT(INT64_C(1) << 40), SQL_REAL(2.5)),
                                "insert"),
                   KILN_OK);
  assert_int_equal(kiln_sql_prepare(&st, db, "SELECT k, n, x FROM t WHERE k = ?1",
                                    SQL_ARGS(SQL_TEXT("a")), "select"),
                   KILN_OK);
  assert_int_equal(kiln_sql_step(&row, st, "select"), KILN_OK);
  assert_int_equal(row, 1);
  assert_string_equal((const char *)sqlite3_column_text(st, 0), "a");
  assert_true(sqlite3_column_int64(st, 1) == INT64_C(1) << 40);
  assert_true(sqlite3_column_double(st, 2) == 2.5);
  assert_int_equal(kiln_sql_step(&row, st, "select"), KILN_OK);
  assert_int_equal(row, 0);
  sqlite3_finalize(st);
}

static void test_int_reports_whether_a_row_was_there(void **state) {
  sqlite3 *db = *state;
  int64_t v = -1;
  int found = -1;
  assert_int_equal(kiln_sql_run(db, "INSERT INTO t VALUES('b', 7, 0)", NULL, 0, "insert"), KILN_OK);
  assert_int_equal(
      kiln_sql_int(&v, &found, db, "SELECT n FROM t WHERE k = ?1", SQL_ARGS(SQL_TEXT("b")), "n"),
      KILN_OK);
  assert_true(found == 1 && v == 7);
  assert_int_equal(
      kiln_sql_int(&v, &found, db, "SELECT n FROM t WHERE k = ?1", SQL_ARGS(SQL_TEXT("none")), "n"),
      KILN_OK);
  assert_true(found == 0 && v == 0);
  assert_int_equal(kiln_sql_int(&v, NULL, db, "SELECT count(*) FROM t", NULL, 0, "count"), KILN_OK);
  assert_true(v == 1);
}

static void test_text_column_is_bounded_and_terminated(void **state) {
  sqlite3 *db = *state;
  sqlite3_stmt *st = NULL;
  char small[4], big[16];
  int row = 0;
  assert_int_equal(kiln_sql_prepare(&st, db, "SELECT 'abcdef', NULL", NULL, 0, "text"), KILN_OK);
  assert_int_equal(kiln_sql_step(&row, st, "text"), KILN_OK);
  kiln_sql_text(small, sizeof small, st, 0);
  assert_string_equal(small, "abc");
  kiln_sql_text(big, sizeof big, st, 1);
  assert_string_equal(big, "");
  sqlite3_finalize(st);
}

/* Every failure names what failed and carries sqlite's own message. */
static void test_failures_name_what_and_sqlites_message(void **state) {
  sqlite3 *db = *state;
  sqlite3_stmt *st = (sqlite3_stmt *)1;
  assert_int_equal(kiln_sql_prepare(&st, db, "SELEKT 1", NULL, 0, "probe"), KILN_EDB);
  assert_null(st);
  expect_error("cache index: probe: ");
  expect_error("syntax error");
  /* more arguments than parameters: the bind fails, not silently ignored */
  assert_int_equal(kiln_sql_run(db, "DELETE FROM t WHERE k = ?1",
                                SQL_ARGS(SQL_TEXT("a"), SQL_INT(1)), "two args"),
                   KILN_EDB);
  expect_error("cache index: two args: ");
  assert_int_equal(kiln_sql_run(db, "INSERT INTO t VALUES('c', 1, 1)", NULL, 0, "first"), KILN_OK);
  assert_int_equal(kiln_sql_run(db, "INSERT INTO t VALUES('c', 1, 1)", NULL, 0, "again"), KILN_EDB);
  expect_error("cache index: again: UNIQUE constraint failed");
  /* a statement that returns rows is not something to run */
  assert_int_equal(kiln_sql_run(db, "SELECT 1", NULL, 0, "select"), KILN_EDB);
}

/* An index in a file: every failure names that file, so a message about a
 * corrupt or unreadable index says which one. */
static void test_failures_name_the_index_file(void **state) {
  char dir[] = "/tmp/kiln-test-sql-XXXXXX", path[64];
  sqlite3 *db = NULL;
  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/index.sqlite", dir);
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(kiln_sql_exec(db, "SELEKT 1", "probe"), KILN_EDB);
  expect_error("cache index ");
  expect_error(path);
  expect_error(": probe: ");
  sqlite3_close(db);
  unlink(path);
  rmdir(dir);
}

static void test_fail_maps_sqlite_codes(void **state) {
  (void)state;
  assert_int_equal(kiln_sql_fail(NULL, SQLITE_FULL, "w"), KILN_ENOSPC);
  expect_error("cache index: w: database or disk is full");
  assert_int_equal(kiln_sql_fail(NULL, SQLITE_BUSY, "w"), KILN_ELOCKED);
  assert_int_equal(kiln_sql_fail(NULL, SQLITE_BUSY_SNAPSHOT, "w"), KILN_ELOCKED);
  assert_int_equal(kiln_sql_fail(NULL, SQLITE_LOCKED, "w"), KILN_ELOCKED);
  assert_int_equal(kiln_sql_fail(NULL, SQLITE_READONLY, "w"), KILN_EPERM);
  assert_int_equal(kiln_sql_fail(NULL, SQLITE_CANTOPEN, "w"), KILN_EPERM);
  assert_int_equal(kiln_sql_fail(NULL, SQLITE_CORRUPT, "w"), KILN_ECORRUPT);
  assert_int_equal(kiln_sql_fail(NULL, SQLITE_NOTADB, "w"), KILN_ECORRUPT);
  assert_int_equal(kiln_sql_fail(NULL, SQLITE_ERROR, "w"), KILN_EDB);
}

/* One exit path: SQL_CHECK sets rc and jumps to out on the first failure. */
static kiln_status two_statements(sqlite3 *db, const char *first, int *reached) {
  kiln_status rc = KILN_OK;
  SQL_CHECK(db, sqlite3_exec(db, first, NULL, NULL, NULL), "first");
  *reached = 1;
out:
  return rc;
}

static void test_sql_check_jumps_to_out(void **state) {
  sqlite3 *db = *state;
  int reached = 0;
  assert_int_equal(two_statements(db, "SELECT nope FROM t", &reached), KILN_EDB);
  assert_int_equal(reached, 0);
  expect_error("cache index: first: no such column: nope");
  assert_int_equal(two_statements(db, "SELECT 1", &reached), KILN_OK);
  assert_int_equal(reached, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_failures_name_the_index_file),
      cmocka_unit_test_setup_teardown(test_run_binds_every_type_in_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_int_reports_whether_a_row_was_there, setup, teardown),
      cmocka_unit_test_setup_teardown(test_text_column_is_bounded_and_terminated, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failures_name_what_and_sqlites_message, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fail_maps_sqlite_codes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sql_check_jumps_to_out, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
