/* common/params.c: environment parameters and value parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/params.h"
#include "kiln/api.h"

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

static void test_cache_dir_precedence(void **state) {
  (void)state;
  char d[512];
  setenv("HOME", "/home/h", 1);
  unsetenv("KILN_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  kiln_params_reset();
  assert_int_equal(kiln_param_cache_dir_path(d, sizeof d), KILN_OK);
  assert_string_equal(d, "/home/h/.cache/kiln");
  setenv("XDG_CACHE_HOME", "/x", 1);
  assert_int_equal(kiln_param_cache_dir_path(d, sizeof d), KILN_OK);
  assert_string_equal(d, "/x/kiln");
  setenv("KILN_CACHE_DIR", "/k", 1);
  kiln_params_reset(); /* KILN_CACHE_DIR is kept from its first read */
  assert_int_equal(kiln_param_cache_dir_path(d, sizeof d), KILN_OK);
  assert_string_equal(d, "/k");
}

static void test_bad_env_values_are_errors(void **state) {
  (void)state;
  int v;
  setenv("KILN_JOBS", "zero", 1);
  kiln_params_reset();
  assert_int_equal(kiln_param_jobs(&v), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "KILN_JOBS"));
  setenv("KILN_JOBS", "3", 1);
  kiln_params_reset();
  assert_int_equal(kiln_param_jobs(&v), KILN_OK);
  assert_int_equal(v, 3);
  unsetenv("KILN_JOBS");
  kiln_params_reset();
  assert_int_equal(kiln_param_jobs(&v), KILN_OK);
  assert_int_equal(v, 0);
  setenv("KILN_FAILURE_TTL", "-5", 1);
  kiln_params_reset();
  assert_int_equal(kiln_param_failure_ttl(&v), KILN_EINVAL);
  unsetenv("KILN_FAILURE_TTL");
  kiln_params_reset();
  assert_int_equal(kiln_param_failure_ttl(&v), KILN_OK);
  assert_int_equal(v, 600);
}

/* Like NCCL_PARAM: the first read is kept; the environment changing under a
 * running process changes nothing (documented in common/params.h). */
static void test_values_are_read_once_per_process(void **state) {
  (void)state;
  int v;
  setenv("KILN_JOBS", "3", 1);
  kiln_params_reset();
  assert_int_equal(kiln_param_jobs(&v), KILN_OK);
  assert_int_equal(v, 3);
  setenv("KILN_JOBS", "5", 1);
  assert_int_equal(kiln_param_jobs(&v), KILN_OK);
  assert_int_equal(v, 3);
  unsetenv("KILN_JOBS");
  assert_int_equal(kiln_param_jobs(&v), KILN_OK);
  assert_int_equal(v, 3);
  kiln_params_reset();
  assert_int_equal(kiln_param_jobs(&v), KILN_OK);
  assert_int_equal(v, 0);
}

/* A malformed value stays an error on every read (with its message), and the
 * getter still gives the default so a reporter can go on. */
static void test_malformed_value_stays_an_error(void **state) {
  (void)state;
  double d = -1;
  setenv("KILN_BUILD_TIMEOUT", "soon", 1);
  kiln_params_reset();
  for (int i = 0; i < 2; i++) {
    kiln_fail(KILN_EIO, "something else");
    assert_int_equal(kiln_param_build_timeout_s(&d), KILN_EINVAL);
    assert_non_null(strstr(kiln_last_error(), "KILN_BUILD_TIMEOUT: 'soon'"));
    assert_true(d == 1800);
  }
  setenv("KILN_BUILD_TIMEOUT", "60", 1); /* ignored: the first read is kept */
  assert_int_equal(kiln_param_build_timeout_s(&d), KILN_EINVAL);
  unsetenv("KILN_BUILD_TIMEOUT");
  kiln_params_reset();
}

/* KILN_ENV takes the variable; any other value is range-checked, naming the
 * field and the variable. */
static void test_option_sentinel(void **state) {
  (void)state;
  int v = 0;
  double d = 0;
  setenv("KILN_REMOTE_RETRIES", "7", 1);
  kiln_params_reset();
  assert_int_equal(kiln_option_int(&v, KILN_ENV, KILN_P_remote_retries, "o.retries"), KILN_OK);
  assert_int_equal(v, 7);
  assert_int_equal(kiln_option_int(&v, 0, KILN_P_remote_retries, "o.retries"), KILN_OK);
  assert_int_equal(v, 0);
  assert_int_equal(kiln_option_int(&v, 11, KILN_P_remote_retries, "o.retries"), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "o.retries: 11"));
  assert_non_null(strstr(kiln_last_error(), "KILN_REMOTE_RETRIES"));
  assert_int_equal(kiln_option_seconds(&d, KILN_ENV, KILN_P_lease_stale_s, "o.s"), KILN_OK);
  assert_true(d == 30);
  assert_int_equal(kiln_option_seconds(&d, 0, KILN_P_lease_stale_s, "o.s"), KILN_EINVAL);
  assert_int_equal(kiln_option_seconds(&d, 2.5, KILN_P_lease_stale_s, "o.s"), KILN_OK);
  assert_true(d == 2.5);
  assert_int_equal(kiln_option_ms_as_seconds(&d, KILN_ENV, KILN_P_heartbeat_ms, "o.hb"), KILN_OK);
  assert_true(d == 0.5);
  assert_int_equal(kiln_option_ms_as_seconds(&d, 0.001, KILN_P_heartbeat_ms, "o.hb"), KILN_EINVAL);
  assert_string_equal(kiln_option_str("x", KILN_P_remote_url), "x");
  unsetenv("KILN_REMOTE_RETRIES");
  kiln_params_reset();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_int_bounds_and_garbage),
      cmocka_unit_test(test_cache_dir_precedence),
      cmocka_unit_test(test_bad_env_values_are_errors),
      cmocka_unit_test(test_values_are_read_once_per_process),
      cmocka_unit_test(test_malformed_value_stays_an_error),
      cmocka_unit_test(test_option_sentinel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
