/* common/fileio.c: atomic writes leave the file whole or absent, never a temp. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "common/fileio.h"
#include "tests/unit/test_util.h"

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void test_write_atomic_round_trip_and_mode(void **state) {
  (void)state;
  char dir[256], path[512];
  uint8_t *data = NULL;
  size_t len = 0;
  struct stat st;
  test_make_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/f", dir);
  assert_int_equal(kiln_write_atomic(path, dir, "hello", 5, 0444), KILN_OK);
  assert_int_equal(kiln_read_file(path, &data, &len), KILN_OK);
  assert_int_equal(len, 5);
  assert_memory_equal(data, "hello", 5);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0444);
  assert_int_equal(count_entries(dir), 1); /* no temp file left */
  free(data);
  test_rm_rf(dir);
}

static void test_failed_rename_leaves_no_temp(void **state) {
  (void)state;
  char dir[256], path[512];
  test_make_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/missing/f", dir);
  assert_int_equal(kiln_write_atomic(path, dir, "x", 1, 0444), KILN_EIO);
  assert_non_null(strstr(kiln_last_error(), "missing/f"));
  assert_int_equal(count_entries(dir), 0);
  test_rm_rf(dir);
}

static void test_read_missing_is_notfound(void **state) {
  (void)state;
  uint8_t *d;
  size_t n;
  assert_int_equal(kiln_read_file("/nonexistent/kiln", &d, &n), KILN_ENOTFOUND);
}

static void test_mkdir_p_and_file_in_the_way(void **state) {
  (void)state;
  char dir[256], path[512], file[512];
  test_make_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/a/b/c", dir);
  assert_int_equal(kiln_mkdir_p(path, 0700), KILN_OK);
  assert_int_equal(kiln_mkdir_p(path, 0700), KILN_OK);
  snprintf(file, sizeof file, "%s/a/f", dir);
  assert_int_equal(kiln_write_atomic(file, dir, "x", 1, 0600), KILN_OK);
  snprintf(path, sizeof path, "%s/a/f/g", dir);
  assert_int_not_equal(kiln_mkdir_p(path, 0700), KILN_OK);
  test_rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_write_atomic_round_trip_and_mode),
      cmocka_unit_test(test_failed_rename_leaves_no_temp),
      cmocka_unit_test(test_read_missing_is_notfound),
      cmocka_unit_test(test_mkdir_p_and_file_in_the_way),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
