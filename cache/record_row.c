/* The records table's rows <-> kiln_record: the SELECT list, row decoding
 * and INSERT, all generated from cache/record_fields.def. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/record_fields.h"
#include "cache/sql.h"
#include "cache/store.h"
#include "common/error.h"

#define FROM_COLUMN_TEXT(dst, st, i) kiln_sql_text(dst, sizeof dst, st, i)
#define FROM_COLUMN_U64(dst, st, i) (dst) = (uint64_t)sqlite3_column_int64(st, i)
#define FROM_COLUMN_INT(dst, st, i) (dst) = sqlite3_column_int(st, i)
#define FROM_COLUMN_INT64(dst, st, i) (dst) = sqlite3_column_int64(st, i)
#define FROM_COLUMN_DOUBLE(dst, st, i) (dst) = sqlite3_column_double(st, i)
#define FROM_COLUMN(field, type, column, decl, json, canon, wire)                                  \
  FROM_COLUMN_##type(r->field, st, col++);

void kiln_record_from_row(kiln_record *r, sqlite3_stmt *st, int layer) {
  int col = 0;
  KILN_RECORD_FIELDS(FROM_COLUMN, )
  r->layer = layer;
}

/* A column the record cannot hold as it is: a TEXT longer than its member
 * (it would be cut, and the cut value would name another blob), a value of
 * another type (sqlite keeps what it is given), or NULL in a NOT NULL
 * column. */
static int row_field_bad(sqlite3_stmt *st, int col, kiln_field_type type, size_t cap,
                         const char *column, const char *decl, char *why, size_t why_cap) {
  const int t = sqlite3_column_type(st, col);
  const int nullable = !strstr(decl, "NOT NULL") && !strstr(decl, "PRIMARY KEY");
  const char *names[] = {"?", "an integer", "a real", "text", "a blob", "NULL"};
  int ok;
  if (t == SQLITE_NULL) {
    ok = nullable;
  } else if (type == KILN_FIELD_TEXT) {
    ok = t == SQLITE_TEXT && (size_t)sqlite3_column_bytes(st, col) < cap;
    if (t == SQLITE_TEXT && !ok) {
      snprintf(why, why_cap, "its %s is %d bytes long, more than %zu", column,
               sqlite3_column_bytes(st, col), cap - 1);
      return 1;
    }
  } else if (type == KILN_FIELD_DOUBLE) {
    ok = t == SQLITE_FLOAT || t == SQLITE_INTEGER;
  } else {
    const int64_t v = sqlite3_column_int64(st, col);
    ok = t == SQLITE_INTEGER &&
         (type == KILN_FIELD_INT64 || v >= (type == KILN_FIELD_U64 ? 0 : INT_MIN)) &&
         (type != KILN_FIELD_INT || v <= INT_MAX);
    if (t == SQLITE_INTEGER && !ok) {
      snprintf(why, why_cap, "its %s %lld is out of range", column, (long long)v);
      return 1;
    }
  }
  if (!ok)
    snprintf(why, why_cap, "its %s is %s, not %s", column, names[t >= 1 && t <= 5 ? t : 0],
             type == KILN_FIELD_TEXT     ? "text"
             : type == KILN_FIELD_DOUBLE ? "a number"
                                         : "an integer");
  return !ok;
}

#define ROW_CHECK(field, type, column, decl, json, canon, wire)                                    \
  if (row_field_bad(st, col++, KILN_FIELD_##type, sizeof r.field, column, decl, why, cap)) return 1;

int kiln_record_row_bad(sqlite3_stmt *st, char *why, size_t cap) {
  kiln_record r; /* for the members' sizes only */
  int col = 0;
  (void)r;
  KILN_RECORD_FIELDS(ROW_CHECK, )
  return 0;
}

#define TO_ARG_TEXT(v) SQL_TEXT(v)
#define TO_ARG_U64(v) SQL_INT((int64_t)(v))
#define TO_ARG_INT(v) SQL_INT(v)
#define TO_ARG_INT64(v) SQL_INT(v)
#define TO_ARG_DOUBLE(v) SQL_REAL(v)
#define TO_ARG(field, type, column, decl, json, canon, wire) TO_ARG_##type(r->field),
#define PLACEHOLDER(field, type, column, decl, json, canon, wire) "?"

kiln_status kiln_record_store_row(sqlite3 *db, const kiln_record *r) {
  static const char *sql = "INSERT OR REPLACE INTO records(" KILN_RECORD_COLUMNS
                           ") VALUES(" KILN_RECORD_FIELDS(PLACEHOLDER, ",") ")";
  const kiln_sql_arg args[] = {KILN_RECORD_FIELDS(TO_ARG, )};
  return kiln_sql_run(db, sql, args, sizeof args / sizeof args[0], "store record");
}

kiln_status kiln_record_push(kiln_record **v, size_t *n, size_t *cap, const kiln_record *r) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 64;
    kiln_record *nv = realloc(*v, nc * sizeof *nv);
    if (!nv) return kiln_fail(KILN_ENOMEM, "out of memory");
    *v = nv;
    *cap = nc;
  }
  (*v)[(*n)++] = *r;
  return KILN_OK;
}
