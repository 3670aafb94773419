/* coord_scale: the coordination protocol at 1k..16k ranks (and beyond) on the
 * simulated communicator (tests/sim/sim_comm.h), per collective algorithm,
 * in virtual time. For each N and algorithm: a cold run (the root fetches
 * the missing artifacts from a read-only layer, for --build-ms of virtual
 * time, then sends them) and a warm one (every rank holds them). Prints
 * time-to-ready, the longest single wait, the collectives, bytes sent per
 * rank and by the root per status frame, and the real CPU of the protocol
 * code per rank; each figure also as a ratio to the first N of the same
 * algorithm, measured in this run.
 *
 *   coord_scale [--ranks 1024,4096,16384] [--alg ring,tree,rd] [--alpha-us 5]
 *               [--beta-ns 0.1] [--build-ms 2000] [--heartbeat-ms 500]
 *               [--kernels GLOB] [--arch 90] [--dir DIR]
 *
 * The layer the root fetches from is filled first by one single-rank
 * kiln_coord_fill (a real compile) in DIR (default: a temp directory, removed
 * at the end). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/kiln.h"
#include "tests/sim/sim_job.h"

#define MAX_LIST 16

typedef struct args {
  int ranks[MAX_LIST], n_ranks;
  int algs[3], n_algs;
  double alpha_us, beta_ns, build_ms, heartbeat_ms;
  const char *kernels, *dir;
  int arch;
} args;

static void usage(FILE *f) {
  fprintf(f, "usage: coord_scale [--ranks N,N,...] [--alg ring,tree,rd] [--alpha-us US] "
             "[--beta-ns NS] [--build-ms MS] [--heartbeat-ms MS] [--kernels GLOB] [--arch XY] "
             "[--dir DIR]\n");
}

static int number(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  *out = strtod(s, &end);
  return !(errno || end == s || *end || *out < lo || *out > hi);
}

static int parse(args *a, int argc, char **argv) {
  static const int dflt[] = {1024, 4096, 16384};
  double v;
  memset(a, 0, sizeof *a);
  memcpy(a->ranks, dflt, sizeof dflt);
  a->n_ranks = 3;
  a->algs[0] = SIM_RING, a->algs[1] = SIM_TREE, a->algs[2] = SIM_RD, a->n_algs = 3;
  a->alpha_us = 5, a->beta_ns = 0.1, a->build_ms = 2000, a->heartbeat_ms = 500;
  a->kernels = "bias_dropout_add";
  a->arch = 90;
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(k, "--help") == 0 || strcmp(k, "-h") == 0) {
      usage(stdout);
      exit(0);
    }
    if (!val) return fprintf(stderr, "coord_scale: %s needs a value\n", k), 0;
    i++;
    if (strcmp(k, "--ranks") == 0 || strcmp(k, "--alg") == 0) {
      char buf[256];
      int is_ranks = k[2] == 'r';
      if (snprintf(buf, sizeof buf, "%s", val) >= (int)sizeof buf)
        return fprintf(stderr, "coord_scale: %s: too long\n", k), 0;
      if (is_ranks)
        a->n_ranks = 0;
      else
        a->n_algs = 0;
      for (char *t = buf, *comma; t; t = comma ? comma + 1 : NULL) {
        if ((comma = strchr(t, ','))) *comma = '\0';
        if (is_ranks) {
          if (a->n_ranks == MAX_LIST || !number(t, 1, 1 << 20, &v))
            return fprintf(stderr, "coord_scale: --ranks %s: 1 to 1048576, at most 16\n", val), 0;
          a->ranks[a->n_ranks++] = (int)v;
        } else {
          int alg = sim_alg_parse(t);
          if (alg < 0 || a->n_algs == 3)
            return fprintf(stderr, "coord_scale: --alg %s: ring, tree or rd\n", val), 0;
          a->algs[a->n_algs++] = alg;
        }
      }
    } else if (strcmp(k, "--alpha-us") == 0 && number(val, 0, 1e6, &v)) {
      a->alpha_us = v;
    } else if (strcmp(k, "--beta-ns") == 0 && number(val, 0, 1e6, &v)) {
      a->beta_ns = v;
    } else if (strcmp(k, "--build-ms") == 0 && number(val, 0, 1e7, &v)) {
      a->build_ms = v;
    } else if (strcmp(k, "--heartbeat-ms") == 0 && number(val, 1, 1e6, &v)) {
      a->heartbeat_ms = v;
    } else if (strcmp(k, "--arch") == 0 && number(val, 50, 134, &v)) {
      a->arch = (int)v;
    } else if (strcmp(k, "--kernels") == 0) {
      a->kernels = val;
    } else if (strcmp(k, "--dir") == 0) {
      a->dir = val;
    } else {
      fprintf(stderr, "coord_scale: bad option or value: %s %s\n", k, val);
      usage(stderr);
      return 0;
    }
  }
  return 1;
}

static sim_job job_for(const args *a, int n, int alg, const char *root, const char *layer,
                       const char *others) {
  sim_job j;
  memset(&j, 0, sizeof j);
  j.sim.n = n;
  j.sim.alg = alg;
  j.sim.alpha_us = a->alpha_us;
  j.sim.beta_ns = a->beta_ns;
  j.sim.build_ms = a->build_ms;
  j.sim.freeze_rank = -1;
  j.sim.real_limit_s = 600;
  j.root_dir = root;
  j.root_layer = layer;
  j.others_dir = others;
  j.kernels = a->kernels;
  j.target = (kiln_target){a->arch, 0, KILN_TARGET_CUBIN};
  j.heartbeat_s = a->heartbeat_ms / 1e3;
  j.peer_timeout_s = KILN_ENV;
  j.timeout_s = 1800;
  j.stack_kib = 256;
  return j;
}

static int run(sim_outcome *o, const sim_job *j, const char *what) {
  kiln_status st = sim_job_run(o, j);
  if (st != KILN_OK) {
    fprintf(stderr, "coord_scale: %s: %s\n", what, kiln_last_error());
    return 0;
  }
  if (o->n_ok != j->sim.n) {
    fprintf(stderr, "coord_scale: %s: %d of %d ranks failed: rank 0: %s; rank %d: %s\n", what,
            j->sim.n - o->n_ok, j->sim.n, o->root_err, o->other_err_rank, o->other_err);
    return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  args a;
  char base[512], seed[600], root[600], others[600], cmd[2048];
  sim_outcome o;
  int made = 0, rc = 1;
  if (!parse(&a, argc, argv)) return 2;
  if (a.dir) {
    snprintf(base, sizeof base, "%s", a.dir);
  } else {
    const char *t = getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/kiln-coord-scale-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(base)) return perror("coord_scale: mkdtemp"), 1;
    made = 1;
  }
  snprintf(seed, sizeof seed, "%s/seed", base);
  {
    sim_job j = job_for(&a, 1, SIM_TREE, seed, NULL, seed);
    if (!run(&o, &j, "filling the root's layer (one compile)")) goto out;
    printf("# root's layer: %zu artifact(s) compiled in %.1f s real (%s)\n", o.compiled, o.real_s,
           seed);
  }
  printf("# virtual time: alpha %.2f us per hop, beta %.3f ns per byte, root's fetch %.0f ms, "
         "heartbeat %.0f ms\n",
         a.alpha_us, a.beta_ns, a.build_ms, a.heartbeat_ms);
  printf("%-5s %6s | %9s %9s %6s %9s %-22s %5s %10s %10s %9s %8s | %7s %8s | %8s %8s %6s | "
         "%6s\n",
         "alg", "N", "ready_ms", "over_ms", "x", "wait_ms", "longest", "coll", "B/rank",
         "Bmax/rank", "root_B/hb", "art_B", "warm_c", "warm_ms", "cpu_us", "warm_us", "x",
         "real_s");
  for (int ai = 0; ai < a.n_algs; ai++) {
    double base_ready = 0, base_cpu = 0;
    for (int ni = 0; ni < a.n_ranks; ni++) {
      int n = a.ranks[ni];
      sim_outcome cold, warm;
      char what[64];
      snprintf(root, sizeof root, "%s/root-%s-%d", base, sim_alg_name(a.algs[ai]), n);
      snprintf(others, sizeof others, "%s/others-%s-%d", base, sim_alg_name(a.algs[ai]), n);
      sim_job j = job_for(&a, n, a.algs[ai], root, seed, others);
      snprintf(what, sizeof what, "%s, %d ranks, cold", sim_alg_name(a.algs[ai]), n);
      if (!run(&cold, &j, what)) goto out;
      snprintf(what, sizeof what, "%s, %d ranks, warm", sim_alg_name(a.algs[ai]), n);
      if (!run(&warm, &j, what)) goto out;
      if (ni == 0) base_ready = cold.ready_ms - a.build_ms, base_cpu = cold.cpu_us_mean;
      printf("%-5s %6d | %9.1f %9.3f %6.2f %9.1f %-22.22s %5zu %10.0f %10llu %9.0f %8llu | %7zu "
             "%8.3f | %8.0f %8.0f %6.2f | %6.1f\n",
             sim_alg_name(a.algs[ai]), n, cold.ready_ms, cold.ready_ms - a.build_ms,
             base_ready > 0 ? (cold.ready_ms - a.build_ms) / base_ready : 0.0, cold.longest_wait_ms,
             cold.longest_what, cold.collectives_max, cold.bytes_mean,
             (unsigned long long)cold.bytes_max,
             cold.frames ? (double)cold.root_frame_bytes / cold.frames : 0.0,
             (unsigned long long)cold.bytes_received, warm.collectives_max, warm.ready_ms,
             cold.cpu_us_mean, warm.cpu_us_mean, base_cpu > 0 ? cold.cpu_us_mean / base_cpu : 0.0,
             cold.real_s + warm.real_s);
      fflush(stdout);
      snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", root, others);
      if (system(cmd) != 0) fprintf(stderr, "coord_scale: could not remove %s\n", root);
    }
  }
  printf("# x: ratio to the first N of the same algorithm in this run. ready_ms, wait_ms: "
         "virtual; over_ms: ready_ms less the root's fetch (the protocol's own time); art_B: the "
         "artifacts' payload a rank received. B/rank: bytes sent per rank (mean; max: Bmax), "
         "root_B/hb: bytes rank 0 sends "
         "per status frame. cpu_us: real CPU of the protocol per rank (ranks 1..N-1, cold; "
         "warm_us warm).\n");
  rc = 0;
out:
  if (made) {
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) fprintf(stderr, "coord_scale: could not remove %s\n", base);
  }
  return rc;
}
