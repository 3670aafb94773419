/* The single-process communicator: every collective is a no-op. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kiln/comm.h"

static kiln_status single_broadcast(void *self, void *buf, size_t bytes, int root, double t) {
  (void)self, (void)buf, (void)bytes, (void)t;
  if (root != 0) return kiln_fail(KILN_EINVAL, "single-process comm: root %d is not rank 0", root);
  return KILN_OK;
}

static kiln_status single_max_reduce(void *self, void *buf, size_t bytes, double t) {
  (void)self, (void)buf, (void)bytes, (void)t;
  return KILN_OK;
}

kiln_status kiln_comm_single(kiln_comm **out) {
  kiln_comm *c;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_comm_single: out is NULL");
  if (!(c = calloc(1, sizeof *c))) return kiln_fail(KILN_ENOMEM, "out of memory");
  c->version = KILN_COMM_VERSION;
  c->rank = 0;
  c->size = 1;
  c->broadcast = single_broadcast;
  c->max_reduce = single_max_reduce;
  snprintf(c->name, sizeof c->name, "single");
  *out = c;
  return KILN_OK;
}
