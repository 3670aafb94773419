/* Internal: a fixed-size thread pool running independent tasks. */
#ifndef KILN_COMMON_POOL_H
#define KILN_COMMON_POOL_H

#include <stddef.h>

#include "kiln/status.h"

typedef void (*kiln_task_fn)(size_t index, void *user);

/* Runs fn(i, user) for i in [0, n) on up to threads threads (<= 0: the
 * CPUs this process may run on) and returns when all are done. Tasks are taken in index order. */
kiln_status kiln_pool_run(size_t n, int threads, kiln_task_fn fn, void *user);
/* Number of CPUs this process may run on (its affinity mask; at least 1). */
int kiln_cpu_count(void);
/* Number of online CPUs of the machine (at least 1). */
int kiln_cpu_online(void);

#endif
