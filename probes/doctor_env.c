/* kiln doctor's environment checks: unknown KILN_* names, and timeouts that
 * turn a slow start-up (a cold build) into a job failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "kiln/log.h"
#include "probes/doctor.h"

extern char **environ;

/* Every KILN_* variable kiln reads: the rows of common/params.def. */
static const char *const known[] = {
#define KILN_PARAM_INT(id, name, dflt, lo, hi, what) name,
#define KILN_PARAM_SECONDS(id, name, dflt, hi, what) name,
#define KILN_PARAM_STR(id, name, what) name,
#define KILN_PARAM_LOG(id, name, what) name,
#define KILN_PARAM_EXTERN(id, name, what) /* not KILN_* */
#include "common/params.def"
#undef KILN_PARAM_INT
#undef KILN_PARAM_SECONDS
#undef KILN_PARAM_STR
#undef KILN_PARAM_LOG
#undef KILN_PARAM_EXTERN
};
/* Test hooks (KILN_TEST_*) and the fake libcuda/libnccl's (KILN_FAKE_*). */
static const char *const known_prefixes[] = {"KILN_TEST_", "KILN_FAKE_"};

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b), prev[64], cur[64];
  if (la >= 63 || lb >= 63) return 99;
  for (size_t j = 0; j <= lb; j++)
    prev[j] = j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t d = prev[j - 1] + (a[i - 1] != b[j - 1]);
      if (prev[j] + 1 < d) d = prev[j] + 1;
      if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;
      cur[j] = d;
    }
    memcpy(prev, cur, sizeof prev);
  }
  return prev[lb];
}

void doctor_env_names(kiln_doctor_report *r) {
  char bad[512] = "", fix[512] = "";
  size_t nb = 0, nf = 0, n = 0;
  for (char **e = environ; e && *e; e++) {
    char name[64];
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e), best = 99, bi = 0;
    int ok = 0;
    if (strncmp(*e, "KILN_", 5) != 0 || len >= sizeof name) continue;
    memcpy(name, *e, len);
    name[len] = '\0';
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
      size_t d = edit_distance(name, known[i]);
      ok |= d == 0;
      if (d < best) best = d, bi = i;
    }
    for (size_t i = 0; i < sizeof known_prefixes / sizeof *known_prefixes; i++)
      ok |= strncmp(name, known_prefixes[i], strlen(known_prefixes[i])) == 0;
    if (ok) continue;
    n++;
    if (nb < sizeof bad)
      nb += (size_t)snprintf(bad + nb, sizeof bad - nb, "%s%s", nb ? ", " : "", name);
    if (nf < sizeof fix)
      nf += (size_t)snprintf(fix + nf, sizeof fix - nf, "%s%s", nf ? "; " : "",
                             best <= 3 ? "" : "unset ");
    if (nf < sizeof fix)
      nf += best <= 3
                ? (size_t)snprintf(fix + nf, sizeof fix - nf, "rename %s to %s", name, known[bi])
                : (size_t)snprintf(fix + nf, sizeof fix - nf, "%s (kiln does not read it)", name);
  }
  if (n)
    doctor_add(r, "env", KILN_DOCTOR_WARN, fix, "%zu KILN_* variable(s) kiln does not know: %s", n,
               bad);
  else
    doctor_add(r, "env", KILN_DOCTOR_PASS, NULL, "every KILN_* variable set is one kiln reads");
}

/* Parses every kiln setting that has a parser: the first malformed one. */
static int kiln_settings_ok(kiln_doctor_report *r) {
  double d;
  int i;
  const char *s;
  kiln_log_level lv;
  kiln_status st = KILN_OK;
  const char *var = NULL;
#define TRY(v, call)                                                                               \
  if (st == KILN_OK && (st = (call)) != KILN_OK && st != KILN_ENOTFOUND)                           \
    var = v;                                                                                       \
  else if (st == KILN_ENOTFOUND)                                                                   \
  st = KILN_OK
  TRY("KILN_LOG", kiln_log_env_level(&lv) == KILN_EINVAL
                      ? kiln_fail(KILN_EINVAL, "KILN_LOG: '%s' is not one of error|warn|info|debug",
                                  getenv("KILN_LOG"))
                      : KILN_OK);
  TRY("KILN_LEASE_STALE", kiln_param_lease_stale_s(&d));
  TRY("KILN_BUILD_TIMEOUT", kiln_param_build_timeout_s(&d));
  TRY("KILN_JOBS", kiln_param_jobs(&i));
  TRY("KILN_FAILURE_TTL", kiln_param_failure_ttl(&i));
  TRY("KILN_NVRTC_OPTIONS", kiln_param_nvrtc_options_checked(&s));
  TRY("KILN_HEARTBEAT_MS", kiln_param_heartbeat_ms(&i));
  TRY("KILN_REMOTE_UPLOAD", kiln_param_remote_upload(&i));
  TRY("KILN_REMOTE_CONNECT_TIMEOUT", kiln_param_remote_connect_timeout_s(&d));
  TRY("KILN_REMOTE_TIMEOUT", kiln_param_remote_timeout_s(&d));
  TRY("KILN_REMOTE_RETRIES", kiln_param_remote_retries(&i));
  TRY("KILN_REMOTE_PARALLEL", kiln_param_remote_parallel(&i));
#undef TRY
  if (!var) return 1;
  {
    char fix[256];
    snprintf(fix, sizeof fix, "set %s to a valid value or unset it (docs/operations.md)", var);
    doctor_add(r, "timeouts", KILN_DOCTOR_FAIL, fix, "%s is malformed: %s", var, kiln_last_error());
  }
  return 0;
}

/* An integer environment variable, or -1 when unset or not a number. */
static long env_long(const char *name) {
  const char *v = getenv(name);
  char *end = NULL;
  long x;
  if (!v || !*v) return -1;
  x = strtol(v, &end, 10);
  return *end || x < 0 ? -1 : x;
}

void doctor_timeouts(kiln_doctor_report *r) {
  double build_s;
  int hb_ms; /* on a malformed value, the getters give the default */
  long watchdog = env_long("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC");
  const char *mon = getenv("TORCH_NCCL_ENABLE_MONITORING");
  char fix[512] = "";
  char sum[768];
  int warn = 0;
  size_t nf = 0;
  if (!kiln_settings_ok(r)) return;
  kiln_param_build_timeout_s(&build_s);
  kiln_param_heartbeat_ms(&hb_ms);
  snprintf(sum, sizeof sum, "KILN_BUILD_TIMEOUT %.0f s, KILN_HEARTBEAT_MS %d", build_s, hb_ms);
  if (build_s < 120) {
    warn = 1;
    nf += (size_t)snprintf(fix + nf, sizeof fix - nf,
                           "raise KILN_BUILD_TIMEOUT to at least 600 (a cold build takes minutes)");
  }
  /* PyTorch's heartbeat monitor aborts the process when its NCCL watchdog
   * thread makes no progress for this long (default 480 s); a PTX JIT or a
   * build holding the CUDA context at start-up can be that stall. */
  if (mon && strcmp(mon, "0") == 0) watchdog = -1; /* the heartbeat monitor is off */
  if (watchdog >= 0) {
    size_t ls = strlen(sum);
    snprintf(sum + ls, sizeof sum - ls, ", TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC %ld s", watchdog);
    if (watchdog < 120 && nf < sizeof fix) {
      warn = 1;
      nf += (size_t)snprintf(fix + nf, sizeof fix - nf,
                             "%sraise TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (default 480) above a cold "
                             "start-up, or run `kiln warmup` before the process group starts",
                             nf ? "; " : "");
    }
    if ((long)hb_ms >= watchdog * 1000 / 2 && nf < sizeof fix) {
      warn = 1;
      nf += (size_t)snprintf(fix + nf, sizeof fix - nf,
                             "%slower KILN_HEARTBEAT_MS well below the watchdog (default 500)",
                             nf ? "; " : "");
    }
  }
  if (warn)
    doctor_add(r, "timeouts", KILN_DOCTOR_WARN, fix,
               "%s: may kill a job whose start-up waits for a build", sum);
  else
    doctor_add(r, "timeouts", KILN_DOCTOR_PASS, NULL, "%s", sum);
}
