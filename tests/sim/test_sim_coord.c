/* The real coordination protocol (loader/coord*.c) over the simulated
 * communicator (tests/sim/sim_comm.h), in virtual time: 1,024 ranks run a
 * cold and a warm kiln_coord_fill (one compile per key, the same
 * fingerprint everywhere, a warm start is one collective, no wait longer
 * than two heartbeats on a tree), and 256 ranks lose their root to a
 * freeze mid-build (every other rank has KILN_EPEER naming it within the peer
 * timeout plus two heartbeats; with the peer timeout at the builder timeout,
 * as before issue 28, they wait the builder timeout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "tests/sim/sim_job.h"
#include "tests/unit/test_util.h"

#define HEARTBEAT_S 0.5
#define PEER_S 10.0

static char base[256];

static sim_job job_in(const char *root, const char *others, int n) {
  static char rd[512], od[512];
  sim_job j;
  memset(&j, 0, sizeof j);
  snprintf(rd, sizeof rd, "%s/%s", base, root);
  snprintf(od, sizeof od, "%s/%s", base, others);
  j.sim.n = n;
  j.sim.alg = SIM_TREE;
  j.sim.alpha_us = 5;
  j.sim.beta_ns = 0.1;
  j.sim.build_ms = 3000;
  j.sim.freeze_rank = -1;
  j.sim.real_limit_s = 120;
  j.root_dir = rd;
  j.others_dir = od;
  j.kernels = "bias_dropout_add";
  j.target = (kiln_target){90, 0, KILN_TARGET_CUBIN};
  j.heartbeat_s = HEARTBEAT_S;
  j.peer_timeout_s = PEER_S;
  j.timeout_s = 1800;
  j.stack_kib = 256;
  return j;
}

static void show(const char *what, const sim_outcome *o) {
  printf("%s: ok %d, epeer %d, other %d; ready %.1f ms virtual, longest wait %.1f ms (%s, rank "
         "%d); collectives %zu..%zu; compiled %zu, received %zu; CPU %.0f us/rank (max %.0f), "
         "root %.0f us; %.2f s real\n",
         what, o->n_ok, o->n_epeer, o->n_other, o->ready_ms, o->longest_wait_ms, o->longest_what,
         o->longest_rank, o->collectives_min, o->collectives_max, o->compiled, o->received,
         o->cpu_us_mean, o->cpu_us_max, o->root_cpu_us, o->real_s);
  if (o->root_err[0]) printf("  rank 0: %s\n", o->root_err);
  if (o->other_err[0]) printf("  rank %d: %s\n", o->other_err_rank, o->other_err);
}

static void test_1024_ranks_cold_then_warm(void **state) {
  sim_job j = job_in("root", "others", 1024);
  sim_outcome o;
  (void)state;
  assert_int_equal(sim_job_run(&o, &j), KILN_OK);
  show("cold, 1024 ranks, tree", &o);
  assert_int_equal(o.n_ok, 1024);
  assert_int_equal(o.missing, 1);
  assert_int_equal(o.compiled, 1); /* one compile per key, on the root */
  assert_int_equal(o.received, 1023);
  assert_true(o.fingerprints_agree);
  /* ready once the 3 s build ended, plus a frame and the transfers */
  assert_true(o.ready_ms >= 3000 && o.ready_ms < 3000 + 2 * HEARTBEAT_S * 1e3);
  assert_true(o.longest_wait_ms <= 2 * HEARTBEAT_S * 1e3);
  /* a frame every heartbeat from the first exchange until the build ended */
  assert_in_range(o.frames, 3000 / (int)(HEARTBEAT_S * 1e3) + 1,
                  3000 / (int)(HEARTBEAT_S * 1e3) + 2);
  {
    char fp[65];
    snprintf(fp, sizeof fp, "%s", o.fingerprint);
    assert_int_equal(sim_job_run(&o, &j), KILN_OK);
    show("warm, 1024 ranks, tree", &o);
    assert_int_equal(o.n_ok, 1024);
    assert_int_equal(o.collectives_max, 1); /* a warm start is one collective */
    assert_int_equal(o.compiled + o.received, 0);
    assert_string_equal(o.fingerprint, fp);
  }
}

/* The root stops at its 4th collective (after the union and 3 frames), 60
 * s into a virtual build. */
static void freeze_root(sim_outcome *o, double peer_s) {
  sim_job j = job_in("root", peer_s < 100 ? "frozen-after" : "frozen-before", 256);
  j.sim.build_ms = 60000;
  j.sim.freeze_rank = 0;
  j.sim.freeze_at = 4;
  j.peer_timeout_s = peer_s;
  assert_int_equal(sim_job_run(o, &j), KILN_OK);
}

static void test_frozen_root_is_found_within_the_peer_timeout(void **state) {
  sim_outcome o;
  (void)state;
  freeze_root(&o, PEER_S);
  show("frozen root, 256 ranks, peer timeout 10 s", &o);
  assert_int_equal(o.n_epeer, 256); /* the root too, once thawed: no hang */
  assert_non_null(strstr(o.other_err, "the root (rank 0 on "));
  assert_non_null(strstr(o.other_err, "last progress: frame 2"));
  assert_non_null(strstr(o.other_err, "peer timeout"));
  assert_true(o.freeze_ms > 0);
  assert_true(o.others_end_max_ms - o.freeze_ms <= (PEER_S + 2 * HEARTBEAT_S) * 1e3);
  assert_true(o.others_end_max_ms - o.freeze_ms >= PEER_S * 1e3 - HEARTBEAT_S * 1e3);
  /* before the peer timeout: the builder timeout held them */
  freeze_root(&o, 1800);
  show("frozen root, 256 ranks, peer timeout = builder timeout 1800 s", &o);
  assert_int_equal(o.n_epeer, 256);
  assert_true(o.others_end_max_ms - o.freeze_ms >= 1800e3 - HEARTBEAT_S * 1e3);
}

static int setup(void **state) {
  (void)state;
  test_make_tmpdir(base, sizeof base);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  test_rm_rf(base);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_1024_ranks_cold_then_warm),
      cmocka_unit_test(test_frozen_root_is_found_within_the_peer_timeout),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
