/* A simulated communicator (test and bench code, not libkiln): N ranks of the
 * real coordination protocol (loader/coord*.c) as N threads of one process,
 * in virtual time.
 *
 * Each rank thread has its own virtual clock (milliseconds), which
 * kiln_clock_ms() reads through the clock hook (common/clock.h). The clock
 * moves only in two places: a collective, which the last rank to arrive
 * carries out for all of them and which ends, on each rank, when the chosen
 * algorithm (ring, binomial tree, recursive doubling) with a per-hop latency
 * alpha and a per-byte cost beta says it would; and the root's pause between
 * status frames, which jumps to the next heartbeat. A rank's own work (its
 * cache lookups, hashing, storing) costs no virtual time; its real CPU time
 * is measured apart (sim_rank_cpu_s). So 16,000 ranks on 2 cores measure the
 * protocol, not the scheduler.
 *
 * The root's build lasts build_ms of virtual time from the end of the first
 * collective (the union of misses): its frames say BUILDING until then, and
 * the real build (a fetch or a compile on the root's build thread) must have
 * finished too before READY goes out.
 *
 * Freeze: rank freeze_rank stops taking part at its freeze_at-th collective
 * (0: the union of misses, 1: the first status frame, ...), as SIGSTOP would:
 * its thread blocks until sim_thaw. The others' collectives then time out,
 * in virtual time, at their arrival plus the limit the protocol passed. */
#ifndef KILN_TESTS_SIM_SIM_COMM_H
#define KILN_TESTS_SIM_SIM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/comm.h"

typedef enum sim_alg { SIM_RING, SIM_TREE, SIM_RD } sim_alg;

/* "ring", "tree", "rd"; -1 for another name. */
int sim_alg_parse(const char *name);
const char *sim_alg_name(sim_alg alg);

typedef struct sim_params {
  int n;
  sim_alg alg;
  double alpha_us;     /* per hop (one message) */
  double beta_ns;      /* per byte on a link */
  double build_ms;     /* the root's build, in virtual time */
  int freeze_rank;     /* -1: none */
  int freeze_at;       /* the collective (0-based, per rank) it stops at */
  double real_limit_s; /* a bound on every real wait (a bug must not hang) */
} sim_params;

typedef struct sim_world sim_world;

kiln_status sim_world_new(sim_world **out, const sim_params *p);
/* Clears the clock hook; call after every rank thread ended. */
void sim_world_free(sim_world *w);

/* Rank r's communicator (owned by the world). */
const kiln_comm *sim_comm(sim_world *w, int rank);

/* Called on a rank's thread before it runs the protocol (its clock starts
 * at 0 and kiln_clock_ms() reads it) and after (the rank leaves: the
 * collectives of the others no longer wait for it). */
void sim_rank_enter(sim_world *w, int rank);
void sim_rank_leave(sim_world *w, int rank);

/* SIGCONT for the frozen rank: its pending collective fails (the others
 * have gone), its clock set to the latest clock of the others. */
void sim_thaw(sim_world *w);

/* What rank r saw. */
typedef struct sim_rank_stats {
  double clock_ms;           /* its virtual clock when it left */
  double freeze_ms;          /* the frozen rank: the virtual time it stopped at */
  double cpu_s;              /* real CPU in the protocol, the simulation's own work taken out */
  uint64_t bytes_sent;       /* by the algorithm, over all its collectives */
  uint64_t root_frame_bytes; /* rank 0: bytes it sent in status-frame broadcasts */
  unsigned frames;           /* rank 0: status-frame broadcasts it sent */
} sim_rank_stats;

const sim_rank_stats *sim_stats(sim_world *w, int rank);

#endif
