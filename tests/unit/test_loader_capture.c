/* loader/loader.c, kiln_loader_stream_capturing: a stream that captures a CUDA
 * graph is reported as capturing, active or invalidated, and one that does not
 * is not; a resolve during a capture stops at the driver's refusal instead of
 * trying every candidate and then a build. Runs against tests/fakecuda (the
 * path in argv[1]), whose KILN_FAKE_CUDA_CAPTURE=1 makes every stream capture. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kiln/loader.h"
#include "kiln/target.h"                 /* kiln_nvrtc_version */
#include "tests/unit/test_fake_loader.h" /* test_fake_loader_start */
#include "tests/unit/test_util.h"        /* test_rm_rf */

static kiln_loader *L;
static char dir[] = "/tmp/kiln-capture-XXXXXX";

static int capturing(struct CUstream_st *s) {
  int on = -1;
  kiln_status st = kiln_loader_stream_capturing(&on, L, s);
  if (st != KILN_OK) fail_msg("kiln_loader_stream_capturing: %s", kiln_last_error());
  return on;
}

static void test_no_capture_is_reported_as_none(void **state) {
  (void)state;
  unsetenv("KILN_FAKE_CUDA_CAPTURE");
  assert_int_equal(capturing(NULL), 0);
  assert_int_equal(capturing((struct CUstream_st *)(uintptr_t)0x1000), 0);
}

static void test_an_active_capture_is_reported(void **state) {
  (void)state;
  setenv("KILN_FAKE_CUDA_CAPTURE", "1", 1);
  assert_int_equal(capturing(NULL), 1);
  assert_int_equal(capturing((struct CUstream_st *)(uintptr_t)0x1000), 1);
  unsetenv("KILN_FAKE_CUDA_CAPTURE");
  assert_int_equal(capturing(NULL), 0);
}

/* rope's CUBIN is in the cache (built by main with NVRTC); the loader is
 * offline, so a resolve that went on past the refusal would end in
 * KILN_ENOTFOUND naming `kiln build`, and one that took the refusal for a bad
 * image would quarantine the blob (the resolve after the capture would fail). */
static void test_a_load_during_capture_stops_at_the_refusal(void **state) {
  kiln_unit_load ul;
  kiln_status st;
  (void)state;
  setenv("KILN_FAKE_CUDA_CAPTURE", "1", 1);
  st = kiln_loader_resolve(L, "rope");
  if (st != KILN_EDRIVER || !strstr(kiln_last_error(), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"))
    fail_msg("got %s '%s', want KILN_EDRIVER naming CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
             kiln_status_str(st), kiln_last_error());
  assert_int_equal(capturing(NULL), 1); /* invalidated by the load: still a capture */
  assert_int_equal(kiln_loader_unit_load(&ul, L, "rope"), KILN_ENOTFOUND);
  unsetenv("KILN_FAKE_CUDA_CAPTURE"); /* the capture ended */
  assert_int_equal(capturing(NULL), 0);
  if (kiln_loader_resolve(L, "rope") != KILN_OK) fail_msg("resolve: %s", kiln_last_error());
  assert_int_equal(kiln_loader_unit_load(&ul, L, "rope"), KILN_OK);
  assert_int_equal(ul.source, KILN_LOAD_EXACT);
  setenv("KILN_FAKE_CUDA_CAPTURE", "1", 1); /* loaded: resolving loads nothing */
  assert_int_equal(kiln_loader_resolve(L, "rope"), KILN_OK);
  assert_int_equal(capturing(NULL), 1);
  unsetenv("KILN_FAKE_CUDA_CAPTURE");
}

static void test_null_arguments_are_einval(void **state) {
  int on = 0;
  (void)state;
  assert_int_equal(kiln_loader_stream_capturing(NULL, L, NULL), KILN_EINVAL);
  assert_int_equal(kiln_loader_stream_capturing(&on, NULL, NULL), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "kiln_loader_stream_capturing"));
}

int main(int argc, char **argv) {
  kiln_loader_options o = KILN_LOADER_OPTIONS_INIT;
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_capture_is_reported_as_none),
      cmocka_unit_test(test_an_active_capture_is_reported),
      cmocka_unit_test(test_a_load_during_capture_stops_at_the_refusal),
      cmocka_unit_test(test_null_arguments_are_einval),
  };
  int rc, major = 0, minor = 0;
  if ((rc = test_fake_loader_start(argc, argv, dir, &co)) != 0) return rc;
  unsetenv("KILN_FAKE_CUDA_CAPTURE");
  o.cache = &co;
  /* rope (the quickest unit to compile) into the cache, by a loader that may
   * build; the tests' loader is offline */
  o.offline = 0;
  o.kernels = "rope";
  if (kiln_nvrtc_version(&major, &minor) != KILN_OK) {
    printf("no NVRTC to build rope with (%s); skipped\n", kiln_last_error());
    return 77;
  }
  if (kiln_loader_open(&L, &o) != KILN_OK || kiln_loader_warmup(L, NULL) != KILN_OK) {
    printf("building rope for the fake sm_90: %s\n", kiln_last_error());
    return 1;
  }
  kiln_loader_close(L);
  o.offline = 1;
  if (kiln_loader_open(&L, &o) != KILN_OK) {
    printf("kiln_loader_open: %s\n", kiln_last_error());
    return 1;
  }
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  kiln_loader_close(L);
  if (test_rm_rf(dir) != 0 && !rc) rc = 1;
  return rc;
}
