/* The remote record document (cache/remote/record.c): round trips, the
 * canonical text pinned, signatures, and every kind of malformed document. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/remote/remote.h"
#include "common/fileio.h"
#include "kiln/status.h"

#define KEY "799e6e1640d1f7398827039588efbdb068616be1db5e3f1757a60e1dc7df8f40"
#define DIGEST "53ed8c46415a382067831eaafccba1d93adabc0267ae368996830c0e5732ca66"

static const uint8_t hkey[] = "kiln-fuzz-key";
#define HKEY hkey, sizeof hkey - 1

static kiln_record sample(void) {
  kiln_record r;
  memset(&r, 0, sizeof r);
  snprintf(r.key, sizeof r.key, KEY);
  snprintf(r.unit, sizeof r.unit, "scaled_softmax");
  snprintf(r.target, sizeof r.target, "sm_90");
  snprintf(r.kind, sizeof r.kind, "cubin");
  snprintf(r.digest, sizeof r.digest, DIGEST);
  r.size = 546336;
  snprintf(r.toolchain, sizeof r.toolchain, "nvrtc-13.0");
  snprintf(r.options, sizeof r.options, "-std=c++17 --ptxas-options=-v");
  r.build_ms = 3094.379;
  r.registers = 116;
  r.shared_bytes = 256;
  return r;
}

static void test_canonical_golden(void **state) {
  kiln_record r = sample();
  char *text = NULL;
  size_t len = 0;
  (void)state;
  assert_int_equal(kiln_remote_record_canonical(&r, &text, &len), KILN_OK);
  assert_string_equal(text, "kiln-record-v1\nkey=" KEY "\nunit=scaled_softmax\ntarget=sm_90\n"
                            "kind=cubin\ndigest=" DIGEST "\nsize=546336\ntoolchain=nvrtc-13.0\n"
                            "options=-std=c++17 --ptxas-options=-v\nbuild_ms=3094.379\n"
                            "registers=116\nspill_stores=0\nspill_loads=0\nshared_bytes=256\n"
                            "stack_bytes=0\nlog_digest=\n");
  assert_int_equal(len, strlen(text));
  free(text);
}

static void round_trip(const uint8_t *k, size_t klen) {
  kiln_record r = sample(), back;
  char *doc = NULL;
  size_t len = 0;
  assert_int_equal(kiln_remote_record_encode(&r, k, klen, &doc, &len), KILN_OK);
  assert_int_equal(kiln_remote_record_decode(doc, len, KEY, k, klen, &back), KILN_OK);
  assert_memory_equal(&r, &back, sizeof r);
  assert_int_equal(strstr(doc, "\"signature\"") != NULL, k != NULL);
  free(doc);
}

static void test_round_trip_unsigned(void **state) {
  (void)state;
  round_trip(NULL, 0);
}

static void test_round_trip_signed(void **state) {
  (void)state;
  round_trip(HKEY);
}

/* A document signed by an independent implementation (python's hmac over the
 * canonical text of docs/remote-cache.md): the corpus file 02_valid_signed. */
static void test_independent_signature(void **state) {
  uint8_t *doc = NULL;
  size_t len = 0;
  kiln_record r;
  (void)state;
  assert_int_equal(kiln_read_file(KILN_CORPUS "/02_valid_signed", &doc, &len), KILN_OK);
  assert_int_equal(kiln_remote_record_decode((char *)doc, len, KEY, HKEY, &r), KILN_OK);
  assert_string_equal(r.unit, "scaled_softmax");
  free(doc);
  assert_int_equal(kiln_read_file(KILN_CORPUS "/03_signed_edited", &doc, &len), KILN_OK);
  assert_int_equal(kiln_remote_record_decode((char *)doc, len, KEY, HKEY, &r), KILN_EPERM);
  assert_non_null(strstr(kiln_last_error(), "wrong signature"));
  /* without a key the edit is not detectable: the record is only well formed */
  assert_int_equal(kiln_remote_record_decode((char *)doc, len, KEY, NULL, 0, &r), KILN_OK);
  free(doc);
}

static void test_signature_failures(void **state) {
  kiln_record r = sample(), back;
  char *doc = NULL;
  size_t len = 0;
  static const uint8_t other[] = "another key";
  (void)state;
  assert_int_equal(kiln_remote_record_encode(&r, NULL, 0, &doc, &len), KILN_OK);
  assert_int_equal(kiln_remote_record_decode(doc, len, KEY, HKEY, &back), KILN_EPERM);
  assert_non_null(strstr(kiln_last_error(), "not signed"));
  free(doc);
  assert_int_equal(kiln_remote_record_encode(&r, other, sizeof other - 1, &doc, &len), KILN_OK);
  assert_int_equal(kiln_remote_record_decode(doc, len, KEY, HKEY, &back), KILN_EPERM);
  assert_non_null(strstr(kiln_last_error(), "wrong signature"));
  free(doc);
}

/* Decodes doc (unsigned) and expects KILN_ECORRUPT with `word` in the detail. */
static void expect_bad(const char *doc, const char *word) {
  kiln_record r;
  assert_int_equal(kiln_remote_record_decode(doc, strlen(doc), KEY, NULL, 0, &r), KILN_ECORRUPT);
  if (!strstr(kiln_last_error(), word)) fail_msg("'%s' not in '%s'", word, kiln_last_error());
}

/* The sample document with one field's JSON replaced ("" removes it). */
static char *with(const char *field, const char *json) {
  kiln_record r = sample();
  char *doc = NULL, *out, *p, pat[64];
  size_t len;
  assert_int_equal(kiln_remote_record_encode(&r, NULL, 0, &doc, &len), KILN_OK);
  out = calloc(1, len + strlen(json) + 64);
  snprintf(pat, sizeof pat, "\"%s\":", field);
  p = strstr(doc, pat);
  assert_non_null(p);
  {
    char *end = p + strlen(pat);
    if (*end == '"')
      end = strchr(end + 1, '"') + 1;
    else
      end += strcspn(end, ",}");
    if (*end == ',' && !*json) end++;
    memcpy(out, doc, (size_t)(p - doc));
    if (*json) sprintf(out + strlen(out), "%s%s", pat, json);
    strcat(out, end);
  }
  free(doc);
  return out;
}

static void test_malformed(void **state) {
  static const struct {
    const char *field, *json, *word;
  } cases[] = {
      {"schema", "\"kiln-record/2\"", "schema"},
      {"digest", "", "digest"},
      {"digest", "\"ABC\"", "hex"},
      {"size", "-1", "size"},
      {"size", "0", "size"}, /* a 0-byte artifact, from any source, is refused */
      {"size", "2000000000000", "size"},
      {"size", "\"12\"", "size"},
      {"registers", "1.5", "registers"},
      {"registers", "-2", "registers"},
      {"target", "\"sm_9x\"", "target"},
      {"target", "\"compute_90\"", "kind"},
      {"kind", "\"fatbin\"", "kind"},
      {"unit", "\"a\\nb\"", "control"},
      {"unit", "\"a\\u0000b\"", "JSON"},
      {"unit", "\"0123456789012345678901234567890123456789012345678901234567890123456\"", "longer"},
      {"build_ms", "-3", "build_ms"},
      {"key", "\"" DIGEST "\"", "another key"},
      {"log_digest", "\"xyz\"", "hex"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *doc = with(cases[i].field, cases[i].json);
    expect_bad(doc, cases[i].word);
    free(doc);
  }
  expect_bad("{\"schema\":", "not JSON");
  expect_bad("[1,2]", "not a JSON object");
  expect_bad("{\"schema\":\"kiln-record/1\",\"schema\":\"kiln-record/1\"}", "not JSON");
}

static void test_extra_field_and_limits(void **state) {
  kiln_record r;
  char *doc = with("stack_bytes", "0,\"future\":{\"x\":[1]}");
  char *big;
  (void)state;
  assert_int_equal(kiln_remote_record_decode(doc, strlen(doc), KEY, NULL, 0, &r), KILN_OK);
  free(doc);
  big = calloc(1, 70000);
  memset(big, ' ', 69999);
  big[0] = '{';
  expect_bad(big, "64 KiB");
  free(big);
  r = sample();
  snprintf(r.unit, sizeof r.unit, "bad\nunit");
  assert_int_equal(kiln_remote_record_encode(&r, NULL, 0, &doc, NULL), KILN_EINVAL);
  r = sample();
  snprintf(r.options, sizeof r.options, "-D\xff\xfe"); /* not UTF-8 */
  assert_int_equal(kiln_remote_record_encode(&r, NULL, 0, &doc, NULL), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "UTF-8"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_canonical_golden),       cmocka_unit_test(test_round_trip_unsigned),
      cmocka_unit_test(test_round_trip_signed),      cmocka_unit_test(test_independent_signature),
      cmocka_unit_test(test_signature_failures),     cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_extra_field_and_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
