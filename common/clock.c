/* Internal: time and host identity (common/clock.h). */
#include "common/clock.h"

#include <stdio.h>  /* snprintf */
#include <time.h>   /* clock_gettime */
#include <unistd.h> /* gethostname */

static const kiln_clock_hook *hook; /* set before the threads that read it start */

void kiln_clock_set_hook(const kiln_clock_hook *h) {
  hook = h;
}

const kiln_clock_hook *kiln_clock_hook_get(void) {
  return hook;
}

double kiln_clock_ms(void) {
  struct timespec ts;
  if (hook) return hook->now_ms(hook->user);
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int64_t kiln_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double kiln_thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

void kiln_host_name(char *out, size_t cap) {
  if (!cap) return;
  if (gethostname(out, cap) != 0) snprintf(out, cap, "unknown");
  out[cap - 1] = '\0';
}
