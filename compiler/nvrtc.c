/* dlopen of libnvrtc into one function table, filled once. */
#include "compiler/nvrtc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "kiln/target.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static kiln_nvrtc_api api;
static kiln_status load_rc = KILN_ENONVRTC;
static char load_error[512];

#define SYM(name)                                                                                  \
  do {                                                                                             \
    *(void **)(&api.name) = dlsym(h, "nvrtc" #name);                                               \
    if (!api.name) {                                                                               \
      snprintf(load_error, sizeof load_error, "%s lacks nvrtc" #name, api.path);                   \
      return KILN_ENONVRTC;                                                                        \
    }                                                                                              \
  } while (0)

static kiln_status fill(void *h) {
  SYM(GetErrorString);
  SYM(Version);
  SYM(GetNumSupportedArchs);
  SYM(GetSupportedArchs);
  SYM(CreateProgram);
  SYM(DestroyProgram);
  SYM(CompileProgram);
  SYM(GetPTXSize);
  SYM(GetPTX);
  SYM(GetCUBINSize);
  SYM(GetCUBIN);
  SYM(GetLTOIRSize);
  SYM(GetLTOIR);
  SYM(GetProgramLogSize);
  SYM(GetProgramLog);
  if (api.Version(&api.major, &api.minor) != NVRTC_SUCCESS) {
    snprintf(load_error, sizeof load_error, "%s: nvrtcVersion failed", api.path);
    return KILN_ENONVRTC;
  }
  return KILN_OK;
}

static void load(void) {
  /* An explicit library wins; then the soname of the toolkit kiln was built
   * against, then the unversioned name, then the toolkit's own directory. */
  const char *candidates[] = {kiln_param_nvrtc_library(), "libnvrtc.so." KILN_NVRTC_SOVERSION,
                              "libnvrtc.so", KILN_CUDA_LIBDIR "/libnvrtc.so"};
  char tried[384] = "";
  for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
    void *h;
    const char *c = candidates[i];
    if (!c || !*c) continue;
    h = dlopen(c, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      size_t n = strlen(tried);
      snprintf(tried + n, sizeof tried - n, "%s%s", n ? ", " : "", c);
      continue;
    }
    snprintf(api.path, sizeof api.path, "%s", c);
    load_rc = fill(h);
    if (load_rc == KILN_OK) {
      kiln_log(KILN_LOG_DEBUG, "loaded NVRTC %d.%d from %s", api.major, api.minor, c);
      return;
    }
    dlclose(h);
  }
  if (!load_error[0])
    snprintf(load_error, sizeof load_error,
             "NVRTC not found (tried %s); install the CUDA toolkit's NVRTC or set "
             "KILN_NVRTC_LIBRARY to libnvrtc.so's path",
             tried);
}

kiln_status kiln_nvrtc_get(const kiln_nvrtc_api **out) {
  pthread_once(&once, load);
  if (load_rc != KILN_OK) return kiln_fail(KILN_ENONVRTC, "%s", load_error);
  *out = &api;
  return KILN_OK;
}

kiln_status kiln_nvrtc_version(int *major, int *minor) {
  const kiln_nvrtc_api *a;
  kiln_status rc = kiln_nvrtc_get(&a);
  if (rc != KILN_OK) return rc;
  *major = a->major;
  *minor = a->minor;
  return KILN_OK;
}

kiln_status kiln_toolchain_id(char out[32]) {
  int ma, mi;
  kiln_status rc = kiln_nvrtc_version(&ma, &mi);
  if (rc != KILN_OK) return rc;
  snprintf(out, 32, "nvrtc-%d.%d", ma, mi);
  return KILN_OK;
}

kiln_status kiln_nvrtc_supported_archs(int **out, size_t *n) {
  const kiln_nvrtc_api *a;
  int count = 0, *archs;
  kiln_status rc = kiln_nvrtc_get(&a);
  if (rc != KILN_OK) return rc;
  if (a->GetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0)
    return kiln_fail(KILN_ENONVRTC, "nvrtcGetNumSupportedArchs failed");
  archs = calloc((size_t)count, sizeof *archs);
  if (!archs) return kiln_fail(KILN_ENOMEM, "out of memory");
  if (a->GetSupportedArchs(archs) != NVRTC_SUCCESS) {
    free(archs);
    return kiln_fail(KILN_ENONVRTC, "nvrtcGetSupportedArchs failed");
  }
  *out = archs;
  *n = (size_t)count;
  return KILN_OK;
}
