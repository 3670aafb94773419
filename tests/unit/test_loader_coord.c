/* The coordination protocol (loader/coord.c, coord_wire.c, coord_fill.c):
 * the wire format, and whole runs over a communicator a host program could
 * have written — here N threads of this process, each rank with its own
 * cache directory — including a rank that dies mid-build. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "common/params.h"
#include "kiln/comm.h"
#include "kiln/kiln.h"
#include "loader/coord_internal.h"
#include "tests/unit/test_util.h"

/* ---- the wire ---- */

static void test_target_codes_round_trip(void **state) {
  kiln_target ts[] = {{90, 0, KILN_TARGET_CUBIN},
                      {80, 0, KILN_TARGET_PTX},
                      {90, 1, KILN_TARGET_CUBIN},
                      {121, 0, KILN_TARGET_CUBIN}};
  int seen[COORD_MAP_TARGETS] = {0};
  (void)state;
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
    kiln_target back;
    int code = kiln_coord_target_code(&ts[i]);
    assert_true(code >= 0 && code < COORD_MAP_TARGETS);
    assert_int_equal(seen[code]++, 0); /* distinct targets, distinct slots */
    kiln_coord_target_decode(code, &back);
    assert_int_equal(back.arch, ts[i].arch);
    assert_int_equal(back.kind, ts[i].kind);
    assert_int_equal(back.arch_specific, ts[i].arch_specific);
  }
  kiln_target low = {40, 0, KILN_TARGET_CUBIN}, high = {135, 0, KILN_TARGET_PTX};
  assert_int_equal(kiln_coord_target_code(&low), -1);
  assert_int_equal(kiln_coord_target_code(&high), -1);
}

static void test_frames_round_trip_and_refuse_garbage(void **state) {
  coord_frame f, g;
  uint8_t wire[COORD_FRAME_BYTES];
  (void)state;
  memset(&f, 0, sizeof f);
  f.state = COORD_FAILED;
  f.seq = 41;
  f.done = 3;
  f.total = 7;
  f.status = KILN_ECOMPILE;
  f.pid = 123456789012LL;
  f.elapsed_s = 12.5;
  snprintf(f.host, sizeof f.host, "node-17");
  snprintf(f.unit, sizeof f.unit, "rms_norm");
  snprintf(f.target, sizeof f.target, "sm_90");
  memset(f.message, 'x', sizeof f.message - 1); /* longest message */
  kiln_frame_encode(&f, wire);
  assert_int_equal(kiln_frame_decode(&g, wire), KILN_OK);
  assert_int_equal(memcmp(&f, &g, sizeof f), 0);
  wire[0] ^= 1;
  assert_int_equal(kiln_frame_decode(&g, wire), KILN_ECORRUPT);
  wire[0] ^= 1;
  memset(wire + 8, 0xff, 4); /* state */
  assert_int_equal(kiln_frame_decode(&g, wire), KILN_ECORRUPT);
  /* unterminated strings on the wire come out terminated */
  kiln_frame_encode(&f, wire);
  memset(wire + 8 + 5 * 4 + 16, 'y', 64 + 64 + 16);
  assert_int_equal(kiln_frame_decode(&g, wire), KILN_OK);
  assert_int_equal(strlen(g.host), sizeof g.host - 1);
  assert_int_equal(strlen(g.unit), sizeof g.unit - 1);
}

static void test_headers_round_trip(void **state) {
  coord_header h, g;
  uint8_t wire[COORD_HEADER_BYTES];
  (void)state;
  memset(&h, 0, sizeof h);
  snprintf(h.rec.key, sizeof h.rec.key, "%064d", 7);
  snprintf(h.rec.unit, sizeof h.rec.unit, "embedding");
  snprintf(h.rec.target, sizeof h.rec.target, "compute_90");
  snprintf(h.rec.kind, sizeof h.rec.kind, "ptx");
  snprintf(h.rec.digest, sizeof h.rec.digest, "%064d", 9);
  snprintf(h.rec.toolchain, sizeof h.rec.toolchain, "nvrtc-13.0");
  snprintf(h.rec.options, sizeof h.rec.options, "-std=c++17 --ptxas-options=-v -lineinfo");
  h.rec.size = 1234567;
  h.rec.registers = 40;
  h.rec.build_ms = 1500.25;
  h.log_size = 99;
  kiln_header_encode(&h, wire);
  assert_int_equal(kiln_header_decode(&g, wire), KILN_OK);
  assert_string_equal(g.rec.options, h.rec.options);
  assert_string_equal(g.rec.digest, h.rec.digest);
  assert_true(g.rec.size == h.rec.size && g.log_size == 99 && g.rec.registers == 40);
  assert_true(g.rec.build_ms == h.rec.build_ms);
  memcpy(wire, "kilnfrm1", 8);
  assert_int_equal(kiln_header_decode(&g, wire), KILN_ECORRUPT);
}

/* The artifact header's fields sit at the offsets docs/coordination.md gives
 * (the header is generated from cache/record_fields.def). */
static void test_header_offsets_are_the_documented_ones(void **state) {
  static const struct {
    size_t at;
    int32_t v;
  } ints[] = {{8, -3}, {534, 40}, {538, 5}, {542, 6}, {546, 256}, {550, 16}};
  coord_header h;
  uint8_t wire[COORD_HEADER_BYTES];
  uint64_t u;
  double d;
  int32_t i32;
  (void)state;
  memset(&h, 0, sizeof h);
  h.status = -3;
  snprintf(h.rec.key, sizeof h.rec.key, "%064d", 7);
  snprintf(h.rec.unit, sizeof h.rec.unit, "embedding");
  snprintf(h.rec.target, sizeof h.rec.target, "sm_90");
  snprintf(h.rec.kind, sizeof h.rec.kind, "cubin");
  snprintf(h.rec.digest, sizeof h.rec.digest, "%064d", 9);
  snprintf(h.rec.toolchain, sizeof h.rec.toolchain, "nvrtc-13.0");
  snprintf(h.rec.options, sizeof h.rec.options, "-std=c++17");
  snprintf(h.rec.log_digest, sizeof h.rec.log_digest, "%064d", 1); /* not on the wire */
  h.rec.size = 1234567;
  h.rec.build_ms = 1500.25;
  h.rec.registers = 40;
  h.rec.spill_stores = 5;
  h.rec.spill_loads = 6;
  h.rec.shared_bytes = 256;
  h.rec.stack_bytes = 16;
  h.log_size = 99;
  snprintf(h.message, sizeof h.message, "why");
  kiln_header_encode(&h, wire);
  assert_memory_equal(wire, "kilnart1", 8);
  assert_string_equal((const char *)wire + 12, h.rec.key);
  assert_string_equal((const char *)wire + 77, "embedding");
  assert_string_equal((const char *)wire + 141, "sm_90");
  assert_string_equal((const char *)wire + 157, "cubin");
  assert_string_equal((const char *)wire + 165, h.rec.digest);
  memcpy(&u, wire + 230, 8);
  assert_true(u == 1234567);
  assert_string_equal((const char *)wire + 238, "nvrtc-13.0");
  assert_string_equal((const char *)wire + 270, "-std=c++17");
  memcpy(&d, wire + 526, 8);
  assert_true(d == 1500.25);
  for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
    memcpy(&i32, wire + ints[k].at, 4);
    assert_int_equal(i32, ints[k].v);
  }
  memcpy(&u, wire + 554, 8);
  assert_true(u == 99);
  assert_string_equal((const char *)wire + 562, "why");
  for (size_t k = 818; k < COORD_HEADER_BYTES; k++)
    assert_int_equal(wire[k], 0);
}

static void test_fingerprints_depend_on_content_and_order(void **state) {
  uint8_t a[COORD_FP_BYTES], b[COORD_FP_BYTES], c[COORD_FP_BYTES], d[COORD_FP_BYTES];
  kiln_fp_builder *fb;
  (void)state;
  const char *rows[][3] = {{"u1", "sm_90", "d1"}, {"u2", "sm_90", "d2"}};
  int order[][2] = {{0, 1}, {0, 1}, {1, 0}};
  uint8_t *outs[] = {a, b, c};
  for (int k = 0; k < 3; k++) {
    assert_int_equal(kiln_fp_begin(&fb), KILN_OK);
    for (int i = 0; i < 2; i++) {
      const char **r = rows[order[k][i]];
      assert_int_equal(kiln_fp_add(fb, r[0], r[1], r[2]), KILN_OK);
    }
    assert_int_equal(kiln_fp_end(fb, KILN_OK, outs[k]), KILN_OK);
  }
  assert_memory_equal(a, b, COORD_FP_BYTES);
  assert_memory_not_equal(a, c, COORD_FP_BYTES);
  /* "u1" "sm_90d" "1" must not collide with "u1" "sm_90" "d1" */
  assert_int_equal(kiln_fp_begin(&fb), KILN_OK);
  assert_int_equal(kiln_fp_add(fb, "u1", "sm_90d", "1"), KILN_OK);
  assert_int_equal(kiln_fp_add(fb, "u2", "sm_90", "d2"), KILN_OK);
  assert_int_equal(kiln_fp_end(fb, KILN_OK, d), KILN_OK);
  assert_memory_not_equal(a, d, COORD_FP_BYTES);
}

/* ---- a communicator of threads ---- */

#define MAX_RANKS 8

typedef struct tcomm_shared {
  pthread_mutex_t m;
  pthread_cond_t cv;
  int n, arrived;
  unsigned long gen;
  uint8_t *bufs[MAX_RANKS];
  size_t bytes;
} tcomm_shared;

typedef struct tcomm {
  tcomm_shared *s;
  int rank;
  int calls, die_after; /* after die_after calls the rank is "dead": it never arrives */
} tcomm;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The last rank in does the collective for all (root's bytes, or the max). */
static kiln_status tcomm_collective(tcomm *t, uint8_t *buf, size_t bytes, int root,
                                    double timeout_s) {
  tcomm_shared *s = t->s;
  unsigned long gen;
  struct timespec until;
  if (t->die_after >= 0 && t->calls++ >= t->die_after) {
    struct timespec nap = {0, (long)(timeout_s * 1e9 * 0.5) % 1000000000L};
    nanosleep(&nap, NULL);
    return kiln_comm_error(KILN_EPEER, "thread rank %d is dead", t->rank);
  }
  pthread_mutex_lock(&s->m);
  gen = s->gen;
  if (s->arrived == 0)
    s->bytes = bytes;
  else if (s->bytes != bytes) {
    pthread_mutex_unlock(&s->m);
    fail_msg("rank %d: collective of %zu bytes while others use %zu", t->rank, bytes, s->bytes);
  }
  s->bufs[t->rank] = buf;
  if (++s->arrived == s->n) {
    if (root >= 0) {
      for (int r = 0; r < s->n; r++)
        if (r != root) memcpy(s->bufs[r], s->bufs[root], bytes);
    } else {
      for (size_t i = 0; i < bytes; i++) {
        uint8_t m = 0;
        for (int r = 0; r < s->n; r++)
          m = s->bufs[r][i] > m ? s->bufs[r][i] : m;
        for (int r = 0; r < s->n; r++)
          s->bufs[r][i] = m;
      }
    }
    s->arrived = 0;
    s->gen++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->m);
    return KILN_OK;
  }
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)timeout_s;
  until.tv_nsec += (long)((timeout_s - (time_t)timeout_s) * 1e9);
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  while (s->gen == gen)
    if (pthread_cond_timedwait(&s->cv, &s->m, &until) != 0) break;
  if (s->gen == gen) {
    s->arrived--; /* leave: the collective never completes */
    pthread_mutex_unlock(&s->m);
    return kiln_comm_error(KILN_ETIMEDOUT, "thread collective: no peer within %.2f s", timeout_s);
  }
  pthread_mutex_unlock(&s->m);
  return KILN_OK;
}

static kiln_status tcomm_bcast(void *self, void *buf, size_t bytes, int root, double timeout_s) {
  return tcomm_collective(self, buf, bytes, root, timeout_s);
}

static kiln_status tcomm_max(void *self, void *buf, size_t bytes, double timeout_s) {
  return tcomm_collective(self, buf, bytes, -1, timeout_s);
}

typedef struct rank_run {
  pthread_t tid;
  tcomm t;
  kiln_comm comm;
  char dir[512];
  kiln_status st;
  kiln_coord_report rep;
  char err[4096];
  double end_s;
  double timeout_s;
} rank_run;

static void *rank_main(void *arg) {
  rank_run *r = arg;
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  kiln_coord_options o = KILN_COORD_OPTIONS_INIT;
  kiln_target t = {90, 0, KILN_TARGET_CUBIN};
  kiln_cache *cache = NULL;
  co.dir = r->dir;
  o.targets = &t;
  o.n_targets = 1;
  o.kernels = "scaled_softmax";
  o.heartbeat_s = 0.05;
  o.timeout_s = r->timeout_s;
  r->st = kiln_cache_open(&cache, &co);
  if (r->st == KILN_OK) r->st = kiln_coord_fill(&r->rep, cache, &o, &r->comm);
  snprintf(r->err, sizeof r->err, "%s", r->st == KILN_OK ? "" : kiln_last_error());
  r->end_s = now_s();
  kiln_cache_close(cache);
  return NULL;
}

/* Runs n ranks (threads); rank `dies` stops answering after `after` calls. */
static void run_ranks(rank_run *rr, int n, const char *base, int dies, int after,
                      double timeout_s) {
  static tcomm_shared s;
  memset(&s, 0, sizeof s);
  pthread_mutex_init(&s.m, NULL);
  pthread_cond_init(&s.cv, NULL);
  s.n = n;
  for (int i = 0; i < n; i++) {
    rank_run *r = &rr[i];
    memset(r, 0, sizeof *r);
    r->t.s = &s;
    r->t.rank = i;
    r->t.die_after = i == dies ? after : -1;
    r->comm.version = KILN_COMM_VERSION;
    r->comm.rank = i;
    r->comm.size = n;
    r->comm.self = &r->t;
    r->comm.broadcast = tcomm_bcast;
    r->comm.max_reduce = tcomm_max;
    snprintf(r->comm.name, sizeof r->comm.name, "threads");
    snprintf(r->dir, sizeof r->dir, "%s/r%d", base, i);
    r->timeout_s = timeout_s;
    assert_int_equal(pthread_create(&r->tid, NULL, rank_main, r), 0);
  }
  for (int i = 0; i < n; i++)
    pthread_join(rr[i].tid, NULL);
  pthread_cond_destroy(&s.cv);
  pthread_mutex_destroy(&s.m);
}

static void test_host_comm_builds_once_and_every_rank_gets_it(void **state) {
  char base[256];
  rank_run rr[4];
  size_t compiled = 0, received = 0;
  (void)state;
  test_make_tmpdir(base, sizeof base);
  run_ranks(rr, 4, base, -1, 0, 60);
  for (int i = 0; i < 4; i++) {
    if (rr[i].st != KILN_OK) fail_msg("rank %d: %s", i, rr[i].err);
    compiled += rr[i].rep.compiled;
    received += rr[i].rep.received;
    assert_string_equal(rr[i].rep.fingerprint, rr[0].rep.fingerprint);
    assert_int_equal(rr[i].rep.missing, 1);
  }
  assert_int_equal(compiled, 1);
  assert_int_equal(rr[0].rep.compiled, 1);
  assert_int_equal(received, 3);
  /* warm: one collective, nothing compiled or sent */
  run_ranks(rr, 4, base, -1, 0, 60);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(rr[i].st, KILN_OK);
    assert_int_equal(rr[i].rep.collectives, 1);
    assert_int_equal(rr[i].rep.compiled + rr[i].rep.received, 0);
  }
  test_rm_rf(base);
}

static void test_dead_root_is_a_peer_error_within_the_timeout(void **state) {
  char base[256];
  rank_run rr[3];
  double t0 = now_s();
  (void)state;
  test_make_tmpdir(base, sizeof base);
  setenv("KILN_TEST_COMPILE_DELAY_MS", "3000", 1);
  kiln_params_reset();               /* parameters are read once per process */
  run_ranks(rr, 3, base, 0, 4, 0.5); /* the root answers the exchange and 3 frames */
  unsetenv("KILN_TEST_COMPILE_DELAY_MS");
  kiln_params_reset();
  for (int i = 1; i < 3; i++) {
    assert_int_equal(rr[i].st, KILN_EPEER);
    assert_non_null(strstr(rr[i].err, "the root (rank 0 on "));
    assert_non_null(strstr(rr[i].err, "last progress: frame 2"));
    /* 3 frames of 50 ms, then the 0.5 s limit: well before the 3 s build ends */
    assert_true(rr[i].end_s - t0 < 2.5);
  }
  assert_int_equal(rr[0].st, KILN_EPEER);
  test_rm_rf(base);
}

static void test_bad_communicators_are_refused(void **state) {
  kiln_coord_options o = KILN_COORD_OPTIONS_INIT;
  kiln_target t = {90, 0, KILN_TARGET_CUBIN};
  kiln_comm c;
  kiln_comm *single = NULL;
  (void)state;
  o.targets = &t;
  o.n_targets = 1;
  memset(&c, 0, sizeof c);
  assert_int_equal(kiln_coord_fill(NULL, NULL, &o, &c), KILN_EINVAL);
  assert_int_equal(kiln_comm_single(&single), KILN_OK);
  c = *single;
  c.version = 99;
  assert_int_equal(kiln_comm_check(&c), KILN_EINVAL);
  c = *single;
  c.rank = 1;
  assert_int_equal(kiln_comm_check(&c), KILN_EINVAL);
  c = *single;
  c.max_reduce = NULL;
  assert_int_equal(kiln_comm_check(&c), KILN_EINVAL);
  assert_int_equal(kiln_comm_check(single), KILN_OK);
  assert_int_equal(single->broadcast(single->self, &c, 1, 1, 1.0), KILN_EINVAL);
  kiln_comm_free(single);
  kiln_comm_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_target_codes_round_trip),
      cmocka_unit_test(test_frames_round_trip_and_refuse_garbage),
      cmocka_unit_test(test_headers_round_trip),
      cmocka_unit_test(test_header_offsets_are_the_documented_ones),
      cmocka_unit_test(test_fingerprints_depend_on_content_and_order),
      cmocka_unit_test(test_bad_communicators_are_refused),
      cmocka_unit_test(test_host_comm_builds_once_and_every_rank_gets_it),
      cmocka_unit_test(test_dead_root_is_a_peer_error_within_the_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
