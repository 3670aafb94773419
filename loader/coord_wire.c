/* The coordination protocol's bytes: slot codes, fingerprints, status frames
 * and artifact headers. Fields are fixed-width at fixed offsets in the
 * host's byte order (every platform kiln builds for is little-endian; the
 * configuration fingerprint includes the wire version, so a change here is
 * caught before any frame is read). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/record_fields.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/params.h"
#include "kiln/build.h"
#include "kiln/kernels.h"
#include "kiln/version.h"
#include "loader/coord_internal.h"

#define WIRE_VERSION "kiln-coord-1"
#define FRAME_MAGIC "kilnfrm1"
#define HEADER_MAGIC "kilnart1"

int kiln_coord_target_code(const kiln_target *t) {
  int kind = t->kind == KILN_TARGET_PTX ? 1 : t->arch_specific ? 2 : 0;
  if (t->arch < 50 || t->arch >= 135) return -1;
  return kind * 85 + t->arch - 50;
}

void kiln_coord_target_decode(int code, kiln_target *out) {
  int kind = code / 85;
  out->arch = code % 85 + 50;
  out->kind = kind == 1 ? KILN_TARGET_PTX : KILN_TARGET_CUBIN;
  out->arch_specific = kind == 2;
}

struct kiln_fp_builder {
  kiln_sha256 *h;
};

kiln_status kiln_fp_begin(kiln_fp_builder **out) {
  kiln_fp_builder *b = calloc(1, sizeof *b);
  kiln_status rc;
  *out = NULL;
  if (!b) return kiln_fail(KILN_ENOMEM, "out of memory");
  if ((rc = kiln_sha256_new(&b->h)) != KILN_OK) {
    free(b);
    return rc;
  }
  *out = b;
  return KILN_OK;
}

kiln_status kiln_fp_add(kiln_fp_builder *b, const char *unit, const char *target,
                        const char *digest) {
  kiln_status rc = KILN_OK;
  KILN_CHECK(kiln_sha256_update(b->h, unit, strlen(unit) + 1));
  KILN_CHECK(kiln_sha256_update(b->h, target, strlen(target) + 1));
  KILN_CHECK(kiln_sha256_update(b->h, digest, strlen(digest) + 1));
out:
  return rc;
}

static void unhex(const char hex[65], uint8_t out[COORD_FP_BYTES]) {
  for (int i = 0; i < COORD_FP_BYTES; i++) {
    unsigned v = 0;
    sscanf(hex + 2 * i, "%2x", &v);
    out[i] = (uint8_t)v;
  }
}

void kiln_fp_hex(const uint8_t fp[COORD_FP_BYTES], char out[65]) {
  for (int i = 0; i < COORD_FP_BYTES; i++)
    snprintf(out + 2 * i, 3, "%02x", fp[i]);
}

kiln_status kiln_fp_end(kiln_fp_builder *b, kiln_status rc, uint8_t out[COORD_FP_BYTES]) {
  char hex[65];
  if (rc == KILN_OK && (rc = kiln_sha256_final_hex(b->h, hex)) == KILN_OK) unhex(hex, out);
  kiln_sha256_free(b->h);
  free(b);
  return rc;
}

kiln_status kiln_coord_config_fp(uint8_t out[COORD_FP_BYTES]) {
  kiln_fp_builder *b = NULL;
  const char *extra = NULL;
  kiln_status rc;
  KILN_CHECK(kiln_param_nvrtc_options_checked(&extra)); /* a bad value is this rank's error */
  KILN_CHECK(kiln_fp_begin(&b));
  KILN_CHECK(kiln_fp_add(b, WIRE_VERSION, kiln_version(), kiln_build_compile_options()));
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    char digest[65];
    KILN_CHECK(kiln_unit_digest(digest, kiln_unit_at(u)));
    KILN_CHECK(kiln_fp_add(b, kiln_unit_at(u)->name, "", digest));
  }
out:
  return b ? kiln_fp_end(b, rc, out) : rc;
}

/* ---- fixed-offset fields ---- */

typedef struct cursor {
  uint8_t *w;       /* writing */
  const uint8_t *r; /* reading */
  size_t at, cap;
} cursor;

static void put(cursor *c, const void *v, size_t n) {
  if (c->at + n <= c->cap) memcpy(c->w + c->at, v, n);
  c->at += n;
}

static void get(cursor *c, void *v, size_t n) {
  if (c->at + n <= c->cap)
    memcpy(v, c->r + c->at, n);
  else
    memset(v, 0, n);
  c->at += n;
}

/* Strings travel as their fixed-size arrays; the last byte is forced NUL on
 * the way in so a corrupt frame cannot make an unterminated string. */
#define PUT(c, field) put(c, &(field), sizeof(field))
#define GET(c, field) get(c, &(field), sizeof(field))
#define GETS(c, field)                                                                             \
  do {                                                                                             \
    get(c, (field), sizeof(field));                                                                \
    (field)[sizeof(field) - 1] = '\0';                                                             \
  } while (0)

void kiln_frame_encode(const coord_frame *f, uint8_t out[COORD_FRAME_BYTES]) {
  cursor c = {out, NULL, 0, COORD_FRAME_BYTES};
  memset(out, 0, COORD_FRAME_BYTES);
  put(&c, FRAME_MAGIC, 8);
  PUT(&c, f->state);
  PUT(&c, f->seq);
  PUT(&c, f->done);
  PUT(&c, f->total);
  PUT(&c, f->status);
  PUT(&c, f->pid);
  PUT(&c, f->elapsed_s);
  PUT(&c, f->host);
  PUT(&c, f->unit);
  PUT(&c, f->target);
  PUT(&c, f->message);
}

kiln_status kiln_frame_decode(coord_frame *f, const uint8_t in[COORD_FRAME_BYTES]) {
  cursor c = {NULL, in, 8, COORD_FRAME_BYTES};
  memset(f, 0, sizeof *f);
  if (memcmp(in, FRAME_MAGIC, 8) != 0)
    return kiln_fail(KILN_ECORRUPT, "coordination: a status frame from the root is not one "
                                    "(ranks out of step?)");
  GET(&c, f->state);
  GET(&c, f->seq);
  GET(&c, f->done);
  GET(&c, f->total);
  GET(&c, f->status);
  GET(&c, f->pid);
  GET(&c, f->elapsed_s);
  GETS(&c, f->host);
  GETS(&c, f->unit);
  GETS(&c, f->target);
  GETS(&c, f->message);
  if (f->state < COORD_BUILDING || f->state > COORD_FAILED)
    return kiln_fail(KILN_ECORRUPT, "coordination: status frame with unknown state %u", f->state);
  return KILN_OK;
}

/* The header carries the record's wire rows (cache/record_fields.def) in row
 * order, each as its member's bytes, from offset 12 up to log_size at 554
 * (docs/coordination.md): a row that changes them changes the wire. */
#define WIRE_BYTES(field, type, column, decl, json, canon, wire)                                   \
  +(wire) * sizeof(((kiln_record *)0)->field)
_Static_assert(0 KILN_RECORD_FIELDS(WIRE_BYTES, ) == 554 - 12,
               "the artifact header's record fields moved: bump WIRE_VERSION and the docs");

#define WIRE_PUT(field, type, column, decl, json, canon, wire)                                     \
  if (wire) PUT(&c, r->field);
#define WIRE_GET_TEXT GETS
#define WIRE_GET_U64 GET
#define WIRE_GET_INT GET
#define WIRE_GET_INT64 GET
#define WIRE_GET_DOUBLE GET
#define WIRE_GET(field, type, column, decl, json, canon, wire)                                     \
  if (wire) WIRE_GET_##type(&c, r->field);

void kiln_header_encode(const coord_header *h, uint8_t out[COORD_HEADER_BYTES]) {
  cursor c = {out, NULL, 0, COORD_HEADER_BYTES};
  const kiln_record *r = &h->rec;
  memset(out, 0, COORD_HEADER_BYTES);
  put(&c, HEADER_MAGIC, 8);
  PUT(&c, h->status);
  KILN_RECORD_FIELDS(WIRE_PUT, )
  PUT(&c, h->log_size);
  PUT(&c, h->message);
}

kiln_status kiln_header_decode(coord_header *h, const uint8_t in[COORD_HEADER_BYTES]) {
  cursor c = {NULL, in, 8, COORD_HEADER_BYTES};
  kiln_record *r = &h->rec;
  memset(h, 0, sizeof *h);
  if (memcmp(in, HEADER_MAGIC, 8) != 0)
    return kiln_fail(KILN_ECORRUPT, "coordination: an artifact header from the root is not one "
                                    "(ranks out of step?)");
  GET(&c, h->status);
  KILN_RECORD_FIELDS(WIRE_GET, )
  GET(&c, h->log_size);
  GETS(&c, h->message);
  if (c.at > COORD_HEADER_BYTES) return kiln_fail(KILN_EINTERNAL, "coordination: header overflow");
  return KILN_OK;
}
