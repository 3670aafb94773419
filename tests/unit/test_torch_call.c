/* torch/call.c, torch/shim.c, torch/register.c: what libkiln_torch does without
 * a torch: Python's float repr and torch's shape repr for messages, dtype
 * names, a shim that is not there, and which ops have a kernel (the kernels
 * themselves run in python/tests/test_ops_fast.py, inside torch). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "torch/call.h"
#include "torch/kiln_torch.h"

/* Python's repr of each value (python3 -c 'print(repr(v))') */
static void test_pyfloat_is_pythons_repr(void **state) {
  (void)state;
  const struct {
    double v;
    const char *repr;
  } cases[] = {
      {0.5, "0.5"},
      {1.0, "1.0"},
      {100.0, "100.0"},
      {-1e-05, "-1e-05"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {0.1, "0.1"},
      {1.25, "1.25"},
      {0.0001, "0.0001"},
      {1.234e-05, "1.234e-05"},
      {2.0 / 3.0, "0.6666666666666666"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {5e-324, "5e-324"},
      {-0.0, "-0.0"},
      {123456789.0, "123456789.0"},
      {__builtin_nan(""), "nan"},
      {__builtin_inf(), "inf"},
      {-__builtin_inf(), "-inf"},
  };
  char buf[64];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    assert_string_equal(kt_pyfloat(buf, sizeof buf, cases[i].v), cases[i].repr);
}

static void test_shape_is_torchs_tuple_repr(void **state) {
  (void)state;
  char buf[64];
  const int64_t sizes[] = {2, 3, 0};
  assert_string_equal(kt_shape(buf, sizeof buf, 0, sizes), "()");
  assert_string_equal(kt_shape(buf, sizeof buf, 1, sizes), "(2,)");
  assert_string_equal(kt_shape(buf, sizeof buf, 3, sizes), "(2, 3, 0)");
  char small[6]; /* truncated, still terminated */
  assert_int_equal(strlen(kt_shape(small, sizeof small, 3, sizes)), 5);
}

static void test_a_library_without_the_shim_names_the_first_missing_symbol(void **state) {
  (void)state;
  char missing[128];
  /* libc is loaded in every process and has none of torch's symbols */
  assert_int_equal(kt_shim_load("libc.so.6", NULL, missing, sizeof missing), -1);
  assert_string_equal(missing, "aoti_torch_dtype_float32");
  assert_int_equal(kt_shim_load("libnot-loaded-kiln.so", NULL, missing, sizeof missing), -1);
  assert_string_equal(missing, "libnot-loaded-kiln.so (not loaded)");
  assert_int_equal(kiln_torch_open("libc.so.6", NULL, missing, sizeof missing), -1);
  assert_string_equal(kiln_torch_ops(), "");
}

static void test_every_op_but_the_generator_draw_has_a_kernel(void **state) {
  (void)state;
  char missing[128];
  const char *ops[] = {"scaled_softmax",
                       "layer_norm_backward",
                       "bias_dropout_add",
                       "bias_dropout_add_backward",
                       "embedding",
                       "embedding_backward",
                       "rope",
                       "rope_backward",
                       "cross_entropy",
                       "cross_entropy_backward",
                       "cross_entropy_stats"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    assert_int_equal(kiln_torch_op_missing(ops[i], missing, sizeof missing), 0);
  assert_int_equal(kiln_torch_op_missing("philox_seed_offset", missing, sizeof missing), -1);
  assert_int_equal(kiln_torch_op_missing(NULL, missing, sizeof missing), -1);
  void *lib = (void *)1;
  assert_int_equal(kiln_torch_register(&lib, "CPU", "rope"), KILN_EINVAL); /* not open */
  assert_null(lib);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pyfloat_is_pythons_repr),
      cmocka_unit_test(test_shape_is_torchs_tuple_repr),
      cmocka_unit_test(test_a_library_without_the_shim_names_the_first_missing_symbol),
      cmocka_unit_test(test_every_op_but_the_generator_draw_has_a_kernel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
