/* The options structs of the public API (include/kiln/): every one has
 * _VERSION, _INIT and kiln_X_options_init; version 1 and the current one are
 * accepted, a future one refused naming it, by the init function and by the
 * function that takes the options. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "tests/unit/test_util.h"

/* init(opts, version) for 1 and CURRENT fills what INIT gives; CURRENT + 1
 * and 0 are KILN_EINVAL naming the struct and the version. */
#define CHECK_INIT(type, init_fn, VERSION, INIT)                                                   \
  do {                                                                                             \
    static const type want = INIT;                                                                 \
    type got;                                                                                      \
    char bad[32];                                                                                  \
    memset(&got, 0x5a, sizeof got);                                                                \
    assert_int_equal(init_fn(&got, VERSION), KILN_OK);                                             \
    assert_memory_equal(&got, &want, sizeof got);                                                  \
    assert_int_equal(init_fn(&got, 1), KILN_OK);                                                   \
    assert_int_equal(got.version, 1);                                                              \
    assert_int_equal(init_fn(&got, VERSION + 1), KILN_EINVAL);                                     \
    snprintf(bad, sizeof bad, "version %d", VERSION + 1);                                          \
    assert_non_null(strstr(kiln_last_error(), #type));                                             \
    assert_non_null(strstr(kiln_last_error(), bad));                                               \
    assert_int_equal(init_fn(&got, 0), KILN_EINVAL);                                               \
    assert_int_equal(init_fn(NULL, VERSION), KILN_EINVAL);                                         \
  } while (0)

static void test_every_options_init(void **state) {
  (void)state;
  CHECK_INIT(kiln_cache_options, kiln_cache_options_init, KILN_CACHE_OPTIONS_VERSION,
             KILN_CACHE_OPTIONS_INIT);
  CHECK_INIT(kiln_build_options, kiln_build_options_init, KILN_BUILD_OPTIONS_VERSION,
             KILN_BUILD_OPTIONS_INIT);
  CHECK_INIT(kiln_loader_options, kiln_loader_options_init, KILN_LOADER_OPTIONS_VERSION,
             KILN_LOADER_OPTIONS_INIT);
  CHECK_INIT(kiln_remote_options, kiln_remote_options_init, KILN_REMOTE_OPTIONS_VERSION,
             KILN_REMOTE_OPTIONS_INIT);
  CHECK_INIT(kiln_coord_options, kiln_coord_options_init, KILN_COORD_OPTIONS_VERSION,
             KILN_COORD_OPTIONS_INIT);
  CHECK_INIT(kiln_doctor_options, kiln_doctor_options_init, KILN_DOCTOR_OPTIONS_VERSION,
             KILN_DOCTOR_OPTIONS_INIT);
  CHECK_INIT(kiln_cache_export_options, kiln_cache_export_options_init,
             KILN_CACHE_EXPORT_OPTIONS_VERSION, KILN_CACHE_EXPORT_OPTIONS_INIT);
}

/* A version-1 caller's struct ends before the fields version 2 added:
 * _init(opts, 1) writes nothing past them. */
static void test_version_1_writes_only_its_fields(void **state) {
  kiln_loader_options l;
  kiln_coord_options c;
  const unsigned char *p;
  (void)state;
  memset(&l, 0x5a, sizeof l);
  assert_int_equal(kiln_loader_options_init(&l, 1), KILN_OK);
  p = (const unsigned char *)&l;
  for (size_t i = offsetof(kiln_loader_options, peer_timeout_s); i < sizeof l; i++)
    assert_int_equal(p[i], 0x5a);
  assert_true(l.heartbeat_s == KILN_ENV);
  memset(&c, 0x5a, sizeof c);
  assert_int_equal(kiln_coord_options_init(&c, 1), KILN_OK);
  p = (const unsigned char *)&c;
  for (size_t i = offsetof(kiln_coord_options, peer_timeout_s); i < sizeof c; i++)
    assert_int_equal(p[i], 0x5a);
  assert_int_equal(kiln_coord_options_init(&c, 2), KILN_OK);
  assert_true(c.peer_timeout_s == KILN_ENV);
}

/* The one sentinel: every environment-backed field of every _INIT is
 * KILN_ENV (numbers) or NULL (strings). */
static void test_init_fields_take_the_environment(void **state) {
  (void)state;
  kiln_build_options b = KILN_BUILD_OPTIONS_INIT;
  kiln_loader_options l = KILN_LOADER_OPTIONS_INIT;
  kiln_remote_options r = KILN_REMOTE_OPTIONS_INIT;
  kiln_coord_options c = KILN_COORD_OPTIONS_INIT;
  kiln_cache_options k = KILN_CACHE_OPTIONS_INIT;
  assert_true(b.jobs == KILN_ENV && b.offline == KILN_ENV && b.lease_stale_s == KILN_ENV &&
              b.wait_timeout_s == KILN_ENV);
  assert_true(l.jobs == KILN_ENV && l.offline == KILN_ENV && l.lease_stale_s == KILN_ENV &&
              l.build_timeout_s == KILN_ENV && l.heartbeat_s == KILN_ENV &&
              l.peer_timeout_s == KILN_ENV && l.cache == NULL);
  assert_true(r.upload == KILN_ENV && r.retries == KILN_ENV && r.parallel == KILN_ENV &&
              r.timeout_s == KILN_ENV && r.connect_timeout_s == KILN_ENV && r.url == NULL);
  assert_true(c.jobs == KILN_ENV && c.offline == KILN_ENV && c.heartbeat_s == KILN_ENV &&
              c.timeout_s == KILN_ENV && c.peer_timeout_s == KILN_ENV);
  assert_true(k.dir == NULL && k.ro_path == NULL && k.remote == NULL && k.create == 1);
}

/* The functions that take options refuse a version from a newer kiln. */
static void test_future_versions_are_refused_where_used(void **state) {
  (void)state;
  char dir[256];
  kiln_cache *cache = NULL;
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_remote_options ro = KILN_REMOTE_OPTIONS_INIT;
  kiln_build_options bo = KILN_BUILD_OPTIONS_INIT;
  kiln_coord_options xo = KILN_COORD_OPTIONS_INIT;
  kiln_doctor_options dopt = KILN_DOCTOR_OPTIONS_INIT;
  kiln_loader_options lo = KILN_LOADER_OPTIONS_INIT;
  kiln_build_summary *sum = NULL;
  kiln_doctor_report *rep = NULL;
  kiln_loader *l = NULL;
  kiln_comm *single = NULL;
  kiln_target t = {90, 0, KILN_TARGET_CUBIN};
  test_make_tmpdir(dir, sizeof dir);
  co.dir = dir;
  co.ro_path = "";
  co.version = KILN_CACHE_OPTIONS_VERSION + 1;
  assert_int_equal(kiln_cache_open(&cache, &co), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "kiln_cache_options"));
  co.version = 1;
  ro.url = "";
  co.remote = &ro;
  assert_int_equal(kiln_cache_open(&cache, &co), KILN_OK);
  ro.version = KILN_REMOTE_OPTIONS_VERSION + 1;
  assert_int_equal(kiln_cache_set_remote(cache, &ro), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "kiln_remote_options"));
  bo.targets = &t;
  bo.n_targets = 1;
  bo.version = KILN_BUILD_OPTIONS_VERSION + 1;
  assert_int_equal(kiln_build(&sum, cache, &bo), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "kiln_build_options"));
  assert_null(sum);
  xo.targets = &t;
  xo.n_targets = 1;
  xo.version = KILN_COORD_OPTIONS_VERSION + 1;
  assert_int_equal(kiln_comm_single(&single), KILN_OK);
  assert_int_not_equal(kiln_coord_fill(NULL, cache, &xo, single), KILN_OK);
  assert_non_null(strstr(kiln_last_error(), "kiln_coord_options"));
  dopt.version = KILN_DOCTOR_OPTIONS_VERSION + 1;
  assert_int_equal(kiln_doctor_run(&rep, &dopt), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "kiln_doctor_options"));
  assert_null(rep);
  lo.version = KILN_LOADER_OPTIONS_VERSION + 1;
  assert_int_equal(kiln_loader_open(&l, &lo), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "kiln_loader_options"));
  {
    kiln_cache_export_options eo = KILN_CACHE_EXPORT_OPTIONS_INIT;
    kiln_cache_export_report er;
    char path[300];
    snprintf(path, sizeof path, "%s/x.tar", dir);
    eo.version = KILN_CACHE_EXPORT_OPTIONS_VERSION + 1;
    assert_int_equal(kiln_cache_export(&er, cache, path, &eo), KILN_EINVAL);
    assert_non_null(strstr(kiln_last_error(), "kiln_cache_export_options"));
  }
  /* an explicit value out of range is refused, naming the field */
  bo.version = KILN_BUILD_OPTIONS_VERSION;
  bo.jobs = 0;
  bo.wait_timeout_s = 0;
  assert_int_equal(kiln_build(&sum, cache, &bo), KILN_EINVAL);
  assert_non_null(strstr(kiln_last_error(), "kiln_build_options.wait_timeout_s"));
  kiln_comm_free(single);
  kiln_cache_close(cache);
  test_rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_options_init),
      cmocka_unit_test(test_version_1_writes_only_its_fields),
      cmocka_unit_test(test_init_fields_take_the_environment),
      cmocka_unit_test(test_future_versions_are_refused_where_used),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
