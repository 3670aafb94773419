/* The records table's rows <-> kiln_record: the SELECT list, row decoding
 * and INSERT, all generated from cache/record_fields.def. */
#include <stdint.h>
#include <stdlib.h>

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
