/* kiln_library_get_info (include/kiln/probe.h): which libcuda, libnvrtc and
 * libnccl this process loaded, and how each was found. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "compiler/nvrtc.h"
#include "kiln/probe.h"
#include "loader/coord_nccl.h"
#include "loader/driver.h"

static void fill(kiln_library_info *out, const char *path, const char *found_by) {
  snprintf(out->path, sizeof out->path, "%s", path);
  snprintf(out->found_by, sizeof out->found_by, "%s", found_by);
}

KILN_API kiln_status kiln_library_get_info(kiln_library_info *out, kiln_library which) {
  kiln_status rc;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_library_get_info: out is NULL");
  memset(out, 0, sizeof *out);
  switch (which) {
  case KILN_LIBRARY_CUDA: {
    const kiln_cuda_api *cu;
    if ((rc = kiln_cuda(&cu)) != KILN_OK) return rc;
    fill(out, cu->lib.path, cu->lib.found_by);
    snprintf(out->version, sizeof out->version, "%d.%d", cu->driver_version / 1000,
             cu->driver_version % 1000 / 10);
    return KILN_OK;
  }
  case KILN_LIBRARY_NVRTC: {
    const kiln_nvrtc_api *nv;
    if ((rc = kiln_nvrtc_get(&nv)) != KILN_OK) return rc;
    fill(out, nv->lib.path, nv->lib.found_by);
    snprintf(out->version, sizeof out->version, "%d.%d", nv->major, nv->minor);
    return KILN_OK;
  }
  case KILN_LIBRARY_NCCL: {
    const char *path, *found_by, *version;
    if ((rc = kiln_nccl_library(&path, &found_by, &version)) != KILN_OK) return rc;
    fill(out, path, found_by);
    snprintf(out->version, sizeof out->version, "%s", version);
    return KILN_OK;
  }
  }
  return kiln_fail(KILN_EINVAL, "kiln_library_get_info: no library %d", (int)which);
}
