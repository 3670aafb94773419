/* common/params.c: environment parameters and value parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/params.h"

static void test_parse_int_bounds_and_garbage(void **state) {
  (void)state;
  long long v;
  assert_int_equal(kiln_parse_int(&v, "42", 0, 100, "x"), KILN_OK);
  assert_int_equal(v, 42);
  assert_int_equal(kiln_parse_int(&v, "101", 0, 100, "x"), KILN_EINVAL);
  assert_int_equal(kiln_parse_int(&v, "4x", 0, 100, "x"), KILN_EINVAL);
  assert_int_equal(kiln_parse_int(&v, "", 0, 100, "x"), KILN_EINVAL);
  assert_int_equal(kiln_parse_int(&v, "99999999999999999999", 0, 100, "x"), KILN_EINVAL);
}

static void test_parse_size_units(void **state) {
  (void)state;
  unsigned long long v;
  assert_int_equal(kiln_parse_size(&v, "1048576", "s"), KILN_OK);
  assert_int_equal(v, 1048576);
  assert_int_equal(kiln_parse_size(&v, "64k", "s"), KILN_OK);
  assert_int_equal(v, 65536);
  assert_int_equal(kiln_parse_size(&v, "2GiB", "s"), KILN_OK);
  assert_int_equal(v, 2ULL << 30);
  assert_int_equal(kiln_parse_size(&v, "5Q", "s"), KILN_EINVAL);
  assert_int_equal(kiln_parse_size(&v, "-1", "s"), KILN_EINVAL);
  assert_int_equal(kiln_parse_size(&v, " -1", "s"), KILN_EINVAL);
  assert_int_equal(kiln_parse_size(&v, "+5G", "s"), KILN_EINVAL);
  assert_int_equal(kiln_parse_size(&v, "", "s"), KILN_EINVAL);
}

static void test_cache_dir_precedence(void **state) {
  (void)state;
  char d[512];
  setenv("HOME", "/home/h", 1);
  unsetenv("KILN_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  assert_int_equal(kiln_param_cache_dir(d, sizeof d), KILN_OK);
  assert_string_equal(d, "/home/h/.cache/kiln");
  setenv("XDG_CACHE_HOME", "/x", 1);
  assert_int_equal(kiln_param_cache_dir(d, sizeof d), KILN_OK);
  assert_string_equal(d, "/x/kiln");
  setenv("KILN_CACHE_DIR", "/k", 1);
  assert_int_equal(kiln_param_cache_dir(d, sizeof d), KILN_OK);
  assert_string_equal(d, "/k");
}

static void test_bad_env_values_are_errors(void **state) {
  (void)state;
  int v;
  setenv("KILN_JOBS", "zero", 1);
  assert_int_equal(kiln_param_jobs(&v), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "KILN_JOBS"));
  setenv("KILN_JOBS", "3", 1);
  assert_int_equal(kiln_param_jobs(&v), KILN_OK);
  assert_int_equal(v, 3);
  unsetenv("KILN_JOBS");
  assert_int_equal(kiln_param_jobs(&v), KILN_OK);
  assert_int_equal(v, 0);
  setenv("KILN_FAILURE_TTL", "-5", 1);
  assert_int_equal(kiln_param_failure_ttl(&v), KILN_EINVAL);
  unsetenv("KILN_FAILURE_TTL");
  assert_int_equal(kiln_param_failure_ttl(&v), KILN_OK);
  assert_int_equal(v, 600);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_int_bounds_and_garbage),
      cmocka_unit_test(test_parse_size_units),
      cmocka_unit_test(test_cache_dir_precedence),
      cmocka_unit_test(test_bad_env_values_are_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
