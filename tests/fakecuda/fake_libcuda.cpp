/* fake_libcuda.cpp — a test double of libcuda for kiln's loader (README.md):
 * the two exported symbols (cuGetProcAddress_v2 and cuGetProcAddress), the
 * table of entry points they hand out, the configuration from the
 * environment, the log, error names and cuInit. Devices and contexts are in
 * fake_context.cpp, memory and events in fake_memory.cpp, modules and
 * launches in fake_module.cpp, the runnable kernels in fake_kernels.cpp. */
#include <errno.h>  /* errno */
#include <fcntl.h>  /* open */
#include <stdarg.h> /* va_list */
#include <stdio.h>  /* snprintf, fprintf */
#include <stdlib.h> /* getenv, strtol */
#include <string.h> /* strcmp, strerror */
#include <unistd.h> /* write */

#include <atomic> /* std::atomic */
#include <mutex>  /* std::call_once */

#include "fake.h"

/* Exported by the version script (exports.map); everything else is local. */
#define KILN_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace kiln_fake {
namespace {

/* ---- configuration --------------------------------------------------------- */

/* PTX ISA (x10) by driver version: the same table and estimates as
 * kiln_driver_ptx_isa (loader/driver.c), so the fake accepts what kiln
 * believes a real driver of that version accepts. */
int ptx_isa_of(int v) {
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

/* "90", "90,80,86": compute capabilities as 2-3 digit numbers (major*10+minor). */
bool parse_devices(const char *s, std::vector<device> *out) {
  const char *p = s;
  if (!*p) return true; /* no devices */
  for (;;) {
    int n = 0, digits = 0;
    for (; *p >= '0' && *p <= '9'; ++p, ++digits)
      n = n * 10 + (*p - '0');
    if (digits < 2 || digits > 3 || n < 10 || out->size() >= 64) return false;
    out->push_back(device{n / 10, n % 10});
    if (!*p) return true;
    if (*p++ != ',') return false;
  }
}

config g_cfg;
std::once_flag g_cfg_once;

void load_config() {
  config &c = g_cfg;
  char buf[512];
  c.log_fd = -1;
  const char *devices = getenv("KILN_FAKE_CUDA_DEVICES");
  if (!devices) devices = "90";
  if (!parse_devices(devices, &c.devices)) {
    snprintf(buf, sizeof buf,
             "KILN_FAKE_CUDA_DEVICES=\"%s\": want a comma list of compute capabilities as 2-3 "
             "digit numbers, e.g. 90,80 (empty: no device)",
             devices);
    c.error = buf;
  }
  c.driver = 13000;
  if (const char *d = getenv("KILN_FAKE_CUDA_DRIVER")) {
    char *end = nullptr;
    errno = 0;
    const long v = strtol(d, &end, 10);
    if (errno || end == d || *end || v < 1000 || v > 99990) {
      snprintf(buf, sizeof buf,
               "KILN_FAKE_CUDA_DRIVER=\"%s\": want a CUDA version number, e.g. 12080", d);
      c.error = buf;
    } else {
      c.driver = (int)v;
    }
  }
  c.ptx_isa = ptx_isa_of(c.driver);
  c.reject = kRejectNone;
  if (const char *r = getenv("KILN_FAKE_CUDA_REJECT")) {
    if (!strcmp(r, "all"))
      c.reject = kRejectAll;
    else if (!strcmp(r, "cubin"))
      c.reject = kRejectCubin;
    else if (!strcmp(r, "ptx"))
      c.reject = kRejectPtx;
    else if (*r) {
      snprintf(buf, sizeof buf, "KILN_FAKE_CUDA_REJECT=\"%s\": want all, cubin or ptx", r);
      c.error = buf;
    }
  }
  if (const char *h = getenv("KILN_FAKE_CUDA_HOST_MEMORY")) {
    if (!strcmp(h, "1"))
      c.host_memory = true;
    else if (*h && strcmp(h, "0")) {
      snprintf(buf, sizeof buf, "KILN_FAKE_CUDA_HOST_MEMORY=\"%s\": want 0 or 1", h);
      c.error = buf;
    }
  }
  const char *w = getenv("KILN_FAKE_CUDA_WRONG");
  c.have_wrong = w && *w;
  c.wrong = c.have_wrong ? w : "";
  if (const char *log = getenv("KILN_FAKE_CUDA_LOG")) {
    if (*log) c.log_fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (c.log_fd < 0) {
      snprintf(buf, sizeof buf, "KILN_FAKE_CUDA_LOG=\"%s\": %s", log,
               *log ? strerror(errno) : "empty");
      c.error = buf;
    }
  }
}

std::atomic<bool> g_initialized{false};
std::atomic<uintptr_t> g_next_handle{0x6b696c6e000ull}; /* "kiln" */

/* ---- error names --------------------------------------------------------------
 * The codes the fake returns, and the ones a caller may ask about beside them,
 * with the real driver's strings. */
struct error_text {
  CUresult code;
  const char *name, *text;
};
#define E(code, text)                                                                              \
  { code, #code, text }
const error_text kErrors[] = {
    E(CUDA_SUCCESS, "no error"),
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
    E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported "
                                          "toolchain."),
    E(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
    E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
    E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    E(CUDA_ERROR_NOT_READY, "device not ready"),
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context active"),
    E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    E(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver "
                                         "combination"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during "
                                             "capture"),
    E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a "
                                          "capturing blocking stream"),
    E(CUDA_ERROR_TIMEOUT, "timeout"),
    E(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef E

const error_text *find_error(CUresult r) {
  for (const error_text &e : kErrors)
    if (e.code == r) return &e;
  return nullptr;
}

} // namespace

const config &cfg() {
  std::call_once(g_cfg_once, load_config);
  return g_cfg;
}

void log_line(const char *fmt, ...) {
  const int fd = cfg().log_fd;
  if (fd < 0) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2; /* truncated: still one line */
  buf[n++] = '\n';
  if (write(fd, buf, (size_t)n) != n) { /* a test would miss the line: say so */
    fprintf(stderr, "kiln fakecuda: writing KILN_FAKE_CUDA_LOG failed\n");
  }
}

const char *error_name(CUresult r) {
  static thread_local char buf[32];
  if (const error_text *e = find_error(r)) return e->name;
  snprintf(buf, sizeof buf, "CUDA_ERROR_%d", (int)r);
  return buf;
}

std::mutex &lock() {
  static std::mutex m;
  return m;
}

CUresult initialized() {
  return g_initialized.load(std::memory_order_acquire) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

uintptr_t next_handle() {
  return g_next_handle.fetch_add(0x10);
}

/* ---- entry points that need no device ---------------------------------------- */

CUresult fake_Init(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const config &c = cfg();
  if (!c.error.empty()) {
    /* A mistyped knob must not look like a working fake. */
    fprintf(stderr, "kiln fakecuda: %s\n", c.error.c_str());
    log_line("init fail %s", c.error.c_str());
    return CUDA_ERROR_UNKNOWN;
  }
  if (c.devices.empty()) return CUDA_ERROR_NO_DEVICE;
  g_initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult fake_DriverGetVersion(int *v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (!cfg().error.empty()) return CUDA_ERROR_UNKNOWN;
  *v = cfg().driver;
  return CUDA_SUCCESS;
}

CUresult fake_GetErrorName(CUresult r, const char **s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  const error_text *e = find_error(r);
  *s = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_GetErrorString(CUresult r, const char **s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  const error_text *e = find_error(r);
  *s = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

} // namespace kiln_fake

/* ---- cuGetProcAddress ----------------------------------------------------------- */

namespace {

using namespace kiln_fake;

/* Each entry point at the ABI every CUDA since 4.0 hands out for its base
 * name (the _v2 ones of cuda.h: 64-bit CUdeviceptr, size_t sizes). Names are
 * base names only, as the real driver wants them: "cuMemAlloc", never
 * "cuMemAlloc_v2". */
#define FAKE_ENTRY(name)                                                                           \
  { "cu" #name, (void *)&fake_##name }
const struct {
  const char *name;
  void *fn;
} kProcs[] = {
    FAKE_ENTRY(Init),
    FAKE_ENTRY(DriverGetVersion),
    FAKE_ENTRY(GetErrorName),
    FAKE_ENTRY(GetErrorString),
    FAKE_ENTRY(DeviceGetCount),
    FAKE_ENTRY(DeviceGet),
    FAKE_ENTRY(DeviceGetName),
    FAKE_ENTRY(DeviceGetAttribute),
    FAKE_ENTRY(DeviceTotalMem),
    FAKE_ENTRY(DevicePrimaryCtxRetain),
    FAKE_ENTRY(DevicePrimaryCtxRelease),
    FAKE_ENTRY(CtxGetCurrent),
    FAKE_ENTRY(CtxPushCurrent),
    FAKE_ENTRY(CtxPopCurrent),
    FAKE_ENTRY(CtxGetDevice),
    FAKE_ENTRY(CtxSynchronize),
    FAKE_ENTRY(ModuleLoadDataEx),
    FAKE_ENTRY(ModuleUnload),
    FAKE_ENTRY(ModuleGetFunction),
    FAKE_ENTRY(LaunchKernel),
    FAKE_ENTRY(MemAlloc),
    FAKE_ENTRY(MemFree),
    FAKE_ENTRY(MemcpyHtoD),
    FAKE_ENTRY(MemcpyDtoH),
    FAKE_ENTRY(MemcpyDtoD),
    FAKE_ENTRY(MemsetD8),
    FAKE_ENTRY(StreamSynchronize),
    FAKE_ENTRY(StreamQuery),
    FAKE_ENTRY(MemcpyHtoDAsync),
    FAKE_ENTRY(MemcpyDtoHAsync),
    FAKE_ENTRY(MemAllocHost),
    FAKE_ENTRY(MemFreeHost),
    FAKE_ENTRY(EventCreate),
    FAKE_ENTRY(EventDestroy),
    FAKE_ENTRY(EventRecord),
    FAKE_ENTRY(EventSynchronize),
    FAKE_ENTRY(EventElapsedTime),
    FAKE_ENTRY(StreamIsCapturing),
};
#undef FAKE_ENTRY

/* Below 4.0 the real driver hands out the v1 ABIs (32-bit device pointers),
 * which the fake does not have. */
const int kMinAbi = 4000;

CUresult get_proc(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                  CUdriverProcAddressQueryResult *status);

} // namespace

#undef cuGetProcAddress /* cuda.h maps it to cuGetProcAddress_v2; the v1 name is exported too */

KILN_FAKE_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                              cuuint64_t flags,
                                              CUdriverProcAddressQueryResult *symbolStatus) {
  return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

KILN_FAKE_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                           cuuint64_t flags) {
  return get_proc(symbol, pfn, cudaVersion, flags, nullptr);
}

namespace {

CUresult get_proc(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                  CUdriverProcAddressQueryResult *status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (flags != CU_GET_PROC_ADDRESS_DEFAULT && flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM &&
      flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
    return CUDA_ERROR_INVALID_VALUE;
  void *fn = nullptr;
  if (!strcmp(symbol, "cuGetProcAddress"))
    fn = cuda_version >= 12000 ? (void *)&cuGetProcAddress_v2 : (void *)&cuGetProcAddress;
  for (const auto &p : kProcs)
    if (!strcmp(p.name, symbol)) fn = p.fn;
  if (!fn) {
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  if (cuda_version < kMinAbi) {
    if (status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = fn;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

} // namespace
