/* Internal: time and host identity, one definition each.
 *
 * Deadlines, heartbeats and durations use the monotonic clock (never the wall
 * clock, which NTP may step); host names label leases, pins and temp files. */
#ifndef KILN_COMMON_CLOCK_H
#define KILN_COMMON_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Milliseconds on CLOCK_MONOTONIC (an arbitrary origin): for durations and
 * deadlines only. */
double kiln_clock_ms(void);
/* Milliseconds since the epoch (CLOCK_REALTIME): for times other hosts read,
 * such as a lease's heartbeat in a shared index. */
int64_t kiln_wall_ms(void);
/* CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID). */
double kiln_thread_cpu_s(void);
/* This host's name (gethostname), or "unknown"; always NUL-terminated. */
void kiln_host_name(char *out, size_t cap);

#endif
