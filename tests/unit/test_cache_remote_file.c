/* cache/remote/file.c: the file:// backend's requests on a real directory,
 * every bad state of an object, the URL rules, the breaker and the clean-up
 * of temp files. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/remote/remote.h"
#include "common/digest.h"
#include "tests/unit/test_util.h"

typedef struct fixture {
  char dir[256];
  char root[300];
  kiln_file_remote *f;
} fixture;

static kiln_file_remote *open_remote(const char *root, int threshold) {
  kiln_remote_config cfg;
  kiln_file_remote *f = NULL;
  memset(&cfg, 0, sizeof cfg);
  snprintf(cfg.base, sizeof cfg.base, "file://%s", root);
  cfg.parallel = 4;
  cfg.retries = 1;
  cfg.backoff_ms = 1;
  cfg.breaker_threshold = threshold;
  assert_int_equal(kiln_file_remote_new(&f, &cfg), KILN_OK);
  return f;
}

static int setup(void **state) {
  fixture *x = calloc(1, sizeof *x);
  test_make_tmpdir(x->dir, sizeof x->dir);
  snprintf(x->root, sizeof x->root, "%s/remote", x->dir);
  mkdir(x->root, 0700);
  x->f = open_remote(x->root, 5);
  *state = x;
  return 0;
}

static int teardown(void **state) {
  fixture *x = *state;
  kiln_remote_file.free(x->f);
  test_rm_rf(x->dir);
  free(x);
  return 0;
}

static void req(kiln_remote_req *q, kiln_remote_method m, const char *path) {
  memset(q, 0, sizeof *q);
  q->method = m;
  q->out_fd = -1;
  if (snprintf(q->path, sizeof q->path, "%s", path) >= (int)sizeof q->path) fail();
}

static kiln_status run1(fixture *x, kiln_remote_req *q) {
  assert_int_equal(kiln_remote_file.run(x->f, q, 1, NULL, NULL), KILN_OK);
  return q->rc;
}

static void put(fixture *x, const char *path, const char *body) {
  kiln_remote_req q;
  req(&q, KILN_REMOTE_PUT, path);
  q.body = body;
  q.body_len = strlen(body);
  assert_int_equal(run1(x, &q), KILN_OK);
  assert_int_equal(q.bytes_up, strlen(body));
}

static void under(char *out, size_t cap, fixture *x, const char *rel) {
  snprintf(out, cap, "%s/%s", x->root, rel);
}

static void test_url_path(void **state) {
  char p[256];
  (void)state;
  assert_int_equal(kiln_file_url_path("file:///a/b/", p, sizeof p), KILN_OK);
  assert_string_equal(p, "/a/b");
  assert_int_equal(kiln_file_url_path("file://localhost/a", p, sizeof p), KILN_OK);
  assert_string_equal(p, "/a");
  assert_int_equal(kiln_file_url_path("file://host/a", p, sizeof p), KILN_EINVAL);
  assert_int_equal(kiln_file_url_path("file://", p, sizeof p), KILN_EINVAL);
  assert_int_equal(kiln_file_url_path("file:///a/../b", p, sizeof p), KILN_EINVAL);
  assert_int_equal(kiln_file_url_path("file:///a/./b", p, sizeof p), KILN_EINVAL);
  assert_int_equal(kiln_file_url_path("file:///a\nb", p, sizeof p), KILN_EINVAL);
  assert_int_equal(kiln_file_url_path("http://x/a", p, sizeof p), KILN_EINVAL);
  assert_int_equal(kiln_file_url_path("file:///a/b", p, 4), KILN_EINVAL);
}

/* PUT makes ac/ and cas/, writes whole objects, leaves no temp file; GET
 * into memory and into a file, HEAD, DELETE, MKCOL. */
static void test_roundtrip(void **state) {
  fixture *x = *state;
  char d[65], p[160], tmpl[600];
  kiln_remote_req q;
  int fd;
  const char *blob = "the bytes of an artifact";
  kiln_sha256_hex(d, blob, strlen(blob));
  snprintf(p, sizeof p, "cas/%s", d);
  put(x, p, blob);
  put(x, "ac/k1", "{\"a\": 1}");
  req(&q, KILN_REMOTE_GET, "ac/k1");
  q.max_bytes = 100;
  assert_int_equal(run1(x, &q), KILN_OK);
  assert_int_equal(q.status, 200);
  assert_string_equal((char *)q.data, "{\"a\": 1}");
  kiln_remote_reqs_reset(&q, 1);
  /* a blob streamed into a file, hashed on the way */
  snprintf(tmpl, sizeof tmpl, "%s/dl-XXXXXX", x->dir);
  fd = mkstemp(tmpl);
  req(&q, KILN_REMOTE_GET, p);
  q.out_fd = fd;
  q.max_bytes = strlen(blob);
  q.expect_digest = d;
  assert_int_equal(run1(x, &q), KILN_OK);
  assert_int_equal(lseek(fd, 0, SEEK_END), (off_t)strlen(blob));
  assert_int_equal(q.bytes_down, strlen(blob));
  close(fd);
  /* a wrong digest is ECORRUPT */
  req(&q, KILN_REMOTE_GET, p);
  q.expect_digest = "0000000000000000000000000000000000000000000000000000000000000000";
  assert_int_equal(run1(x, &q), KILN_ECORRUPT);
  assert_non_null(strstr(q.error, "digest"));
  /* HEAD, a miss, DELETE, MKCOL */
  req(&q, KILN_REMOTE_HEAD, "ac/k1");
  assert_int_equal(run1(x, &q), KILN_OK);
  req(&q, KILN_REMOTE_HEAD, "ac/nothing");
  assert_int_equal(run1(x, &q), KILN_ENOTFOUND);
  assert_int_equal(q.status, 404);
  req(&q, KILN_REMOTE_DELETE, "ac/k1");
  assert_int_equal(run1(x, &q), KILN_OK);
  req(&q, KILN_REMOTE_GET, "ac/k1");
  assert_int_equal(run1(x, &q), KILN_ENOTFOUND);
  req(&q, KILN_REMOTE_MKCOL, "ac/");
  assert_int_equal(run1(x, &q), KILN_OK);
  /* no temp file is left in ac/ or cas/ */
  for (int i = 0; i < 2; i++) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -a '%s/%s' | grep -q '^\\.tmp\\.'", x->root, i ? "cas" : "ac");
    assert_int_not_equal(system(cmd), 0);
  }
}

/* Paths outside the remote's layout are refused before any file is opened. */
static void test_bad_paths(void **state) {
  fixture *x = *state;
  static const char *const bad[] = {"ac/../x", "ac/.tmp.x", "cas/a/b", "x/y",
                                    "ac",      "../ac/x",   "ac/a b",  "ac/"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    kiln_remote_req q;
    req(&q, KILN_REMOTE_GET, bad[i]);
    assert_int_equal(run1(x, &q), KILN_EINVAL);
  }
}

/* Every bad state of an object: refused without blocking, following or
 * reading past what is allowed; nothing outside the root is touched. */
static void test_hostile_objects(void **state) {
  fixture *x = *state;
  char p[600], outside[600];
  kiln_remote_req q;
  put(x, "ac/seed", "{}");
  /* a FIFO: not opened for long, not read */
  under(p, sizeof p, x, "ac/fifo");
  assert_int_equal(mkfifo(p, 0600), 0);
  req(&q, KILN_REMOTE_GET, "ac/fifo");
  assert_int_equal(run1(x, &q), KILN_ECORRUPT);
  assert_non_null(strstr(q.error, "FIFO"));
  /* a symlink out of the tree */
  snprintf(outside, sizeof outside, "%s/outside", x->dir);
  FILE *o = fopen(outside, "w");
  fputs("secret", o);
  fclose(o);
  under(p, sizeof p, x, "ac/link");
  assert_int_equal(symlink(outside, p), 0);
  req(&q, KILN_REMOTE_GET, "ac/link");
  assert_int_equal(run1(x, &q), KILN_ECORRUPT);
  assert_non_null(strstr(q.error, "symbolic link"));
  /* a PUT over the link replaces the link, never writes through it */
  put(x, "ac/link", "{\"new\": 1}");
  o = fopen(outside, "r");
  char buf[16] = {0};
  assert_non_null(fgets(buf, sizeof buf, o));
  fclose(o);
  assert_string_equal(buf, "secret");
  /* a directory where an object belongs */
  under(p, sizeof p, x, "ac/dir");
  assert_int_equal(mkdir(p, 0700), 0);
  req(&q, KILN_REMOTE_GET, "ac/dir");
  assert_int_equal(run1(x, &q), KILN_ECORRUPT);
  req(&q, KILN_REMOTE_PUT, "ac/dir");
  q.body = "x";
  q.body_len = 1;
  assert_int_equal(run1(x, &q), KILN_ECORRUPT);
  assert_non_null(strstr(q.error, "directory"));
  /* larger than allowed: refused before reading */
  put(x, "ac/big", "0123456789");
  req(&q, KILN_REMOTE_GET, "ac/big");
  q.max_bytes = 4;
  assert_int_equal(run1(x, &q), KILN_ECORRUPT);
  assert_int_equal(q.bytes_down, 0);
  /* cas/ a symlink to a directory outside: refused, not followed */
  {
    char cas[600], elsewhere[600];
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", x->dir);
    mkdir(elsewhere, 0700);
    under(cas, sizeof cas, x, "cas");
    assert_int_equal(symlink(elsewhere, cas), 0);
    req(&q, KILN_REMOTE_PUT, "cas/abc");
    q.body = "x";
    q.body_len = 1;
    assert_int_equal(run1(x, &q), KILN_ECORRUPT);
    if (snprintf(p, sizeof p, "%s/abc", elsewhere) >= (int)sizeof p) fail();
    assert_int_not_equal(access(p, F_OK), 0);
  }
}

/* A read-only directory: uploads are refused (403), reads still work. */
static void test_read_only(void **state) {
  fixture *x = *state;
  char p[600];
  kiln_remote_req q;
  if (geteuid() == 0) skip(); /* root writes anyway */
  put(x, "ac/k", "{}");
  under(p, sizeof p, x, "ac");
  chmod(p, 0500);
  req(&q, KILN_REMOTE_PUT, "ac/k2");
  q.body = "{}";
  q.body_len = 2;
  assert_int_equal(run1(x, &q), KILN_EPERM);
  assert_int_equal(q.status, 403);
  req(&q, KILN_REMOTE_GET, "ac/k");
  assert_int_equal(run1(x, &q), KILN_OK);
  kiln_remote_reqs_reset(&q, 1);
  chmod(p, 0700);
}

/* A root that is not there (not mounted): an error naming it, which counts
 * towards the breaker; at the threshold the remote is off. */
static void test_missing_root_breaker(void **state) {
  fixture *x = *state;
  char gone[600];
  kiln_file_remote *f;
  kiln_remote_req q[3];
  snprintf(gone, sizeof gone, "%s/not-mounted", x->dir);
  f = open_remote(gone, 3);
  for (int i = 0; i < 3; i++)
    req(&q[i], KILN_REMOTE_GET, "ac/k");
  assert_int_equal(kiln_remote_file.run(f, q, 3, NULL, NULL), KILN_OK);
  assert_int_equal(q[0].rc, KILN_EREMOTE);
  assert_non_null(strstr(q[0].error, "does not exist"));
  assert_non_null(strstr(q[0].error, gone));
  assert_int_equal(kiln_breaker_is_open(kiln_remote_file.breaker(f)), 1);
  req(&q[0], KILN_REMOTE_GET, "ac/k");
  assert_int_equal(kiln_remote_file.run(f, q, 1, NULL, NULL), KILN_EREMOTE);
  assert_non_null(strstr(q[0].error, "breaker open"));
  /* a PUT never makes the root */
  kiln_remote_file.free(f);
  f = open_remote(gone, 0);
  req(&q[0], KILN_REMOTE_PUT, "ac/k");
  q[0].body = "{}";
  q[0].body_len = 2;
  assert_int_equal(kiln_remote_file.run(f, q, 1, NULL, NULL), KILN_OK);
  assert_int_equal(q[0].rc, KILN_EREMOTE);
  assert_int_not_equal(access(gone, F_OK), 0);
  kiln_remote_file.free(f);
}

/* Temp files of killed writers: removed once old enough, objects never. */
static void test_gc(void **state) {
  fixture *x = *state;
  char p[600];
  uint64_t removed = 0, bytes = 0;
  struct timeval old[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
  put(x, "ac/keep", "{}");
  put(x, "cas/keep", "x");
  under(p, sizeof p, x, "cas/.tmp.abc.host.1.0");
  FILE *o = fopen(p, "w");
  fputs("partial", o);
  fclose(o);
  utimes(p, old);
  under(p, sizeof p, x, "ac/.tmp.k.host.2.0");
  o = fopen(p, "w");
  fclose(o); /* new: kept */
  assert_int_equal(kiln_file_remote_gc(x->f, 3600, &removed, &bytes), KILN_OK);
  assert_int_equal(removed, 1);
  assert_int_equal(bytes, 7);
  assert_int_equal(kiln_file_remote_gc(x->f, 0, &removed, &bytes), KILN_OK);
  assert_int_equal(removed, 1);
  under(p, sizeof p, x, "ac/keep");
  assert_int_equal(access(p, F_OK), 0);
  under(p, sizeof p, x, "cas/keep");
  assert_int_equal(access(p, F_OK), 0);
}

/* Many requests at once on the pool: each settles on its own. */
static void test_parallel(void **state) {
  fixture *x = *state;
  kiln_remote_req q[32];
  char body[32][16];
  for (int i = 0; i < 32; i++) {
    req(&q[i], KILN_REMOTE_PUT, "");
    snprintf(q[i].path, sizeof q[i].path, "cas/o%d", i);
    snprintf(body[i], sizeof body[i], "body %d", i);
    q[i].body = body[i];
    q[i].body_len = strlen(body[i]);
  }
  assert_int_equal(kiln_remote_file.run(x->f, q, 32, NULL, NULL), KILN_OK);
  for (int i = 0; i < 32; i++) {
    assert_int_equal(q[i].rc, KILN_OK);
    req(&q[i], KILN_REMOTE_GET, "");
    snprintf(q[i].path, sizeof q[i].path, "cas/o%d", i);
  }
  assert_int_equal(kiln_remote_file.run(x->f, q, 32, NULL, NULL), KILN_OK);
  for (int i = 0; i < 32; i++) {
    assert_int_equal(q[i].rc, KILN_OK);
    assert_string_equal((char *)q[i].data, body[i]);
  }
  kiln_remote_reqs_reset(q, 32);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_url_path),
      cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_objects, setup, teardown),
      cmocka_unit_test_setup_teardown(test_read_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_root_breaker, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc, setup, teardown),
      cmocka_unit_test_setup_teardown(test_parallel, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
