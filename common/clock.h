/* Internal: time and host identity, one definition each.
 *
 * Deadlines, heartbeats and durations use the monotonic clock (never the wall
 * clock, which NTP may step); host names label leases, pins and temp files. */
#ifndef KILN_COMMON_CLOCK_H
#define KILN_COMMON_CLOCK_H

#include <pthread.h> /* the hook's wait takes a condition and its lock */
#include <stddef.h>
#include <stdint.h>

/* Milliseconds on CLOCK_MONOTONIC (an arbitrary origin): for durations and
 * deadlines only. With a hook set (below), what the hook's now_ms says. */
double kiln_clock_ms(void);

/* A stand-in for time, for test and bench code only (tests/sim/: thousands
 * of ranks in one process, in virtual time). now_ms replaces
 * kiln_clock_ms() on every thread; wait replaces the one timed wait of the
 * coordination protocol (the root's pause between status frames,
 * loader/coord_root.c): called with lock held, it returns, lock held, once
 * *done is set (signalled on cond) or the hook's clock reached until_ms.
 * build_held, when not NULL, says the root's build still runs (1) whatever
 * its threads did: the build lasts what the hook says in virtual time. Only
 * kiln_clock_ms and loader/coord_root.c consult the hook; the library never
 * sets one. */
typedef struct kiln_clock_hook {
  double (*now_ms)(void *user);
  void (*wait)(void *user, pthread_cond_t *cond, pthread_mutex_t *lock, const int *done,
               double until_ms);
  int (*build_held)(void *user);
  void *user;
} kiln_clock_hook;

/* Sets (NULL: clears) the hook; call it before any thread that reads the
 * clock starts, and clear it after they ended. */
void kiln_clock_set_hook(const kiln_clock_hook *hook);
/* The hook set, or NULL. */
const kiln_clock_hook *kiln_clock_hook_get(void);
/* Milliseconds since the epoch (CLOCK_REALTIME): for times other hosts read,
 * such as a lease's heartbeat in a shared index. */
int64_t kiln_wall_ms(void);
/* CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID). */
double kiln_thread_cpu_s(void);
/* This host's name (gethostname), or "unknown"; always NUL-terminated. */
void kiln_host_name(char *out, size_t cap);

#endif
