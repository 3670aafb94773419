/* compiler/compile.c: ptxas resource parsing and a real NVRTC compile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compiler/compile.h"

static const char *log_text =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'a' for 'sm_90'\n"
    "ptxas info    : Function properties for a\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 32 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]\n"
    "ptxas info    : Compiling entry function 'b' for 'sm_90'\n"
    "ptxas info    : Function properties for b\n"
    "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
    "ptxas info    : Used 40 registers, used 0 barriers, 380 bytes cmem[0]\n";

static void test_parse_resources_max_and_sum(void **state) {
  (void)state;
  kiln_resources r;
  kiln_parse_resources(&r, log_text);
  assert_int_equal(r.functions, 2);
  assert_int_equal(r.registers, 40);
  assert_int_equal(r.shared_bytes, 2048);
  assert_int_equal(r.stack_bytes, 16);
  assert_int_equal(r.spill_stores, 8);
  assert_int_equal(r.spill_loads, 4);
  kiln_parse_resources(&r, "");
  assert_int_equal(r.functions, 0);
  assert_int_equal(r.registers, 0);
}

static const unsigned char good_src[] =
    "extern \"C\" __global__ void kiln_test_k(float *y) { y[threadIdx.x] = 1.0f; }\n";
static const unsigned char bad_src[] = "extern \"C\" __global__ void broken( { }\n";

static void test_compile_cubin_and_ptx(void **state) {
  (void)state;
  kiln_source_file f = {"t/t.cu", good_src, sizeof good_src - 1};
  const kiln_source_file *files[] = {&f};
  kiln_unit_info u = {"t", "", 80, &f, 1, files, 0, NULL};
  kiln_target cubin = {90, 0, KILN_TARGET_CUBIN}, ptx = {80, 0, KILN_TARGET_PTX};
  kiln_artifact a;
  assert_int_equal(kiln_compile_unit(&a, &u, &cubin, "-std=c++17 --ptxas-options=-v"), KILN_OK);
  assert_true(a.size > 64);
  assert_memory_equal(a.data,
                      "\x7f"
                      "ELF",
                      4);
  assert_int_equal(a.res.functions, 1);
  assert_true(a.res.registers > 0);
  kiln_artifact_free(&a);
  assert_int_equal(kiln_compile_unit(&a, &u, &ptx, "-std=c++17"), KILN_OK);
  assert_non_null(strstr((const char *)a.data, ".target sm_80"));
  assert_int_not_equal(a.data[a.size - 1], '\0'); /* stored as text, no NUL */
  assert_int_equal(a.res.registers, -1);
  kiln_artifact_free(&a);
}

static void test_compile_error_keeps_the_log(void **state) {
  (void)state;
  kiln_source_file f = {"t/bad.cu", bad_src, sizeof bad_src - 1};
  const kiln_source_file *files[] = {&f};
  kiln_unit_info u = {"bad", "", 80, &f, 1, files, 0, NULL};
  kiln_target t = {90, 0, KILN_TARGET_CUBIN};
  kiln_artifact a;
  assert_int_equal(kiln_compile_unit(&a, &u, &t, "-std=c++17"), KILN_ECOMPILE);
  assert_non_null(a.log);
  assert_non_null(strstr(a.log, "bad.cu"));
  assert_non_null(strstr(kiln_last_error(), "bad for sm_90"));
  kiln_artifact_free(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_resources_max_and_sum),
      cmocka_unit_test(test_compile_cubin_and_ptx),
      cmocka_unit_test(test_compile_error_keeps_the_log),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
