/* Environment parameters, read in one place. */
#include "common/params.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"

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

KILN_API kiln_status kiln_parse_size(unsigned long long *out, const char *s, const char *what) {
  char *end = NULL;
  unsigned long long v, mult = 1;
  if (!s || *s < '0' || *s > '9') /* strtoull would take " -1" or "+5" */
    return kiln_fail(KILN_EINVAL, "%s: '%s' is not a size (e.g. 512M, 2G)", what, s ? s : "");
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno || end == s) goto bad;
  if (*end) {
    switch (*end) {
    case 'k': case 'K': mult = 1ULL << 10; break;
    case 'm': case 'M': mult = 1ULL << 20; break;
    case 'g': case 'G': mult = 1ULL << 30; break;
    case 't': case 'T': mult = 1ULL << 40; break;
    default: goto bad;
    }
    end++;
    if (*end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) goto bad;
  }
  if (v > ULLONG_MAX / mult) goto bad;
  *out = v * mult;
  return KILN_OK;
bad:
  return kiln_fail(KILN_EINVAL, "%s: '%s' is not a size (e.g. 512M, 2G, 1048576)", what, s);
}

static kiln_status env_int(int *out, const char *name, long long lo, long long hi, int dflt) {
  const char *v = getenv(name);
  long long x = 0;
  kiln_status rc;
  if (!v || !*v) {
    *out = dflt;
    return KILN_OK;
  }
  rc = kiln_parse_int(&x, v, lo, hi, name);
  if (rc == KILN_OK) *out = (int)x;
  return rc;
}

kiln_status kiln_param_log_level(kiln_log_level *out) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  const char *v = getenv("KILN_LOG");
  if (!v || !*v) return KILN_ENOTFOUND;
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(v, names[i]) == 0) {
      *out = (kiln_log_level)i;
      return KILN_OK;
    }
  }
  fprintf(stderr, "kiln warn: KILN_LOG='%s' is not one of error|warn|info|debug; using warn\n", v);
  return KILN_EINVAL;
}

static kiln_status join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s%s", a, b);
  if (n < 0 || (size_t)n >= cap) return kiln_fail(KILN_EINVAL, "cache path too long: %s%s", a, b);
  return KILN_OK;
}

kiln_status kiln_param_cache_dir(char *out, size_t cap) {
  const char *v = getenv("KILN_CACHE_DIR");
  if (v && *v) return join(out, cap, v, "");
  v = getenv("XDG_CACHE_HOME");
  if (v && *v) return join(out, cap, v, "/kiln");
  v = getenv("HOME");
  if (v && *v) return join(out, cap, v, "/.cache/kiln");
  return kiln_fail(KILN_EINVAL, "no cache directory: set KILN_CACHE_DIR or HOME, or pass --cache");
}

const char *kiln_param_cache_path(void) {
  const char *v = getenv("KILN_CACHE_PATH");
  return (v && *v) ? v : NULL;
}

const char *kiln_param_nvrtc_library(void) {
  const char *v = getenv("KILN_NVRTC_LIBRARY");
  return (v && *v) ? v : NULL;
}

kiln_status kiln_param_jobs(int *out) {
  return env_int(out, "KILN_JOBS", 1, 4096, 0);
}

kiln_status kiln_param_failure_ttl(int *out) {
  return env_int(out, "KILN_FAILURE_TTL", 0, 30 * 24 * 3600, 600);
}

kiln_status kiln_param_test_compile_delay_ms(int *out) {
  return env_int(out, "KILN_TEST_COMPILE_DELAY_MS", 0, 3600 * 1000, 0);
}

kiln_status kiln_param_nvrtc_options(const char **out) {
  const char *v = getenv("KILN_NVRTC_OPTIONS");
  *out = NULL;
  if (!v || !*v) return KILN_OK;
  if (strlen(v) > 160)
    return kiln_fail(KILN_EINVAL, "KILN_NVRTC_OPTIONS: longer than 160 characters");
  for (const char *p = v; *p;) {
    while (*p == ' ') p++;
    if (!*p) break;
    if (*p != '-')
      return kiln_fail(KILN_EINVAL, "KILN_NVRTC_OPTIONS: '%s': every option starts with '-' "
                                    "(e.g. \"-lineinfo -DNDEBUG\")", v);
    while (*p && *p != ' ') {
      if (*p == '"' || *p == '\'' || *p == '\\' || (unsigned char)*p < 0x20)
        return kiln_fail(KILN_EINVAL, "KILN_NVRTC_OPTIONS: '%s': no quotes, escapes or control "
                                      "characters (options are split on spaces)", v);
      p++;
    }
  }
  *out = v;
  return KILN_OK;
}

kiln_status kiln_param_heartbeat_ms(int *out) {
  return env_int(out, "KILN_HEARTBEAT_MS", 10, 60 * 1000, 500);
}

const char *kiln_param_test_inject_compile_error(void) {
  const char *v = getenv("KILN_TEST_INJECT_COMPILE_ERROR");
  return (v && *v) ? v : NULL;
}

const char *kiln_param_cuda_library(void) {
  const char *v = getenv("KILN_CUDA_LIBRARY");
  return (v && *v) ? v : NULL;
}

const char *kiln_param_nccl_library(void) {
  const char *v = getenv("KILN_NCCL_LIBRARY");
  return (v && *v) ? v : NULL;
}

kiln_status kiln_param_offline(int *out) {
  return env_int(out, "KILN_OFFLINE", 0, 1, 0);
}

/* Seconds, decimals allowed ("0.5"), in (0, hi]. */
static kiln_status env_seconds(double *out, const char *name, double hi, double dflt) {
  const char *v = getenv(name);
  char *end = NULL;
  double x;
  if (!v || !*v) {
    *out = dflt;
    return KILN_OK;
  }
  errno = 0;
  x = strtod(v, &end);
  if (errno || *end != '\0' || !(x > 0) || x > hi)
    return kiln_fail(KILN_EINVAL, "%s: '%s' is not a number of seconds in (0, %g]", name, v, hi);
  *out = x;
  return KILN_OK;
}

kiln_status kiln_param_lease_stale_s(double *out) {
  return env_seconds(out, "KILN_LEASE_STALE", 24 * 3600, 30);
}

kiln_status kiln_param_build_timeout_s(double *out) {
  return env_seconds(out, "KILN_BUILD_TIMEOUT", 7 * 24 * 3600, 1800);
}

/* ---- the remote cache ---- */

static const char *env_str(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

const char *kiln_param_remote_url(void) { return env_str("KILN_REMOTE_URL"); }
const char *kiln_param_remote_token_file(void) { return env_str("KILN_REMOTE_TOKEN_FILE"); }
const char *kiln_param_remote_hmac_key_file(void) { return env_str("KILN_REMOTE_HMAC_KEY_FILE"); }
const char *kiln_param_remote_ca_file(void) { return env_str("KILN_REMOTE_CA_FILE"); }

kiln_status kiln_param_remote_upload(int *out) {
  return env_int(out, "KILN_REMOTE_UPLOAD", 0, 1, 0);
}

kiln_status kiln_param_remote_connect_timeout_s(double *out) {
  return env_seconds(out, "KILN_REMOTE_CONNECT_TIMEOUT", 600, 5);
}

kiln_status kiln_param_remote_timeout_s(double *out) {
  return env_seconds(out, "KILN_REMOTE_TIMEOUT", 3600, 60);
}

kiln_status kiln_param_remote_retries(int *out) {
  return env_int(out, "KILN_REMOTE_RETRIES", 0, 10, 2);
}

kiln_status kiln_param_remote_parallel(int *out) {
  return env_int(out, "KILN_REMOTE_PARALLEL", 1, 256, 16);
}
