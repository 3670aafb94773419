/* The records table's rows <-> kiln_record: row decoding and INSERT. */
#include <stdint.h>
#include <stdlib.h>

#include "cache/sql.h"
#include "cache/store.h"
#include "common/error.h"

void kiln_record_from_row(kiln_record *r, sqlite3_stmt *st, int layer) {
  kiln_sql_text(r->key, sizeof r->key, st, 0);
  kiln_sql_text(r->unit, sizeof r->unit, st, 1);
  kiln_sql_text(r->target, sizeof r->target, st, 2);
  kiln_sql_text(r->kind, sizeof r->kind, st, 3);
  kiln_sql_text(r->digest, sizeof r->digest, st, 4);
  r->size = (uint64_t)sqlite3_column_int64(st, 5);
  kiln_sql_text(r->toolchain, sizeof r->toolchain, st, 6);
  kiln_sql_text(r->options, sizeof r->options, st, 7);
  r->build_ms = sqlite3_column_double(st, 8);
  r->registers = sqlite3_column_int(st, 9);
  r->spill_stores = sqlite3_column_int(st, 10);
  r->spill_loads = sqlite3_column_int(st, 11);
  r->shared_bytes = sqlite3_column_int(st, 12);
  r->stack_bytes = sqlite3_column_int(st, 13);
  kiln_sql_text(r->log_digest, sizeof r->log_digest, st, 14);
  r->created = sqlite3_column_int64(st, 15);
  r->last_used = sqlite3_column_int64(st, 16);
  r->layer = layer;
}

kiln_status kiln_record_store_row(sqlite3 *db, const kiln_record *r) {
  static const char *sql = "INSERT OR REPLACE INTO records(" KILN_RECORD_COLUMNS
                           ") VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)";
  return kiln_sql_run(db, sql,
                      SQL_ARGS(SQL_TEXT(r->key), SQL_TEXT(r->unit), SQL_TEXT(r->target),
                               SQL_TEXT(r->kind), SQL_TEXT(r->digest), SQL_INT((int64_t)r->size),
                               SQL_TEXT(r->toolchain), SQL_TEXT(r->options), SQL_REAL(r->build_ms),
                               SQL_INT(r->registers), SQL_INT(r->spill_stores),
                               SQL_INT(r->spill_loads), SQL_INT(r->shared_bytes),
                               SQL_INT(r->stack_bytes), SQL_TEXT(r->log_digest),
                               SQL_INT(r->created), SQL_INT(r->last_used)),
                      "store record");
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
