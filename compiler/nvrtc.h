/* Internal: libnvrtc reached through one function table, loaded with dlopen
 * on first use, so kiln runs (and reports cleanly) where NVRTC is absent. */
#ifndef KILN_COMPILER_NVRTC_H
#define KILN_COMPILER_NVRTC_H

#include <nvrtc.h>

#include "kiln/status.h"

typedef struct kiln_nvrtc_api {
  const char *(*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int *, int *);
  nvrtcResult (*GetNumSupportedArchs)(int *);
  nvrtcResult (*GetSupportedArchs)(int *);
  nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                               const char *const *);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetPTX)(nvrtcProgram, char *);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
  nvrtcResult (*GetLTOIRSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetLTOIR)(nvrtcProgram, char *);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
  int major, minor;
  char path[256]; /* the library that was loaded */
} kiln_nvrtc_api;

/* The loaded table (thread-safe, loaded once). KILN_ENONVRTC when no NVRTC
 * can be loaded, naming the libraries tried and KILN_NVRTC_LIBRARY. */
kiln_status kiln_nvrtc_get(const kiln_nvrtc_api **out);

#define NVRTC_CHECK(api, call, what)                                                               \
  do {                                                                                             \
    nvrtcResult r_ = (call);                                                                       \
    if (r_ != NVRTC_SUCCESS) {                                                                     \
      rc = kiln_fail(KILN_ECOMPILE, "%s: %s", (what), (api)->GetErrorString(r_));                  \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

#endif
