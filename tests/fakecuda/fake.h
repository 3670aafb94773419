/* fake.h — internal to tests/fakecuda: the state the fake driver's files
 * share. One mutex (lock()) guards all of it; it is held for the whole of
 * every call, launches included (the emulator runs one launch at a time per
 * process anyway). Only the current-context stack is per thread, unlocked.
 *
 * Handles (CUmodule, CUfunction, CUevent) are numbers from one counter, never
 * pointers and never reused, so a stale or mistyped handle is an
 * INVALID_HANDLE, not a crash or a hit on a newer object. */
#ifndef KILN_FAKECUDA_FAKE_H
#define KILN_FAKECUDA_FAKE_H

#include "common/gpu_abi.h" /* CUresult and the handle types, as cuda.h spells them */
#include <stdint.h>         /* uintptr_t */

#include <mutex>  /* std::mutex */
#include <string> /* std::string */
#include <vector> /* std::vector */

namespace kiln_fake {

/* ---- configuration (environment, read once at the first cuInit or
 * cuDriverGetVersion) ---------------------------------------------------- */

enum reject { kRejectNone, kRejectAll, kRejectCubin, kRejectPtx };

struct device {
  int major, minor;
};

struct config {
  std::string error;           /* non-empty: a bad value; cuInit fails */
  std::vector<device> devices; /* KILN_FAKE_CUDA_DEVICES */
  int driver;                  /* KILN_FAKE_CUDA_DRIVER */
  int ptx_isa;                 /* the highest PTX ISA (x10) that driver JITs */
  int reject;                  /* KILN_FAKE_CUDA_REJECT */
  bool have_wrong;
  std::string wrong; /* KILN_FAKE_CUDA_WRONG: fnmatch glob over entry names */
  int log_fd;        /* KILN_FAKE_CUDA_LOG, or -1 */
  bool host_memory;  /* KILN_FAKE_CUDA_HOST_MEMORY=1: a range outside every allocation is
                        the caller's host memory (the Python tests' CPU tensors) */
};

const config &cfg();

/* One line to KILN_FAKE_CUDA_LOG (no newline in fmt): one write(2), so lines
 * of many processes sharing the file never interleave. */
void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "CUDA_ERROR_INVALID_IMAGE"; "CUDA_ERROR_<number>" for one it does not know. */
const char *error_name(CUresult r);

/* ---- state ----------------------------------------------------------------- */

std::mutex &lock();

/* CUDA_SUCCESS once cuInit succeeded, CUDA_ERROR_NOT_INITIALIZED before. */
CUresult initialized();

/* A device's primary context. The handle is a pointer into a fixed array;
 * refs == 0: inactive (released to zero, or never retained). */
struct context {
  int device;
  int refs;
  CUresult sticky; /* a failed launch poisons the context until it is destroyed */
};

/* The calling thread's current context, active and not poisoned; otherwise
 * INVALID_CONTEXT (none), CONTEXT_IS_DESTROYED (released) or the sticky
 * error. Call with lock() held. */
CUresult current(context **out);

/* The context behind a handle, or NULL when it is not one of ours. */
context *context_of(CUcontext c);

/* A new handle value: distinct across every kind and never reused. */
uintptr_t next_handle();

/* Drops what a context owned when it is destroyed (lock held). */
void memory_drop_context(const context *c);
void modules_drop_context(const context *c);
void events_drop_context(const context *c);

/* True when [p, p + n) lies inside one live allocation (of context c, when c
 * is not NULL), or, with KILN_FAKE_CUDA_HOST_MEMORY=1, overlaps none (host
 * memory the caller owns). Lock held. */
bool memory_covers(uintptr_t p, unsigned long long n, const context *c);

/* KILN_FAKE_CUDA_CAPTURE=1 (read on every call): every stream is capturing a
 * CUDA graph in global mode. A module load then fails and invalidates the
 * capture (capture_invalidate), as on the real driver, until a call sees the
 * knob off: the capture has ended. Lock held. */
CUstreamCaptureStatus capture_status();
void capture_invalidate();

/* The driver entry points, with the signatures of loader/driver.h's table
 * (CUDA 12.0's). Defined across fake_*.cpp; fake_libcuda.cpp hands them out
 * through cuGetProcAddress. */
CUresult fake_Init(unsigned int flags);
CUresult fake_DriverGetVersion(int *v);
CUresult fake_GetErrorName(CUresult r, const char **s);
CUresult fake_GetErrorString(CUresult r, const char **s);
CUresult fake_DeviceGetCount(int *n);
CUresult fake_DeviceGet(CUdevice *d, int ordinal);
CUresult fake_DeviceGetName(char *name, int len, CUdevice d);
CUresult fake_DeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d);
CUresult fake_DeviceTotalMem(size_t *bytes, CUdevice d);
CUresult fake_DevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult fake_DevicePrimaryCtxRelease(CUdevice d);
CUresult fake_CtxGetCurrent(CUcontext *c);
CUresult fake_CtxPushCurrent(CUcontext c);
CUresult fake_CtxPopCurrent(CUcontext *c);
CUresult fake_CtxGetDevice(CUdevice *d);
CUresult fake_CtxSynchronize();
CUresult fake_ModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *opts,
                               void **values);
CUresult fake_ModuleUnload(CUmodule m);
CUresult fake_ModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult fake_LaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                           void **extra);
CUresult fake_MemAlloc(CUdeviceptr *p, size_t bytes);
CUresult fake_MemFree(CUdeviceptr p);
CUresult fake_MemcpyHtoD(CUdeviceptr dst, const void *src, size_t n);
CUresult fake_MemcpyDtoH(void *dst, CUdeviceptr src, size_t n);
CUresult fake_MemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult fake_MemsetD8(CUdeviceptr dst, unsigned char v, size_t n);
CUresult fake_StreamSynchronize(CUstream s);
CUresult fake_StreamQuery(CUstream s);
CUresult fake_MemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult fake_MemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult fake_MemAllocHost(void **p, size_t bytes);
CUresult fake_MemFreeHost(void *p);
CUresult fake_EventCreate(CUevent *e, unsigned int flags);
CUresult fake_EventDestroy(CUevent e);
CUresult fake_EventRecord(CUevent e, CUstream s);
CUresult fake_EventSynchronize(CUevent e);
CUresult fake_EventElapsedTime(float *ms, CUevent start, CUevent end);
CUresult fake_StreamIsCapturing(CUstream s, CUstreamCaptureStatus *status);

} // namespace kiln_fake

#endif /* KILN_FAKECUDA_FAKE_H */
