/* Environment parameters (common/params.def), read once, in one place. */
#include "common/params.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/logging.h"
#include "kiln/api.h"

typedef enum { P_INT, P_SECONDS, P_STR, P_LOG, P_EXTERN } param_type;

typedef struct param_def {
  const char *name;
  param_type type;
  double dflt, lo, hi; /* P_SECONDS: lo is 0, exclusive */
} param_def;

static const param_def defs[KILN_P_COUNT] = {
#define KILN_PARAM_INT(id, name, d, l, h, what) [KILN_P_##id] = {name, P_INT, d, l, h},
#define KILN_PARAM_SECONDS(id, name, d, h, what) [KILN_P_##id] = {name, P_SECONDS, d, 0, h},
#define KILN_PARAM_STR(id, name, what) [KILN_P_##id] = {name, P_STR, 0, 0, 0},
#define KILN_PARAM_LOG(id, name, what) [KILN_P_##id] = {name, P_LOG, 0, 0, 0},
#define KILN_PARAM_EXTERN(id, name, what) [KILN_P_##id] = {name, P_EXTERN, 0, 0, 0},
#include "common/params.def"
#undef KILN_PARAM_INT
#undef KILN_PARAM_SECONDS
#undef KILN_PARAM_STR
#undef KILN_PARAM_LOG
#undef KILN_PARAM_EXTERN
};

/* What one variable read as: kept from its first use on. */
typedef struct param_value {
  int read;
  kiln_status status;
  double num;
  char *str;       /* strdup of the value (a text variable), or NULL */
  char *raw;       /* strdup of the value as set (any variable), or NULL */
  char error[256]; /* the message when status is not KILN_OK */
} param_value;

static param_value values[KILN_P_COUNT];
static pthread_mutex_t values_lock = PTHREAD_MUTEX_INITIALIZER;

kiln_status kiln_parse_int(long long *out, const char *s, long long lo, long long hi,
                           const char *what) {
  char *end = NULL;
  long long v;
  if (!s || !*s) return kiln_fail(KILN_EINVAL, "%s: empty value, expected an integer", what);
  errno = 0;
  v = strtoll(s, &end, 10);
  if (errno || *end != '\0' || v < lo || v > hi)
    return kiln_fail(KILN_EINVAL, "%s: '%s' is not an integer in [%lld, %lld]", what, s, lo, hi);
  *out = v;
  return KILN_OK;
}

/* Seconds, decimals allowed ("0.5"), in (0, hi]. */
static kiln_status parse_seconds(double *out, const char *s, double hi, const char *what) {
  char *end = NULL;
  double x;
  errno = 0;
  x = strtod(s, &end);
  if (!*s || errno || *end != '\0' || !(x > 0) || x > hi)
    return kiln_fail(KILN_EINVAL, "%s: '%s' is not a number of seconds in (0, %g]", what, s, hi);
  *out = x;
  return KILN_OK;
}

/* Parses v (set and non-empty) into p; the error message is kept. */
static void parse_value(param_value *p, const param_def *d, const char *v) {
  long long i = 0;
  p->status = KILN_OK;
  if (d->type == P_INT) {
    p->status = kiln_parse_int(&i, v, (long long)d->lo, (long long)d->hi, d->name);
    p->num = (double)i;
  } else if (d->type == P_SECONDS) {
    p->status = parse_seconds(&p->num, v, d->hi, d->name);
  } else if (!(p->str = strdup(v))) {
    p->status = kiln_fail(KILN_ENOMEM, "out of memory");
  }
  if (p->status != KILN_OK) snprintf(p->error, sizeof p->error, "%s", kiln_last_error());
}

/* Reads id on first use; the caller holds values_lock. */
static param_value *value_of(kiln_param_id id) {
  param_value *p = &values[id];
  const param_def *d = &defs[id];
  const char *v;
  if (p->read) return p;
  p->read = 1;
  p->num = d->dflt;
  p->status = KILN_OK;
  if (d->type == P_EXTERN) return p; /* kiln_param_now only: never kept, never logged */
  v = getenv(d->name);
  if (!v || !*v) return p;
  p->raw = strdup(v); /* for messages only: NULL when out of memory */
  parse_value(p, d, v);
  if (p->status == KILN_OK && (p->str || p->num != d->dflt))
    kiln_log(KILN_LOG_INFO, "%s=%s (not the default)", d->name, v);
  return p;
}

/* The value's status, with its message made the last error again. */
static kiln_status report(const param_value *p) {
  return p->status == KILN_OK ? KILN_OK : kiln_fail(p->status, "%s", p->error);
}

/* A number variable (P_INT or P_SECONDS): its value, or the default when it
 * is unset or malformed. */
static kiln_status read_number(double *out, kiln_param_id id) {
  param_value *p;
  kiln_status rc;
  pthread_mutex_lock(&values_lock);
  p = value_of(id);
  *out = p->status == KILN_OK ? p->num : defs[id].dflt;
  rc = report(p);
  pthread_mutex_unlock(&values_lock);
  return rc;
}

kiln_status kiln_param_int(int *out, kiln_param_id id) {
  double v;
  kiln_status rc = read_number(&v, id);
  *out = (int)v; /* parsed within [lo, hi], both ints */
  return rc;
}

kiln_status kiln_param_seconds(double *out, kiln_param_id id) {
  return read_number(out, id);
}

const char *kiln_param_str(kiln_param_id id) {
  const char *s;
  pthread_mutex_lock(&values_lock);
  s = value_of(id)->str; /* never freed before kiln_params_reset */
  pthread_mutex_unlock(&values_lock);
  return s;
}

const char *kiln_param_raw(kiln_param_id id) {
  const char *s;
  pthread_mutex_lock(&values_lock);
  s = value_of(id)->raw;
  pthread_mutex_unlock(&values_lock);
  return s;
}

const char *kiln_param_now(kiln_param_id id) {
  const char *v = getenv(defs[id].name);
  return v && *v ? v : NULL;
}

kiln_status kiln_option_int(int *out, int value, kiln_param_id id, const char *field) {
  const param_def *d = &defs[id];
  if (value == KILN_ENV) return kiln_param_int(out, id);
  if (value < d->lo || value > d->hi)
    return kiln_fail(KILN_EINVAL, "%s: %d is not in [%.0f, %.0f] (or KILN_ENV: %s)", field, value,
                     d->lo, d->hi, d->name);
  *out = value;
  return KILN_OK;
}

kiln_status kiln_option_seconds(double *out, double value, kiln_param_id id, const char *field) {
  const param_def *d = &defs[id];
  if (value == KILN_ENV) return kiln_param_seconds(out, id);
  if (!(value > 0) || value > d->hi)
    return kiln_fail(KILN_EINVAL, "%s: %g is not a number of seconds in (0, %g] (or KILN_ENV: %s)",
                     field, value, d->hi, d->name);
  *out = value;
  return KILN_OK;
}

kiln_status kiln_option_ms_as_seconds(double *out, double value, kiln_param_id id,
                                      const char *field) {
  const param_def *d = &defs[id];
  int ms;
  kiln_status rc;
  if (value == KILN_ENV) {
    rc = kiln_param_int(&ms, id);
    *out = ms / 1e3;
    return rc;
  }
  if (!(value >= d->lo / 1e3) || value > d->hi / 1e3)
    return kiln_fail(KILN_EINVAL, "%s: %g is not a number of seconds in [%g, %g] (or KILN_ENV: %s)",
                     field, value, d->lo / 1e3, d->hi / 1e3, d->name);
  *out = value;
  return KILN_OK;
}

const char *kiln_option_str(const char *value, kiln_param_id id) {
  return value ? value : kiln_param_str(id);
}

kiln_status kiln_options_check(int version, int current, const char *type) {
  if (version < 1 || version > current)
    return kiln_fail(KILN_EINVAL, "%s: unknown version %d (this libkiln knows 1 to %d)", type,
                     version, current);
  return KILN_OK;
}

kiln_status kiln_options_init(void *opts, const void *init, size_t size, int version, int current,
                              const char *type) {
  kiln_status rc = kiln_options_check(version, current, type);
  if (rc != KILN_OK) return rc;
  if (!opts) return kiln_fail(KILN_EINVAL, "%s_init: opts is NULL", type);
  memcpy(opts, init, size);
  *(int *)opts = version; /* every options struct starts with int version */
  return KILN_OK;
}

static kiln_status join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s%s", a, b);
  if (n < 0 || (size_t)n >= cap) return kiln_fail(KILN_EINVAL, "cache path too long: %s%s", a, b);
  return KILN_OK;
}

kiln_status kiln_param_cache_dir_path(char *out, size_t cap) {
  const char *v = kiln_param_cache_dir();
  if (v) return join(out, cap, v, "");
  v = getenv("XDG_CACHE_HOME");
  if (v && *v) return join(out, cap, v, "/kiln");
  v = getenv("HOME");
  if (v && *v) return join(out, cap, v, "/.cache/kiln");
  return kiln_fail(KILN_EINVAL, "no cache directory: set KILN_CACHE_DIR or HOME, or pass --cache");
}

kiln_status kiln_param_nvrtc_options_checked(const char **out) {
  const char *v = kiln_param_nvrtc_options();
  *out = NULL;
  if (!v) return KILN_OK;
  if (strlen(v) > 160)
    return kiln_fail(KILN_EINVAL, "KILN_NVRTC_OPTIONS: longer than 160 characters");
  for (const char *p = v; *p;) {
    while (*p == ' ')
      p++;
    if (!*p) break;
    if (*p != '-')
      return kiln_fail(KILN_EINVAL,
                       "KILN_NVRTC_OPTIONS: '%s': every option starts with '-' "
                       "(e.g. \"-lineinfo -DNDEBUG\")",
                       v);
    while (*p && *p != ' ') {
      if (*p == '"' || *p == '\'' || *p == '\\' || (unsigned char)*p < 0x20)
        return kiln_fail(KILN_EINVAL,
                         "KILN_NVRTC_OPTIONS: '%s': no quotes, escapes or control "
                         "characters (options are split on spaces)",
                         v);
      p++;
    }
  }
  *out = v;
  return KILN_OK;
}

void kiln_params_reset(void) {
  pthread_mutex_lock(&values_lock);
  for (int i = 0; i < KILN_P_COUNT; i++) {
    free(values[i].str);
    free(values[i].raw);
    memset(&values[i], 0, sizeof values[i]);
  }
  pthread_mutex_unlock(&values_lock);
}
