/* cache/archive.c: the ustar writer and the stream reader, which takes its
 * input as hostile: every header it refuses is KILN_ECORRUPT with a reason,
 * and a stream that ends early is "truncated", never a read past the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/archive.h"
#include "common/error.h"

/* A temp file holding what a writer wrote, rewound for reading. */
static FILE *archive_of(const char *const *names, const char *const *datas, size_t n) {
  FILE *f = tmpfile();
  kiln_tar_writer w;
  assert_non_null(f);
  w.fd = fileno(f);
  w.offset = 0;
  w.sum = NULL;
  for (size_t i = 0; i < n; i++)
    assert_int_equal(kiln_tar_write(&w, names[i], datas[i], strlen(datas[i]), 1700000000, 1),
                     KILN_OK);
  assert_int_equal(kiln_tar_write_end(&w), KILN_OK);
  assert_int_equal(w.offset % KILN_TAR_BLOCK, 0);
  rewind(f);
  return f;
}

static void test_what_is_written_reads_back(void **state) {
  const char *names[] = {"kiln-archive.json", "cas/abc", "empty"};
  const char *datas[] = {"{\"version\": 1}", "0123456789", ""};
  FILE *f = archive_of(names, datas, 3);
  kiln_tar_reader r = {fileno(f), 0, 0, 0, "test.tar", NULL, 1};
  char name[KILN_TAR_NAME_MAX + 1], buf[64];
  uint64_t size;
  size_t got;
  int end;
  (void)state;
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(kiln_tar_next(&r, name, &size, &end), KILN_OK);
    assert_int_equal(end, 0);
    assert_string_equal(name, names[i]);
    assert_int_equal(size, strlen(datas[i]));
    if (i == 1) { /* a member read partly: the rest is skipped by the next call */
      assert_int_equal(kiln_tar_read(&r, buf, 4, &got), KILN_OK);
      assert_int_equal(got, 4);
      assert_memory_equal(buf, "0123", 4);
      continue;
    }
    assert_int_equal(kiln_tar_read(&r, buf, sizeof buf, &got), KILN_OK);
    assert_int_equal(got, strlen(datas[i]));
    assert_memory_equal(buf, datas[i], got);
    assert_int_equal(kiln_tar_read(&r, buf, sizeof buf, &got), KILN_OK);
    assert_int_equal(got, 0);
  }
  assert_int_equal(kiln_tar_next(&r, name, &size, &end), KILN_OK);
  assert_int_equal(end, 1);
  fclose(f);
}

/* A valid header of name/size, checksum included. */
static void header(unsigned char b[KILN_TAR_BLOCK], const char *name, size_t size) {
  FILE *f;
  const char *names[] = {name};
  char *data = calloc(size + 1, 1);
  memset(data, 'x', size);
  const char *datas[] = {data};
  f = archive_of(names, datas, 1);
  assert_int_equal(fread(b, 1, KILN_TAR_BLOCK, f), KILN_TAR_BLOCK);
  fclose(f);
  free(data);
}

/* Sets the checksum field of b to the sum of its bytes (so a test can change
 * a field and still pass the checksum). */
static void reseal(unsigned char b[KILN_TAR_BLOCK]) {
  unsigned long sum = 0;
  memset(b + 148, ' ', 8);
  for (int i = 0; i < KILN_TAR_BLOCK; i++)
    sum += b[i];
  snprintf((char *)b + 148, 8, "%06lo", sum);
  b[155] = ' ';
}

static void expect_refused(const unsigned char b[KILN_TAR_BLOCK], const char *why) {
  char name[KILN_TAR_NAME_MAX + 1];
  uint64_t size = 0;
  int zero = 0;
  assert_int_equal(kiln_tar_parse_header(b, name, &size, &zero), KILN_ECORRUPT);
  if (!strstr(kiln_last_error(), why)) fail_msg("'%s' lacks '%s'", kiln_last_error(), why);
}

static void test_hostile_headers_are_refused(void **state) {
  unsigned char b[KILN_TAR_BLOCK], good[KILN_TAR_BLOCK];
  char name[KILN_TAR_NAME_MAX + 1];
  uint64_t size = 0;
  int zero = 0;
  (void)state;
  header(good, "cas/abc", 10);
  if (kiln_tar_parse_header(good, name, &size, &zero) != KILN_OK) fail_msg("%s", kiln_last_error());
  assert_int_equal(size, 10);
  memcpy(b, good, sizeof b);
  b[3] ^= 1; /* a flipped byte */
  expect_refused(b, "checksum is wrong");
  memcpy(b, good, sizeof b);
  b[156] = '5'; /* a directory */
  reseal(b);
  expect_refused(b, "type '5'");
  memcpy(b, good, sizeof b);
  b[156] = '2'; /* a symbolic link */
  reseal(b);
  expect_refused(b, "type '2'");
  memcpy(b, good, sizeof b);
  memcpy(b + 124, "99999999999", 11); /* not octal */
  reseal(b);
  expect_refused(b, "not a size");
  memcpy(b, good, sizeof b);
  memcpy(b + 124, "10000000001", 11); /* 1 GiB + 1: more than any member may be */
  reseal(b);
  expect_refused(b, "not a size");
  memcpy(b, good, sizeof b);
  b[2] = '\n'; /* a control byte in the name */
  reseal(b);
  expect_refused(b, "control");
  memcpy(b, good, sizeof b);
  memcpy(b + 345, "etc", 3); /* a ustar prefix */
  reseal(b);
  expect_refused(b, "prefix");
  memcpy(b, good, sizeof b);
  memcpy(b + 257, "xxxxx", 5); /* not ustar */
  reseal(b);
  expect_refused(b, "magic");
  memset(b, 0, sizeof b);
  assert_int_equal(kiln_tar_parse_header(b, name, &size, &zero), KILN_OK);
  assert_int_equal(zero, 1);
}

static void test_a_short_stream_is_truncated_not_read_past(void **state) {
  const char *names[] = {"cas/abc"};
  const char *datas[] = {"0123456789"};
  FILE *f = archive_of(names, datas, 1), *g = tmpfile();
  unsigned char buf[KILN_TAR_BLOCK + 4];
  char name[KILN_TAR_NAME_MAX + 1];
  uint64_t size;
  size_t got;
  int end;
  kiln_tar_reader r = {fileno(g), 0, 0, 0, "cut.tar", NULL, 1};
  (void)state;
  assert_int_equal(fread(buf, 1, sizeof buf, f), sizeof buf); /* header + 4 data bytes */
  assert_int_equal(fwrite(buf, 1, sizeof buf, g), sizeof buf);
  fflush(g);
  rewind(g);
  assert_int_equal(kiln_tar_next(&r, name, &size, &end), KILN_OK);
  assert_int_equal(size, 10);
  assert_int_equal(kiln_tar_read(&r, buf, sizeof buf, &got), KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "cut.tar is truncated"));
  fclose(f);
  fclose(g);
}

static void test_one_zero_block_then_data_is_refused(void **state) {
  FILE *g = tmpfile();
  unsigned char z[KILN_TAR_BLOCK] = {0}, h[KILN_TAR_BLOCK];
  char name[KILN_TAR_NAME_MAX + 1];
  uint64_t size;
  int end;
  kiln_tar_reader r = {fileno(g), 0, 0, 0, "odd.tar", NULL, 1};
  (void)state;
  header(h, "cas/abc", 0);
  assert_int_equal(fwrite(z, 1, sizeof z, g), sizeof z);
  assert_int_equal(fwrite(h, 1, sizeof h, g), sizeof h);
  fflush(g);
  rewind(g);
  assert_int_equal(kiln_tar_next(&r, name, &size, &end), KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "one zero block, then more data"));
  fclose(g);
}

static void test_padding_that_is_not_zeros_is_refused(void **state) {
  const char *names[] = {"a", "b"};
  const char *datas[] = {"123", "4"};
  FILE *f = archive_of(names, datas, 2);
  kiln_tar_reader r = {fileno(f), 0, 0, 0, "pad.tar", NULL, 1};
  char name[KILN_TAR_NAME_MAX + 1];
  uint64_t size;
  int end;
  (void)state;
  assert_int_equal(fseek(f, KILN_TAR_BLOCK + 100, SEEK_SET), 0); /* in a's padding */
  assert_int_equal(fputc('x', f), 'x');
  fflush(f);
  rewind(f);
  assert_int_equal(kiln_tar_next(&r, name, &size, &end), KILN_OK);
  assert_int_equal(kiln_tar_next(&r, name, &size, &end), KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "padding that is not zeros"));
  fclose(f);
}

static void test_names_that_do_not_fit_are_not_written(void **state) {
  char long_name[KILN_TAR_NAME_MAX + 2];
  kiln_tar_writer w = {-1, 0, NULL};
  (void)state;
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  assert_int_equal(kiln_tar_write(&w, long_name, "", 0, 0, 1), KILN_EINVAL);
  assert_int_equal(kiln_tar_write(&w, "", "", 0, 0, 1), KILN_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_what_is_written_reads_back),
      cmocka_unit_test(test_hostile_headers_are_refused),
      cmocka_unit_test(test_a_short_stream_is_truncated_not_read_past),
      cmocka_unit_test(test_one_zero_block_then_data_is_refused),
      cmocka_unit_test(test_padding_that_is_not_zeros_is_refused),
      cmocka_unit_test(test_names_that_do_not_fit_are_not_written),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
