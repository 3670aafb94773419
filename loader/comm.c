/* What include/kiln/comm.h offers outside any one transport and outside the
 * protocol: the error a failed collective reports, freeing a communicator,
 * and opening one by name ("mpi" comes from libkiln_mpi, loaded with dlopen,
 * so neither libkiln nor the kiln command needs an MPI library until a job
 * asks for one). common/ knows nothing of communicators; this sits with them. */
#include <dlfcn.h>  /* dlopen, dladdr */
#include <limits.h> /* PATH_MAX */
#include <stdarg.h> /* va_list */
#include <stdio.h>  /* vsnprintf */
#include <stdlib.h> /* free */
#include <string.h> /* strcmp */

#include "common/error.h"  /* kiln_fail */
#include "common/params.h" /* KILN_MPI_LIBRARY */
#include "kiln/comm.h"
#include "kiln/comm_mpi.h" /* kiln_comm_mpi_world_fn */

KILN_API kiln_status kiln_comm_error(kiln_status st, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  if (vsnprintf(line, sizeof line, fmt, ap) < 0) line[0] = '\0';
  va_end(ap);
  return kiln_fail(st, "%s", line);
}

void kiln_comm_free(kiln_comm *c) {
  if (!c) return;
  if (c->destroy) c->destroy(c->self);
  free(c);
}

/* KILN_MPI_SONAME: libkiln_mpi.so.<soversion>, from CMake (the one built with
 * this libkiln). */

/* KILN_MPI_LIBRARY, the only one tried when set; else next to this libkiln
 * (the build tree, or an install's lib/); else the loader's search path. */
static void *open_mpi_library(char *err, size_t cap) {
  const char *named = kiln_param_mpi_library();
  char path[PATH_MAX + 64];
  Dl_info self;
  void *h;
  if (named) {
    if (!(h = dlopen(named, RTLD_NOW | RTLD_GLOBAL)))
      snprintf(err, cap, "KILN_MPI_LIBRARY=%s: %s", named, dlerror());
    return h;
  }
  if (dladdr((void *)open_mpi_library, &self) && self.dli_fname) {
    const char *slash = strrchr(self.dli_fname, '/');
    int n = slash ? snprintf(path, sizeof path, "%.*s/%s", (int)(slash - self.dli_fname),
                             self.dli_fname, KILN_MPI_SONAME)
                  : -1;
    if (n > 0 && (size_t)n < sizeof path && (h = dlopen(path, RTLD_NOW | RTLD_GLOBAL))) return h;
  }
  if (!(h = dlopen(KILN_MPI_SONAME, RTLD_NOW | RTLD_GLOBAL))) snprintf(err, cap, "%s", dlerror());
  return h;
}

kiln_status kiln_comm_open(kiln_comm **out, const char *name) {
  char err[PATH_MAX + 256] = "";
  kiln_comm_mpi_world_fn world;
  void *h;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_comm_open: out is NULL");
  *out = NULL;
  if (name && strcmp(name, "single") == 0) return kiln_comm_single(out);
  if (!name || strcmp(name, "mpi") != 0)
    return kiln_fail(KILN_EINVAL, "communicator '%s': expected single or mpi", name ? name : "");
  if (!(h = open_mpi_library(err, sizeof err)))
    return kiln_fail(KILN_ENOTFOUND,
                     "mpi: cannot load %s (kiln was built without MPI, or set KILN_MPI_LIBRARY "
                     "to its path): %s",
                     KILN_MPI_SONAME, err);
  *(void **)&world = dlsym(h, "kiln_comm_mpi_world");
  if (!world)
    return kiln_fail(KILN_ENOTFOUND, "mpi: %s has no kiln_comm_mpi_world", KILN_MPI_SONAME);
  return world(out); /* the library stays loaded: kiln_comm_free finalizes MPI */
}
