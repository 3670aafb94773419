/* One job of N simulated ranks (tests/sim/sim_comm.h), each a thread with a
 * small stack running the real kiln_coord_fill: rank 0 on a cache of its own
 * (with a read-only layer, where the job says so, to fetch from), every
 * other rank on one cache directory they share (opened once; a rank that
 * lacks an artifact still receives it over the communicator and stores it,
 * idempotently). The outcome sums up what every rank reported. */
#ifndef KILN_TESTS_SIM_SIM_JOB_H
#define KILN_TESTS_SIM_SIM_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"
#include "tests/sim/sim_comm.h"

typedef struct sim_job {
  sim_params sim;
  const char *root_dir;   /* rank 0's cache */
  const char *root_layer; /* a read-only layer for rank 0 (its "remote"), or NULL */
  const char *others_dir; /* the cache every other rank shares */
  const char *kernels;    /* unit glob, as kiln_coord_options.kernels */
  kiln_target target;
  double heartbeat_s, peer_timeout_s, timeout_s;
  size_t stack_kib; /* each rank thread's stack; 0: 256 */
} sim_job;

typedef struct sim_outcome {
  int n_ok, n_epeer, n_other;
  kiln_status root_status;
  char root_err[1024];
  char other_err[1024]; /* the first error of a rank other than 0 */
  int other_err_rank;
  double ready_ms;        /* the latest virtual clock at which a rank returned */
  double longest_wait_ms; /* the longest single collective, over all ranks */
  char longest_what[48];
  int longest_rank;
  size_t collectives_min, collectives_max;
  size_t compiled, received, missing;
  uint64_t bytes_received; /* by rank 1: the artifacts' payload (blob and log) */
  int fingerprints_agree;  /* over the ranks that succeeded */
  char fingerprint[65];
  double cpu_us_mean, cpu_us_max; /* real CPU per rank in the protocol (rank 0 apart) */
  double root_cpu_us;
  uint64_t bytes_max; /* sent by one rank, over the run */
  int bytes_max_rank;
  double bytes_mean;
  uint64_t root_frame_bytes; /* sent by rank 0 in status frames */
  unsigned frames;
  double freeze_ms;         /* when the frozen rank stopped (virtual) */
  double others_end_max_ms; /* the latest end of a rank other than the frozen one */
  double real_s;            /* wall time of the whole simulated job */
} sim_outcome;

/* Runs the job; KILN_OK when the simulation itself worked (look at the
 * outcome for what the ranks returned), else why not (threads, caches). */
kiln_status sim_job_run(sim_outcome *out, const sim_job *job);

#endif
