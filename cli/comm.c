/* Communicators for `kiln warmup --comm`: single, or MPI through libkiln_mpi
 * (dlopen'ed, so the kiln command itself never needs an MPI library). */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kiln/comm_mpi.h"

/* libkiln_mpi.so.<soversion>, from CMake: the one built with this kiln */
#define MPI_SONAME KILN_MPI_SONAME

/* KILN_MPI_LIBRARY, then next to this executable (the build tree), then
 * ../lib (an install), then the loader's search path. */
static void *open_mpi_plugin(char *err, size_t cap) {
  char exe[PATH_MAX], path[PATH_MAX + 64];
  const char *env = getenv("KILN_MPI_LIBRARY");
  ssize_t n;
  void *h;
  if (env && *env) {
    if (!(h = dlopen(env, RTLD_NOW | RTLD_GLOBAL))) snprintf(err, cap, "%s", dlerror());
    return h;
  }
  n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(path, sizeof path, "%s/%s", exe, MPI_SONAME);
    if ((h = dlopen(path, RTLD_NOW | RTLD_GLOBAL))) return h;
    snprintf(path, sizeof path, "%s/../lib/%s", exe, MPI_SONAME);
    if ((h = dlopen(path, RTLD_NOW | RTLD_GLOBAL))) return h;
  }
  if (!(h = dlopen(MPI_SONAME, RTLD_NOW | RTLD_GLOBAL))) snprintf(err, cap, "%s", dlerror());
  return h;
}

kiln_status cli_comm_open(kiln_comm **out, const char *name) {
  char err[512] = "";
  void *h;
  kiln_comm_mpi_world_fn world;
  *out = NULL;
  if (strcmp(name, "single") == 0) return kiln_comm_single(out);
  if (strcmp(name, "mpi") != 0)
    return kiln_comm_error(KILN_EINVAL, "--comm '%s': expected single or mpi", name);
  if (!(h = open_mpi_plugin(err, sizeof err)))
    return kiln_comm_error(KILN_ENOTFOUND,
                           "--comm mpi: cannot load %s (kiln was built without MPI, or set "
                           "KILN_MPI_LIBRARY to its path): %s",
                           MPI_SONAME, err);
  *(void **)&world = dlsym(h, "kiln_comm_mpi_world");
  if (!world)
    return kiln_comm_error(KILN_ENOTFOUND, "--comm mpi: %s has no kiln_comm_mpi_world", MPI_SONAME);
  return world(out); /* the plugin stays loaded: MPI is finalized at exit by kiln_comm_free */
}
