/* Internal: the coordination protocol (loader/coord.c, with its steps 2 and 3
 * in loader/coord_root.c and loader/coord_transfer.c, and what every step
 * uses in loader/coord_collective.c), its wire format
 * (loader/coord_wire.c) and the two users of it: the cache-only fill
 * (loader/coord_fill.c) and the loader's warmup (loader/coord_warmup.c).
 * docs/coordination.md describes the protocol. */
#ifndef KILN_LOADER_COORD_INTERNAL_H
#define KILN_LOADER_COORD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/comm.h"

/* The map of (unit, target) slots: one byte each, fixed size so that ranks of
 * different kiln builds still exchange the same number of bytes in the first
 * collective (and then find out, by the configuration fingerprint, that they
 * differ). Slot = unit index (registry order) * targets + target code. */
#define COORD_MAP_UNITS 64
#define COORD_MAP_TARGETS 256
#define COORD_MAP_BYTES (COORD_MAP_UNITS * COORD_MAP_TARGETS)
#define COORD_FP_BYTES 32

/* The target's code in the map: kind * 85 + arch - 50 (CUBIN, PTX, sm_XYa),
 * arch in [50, 135); -1 outside. */
int kiln_coord_target_code(const kiln_target *t);
void kiln_coord_target_decode(int code, kiln_target *out);

/* SHA-256 of what must agree before ranks can share artifacts: the wire
 * version, kiln's version, the compile options and every unit's sources. */
kiln_status kiln_coord_config_fp(uint8_t out[COORD_FP_BYTES]);

/* Fingerprint of an artifact set: SHA-256 over "unit \0 target \0 digest \0"
 * lines in the order given (callers give slot order). */
typedef struct kiln_fp_builder kiln_fp_builder;
kiln_status kiln_fp_begin(kiln_fp_builder **out);
kiln_status kiln_fp_add(kiln_fp_builder *b, const char *unit, const char *target,
                        const char *digest);
/* Writes the 32 bytes and frees b (also on failure). With rc != KILN_OK
 * (building it failed) it only frees b and returns rc. */
kiln_status kiln_fp_end(kiln_fp_builder *b, kiln_status rc, uint8_t out[COORD_FP_BYTES]);

/* 64 hex digits of a fingerprint. */
void kiln_fp_hex(const uint8_t fp[COORD_FP_BYTES], char out[65]);

/* The record (blob verified) a cache holds for (unit, target) built with
 * today's sources and options; KILN_ENOTFOUND when none. */
kiln_status kiln_coord_find(kiln_cache *cache, const kiln_unit_info *unit, const char *target,
                            kiln_record *out);

/* ---- frames ---- */

typedef enum coord_state { COORD_BUILDING = 1, COORD_READY = 2, COORD_FAILED = 3 } coord_state;

/* A status frame, broadcast by the root every heartbeat. */
#define COORD_FRAME_BYTES 4096
typedef struct coord_frame {
  uint32_t state, seq, done, total;
  int32_t status; /* kiln_status when FAILED */
  int64_t pid;
  double elapsed_s; /* since the root started */
  char host[64];
  char unit[64]; /* the last item settled */
  char target[16];
  char message[3800]; /* FAILED: the error and the build log's tail */
} coord_frame;

void kiln_frame_encode(const coord_frame *f, uint8_t out[COORD_FRAME_BYTES]);
/* KILN_ECORRUPT when the bytes are not a frame. */
kiln_status kiln_frame_decode(coord_frame *f, const uint8_t in[COORD_FRAME_BYTES]);

/* An artifact's header, followed by size + log_size payload bytes. */
#define COORD_HEADER_BYTES 1024
typedef struct coord_header {
  int32_t status;  /* KILN_OK, or why the root cannot send it (message) */
  kiln_record rec; /* key, unit, target, kind, digest, size, toolchain, options, resources */
  uint64_t log_size;
  char message[256];
} coord_header;

void kiln_header_encode(const coord_header *h, uint8_t out[COORD_HEADER_BYTES]);
kiln_status kiln_header_decode(coord_header *h, const uint8_t in[COORD_HEADER_BYTES]);

/* ---- the protocol ---- */

/* What a caller brings: how to check its slots locally and what it holds. */
typedef struct coord_hooks {
  void *user;
  /* Marks need[slot] = 1 for every slot this rank lacks (loading what it
   * has, in the loader's case). Called at the start (built NULL), after the
   * root is ready and after the transfers (built: the union the root built,
   * so a rank holding only a stand-in for one of those slots, e.g. PTX, can
   * ask for the exact artifact the others will load). */
  kiln_status (*local)(void *user, uint8_t need[COORD_MAP_BYTES], size_t *n_slots,
                       const uint8_t *built);
  /* The fingerprint of the artifacts this rank holds for its slots. */
  kiln_status (*fingerprint)(void *user, uint8_t out[COORD_FP_BYTES]);
} coord_hooks;

typedef struct coord_params {
  kiln_cache *cache;
  const kiln_comm *comm;
  const char *kernels; /* for the log only */
  double heartbeat_s, timeout_s;
  /* once the protocol is under way, the longest wait for the root's next
   * status frame or artifact (<= timeout_s; docs/coordination.md) */
  double peer_timeout_s;
  int jobs, offline;
  kiln_coord_progress_fn progress; /* or NULL */
  void *user;
} coord_params;

/* Runs the protocol; the same status on every rank (see comm.h). setup is
 * the caller's own preparation: when it failed, this rank joins the first
 * exchange as failed (the others stop at once) and returns it. */
kiln_status kiln_coord_run(const coord_params *p, const coord_hooks *h, kiln_status setup,
                           kiln_coord_report *rep);

/* Fills heartbeat, timeout, peer timeout, jobs and offline from the
 * environment where the caller left them at KILN_ENV. The peer timeout
 * (KILN_PEER_TIMEOUT; unset: 10 s or 20 heartbeats, whichever is longer)
 * must be at least two heartbeats, and is cut to the builder timeout. */
kiln_status kiln_coord_defaults(coord_params *p);

/* Checks a communicator a caller passed in. */
kiln_status kiln_comm_check(const kiln_comm *comm);

/* ---- inside a run: shared by loader/coord.c (the run, steps 1 and 4),
 * loader/coord_root.c (step 2), loader/coord_transfer.c (step 3) and
 * loader/coord_collective.c (what they all use) ---- */

/* The exchange buffer of the max-reduces: this header, then the map. */
#define COORD_HDR 256      /* the header's size */
#define COORD_OFF_FAILED 0 /* a rank failed locally */
#define COORD_OFF_CFG 32   /* configuration fingerprint, then its complement */
#define COORD_OFF_FP 96    /* artifact fingerprint, then its complement */

/* One rank's run of the protocol. */
typedef struct coord_run {
  coord_params p;
  const coord_hooks *h;
  const kiln_comm *c;
  kiln_coord_report *rep;
  double t0;
  int aborted;
  int peer;                    /* the next collective waits on the root: the peer timeout */
  double last_frame_ms;        /* when the last status frame arrived (kiln_clock_ms) */
  coord_frame last;            /* the last status frame seen */
  uint8_t cfg[COORD_FP_BYTES]; /* this rank's configuration fingerprint */
  uint8_t fp[COORD_FP_BYTES];  /* this rank's artifact fingerprint (when it missed nothing) */
  const uint8_t *uni;          /* the union of misses, once known */
} coord_run;

/* What every step uses (loader/coord_collective.c). */

/* A line of the run's timeline at info level: rank, size, time since the
 * start, then the text. */
void kiln_coord_timeline(coord_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One collective, timed into the report: a broadcast from rank 0 (bcast) or
 * a max-reduce of buf, bounded by the peer timeout when r->peer is set (the
 * status frames and the artifacts the root sends), else by the builder
 * timeout (the first exchange, where ranks may arrive far apart, and those
 * after each rank's own work on its cache). A failure aborts the
 * communicator and is KILN_EPEER. */
kiln_status kiln_coord_collective(coord_run *r, int bcast, void *buf, size_t n, const char *what);
/* The number of slots set in a map. */
size_t kiln_coord_count_set(const uint8_t *map);
/* After an exchange that says some rank failed: a rank that failed on its own
 * returns its error (mine, err); the others KILN_EPEER, naming the step. */
kiln_status kiln_coord_someone_failed(coord_run *r, kiln_status mine, const char *err,
                                      const char *when);

/* Step 2 (loader/coord_root.c). Rank 0 builds the union of misses (map, with
 * missing slots set) while it broadcasts status frames; the other ranks
 * receive the frames until READY or FAILED. READY is KILN_OK, FAILED the
 * build's error on every rank; a failed collective (a silent root) is
 * KILN_EPEER. */
kiln_status kiln_coord_root_build(coord_run *r, const uint8_t *map, size_t missing);
kiln_status kiln_coord_await_root(coord_run *r);

/* Step 3 (loader/coord_transfer.c). One exchange (buf: the exchange buffer)
 * of what is still needed, then the root sends each of those artifacts. A
 * rank's own failure goes to *local_rc and err (cap bytes) and the transfers
 * go on, so no rank hangs. Returns KILN_OK, KILN_EPEER for a failed
 * collective, or kiln_coord_someone_failed's error when a rank could not
 * check its cache. */
kiln_status kiln_coord_distribute(coord_run *r, uint8_t *buf, kiln_status *local_rc, char *err,
                                  size_t cap);

#endif
