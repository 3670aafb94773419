/* What every step of the coordination protocol uses (loader/coord.c,
 * coord_root.c, coord_transfer.c): the timed collective, which aborts the
 * communicator when it fails; the run's timeline at info level; the count of
 * a map's set slots; and the error a rank returns when the exchange says some
 * rank failed. */
#include <stdarg.h> /* the timeline's va_list */
#include <stdio.h>  /* snprintf, vsnprintf */

#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "loader/coord_internal.h"

void kiln_coord_timeline(coord_run *r, const char *fmt, ...) {
  char line[512];
  va_list ap;
  if (!kiln_log_enabled(KILN_LOG_INFO)) return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  kiln_log(KILN_LOG_INFO, "coord rank %d/%d +%.3f s: %s", r->c->rank, r->c->size,
           (kiln_clock_ms() - r->t0) / 1e3, line);
}

/* One collective, timed; a failure aborts the communicator. */
kiln_status kiln_coord_collective(coord_run *r, int bcast, void *buf, size_t n, const char *what) {
  const kiln_comm *c = r->c;
  double t = kiln_clock_ms(), dt;
  double limit = r->peer && r->p.peer_timeout_s > 0 ? r->p.peer_timeout_s : r->p.timeout_s;
  kiln_status st;
  if (r->aborted) return kiln_fail(KILN_EPEER, "coordination: the communicator was aborted");
  st = bcast ? c->broadcast(c->self, buf, n, 0, limit) : c->max_reduce(c->self, buf, n, limit);
  dt = kiln_clock_ms() - t;
  r->rep->collectives++;
  if (dt > r->rep->longest_wait_ms) {
    r->rep->longest_wait_ms = dt;
    snprintf(r->rep->longest_what, sizeof r->rep->longest_what, "%s", what);
  }
  if (st != KILN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    r->aborted = 1;
    if (c->abort) c->abort(c->self, why);
    return kiln_fail(KILN_EPEER,
                     "coordination (rank %d of %d, %s transport): %s did not complete: %s", c->rank,
                     c->size, c->name, what, why);
  }
  return KILN_OK;
}

size_t kiln_coord_count_set(const uint8_t *map) {
  size_t n = 0;
  for (size_t i = 0; i < COORD_MAP_BYTES; i++)
    n += map[i] != 0;
  return n;
}

/* A rank that failed on its own returns its error; the others a peer error. */
kiln_status kiln_coord_someone_failed(coord_run *r, kiln_status mine, const char *err,
                                      const char *when) {
  if (mine != KILN_OK) return kiln_fail(mine, "%s", err);
  return kiln_fail(KILN_EPEER,
                   "coordination: another rank failed %s (its own log says why); "
                   "rank %d of %d stops too",
                   when, r->c->rank, r->c->size);
}
