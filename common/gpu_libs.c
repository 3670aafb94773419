/* Finding and opening libcuda, libnvrtc and libnccl (common/gpu_libs.h). */
#include "common/gpu_libs.h"

#include <dlfcn.h>  /* dlopen, dlinfo, dlsym */
#include <glob.h>   /* glob: lib/python3.x, targets/<arch> */
#include <limits.h> /* PATH_MAX */
#include <link.h>   /* struct link_map */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* getenv */
#include <string.h> /* memcpy, strlen, strrchr */
#include <unistd.h> /* access, readlink */

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"

/* What differs between the three: everything else is one set of rules. */
typedef struct lib_spec {
  const char *name;           /* in messages */
  const char *variable;       /* the explicit file */
  const char *(*named)(void); /* its value */
  kiln_status missing;        /* found nowhere */
  const char *sonames[4];     /* tried in order in each place */
  const char *wheel_dirs[3];  /* under site-packages/nvidia/ */
} lib_spec;

static const lib_spec specs[] = {
    /* The driver is never in a wheel or the toolkit (the toolkit's lib64/stubs
     * holds a stub that cannot run anything, and is not searched). */
    [KILN_GPU_LIB_CUDA] = {"the CUDA driver (libcuda)",
                           "KILN_CUDA_LIBRARY",
                           kiln_param_cuda_library,
                           KILN_EDRIVER,
                           {"libcuda.so.1"},
                           {NULL}},
    /* torch's cu13 wheels: nvidia/cu13/lib; cu12 ones: nvidia/cuda_nvrtc/lib. */
    [KILN_GPU_LIB_NVRTC] = {"NVRTC",
                            "KILN_NVRTC_LIBRARY",
                            kiln_param_nvrtc_library,
                            KILN_ENONVRTC,
                            {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"},
                            {"cu13/lib", "cuda_nvrtc/lib"}},
    [KILN_GPU_LIB_NCCL] = {"NCCL",
                           "KILN_NCCL_LIBRARY",
                           kiln_param_nccl_library,
                           KILN_ENOTFOUND,
                           {"libnccl.so.2", "libnccl.so"},
                           {"nccl/lib", "cu13/lib"}},
};

const char *kiln_gpu_lib_name(kiln_gpu_lib_id id) {
  return specs[id].name;
}
const char *kiln_gpu_lib_variable(kiln_gpu_lib_id id) {
  return specs[id].variable;
}

/* dlopen(file), and the full path the dynamic loader resolved it to. */
static void *open_file(kiln_gpu_lib *out, const char *file, char *err, size_t cap) {
  struct link_map *lm = NULL;
  void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(err, cap, "%s", e ? e : file);
    return NULL;
  }
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
    snprintf(out->path, sizeof out->path, "%s", lm->l_name);
  else
    snprintf(out->path, sizeof out->path, "%s", file);
  out->handle = h;
  return h;
}

/* The first soname present in dir, loaded: 1 loaded, 0 none there, -1 failed (error set). */
static int try_dir(kiln_gpu_lib *out, const lib_spec *s, const char *dir, const char *how) {
  for (size_t i = 0; i < sizeof s->sonames / sizeof *s->sonames && s->sonames[i]; i++) {
    char path[PATH_MAX], err[512];
    if (snprintf(path, sizeof path, "%s/%s", dir, s->sonames[i]) >= (int)sizeof path ||
        access(path, F_OK) != 0)
      continue;
    if (!open_file(out, path, err, sizeof err)) {
      kiln_fail(KILN_EINVAL, "%s found at %s (%s) will not load: %s; name another with %s", s->name,
                path, how, err, s->variable);
      return -1;
    }
    snprintf(out->found_by, sizeof out->found_by, "%s", how);
    return 1;
  }
  return 0;
}

/* try_dir over every directory a glob pattern matches, in sorted order. */
static int try_glob(kiln_gpu_lib *out, const lib_spec *s, const char *pattern, const char *how) {
  glob_t g;
  int r = 0;
  if (glob(pattern, GLOB_ONLYDIR, NULL, &g) != 0) return 0;
  for (size_t i = 0; i < g.gl_pathc && r == 0; i++)
    r = try_dir(out, s, g.gl_pathv[i], how);
  globfree(&g);
  return r;
}

/* Step 1: NVIDIA's wheels under a Python prefix. */
static int try_wheels(kiln_gpu_lib *out, const lib_spec *s, const char *prefix, const char *what) {
  char pattern[PATH_MAX], how[600];
  if (!prefix || !*prefix) return 0;
  snprintf(how, sizeof how, "NVIDIA's wheels under %s (%s)", prefix, what);
  for (size_t i = 0; i < sizeof s->wheel_dirs / sizeof *s->wheel_dirs && s->wheel_dirs[i]; i++) {
    int r;
    if (snprintf(pattern, sizeof pattern, "%s/lib/python3*/site-packages/nvidia/%s", prefix,
                 s->wheel_dirs[i]) >= (int)sizeof pattern)
      continue;
    if ((r = try_glob(out, s, pattern, how)) != 0) return r;
  }
  return 0;
}

/* Steps 2 and 3: a toolkit's root. */
static int try_toolkit(kiln_gpu_lib *out, const lib_spec *s, const char *root, const char *what) {
  static const char *const subdirs[] = {"lib64", "lib", "targets/*/lib"};
  char pattern[PATH_MAX], how[600];
  if (!root || !*root) return 0;
  snprintf(how, sizeof how, "%s (%s)", what, root);
  for (size_t i = 0; i < sizeof subdirs / sizeof *subdirs; i++) {
    int r;
    if (snprintf(pattern, sizeof pattern, "%s/%s", root, subdirs[i]) >= (int)sizeof pattern)
      continue;
    if ((r = try_glob(out, s, pattern, how)) != 0) return r;
  }
  return 0;
}

/* The prefix of the running executable: /venv for /venv/bin/kiln. */
static const char *exe_prefix(char *buf, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
  char *slash;
  if (n <= 0) return NULL;
  buf[n] = '\0';
  for (int up = 0; up < 2; up++) {
    if (!(slash = strrchr(buf, '/')) || slash == buf) return NULL;
    *slash = '\0';
  }
  return buf;
}

static kiln_status search(kiln_gpu_lib *out, const lib_spec *s) {
  char exe[PATH_MAX], tried[1024] = "";
  const char *prefixes[][2] = {{kiln_param_python_prefix(), "KILN_PYTHON_PREFIX"},
                               {exe_prefix(exe, sizeof exe), "the running program's prefix"},
                               {getenv("VIRTUAL_ENV"), "VIRTUAL_ENV"},
                               {getenv("CONDA_PREFIX"), "CONDA_PREFIX"}};
  int r = 0;
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes && !r; i++)
    r = try_wheels(out, s, prefixes[i][0], prefixes[i][1]);
  if (!r) r = try_toolkit(out, s, getenv("CUDA_HOME"), "CUDA_HOME");
  if (!r) r = try_toolkit(out, s, getenv("CUDA_PATH"), "CUDA_PATH");
  if (!r) r = try_toolkit(out, s, "/usr/local/cuda", "the CUDA toolkit");
  if (r < 0) return KILN_EINVAL;
  for (size_t i = 0; !r && i < sizeof s->sonames / sizeof *s->sonames && s->sonames[i]; i++) {
    char err[512];
    size_t len = strlen(tried);
    if (open_file(out, s->sonames[i], err, sizeof err)) {
      snprintf(out->found_by, sizeof out->found_by, "the dynamic loader's search");
      r = 1;
    } else {
      snprintf(tried + len, sizeof tried - len, "%s%s", len ? "; " : "", err);
    }
  }
  if (r) return KILN_OK;
  return kiln_fail(s->missing,
                   "%s not found: no NVIDIA wheel next to Python, no CUDA_HOME/CUDA_PATH or "
                   "/usr/local/cuda holds it, and the dynamic loader says: %s; install it or "
                   "name its file with %s",
                   s->name, tried, s->variable);
}

kiln_status kiln_gpu_lib_open(kiln_gpu_lib *out, kiln_gpu_lib_id id) {
  const lib_spec *s = &specs[id];
  const char *named = s->named();
  kiln_status rc;
  memset(out, 0, sizeof *out);
  if (named) {
    char err[512];
    out->named = 1;
    if (!open_file(out, named, err, sizeof err))
      return kiln_fail(KILN_EINVAL, "%s=%s: cannot load it: %s", s->variable, named, err);
    snprintf(out->found_by, sizeof out->found_by, "%s", s->variable);
  } else if ((rc = search(out, s)) != KILN_OK) {
    return rc;
  }
  kiln_log(KILN_LOG_DEBUG, "%s: loaded %s (%s)", s->name, out->path, out->found_by);
  return KILN_OK;
}

kiln_status kiln_gpu_lib_bind(void *table, const kiln_gpu_sym *syms, size_t n,
                              const kiln_gpu_lib *lib, kiln_gpu_lib_id id,
                              kiln_gpu_resolver resolve, void *ctx) {
  for (size_t i = 0; i < n; i++) {
    void *fn = resolve ? resolve(ctx, syms[i].name) : dlsym(lib->handle, syms[i].name);
    if (!fn && syms[i].required)
      return kiln_fail(lib->named ? KILN_EINVAL : specs[id].missing,
                       "%s (%s) has no %s: it is not %s%s%s", lib->path, lib->found_by,
                       syms[i].name, specs[id].name, lib->named ? "; fix " : "",
                       lib->named ? specs[id].variable : "");
    memcpy((char *)table + syms[i].offset, &fn, sizeof fn);
  }
  return KILN_OK;
}
