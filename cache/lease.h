/* Internal: single-flight build leases in the primary index.
 *
 * One row per key being built: holder host, pid, a token unique to the
 * holder's cache handle, and a heartbeat the holder renews. A lease whose
 * heartbeat is older than the stale timeout, or whose holder pid is gone on
 * this host, is taken over. Times are wall-clock milliseconds, comparable
 * across the hosts that share a directory. */
#ifndef KILN_CACHE_LEASE_H
#define KILN_CACHE_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/cache.h"

typedef enum kiln_lease_state {
  KILN_LEASE_ACQUIRED = 0, /* this handle holds it now: build */
  KILN_LEASE_HELD = 1,     /* another live holder builds it: wait */
  KILN_LEASE_DONE = 2,     /* a record (or an unexpired failure) is there now */
} kiln_lease_state;

typedef struct kiln_lease_holder {
  char host[64];
  long pid;
  int64_t heartbeat_age_ms; /* since its last renewal */
  int64_t held_ms;          /* since it was acquired */
  int taken_over;           /* ACQUIRED by taking over a stale or dead holder's lease */
} kiln_lease_holder;

/* Tries to take the lease on key. With ignore_record (a forced rebuild) an
 * existing record does not make it DONE. holder describes the current
 * holder for HELD, the previous one when taken_over. */
kiln_status kiln_lease_try(kiln_cache *c, const char *key, const char *unit, const char *target,
                           int64_t stale_ms, int ignore_record, kiln_lease_state *state,
                           kiln_lease_holder *holder);
/* Renews the heartbeat of every lease this handle holds. */
kiln_status kiln_lease_renew(kiln_cache *c);
/* Drops this handle's lease on key (no-op if it does not hold it). */
kiln_status kiln_lease_release(kiln_cache *c, const char *key);

/* One row of the leases table, for probes (kiln doctor). Times are
 * wall-clock milliseconds. */
typedef struct kiln_lease_info {
  char key[65];
  char unit[64];
  char target[16];
  char host[64];
  long pid;
  int64_t acquired_ms;
  int64_t heartbeat_ms;
  int gone; /* its holder ran on this host and its pid no longer exists */
} kiln_lease_info;

/* 1 when a lease last renewed at heartbeat_ms is stale at now_ms: its
 * heartbeat is more than stale_ms in the past, or more than stale_ms in the
 * future (a host sharing the cache whose clock runs ahead, or a clock
 * stepped back: without this its lease would never go stale). */
int kiln_lease_heartbeat_stale(int64_t now_ms, int64_t heartbeat_ms, int64_t stale_ms);

/* Every build lease in the primary index, ordered by unit and target.
 * *out is freed with free() (NULL when there are none). */
kiln_status kiln_lease_list(kiln_lease_info **out, size_t *n, kiln_cache *c);

/* 1 when process pid (of this host) no longer exists: kill(pid, 0) fails
 * with ESRCH. This is the one proof that a holder of a lease, a pin or a
 * temp file is gone for good; a pid that exists but is not ours to signal
 * (EPERM) is alive, and pid <= 0 names no process, so it is never gone. */
int kiln_pid_gone(long pid);

/* Appends one compile run to the builds table (what `kiln cache stats`
 * counts, and what tests use to prove a target was built once). */
kiln_status kiln_builds_add(kiln_cache *c, const char *key, const char *unit, const char *target,
                            int64_t started_s, double ms, int ok);

#endif
