/* cache key: every input named in DESIGN.md changes the key; nothing else does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "kiln/cache.h"
#include "kiln/kernels.h"
#include "tests/unit/test_util.h"

/* Computed independently (python hashlib) from the layout in DESIGN.md. */
#define KILN_TEST_UNIT_DIGEST "401549d1f3a5e9467501e55f930d2ca303463a385dd65a1c1afdf2c78a8ae603"
#define KILN_TEST_KEY "b5509393485b1736be2724475e8a4296e333d63f8db2c23d84525a5437bcd4d6"

static const unsigned char main_src[] =
    "#include \"common/a.cuh\"\nextern \"C\" __global__ void k() {}\n";
static const unsigned char hdr_src[] = "#define A 1\n";
static const unsigned char hdr_src2[] = "#define A 2\n";

static kiln_source_file f_main = {"u/u.cu", main_src, sizeof main_src - 1};
static kiln_source_file f_hdr = {"common/a.cuh", hdr_src, sizeof hdr_src - 1};

static void make_unit(kiln_unit_info *u, const kiln_source_file **files, const char *name) {
  memset(u, 0, sizeof *u);
  u->name = name;
  u->main_file = files[0];
  u->n_files = 2;
  u->files = files;
}

static void key_of(char out[65], const kiln_unit_info *u, const char *target, const char *opts,
                   const char *tc) {
  assert_int_equal(kiln_cache_key(out, u, target, opts, tc), KILN_OK);
}

static void test_same_inputs_same_key_and_order_free(void **state) {
  (void)state;
  const kiln_source_file *a[] = {&f_main, &f_hdr}, *b[] = {&f_hdr, &f_main};
  kiln_unit_info ua, ub;
  char k1[65], k2[65];
  make_unit(&ua, a, "u");
  make_unit(&ub, b, "u");
  key_of(k1, &ua, "sm_90", "-std=c++17", "nvrtc-13.0");
  key_of(k2, &ub, "sm_90", "-std=c++17", "nvrtc-13.0");
  assert_string_equal(k1, k2);
  assert_int_equal(strlen(k1), 64);
}

static void test_each_input_changes_the_key(void **state) {
  (void)state;
  const kiln_source_file *files[] = {&f_main, &f_hdr};
  kiln_source_file hdr2 = {"common/a.cuh", hdr_src2, sizeof hdr_src2 - 1};
  kiln_source_file hdr_moved = {"common/b.cuh", hdr_src, sizeof hdr_src - 1};
  kiln_source_file hdr_short = {"common/a.cuh", hdr_src, sizeof hdr_src - 2};
  const kiln_source_file *files2[] = {&f_main, &hdr2}, *files3[] = {&f_main, &hdr_moved},
                         *files4[] = {&f_main, &hdr_short};
  kiln_unit_info u, v;
  char base[65], k[65];
  make_unit(&u, files, "u");
  key_of(base, &u, "sm_90", "-std=c++17", "nvrtc-13.0");

  make_unit(&v, files, "other"); /* unit name */
  key_of(k, &v, "sm_90", "-std=c++17", "nvrtc-13.0");
  assert_string_not_equal(base, k);
  make_unit(&v, files2, "u"); /* a header's bytes */
  key_of(k, &v, "sm_90", "-std=c++17", "nvrtc-13.0");
  assert_string_not_equal(base, k);
  make_unit(&v, files3, "u"); /* a file's path */
  key_of(k, &v, "sm_90", "-std=c++17", "nvrtc-13.0");
  assert_string_not_equal(base, k);
  make_unit(&v, files4, "u"); /* a file's size */
  key_of(k, &v, "sm_90", "-std=c++17", "nvrtc-13.0");
  assert_string_not_equal(base, k);
  key_of(k, &u, "sm_80", "-std=c++17", "nvrtc-13.0"); /* target */
  assert_string_not_equal(base, k);
  key_of(k, &u, "compute_90", "-std=c++17", "nvrtc-13.0");
  assert_string_not_equal(base, k);
  key_of(k, &u, "sm_90", "-std=c++17 -lineinfo", "nvrtc-13.0"); /* options */
  assert_string_not_equal(base, k);
  key_of(k, &u, "sm_90", "-std=c++17", "nvrtc-13.1"); /* toolchain */
  assert_string_not_equal(base, k);
}

/* Field boundaries are NUL-separated: moving a character across fields
 * must not give the same key. */
static void test_fields_do_not_run_together(void **state) {
  (void)state;
  const kiln_source_file *files[] = {&f_main, &f_hdr};
  kiln_unit_info u;
  char a[65], b[65];
  make_unit(&u, files, "u");
  key_of(a, &u, "sm_90", "x", "nvrtc-13.0");
  key_of(b, &u, "sm_90x", "", "nvrtc-13.0");
  assert_string_not_equal(a, b);
}

static void test_environment_does_not_change_the_key(void **state) {
  (void)state;
  const kiln_unit_info *u = kiln_unit_find("scaled_softmax");
  char a[65], b[65], dir[256], old[4096];
  assert_non_null(u);
  key_of(a, u, "sm_90", "-std=c++17", "nvrtc-13.0");
  test_make_tmpdir(dir, sizeof dir);
  assert_non_null(getcwd(old, sizeof old));
  assert_int_equal(chdir(dir), 0);    /* cwd */
  setenv("KILN_CACHE_DIR", dir, 1);   /* cache path */
  setenv("HOSTNAME", "elsewhere", 1); /* host */
  key_of(b, u, "sm_90", "-std=c++17", "nvrtc-13.0");
  assert_string_equal(a, b);
  sleep(1); /* time */
  key_of(b, u, "sm_90", "-std=c++17", "nvrtc-13.0");
  assert_string_equal(a, b);
  assert_int_equal(chdir(old), 0);
  test_rm_rf(dir);
}

static void test_known_answer(void **state) {
  (void)state;
  /* SHA-256("kiln-key-v1\0u\0<digest>\0sm_90\0o\0nvrtc-13.0") for the fixed unit
   * above, pinned so an accidental change of the key layout is caught. */
  const kiln_source_file *files[] = {&f_main, &f_hdr};
  kiln_unit_info u;
  char d[65], k1[65], k2[65];
  make_unit(&u, files, "u");
  assert_int_equal(kiln_unit_digest(d, &u), KILN_OK);
  key_of(k1, &u, "sm_90", "o", "nvrtc-13.0");
  key_of(k2, &u, "sm_90", "o", "nvrtc-13.0");
  assert_string_equal(k1, k2);
  assert_string_equal(d, KILN_TEST_UNIT_DIGEST);
  assert_string_equal(k1, KILN_TEST_KEY);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_inputs_same_key_and_order_free),
      cmocka_unit_test(test_each_input_changes_the_key),
      cmocka_unit_test(test_fields_do_not_run_together),
      cmocka_unit_test(test_environment_does_not_change_the_key),
      cmocka_unit_test(test_known_answer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
