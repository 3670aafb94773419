/* cache/record_fields.def and cache/record_row.c: the one table of the
 * record's fields is consistent, and the index stores every field of it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/record_fields.h"
#include "common/digest.h"
#include "kiln/cache.h"
#include "tests/unit/test_util.h"

typedef struct row {
  const char *column, *json;
  int canon, wire;
} row;

#define ROW(field, type, column, decl, json, canon, wire) {column, json, canon, wire},
static const row rows[] = {KILN_RECORD_FIELDS(ROW, )};
#define N_ROWS (sizeof rows / sizeof rows[0])

/* The SELECT list is the records table as schema 1 created it. */
static void test_columns_are_the_schemas(void **state) {
  (void)state;
  assert_string_equal(KILN_RECORD_COLUMNS,
                      "key, unit, target, kind, digest, size, toolchain, options, build_ms, "
                      "registers, spill_stores, spill_loads, shared_bytes, stack_bytes, "
                      "log_digest, created, last_used");
}

/* Lines 1..KILN_RECORD_CANON_LINES of the canonical text each belong to
 * exactly one row, and that row has a name to print. */
static void test_canonical_lines_are_each_one_named_row(void **state) {
  (void)state;
  assert_int_equal(KILN_RECORD_CANON_LINES, 15);
  for (int line = 1; line <= KILN_RECORD_CANON_LINES; line++) {
    int owners = 0;
    for (size_t i = 0; i < N_ROWS; i++) {
      if (rows[i].canon != line) continue;
      owners++;
      assert_true(rows[i].json[0] != '\0');
    }
    if (owners != 1) fail_msg("canonical line %d has %d rows", line, owners);
  }
  for (size_t i = 0; i < N_ROWS; i++)
    assert_true(rows[i].canon >= 0 && rows[i].canon <= KILN_RECORD_CANON_LINES);
}

/* Every stored field comes back from the index as it went in. */
static void test_every_field_survives_the_index(void **state) {
  char dir[256], cache_dir[300];
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  kiln_cache *c = NULL;
  kiln_record r, back;
  uint8_t *blob = NULL;
  size_t size = 0;
  (void)state;
  test_make_tmpdir(dir, sizeof dir);
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", dir);
  o.dir = cache_dir;
  o.ro_path = "";
  assert_int_equal(kiln_cache_open(&c, &o), KILN_OK);
  memset(&r, 0, sizeof r);
  kiln_sha256_hex(r.key, "every field", 11);
  snprintf(r.unit, sizeof r.unit, "layer_norm");
  snprintf(r.target, sizeof r.target, "sm_90a");
  snprintf(r.kind, sizeof r.kind, "cubin");
  snprintf(r.toolchain, sizeof r.toolchain, "nvrtc-12.8");
  snprintf(r.options, sizeof r.options, "-std=c++17 -DX=1");
  r.build_ms = 1234.5;
  r.registers = 1;
  r.spill_stores = 2;
  r.spill_loads = 3;
  r.shared_bytes = 4;
  r.stack_bytes = -1;
  assert_int_equal(kiln_cache_put(c, &r, "bytes", 5, "a log", 5), KILN_OK);
  assert_int_equal(kiln_cache_get(&back, &blob, &size, c, r.key), KILN_OK);
  assert_string_equal(back.key, r.key);
  assert_string_equal(back.unit, "layer_norm");
  assert_string_equal(back.target, "sm_90a");
  assert_string_equal(back.kind, "cubin");
  assert_string_equal(back.digest, r.digest); /* put fills digest, size, log_digest, created */
  assert_true(back.size == 5 && size == 5);
  assert_string_equal(back.toolchain, "nvrtc-12.8");
  assert_string_equal(back.options, "-std=c++17 -DX=1");
  assert_true(back.build_ms == 1234.5);
  assert_int_equal(back.registers, 1);
  assert_int_equal(back.spill_stores, 2);
  assert_int_equal(back.spill_loads, 3);
  assert_int_equal(back.shared_bytes, 4);
  assert_int_equal(back.stack_bytes, -1);
  assert_string_equal(back.log_digest, r.log_digest);
  assert_true(back.log_digest[0] != '\0');
  assert_true(back.created == r.created && back.last_used == r.last_used && back.created > 0);
  assert_int_equal(back.layer, 0);
  free(blob);
  kiln_cache_close(c);
  test_rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_columns_are_the_schemas),
      cmocka_unit_test(test_canonical_lines_are_each_one_named_row),
      cmocka_unit_test(test_every_field_survives_the_index),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
