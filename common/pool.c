/* A thread pool for independent tasks: workers take the next index. */
#include "common/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/error.h"

typedef struct pool {
  pthread_mutex_t lock;
  size_t next, n;
  kiln_task_fn fn;
  void *user;
} pool;

/* The CPUs this process may run on: under mpirun or Slurm a rank is often
 * bound to one core, and more compile threads than that only time-slice. */
int kiln_cpu_count(void) {
  cpu_set_t set;
  long c;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  c = sysconf(_SC_NPROCESSORS_ONLN);
  return c < 1 ? 1 : (int)c;
}

int kiln_cpu_online(void) {
  long c = sysconf(_SC_NPROCESSORS_ONLN);
  return c < 1 ? 1 : (int)c;
}

static void *worker(void *arg) {
  pool *p = arg;
  for (;;) {
    size_t i;
    pthread_mutex_lock(&p->lock);
    i = p->next++;
    pthread_mutex_unlock(&p->lock);
    if (i >= p->n) break;
    p->fn(i, p->user);
  }
  return NULL;
}

kiln_status kiln_pool_run(size_t n, int threads, kiln_task_fn fn, void *user) {
  pool p = {.next = 0, .n = n, .fn = fn, .user = user};
  pthread_t *tids;
  size_t started = 0, want;
  if (threads <= 0) threads = kiln_cpu_count();
  want = (size_t)threads < n ? (size_t)threads : n;
  if (want <= 1) {
    for (size_t i = 0; i < n; i++)
      fn(i, user);
    return KILN_OK;
  }
  tids = calloc(want, sizeof *tids);
  if (!tids) return kiln_fail(KILN_ENOMEM, "thread pool: out of memory");
  pthread_mutex_init(&p.lock, NULL);
  for (; started < want; started++)
    if (pthread_create(&tids[started], NULL, worker, &p) != 0) break;
  if (started == 0) worker(&p); /* could not start any thread: run inline */
  for (size_t i = 0; i < started; i++)
    pthread_join(tids[i], NULL);
  pthread_mutex_destroy(&p.lock);
  free(tids);
  return KILN_OK;
}
