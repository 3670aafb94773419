/* cache/lease.c: the "holder pid is gone" rule and the lease list that
 * probes read instead of the index. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/lease.h"
#include "common/clock.h"
#include "common/digest.h"
#include "kiln/cache.h"
#include "tests/unit/test_util.h"

typedef struct fixture {
  char dir[256];
  char cache_dir[300];
  kiln_cache *c;
} fixture;

static kiln_cache *open_cache(const char *dir) {
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  kiln_cache *c = NULL;
  o.dir = dir;
  o.ro_path = "";
  return kiln_cache_open(&c, &o) == KILN_OK ? c : NULL;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  test_make_tmpdir(f->dir, sizeof f->dir);
  snprintf(f->cache_dir, sizeof f->cache_dir, "%s/cache", f->dir);
  if (!(f->c = open_cache(f->cache_dir))) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kiln_cache_close(f->c);
  test_rm_rf(f->dir);
  free(f);
  return 0;
}

/* A child that has exited and been reaped. */
static pid_t reaped_child(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  assert_true(pid > 0);
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  return pid;
}

static void test_pid_gone_only_for_a_process_that_is_no_more(void **state) {
  (void)state;
  assert_int_equal(kiln_pid_gone((long)getpid()), 0);
  assert_int_equal(kiln_pid_gone(1), 0); /* alive, even when not ours to signal */
  assert_int_equal(kiln_pid_gone(0), 0); /* names no process */
  assert_int_equal(kiln_pid_gone(-1), 0);
  assert_int_equal(kiln_pid_gone((long)reaped_child()), 1);
}

static kiln_lease_state take(kiln_cache *c, const char *seed, const char *unit,
                             const char *target) {
  char key[65];
  kiln_lease_state st = KILN_LEASE_DONE;
  kiln_sha256_hex(key, seed, strlen(seed));
  assert_int_equal(kiln_lease_try(c, key, unit, target, 60000, 0, &st, NULL), KILN_OK);
  return st;
}

static void test_lease_list_is_empty_without_leases(void **state) {
  fixture *f = *state;
  kiln_lease_info *v = (kiln_lease_info *)1;
  size_t n = 7;
  assert_int_equal(kiln_lease_list(&v, &n, f->c), KILN_OK);
  assert_null(v);
  assert_int_equal(n, 0);
}

/* Rows come ordered by unit and target, with their holder; a holder that
 * died on this host without releasing its lease is reported gone. */
static void test_lease_list_names_holders_and_the_gone(void **state) {
  fixture *f = *state;
  kiln_lease_info *v = NULL;
  size_t n = 0;
  int64_t before = kiln_wall_ms();
  pid_t child;
  assert_int_equal(take(f->c, "k2", "softmax", "sm_90"), KILN_LEASE_ACQUIRED);
  assert_int_equal(take(f->c, "k1", "softmax", "sm_80"), KILN_LEASE_ACQUIRED);
  child = fork();
  if (child == 0) { /* takes a lease and dies holding it */
    kiln_cache *c = open_cache(f->cache_dir);
    _exit(c && take(c, "k3", "layer_norm", "sm_90") == KILN_LEASE_ACQUIRED ? 0 : 1);
  }
  assert_true(child > 0);
  assert_int_equal(waitpid(child, &(int){0}, 0), child);
  assert_int_equal(kiln_lease_list(&v, &n, f->c), KILN_OK);
  assert_int_equal(n, 3);
  assert_string_equal(v[0].unit, "layer_norm");
  assert_true(v[0].pid == (long)child && v[0].gone == 1);
  assert_string_equal(v[1].unit, "softmax");
  assert_string_equal(v[1].target, "sm_80");
  assert_string_equal(v[2].target, "sm_90");
  for (size_t i = 1; i < 3; i++) {
    assert_true(v[i].pid == (long)getpid() && v[i].gone == 0);
    assert_true(v[i].heartbeat_ms >= before && v[i].acquired_ms == v[i].heartbeat_ms);
    assert_int_equal(strlen(v[i].key), 64);
    assert_string_equal(v[i].host, v[0].host);
  }
  free(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pid_gone_only_for_a_process_that_is_no_more),
      cmocka_unit_test_setup_teardown(test_lease_list_is_empty_without_leases, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lease_list_names_holders_and_the_gone, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
