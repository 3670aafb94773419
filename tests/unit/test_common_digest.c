/* common/digest.c: SHA-256 and HMAC-SHA256 against published known answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/digest.h"

static void test_sha256_fips_180_2(void **state) {
  (void)state;
  char hex[65];
  assert_int_equal(kiln_sha256_hex(hex, "abc", 3), KILN_OK);
  assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  assert_int_equal(kiln_sha256_hex(hex, "", 0), KILN_OK);
  assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  assert_true(kiln_is_hex64(hex));
}

static void test_incremental_equals_one_shot(void **state) {
  (void)state;
  kiln_sha256 *h = NULL;
  char a[65], b[65];
  assert_int_equal(kiln_sha256_new(&h), KILN_OK);
  assert_int_equal(kiln_sha256_update(h, "ab", 2), KILN_OK);
  assert_int_equal(kiln_sha256_update(h, "c", 1), KILN_OK);
  assert_int_equal(kiln_sha256_final_hex(h, a), KILN_OK);
  kiln_sha256_free(h);
  assert_int_equal(kiln_sha256_hex(b, "abc", 3), KILN_OK);
  assert_string_equal(a, b);
}

static void test_hmac_sha256_rfc_4231_case_2(void **state) {
  (void)state;
  const char *data = "what do ya want for nothing?";
  char hex[65];
  assert_int_equal(kiln_hmac_sha256_hex(hex, "Jefe", 4, data, strlen(data)), KILN_OK);
  assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

static void test_is_hex64_rejects_other_text(void **state) {
  (void)state;
  assert_false(kiln_is_hex64("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
  assert_false(kiln_is_hex64("ba7816bf"));
  assert_false(kiln_is_hex64("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015adX"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256_fips_180_2),
      cmocka_unit_test(test_incremental_equals_one_shot),
      cmocka_unit_test(test_hmac_sha256_rfc_4231_case_2),
      cmocka_unit_test(test_is_hex64_rejects_other_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
