/* Internal: libcuda, loaded with dlopen into one function table.
 *
 * common/gpu_abi.h supplies the types (no CUDA toolkit is needed to build
 * kiln); common/gpu_libs.c finds the library (KILN_CUDA_LIBRARY names another
 * one to load: a test double, tests/fakecuda); every entry point of
 * common/cuda_syms.def is fetched through cuGetProcAddress at the ABI of CUDA
 * 12.0, so the `kiln` binary and libkiln start on machines with no driver at
 * all. */
#ifndef KILN_LOADER_DRIVER_H
#define KILN_LOADER_DRIVER_H

#include "common/gpu_abi.h"
#include "common/gpu_libs.h"
#include "kiln/loader.h"
#include "kiln/status.h"

typedef struct kiln_cuda_api {
  kiln_gpu_lib lib; /* the library loaded, and how it was found */
  int driver_version;
  // clang-format off
#define KILN_SYM(ret, name, params) ret(*name) params;
#include "common/cuda_syms.def"
#undef KILN_SYM
  // clang-format on
} kiln_cuda_api;

/* The table, loaded and cuInit'ed once per process. KILN_EDRIVER with the
 * reason (no libcuda, too old, cuInit failed: no device, ...) otherwise. */
kiln_status kiln_cuda(const kiln_cuda_api **out);

/* Records a failed driver call: KILN_EDRIVER "<what>: CUDA_ERROR_X (text)". */
kiln_status kiln_cuda_fail(CUresult r, const char *what);

/* Calls a driver function; on failure records it and goto out. */
#define CU_CHECK(call, what)                                                                       \
  do {                                                                                             \
    CUresult cu_r_ = (call);                                                                       \
    if (cu_r_ != CUDA_SUCCESS) {                                                                   \
      rc = kiln_cuda_fail(cu_r_, what);                                                            \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

/* "CUDA_ERROR_INVALID_IMAGE" (or the number when the driver has no name). */
const char *kiln_cuda_error_name(CUresult r);

#endif
