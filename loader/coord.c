/* The coordination protocol (DESIGN.md, "Coordination protocol"; the frames
 * and failure rules are in docs/coordination.md):
 *   1. every rank checks its slots locally; one max-reduce gives the union of
 *      misses, the configuration fingerprint (min == max) and, when nobody
 *      misses anything, the artifact fingerprint: a warm job is done here;
 *   2. the root builds the union on a thread pool while its main thread
 *      broadcasts a status frame every heartbeat; the others wait for frames,
 *      each wait bounded by the timeout (a silent root is KILN_EPEER);
 *   3. READY: every rank checks again (a shared directory already has the
 *      artifacts); one max-reduce gives what is still needed, and the root
 *      sends those in bounded chunks; receivers verify and insert them;
 *   4. one max-reduce of the artifact fingerprint: min != max is KILN_EMISMATCH.
 * Every rank returns the same status.
 *
 * This file holds the run (steps 1 and 4); step 2 is loader/coord_root.c,
 * step 3 loader/coord_transfer.c, and what every step uses (the timed
 * collective, the timeline) loader/coord_collective.c. Calls go one way:
 * coord.c -> coord_root.c, coord_transfer.c -> coord_collective.c. */
#include <pthread.h> /* the spare buffer's lock */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* calloc, malloc, free */
#include <string.h>  /* memcpy, memcmp, memset, strlen, strstr */

#include "common/clock.h"
#include "common/error.h"
#include "common/params.h"
#include "kiln/kernels.h"
#include "loader/coord_internal.h"

static void put_fp(uint8_t *at, const uint8_t fp[COORD_FP_BYTES]) {
  for (int i = 0; i < COORD_FP_BYTES; i++) {
    at[i] = fp[i];
    at[COORD_FP_BYTES + i] = (uint8_t)~fp[i];
  }
}

/* After a max-reduce of (x, ~x): every rank had the same x. */
static int fp_agrees(const uint8_t *at) {
  for (int i = 0; i < COORD_FP_BYTES; i++)
    if ((at[i] ^ at[COORD_FP_BYTES + i]) != 0xff) return 0;
  return 1;
}

/* On a disagreement (a byte-wise max is no rank's value): rank 0's value is
 * broadcast, then a max-reduce of a byte per rank says who differs from it. */
static kiln_status disagree(coord_run *r, const uint8_t mine[COORD_FP_BYTES], const char *what) {
  int size = r->c->size, n_odd = 0;
  uint8_t *flags = calloc((size_t)size, 1), root[COORD_FP_BYTES];
  char odd[256] = "";
  kiln_status rc;
  if (!flags) return kiln_fail(KILN_ENOMEM, "out of memory");
  memcpy(root, mine, sizeof root);
  KILN_CHECK(kiln_coord_collective(r, 1, root, sizeof root, "rank 0's fingerprint"));
  flags[r->c->rank] = memcmp(mine, root, COORD_FP_BYTES) != 0;
  KILN_CHECK(kiln_coord_collective(r, 0, flags, (size_t)size, "naming the ranks that differ"));
  for (int i = 0; i < size; i++) {
    size_t len = strlen(odd);
    if (!flags[i]) continue;
    n_odd++;
    if (len + 16 < sizeof odd)
      snprintf(odd + len, sizeof odd - len, "%s%d", len ? "," : "", i);
    else if (!strstr(odd, "..."))
      snprintf(odd + len, sizeof odd - len, ",...");
  }
  rc = kiln_fail(KILN_EMISMATCH,
                 "coordination: ranks disagree on %s: rank%s %s differ%s from rank 0; refusing "
                 "to run (ranks would run different code)",
                 what, n_odd == 1 ? "" : "s", odd, n_odd == 1 ? "s" : "");
out:
  free(flags);
  return rc;
}

/* ---- step 1: the exchange ---- */

/* Fills buf (COORD_HDR + map) for this rank. The rank's own error, if any, is kept
 * in *local_rc (the exchange still happens: the others must not hang). */
static void fill_exchange(coord_run *r, kiln_status setup, uint8_t *buf, kiln_status *local_rc,
                          char *err, size_t cap) {
  size_t slots = 0;
  kiln_status st = setup;
  if (st == KILN_OK) st = kiln_coord_config_fp(r->cfg);
  if (st == KILN_OK) st = r->h->local(r->h->user, buf + COORD_HDR, &slots, NULL);
  r->rep->slots = slots;
  if (st == KILN_OK && kiln_coord_count_set(buf + COORD_HDR) == 0)
    st = r->h->fingerprint(r->h->user, r->fp);
  put_fp(buf + COORD_OFF_CFG, r->cfg);
  put_fp(buf + COORD_OFF_FP, r->fp);
  *local_rc = st;
  if (st != KILN_OK) {
    snprintf(err, cap, "%s", kiln_last_error());
    buf[COORD_OFF_FAILED] = 1;
    memset(buf + COORD_HDR, 0, COORD_MAP_BYTES);
  }
}

/* ---- steps 2 and 3: loader/coord_root.c, loader/coord_transfer.c ---- */

/* ---- step 4: every rank holds the same artifacts ---- */

static kiln_status final_check(coord_run *r, kiln_status local_rc, const char *err_in) {
  uint8_t buf[COORD_HDR], fp[COORD_FP_BYTES];
  char err[4096];
  size_t slots = 0;
  kiln_status rc = local_rc;
  uint8_t *need = calloc(1, COORD_MAP_BYTES);
  snprintf(err, sizeof err, "%s", err_in);
  memset(buf, 0, sizeof buf);
  memset(fp, 0, sizeof fp);
  if (rc == KILN_OK && !need) rc = kiln_fail(KILN_ENOMEM, "coordination: out of memory");
  if (rc == KILN_OK && (rc = r->h->local(r->h->user, need, &slots, r->uni)) == KILN_OK &&
      kiln_coord_count_set(need) != 0)
    rc = kiln_fail(KILN_EINTERNAL,
                   "coordination: rank %d still lacks %zu artifact(s) after the "
                   "transfers",
                   r->c->rank, kiln_coord_count_set(need));
  if (rc == KILN_OK) rc = r->h->fingerprint(r->h->user, fp);
  if (rc != KILN_OK) {
    if (!err_in[0]) snprintf(err, sizeof err, "%s", kiln_last_error());
    buf[COORD_OFF_FAILED] = 1;
  }
  free(need);
  put_fp(buf + COORD_OFF_FP, fp);
  r->peer = 0; /* each rank loaded what it got first: the builder timeout */
  KILN_CHECK(kiln_coord_collective(r, 0, buf, sizeof buf, "fingerprint of the artifacts"));
  if (buf[COORD_OFF_FAILED]) {
    rc = kiln_coord_someone_failed(r, rc, err, "storing or loading the artifacts");
    goto out;
  }
  if (!fp_agrees(buf + COORD_OFF_FP)) {
    rc = disagree(r, fp, "the artifacts they hold (their fingerprints differ)");
    goto out;
  }
  kiln_fp_hex(fp, r->rep->fingerprint);
  rc = KILN_OK;
out:
  return rc;
}

static kiln_status resolve_timeout(double *timeout_s) {
  return kiln_option_seconds(timeout_s, *timeout_s, KILN_P_build_timeout_s, "timeout_s");
}

/* For a rank that is already failing: a bad KILN_BUILD_TIMEOUT (or timeout_s)
 * must not keep it from telling the others; the getter gives the default. */
static double timeout_or_default(double timeout_s) {
  double dflt;
  if (resolve_timeout(&timeout_s) == KILN_OK) return timeout_s;
  kiln_param_build_timeout_s(&dflt);
  return dflt;
}

kiln_status kiln_coord_run(const coord_params *p, const coord_hooks *h, kiln_status setup,
                           kiln_coord_report *rep) {
  static uint8_t spare[COORD_HDR + COORD_MAP_BYTES]; /* see below */
  static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
  coord_run r;
  uint8_t *buf = calloc(1, COORD_HDR + COORD_MAP_BYTES), *uni = NULL;
  kiln_status rc, local_rc = KILN_OK;
  char err[4096] = "";
  int spared = 0;
  memset(&r, 0, sizeof r);
  r.p = *p;
  r.h = h;
  r.c = p->comm;
  r.rep = rep;
  r.t0 = kiln_clock_ms();
  memset(rep, 0, sizeof *rep);
  rep->rank = p->comm->rank;
  rep->size = p->comm->size;
  if (!buf) { /* still join the exchange, as failed, through a shared spare buffer */
    pthread_mutex_lock(&spare_lock);
    spared = 1;
    buf = spare;
    memset(buf, 0, sizeof spare);
    if (setup == KILN_OK) setup = kiln_fail(KILN_ENOMEM, "coordination: out of memory");
  }
  fill_exchange(&r, setup, buf, &local_rc, err, sizeof err);
  /* after fill_exchange took this rank's error: resolving may set another */
  if (!(r.p.timeout_s > 0)) r.p.timeout_s = timeout_or_default(r.p.timeout_s); /* failed setup */
  kiln_coord_timeline(&r, "%zu slot%s, %zu missing here%s", rep->slots, rep->slots == 1 ? "" : "s",
                      kiln_coord_count_set(buf + COORD_HDR),
                      local_rc != KILN_OK ? " (failed locally)" : "");
  KILN_CHECK(kiln_coord_collective(&r, 0, buf, COORD_HDR + COORD_MAP_BYTES, "union of misses"));
  if (buf[COORD_OFF_FAILED]) {
    rc = kiln_coord_someone_failed(&r, local_rc, err, "before the exchange");
    goto out;
  }
  if (!fp_agrees(buf + COORD_OFF_CFG)) {
    rc = disagree(&r, r.cfg,
                  "the build configuration (kiln version, KILN_NVRTC_OPTIONS, kernel sources)");
    goto out;
  }
  rep->missing = kiln_coord_count_set(buf + COORD_HDR);
  kiln_coord_timeline(&r, "union of misses: %zu (unit, target) pair%s", rep->missing,
                      rep->missing == 1 ? "" : "s");
  if (rep->missing == 0) { /* warm: this one collective was the whole protocol */
    if (!fp_agrees(buf + COORD_OFF_FP)) {
      rc = disagree(&r, r.fp, "the artifacts they hold (their fingerprints differ)");
      goto out;
    }
    kiln_fp_hex(buf + COORD_OFF_FP, rep->fingerprint);
    rc = KILN_OK;
    goto out;
  }
  if (!(uni = malloc(COORD_MAP_BYTES))) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  memcpy(uni, buf + COORD_HDR, COORD_MAP_BYTES);
  r.uni = uni;
  KILN_CHECK(p->comm->rank == 0 ? kiln_coord_root_build(&r, uni, rep->missing)
                                : kiln_coord_await_root(&r));
  KILN_CHECK(kiln_coord_distribute(&r, buf, &local_rc, err, sizeof err));
  rc = final_check(&r, local_rc, local_rc != KILN_OK ? err : "");
out:
  rep->total_ms = kiln_clock_ms() - r.t0;
  if (rc == KILN_OK)
    kiln_coord_timeline(
        &r, "ready: %zu collectives, longest wait %.1f ms (%s), %zu received (%llu bytes)",
        rep->collectives, rep->longest_wait_ms, rep->longest_what, rep->received,
        (unsigned long long)rep->bytes_received);
  else
    kiln_coord_timeline(&r, "failed (%s): longest collective wait %.1f ms (%s)",
                        kiln_status_str(rc), rep->longest_wait_ms, rep->longest_what);
  free(uni);
  if (spared)
    pthread_mutex_unlock(&spare_lock);
  else
    free(buf);
  return rc;
}

/* ---- parameters and communicators ---- */

kiln_status kiln_coord_defaults(coord_params *p) {
  kiln_status rc = KILN_OK;
  KILN_CHECK(kiln_option_ms_as_seconds(&p->heartbeat_s, p->heartbeat_s, KILN_P_heartbeat_ms,
                                       "heartbeat_s"));
  KILN_CHECK(kiln_option_seconds(&p->timeout_s, p->timeout_s, KILN_P_build_timeout_s, "timeout_s"));
  KILN_CHECK(kiln_option_int(&p->jobs, p->jobs, KILN_P_jobs, "jobs"));
  KILN_CHECK(kiln_option_int(&p->offline, p->offline, KILN_P_offline, "offline"));
  if (p->heartbeat_s * 2 > p->timeout_s) {
    rc = kiln_fail(KILN_EINVAL,
                   "coordination: the heartbeat (%.0f ms) must be at most half the builder "
                   "timeout (%.1f s), or waiting ranks would give up on a healthy root",
                   p->heartbeat_s * 1e3, p->timeout_s);
    goto out;
  }
  if (p->peer_timeout_s == KILN_ENV && !kiln_param_raw(KILN_P_peer_timeout_s)) {
    p->peer_timeout_s = 20 * p->heartbeat_s > 10 ? 20 * p->heartbeat_s : 10;
  } else {
    KILN_CHECK(kiln_option_seconds(&p->peer_timeout_s, p->peer_timeout_s, KILN_P_peer_timeout_s,
                                   "peer_timeout_s"));
    if (p->heartbeat_s * 2 > p->peer_timeout_s) {
      rc = kiln_fail(KILN_EINVAL,
                     "coordination: the peer timeout (%g s: --peer-timeout, KILN_PEER_TIMEOUT) "
                     "must be at least two heartbeats (%.0f ms), or waiting ranks would give up "
                     "on a healthy root",
                     p->peer_timeout_s, p->heartbeat_s * 1e3);
      goto out;
    }
  }
  if (p->peer_timeout_s > p->timeout_s) p->peer_timeout_s = p->timeout_s;
out:
  return rc;
}

kiln_status kiln_comm_check(const kiln_comm *c) {
  if (!c) return kiln_fail(KILN_EINVAL, "coordination: comm is NULL");
  if (c->version != KILN_COMM_VERSION)
    return kiln_fail(KILN_EINVAL, "kiln_comm: unknown version %d (this libkiln knows %d)",
                     c->version, KILN_COMM_VERSION);
  if (!c->broadcast || !c->max_reduce)
    return kiln_fail(KILN_EINVAL, "kiln_comm: broadcast and max_reduce are required");
  if (c->size < 1 || c->rank < 0 || c->rank >= c->size)
    return kiln_fail(KILN_EINVAL, "kiln_comm: rank %d of size %d", c->rank, c->size);
  if (kiln_unit_count() > COORD_MAP_UNITS)
    return kiln_fail(KILN_EINTERNAL, "coordination: more than %d units", COORD_MAP_UNITS);
  return KILN_OK;
}

kiln_status kiln_coord_fail(const kiln_comm *comm, double timeout_s) {
  kiln_coord_report rep;
  coord_params p;
  coord_run r;
  uint8_t *buf = NULL;
  kiln_status rc;
  KILN_CHECK(kiln_comm_check(comm));
  memset(&p, 0, sizeof p);
  memset(&rep, 0, sizeof rep);
  p.comm = comm;
  p.timeout_s = timeout_or_default(timeout_s);
  memset(&r, 0, sizeof r);
  r.p = p;
  r.c = comm;
  r.rep = &rep;
  r.t0 = kiln_clock_ms();
  if (!(buf = calloc(1, COORD_HDR + COORD_MAP_BYTES))) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  buf[COORD_OFF_FAILED] = 1;
  rc = kiln_coord_collective(&r, 0, buf, COORD_HDR + COORD_MAP_BYTES, "union of misses");
out:
  free(buf);
  return rc;
}

kiln_status kiln_coord_any(int *flag, const kiln_comm *comm, double timeout_s) {
  uint8_t v;
  kiln_status rc;
  if (!flag) return kiln_fail(KILN_EINVAL, "kiln_coord_any: flag is NULL");
  KILN_CHECK(kiln_comm_check(comm));
  KILN_CHECK(resolve_timeout(&timeout_s));
  v = *flag != 0;
  if ((rc = comm->max_reduce(comm->self, &v, 1, timeout_s)) != KILN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    if (comm->abort) comm->abort(comm->self, why);
    rc = kiln_fail(KILN_EPEER, "coordination: a one-byte max-reduce did not complete: %s", why);
    goto out;
  }
  *flag = v;
out:
  return rc;
}
