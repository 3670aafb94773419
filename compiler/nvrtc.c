/* libnvrtc, found and opened by common/gpu_libs.c, into one function table
 * filled once. */
#include "compiler/nvrtc.h"

#include <dlfcn.h> /* dlsym: nvrtcVersion, before the rest */
#include <pthread.h>
#include <stddef.h> /* offsetof */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* access */

#include "common/error.h"
#include "common/gpu_libs.h"
#include "common/logging.h"
#include "kiln/target.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static kiln_nvrtc_api api;
static kiln_status load_rc = KILN_ENONVRTC;
static char load_error[1024];

static const kiln_gpu_sym syms[] = {
#define KILN_SYM(ret, name, params) {"nvrtc" #name, offsetof(kiln_nvrtc_api, name), 1},
#include "common/nvrtc_syms.def"
#undef KILN_SYM
};

/* NVRTC dlopens libnvrtc-builtins.so.X.Y by name on its first compile and
 * finds it through its own $ORIGIN run path. That fails where the dlopen
 * seems to come from elsewhere (a sanitizer's interceptor) and for a copy
 * whose run path was stripped; loading the builtins beside the library first,
 * by full path, makes NVRTC's own dlopen find them loaded. */
static void preload_builtins(void) {
  char path[sizeof api.lib.path + 64];
  const char *slash = strrchr(api.lib.path, '/');
  if (!slash) return;
  snprintf(path, sizeof path, "%.*s/libnvrtc-builtins.so.%d.%d", (int)(slash - api.lib.path),
           api.lib.path, api.major, api.minor);
  if (access(path, F_OK) != 0) return;
  if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) /* kept loaded for the process, as NVRTC keeps it */
    kiln_log(KILN_LOG_DEBUG, "NVRTC: %s did not preload: %s", path, dlerror());
}

/* The version first: an NVRTC older than kiln supports lacks some of the
 * entry points, and its version is the error to give. */
static kiln_status fill(const kiln_gpu_lib *lib) {
  nvrtcResult (*version)(int *, int *);
  *(void **)&version = dlsym(lib->handle, "nvrtcVersion");
  if (!version)
    return kiln_fail(lib->named ? KILN_EINVAL : KILN_ENONVRTC,
                     "%s (%s) has no nvrtcVersion: it is not NVRTC", api.lib.path,
                     api.lib.found_by);
  if (version(&api.major, &api.minor) != NVRTC_SUCCESS)
    return kiln_fail(KILN_EINVAL, "%s (%s): nvrtcVersion failed", api.lib.path, api.lib.found_by);
  if (api.major * 100 + api.minor < KILN_NVRTC_MIN_MAJOR * 100 + KILN_NVRTC_MIN_MINOR)
    return kiln_fail(KILN_EUNSUPPORTED,
                     "NVRTC %d.%d at %s (%s) is older than %d.%d, the oldest kiln supports; "
                     "install a newer one or name it with KILN_NVRTC_LIBRARY",
                     api.major, api.minor, api.lib.path, api.lib.found_by, KILN_NVRTC_MIN_MAJOR,
                     KILN_NVRTC_MIN_MINOR);
  preload_builtins();
  return kiln_gpu_lib_bind(&api, syms, sizeof syms / sizeof *syms, lib, KILN_GPU_LIB_NVRTC, NULL,
                           NULL);
}

static void load(void) {
  load_rc = kiln_gpu_lib_open(&api.lib, KILN_GPU_LIB_NVRTC);
  if (load_rc == KILN_OK) {
    load_rc = fill(&api.lib);
  }
  if (load_rc != KILN_OK) {
    snprintf(load_error, sizeof load_error, "%s", kiln_last_error());
    return; /* the library stays open: unloading one that failed a check gains nothing */
  }
  kiln_log(KILN_LOG_INFO, "NVRTC %d.%d from %s (%s)", api.major, api.minor, api.lib.path,
           api.lib.found_by);
}

kiln_status kiln_nvrtc_get(const kiln_nvrtc_api **out) {
  pthread_once(&once, load);
  if (load_rc != KILN_OK) return kiln_fail(load_rc, "%s", load_error);
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
