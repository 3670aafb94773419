/* The remote's breaker (cache/remote/remote.h): a run of failed requests
 * turns the remote off for the process, whatever its backend, so a dead
 * server or a hung mount costs a job a few failed requests, not one per
 * kernel. Also the requests' small helpers every backend shares. */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* free */

#include "cache/remote/remote.h"
#include "common/error.h"
#include "common/logging.h"

void kiln_breaker_init(kiln_breaker *b, int threshold, const char *name) {
  pthread_mutex_init(&b->mu, NULL);
  b->threshold = threshold;
  b->consecutive = b->open = b->trips = 0;
  snprintf(b->name, sizeof b->name, "%s", name ? name : "");
}

void kiln_breaker_destroy(kiln_breaker *b) {
  pthread_mutex_destroy(&b->mu);
}

void kiln_breaker_note(kiln_breaker *b, const kiln_remote_req *r) {
  /* A 409 is an answer about one path (a WebDAV collection that is missing:
   * upload.c makes it), not a sign the remote is down. */
  int failed = (r->rc == KILN_EREMOTE && r->status != 409) || r->rc == KILN_ETIMEDOUT;
  int opened = 0, count = 0;
  pthread_mutex_lock(&b->mu);
  if (r->rc == KILN_OK || r->rc == KILN_ENOTFOUND)
    b->consecutive = 0;
  else if (failed)
    b->consecutive++;
  if (failed && !b->open && b->threshold > 0 && b->consecutive >= b->threshold) {
    b->open = 1;
    b->trips = 1;
    opened = 1;
    count = b->consecutive;
  }
  pthread_mutex_unlock(&b->mu);
  if (opened)
    kiln_log(KILN_LOG_WARN,
             "remote cache %s turned off for this process after %d failed requests: %s", b->name,
             count, r->error);
}

int kiln_breaker_is_open(kiln_breaker *b) {
  int v;
  pthread_mutex_lock(&b->mu);
  v = b->open;
  pthread_mutex_unlock(&b->mu);
  return v;
}

int kiln_breaker_trips(kiln_breaker *b) {
  int v;
  pthread_mutex_lock(&b->mu);
  v = b->trips;
  pthread_mutex_unlock(&b->mu);
  return v;
}

const char *kiln_remote_method_name(kiln_remote_method m) {
  return m == KILN_REMOTE_HEAD     ? "HEAD"
         : m == KILN_REMOTE_PUT    ? "PUT"
         : m == KILN_REMOTE_MKCOL  ? "MKCOL"
         : m == KILN_REMOTE_DELETE ? "DELETE"
                                   : "GET";
}

kiln_status kiln_breaker_fail_all(kiln_remote_req *reqs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    reqs[i].rc = KILN_EREMOTE;
    snprintf(reqs[i].error, sizeof reqs[i].error, "%s %s: remote cache turned off (breaker open)",
             kiln_remote_method_name(reqs[i].method), reqs[i].path);
  }
  return kiln_fail(KILN_EREMOTE, "remote cache turned off (breaker open)");
}

void kiln_remote_then_failed(kiln_remote_req *reqs, size_t n, kiln_remote_then then, void *user) {
  for (size_t i = 0; then && i < n; i++) {
    kiln_remote_req *q = then(user, i);
    if (!q) continue;
    kiln_remote_reqs_clear(q, 1);
    q->rc = reqs[i].rc == KILN_OK ? KILN_EREMOTE : reqs[i].rc;
    snprintf(q->error, sizeof q->error, "%s %.100s: not sent (%.120s)",
             kiln_remote_method_name(q->method), q->path, reqs[i].error);
    then(user, n + i);
  }
}

void kiln_remote_reqs_clear(kiln_remote_req *reqs, size_t n) {
  for (size_t i = 0; reqs && i < n; i++) {
    reqs[i].status = 0;
    reqs[i].rc = KILN_OK;
    reqs[i].data = NULL;
    reqs[i].len = 0;
    reqs[i].bytes_down = reqs[i].bytes_up = 0;
    reqs[i].attempts = 0;
    reqs[i].error[0] = 0;
    reqs[i].sign_gen = 0;
    reqs[i].renewals = 0;
  }
}

void kiln_remote_reqs_reset(kiln_remote_req *reqs, size_t n) {
  for (size_t i = 0; reqs && i < n; i++)
    free(reqs[i].data);
  kiln_remote_reqs_clear(reqs, n);
}
