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

/* A CUBIN compile's PTX is the PTX target's: same bytes, same log. */
static void test_pair_gives_the_ptx_compile_of_the_same_arch(void **state) {
  (void)state;
  kiln_source_file f = {"t/t.cu", good_src, sizeof good_src - 1};
  const kiln_source_file *files[] = {&f};
  kiln_unit_info u = {"t", "", 80, &f, 1, files, 0, NULL};
  kiln_target cubin = {80, 0, KILN_TARGET_CUBIN}, ptx = {80, 0, KILN_TARGET_PTX};
  const char *opts = "-std=c++17 --ptxas-options=-v";
  kiln_artifact c, p, alone;
  assert_int_equal(kiln_compile_unit_pair(&c, &p, &u, &cubin, opts), KILN_OK);
  assert_memory_equal(c.data,
                      "\x7f"
                      "ELF",
                      4);
  assert_non_null(strstr(c.log, "ptxas"));
  assert_int_equal(c.res.functions, 1);
  assert_int_equal(kiln_compile_unit(&alone, &u, &ptx, opts), KILN_OK);
  assert_int_equal(p.size, alone.size);
  assert_memory_equal(p.data, alone.data, alone.size);
  assert_string_equal(p.log, alone.log);
  assert_int_equal(p.log_len, alone.log_len);
  assert_int_equal(p.res.registers, -1);
  assert_null(strstr(p.log, "ptxas"));
  kiln_artifact_free(&c);
  kiln_artifact_free(&p);
  kiln_artifact_free(&alone);
  /* only from a CUBIN target */
  assert_int_equal(kiln_compile_unit_pair(&c, &p, &u, &ptx, opts), KILN_EINVAL);
  /* a failed compile leaves the PTX empty */
  kiln_source_file bad = {"t/bad.cu", bad_src, sizeof bad_src - 1};
  const kiln_source_file *bad_files[] = {&bad};
  kiln_unit_info bu = {"bad", "", 80, &bad, 1, bad_files, 0, NULL};
  assert_int_equal(kiln_compile_unit_pair(&c, &p, &bu, &cubin, opts), KILN_ECOMPILE);
  assert_null(p.data);
  assert_null(p.log);
  kiln_artifact_free(&c);
  kiln_artifact_free(&p);
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
      cmocka_unit_test(test_pair_gives_the_ptx_compile_of_the_same_arch),
      cmocka_unit_test(test_compile_error_keeps_the_log),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
