/* One unit, one target: NVRTC with the unit's files as in-memory headers. */
#include "compiler/compile.h"
#include "common/clock.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/params.h"
#include "compiler/nvrtc.h"

#define MAX_OPTS 32
#define MAX_FILES 64

static int max_i(int a, int b) {
  return a > b ? a : b;
}

void kiln_parse_resources(kiln_resources *res, const char *log) {
  const char *p = log;
  memset(res, 0, sizeof *res);
  while (p && *p) {
    const char *eol = strchr(p, '\n');
    const char *s;
    int a, b, c;
    if ((s = strstr(p, "bytes stack frame")) && (!eol || s < eol)) {
      /* ".     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" */
      const char *d = p;
      while (*d && (*d < '0' || *d > '9'))
        d++;
      if (sscanf(d, "%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &a, &b,
                 &c) == 3) {
        res->stack_bytes = max_i(res->stack_bytes, a);
        res->spill_stores += b;
        res->spill_loads += c;
        res->functions++;
      }
    }
    if ((s = strstr(p, "Used ")) && (!eol || s < eol) && sscanf(s, "Used %d registers", &a) == 1)
      res->registers = max_i(res->registers, a);
    if ((s = strstr(p, " bytes smem")) && (!eol || s < eol)) {
      const char *d = s;
      while (d > p && d[-1] >= '0' && d[-1] <= '9')
        d--;
      if (sscanf(d, "%d", &a) == 1) res->shared_bytes = max_i(res->shared_bytes, a);
    }
    p = eol ? eol + 1 : NULL;
  }
}

/* Splits options on spaces into argv (pointers into buf). */
static kiln_status split_options(char *buf, const char **argv, int *argc) {
  char *save = NULL;
  for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
    if (*argc >= MAX_OPTS - 1) return kiln_fail(KILN_EINVAL, "too many compile options");
    argv[(*argc)++] = t;
  }
  return KILN_OK;
}

static kiln_status fetch_log(const kiln_nvrtc_api *api, nvrtcProgram prog, kiln_artifact *out) {
  size_t n = 0;
  if (api->GetProgramLogSize(prog, &n) != NVRTC_SUCCESS) n = 0;
  out->log = calloc(n + 1, 1);
  if (!out->log) return kiln_fail(KILN_ENOMEM, "out of memory");
  if (n && api->GetProgramLog(prog, out->log) != NVRTC_SUCCESS) out->log[0] = '\0';
  out->log_len = strlen(out->log);
  return KILN_OK;
}

static kiln_status fetch_code(const kiln_nvrtc_api *api, nvrtcProgram prog, int ptx,
                              kiln_artifact *out) {
  kiln_status rc = KILN_OK;
  size_t n = 0;
  NVRTC_CHECK(api, ptx ? api->GetPTXSize(prog, &n) : api->GetCUBINSize(prog, &n), "get code size");
  out->data = malloc(n ? n : 1);
  if (!out->data) return kiln_fail(KILN_ENOMEM, "out of memory");
  out->size = n;
  NVRTC_CHECK(api,
              ptx ? api->GetPTX(prog, (char *)out->data) : api->GetCUBIN(prog, (char *)out->data),
              "get code");
  /* PTX is stored as text without NVRTC's terminating NUL. */
  if (ptx && out->size && out->data[out->size - 1] == '\0') out->size--;
out:
  return rc;
}

/* The main file's text; under the test hook KILN_TEST_INJECT_COMPILE_ERROR a
 * matching unit gets a line NVRTC rejects, so failure paths see a real log. */
static kiln_status main_source(const kiln_unit_info *unit, char **out) {
  const char *glob = kiln_param_test_inject_compile_error();
  const char *bad = "";
  size_t n = unit->main_file->size;
  if (glob && fnmatch(glob, unit->name, 0) == 0)
    bad = "kiln_injected_compile_error; /* KILN_TEST_INJECT_COMPILE_ERROR */\n";
  *out = malloc(strlen(bad) + n + 1);
  if (!*out) return kiln_fail(KILN_ENOMEM, "out of memory");
  memcpy(*out, bad, strlen(bad));
  memcpy(*out + strlen(bad), unit->main_file->data, n);
  (*out)[strlen(bad) + n] = '\0';
  return KILN_OK;
}

/* The PTX's copy of a paired compile's log: what NVRTC says before ptxas
 * runs, which is the whole log of a compile for compute_XY. */
static kiln_status ptx_log(const kiln_artifact *cubin, kiln_artifact *ptx) {
  const char *log = cubin->log ? cubin->log : "", *p = log;
  size_t n = strlen(log);
  while (*p) {
    if (strncmp(p, "ptxas", 5) == 0) {
      n = (size_t)(p - log);
      break;
    }
    p = strchr(p, '\n');
    if (!p) break;
    p++;
  }
  ptx->log = strndup(log, n);
  if (!ptx->log) return kiln_fail(KILN_ENOMEM, "out of memory");
  ptx->log_len = n;
  return KILN_OK;
}

kiln_status kiln_compile_unit(kiln_artifact *out, const kiln_unit_info *unit,
                              const kiln_target *target, const char *options) {
  return kiln_compile_unit_pair(out, NULL, unit, target, options);
}

kiln_status kiln_compile_unit_pair(kiln_artifact *out, kiln_artifact *ptx,
                                   const kiln_unit_info *unit, const kiln_target *target,
                                   const char *options) {
  const kiln_nvrtc_api *api;
  const char *argv[MAX_OPTS], *hdr_src[MAX_FILES], *hdr_name[MAX_FILES];
  char opt_buf[1024], arch[32], tname[16], what[160];
  nvrtcProgram prog = NULL;
  char *src = NULL;
  int argc = 0, nh = 0, delay = 0;
  double t0 = kiln_clock_ms();
  nvrtcResult cr;
  kiln_status rc;

  memset(out, 0, sizeof *out);
  if (ptx) memset(ptx, 0, sizeof *ptx);
  if (ptx && target->kind != KILN_TARGET_CUBIN)
    return kiln_fail(KILN_EINVAL, "a paired compile starts from a CUBIN target");
  KILN_CHECK(kiln_nvrtc_get(&api));
  KILN_CHECK(kiln_param_test_compile_delay_ms(&delay));
  if (delay > 0) {
    struct timespec ts = {delay / 1000, (long)(delay % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  kiln_target_name(target, tname);
  snprintf(what, sizeof what, "%s for %s", unit->name, tname);
  if (snprintf(opt_buf, sizeof opt_buf, "%s", options ? options : "") >= (int)sizeof opt_buf) {
    rc = kiln_fail(KILN_EINVAL, "compile options too long");
    goto out;
  }
  KILN_CHECK(split_options(opt_buf, argv, &argc));
  snprintf(arch, sizeof arch, "-arch=%s", tname);
  argv[argc++] = arch;
  for (size_t i = 0; i < unit->n_files; i++) {
    const kiln_source_file *f = unit->files[i];
    if (f == unit->main_file) continue;
    if (nh == MAX_FILES) {
      rc = kiln_fail(KILN_EINVAL, "%s: too many header files", unit->name);
      goto out;
    }
    /* NVRTC wants NUL-terminated text; the embedded files carry a NUL past size. */
    hdr_src[nh] = (const char *)f->data;
    hdr_name[nh++] = f->path;
  }
  KILN_CHECK(main_source(unit, &src));
  NVRTC_CHECK(api, api->CreateProgram(&prog, src, unit->main_file->path, nh, hdr_src, hdr_name),
              what);
  cr = api->CompileProgram(prog, argc, argv);
  KILN_CHECK(fetch_log(api, prog, out));
  if (cr != NVRTC_SUCCESS) {
    rc = kiln_fail(KILN_ECOMPILE, "%s: %s", what, api->GetErrorString(cr));
    goto out;
  }
  KILN_CHECK(fetch_code(api, prog, target->kind == KILN_TARGET_PTX, out));
  if (target->kind == KILN_TARGET_PTX) {
    memset(&out->res, 0xff, sizeof out->res); /* -1: ptxas did not run */
  } else {
    kiln_parse_resources(&out->res, out->log);
  }
  if (ptx) {
    /* NVRTC keeps the PTX it gave ptxas: the same bytes a compile for
     * compute_XY returns (tests/unit/test_compiler_compile.c checks it). */
    KILN_CHECK(fetch_code(api, prog, 1, ptx));
    KILN_CHECK(ptx_log(out, ptx));
    memset(&ptx->res, 0xff, sizeof ptx->res);
  }
  out->ms = kiln_clock_ms() - t0;
  if (ptx) ptx->ms = out->ms;
out:
  if (prog) api->DestroyProgram(&prog);
  free(src);
  if (rc != KILN_OK && ptx) kiln_artifact_free(ptx);
  return rc;
}

void kiln_artifact_free(kiln_artifact *a) {
  if (!a) return;
  free(a->data);
  free(a->log);
  memset(a, 0, sizeof *a);
}
