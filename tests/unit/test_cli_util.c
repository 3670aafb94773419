/* cli/util.c: the command's own helpers (the size parser of `cache gc`). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cli/cli.h"

static void test_parse_size_units(void **state) {
  (void)state;
  unsigned long long v;
  assert_int_equal(cli_parse_size(&v, "1048576"), KILN_OK);
  assert_int_equal(v, 1048576);
  assert_int_equal(cli_parse_size(&v, "64k"), KILN_OK);
  assert_int_equal(v, 65536);
  assert_int_equal(cli_parse_size(&v, "2GiB"), KILN_OK);
  assert_int_equal(v, 2ULL << 30);
  assert_int_equal(cli_parse_size(&v, "5Q"), KILN_EINVAL);
  assert_int_equal(cli_parse_size(&v, "-1"), KILN_EINVAL);
  assert_int_equal(cli_parse_size(&v, " -1"), KILN_EINVAL);
  assert_int_equal(cli_parse_size(&v, "+5G"), KILN_EINVAL);
  assert_int_equal(cli_parse_size(&v, ""), KILN_EINVAL);
  assert_int_equal(cli_parse_size(&v, "99999999999T"), KILN_EINVAL); /* overflows */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_size_units),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
