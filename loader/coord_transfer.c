/* Step 3 of the coordination protocol (loader/coord.c): after READY every
 * rank says what it still needs (a shared directory may have it all: with a
 * file:// remote, which the root has uploaded to before READY, each rank
 * first fetches the union from it), the root sends each of those artifacts
 * (a header, then the bytes in bounded chunks) and the receivers verify the
 * digest and store it (idempotent). */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* malloc, free */
#include <string.h> /* memcpy, memset, strcmp, strncmp */

#include "common/digest.h"
#include "common/error.h"
#include "common/logging.h"
#include "kiln/build.h"
#include "kiln/kernels.h"
#include "kiln/remote.h"
#include "loader/coord_internal.h"

#define CHUNK ((size_t)1 << 20) /* artifact bytes per broadcast */

static void slot_names(size_t slot, const kiln_unit_info **unit, char target[16]) {
  kiln_target t;
  kiln_coord_target_decode((int)(slot % COORD_MAP_TARGETS), &t);
  *unit = kiln_unit_at(slot / COORD_MAP_TARGETS);
  kiln_target_name(&t, target);
}

/* ---- step 3: the artifacts still needed ---- */

kiln_status kiln_coord_find(kiln_cache *cache, const kiln_unit_info *unit, const char *target,
                            kiln_record *out) {
  kiln_record *recs = NULL;
  size_t n = 0;
  kiln_status rc;
  KILN_CHECK(kiln_cache_find_unit(&recs, &n, cache, unit, kiln_build_compile_options()));
  rc = kiln_fail(KILN_ENOTFOUND, "no verified record of %s for %s", unit->name, target);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(recs[i].target, target) != 0) continue;
    if (kiln_cache_get(out, NULL, NULL, cache, recs[i].key) == KILN_OK) { /* blob verified */
      rc = KILN_OK;
      break;
    }
  }
out:
  free(recs);
  return rc;
}

/* The root's header and payload (blob, then build log) for one slot. */
static void root_read(coord_run *r, size_t slot, coord_header *h, uint8_t **payload) {
  const kiln_unit_info *unit;
  char target[16];
  uint8_t *blob = NULL, *log = NULL;
  size_t size = 0, log_size = 0;
  memset(h, 0, sizeof *h);
  *payload = NULL;
  slot_names(slot, &unit, target);
  if (kiln_coord_find(r->p.cache, unit, target, &h->rec) != KILN_OK ||
      kiln_cache_get(&h->rec, &blob, &size, r->p.cache, h->rec.key) != KILN_OK) {
    h->status = KILN_ENOTFOUND;
    snprintf(h->message, sizeof h->message,
             "rank 0 cannot read %s %s from its cache after "
             "building it: %s",
             unit->name, target, kiln_last_error());
    goto out;
  }
  if (h->rec.log_digest[0] &&
      kiln_cache_read_blob(&log, &log_size, r->p.cache, h->rec.log_digest) != KILN_OK)
    log_size = 0; /* the log is a convenience, the artifact is what matters */
  *payload = malloc(size + log_size + 1);
  if (!*payload) {
    h->status = KILN_ENOMEM;
    snprintf(h->message, sizeof h->message, "rank 0: out of memory");
    goto out;
  }
  memcpy(*payload, blob, size);
  if (log_size) memcpy(*payload + size, log, log_size);
  h->log_size = log_size;
out:
  free(blob);
  free(log);
}

/* A receiver's copy: digest checked, then stored (idempotent). */
static kiln_status store(coord_run *r, size_t slot, const coord_header *h, const uint8_t *payload) {
  kiln_record rec = h->rec;
  const kiln_unit_info *unit;
  char digest[65], target[16];
  kiln_status rc;
  slot_names(slot, &unit, target);
  if (!unit || strcmp(unit->name, h->rec.unit) != 0 || strcmp(target, h->rec.target) != 0) {
    rc = kiln_fail(KILN_ECORRUPT, "coordination: the root sent %s %s for slot %s %s", h->rec.unit,
                   h->rec.target, unit ? unit->name : "?", target);
    goto out;
  }
  KILN_CHECK(kiln_sha256_hex(digest, payload, (size_t)h->rec.size));
  if (strcmp(digest, h->rec.digest) != 0) {
    rc = kiln_fail(KILN_ECORRUPT, "coordination: %s %s arrived with digest %.12s, expected %.12s",
                   h->rec.unit, h->rec.target, digest, h->rec.digest);
    goto out;
  }
  KILN_CHECK(kiln_cache_put(r->p.cache, &rec, payload, (size_t)h->rec.size,
                            h->log_size ? (const char *)payload + h->rec.size : NULL,
                            (size_t)h->log_size));
  r->rep->received++;
out:
  return rc;
}

/* Sends one slot from the root to every rank; *local_rc keeps a receiver's
 * own failure (the transfer goes on: the others must not hang). A receiver
 * short of memory takes the chunks into scratch (CHUNK bytes) and fails
 * at the end with everyone else. */
static kiln_status transfer(coord_run *r, size_t slot, int want, uint8_t *scratch,
                            kiln_status *local_rc, char *err, size_t cap) {
  uint8_t wire[COORD_HEADER_BYTES], *payload = NULL;
  coord_header h;
  char what[48];
  size_t total;
  kiln_status rc = KILN_OK;
  if (r->c->rank == 0) {
    root_read(r, slot, &h, &payload);
    kiln_header_encode(&h, wire);
  }
  snprintf(what, sizeof what, "artifact header %zu", slot);
  KILN_CHECK(kiln_coord_collective(r, 1, wire, sizeof wire, what));
  KILN_CHECK(kiln_header_decode(&h, wire));
  if (h.status != KILN_OK) {
    rc = kiln_fail((kiln_status)h.status, "coordination: %s", h.message);
    goto out;
  }
  total = (size_t)(h.rec.size + h.log_size);
  if (r->c->rank != 0 &&
      (h.rec.size > ((uint64_t)1 << 32) || h.log_size > ((uint64_t)1 << 32) ||
       !(payload = malloc(total + 1))) &&
      *local_rc == KILN_OK) {
    *local_rc = kiln_fail(KILN_ENOMEM, "coordination: no memory for %s %s (%zu bytes)", h.rec.unit,
                          h.rec.target, total);
    snprintf(err, cap, "%s", kiln_last_error());
  }
  for (size_t at = 0; at < total; at += CHUNK) {
    size_t n = total - at < CHUNK ? total - at : CHUNK;
    snprintf(what, sizeof what, "artifact bytes of slot %zu", slot);
    KILN_CHECK(kiln_coord_collective(r, 1, payload ? payload + at : scratch, n, what));
  }
  if (r->c->rank != 0) {
    r->rep->bytes_received += total;
    if (want && payload && *local_rc == KILN_OK &&
        (*local_rc = store(r, slot, &h, payload)) != KILN_OK)
      snprintf(err, cap, "%s", kiln_last_error());
  }
out:
  free(payload);
  return rc;
}

/* A rank other than the root, whose cache has a file:// remote: fetches the
 * union of misses from it (the root uploaded what it built before READY), so
 * the communicator carries bytes only to ranks that cannot read that
 * directory (not mounted there, a breaker open, a bad object). Never
 * compiles, never fails the run: what it does not get is sent by the root.
 * One kiln_build per target, offline, so the local lease still gives one
 * fetch per cache directory when ranks share one. */
static void fetch_shared(coord_run *r) {
  const char *url = kiln_cache_remote_url(r->p.cache);
  const char *names[COORD_MAP_UNITS];
  size_t got = 0;
  if (r->c->rank == 0 || !url || strncmp(url, "file://", 7) != 0 || !r->uni) return;
  for (int code = 0; code < COORD_MAP_TARGETS; code++) {
    kiln_build_options o = KILN_BUILD_OPTIONS_INIT;
    kiln_build_summary *sum = NULL;
    kiln_target t;
    size_t n = 0;
    for (size_t u = 0; u < COORD_MAP_UNITS; u++)
      if (r->uni[u * COORD_MAP_TARGETS + (size_t)code] && kiln_unit_at(u))
        names[n++] = kiln_unit_at(u)->name;
    if (!n) continue;
    kiln_coord_target_decode(code, &t);
    o.targets = &t;
    o.n_targets = 1;
    o.units = names;
    o.n_units = n;
    o.jobs = 1;
    o.offline = 1;
    o.wait_timeout_s = r->p.timeout_s;
    if (kiln_build(&sum, r->p.cache, &o) != KILN_OK) {
      kiln_log(KILN_LOG_DEBUG, "coordination: fetching from %s: %s", url, kiln_last_error());
      continue;
    }
    got += sum->fetched;
    kiln_build_summary_free(sum);
  }
  kiln_coord_timeline(r, "%zu artifact%s fetched from the shared directory %s", got,
                      got == 1 ? "" : "s", url);
}

/* After READY: what is still needed (a shared directory has it all), then
 * the transfers. */
kiln_status kiln_coord_distribute(coord_run *r, uint8_t *buf, kiln_status *local_rc, char *err,
                                  size_t cap) {
  uint8_t *mine = malloc(COORD_MAP_BYTES), *scratch = malloc(CHUNK);
  size_t slots = 0, n = 0;
  kiln_status rc;
  memset(buf, 0, COORD_HDR + COORD_MAP_BYTES);
  fetch_shared(r);
  if (!mine || !scratch)
    *local_rc = kiln_fail(KILN_ENOMEM, "coordination: out of memory");
  else
    *local_rc = r->h->local(r->h->user, buf + COORD_HDR, &slots, r->uni);
  if (*local_rc != KILN_OK) {
    snprintf(err, cap, "%s", kiln_last_error());
    buf[COORD_OFF_FAILED] = 1;
    memset(buf + COORD_HDR, 0, COORD_MAP_BYTES);
  } else {
    memcpy(mine, buf + COORD_HDR, COORD_MAP_BYTES);
  }
  r->peer = 0; /* each rank checked its cache (and fetched) first: the builder timeout */
  KILN_CHECK(kiln_coord_collective(r, 0, buf, COORD_HDR + COORD_MAP_BYTES, "what is still needed"));
  r->peer = 1; /* the root sends each artifact at once: the peer timeout */
  if (buf[COORD_OFF_FAILED]) {
    rc = kiln_coord_someone_failed(r, *local_rc, err, "checking its cache after the build");
    goto out;
  }
  n = kiln_coord_count_set(buf + COORD_HDR);
  kiln_coord_timeline(r, "%zu artifact%s to send (%zu needed here)", n, n == 1 ? "" : "s",
                      kiln_coord_count_set(mine));
  for (size_t slot = 0; slot < COORD_MAP_BYTES; slot++)
    if (buf[COORD_HDR + slot])
      KILN_CHECK(transfer(r, slot, mine[slot], scratch, local_rc, err, cap));
  rc = KILN_OK;
out:
  free(mine);
  free(scratch);
  return rc;
}
