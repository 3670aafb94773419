/* Internal: libnvrtc reached through one function table, loaded with dlopen
 * on first use, so kiln runs (and reports cleanly) where NVRTC is absent. */
#ifndef KILN_COMPILER_NVRTC_H
#define KILN_COMPILER_NVRTC_H

#include "common/gpu_abi.h"
#include "common/gpu_libs.h"
#include "kiln/status.h"

/* The oldest NVRTC kiln supports (docs/install.md): an older one is an error. */
#define KILN_NVRTC_MIN_MAJOR 12
#define KILN_NVRTC_MIN_MINOR 0

typedef struct kiln_nvrtc_api {
  // clang-format off
#define KILN_SYM(ret, name, params) ret(*name) params;
#include "common/nvrtc_syms.def"
#undef KILN_SYM
  // clang-format on
  int major, minor;
  kiln_gpu_lib lib; /* the library loaded, and how it was found */
} kiln_nvrtc_api;

/* The loaded table (thread-safe, loaded once, by common/gpu_libs.h's rules).
 * KILN_ENONVRTC when no NVRTC is found; KILN_EINVAL when KILN_NVRTC_LIBRARY's
 * file (or the one found) will not load or is not NVRTC; KILN_EUNSUPPORTED
 * for an NVRTC older than KILN_NVRTC_MIN_MAJOR.KILN_NVRTC_MIN_MINOR. */
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
