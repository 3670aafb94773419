/* Internal: every KILN_* environment variable is read here, and only here.
 * Bad values are errors (with the variable named), never silently ignored. */
#ifndef KILN_COMMON_PARAMS_H
#define KILN_COMMON_PARAMS_H

#include <stddef.h>

#include "kiln/log.h"
#include "kiln/status.h"

/* KILN_LOG: error|warn|info|debug. KILN_ENOTFOUND when unset. */
kiln_status kiln_param_log_level(kiln_log_level *out);
/* The primary cache directory: KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln,
 * else $HOME/.cache/kiln. */
kiln_status kiln_param_cache_dir(char *out, size_t cap);
/* KILN_CACHE_PATH (colon-separated read-only layers) or NULL when unset. */
const char *kiln_param_cache_path(void);
/* KILN_NVRTC_LIBRARY: an explicit libnvrtc to load, or NULL. */
const char *kiln_param_nvrtc_library(void);
/* KILN_CUDA_LIBRARY: an explicit libcuda to load, or NULL. */
const char *kiln_param_cuda_library(void);
/* KILN_NCCL_LIBRARY: an explicit libnccl to load (the NCCL transport), or NULL. */
const char *kiln_param_nccl_library(void);
/* KILN_OFFLINE: 1 forbids builds in the loader (default 0). */
kiln_status kiln_param_offline(int *out);
/* KILN_LEASE_STALE: seconds after which a build lease nobody renews is taken
 * over (default 30). */
kiln_status kiln_param_lease_stale_s(double *out);
/* KILN_BUILD_TIMEOUT: longest wait for one build, in seconds (default 1800). */
kiln_status kiln_param_build_timeout_s(double *out);
/* KILN_JOBS: positive integer, or 0 when unset. */
kiln_status kiln_param_jobs(int *out);
/* KILN_FAILURE_TTL: seconds a failed compile is remembered (default 600). */
kiln_status kiln_param_failure_ttl(int *out);
/* KILN_NVRTC_OPTIONS: extra NVRTC options for every build (e.g. "-lineinfo"),
 * space-separated, each starting with '-'; they go into the cache key. NULL
 * when unset; KILN_EINVAL for a malformed value. */
kiln_status kiln_param_nvrtc_options(const char **out);
/* KILN_HEARTBEAT_MS: the coordination root's status frame period (default 500). */
kiln_status kiln_param_heartbeat_ms(int *out);
/* KILN_TEST_COMPILE_DELAY_MS: test-only hook, sleeps before each compile. */
kiln_status kiln_param_test_compile_delay_ms(int *out);

/* KILN_TEST_INJECT_COMPILE_ERROR: test-only hook, a unit-name glob whose
 * compiles fail with a real NVRTC error (or NULL). */
const char *kiln_param_test_inject_compile_error(void);

/* The remote cache (include/kiln/remote.h). Strings are NULL when unset or
 * empty. KILN_REMOTE_UPLOAD 0|1 (default 0); KILN_REMOTE_CONNECT_TIMEOUT
 * (default 5 s) and KILN_REMOTE_TIMEOUT (one request, default 60 s), in
 * seconds; KILN_REMOTE_RETRIES 0..10 (default 2); KILN_REMOTE_PARALLEL
 * 1..256 (default 16). */
const char *kiln_param_remote_url(void);
const char *kiln_param_remote_token_file(void);
const char *kiln_param_remote_hmac_key_file(void);
const char *kiln_param_remote_ca_file(void);
kiln_status kiln_param_remote_upload(int *out);
kiln_status kiln_param_remote_connect_timeout_s(double *out);
kiln_status kiln_param_remote_timeout_s(double *out);
kiln_status kiln_param_remote_retries(int *out);
kiln_status kiln_param_remote_parallel(int *out);

/* Parses a decimal integer in [lo, hi] (whole string). */
kiln_status kiln_parse_int(long long *out, const char *s, long long lo, long long hi,
                           const char *what);
/* kiln_parse_size is public: include/kiln/cache.h. */
#include "kiln/cache.h"

#endif
