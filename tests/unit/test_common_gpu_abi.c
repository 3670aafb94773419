/* common/gpu_abi.h against the CUDA toolkit's headers: every constant and
 * type size kiln declares itself equals the toolkit's (the two tables of
 * gpu_abi_side.c), and every entry point kiln binds has the toolkit's
 * signature (checked when gpu_abi_side.c compiles against the toolkit).
 * Built only where the toolkit is installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "tests/unit/gpu_abi_side.h"

static void test_kiln_declarations_equal_the_toolkits(void **state) {
  int bad = 0;
  size_t n = 0;
  (void)state;
  for (; abi_kiln[n].name; n++) {
    assert_non_null(abi_toolkit[n].name);
    assert_string_equal(abi_kiln[n].name, abi_toolkit[n].name);
    if (abi_kiln[n].value != abi_toolkit[n].value) {
      printf("%s: kiln says %lld, the toolkit %lld\n", abi_kiln[n].name, abi_kiln[n].value,
             abi_toolkit[n].value);
      bad++;
    }
  }
  assert_null(abi_toolkit[n].name);
  assert_true(n > 50); /* the whole list, not an empty table */
  assert_int_equal(bad, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kiln_declarations_equal_the_toolkits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
