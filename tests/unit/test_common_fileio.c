/* common/fileio.c: atomic writes leave the file whole or absent, never a temp; untrusted files
 * are read (or hashed as a stream) only when regular and of the size expected, and a file that
 * changes size while read is refused. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/digest.h"
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

/* dir/name holding n bytes of a pattern; its SHA-256 in hex. */
static void write_pattern(char *path, size_t cap, const char *dir, const char *name, size_t n,
                          char hex[65]) {
  uint8_t *b = malloc(n ? n : 1);
  assert_non_null(b);
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t)(i * 131 + (i >> 9));
  snprintf(path, cap, "%s/%s", dir, name);
  assert_int_equal(kiln_write_atomic(path, dir, b, n, 0600), KILN_OK);
  assert_int_equal(kiln_sha256_hex(hex, b, n), KILN_OK);
  free(b);
}

static void test_hash_regular_streams_to_the_one_shot_digest(void **state) {
  (void)state;
  /* 0 bytes, under one 64 KiB buffer, exactly one, several and a partial last one */
  static const size_t sizes[] = {0, 1, 65535, 65536, 3 * 65536 + 7};
  char dir[256], path[512], want[65], got[65];
  test_make_tmpdir(dir, sizeof dir);
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    uint64_t n = 99;
    uint8_t *data = NULL;
    size_t len = 0;
    write_pattern(path, sizeof path, dir, "f", sizes[i], want);
    assert_int_equal(kiln_hash_regular(path, sizes[i], UINT64_MAX, 0, got, &n), KILN_OK);
    assert_string_equal(got, want);
    assert_int_equal(n, sizes[i]);
    assert_int_equal(kiln_hash_regular(path, UINT64_MAX, sizes[i], KILN_READ_NOFOLLOW, got, NULL),
                     KILN_OK);
    assert_string_equal(got, want);
    assert_int_equal(kiln_read_regular(path, sizes[i], sizes[i], 0, &data, &len), KILN_OK);
    assert_int_equal(len, sizes[i]);
    assert_int_equal(data[len], 0); /* a NUL after the bytes */
    assert_int_equal(kiln_sha256_hex(got, data, len), KILN_OK);
    assert_string_equal(got, want);
    free(data);
  }
  test_rm_rf(dir);
}

static void test_size_other_than_expected_is_refused_before_reading(void **state) {
  (void)state;
  char dir[256], path[512], hex[65];
  uint8_t *data = NULL;
  size_t len = 0;
  test_make_tmpdir(dir, sizeof dir);
  write_pattern(path, sizeof path, dir, "f", 1000, hex);
  /* larger and smaller than the record says */
  assert_int_equal(kiln_hash_regular(path, 999, UINT64_MAX, 0, hex, NULL), KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "is 1000 bytes, not the 999 expected"));
  assert_int_equal(kiln_hash_regular(path, 1001, UINT64_MAX, 0, hex, NULL), KILN_ECORRUPT);
  assert_int_equal(kiln_read_regular(path, 1001, UINT64_MAX, 0, &data, &len), KILN_ECORRUPT);
  /* over the most a file there may have, whatever its expected size */
  assert_int_equal(kiln_hash_regular(path, UINT64_MAX, 999, 0, hex, NULL), KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "over the 999"));
  /* a 4 GiB sparse file is refused by its size at once (never read, never allocated) */
  assert_int_equal(truncate(path, (off_t)4 << 30), 0);
  assert_int_equal(kiln_hash_regular(path, 1000, UINT64_MAX, 0, hex, NULL), KILN_ECORRUPT);
  assert_int_equal(kiln_hash_regular(path, UINT64_MAX, (uint64_t)1 << 30, 0, hex, NULL),
                   KILN_ECORRUPT);
  assert_int_equal(kiln_read_regular(path, UINT64_MAX, (uint64_t)1 << 30, 0, &data, &len),
                   KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "4294967296 bytes"));
  test_rm_rf(dir);
}

static void test_fifo_symlink_and_directory_are_refused(void **state) {
  (void)state;
  char dir[256], path[512], link[512], hex[65];
  test_make_tmpdir(dir, sizeof dir);
  write_pattern(path, sizeof path, dir, "f", 10, hex);
  snprintf(link, sizeof link, "%s/link", dir);
  assert_int_equal(symlink(path, link), 0);
  assert_int_equal(kiln_hash_regular(link, 10, UINT64_MAX, KILN_READ_NOFOLLOW, hex, NULL),
                   KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "symbolic link"));
  assert_int_equal(kiln_hash_regular(link, 10, UINT64_MAX, 0, hex, NULL), KILN_OK);
  snprintf(path, sizeof path, "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(kiln_hash_regular(path, UINT64_MAX, UINT64_MAX, 0, hex, NULL), KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "not a regular file"));
  assert_int_equal(kiln_hash_regular(dir, UINT64_MAX, UINT64_MAX, 0, hex, NULL), KILN_ECORRUPT);
  snprintf(path, sizeof path, "%s/missing", dir);
  assert_int_equal(kiln_hash_regular(path, UINT64_MAX, UINT64_MAX, 0, hex, NULL), KILN_ENOTFOUND);
  test_rm_rf(dir);
}

/* Files whose size changes between the fstat and the read, made by the kernel
 * every time: /proc files say 0 bytes and hold more (grows), sysfs attributes
 * say 4096 and hold a line (shrinks). */
static void test_file_that_changes_size_while_read_is_refused(void **state) {
  (void)state;
  const char *sys = "/sys/devices/system/cpu/online";
  struct stat st;
  char hex[65];
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(stat("/proc/self/status", &st), 0);
  assert_int_equal(st.st_size, 0);
  assert_int_equal(kiln_hash_regular("/proc/self/status", UINT64_MAX, UINT64_MAX, 0, hex, NULL),
                   KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "grew while read"));
  assert_int_equal(kiln_read_regular("/proc/self/status", 0, UINT64_MAX, 0, &data, &len),
                   KILN_ECORRUPT);
  if (stat(sys, &st) != 0 || st.st_size != 4096) {
    print_message("no sysfs attribute of 4096 bytes at %s: the shrink case is not run\n", sys);
    return;
  }
  assert_int_equal(kiln_hash_regular(sys, 4096, UINT64_MAX, 0, hex, NULL), KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "shrank while read"));
  assert_int_equal(kiln_read_regular(sys, UINT64_MAX, UINT64_MAX, 0, &data, &len), KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "of 4096 bytes"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_write_atomic_round_trip_and_mode),
      cmocka_unit_test(test_failed_rename_leaves_no_temp),
      cmocka_unit_test(test_read_missing_is_notfound),
      cmocka_unit_test(test_mkdir_p_and_file_in_the_way),
      cmocka_unit_test(test_hash_regular_streams_to_the_one_shot_digest),
      cmocka_unit_test(test_size_other_than_expected_is_refused_before_reading),
      cmocka_unit_test(test_fifo_symlink_and_directory_are_refused),
      cmocka_unit_test(test_file_that_changes_size_while_read_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
