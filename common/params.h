/* Internal: every KILN_* environment variable is read here, and only here
 * (KILN_LOG excepted: the logger, which everything else uses, reads it itself;
 * see common/logging.h), and so are the other tools' variables kiln honours
 * (AWS's, for an s3:// remote). The variables are listed once, in
 * common/params.def.
 *
 * Like NCCL_PARAM: a variable is read on first use and its value (or its
 * error) kept for the life of the process, so a setting cannot change under a
 * running job; each value that is not the default is logged once at info.
 * Bad values are errors naming the variable, never silently ignored.
 *
 * Layering of common/: logging.c (no kiln dependency) <- error.c (kiln_fail
 * logs its breadcrumb) <- params.c (kiln_fail, kiln_log) <- everything else. */
#ifndef KILN_COMMON_PARAMS_H
#define KILN_COMMON_PARAMS_H

#include <stddef.h>

#include "kiln/status.h"

typedef enum kiln_param_id {
#define KILN_PARAM_INT(id, name, dflt, lo, hi, what) KILN_P_##id,
#define KILN_PARAM_SECONDS(id, name, dflt, hi, what) KILN_P_##id,
#define KILN_PARAM_STR(id, name, what) KILN_P_##id,
#define KILN_PARAM_LOG(id, name, what) KILN_P_##id,
#define KILN_PARAM_EXTERN(id, name, what) KILN_P_##id,
#include "common/params.def"
#undef KILN_PARAM_INT
#undef KILN_PARAM_SECONDS
#undef KILN_PARAM_STR
#undef KILN_PARAM_LOG
#undef KILN_PARAM_EXTERN
  KILN_P_COUNT
} kiln_param_id;

/* An integer variable: its value, or the default when unset. KILN_EINVAL
 * naming the variable and its range when malformed (*out is then the
 * default, so a caller that only reports can go on). */
kiln_status kiln_param_int(int *out, kiln_param_id id);
/* A seconds variable, the same way. */
kiln_status kiln_param_seconds(double *out, kiln_param_id id);
/* A text variable, or NULL when unset or "". */
const char *kiln_param_str(kiln_param_id id);
/* Any variable's text as first read (e.g. to quote a malformed number), or
 * NULL when unset or "". */
const char *kiln_param_raw(kiln_param_id id);
/* A text variable as the environment has it now, or NULL when unset or "":
 * not kept, for the test seams a test changes within one process
 * (KILN_TEST_FSTYPE). Valid until the environment changes. */
const char *kiln_param_now(kiln_param_id id);

/* An options field that may say KILN_ENV (include/kiln/api.h): KILN_ENV
 * takes the variable (or its default); any other value must lie in the
 * variable's range, else KILN_EINVAL naming field. The one place where "unset
 * means the environment" is decided. */
kiln_status kiln_option_int(int *out, int value, kiln_param_id id, const char *field);
kiln_status kiln_option_seconds(double *out, double value, kiln_param_id id, const char *field);
/* A seconds field whose variable is in milliseconds (KILN_HEARTBEAT_MS). */
kiln_status kiln_option_ms_as_seconds(double *out, double value, kiln_param_id id,
                                      const char *field);
/* A text options field: NULL takes the variable. */
const char *kiln_option_str(const char *value, kiln_param_id id);

/* The typed getters the rest of kiln calls, one per row of params.def. */
#define KILN_PARAM_INT(id, name, dflt, lo, hi, what)                                               \
  static inline kiln_status kiln_param_##id(int *out) {                                            \
    return kiln_param_int(out, KILN_P_##id);                                                       \
  }
#define KILN_PARAM_SECONDS(id, name, dflt, hi, what)                                               \
  static inline kiln_status kiln_param_##id(double *out) {                                         \
    return kiln_param_seconds(out, KILN_P_##id);                                                   \
  }
#define KILN_PARAM_STR(id, name, what)                                                             \
  static inline const char *kiln_param_##id(void) {                                                \
    return kiln_param_str(KILN_P_##id);                                                            \
  }
#define KILN_PARAM_LOG(id, name, what)
/* Another tool's variable: as the environment has it now, never kept. */
#define KILN_PARAM_EXTERN(id, name, what)                                                          \
  static inline const char *kiln_param_##id(void) {                                                \
    return kiln_param_now(KILN_P_##id);                                                            \
  }
#include "common/params.def"
#undef KILN_PARAM_INT
#undef KILN_PARAM_SECONDS
#undef KILN_PARAM_STR
#undef KILN_PARAM_LOG
#undef KILN_PARAM_EXTERN

/* For kiln_X_options_init: copies *init (size bytes) into *opts and sets
 * its version (the first field). KILN_EINVAL naming type unless version is in
 * [1, current]. */
kiln_status kiln_options_init(void *opts, const void *init, size_t size, int version, int current,
                              const char *type);
/* Defines the public `kiln_status type##_init(type *opts, int version)` of
 * an options struct from its _VERSION and _INIT macros. */
#define KILN_DEFINE_OPTIONS_INIT(type, VERSION, INIT)                                              \
  kiln_status type##_init(type *opts, int version) {                                               \
    static const type init = INIT;                                                                 \
    return kiln_options_init(opts, &init, sizeof init, version, VERSION, #type);                   \
  }
/* For a function taking options: KILN_EINVAL naming type unless version is in
 * [1, current] (an older version is read as the current one: fields are only
 * ever appended, and each new one defaults to the old behaviour). */
kiln_status kiln_options_check(int version, int current, const char *type);

/* The primary cache directory: KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln,
 * else $HOME/.cache/kiln. */
kiln_status kiln_param_cache_dir_path(char *out, size_t cap);
/* KILN_NVRTC_OPTIONS, checked: options split on spaces, each starting with
 * '-', no quotes or escapes. *out NULL when unset; KILN_EINVAL when malformed. */
kiln_status kiln_param_nvrtc_options_checked(const char **out);

/* Forgets every value read, so the next use reads the environment again.
 * For unit tests that change the environment between cases; never called by
 * kiln itself. */
void kiln_params_reset(void);

/* Parses a decimal integer in [lo, hi] (whole string). */
kiln_status kiln_parse_int(long long *out, const char *s, long long lo, long long hi,
                           const char *what);

#endif
