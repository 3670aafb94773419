/* libcuda loaded with dlopen; entry points through cuGetProcAddress. */
#include "loader/driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h> /* offsetof */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/gpu_libs.h"
#include "common/logging.h"
#include "common/params.h"

/* Every entry point is asked for at the ABI of this CUDA version: the
 * signatures in kiln_cuda_api are those of CUDA 12.0 (and 11.x, for the ones
 * used here). */
#define KILN_CUDA_ABI 12000

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_v1_fn)(const char *, void **, int, cuuint64_t);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static kiln_cuda_api api;
static kiln_status load_rc = KILN_EDRIVER;
static char load_error[1024];

static CUresult get_proc(void *h, const char *sym, void **pfn) {
  static get_proc_v2_fn v2;
  static get_proc_v1_fn v1;
  if (!v2 && !v1) {
    *(void **)&v2 = dlsym(h, "cuGetProcAddress_v2");
    if (!v2) *(void **)&v1 = dlsym(h, "cuGetProcAddress");
  }
  *pfn = NULL;
  if (v2) {
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = v2(sym, pfn, KILN_CUDA_ABI, CU_GET_PROC_ADDRESS_DEFAULT, &q);
    return r == CUDA_SUCCESS && (q != CU_GET_PROC_ADDRESS_SUCCESS || !*pfn) ? CUDA_ERROR_NOT_FOUND
                                                                            : r;
  }
  if (v1) {
    CUresult r = v1(sym, pfn, KILN_CUDA_ABI, CU_GET_PROC_ADDRESS_DEFAULT);
    return r == CUDA_SUCCESS && !*pfn ? CUDA_ERROR_NOT_FOUND : r;
  }
  return CUDA_ERROR_NOT_FOUND;
}

static const kiln_gpu_sym syms[] = {
#define KILN_SYM(ret, name, params) {"cu" #name, offsetof(kiln_cuda_api, name), 1},
#include "common/cuda_syms.def"
#undef KILN_SYM
};

static void *resolve(void *h, const char *name) {
  void *fn = NULL;
  return get_proc(h, name, &fn) == CUDA_SUCCESS ? fn : NULL;
}

static kiln_status fill(const kiln_gpu_lib *lib) {
  CUresult r;
  kiln_status rc;
  if (!dlsym(lib->handle, "cuGetProcAddress_v2") && !dlsym(lib->handle, "cuGetProcAddress"))
    return kiln_fail(lib->named ? KILN_EINVAL : KILN_EDRIVER,
                     "%s (%s) has no cuGetProcAddress: it is not the CUDA driver, or one older "
                     "than CUDA 11.3 (update the NVIDIA driver)",
                     lib->path, lib->found_by);
  rc = kiln_gpu_lib_bind(&api, syms, sizeof syms / sizeof *syms, lib, KILN_GPU_LIB_CUDA, resolve,
                         lib->handle);
  if (rc != KILN_OK) return rc;
  r = api.Init(0);
  if (r != CUDA_SUCCESS) {
    const char *name = NULL, *text = NULL;
    api.GetErrorName(r, &name);
    api.GetErrorString(r, &text);
    return kiln_fail(KILN_EDRIVER, "cuInit failed: %s (%s)%s", name ? name : "?", text ? text : "?",
                     r == CUDA_ERROR_NO_DEVICE
                         ? ": no CUDA device is visible (check CUDA_VISIBLE_DEVICES)"
                         : "");
  }
  if (api.DriverGetVersion(&api.driver_version) != CUDA_SUCCESS)
    return kiln_fail(KILN_EDRIVER, "cuDriverGetVersion failed");
  return KILN_OK;
}

static void load(void) {
  load_rc = kiln_gpu_lib_open(&api.lib, KILN_GPU_LIB_CUDA);
  if (load_rc == KILN_OK) {
    load_rc = fill(&api.lib); /* kept open either way: a library that cuInit'ed may have threads */
  }
  if (load_rc != KILN_OK) {
    snprintf(load_error, sizeof load_error, "%s", kiln_last_error());
    return;
  }
  kiln_log(KILN_LOG_INFO, "CUDA driver %d.%d from %s (%s)", api.driver_version / 1000,
           api.driver_version % 1000 / 10, api.lib.path, api.lib.found_by);
}

kiln_status kiln_cuda(const kiln_cuda_api **out) {
  pthread_once(&once, load);
  if (load_rc != KILN_OK) return kiln_fail(load_rc, "%s", load_error);
  *out = &api;
  return KILN_OK;
}

const char *kiln_cuda_error_name(CUresult r) {
  static __thread char buf[32];
  const char *name = NULL;
  if (api.GetErrorName && api.GetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  snprintf(buf, sizeof buf, "CUDA error %d", (int)r);
  return buf;
}

kiln_status kiln_cuda_fail(CUresult r, const char *what) {
  const char *text = NULL;
  if (api.GetErrorString) api.GetErrorString(r, &text);
  return kiln_fail(KILN_EDRIVER, "%s: %s (%s)", what, kiln_cuda_error_name(r), text ? text : "?");
}

/* PTX ISA by CUDA release (docs/loader.md): each release raises it. A release
 * between two entries of one major takes the entry below it plus the
 * difference in minor, short of the next entry (CUDA 13.x writes ISA 9.x:
 * 13.0, 13.1 and 13.5 measured); a major newer than the table takes
 * (major - 4).minor, the ISA of CUDA 11.0, 12.0 and 13.0. An estimate that is
 * too high costs one refused load (UNSUPPORTED_PTX_VERSION: the next
 * candidate); the PTX text's own .version is checked before the driver sees
 * it. */
int kiln_driver_ptx_isa(int v) {
  static const int table[][2] = {
      {11000, 70}, {11010, 71}, {11020, 72}, {11030, 73}, {11040, 74}, {11050, 75}, {11060, 76},
      {11070, 77}, {11080, 78}, {12000, 80}, {12010, 81}, {12020, 82}, {12030, 83}, {12040, 84},
      {12050, 85}, {12060, 85}, {12080, 87}, {12090, 88}, {13000, 90}, {13010, 91}, {13050, 95},
  };
  const size_t n = sizeof table / sizeof *table;
  size_t i = 0;
  int isa, minor = v % 1000 / 10;
  if (v < table[0][0]) return 0;
  if (minor > 9) minor = 9; /* CUDA minors are 0..9; keeps a newer version from getting less */
  if (v / 1000 > table[n - 1][0] / 1000) return (v / 1000 - 4) * 10 + minor;
  while (i + 1 < n && v >= table[i + 1][0])
    i++;
  isa = table[i][1] + (minor - table[i][0] % 1000 / 10);
  if (i + 1 < n && isa >= table[i + 1][1]) isa = table[i + 1][1] - 1;
  return isa;
}

kiln_status kiln_device_count(int *out) {
  const kiln_cuda_api *cu;
  kiln_status rc;
  CUresult r;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_device_count: out is NULL");
  *out = 0;
  KILN_CHECK(kiln_cuda(&cu));
  r = cu->DeviceGetCount(out);
  if (r != CUDA_SUCCESS) rc = kiln_cuda_fail(r, "cuDeviceGetCount");
out:
  return rc;
}

kiln_status kiln_device_get_info(kiln_device_info *out, int ordinal) {
  const kiln_cuda_api *cu;
  CUdevice dev;
  size_t mem = 0;
  kiln_status rc;
  int n = 0;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_device_get_info: out is NULL");
  memset(out, 0, sizeof *out);
  KILN_CHECK(kiln_device_count(&n));
  if (ordinal < 0 || ordinal >= n)
    return kiln_fail(KILN_EINVAL, "no CUDA device %d: this machine has %d (0..%d)", ordinal, n,
                     n - 1);
  KILN_CHECK(kiln_cuda(&cu));
  CU_CHECK(cu->DeviceGet(&dev, ordinal), "cuDeviceGet");
  CU_CHECK(cu->DeviceGetName(out->name, sizeof out->name, dev), "cuDeviceGetName");
  out->name[sizeof out->name - 1] = '\0';
  CU_CHECK(
      cu->DeviceGetAttribute(&out->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
      "cuDeviceGetAttribute(compute capability major)");
  CU_CHECK(
      cu->DeviceGetAttribute(&out->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
      "cuDeviceGetAttribute(compute capability minor)");
  CU_CHECK(cu->DeviceGetAttribute(&out->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
           "cuDeviceGetAttribute(multiprocessor count)");
  CU_CHECK(cu->DeviceTotalMem(&mem, dev), "cuDeviceTotalMem");
  out->ordinal = ordinal;
  out->total_mem = mem;
  out->driver_version = cu->driver_version;
  out->ptx_isa = kiln_driver_ptx_isa(cu->driver_version);
out:
  return rc;
}
