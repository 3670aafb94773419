/* The record document of the remote cache: JSON, schema "kiln-record/1",
 * optionally signed with HMAC-SHA256 over a canonical text
 * (docs/remote-cache.md, "Record document"). */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/record_fields.h"
#include "cache/remote/remote.h"
#include "common/digest.h"
#include "common/error.h"
#include "kiln/target.h"

#define SCHEMA "kiln-record/1"
#define DOC_MAX (64 * 1024)
#define SIG_PREFIX "hmac-sha256:"
#define CANON_MAX 4096

/* Strings go into the canonical text raw: no control characters, so one
 * line is one field. */
static int clean(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
  return 1;
}

static double round_ms(double ms) {
  return round(ms * 1000.0) / 1000.0;
}

/* ---- canonical text: "kiln-record-v1\n", then "<json name>=<value>\n" for
 * each signed field in its canon order (cache/record_fields.def) ---- */

#define CANON_FORMAT_TEXT "%s"
#define CANON_FORMAT_U64 "%" PRIu64
#define CANON_FORMAT_INT "%d"
#define CANON_FORMAT_INT64 "%" PRId64
#define CANON_FORMAT_DOUBLE "%.3f"
#define CANON_VALUE_TEXT(v) (v)
#define CANON_VALUE_U64(v) (v)
#define CANON_VALUE_INT(v) (v)
#define CANON_VALUE_INT64(v) (v)
#define CANON_VALUE_DOUBLE(v) round_ms(v)
#define CANON_LINE(field, type, column, decl, json, canon, wire)                                   \
  if ((canon) == line)                                                                             \
    return snprintf(buf, cap, json "=" CANON_FORMAT_##type "\n", CANON_VALUE_##type(r->field));

/* Prints canonical line `line` (1..KILN_RECORD_CANON_LINES) of r; snprintf's
 * result, or -1 when no row has that line. */
static int canon_line(char *buf, size_t cap, const kiln_record *r, int line) {
  KILN_RECORD_FIELDS(CANON_LINE, )
  return -1;
}

#define CLEAN_TEXT(v) ok = ok && clean(v);
#define CLEAN_U64(v)
#define CLEAN_INT(v)
#define CLEAN_INT64(v)
#define CLEAN_DOUBLE(v)
#define CLEAN_FIELD(field, type, column, decl, json, canon, wire)                                  \
  if (canon) {                                                                                     \
    CLEAN_##type(r->field)                                                                         \
  }

/* 1 when no signed string holds a control character. */
static int canon_clean(const kiln_record *r) {
  int ok = 1;
  KILN_RECORD_FIELDS(CLEAN_FIELD, )
  return ok;
}

kiln_status kiln_remote_record_canonical(const kiln_record *r, char **out, size_t *len) {
  char *buf = NULL;
  kiln_status rc = KILN_OK;
  int n;
  if (!canon_clean(r))
    return kiln_fail(KILN_EINVAL, "record %.12s...: a field holds a control character", r->key);
  buf = malloc(CANON_MAX);
  if (!buf) return kiln_fail(KILN_ENOMEM, "out of memory");
  n = snprintf(buf, CANON_MAX, "kiln-record-v1\n");
  for (int line = 1; line <= KILN_RECORD_CANON_LINES && n < CANON_MAX; line++) {
    int k = canon_line(buf + n, CANON_MAX - (size_t)n, r, line);
    if (k < 0) {
      rc = kiln_fail(KILN_EINTERNAL, "record_fields.def: no field on canonical line %d", line);
      goto out;
    }
    n += k;
  }
  if (n >= CANON_MAX) {
    rc = kiln_fail(KILN_EINVAL, "record %.12s...: too long", r->key);
    goto out;
  }
  *out = buf;
  buf = NULL;
  if (len) *len = (size_t)n;
out:
  free(buf);
  return rc;
}

static kiln_status sign(char out[65], const kiln_record *r, const uint8_t *key, size_t key_len) {
  char *text = NULL;
  size_t len = 0;
  kiln_status rc;
  KILN_CHECK(kiln_remote_record_canonical(r, &text, &len));
  rc = kiln_hmac_sha256_hex(out, key, key_len, text, len);
out:
  free(text);
  return rc;
}

/* ---- the document ---- */

/* 1 when v could not be set (not UTF-8, or out of memory). */
static int set_str(json_t *o, const char *name, const char *v) {
  return json_object_set_new(o, name, json_string(v)) != 0;
}

/* Never 1: a number is always valid; out of memory, the document lacks it
 * and every reader rejects it. */
static int set_num(json_t *o, const char *name, json_t *v) {
  json_object_set_new(o, name, v);
  return 0;
}

#define SET_TEXT(name, v) set_str(o, name, v)
#define SET_U64(name, v) set_num(o, name, json_integer((json_int_t)(v)))
#define SET_INT(name, v) set_num(o, name, json_integer(v))
#define SET_INT64(name, v) set_num(o, name, json_integer((json_int_t)(v)))
#define SET_DOUBLE(name, v) set_num(o, name, json_real(round_ms(v)))
#define SET_FIELD(field, type, column, decl, json, canon, wire)                                    \
  if (json[0]) bad |= SET_##type(json, r->field);

/* Sets every published field of r on o; 1 when one could not be set. */
static int set_fields(json_t *o, const kiln_record *r) {
  int bad = 0;
  KILN_RECORD_FIELDS(SET_FIELD, )
  return bad;
}

kiln_status kiln_remote_record_encode(const kiln_record *r, const uint8_t *key, size_t key_len,
                                      char **out, size_t *len) {
  json_t *o = NULL;
  char *doc = NULL, mac[65];
  kiln_status rc = KILN_OK;
  int bad = 0;
  if (!r || !out) return kiln_fail(KILN_EINVAL, "kiln_remote_record_encode: NULL argument");
  o = json_object();
  if (!o) return kiln_fail(KILN_ENOMEM, "out of memory");
  bad |= set_str(o, "schema", SCHEMA);
  bad |= set_fields(o, r);
  if (bad) { /* jansson takes only UTF-8: e.g. KILN_NVRTC_OPTIONS with other bytes */
    rc = kiln_fail(KILN_EINVAL, "record %.12s...: a field is not valid UTF-8", r->key);
    goto out;
  }
  if (key) {
    char sig[sizeof SIG_PREFIX + 64];
    KILN_CHECK(sign(mac, r, key, key_len));
    snprintf(sig, sizeof sig, SIG_PREFIX "%s", mac);
    json_object_set_new(o, "signature", json_string(sig));
  } else {
    /* the canonical text must exist for every record we publish */
    char *text = NULL;
    KILN_CHECK(kiln_remote_record_canonical(r, &text, NULL));
    free(text);
  }
  doc = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
  if (!doc) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  *out = doc;
  if (len) *len = strlen(doc);
out:
  json_decref(o);
  return rc;
}

/* ---- decode ---- */

static kiln_status bad(const char *want_key, const char *what) {
  return kiln_fail(KILN_ECORRUPT, "remote record %.12s... is malformed: %s", want_key, what);
}

static kiln_status get_str(json_t *o, const char *name, char *dst, size_t cap, const char *key) {
  json_t *v = json_object_get(o, name);
  const char *s;
  char what[128];
  if (!json_is_string(v)) {
    snprintf(what, sizeof what, "\"%s\" is missing or not a string", name);
    return bad(key, what);
  }
  s = json_string_value(v);
  if (json_string_length(v) != strlen(s) || !clean(s)) {
    snprintf(what, sizeof what, "\"%s\" holds a control character", name);
    return bad(key, what);
  }
  if (strlen(s) >= cap) {
    snprintf(what, sizeof what, "\"%s\" is longer than %zu bytes", name, cap - 1);
    return bad(key, what);
  }
  memcpy(dst, s, strlen(s) + 1);
  return KILN_OK;
}

static kiln_status get_int(json_t *o, const char *name, long long lo, long long hi, long long *dst,
                           const char *key) {
  json_t *v = json_object_get(o, name);
  char what[128];
  if (!json_is_integer(v)) {
    snprintf(what, sizeof what, "\"%s\" is missing or not an integer", name);
    return bad(key, what);
  }
  *dst = (long long)json_integer_value(v);
  if (*dst < lo || *dst > hi) {
    snprintf(what, sizeof what, "\"%s\" = %lld is out of range", name, *dst);
    return bad(key, what);
  }
  return KILN_OK;
}

static kiln_status get_u64(json_t *o, const char *name, uint64_t *dst, const char *key) {
  long long x;
  /* the one U64 field is a blob's size: never 0 (no image is empty) */
  kiln_status rc = get_int(o, name, 1, (long long)KILN_BLOB_SIZE_MAX, &x, key);
  if (rc == KILN_OK) *dst = (uint64_t)x;
  return rc;
}

static kiln_status get_i32(json_t *o, const char *name, int *dst, const char *key) {
  long long x;
  /* resources: -1 is "unknown" */
  kiln_status rc = get_int(o, name, -1, INT32_MAX, &x, key);
  if (rc == KILN_OK) *dst = (int)x;
  return rc;
}

static kiln_status get_i64(json_t *o, const char *name, int64_t *dst, const char *key) {
  long long x;
  kiln_status rc = get_int(o, name, INT64_MIN, INT64_MAX, &x, key);
  if (rc == KILN_OK) *dst = (int64_t)x;
  return rc;
}

/* The one DOUBLE field is a duration in milliseconds, kept to 3 decimals. */
static kiln_status get_ms(json_t *o, const char *name, double *dst, const char *key) {
  json_t *v = json_object_get(o, name);
  char what[128];
  if (!json_is_number(v) || !(json_number_value(v) >= 0) || json_number_value(v) > 1e12) {
    snprintf(what, sizeof what, "\"%s\" is missing or not a non-negative number", name);
    return bad(key, what);
  }
  *dst = round_ms(json_number_value(v));
  return KILN_OK;
}

#define GET_TEXT(name, dst) get_str(o, name, dst, sizeof dst, wk)
#define GET_U64(name, dst) get_u64(o, name, &(dst), wk)
#define GET_INT(name, dst) get_i32(o, name, &(dst), wk)
#define GET_INT64(name, dst) get_i64(o, name, &(dst), wk)
#define GET_DOUBLE(name, dst) get_ms(o, name, &(dst), wk)
#define GET_FIELD(field, type, column, decl, json, canon, wire)                                    \
  if (json[0] && KILN_FIELD_##type == pass) KILN_CHECK(GET_##type(json, r->field));

/* Reads every published field into r. Strings first, then the numbers class
 * by class: the order decides which error a document with several bad
 * fields reports, and it is the order kiln always had. */
static kiln_status get_fields(json_t *o, kiln_record *r, const char *wk) {
  static const kiln_field_type order[] = {KILN_FIELD_TEXT, KILN_FIELD_U64, KILN_FIELD_INT,
                                          KILN_FIELD_INT64, KILN_FIELD_DOUBLE};
  kiln_status rc = KILN_OK;
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    kiln_field_type pass = order[i];
    KILN_RECORD_FIELDS(GET_FIELD, )
  }
out:
  return rc;
}

static int is_digest_or_empty(const char *s) {
  return !*s || kiln_is_hex64(s);
}

static kiln_status check_target(const kiln_record *r, const char *key) {
  kiln_target t;
  char name[16];
  if (kiln_target_parse(&t, r->target) != KILN_OK || strcmp(kiln_target_name(&t, name), r->target))
    return bad(key, "\"target\" is not a target name");
  if (strcmp(r->kind, "cubin") && strcmp(r->kind, "ptx"))
    return bad(key, "\"kind\" is neither cubin nor ptx");
  if ((t.kind == KILN_TARGET_PTX) != (strcmp(r->kind, "ptx") == 0))
    return bad(key, "\"kind\" does not match \"target\"");
  return KILN_OK;
}

static kiln_status check_signature(json_t *o, const kiln_record *r, const uint8_t *key,
                                   size_t key_len, const char *want_key) {
  json_t *v = json_object_get(o, "signature");
  const char *s;
  char mac[65];
  kiln_status rc;
  if (!v)
    return kiln_fail(KILN_EPERM,
                     "remote record %.12s... is not signed (KILN_REMOTE_HMAC_KEY_FILE is set)",
                     want_key);
  s = json_string_value(v);
  if (!s || strncmp(s, SIG_PREFIX, strlen(SIG_PREFIX)) != 0 || strlen(s) != strlen(SIG_PREFIX) + 64)
    return kiln_fail(KILN_EPERM, "remote record %.12s... has a malformed signature", want_key);
  rc = sign(mac, r, key, key_len);
  if (rc != KILN_OK) return rc;
  if (CRYPTO_memcmp(mac, s + strlen(SIG_PREFIX), 64) != 0)
    return kiln_fail(KILN_EPERM, "remote record %.12s... has a wrong signature", want_key);
  return KILN_OK;
}

kiln_status kiln_remote_record_decode(const char *doc, size_t len, const char *want_key,
                                      const uint8_t *key, size_t key_len, kiln_record *r) {
  json_t *o = NULL, *v;
  json_error_t err;
  kiln_status rc = KILN_OK;
  const char *wk = want_key ? want_key : "";
  if (!doc || !r) return kiln_fail(KILN_EINVAL, "kiln_remote_record_decode: NULL argument");
  memset(r, 0, sizeof *r);
  if (len > DOC_MAX) return bad(wk, "larger than 64 KiB");
  o = json_loadb(doc, len, JSON_REJECT_DUPLICATES, &err);
  if (!o) {
    char what[200];
    snprintf(what, sizeof what, "not JSON (%s at byte %d)", err.text, err.position);
    return bad(wk, what);
  }
  if (!json_is_object(o)) {
    rc = bad(wk, "not a JSON object");
    goto out;
  }
  v = json_object_get(o, "schema");
  if (!json_is_string(v) || strcmp(json_string_value(v), SCHEMA) != 0) {
    rc = bad(wk, "\"schema\" is not \"" SCHEMA "\"");
    goto out;
  }
  KILN_CHECK(get_fields(o, r, wk));
  if (!kiln_is_hex64(r->key) || !kiln_is_hex64(r->digest) || !is_digest_or_empty(r->log_digest)) {
    rc = bad(wk, "\"key\", \"digest\" or \"log_digest\" is not 64 lowercase hex digits");
    goto out;
  }
  if (want_key && strcmp(r->key, want_key) != 0) {
    rc = bad(wk, "it names another key");
    goto out;
  }
  KILN_CHECK(check_target(r, wk));
  if (key) KILN_CHECK(check_signature(o, r, key, key_len, wk));
out:
  json_decref(o);
  if (rc != KILN_OK) memset(r, 0, sizeof *r);
  return rc;
}
