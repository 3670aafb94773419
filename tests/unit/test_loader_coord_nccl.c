/* loader/coord_nccl.c: the NCCL transport of kiln_comm, against the fake
 * libcuda and the fake libnccl of tests/fakecuda (no GPU, no NCCL):
 * rank and size come from NCCL; bytes round trip through the staging
 * buffers, in chunks past KILN_NCCL_STAGING_BYTES; a stream that never
 * drains times out within its deadline and aborts the communicator once; an
 * asynchronous NCCL error aborts it too; after an abort every call fails
 * at once and makes no NCCL call; bad arguments are refused; a missing
 * libnccl is KILN_ENOTFOUND naming the file.
 *
 * Usage: test_loader_coord_nccl <libkiln_fakecuda.so> <libkiln_fakenccl.so>
 * (exits 77 when they were not built). The fakes' hooks
 * (KILN_FAKE_CUDA_STREAM_HANG, KILN_FAKE_NCCL_*) are read on every call, so
 * each test sets and clears them around its own calls. */
#include <dlfcn.h>    /* dlopen: the fake libnccl's test helpers */
#include <math.h>     /* NAN */
#include <setjmp.h>   /* cmocka */
#include <stdarg.h>   /* cmocka */
#include <stddef.h>   /* cmocka */
#include <stdint.h>   /* uint8_t */
#include <stdio.h>    /* printf */
#include <stdlib.h>   /* setenv, malloc */
#include <string.h>   /* memcmp, strstr */
#include <sys/wait.h> /* waitpid: the missing-library case runs in a child */
#include <time.h>     /* clock_gettime */
#include <unistd.h>   /* access, fork, execl */

#include <cmocka.h>

#include "kiln/comm.h"
#include "loader/coord_nccl.h" /* KILN_NCCL_STAGING_BYTES */
#include "loader/driver.h"     /* the fake device's primary context */

static const kiln_cuda_api *cu;
static CUcontext g_ctx;

/* The fake libnccl's helpers (tests/fakecuda/fake_nccl.c). */
static void *(*fake_comm)(int rank, int nranks);
static unsigned char (*peer_byte)(int m, size_t j);
static int (*abort_count)(void);
static int (*calls_after_abort)(void);
static int (*collectives)(void);

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void expect(kiln_status st, kiln_status want, const char *needle) {
  if (st != want || (needle && !strstr(kiln_last_error(), needle)))
    fail_msg("got %s '%s', expected %s naming '%s'", kiln_status_str(st), kiln_last_error(),
             kiln_status_str(want), needle ? needle : "");
}

/* A communicator in which this process is rank `rank` of nranks. */
static kiln_comm *open_comm(int rank, int nranks) {
  kiln_comm *c = NULL;
  void *nc = fake_comm(rank, nranks);
  assert_non_null(nc);
  expect(kiln_comm_nccl(&c, nc, NULL), KILN_OK, NULL);
  assert_non_null(c);
  return c;
}

static void close_comm(kiln_comm *c) {
  kiln_comm_free(c);
}

static uint8_t *pattern(size_t n, unsigned seed) {
  uint8_t *p = malloc(n);
  assert_non_null(p);
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)((i * 2654435761u + seed) >> 13);
  return p;
}

static void test_rank_and_size_come_from_nccl(void **state) {
  kiln_comm *c = open_comm(0, 1), *d;
  (void)state;
  assert_int_equal(c->version, KILN_COMM_VERSION);
  assert_int_equal(c->rank, 0);
  assert_int_equal(c->size, 1);
  assert_string_equal(c->name, "nccl");
  assert_non_null(c->self);
  close_comm(c);
  d = open_comm(2, 5);
  assert_int_equal(d->rank, 2);
  assert_int_equal(d->size, 5);
  close_comm(d);
}

/* One rank: a broadcast from itself and a max-reduce give the input back,
 * through the staging buffers, one NCCL call per staging-size chunk. */
static void test_one_rank_round_trips_exact_bytes(void **state) {
  static const size_t sizes[] = {3, ((size_t)1 << 20) + 3};
  kiln_comm *c = open_comm(0, 1);
  (void)state;
  assert_int_equal(KILN_NCCL_STAGING_BYTES, (size_t)1 << 20); /* the second size spans two */
  for (size_t i = 0; i < 2; i++) {
    size_t n = sizes[i], chunks = (n + KILN_NCCL_STAGING_BYTES - 1) / KILN_NCCL_STAGING_BYTES;
    uint8_t *want = pattern(n, 7), *buf = pattern(n, 7);
    int before = collectives();
    expect(c->broadcast(c->self, buf, n, 0, 5.0), KILN_OK, NULL);
    assert_memory_equal(buf, want, n);
    assert_int_equal(collectives() - before, (int)chunks);
    expect(c->max_reduce(c->self, buf, n, 5.0), KILN_OK, NULL);
    assert_memory_equal(buf, want, n);
    assert_int_equal(collectives() - before, 2 * (int)chunks);
    free(want);
    free(buf);
  }
  close_comm(c);
}

/* Rank 1 of 2 (the fake simulates rank 0): a broadcast from the root gets
 * the root's bytes, chunk by chunk at the right offsets; a max-reduce gives
 * the byte-wise max with the peer's. */
static void test_other_ranks_bytes_arrive_in_order(void **state) {
  size_t n = 2 * KILN_NCCL_STAGING_BYTES + 5;
  kiln_comm *c = open_comm(1, 2);
  uint8_t *buf = pattern(n, 3), *mine = pattern(n, 3);
  int m0;
  (void)state;
  m0 = collectives();
  expect(c->broadcast(c->self, buf, n, 0, 5.0), KILN_OK, NULL);
  for (size_t j = 0; j < n; j++)
    if (buf[j] != peer_byte(m0 + (int)(j / KILN_NCCL_STAGING_BYTES), j % KILN_NCCL_STAGING_BYTES))
      fail_msg("broadcast byte %zu: %u", j, buf[j]);
  memcpy(buf, mine, n);
  m0 = collectives();
  expect(c->max_reduce(c->self, buf, n, 5.0), KILN_OK, NULL);
  for (size_t j = 0; j < n; j++) {
    unsigned char p =
        peer_byte(m0 + (int)(j / KILN_NCCL_STAGING_BYTES), j % KILN_NCCL_STAGING_BYTES);
    if (buf[j] != (mine[j] > p ? mine[j] : p)) fail_msg("max_reduce byte %zu: %u", j, buf[j]);
  }
  free(buf);
  free(mine);
  close_comm(c);
}

/* A nonblocking communicator answers ncclInProgress: the transport waits for
 * the enqueue, then for the stream, and the bytes are the same. */
static void test_nonblocking_communicator_waits_for_enqueue(void **state) {
  kiln_comm *c = open_comm(0, 1);
  uint8_t buf[5] = {1, 2, 3, 4, 250}, want[5] = {1, 2, 3, 4, 250};
  (void)state;
  setenv("KILN_FAKE_NCCL_IN_PROGRESS", "1", 1);
  expect(c->max_reduce(c->self, buf, sizeof buf, 1.0), KILN_OK, NULL);
  unsetenv("KILN_FAKE_NCCL_IN_PROGRESS");
  assert_memory_equal(buf, want, sizeof buf);
  close_comm(c);
}

/* The caller's thread should have the context current; when it has none,
 * the communicator uses the one it was made in. */
static void test_collective_without_current_context(void **state) {
  kiln_comm *c = open_comm(0, 1);
  uint8_t buf[3] = {9, 8, 7};
  CUcontext popped = NULL, cur = (CUcontext)1;
  kiln_comm *none = NULL;
  (void)state;
  assert_int_equal(cu->CtxPopCurrent(&popped), CUDA_SUCCESS);
  expect(c->max_reduce(c->self, buf, sizeof buf, 1.0), KILN_OK, NULL);
  assert_int_equal(buf[0], 9);
  assert_int_equal(cu->CtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_null(cur); /* popped again */
  expect(kiln_comm_nccl(&none, fake_comm(0, 1), NULL), KILN_EINVAL, "no CUDA context is current");
  assert_null(none);
  assert_int_equal(cu->CtxPushCurrent(popped), CUDA_SUCCESS);
  close_comm(c);
}

/* A stream that never drains: the call returns KILN_ETIMEDOUT at its
 * deadline, aborts the NCCL communicator exactly once, and every later call
 * fails at once with KILN_EPEER and no NCCL call. */
static void test_hung_collective_times_out_and_aborts_once(void **state) {
  kiln_comm *c = open_comm(0, 1);
  uint8_t buf[3] = {1, 2, 3};
  int aborts = abort_count(), after = calls_after_abort();
  double t0, dt;
  (void)state;
  setenv("KILN_FAKE_CUDA_STREAM_HANG", "1", 1);
  t0 = now_s();
  expect(c->broadcast(c->self, buf, sizeof buf, 0, 0.2), KILN_ETIMEDOUT,
         "broadcast of 3 bytes (root 0): did not complete within 0.2 s");
  dt = now_s() - t0;
  if (dt < 0.2 || dt > 1.0) fail_msg("timed out after %.3f s, want 0.2-1 s", dt);
  assert_int_equal(abort_count() - aborts, 1);
  t0 = now_s();
  expect(c->max_reduce(c->self, buf, sizeof buf, 5.0), KILN_EPEER, "aborted earlier");
  expect(c->broadcast(c->self, buf, sizeof buf, 0, 5.0), KILN_EPEER, "did not complete within");
  assert_true(now_s() - t0 < 0.1);
  c->abort(c->self, "the protocol gives up too"); /* already aborted: no second ncclCommAbort */
  assert_int_equal(abort_count() - aborts, 1);
  assert_int_equal(calls_after_abort() - after, 0);
  close_comm(c); /* the stream is still "busy": the staging buffers stay with the context */
  unsetenv("KILN_FAKE_CUDA_STREAM_HANG");
}

/* An asynchronous error (a peer died): KILN_EPEER with NCCL's text, and the
 * communicator aborted. */
static void test_async_error_is_a_peer_failure(void **state) {
  kiln_comm *c = open_comm(0, 1);
  uint8_t buf[3] = {1, 2, 3};
  int aborts = abort_count(), after = calls_after_abort();
  (void)state;
  setenv("KILN_FAKE_NCCL_ASYNC_ERROR", "1", 1);
  expect(c->max_reduce(c->self, buf, sizeof buf, 5.0), KILN_EPEER,
         "ncclRemoteError (remote process exited or there was a network error)");
  unsetenv("KILN_FAKE_NCCL_ASYNC_ERROR");
  assert_int_equal(abort_count() - aborts, 1);
  expect(c->max_reduce(c->self, buf, sizeof buf, 5.0), KILN_EPEER, "aborted earlier");
  assert_int_equal(calls_after_abort() - after, 0);
  close_comm(c);
}

/* The vtable's abort aborts the NCCL communicator once, with the reason
 * repeated by the calls after it. */
static void test_abort_then_calls_fail(void **state) {
  kiln_comm *c = open_comm(0, 1);
  uint8_t buf[1] = {0};
  int aborts = abort_count();
  (void)state;
  c->abort(c->self, "root went silent");
  c->abort(c->self, "again");
  assert_int_equal(abort_count() - aborts, 1);
  expect(c->broadcast(c->self, buf, 1, 0, 1.0), KILN_EPEER, "root went silent");
  close_comm(c);
}

static void test_bad_arguments_are_refused(void **state) {
  kiln_comm *c = open_comm(0, 1), *none = (kiln_comm *)1;
  uint8_t buf[4] = {0};
  int before = collectives();
  (void)state;
  expect(kiln_comm_nccl(NULL, fake_comm(0, 1), NULL), KILN_EINVAL, "out is NULL");
  expect(kiln_comm_nccl(&none, NULL, NULL), KILN_EINVAL, "nccl_comm is NULL");
  assert_null(none);
  expect(c->broadcast(NULL, buf, 4, 0, 1.0), KILN_EINVAL, "self is NULL");
  expect(c->max_reduce(NULL, buf, 4, 1.0), KILN_EINVAL, "self is NULL");
  expect(c->broadcast(c->self, NULL, 4, 0, 1.0), KILN_EINVAL, "buf is NULL");
  expect(c->max_reduce(c->self, NULL, 4, 1.0), KILN_EINVAL, "buf is NULL");
  expect(c->broadcast(c->self, buf, 4, 1, 1.0), KILN_EINVAL, "no rank 1 in a communicator of 1");
  expect(c->broadcast(c->self, buf, 4, -1, 1.0), KILN_EINVAL, "no rank -1");
  expect(c->max_reduce(c->self, buf, 4, 0.0), KILN_EINVAL, "timeout 0 s");
  expect(c->max_reduce(c->self, buf, 4, NAN), KILN_EINVAL, "want > 0");
  expect(c->max_reduce(c->self, NULL, 0, 1.0), KILN_OK, NULL); /* nothing to move */
  assert_int_equal(collectives(), before);
  c->abort(NULL, "no-op");
  c->destroy(NULL);
  close_comm(c);
}

/* Runs this program again with --missing-nccl: libnccl is loaded once per
 * process, so a missing one needs a process of its own. A KILN_NCCL_LIBRARY
 * that will not load is the only file tried, and an error naming it. */
static void test_missing_named_libnccl_is_einval(void **state) {
  int st = 0;
  pid_t pid;
  (void)state;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    execl("/proc/self/exe", "test_loader_coord_nccl", "--missing-nccl", (char *)NULL);
    _exit(127);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

static int missing_nccl(void) {
  static const char path[] = "/nonexistent/kiln-test/libnccl-missing.so.2";
  kiln_comm *c = (kiln_comm *)1;
  int dummy = 0;
  kiln_status st;
  setenv("KILN_NCCL_LIBRARY", path, 1);
  st = kiln_comm_nccl(&c, &dummy, NULL);
  if (st != KILN_EINVAL || c || !strstr(kiln_last_error(), path) ||
      !strstr(kiln_last_error(), "KILN_NCCL_LIBRARY")) {
    printf("missing libnccl: got %s '%s'\n", kiln_status_str(st), kiln_last_error());
    return 1;
  }
  return 0;
}

static int setup(void **state) {
  CUdevice dev;
  (void)state;
  if (kiln_cuda(&cu) != KILN_OK) {
    printf("kiln_cuda: %s\n", kiln_last_error());
    return 1;
  }
  if (cu->DeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cu->DevicePrimaryCtxRetain(&g_ctx, dev) != CUDA_SUCCESS ||
      cu->CtxPushCurrent(g_ctx) != CUDA_SUCCESS)
    return 1;
  return 0;
}

static int teardown(void **state) {
  CUcontext popped;
  (void)state;
  cu->CtxPopCurrent(&popped);
  return cu->DevicePrimaryCtxRelease(0) == CUDA_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_missing_named_libnccl_is_einval),
      cmocka_unit_test(test_rank_and_size_come_from_nccl),
      cmocka_unit_test(test_one_rank_round_trips_exact_bytes),
      cmocka_unit_test(test_other_ranks_bytes_arrive_in_order),
      cmocka_unit_test(test_nonblocking_communicator_waits_for_enqueue),
      cmocka_unit_test(test_collective_without_current_context),
      cmocka_unit_test(test_hung_collective_times_out_and_aborts_once),
      cmocka_unit_test(test_async_error_is_a_peer_failure),
      cmocka_unit_test(test_abort_then_calls_fail),
      cmocka_unit_test(test_bad_arguments_are_refused),
  };
  void *h;
  if (argc == 2 && !strcmp(argv[1], "--missing-nccl")) return missing_nccl();
  if (argc < 3 || access(argv[1], R_OK) != 0 || access(argv[2], R_OK) != 0) {
    printf("no fake libcuda / libnccl (tests/fakecuda needs a C++ compiler); skipped\n");
    return 77;
  }
  setenv("KILN_CUDA_LIBRARY", argv[1], 1);
  setenv("KILN_NCCL_LIBRARY", argv[2], 1);
  setenv("KILN_FAKE_CUDA_DEVICES", "90", 1);
  unsetenv("KILN_FAKE_CUDA_STREAM_HANG");
  unsetenv("KILN_FAKE_NCCL_ASYNC_ERROR");
  unsetenv("KILN_FAKE_NCCL_IN_PROGRESS");
  /* the same library kiln loads (dlopen of one path gives one copy) */
  h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("dlopen %s: %s\n", argv[2], dlerror());
    return 1;
  }
  *(void **)&fake_comm = dlsym(h, "kiln_fake_nccl_comm");
  *(void **)&peer_byte = dlsym(h, "kiln_fake_nccl_peer_byte");
  *(void **)&abort_count = dlsym(h, "kiln_fake_nccl_abort_count");
  *(void **)&calls_after_abort = dlsym(h, "kiln_fake_nccl_calls_after_abort");
  *(void **)&collectives = dlsym(h, "kiln_fake_nccl_collectives");
  if (!fake_comm || !peer_byte || !abort_count || !calls_after_abort || !collectives) {
    printf("%s lacks the kiln_fake_nccl_* helpers\n", argv[2]);
    return 1;
  }
  return cmocka_run_group_tests(tests, setup, teardown);
}
