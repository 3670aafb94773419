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

#include "cache/remote.h"
#include "common/digest.h"
#include "common/error.h"
#include "kiln/target.h"

#define SCHEMA "kiln-record/1"
#define DOC_MAX (64 * 1024)
#define SIZE_MAX_BLOB (1ull << 30)
#define SIG_PREFIX "hmac-sha256:"

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

kiln_status kiln_remote_record_canonical(const kiln_record *r, char **out, size_t *len) {
  const char *strs[] = {r->key,    r->unit,      r->target,  r->kind,
                        r->digest, r->toolchain, r->options, r->log_digest};
  char *buf;
  int n;
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    if (!clean(strs[i]))
      return kiln_fail(KILN_EINVAL, "record %.12s...: a field holds a control character", r->key);
  buf = malloc(4096);
  if (!buf) return kiln_fail(KILN_ENOMEM, "out of memory");
  n = snprintf(buf, 4096,
               "kiln-record-v1\nkey=%s\nunit=%s\ntarget=%s\nkind=%s\ndigest=%s\nsize=%" PRIu64
               "\ntoolchain=%s\noptions=%s\nbuild_ms=%.3f\nregisters=%d\nspill_stores=%d\n"
               "spill_loads=%d\nshared_bytes=%d\nstack_bytes=%d\nlog_digest=%s\n",
               r->key, r->unit, r->target, r->kind, r->digest, r->size, r->toolchain, r->options,
               round_ms(r->build_ms), r->registers, r->spill_stores, r->spill_loads,
               r->shared_bytes, r->stack_bytes, r->log_digest);
  if (n < 0 || n >= 4096) {
    free(buf);
    return kiln_fail(KILN_EINVAL, "record %.12s...: too long", r->key);
  }
  *out = buf;
  if (len) *len = (size_t)n;
  return KILN_OK;
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

/* 1 when v could not be set (not UTF-8, or out of memory). */
static int set_str(json_t *o, const char *name, const char *v) {
  return json_object_set_new(o, name, json_string(v)) != 0;
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
  bad |= set_str(o, "key", r->key);
  bad |= set_str(o, "unit", r->unit);
  bad |= set_str(o, "target", r->target);
  bad |= set_str(o, "kind", r->kind);
  bad |= set_str(o, "digest", r->digest);
  json_object_set_new(o, "size", json_integer((json_int_t)r->size));
  bad |= set_str(o, "toolchain", r->toolchain);
  bad |= set_str(o, "options", r->options);
  json_object_set_new(o, "build_ms", json_real(round_ms(r->build_ms)));
  json_object_set_new(o, "registers", json_integer(r->registers));
  json_object_set_new(o, "spill_stores", json_integer(r->spill_stores));
  json_object_set_new(o, "spill_loads", json_integer(r->spill_loads));
  json_object_set_new(o, "shared_bytes", json_integer(r->shared_bytes));
  json_object_set_new(o, "stack_bytes", json_integer(r->stack_bytes));
  bad |= set_str(o, "log_digest", r->log_digest);
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
  static const char *const ints[] = {"registers", "spill_stores", "spill_loads", "shared_bytes",
                                     "stack_bytes"};
  int *int_dst[5];
  json_t *o = NULL, *v;
  json_error_t err;
  long long x;
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
  KILN_CHECK(get_str(o, "key", r->key, sizeof r->key, wk));
  KILN_CHECK(get_str(o, "unit", r->unit, sizeof r->unit, wk));
  KILN_CHECK(get_str(o, "target", r->target, sizeof r->target, wk));
  KILN_CHECK(get_str(o, "kind", r->kind, sizeof r->kind, wk));
  KILN_CHECK(get_str(o, "digest", r->digest, sizeof r->digest, wk));
  KILN_CHECK(get_str(o, "toolchain", r->toolchain, sizeof r->toolchain, wk));
  KILN_CHECK(get_str(o, "options", r->options, sizeof r->options, wk));
  KILN_CHECK(get_str(o, "log_digest", r->log_digest, sizeof r->log_digest, wk));
  KILN_CHECK(get_int(o, "size", 0, (long long)SIZE_MAX_BLOB, &x, wk));
  r->size = (uint64_t)x;
  int_dst[0] = &r->registers;
  int_dst[1] = &r->spill_stores;
  int_dst[2] = &r->spill_loads;
  int_dst[3] = &r->shared_bytes;
  int_dst[4] = &r->stack_bytes;
  for (int i = 0; i < 5; i++) {
    KILN_CHECK(get_int(o, ints[i], -1, INT32_MAX, &x, wk));
    *int_dst[i] = (int)x;
  }
  v = json_object_get(o, "build_ms");
  if (!json_is_number(v) || !(json_number_value(v) >= 0) || json_number_value(v) > 1e12) {
    rc = bad(wk, "\"build_ms\" is missing or not a non-negative number");
    goto out;
  }
  r->build_ms = round_ms(json_number_value(v));
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
