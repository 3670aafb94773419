/* Internal: libcuda, loaded with dlopen into one function table.
 *
 * cuda.h supplies the types only (it is a header of the toolkit, like
 * nvrtc.h); every entry point is fetched through cuGetProcAddress at the ABI
 * of CUDA 12.0, so the `kiln` binary and libkiln start on machines with no
 * driver at all. KILN_CUDA_LIBRARY names another library to load (a test
 * double: tests/fakecuda). */
#ifndef KILN_LOADER_DRIVER_H
#define KILN_LOADER_DRIVER_H

#include <cuda.h>

#include "kiln/loader.h"
#include "kiln/status.h"

typedef struct kiln_cuda_api {
  char path[256];
  int driver_version;
  CUresult (*Init)(unsigned int);
  CUresult (*DriverGetVersion)(int *);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*DeviceTotalMem)(size_t *, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*CtxGetDevice)(CUdevice *);
  CUresult (*CtxSynchronize)(void);
  CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void **, void **);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*StreamSynchronize)(CUstream);
  /* The NCCL transport (loader/coord_nccl.c): copies on the caller's stream
   * around a collective, a pinned host bounce buffer so that the copy back
   * is asynchronous too, and polling instead of a blocking wait. */
  CUresult (*StreamQuery)(CUstream);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemAllocHost)(void **, size_t);
  CUresult (*MemFreeHost)(void *);
  CUresult (*EventCreate)(CUevent *, unsigned int);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
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
