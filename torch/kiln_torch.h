/* libkiln_torch: kiln's ops as torch kernels, registered through torch's
 * stable C shim (shim.h), for kiln.torch (python/kiln/torch/_fast.py) to call
 * through ctypes. Not installed as a header: the Python package is its only
 * user. docs/python.md ("The fast path") has the design. */
#ifndef KILN_TORCH_H
#define KILN_TORCH_H

#include <stddef.h>

#include "kiln/api.h"
#include "kiln/loader.h"
#include "kiln/status.h"

/* Finds the shim in the libtorch_cpu.so and libtorch_cuda.so (NULL or not
 * loaded: no CUDA stream getter, so CPU tensors only) that `import torch`
 * loaded. 0, or -1 with the missing symbol in missing (size n): then nothing
 * else here may be called. */
KILN_API int kiln_torch_open(const char *cpu_lib, const char *cuda_lib, char *missing, size_t n);

/* The ops (comma-separated kiln:: names) this library has kernels for with
 * the shim kiln_torch_open found; "" before it. Static storage. */
KILN_API const char *kiln_torch_ops(void);

/* Whether libkiln_torch has a kernel for op name and the shim lacks what its
 * arguments need: -1 no kernel at all, 0 it has one (usable once
 * kiln_torch_open succeeded), 1 it has one that this torch cannot call, with
 * the missing shim symbols (comma-separated) in missing (size n). */
KILN_API int kiln_torch_op_missing(const char *name, char *missing, size_t n);

/* Registers the kernels of the comma-separated ops in names (a subset of
 * kiln_torch_ops()) for dispatch key ("CUDA", "CPU") in a torch::Library
 * fragment of the kiln namespace; *out is its handle, kiln_torch_unregister
 * removes them again. KILN_EINVAL for an unknown name, KILN_EINTERNAL when
 * torch refuses (kiln_last_error() cannot say more: the shim gives codes). */
KILN_API kiln_status kiln_torch_register(void **out, const char *key, const char *names);
KILN_API void kiln_torch_unregister(void *lib);

/* The loader of CUDA device dev that the kernels launch with, opened on first
 * use with opts (NULL: the defaults, KILN_LOADER_OPTIONS_INIT), the device set
 * to dev; one per device for the process, shared with kiln.torch's Python
 * path. kiln_torch_close_loaders closes every one (tests). */
KILN_API kiln_status kiln_torch_loader(kiln_loader **out, int dev, const kiln_loader_options *opts);
KILN_API void kiln_torch_close_loaders(void);
/* The loader of device dev if one is open (a kernel may have opened it), else
 * NULL; never opens one. */
KILN_API kiln_loader *kiln_torch_loader_peek(int dev);

/* The status and message of the last error a kernel raised on this thread
 * (the RuntimeError torch made of it carries the same message): 1 and cleared,
 * or 0 when none is pending. */
KILN_API int kiln_torch_take_error(int *status, char *msg, size_t n);

#endif
