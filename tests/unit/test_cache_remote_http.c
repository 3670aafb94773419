/* cache/remote/http.c: the transport against tests/integration/fault_server.py,
 * and the body sink (cache/remote/sink.c) on its own. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/remote/remote.h"
#include "cache/remote/sink.h"
#include "common/digest.h"
#include "kiln/log.h"
#include "tests/unit/test_util.h"

typedef struct fixture {
  char dir[256];
  char root[300];
  char log[300];
  char portfile[300];
  pid_t pid;
  int port;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  test_make_tmpdir(f->dir, sizeof f->dir);
  snprintf(f->root, sizeof f->root, "%s/root", f->dir);
  snprintf(f->log, sizeof f->log, "%s/log", f->dir);
  snprintf(f->portfile, sizeof f->portfile, "%s/port", f->dir);
  mkdir(f->root, 0700);
  f->pid = -1;
  *state = f;
  return 0;
}

static void stop_server(fixture *f) {
  int st;
  if (f->pid <= 0) return;
  kill(f->pid, SIGTERM);
  waitpid(f->pid, &st, 0);
  f->pid = -1;
  unlink(f->portfile);
}

static int teardown(void **state) {
  fixture *f = *state;
  stop_server(f);
  test_rm_rf(f->dir);
  free(f);
  return 0;
}

static void start_server(fixture *f, const char *mode, const char *token) {
  char *argv[16];
  int n = 0;
  argv[n++] = "python3";
  argv[n++] = KILN_FAULT_SERVER;
  argv[n++] = "--port-file";
  argv[n++] = f->portfile;
  argv[n++] = "--root";
  argv[n++] = f->root;
  argv[n++] = "--log";
  argv[n++] = f->log;
  argv[n++] = "--mode";
  argv[n++] = (char *)mode;
  if (token) {
    argv[n++] = "--token";
    argv[n++] = (char *)token;
  }
  argv[n] = NULL;
  unlink(f->log);
  f->pid = fork();
  assert_true(f->pid >= 0);
  if (f->pid == 0) {
    execvp("python3", argv);
    _exit(127);
  }
  for (int i = 0; i < 200; i++) { /* up to 10 s */
    FILE *p = fopen(f->portfile, "r");
    if (p) {
      int ok = fscanf(p, "%d", &f->port) == 1;
      fclose(p);
      if (ok) return;
    }
    usleep(50000);
  }
  fail_msg("fault_server.py did not start");
}

static void config(kiln_remote_config *c, int port) {
  memset(c, 0, sizeof *c);
  snprintf(c->base, sizeof c->base, "http://127.0.0.1:%d", port);
  c->connect_timeout_ms = 2000;
  c->timeout_ms = 5000;
  c->retries = 2;
  c->backoff_ms = 20;
  c->parallel = 8;
  c->breaker_threshold = 100;
}

static void put_file(fixture *f, const char *rel, const char *content, char digest[65]) {
  char p[600];
  char d[400];
  FILE *fp;
  snprintf(d, sizeof d, "%s/%s", f->root, rel);
  *strrchr(d, '/') = 0;
  mkdir(d, 0700);
  snprintf(p, sizeof p, "%s/%s", f->root, rel);
  fp = fopen(p, "wb");
  assert_non_null(fp);
  fwrite(content, 1, strlen(content), fp);
  fclose(fp);
  if (digest) kiln_sha256_hex(digest, content, strlen(content));
}

static int count_log(fixture *f, const char *prefix) {
  char line[512];
  int n = 0;
  FILE *fp = fopen(f->log, "r");
  if (!fp) return 0;
  while (fgets(line, sizeof line, fp))
    if (strncmp(line, prefix, strlen(prefix)) == 0) n++;
  fclose(fp);
  return n;
}

static kiln_remote_req get_req(const char *path) {
  kiln_remote_req r;
  memset(&r, 0, sizeof r);
  r.method = KILN_REMOTE_GET;
  snprintf(r.path, sizeof r.path, "%s", path);
  r.out_fd = -1;
  return r;
}

static uint64_t ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void test_get_to_memory_and_file_with_digest(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  char dg[65], path[400], buf[64] = {0};
  kiln_remote_req r[2];
  int fd;
  start_server(f, "ok", NULL);
  put_file(f, "cas/blob", "hello remote", dg);
  config(&c, f->port);
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r[0] = get_req("cas/blob");
  r[0].expect_digest = dg;
  r[1] = get_req("cas/blob");
  r[1].expect_digest = dg;
  snprintf(path, sizeof path, "%s/out", f->dir);
  fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  r[1].out_fd = fd;
  assert_int_equal(kiln_http_run(h, r, 2), KILN_OK);
  assert_int_equal(r[0].rc, KILN_OK);
  assert_int_equal(r[0].status, 200);
  assert_int_equal(r[0].len, 12);
  assert_string_equal((char *)r[0].data, "hello remote");
  assert_int_equal(r[1].rc, KILN_OK);
  assert_null(r[1].data);
  assert_int_equal(pread(fd, buf, sizeof buf - 1, 0), 12);
  assert_string_equal(buf, "hello remote");
  close(fd);
  kiln_remote_reqs_reset(r, 2);
  kiln_http_free(h);
}

static void test_404_is_enotfound_and_head(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r[2];
  start_server(f, "ok", NULL);
  put_file(f, "ac/k", "record", NULL);
  config(&c, f->port);
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r[0] = get_req("ac/missing");
  r[1] = get_req("ac/k");
  r[1].method = KILN_REMOTE_HEAD;
  assert_int_equal(kiln_http_run(h, r, 2), KILN_OK);
  assert_int_equal(r[0].rc, KILN_ENOTFOUND);
  assert_int_equal(r[0].status, 404);
  assert_int_equal(r[0].attempts, 1);
  assert_non_null(strstr(r[0].error, "GET ac/missing: HTTP 404"));
  assert_int_equal(r[1].rc, KILN_OK);
  assert_int_equal(r[1].status, 200);
  kiln_remote_reqs_reset(r, 2);
  kiln_http_free(h);
}

static void test_put_then_get_round_trip(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r;
  static const char body[] = "uploaded body";
  start_server(f, "ok", NULL);
  config(&c, f->port);
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  memset(&r, 0, sizeof r);
  r.method = KILN_REMOTE_PUT;
  snprintf(r.path, sizeof r.path, "cas/up");
  r.body = body;
  r.body_len = sizeof body - 1;
  r.out_fd = -1;
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_int_equal(r.rc, KILN_OK);
  assert_int_equal(r.bytes_up, sizeof body - 1);
  r = get_req("cas/up");
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_int_equal(r.rc, KILN_OK);
  assert_string_equal((char *)r.data, body);
  kiln_remote_reqs_reset(&r, 1);
  kiln_http_free(h);
}

static void test_500_fails_after_every_attempt(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r;
  start_server(f, "500", NULL);
  config(&c, f->port);
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r = get_req("ac/x");
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_int_equal(r.rc, KILN_EREMOTE);
  assert_int_equal(r.status, 500);
  assert_int_equal(r.attempts, 3);
  assert_string_equal(r.error, "GET ac/x: HTTP 500 (3 attempts)");
  assert_int_equal(count_log(f, "GET /ac/x 500"), 3);
  kiln_remote_reqs_reset(&r, 1);
  kiln_http_free(h);
}

static void test_flaky_succeeds_on_third_attempt(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r;
  start_server(f, "flaky:2", NULL);
  put_file(f, "ac/x", "fine", NULL);
  config(&c, f->port);
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r = get_req("ac/x");
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_int_equal(r.rc, KILN_OK);
  assert_int_equal(r.attempts, 3);
  assert_string_equal((char *)r.data, "fine");
  kiln_remote_reqs_reset(&r, 1);
  kiln_http_free(h);
}

static void test_stall_times_out_bounded(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r;
  uint64_t t0, dt;
  start_server(f, "stall", NULL);
  config(&c, f->port);
  c.timeout_ms = 1000;
  c.retries = 1;
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r = get_req("ac/x");
  t0 = ms_now();
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  dt = ms_now() - t0;
  assert_int_equal(r.rc, KILN_ETIMEDOUT);
  assert_int_equal(r.attempts, 2);
  assert_true(dt >= 1900 && dt < 2000 + 40 + 1500);
  kiln_remote_reqs_reset(&r, 1);
  kiln_http_free(h);
}

static void test_truncated_and_garbage_are_ecorrupt(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r;
  char dg[65];
  kiln_remote_req p;
  start_server(f, "truncate", NULL);
  put_file(f, "cas/b", "0123456789abcdef0123456789abcdef", dg);
  config(&c, f->port);
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r = get_req("cas/b");
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_int_equal(r.rc, KILN_ECORRUPT);
  assert_non_null(strstr(r.error, "truncated"));
  kiln_remote_reqs_reset(&r, 1);
  /* switch to garbage at runtime */
  memset(&p, 0, sizeof p);
  p.method = KILN_REMOTE_PUT;
  snprintf(p.path, sizeof p.path, "_mode");
  p.body = "garbage";
  p.body_len = 7;
  p.out_fd = -1;
  assert_int_equal(kiln_http_run(h, &p, 1), KILN_OK);
  assert_int_equal(p.rc, KILN_OK);
  r = get_req("cas/b");
  r.expect_digest = dg;
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_int_equal(r.rc, KILN_ECORRUPT);
  assert_non_null(strstr(r.error, "digest mismatch"));
  assert_null(r.data);
  kiln_remote_reqs_reset(&r, 1);
  kiln_http_free(h);
}

static void test_readonly_put_is_eperm(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r;
  start_server(f, "readonly", NULL);
  config(&c, f->port);
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  memset(&r, 0, sizeof r);
  r.method = KILN_REMOTE_PUT;
  snprintf(r.path, sizeof r.path, "cas/x");
  r.body = "x";
  r.body_len = 1;
  r.out_fd = -1;
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_int_equal(r.rc, KILN_EPERM);
  assert_int_equal(r.attempts, 1);
  kiln_http_free(h);
}

static void test_token_sent_wrong_token_eperm(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r;
  char line[512];
  FILE *fp;
  start_server(f, "ok", "s3cret-token");
  put_file(f, "ac/k", "v", NULL);
  config(&c, f->port);
  snprintf(c.token, sizeof c.token, "s3cret-token");
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r = get_req("ac/k");
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_int_equal(r.rc, KILN_OK);
  kiln_remote_reqs_reset(&r, 1);
  kiln_http_free(h);
  snprintf(c.token, sizeof c.token, "wrong-token");
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r = get_req("ac/k");
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_int_equal(r.rc, KILN_EPERM);
  assert_null(strstr(r.error, "wrong-token"));
  kiln_remote_reqs_reset(&r, 1);
  kiln_http_free(h);
  assert_int_equal(count_log(f, "GET /ac/k 200 auth=yes"), 1);
  assert_int_equal(count_log(f, "GET /ac/k 401 auth=yes"), 1);
  fp = fopen(f->log, "r");
  assert_non_null(fp);
  while (fgets(line, sizeof line, fp))
    assert_null(strstr(line, "token"));
  fclose(fp);
}

/* A port nothing listens on: bind one, note it, close it. */
static int dead_port(fixture *f) {
  start_server(f, "ok", NULL);
  int port = f->port;
  stop_server(f);
  return port;
}

static void test_connection_refused_is_fast_eremote(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r;
  uint64_t t0;
  config(&c, dead_port(f));
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r = get_req("cas/x");
  t0 = ms_now();
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_true(ms_now() - t0 < 1500);
  assert_int_equal(r.rc, KILN_EREMOTE);
  assert_int_equal(r.status, 0);
  assert_int_equal(r.attempts, 3);
  assert_non_null(strstr(r.error, "GET cas/x: Couldn't connect to server (3 attempts)"));
  kiln_http_free(h);
}

static int warn_count;
static char warn_line[512];
static void capture(kiln_log_level level, const char *line, void *user) {
  (void)user;
  if (level != KILN_LOG_WARN) return;
  warn_count++;
  snprintf(warn_line, sizeof warn_line, "%s", line);
}

/* A chained run: each first request's follow-up, asked for once it is done
 * (its body read), runs in the same batch; none for a miss; with the breaker
 * open, then is still asked once for each, and what it gives fails. */
typedef struct chain_ctx {
  kiln_remote_req *firsts, follow[8];
  size_t n;
  int calls[8], ends[8];
  int done_when_called; /* every call found its first request's result final */
} chain_ctx;

static kiln_remote_req *chain_then(void *user, size_t i) {
  chain_ctx *x = user;
  kiln_remote_req *r = &x->firsts[i < x->n ? i : i - x->n];
  if (i >= x->n) { /* a follow-up's end: its result is final */
    x->ends[i - x->n]++;
    if (x->follow[i - x->n].rc == KILN_OK && !x->follow[i - x->n].data) x->done_when_called = 0;
    return NULL;
  }
  x->calls[i]++;
  if (r->attempts == 0 && r->rc == KILN_OK) x->done_when_called = 0;
  if (r->rc != KILN_OK && r->rc != KILN_EREMOTE) return NULL; /* a miss: nothing follows */
  x->follow[i] = get_req(r->rc == KILN_OK ? (const char *)r->data : "cas/none");
  return &x->follow[i];
}

static void test_chained_follow_ups(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r[8];
  chain_ctx x;
  start_server(f, "ok", NULL);
  for (int i = 0; i < 7; i++) {
    char rec[32], blob[32], text[32];
    snprintf(rec, sizeof rec, "ac/k%d", i);
    snprintf(blob, sizeof blob, "cas/b%d", i);
    snprintf(text, sizeof text, "blob %d", i);
    put_file(f, rec, blob, NULL);
    put_file(f, blob, text, NULL);
  }
  config(&c, f->port);
  c.parallel = 3;
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  memset(&x, 0, sizeof x);
  x.firsts = r;
  x.n = 8;
  x.done_when_called = 1;
  for (int i = 0; i < 8; i++) {
    char p[32];
    snprintf(p, sizeof p, "ac/k%d", i); /* ac/k7 is not there */
    r[i] = get_req(p);
  }
  assert_int_equal(kiln_http_run_then(h, r, 8, chain_then, &x), KILN_OK);
  assert_true(x.done_when_called);
  for (int i = 0; i < 7; i++) {
    char text[32];
    snprintf(text, sizeof text, "blob %d", i);
    assert_int_equal(x.calls[i], 1);
    assert_int_equal(x.ends[i], 1);
    assert_int_equal(r[i].rc, KILN_OK);
    assert_int_equal(x.follow[i].rc, KILN_OK);
    assert_string_equal((const char *)x.follow[i].data, text);
  }
  assert_int_equal(x.calls[7], 1);
  assert_int_equal(x.ends[7], 0);
  assert_int_equal(r[7].rc, KILN_ENOTFOUND);
  kiln_remote_reqs_reset(r, 8);
  kiln_remote_reqs_reset(x.follow, 7);
  kiln_http_free(h);
  /* the breaker open: then once for each, its follow-up failed, nothing sent */
  stop_server(f);
  config(&c, dead_port(f));
  c.retries = 0;
  c.breaker_threshold = 1;
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r[0] = get_req("ac/k0");
  assert_int_equal(kiln_http_run(h, r, 1), KILN_OK);
  assert_int_equal(kiln_http_breaker_open(h), 1);
  memset(&x, 0, sizeof x);
  x.firsts = r;
  x.n = 3;
  for (int i = 0; i < 3; i++)
    r[i] = get_req("ac/k0");
  assert_int_equal(kiln_http_run_then(h, r, 3, chain_then, &x), KILN_EREMOTE);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(x.calls[i], 1);
    assert_int_equal(x.ends[i], 1);
    assert_int_equal(x.follow[i].rc, KILN_EREMOTE);
    assert_non_null(strstr(x.follow[i].error, "not sent"));
  }
  kiln_http_free(h);
}

static void test_breaker_opens_once(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r[5];
  uint64_t t0;
  config(&c, dead_port(f));
  c.retries = 0;
  c.parallel = 1;
  c.breaker_threshold = 3;
  warn_count = 0;
  kiln_log_set_callback(capture, NULL);
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  for (int i = 0; i < 5; i++) {
    char p[32];
    snprintf(p, sizeof p, "cas/%d", i);
    r[i] = get_req(p);
  }
  assert_int_equal(kiln_http_run(h, r, 5), KILN_OK);
  for (int i = 0; i < 5; i++)
    assert_int_equal(r[i].rc, KILN_EREMOTE);
  assert_non_null(strstr(r[4].error, "breaker open"));
  assert_int_equal(r[4].attempts, 0);
  assert_int_equal(kiln_http_breaker_open(h), 1);
  assert_int_equal(kiln_http_breaker_trips(h), 1);
  t0 = ms_now();
  assert_int_equal(kiln_http_run(h, r, 2), KILN_EREMOTE);
  assert_true(ms_now() - t0 < 50);
  assert_int_equal(r[0].rc, KILN_EREMOTE);
  assert_int_equal(r[0].attempts, 0);
  kiln_log_set_callback(NULL, NULL);
  assert_int_equal(warn_count, 1);
  assert_non_null(strstr(warn_line, "turned off for this process after 3 failed requests"));
  assert_int_equal(kiln_http_breaker_trips(h), 1);
  kiln_http_free(h);
}

static void test_64_parallel_gets(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req *r = calloc(64, sizeof *r);
  char dg[64][65];
  start_server(f, "ok", NULL);
  for (int i = 0; i < 64; i++) {
    char p[32], body[64];
    snprintf(p, sizeof p, "cas/f%02d", i);
    snprintf(body, sizeof body, "body number %d", i);
    put_file(f, p, body, dg[i]);
    r[i] = get_req(p);
    r[i].expect_digest = dg[i];
  }
  config(&c, f->port);
  c.parallel = 16;
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  assert_int_equal(kiln_http_run(h, r, 64), KILN_OK);
  for (int i = 0; i < 64; i++) {
    char body[64];
    snprintf(body, sizeof body, "body number %d", i);
    assert_int_equal(r[i].rc, KILN_OK);
    assert_string_equal((char *)r[i].data, body);
  }
  kiln_remote_reqs_reset(r, 64);
  free(r);
  kiln_http_free(h);
}

static void test_max_bytes_exceeded_is_ecorrupt(void **state) {
  fixture *f = *state;
  kiln_remote_config c;
  kiln_http *h = NULL;
  kiln_remote_req r;
  start_server(f, "ok", NULL);
  put_file(f, "cas/big", "0123456789012345678901234567890123456789", NULL);
  config(&c, f->port);
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  r = get_req("cas/big");
  r.max_bytes = 10;
  assert_int_equal(kiln_http_run(h, &r, 1), KILN_OK);
  assert_int_equal(r.rc, KILN_ECORRUPT);
  assert_int_equal(r.attempts, 1);
  assert_null(r.data);
  kiln_http_free(h);
}

static void test_userinfo_in_url_is_einval(void **state) {
  kiln_remote_config c;
  kiln_http *h = NULL;
  (void)state;
  config(&c, 1);
  snprintf(c.base, sizeof c.base, "https://user:pw@cache.example:8443/p");
  assert_int_equal(kiln_http_new(&h, &c), KILN_EINVAL);
  assert_null(h);
  assert_null(strstr(kiln_last_error(), "pw"));
  snprintf(c.base, sizeof c.base, "ftp://cache.example");
  assert_int_equal(kiln_http_new(&h, &c), KILN_EINVAL);
  snprintf(c.base, sizeof c.base, "https://cache.example/a@b");
  assert_int_equal(kiln_http_new(&h, &c), KILN_OK);
  kiln_http_free(h);
}

/* ---- the sink alone ---- */

#define HDR(s, str) kiln_http_sink_header(s, str, strlen(str))

static void test_sink_content_length_parsing(void **state) {
  kiln_http_sink *s = NULL;
  uint8_t *d = NULL;
  size_t n = 0;
  (void)state;
  assert_int_equal(kiln_http_sink_new(&s, -1, 0, NULL), KILN_OK);
  HDR(s, "HTTP/1.1 200 OK\r\n");
  HDR(s, "cOnTeNt-LeNgTh: \t 5 \r\n");
  assert_int_equal(kiln_http_sink_body(s, "hel", 3), 3);
  assert_int_equal(kiln_http_sink_finish(s, &d, &n), KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "truncated: got 3 of 5 bytes"));
  kiln_http_sink_free(s);
  /* junk and overflowing values are ignored; a new status line resets */
  assert_int_equal(kiln_http_sink_new(&s, -1, 0, NULL), KILN_OK);
  HDR(s, "HTTP/1.1 100 Continue\r\n");
  HDR(s, "Content-Length: 99\r\n");
  HDR(s, "HTTP/1.1 200 OK\r\n");
  HDR(s, "Content-Length: 99999999999999999999999999\r\n");
  HDR(s, "Content-Length: 12abc\r\n");
  HDR(s, "Content-Length: -3\r\n");
  HDR(s, "Content-Length:");
  kiln_http_sink_header(s, NULL, 0);
  assert_int_equal(kiln_http_sink_body(s, "hello", 5), 5);
  assert_int_equal(kiln_http_sink_finish(s, &d, &n), KILN_OK);
  assert_int_equal(n, 5);
  assert_string_equal((char *)d, "hello");
  free(d);
  kiln_http_sink_free(s);
}

static void test_sink_digest_max_and_error_bodies(void **state) {
  kiln_http_sink *s = NULL;
  uint8_t *d = NULL;
  size_t n = 0;
  char dg[65];
  char big[8192];
  (void)state;
  kiln_sha256_hex(dg, "abc", 3);
  assert_int_equal(kiln_http_sink_new(&s, -1, 0, dg), KILN_OK);
  assert_int_equal(kiln_http_sink_body(s, "ab", 2), 2);
  assert_int_equal(kiln_http_sink_body(s, "c", 1), 1);
  assert_int_equal(kiln_http_sink_finish(s, &d, &n), KILN_OK);
  free(d);
  kiln_http_sink_free(s);
  assert_int_equal(kiln_http_sink_new(&s, -1, 0, dg), KILN_OK);
  assert_int_equal(kiln_http_sink_body(s, "abd", 3), 3);
  assert_int_equal(kiln_http_sink_finish(s, &d, &n), KILN_ECORRUPT);
  assert_non_null(strstr(kiln_last_error(), "digest mismatch"));
  assert_null(d);
  kiln_http_sink_free(s);
  assert_int_equal(kiln_http_sink_new(&s, -1, 4, NULL), KILN_OK);
  assert_int_equal(kiln_http_sink_body(s, "abcd", 4), 4);
  assert_int_equal(kiln_http_sink_body(s, "e", 1), 0);
  assert_int_equal(kiln_http_sink_finish(s, &d, &n), KILN_ECORRUPT);
  kiln_http_sink_free(s);
  /* a 404 body is neither hashed nor bounded by max_bytes, and kept short */
  memset(big, 'x', sizeof big);
  assert_int_equal(kiln_http_sink_new(&s, -1, 4, dg), KILN_OK);
  HDR(s, "HTTP/2 404\r\n");
  assert_int_equal(kiln_http_sink_body(s, big, sizeof big), sizeof big);
  assert_int_equal(kiln_http_sink_finish(s, &d, &n), KILN_OK);
  assert_null(d);
  kiln_http_sink_free(s);
  assert_int_equal(kiln_http_sink_new(&s, -1, 0, "nothex"), KILN_EINVAL);
  kiln_http_sink_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sink_content_length_parsing),
      cmocka_unit_test(test_sink_digest_max_and_error_bodies),
      cmocka_unit_test(test_userinfo_in_url_is_einval),
      cmocka_unit_test_setup_teardown(test_get_to_memory_and_file_with_digest, setup, teardown),
      cmocka_unit_test_setup_teardown(test_404_is_enotfound_and_head, setup, teardown),
      cmocka_unit_test_setup_teardown(test_put_then_get_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_500_fails_after_every_attempt, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flaky_succeeds_on_third_attempt, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stall_times_out_bounded, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_and_garbage_are_ecorrupt, setup, teardown),
      cmocka_unit_test_setup_teardown(test_readonly_put_is_eperm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_token_sent_wrong_token_eperm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_connection_refused_is_fast_eremote, setup, teardown),
      cmocka_unit_test_setup_teardown(test_breaker_opens_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_chained_follow_ups, setup, teardown),
      cmocka_unit_test_setup_teardown(test_64_parallel_gets, setup, teardown),
      cmocka_unit_test_setup_teardown(test_max_bytes_exceeded_is_ecorrupt, setup, teardown),
  };
  if (system("python3 -c '' >/dev/null 2>&1") != 0) {
    printf("python3 not found: skipped\n");
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
