/* compiler/target.c: target names and arch lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/status.h"
#include "kiln/target.h"

static void test_parse_forms(void **state) {
  (void)state;
  kiln_target t;
  char name[16];
  assert_int_equal(kiln_target_parse(&t, "90"), KILN_OK);
  assert_string_equal(kiln_target_name(&t, name), "sm_90");
  assert_int_equal(kiln_target_parse(&t, "sm_80"), KILN_OK);
  assert_int_equal(t.arch, 80);
  assert_int_equal(t.kind, KILN_TARGET_CUBIN);
  assert_int_equal(kiln_target_parse(&t, "sm_90a"), KILN_OK);
  assert_string_equal(kiln_target_name(&t, name), "sm_90a");
  assert_int_equal(kiln_target_parse(&t, "compute_120"), KILN_OK);
  assert_string_equal(kiln_target_name(&t, name), "compute_120");
  assert_int_equal(kiln_target_parse(&t, "compute_90a"), KILN_EINVAL);
  assert_int_equal(kiln_target_parse(&t, "sm90"), KILN_EINVAL);
  assert_int_equal(kiln_target_parse(&t, ""), KILN_EINVAL);
  assert_int_equal(kiln_target_parse(&t, "9x"), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "compute_90"));
}

static void test_list_dedupes_and_sorts(void **state) {
  (void)state;
  kiln_target *v = NULL;
  size_t n = 0;
  char name[16];
  assert_int_equal(kiln_targets_parse_list(&v, &n, "90,sm_80,90+ptx,compute_80"), KILN_OK);
  assert_int_equal(n, 4);
  assert_string_equal(kiln_target_name(&v[0], name), "sm_80");
  assert_string_equal(kiln_target_name(&v[1], name), "sm_90");
  assert_string_equal(kiln_target_name(&v[2], name), "compute_80");
  assert_string_equal(kiln_target_name(&v[3], name), "compute_90");
  free(v);
}

static void test_all_is_every_supported_cubin_plus_two_ptx(void **state) {
  (void)state;
  kiln_target *v = NULL;
  int *archs = NULL;
  size_t n = 0, na = 0, want = 0, ptx = 0;
  assert_int_equal(kiln_nvrtc_supported_archs(&archs, &na), KILN_OK);
  for (size_t i = 0; i < na; i++)
    want += archs[i] >= KILN_MIN_ARCH;
  assert_int_equal(kiln_targets_parse_list(&v, &n, "all"), KILN_OK);
  for (size_t i = 0; i < n; i++) {
    assert_true(v[i].arch >= KILN_MIN_ARCH);
    ptx += v[i].kind == KILN_TARGET_PTX;
  }
  assert_int_equal(ptx, want > 1 ? 2 : 1);
  assert_int_equal(n, want + ptx);
  free(v);
  free(archs);
}

static void test_unknown_arch_names_the_supported_list(void **state) {
  (void)state;
  kiln_target *v = NULL;
  size_t n = 0;
  assert_int_equal(kiln_targets_parse_list(&v, &n, "91"), KILN_EUNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "90"));
  assert_non_null(strstr(kiln_last_error(), "80"));
  assert_int_equal(kiln_targets_parse_list(&v, &n, "75"), KILN_EUNSUPPORTED); /* below sm_80 */
  assert_int_equal(kiln_targets_parse_list(&v, &n, "sm_86a"), KILN_EUNSUPPORTED);
  assert_int_equal(kiln_targets_parse_list(&v, &n, "90+sass"), KILN_EINVAL);
  assert_int_equal(kiln_targets_parse_list(&v, &n, ""), KILN_EINVAL);
  assert_int_equal(kiln_targets_parse_list(&v, &n, ",,"), KILN_EINVAL);
  assert_null(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_forms),
      cmocka_unit_test(test_list_dedupes_and_sorts),
      cmocka_unit_test(test_all_is_every_supported_cubin_plus_two_ptx),
      cmocka_unit_test(test_unknown_arch_names_the_supported_list),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
