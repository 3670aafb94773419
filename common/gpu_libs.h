/* Internal: finding and opening libcuda, libnvrtc and libnccl, and binding
 * their entry points into a function table. One set of rules for all three
 * (docs/install.md, "Where kiln finds the GPU libraries"):
 *
 *   - KILN_CUDA_LIBRARY / KILN_NVRTC_LIBRARY / KILN_NCCL_LIBRARY, when set,
 *     name the only file tried: if it cannot be loaded, or is not that
 *     library, the error names it (KILN_EINVAL), with dlerror().
 *   - Otherwise the first of these that holds the library's file is loaded:
 *       1. NVIDIA's wheels (site-packages/nvidia/<dir>/lib) of the Python
 *          next to kiln: KILN_PYTHON_PREFIX (the Python package sets it to
 *          sys.prefix), the prefix of the running executable (a venv's
 *          bin/kiln), VIRTUAL_ENV, CONDA_PREFIX;
 *       2. CUDA_HOME, then CUDA_PATH: lib64, lib, targets/<arch>/lib;
 *       3. /usr/local/cuda: lib64, lib, targets/<arch>/lib;
 *       4. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache).
 *     A file found at one step and failing to load is an error naming it,
 *     never a silent step to the next.
 *
 * Each library's entry points are listed once, in common/<lib>_syms.def
 * (X-macro rows KILN_SYM(ret, name, params)); the module that owns the
 * library declares its table from that list and binds it here. */
#ifndef KILN_COMMON_GPU_LIBS_H
#define KILN_COMMON_GPU_LIBS_H

#include <stddef.h>

#include "kiln/status.h"

typedef enum kiln_gpu_lib_id {
  KILN_GPU_LIB_CUDA,
  KILN_GPU_LIB_NVRTC,
  KILN_GPU_LIB_NCCL
} kiln_gpu_lib_id;

typedef struct kiln_gpu_lib {
  void *handle;
  char path[512];     /* the file loaded: its full path as the dynamic loader resolved it */
  char found_by[600]; /* how: "KILN_NVRTC_LIBRARY", "NVIDIA's wheels in /venv", ... */
  int named;          /* 1: the variable named it */
} kiln_gpu_lib;

/* Opens the library by the rules above into *out. On failure the error names
 * what was tried: KILN_EINVAL for a named file (or one found) that will not
 * load; else the library's own "not found" status: KILN_EDRIVER (libcuda),
 * KILN_ENONVRTC (libnvrtc), KILN_ENOTFOUND (libnccl). */
kiln_status kiln_gpu_lib_open(kiln_gpu_lib *out, kiln_gpu_lib_id id);

/* The library's name in messages ("NVRTC") and its variable ("KILN_NVRTC_LIBRARY"). */
const char *kiln_gpu_lib_name(kiln_gpu_lib_id id);
const char *kiln_gpu_lib_variable(kiln_gpu_lib_id id);

/* One entry point of a table: its exported name and where its pointer goes. */
typedef struct kiln_gpu_sym {
  const char *name;
  size_t offset;
  int required;
} kiln_gpu_sym;

/* Looks up one exported symbol (dlsym, or libcuda's cuGetProcAddress). */
typedef void *(*kiln_gpu_resolver)(void *ctx, const char *name);

/* Fills the function pointers of `table` (a struct) named by syms, with
 * resolve(ctx, name), or dlsym on lib->handle when resolve is NULL. A missing
 * required symbol fails, naming the file and the symbol ("... is not NVRTC"):
 * KILN_EINVAL when the variable named the file, else the library's "not found"
 * status. Optional ones stay NULL. */
kiln_status kiln_gpu_lib_bind(void *table, const kiln_gpu_sym *syms, size_t n,
                              const kiln_gpu_lib *lib, kiln_gpu_lib_id id,
                              kiln_gpu_resolver resolve, void *ctx);

#endif
