/* One rank of bench/cluster_cold_start: brings a cold cache to "ready" with
 * one of three strategies and reports (on rank 0, one JSON line) the job's
 * time to ready, the CPU seconds spent compiling over all ranks, and the
 * longest single collective wait of any rank:
 *   kiln     kiln_coord_fill over MPI (per-rank cache directories: every
 *            artifact crosses the wire, the protocol's worst case);
 *   every    every rank compiles for itself (Triton, CuPy), per-rank dirs;
 *   barrier  rank 0 compiles into a shared directory while the others wait
 *            in MPI_Barrier (Megatron-LM's fused kernels), then all load.
 * Every strategy ends with one MPI_Barrier standing for the job's first
 * training collective; its wait counts too (it is where ranks that finished
 * early wait for the slowest one).
 * usage: cluster_rank --strategy kiln|every|barrier --root DIR [--arch LIST]
 *                     [--kernels GLOB] [--heartbeat MS] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/comm_mpi.h"
#include "kiln/kiln.h"

typedef struct result {
  double ready_s, compile_cpu_s, longest_ms;
  double compiles;
} result;

static int die(const char *what) {
  fprintf(stderr, "cluster_rank: %s: %s\n", what, kiln_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

static kiln_cache *open_cache(const char *root, const char *leaf) {
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  kiln_cache *c = NULL;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", root, leaf);
  o.dir = dir;
  if (kiln_cache_open(&c, &o) != KILN_OK) die("opening the cache");
  return c;
}

/* kiln_build of the plan into cache; adds its compiles and compile CPU. */
static void build(kiln_cache *cache, const kiln_target *t, size_t nt, const char *glob, result *r) {
  kiln_build_options o = KILN_BUILD_OPTIONS_INIT;
  kiln_build_summary *s = NULL;
  o.targets = t;
  o.n_targets = nt;
  o.kernels_glob = glob;
  if (kiln_build(&s, cache, &o) != KILN_OK || s->failed) die("kiln_build");
  r->compiles += (double)s->built;
  r->compile_cpu_s += s->compile_cpu_s;
  kiln_build_summary_free(s);
}

int main(int argc, char **argv) {
  const char *strategy = NULL, *root = NULL, *arch = "90", *glob = "scaled_*";
  int rank, size, provided;
  kiln_target *t = NULL;
  size_t nt = 0;
  result r = {0, 0, 0, 0}, job;
  double t0, w;
  char leaf[32];
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--strategy") == 0)
      strategy = argv[i + 1];
    else if (strcmp(argv[i], "--root") == 0)
      root = argv[i + 1];
    else if (strcmp(argv[i], "--arch") == 0)
      arch = argv[i + 1];
    else if (strcmp(argv[i], "--kernels") == 0)
      glob = argv[i + 1];
    else if (strcmp(argv[i], "--heartbeat") == 0)
      setenv("KILN_HEARTBEAT_MS", argv[i + 1], 1);
    else {
      fprintf(stderr, "cluster_rank: unknown option %s\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (!strategy || !root) {
    fprintf(stderr, "usage: cluster_rank --strategy kiln|every|barrier --root DIR [--arch LIST] "
                    "[--kernels GLOB] [--heartbeat MS]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (kiln_targets_parse_list(&t, &nt, arch) != KILN_OK) die("--arch");
  snprintf(leaf, sizeof leaf, "r%d", rank);
  MPI_Barrier(MPI_COMM_WORLD); /* everyone starts together */
  t0 = MPI_Wtime();
  if (strcmp(strategy, "kiln") == 0) {
    kiln_cache *cache = open_cache(root, leaf);
    kiln_comm *c = NULL;
    kiln_coord_options o = KILN_COORD_OPTIONS_INIT;
    kiln_coord_report rep;
    MPI_Comm world = MPI_COMM_WORLD;
    o.targets = t;
    o.n_targets = nt;
    o.kernels = glob;
    if (kiln_comm_mpi(&c, &world) != KILN_OK) die("kiln_comm_mpi");
    if (kiln_coord_fill(&rep, cache, &o, c) != KILN_OK) die("kiln_coord_fill");
    r.compiles = (double)rep.compiled;
    r.compile_cpu_s = rep.compile_cpu_s;
    r.longest_ms = rep.longest_wait_ms;
    kiln_comm_free(c);
    kiln_cache_close(cache);
  } else if (strcmp(strategy, "every") == 0) {
    kiln_cache *cache = open_cache(root, leaf);
    build(cache, t, nt, glob, &r);
    kiln_cache_close(cache);
  } else if (strcmp(strategy, "barrier") == 0) {
    kiln_cache *cache = open_cache(root, "shared");
    if (rank == 0) build(cache, t, nt, glob, &r);
    w = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
    r.longest_ms = (MPI_Wtime() - w) * 1e3;
    if (rank != 0) build(cache, t, nt, glob, &r); /* all hits: the others load */
    kiln_cache_close(cache);
  } else {
    fprintf(stderr, "cluster_rank: --strategy '%s': kiln, every or barrier\n", strategy);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  r.ready_s = MPI_Wtime() - t0;
  w = MPI_Wtime();
  MPI_Barrier(MPI_COMM_WORLD); /* the first training collective */
  w = (MPI_Wtime() - w) * 1e3;
  if (w > r.longest_ms) r.longest_ms = w;
  MPI_Reduce(&r.ready_s, &job.ready_s, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&r.longest_ms, &job.longest_ms, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&r.compile_cpu_s, &job.compile_cpu_s, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&r.compiles, &job.compiles, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("{\"strategy\": \"%s\", \"ranks\": %d, \"ready_s\": %.3f, \"compile_cpu_s\": %.3f, "
           "\"longest_wait_ms\": %.1f, \"compiles\": %.0f}\n",
           strategy, size, job.ready_s, job.compile_cpu_s, job.longest_ms, job.compiles);
  free(t);
  MPI_Finalize();
  return 0;
}
