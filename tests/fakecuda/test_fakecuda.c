/* tests/fakecuda: libkiln_fakecuda.so, dlopen'ed and reached through
 * cuGetProcAddress as loader/driver.c reaches a driver, keeps the driver's
 * rules (devices, contexts, memory, images, launches) and runs the softmax
 * kernels for real. Each scenario with its own environment runs in a child
 * process that loads the library afresh (the fake reads its knobs once).
 *
 * Usage: test_fakecuda <path of libkiln_fakecuda.so> */
#include "common/gpu_abi.h" /* the driver's types, as cuda.h spells them */
#include <dlfcn.h>          /* dlopen, dlsym */
#include <elf.h>            /* Elf64_Ehdr, Elf64_Shdr: hand-made cubins */
#include <math.h>           /* expf, fabsf */
#include <pthread.h>        /* the threads scenario */
#include <stdio.h>          /* printf */
#include <stdlib.h>         /* setenv, mkstemp */
#include <string.h>         /* memset, strstr */
#include <sys/wait.h>       /* waitpid */
#include <unistd.h>         /* fork, getpid */

static const char *g_lib;
static int g_failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                              \
      __atomic_add_fetch(&g_failures, 1, __ATOMIC_RELAXED);                                        \
    }                                                                                              \
  } while (0)
#define CHECK_CU(call, want)                                                                       \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != (want)) {                                                                            \
      fprintf(stderr, "FAIL %s:%d: %s returned %d, want %s (%d)\n", __FILE__, __LINE__, #call,     \
              (int)r_, #want, (int)(want));                                                        \
      __atomic_add_fetch(&g_failures, 1, __ATOMIC_RELAXED);                                        \
    }                                                                                              \
  } while (0)

/* ---- the library, as loader/driver.c loads it ------------------------------ */

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

static struct api {
  get_proc_fn get_proc;
  CUresult (*Init)(unsigned int);
  CUresult (*DriverGetVersion)(int *);
  CUresult (*GetErrorName)(CUresult, const char **);
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
  CUresult (*StreamQuery)(CUstream);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemAllocHost)(void **, size_t);
  CUresult (*MemFreeHost)(void *);
  CUresult (*EventCreate)(CUevent *, unsigned int);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
} cu;

static void *sym(const char *name) {
  void *p = NULL;
  CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CHECK_CU(cu.get_proc(name, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q), CUDA_SUCCESS);
  CHECK(q == CU_GET_PROC_ADDRESS_SUCCESS && p);
  return p;
}

/* Loads the library and its table; 0 when it cannot be loaded. */
static int load(void) {
  void *h = dlopen(g_lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "FAIL dlopen %s: %s\n", g_lib, dlerror());
    ++g_failures;
    return 0;
  }
  *(void **)&cu.get_proc = dlsym(h, "cuGetProcAddress_v2");
  CHECK(cu.get_proc && dlsym(h, "cuGetProcAddress"));
  if (!cu.get_proc) return 0;
  /* Nothing else is exported: not the implementation, not the emulator. */
  CHECK(!dlsym(h, "cuInit") && !dlsym(h, "__syncthreads") && !dlsym(h, "threadIdx"));
#define S(f) *(void **)&cu.f = sym("cu" #f)
  S(Init), S(DriverGetVersion), S(GetErrorName), S(DeviceGetCount), S(DeviceGet);
  S(DeviceGetName), S(DeviceGetAttribute), S(DeviceTotalMem), S(DevicePrimaryCtxRetain);
  S(DevicePrimaryCtxRelease), S(CtxGetCurrent), S(CtxPushCurrent), S(CtxPopCurrent);
  S(CtxGetDevice), S(ModuleLoadDataEx), S(ModuleUnload), S(ModuleGetFunction), S(LaunchKernel);
  S(MemAlloc), S(MemFree), S(MemcpyHtoD), S(MemcpyDtoH), S(MemcpyDtoD), S(MemsetD8);
  S(EventCreate), S(EventDestroy), S(EventRecord), S(EventElapsedTime);
  S(StreamQuery), S(MemcpyHtoDAsync), S(MemcpyDtoHAsync), S(MemAllocHost), S(MemFreeHost);
  S(StreamIsCapturing);
#undef S
  return 1;
}

/* Runs fn in a child process with its own copy of the library. */
static void scenario(const char *name, void (*fn)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    g_failures = 0;
    fn();
    fflush(NULL);
    _exit(g_failures ? 1 : 0);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "FAIL scenario %s (status 0x%x)\n", name, st);
    ++g_failures;
  } else {
    printf("ok %s\n", name);
  }
}

/* ---- images -------------------------------------------------------------------- */

static const char kPtx[] = "//\n"
                           "// hand-written for test_fakecuda: only the headers matter\n"
                           "//\n"
                           "\n"
                           ".version 9.0\n"
                           ".target sm_80\n"
                           ".address_size 64\n"
                           "\n"
                           ".visible .entry kiln_scaled_softmax_fwd_f32_w1(\n"
                           "\t.param .u64 kiln_scaled_softmax_fwd_f32_w1_param_0\n"
                           ")\n"
                           "{\n"
                           "\tret;\n"
                           "}\n"
                           ".visible .entry kiln_scaled_softmax_fwd_f32_w2()\n"
                           "{\n"
                           "\tret;\n"
                           "}\n"
                           ".visible .entry kiln_mystery() { ret; }\n";

/* A minimal cubin: an ELF header and one string table holding sym. */
static size_t make_cubin(unsigned char *buf, unsigned machine, unsigned abiv, unsigned flags,
                         const char *sym) {
  Elf64_Ehdr h;
  Elf64_Shdr sh[2];
  const size_t len = 1 + strlen(sym) + 1, data = sizeof h;
  const size_t shoff = (data + len + 7) / 8 * 8;
  memset(&h, 0, sizeof h);
  memset(sh, 0, sizeof sh);
  memcpy(h.e_ident, ELFMAG, SELFMAG);
  h.e_ident[EI_CLASS] = ELFCLASS64;
  h.e_ident[EI_DATA] = ELFDATA2LSB;
  h.e_ident[EI_VERSION] = EV_CURRENT;
  h.e_ident[EI_OSABI] = 0x33; /* CUDA */
  h.e_ident[EI_ABIVERSION] = (unsigned char)abiv;
  h.e_type = ET_EXEC;
  h.e_machine = (Elf64_Half)machine;
  h.e_version = EV_CURRENT;
  h.e_flags = flags;
  h.e_ehsize = sizeof h;
  h.e_shoff = shoff;
  h.e_shentsize = sizeof *sh;
  h.e_shnum = 2;
  h.e_shstrndx = 1;
  sh[1].sh_type = SHT_STRTAB;
  sh[1].sh_offset = data;
  sh[1].sh_size = len;
  memset(buf, 0, shoff + sizeof sh);
  memcpy(buf, &h, sizeof h);
  memcpy(buf + data + 1, sym, len - 1);
  memcpy(buf + shoff, sh, sizeof sh);
  return shoff + sizeof sh;
}

/* ---- softmax ------------------------------------------------------------------------ */

enum { kRows = 4, kCols = 5 };

static void reference(float *y, const float *x, float scale) {
  for (int r = 0; r < kRows; r++) {
    float m = -INFINITY, s = 0;
    for (int j = 0; j < kCols; j++)
      m = fmaxf(m, scale * x[r * kCols + j]);
    for (int j = 0; j < kCols; j++)
      s += expf(scale * x[r * kCols + j] - m);
    for (int j = 0; j < kCols; j++)
      y[r * kCols + j] = expf(scale * x[r * kCols + j] - m) / s;
  }
}

static int close_to(float a, float b) {
  return fabsf(a - b) <= 1e-5f * fabsf(b) + 1e-7f;
}

/* A forward launch of f over x (rows x cols) into y. */
static CUresult fwd(CUfunction f, unsigned grid, unsigned block, CUdeviceptr y, CUdeviceptr x,
                    long long rows, int cols, float scale) {
  CUdeviceptr mask = 0;
  int sq = 0, heads = 0, mb = 0;
  void *params[] = {&y, &x, &mask, &scale, &rows, &cols, &sq, &heads, &mb};
  return cu.LaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL);
}

/* ---- scenarios ------------------------------------------------------------------------ */

static char g_log[256];

static int log_has(const char *text) {
  char buf[1 << 16];
  FILE *f = fopen(g_log, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  return strstr(buf, text) != NULL;
}

static void devices_and_contexts(void) {
  setenv("KILN_FAKE_CUDA_DEVICES", "90,86", 1);
  if (!load()) return;
  int n = -1, v = 0;
  void *p = (void *)1;
  CUdriverProcAddressQueryResult q;
  CHECK_CU(cu.get_proc("cuNoSuchThing", &p, 12000, 0, &q), CUDA_ERROR_NOT_FOUND);
  CHECK(!p && q == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK_CU(cu.get_proc("cuMemAlloc_v2", &p, 12000, 0, &q), CUDA_ERROR_NOT_FOUND);
  CHECK_CU(cu.DeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  CHECK_CU(cu.Init(1), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.Init(0), CUDA_SUCCESS);
  CHECK_CU(cu.DriverGetVersion(&v), CUDA_SUCCESS);
  CHECK(v == 13000);
  CHECK_CU(cu.DeviceGetCount(&n), CUDA_SUCCESS);
  CHECK(n == 2);
  CUdevice d = -1;
  char name[64];
  size_t mem = 0;
  CHECK_CU(cu.DeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
  CHECK_CU(cu.DeviceGet(&d, 1), CUDA_SUCCESS);
  CHECK_CU(cu.DeviceGetName(name, sizeof name, d), CUDA_SUCCESS);
  CHECK(!strcmp(name, "Fake GPU sm_86"));
  CHECK_CU(cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0),
           CUDA_SUCCESS);
  CHECK(v == 9);
  CHECK_CU(cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 1),
           CUDA_SUCCESS);
  CHECK(v == 6);
  CHECK_CU(cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  CHECK(v == 132);
  CHECK_CU(cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.DeviceTotalMem(&mem, 0), CUDA_SUCCESS);
  CHECK(mem == 80ull << 30);
  const char *en = NULL;
  CHECK_CU(cu.GetErrorName(CUDA_ERROR_INVALID_IMAGE, &en), CUDA_SUCCESS);
  CHECK(en && !strcmp(en, "CUDA_ERROR_INVALID_IMAGE"));

  /* No current context: everything that needs one says so. */
  CUdeviceptr dp;
  CUcontext c0, c1, cur;
  CHECK_CU(cu.MemAlloc(&dp, 64), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_CU(cu.CtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_CU(cu.CtxPopCurrent(&cur), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_CU(cu.DevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_CU(cu.DevicePrimaryCtxRetain(&c0, 0), CUDA_SUCCESS);
  CHECK_CU(cu.DevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
  CHECK(c0 != c1);
  CHECK_CU(cu.CtxPushCurrent(c0), CUDA_SUCCESS);
  CHECK_CU(cu.CtxPushCurrent(c1), CUDA_SUCCESS);
  CHECK_CU(cu.CtxGetDevice(&d), CUDA_SUCCESS);
  CHECK(d == 1);
  CHECK_CU(cu.CtxPopCurrent(&cur), CUDA_SUCCESS);
  CHECK(cur == c1);
  CHECK_CU(cu.CtxGetCurrent(&cur), CUDA_SUCCESS);
  CHECK(cur == c0);

  /* Memory, and a release to zero frees the context's allocations. */
  unsigned char in[1000], out[1000];
  for (int i = 0; i < 1000; i++)
    in[i] = (unsigned char)i;
  CUdeviceptr a, b;
  CHECK_CU(cu.MemAlloc(&a, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.MemAlloc(&a, 1000), CUDA_SUCCESS);
  CHECK(a % 256 == 0);
  CHECK_CU(cu.MemAlloc(&b, 1000), CUDA_SUCCESS);
  CHECK_CU(cu.MemcpyHtoD(a, in, 1000), CUDA_SUCCESS);
  CHECK_CU(cu.MemcpyDtoD(b, a, 1000), CUDA_SUCCESS);
  CHECK_CU(cu.MemsetD8(b + 10, 7, 5), CUDA_SUCCESS);
  CHECK_CU(cu.MemcpyDtoH(out, b, 1000), CUDA_SUCCESS);
  CHECK(out[9] == 9 && out[10] == 7 && out[14] == 7 && out[15] == 15 && out[999] == in[999]);
  CHECK_CU(cu.MemcpyHtoD(a + 1, in, 1000), CUDA_ERROR_INVALID_VALUE); /* one past the end */
  CHECK_CU(cu.MemcpyDtoH(out, (CUdeviceptr)(uintptr_t)in, 10), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.MemsetD8(b + 999, 0, 2), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.MemFree(a + 16), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.MemFree(a), CUDA_SUCCESS);
  CHECK_CU(cu.MemFree(a), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.CtxPopCurrent(NULL), CUDA_SUCCESS);
  CHECK_CU(cu.DevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CHECK_CU(cu.CtxPushCurrent(c0), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHECK_CU(cu.DevicePrimaryCtxRetain(&cur, 0), CUDA_SUCCESS);
  CHECK(cur == c0);
  CHECK_CU(cu.CtxPushCurrent(c0), CUDA_SUCCESS);
  CHECK_CU(cu.MemFree(b), CUDA_ERROR_INVALID_VALUE); /* went with the context */

  /* Async copies through page-locked memory, and a stream that is idle
   * unless KILN_FAKE_CUDA_STREAM_HANG=1 (read on every call). */
  void *pinned = NULL;
  CHECK_CU(cu.MemAllocHost(&pinned, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.MemAllocHost(&pinned, 1000), CUDA_SUCCESS);
  CHECK_CU(cu.MemAlloc(&a, 1000), CUDA_SUCCESS);
  memcpy(pinned, in, 1000);
  CHECK_CU(cu.MemcpyHtoDAsync(a, pinned, 1000, NULL), CUDA_SUCCESS);
  memset(pinned, 0, 1000);
  CHECK_CU(cu.MemcpyDtoHAsync(pinned, a, 1000, NULL), CUDA_SUCCESS);
  CHECK(memcmp(pinned, in, 1000) == 0);
  CHECK_CU(cu.MemcpyDtoHAsync(pinned, a + 1, 1000, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.StreamQuery(NULL), CUDA_SUCCESS);
  setenv("KILN_FAKE_CUDA_STREAM_HANG", "1", 1);
  CHECK_CU(cu.StreamQuery(NULL), CUDA_ERROR_NOT_READY);
  unsetenv("KILN_FAKE_CUDA_STREAM_HANG");
  CHECK_CU(cu.StreamQuery(NULL), CUDA_SUCCESS);
  CHECK_CU(cu.MemFreeHost((char *)pinned + 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.MemFreeHost(pinned), CUDA_SUCCESS);
  CHECK_CU(cu.MemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.MemFree(a), CUDA_SUCCESS);

  /* Events. */
  CUevent e1, e2, e3;
  float ms = -1;
  CHECK_CU(cu.EventCreate(&e1, 0), CUDA_SUCCESS);
  CHECK_CU(cu.EventCreate(&e2, 0), CUDA_SUCCESS);
  CHECK_CU(cu.EventCreate(&e3, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CHECK_CU(cu.EventElapsedTime(&ms, e1, e2), CUDA_ERROR_INVALID_HANDLE); /* not recorded */
  CHECK_CU(cu.EventRecord(e1, NULL), CUDA_SUCCESS);
  CHECK_CU(cu.EventRecord(e2, NULL), CUDA_SUCCESS);
  CHECK_CU(cu.EventRecord(e3, NULL), CUDA_SUCCESS);
  CHECK_CU(cu.EventElapsedTime(&ms, e1, e2), CUDA_SUCCESS);
  CHECK(ms >= 0 && ms < 10000);
  CHECK_CU(cu.EventElapsedTime(&ms, e1, e3), CUDA_ERROR_INVALID_HANDLE);
  CHECK_CU(cu.EventDestroy(e1), CUDA_SUCCESS);
  CHECK_CU(cu.EventDestroy(e1), CUDA_ERROR_INVALID_HANDLE);
}

static void images_and_launches(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_log, sizeof g_log, "%s/test_fakecuda.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(g_log);
  CHECK(fd >= 0);
  close(fd);
  setenv("KILN_FAKE_CUDA_LOG", g_log, 1);
  setenv("KILN_FAKE_CUDA_DEVICES", "90,86", 1);
  setenv("KILN_FAKE_CUDA_WRONG", "*_fwd_f32_w2", 1);
  if (!load()) return;
  CUcontext c0, c1;
  CHECK_CU(cu.Init(0), CUDA_SUCCESS);
  CHECK_CU(cu.DevicePrimaryCtxRetain(&c0, 0), CUDA_SUCCESS);
  CHECK_CU(cu.DevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
  CUmodule m = NULL, mc = NULL, bad = NULL;
  CHECK_CU(cu.ModuleLoadDataEx(&m, kPtx, 0, NULL, NULL), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_CU(cu.CtxPushCurrent(c0), CUDA_SUCCESS);

  /* Images the driver refuses. */
  static const unsigned char junk[] = {0x13, 0x37, 0xff, 0x00, 0x42, 0x00};
  char ptx[sizeof kPtx];
  CHECK_CU(cu.ModuleLoadDataEx(&bad, "hello, world", 0, NULL, NULL), CUDA_ERROR_INVALID_IMAGE);
  CHECK_CU(cu.ModuleLoadDataEx(&bad, junk, 0, NULL, NULL), CUDA_ERROR_INVALID_IMAGE);
  CHECK_CU(cu.ModuleLoadDataEx(&bad, "", 0, NULL, NULL), CUDA_ERROR_INVALID_IMAGE);
  memcpy(ptx, kPtx, sizeof ptx);
  memcpy(strstr(ptx, ".version 9.0"), ".version 9.1", 12);
  CHECK_CU(cu.ModuleLoadDataEx(&bad, ptx, 0, NULL, NULL), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  memcpy(ptx, kPtx, sizeof ptx);
  memcpy(strstr(ptx, ".target sm_80"), ".target sm_91", 13);
  char errlog[256] = "";
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {errlog, (void *)(uintptr_t)sizeof errlog};
  CHECK_CU(cu.ModuleLoadDataEx(&bad, ptx, 2, opts, vals), CUDA_ERROR_INVALID_PTX);
  CHECK(strstr(errlog, "sm_91") != NULL && (uintptr_t)vals[1] == strlen(errlog));
  unsigned char elf[512];
  make_cubin(elf, 62 /* x86-64 */, 8, 0x6005a04, "kiln_scaled_softmax_fwd_f32_w1");
  CHECK_CU(cu.ModuleLoadDataEx(&bad, elf, 0, NULL, NULL), CUDA_ERROR_INVALID_IMAGE);
  make_cubin(elf, 190, 8, 0x6005004, "kiln_scaled_softmax_fwd_f32_w1"); /* sm_80 */
  CHECK_CU(cu.ModuleLoadDataEx(&bad, elf, 0, NULL, NULL), CUDA_ERROR_NO_BINARY_FOR_GPU);

  /* A cubin for sm_80 loads on sm_86 (same major, older minor), sm_90 on sm_90. */
  CHECK_CU(cu.CtxPushCurrent(c1), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleLoadDataEx(&mc, elf, 0, NULL, NULL), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleUnload(mc), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleUnload(mc), CUDA_ERROR_INVALID_HANDLE);
  CHECK_CU(cu.CtxPopCurrent(NULL), CUDA_SUCCESS);
  const size_t elf_bytes = make_cubin(elf, 190, 8, 0x6005a04, "kiln_scaled_softmax_fwd_f32_w1");
  CHECK_CU(cu.ModuleLoadDataEx(&mc, elf, 0, NULL, NULL), CUDA_SUCCESS);
  CUfunction fc = NULL;
  CHECK_CU(cu.ModuleGetFunction(&fc, mc, "kiln_scaled_softmax_fwd_f32_w1"), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleGetFunction(&fc, mc, "kiln_scaled_softmax_fwd_f32"), CUDA_ERROR_NOT_FOUND);

  /* PTX: functions it names and the fake runs. */
  CUfunction f1 = NULL, f2 = NULL, f;
  CHECK_CU(cu.ModuleLoadDataEx(&m, kPtx, 0, NULL, NULL), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleGetFunction(&f1, m, "kiln_scaled_softmax_fwd_f32_w1"), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleGetFunction(&f2, m, "kiln_scaled_softmax_fwd_f32_w2"), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleGetFunction(&f, m, "kiln_scaled_softmax_fwd_f32_w4"), CUDA_ERROR_NOT_FOUND);
  CHECK_CU(cu.ModuleGetFunction(&f, m, "kiln_mystery"), CUDA_ERROR_NOT_FOUND);

  /* Launches: a correct softmax with the block the kernel is compiled for. */
  float x[kRows * kCols], y[kRows * kCols], want[kRows * kCols];
  for (int i = 0; i < kRows * kCols; i++)
    x[i] = (float)((i * 7) % 11) - 4.5f;
  const size_t bytes = sizeof x;
  CUdeviceptr dx, dy, small;
  CHECK_CU(cu.MemAlloc(&dx, bytes), CUDA_SUCCESS);
  CHECK_CU(cu.MemAlloc(&dy, bytes), CUDA_SUCCESS);
  CHECK_CU(cu.MemAlloc(&small, bytes - 4), CUDA_SUCCESS);
  CHECK_CU(cu.MemcpyHtoD(dx, x, bytes), CUDA_SUCCESS);
  CHECK_CU(fwd(f1, 1, 128, dy, dx, kRows, kCols, 0.5f), CUDA_SUCCESS);
  CHECK_CU(cu.MemcpyDtoH(y, dy, bytes), CUDA_SUCCESS);
  reference(want, x, 0.5f);
  for (int i = 0; i < kRows * kCols; i++)
    CHECK(close_to(y[i], want[i]));
  CHECK_CU(fwd(fc, 2, 128, dx, dx, kRows, kCols, 1.f), CUDA_SUCCESS); /* the cubin's, in place */
  CHECK_CU(cu.MemcpyDtoH(y, dx, bytes), CUDA_SUCCESS);
  reference(want, x, 1.f);
  for (int i = 0; i < kRows * kCols; i++)
    CHECK(close_to(y[i], want[i]));

  /* ... and what the fake refuses. */
  CHECK_CU(fwd(f1, 1, 256, dy, dx, kRows, kCols, 1.f), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(fwd(f1, 0, 128, dy, dx, kRows, kCols, 1.f), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(fwd(f1, 1, 128, dy, dx, kRows, 33, 1.f), CUDA_ERROR_INVALID_VALUE); /* w1: <= 32 */
  CHECK_CU(fwd(f1, 1, 128, small, dx, kRows, kCols, 1.f), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(fwd(f1, 1, 128, (CUdeviceptr)(uintptr_t)y, dx, kRows, kCols, 1.f),
           CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(fwd(f1, 1, 128, dy + 4, dy, kRows - 1, kCols, 1.f), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.LaunchKernel(f1, 1, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.CtxPushCurrent(c1), CUDA_SUCCESS); /* f1's module is in c0 */
  CHECK_CU(fwd(f1, 1, 128, dy, dx, kRows, kCols, 1.f), CUDA_ERROR_INVALID_HANDLE);
  CHECK_CU(cu.CtxPopCurrent(NULL), CUDA_SUCCESS);

  /* KILN_FAKE_CUDA_WRONG: the first output element is off, the rest right. */
  CHECK_CU(cu.MemcpyHtoD(dx, x, bytes), CUDA_SUCCESS);
  CHECK_CU(fwd(f2, 1, 128, dy, dx, kRows, kCols, 1.f), CUDA_SUCCESS);
  CHECK_CU(cu.MemcpyDtoH(y, dy, bytes), CUDA_SUCCESS);
  CHECK(!close_to(y[0], want[0]));
  for (int i = 1; i < kRows * kCols; i++)
    CHECK(close_to(y[i], want[i]));

  /* KILN_FAKE_CUDA_RUN=0 (read on every launch): validated as before, not
   * run (the output keeps what it held), logged as not run; unset: runs again. */
  const float mark = 12345.f;
  float marks[kRows * kCols];
  for (int i = 0; i < kRows * kCols; i++)
    marks[i] = mark;
  CHECK_CU(cu.MemcpyHtoD(dy, marks, bytes), CUDA_SUCCESS);
  setenv("KILN_FAKE_CUDA_RUN", "0", 1);
  CHECK_CU(fwd(f1, 1, 128, dy, dx, kRows, kCols, 1.f), CUDA_SUCCESS);
  CHECK_CU(fwd(f1, 1, 256, dy, dx, kRows, kCols, 1.f), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(fwd(f1, 1, 128, small, dx, kRows, kCols, 1.f), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.MemcpyDtoH(y, dy, bytes), CUDA_SUCCESS);
  for (int i = 0; i < kRows * kCols; i++)
    CHECK(y[i] == mark);
  unsetenv("KILN_FAKE_CUDA_RUN");
  CHECK_CU(fwd(f1, 1, 128, dy, dx, kRows, kCols, 1.f), CUDA_SUCCESS);
  CHECK_CU(cu.MemcpyDtoH(y, dy, bytes), CUDA_SUCCESS);
  for (int i = 0; i < kRows * kCols; i++)
    CHECK(close_to(y[i], want[i]));

  CHECK_CU(cu.ModuleUnload(m), CUDA_SUCCESS);
  CHECK_CU(fwd(f1, 1, 128, dy, dx, kRows, kCols, 1.f), CUDA_ERROR_INVALID_HANDLE);

  /* The log. */
  char line[128];
  snprintf(line, sizeof line, "load ok ptx compute_80 %zu pid=%d sha256=", strlen(kPtx),
           (int)getpid());
  CHECK(log_has(line));
  snprintf(line, sizeof line, "load ok cubin sm_90 %zu pid=%d sha256=", elf_bytes, (int)getpid());
  CHECK(log_has(line));
  CHECK(log_has("load fail CUDA_ERROR_INVALID_IMAGE "));
  CHECK(log_has("load fail CUDA_ERROR_UNSUPPORTED_PTX_VERSION "));
  CHECK(log_has("load fail CUDA_ERROR_NO_BINARY_FOR_GPU cubin sm_80 on a device sm_90\n"));
  CHECK(log_has("\nlaunch kiln_scaled_softmax_fwd_f32_w1 grid=1 block=128\n"));
  CHECK(log_has("\nlaunch kiln_scaled_softmax_fwd_f32_w1 grid=2 block=128\n"));
  CHECK(log_has("\nlaunch fail kiln_scaled_softmax_fwd_f32_w1 block 256x1x1"));
  CHECK(log_has("\nwrong kiln_scaled_softmax_fwd_f32_w2 "));
  CHECK(log_has("\nlaunch kiln_scaled_softmax_fwd_f32_w2 grid=1 block=128\n"));
  CHECK(log_has("\nlaunch kiln_scaled_softmax_fwd_f32_w1 grid=1 block=128 (not run)\n"));
  unlink(g_log);
}

/* Many threads, each with its own current context, allocations and launches. */
static CUcontext g_ctx;
static CUfunction g_fn;

static void *worker(void *arg) {
  const float scale = 0.25f + (float)(uintptr_t)arg;
  float x[kRows * kCols], y[kRows * kCols], want[kRows * kCols];
  CUdeviceptr dx, dy;
  for (int i = 0; i < kRows * kCols; i++)
    x[i] = (float)((i * 5 + (int)(uintptr_t)arg) % 13) * 0.3f;
  reference(want, x, scale);
  CHECK_CU(cu.CtxPushCurrent(g_ctx), CUDA_SUCCESS);
  for (int k = 0; k < 20; k++) {
    CHECK_CU(cu.MemAlloc(&dx, sizeof x), CUDA_SUCCESS);
    CHECK_CU(cu.MemAlloc(&dy, sizeof y), CUDA_SUCCESS);
    CHECK_CU(cu.MemcpyHtoD(dx, x, sizeof x), CUDA_SUCCESS);
    CHECK_CU(fwd(g_fn, 1 + k % 3, 128, dy, dx, kRows, kCols, scale), CUDA_SUCCESS);
    CHECK_CU(cu.MemcpyDtoH(y, dy, sizeof y), CUDA_SUCCESS);
    for (int i = 0; i < kRows * kCols; i++)
      CHECK(close_to(y[i], want[i]));
    CHECK_CU(cu.MemFree(dx), CUDA_SUCCESS);
    CHECK_CU(cu.MemFree(dy), CUDA_SUCCESS);
  }
  CHECK_CU(cu.CtxPopCurrent(NULL), CUDA_SUCCESS);
  return NULL;
}

static void threads(void) {
  if (!load()) return;
  CUmodule m;
  CHECK_CU(cu.Init(0), CUDA_SUCCESS);
  CHECK_CU(cu.DevicePrimaryCtxRetain(&g_ctx, 0), CUDA_SUCCESS);
  CHECK_CU(cu.CtxPushCurrent(g_ctx), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleLoadDataEx(&m, kPtx, 0, NULL, NULL), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleGetFunction(&g_fn, m, "kiln_scaled_softmax_fwd_f32_w1"), CUDA_SUCCESS);
  pthread_t t[8];
  for (uintptr_t i = 0; i < 8; i++)
    CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0);
  for (int i = 0; i < 8; i++)
    pthread_join(t[i], NULL);
}

/* The other units and the backward: arguments reach the kernels in order. */
static CUmodule load_entries(const char *const *names, int n) {
  char ptx[2048];
  int len = snprintf(ptx, sizeof ptx, ".version 8.0\n.target sm_90\n.address_size 64\n");
  for (int i = 0; i < n; i++)
    len +=
        snprintf(ptx + len, sizeof ptx - (size_t)len, ".visible .entry %s() { ret; }\n", names[i]);
  CUmodule m = NULL;
  CHECK_CU(cu.ModuleLoadDataEx(&m, ptx, 0, NULL, NULL), CUDA_SUCCESS);
  return m;
}

static CUdeviceptr upload(const void *p, size_t n) {
  CUdeviceptr d = 0;
  CHECK_CU(cu.MemAlloc(&d, n), CUDA_SUCCESS);
  CHECK_CU(cu.MemcpyHtoD(d, p, n), CUDA_SUCCESS);
  return d;
}

/* Softmax of row r over the columns where keep[j] (all zeros when none). */
static void reference_row(float *y, const float *x, const unsigned char *keep, float scale) {
  float m = -INFINITY, s = 0;
  for (int j = 0; j < kCols; j++)
    if (keep[j]) m = fmaxf(m, scale * x[j]);
  for (int j = 0; j < kCols; j++)
    s += keep[j] ? expf(scale * x[j] - m) : 0.f;
  for (int j = 0; j < kCols; j++)
    y[j] = keep[j] ? expf(scale * x[j] - m) / s : 0.f;
}

static void other_units(void) {
  if (!load()) return;
  static const char *const names[] = {"kiln_scaled_masked_softmax_fwd_f32_b4",
                                      "kiln_scaled_upper_triang_masked_softmax_fwd_f32_g",
                                      "kiln_scaled_softmax_bwd_f32_w4"};
  CUcontext c;
  CUfunction fm, fc, fb;
  CHECK_CU(cu.Init(0), CUDA_SUCCESS);
  CHECK_CU(cu.DevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
  CHECK_CU(cu.CtxPushCurrent(c), CUDA_SUCCESS);
  CUmodule m = load_entries(names, 3);
  CHECK_CU(cu.ModuleGetFunction(&fm, m, names[0]), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleGetFunction(&fc, m, names[1]), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleGetFunction(&fb, m, names[2]), CUDA_SUCCESS);
  float x[kRows * kCols], y[kRows * kCols], want[kRows * kCols];
  for (int i = 0; i < kRows * kCols; i++)
    x[i] = (float)((i * 3) % 7) * 0.5f - 1.f;
  CUdeviceptr dx = upload(x, sizeof x), dy = upload(x, sizeof x);

  /* Masked, b 2, heads 1, sq 2, a mask per batch; row 3 fully masked. */
  unsigned char mask[kRows * kCols], keep[kCols];
  for (int i = 0; i < kRows * kCols; i++)
    mask[i] = i >= 3 * kCols || i % 3 == 0;
  CUdeviceptr dm = upload(mask, sizeof mask);
  float scale = 0.8f;
  long long rows = kRows;
  int cols = kCols, sq = 2, heads = 1, mb = 2;
  void *pm[] = {&dy, &dx, &dm, &scale, &rows, &cols, &sq, &heads, &mb};
  CHECK_CU(cu.LaunchKernel(fm, 3, 1, 1, 512, 1, 1, 0, NULL, pm, NULL), CUDA_SUCCESS);
  CHECK_CU(cu.MemcpyDtoH(y, dy, sizeof y), CUDA_SUCCESS);
  for (int r = 0; r < kRows; r++) {
    for (int j = 0; j < kCols; j++)
      keep[j] = !mask[r * kCols + j];
    reference_row(want + r * kCols, x + r * kCols, keep, scale);
  }
  for (int i = 0; i < kRows * kCols; i++)
    CHECK(close_to(y[i], want[i]));
  mb = 3; /* neither 1 nor the batch */
  CHECK_CU(cu.LaunchKernel(fm, 3, 1, 1, 512, 1, 1, 0, NULL, pm, NULL), CUDA_ERROR_INVALID_VALUE);
  mb = 2, dm = 0; /* the masked unit reads its mask */
  CHECK_CU(cu.LaunchKernel(fm, 3, 1, 1, 512, 1, 1, 0, NULL, pm, NULL), CUDA_ERROR_INVALID_VALUE);

  /* Causal, sq 4: query i sees keys 0..i. */
  sq = 4;
  void *pc[] = {&dy, &dx, &dm, &scale, &rows, &cols, &sq, &heads, &mb};
  CHECK_CU(cu.LaunchKernel(fc, 1, 1, 1, 512, 1, 1, 0, NULL, pc, NULL), CUDA_SUCCESS);
  CHECK_CU(cu.MemcpyDtoH(y, dy, sizeof y), CUDA_SUCCESS);
  for (int r = 0; r < kRows; r++) {
    for (int j = 0; j < kCols; j++)
      keep[j] = j <= r;
    reference_row(want + r * kCols, x + r * kCols, keep, scale);
  }
  for (int i = 0; i < kRows * kCols; i++)
    CHECK(close_to(y[i], want[i]));

  /* Backward in place (dx = dy): dx = scale * y * (dy - sum(dy * y)). */
  float g[kRows * kCols];
  for (int i = 0; i < kRows * kCols; i++)
    g[i] = (float)(i % 5) * 0.25f - 0.3f;
  CUdeviceptr dg = upload(g, sizeof g);
  void *pb[] = {&dg, &dy, &dg, &scale, &rows, &cols, &sq};
  CHECK_CU(cu.LaunchKernel(fb, 1, 1, 1, 128, 1, 1, 0, NULL, pb, NULL), CUDA_SUCCESS);
  float got[kRows * kCols];
  CHECK_CU(cu.MemcpyDtoH(got, dg, sizeof got), CUDA_SUCCESS);
  for (int r = 0; r < kRows; r++) {
    float dot = 0;
    for (int j = 0; j < kCols; j++)
      dot += g[r * kCols + j] * y[r * kCols + j];
    for (int j = 0; j < kCols; j++) {
      const float w = scale * y[r * kCols + j] * (g[r * kCols + j] - dot);
      CHECK(fabsf(got[r * kCols + j] - w) <= 1e-5f);
    }
  }
}

static void no_device(void) {
  setenv("KILN_FAKE_CUDA_DEVICES", "", 1);
  if (!load()) return;
  CHECK_CU(cu.Init(0), CUDA_ERROR_NO_DEVICE);
}

static void bad_knob(void) {
  setenv("KILN_FAKE_CUDA_DEVICES", "9x", 1);
  if (!load()) return;
  CHECK_CU(cu.Init(0), CUDA_ERROR_UNKNOWN);
}

static void reject_cubin_old_driver(void) {
  setenv("KILN_FAKE_CUDA_REJECT", "cubin", 1);
  setenv("KILN_FAKE_CUDA_DRIVER", "12040", 1);
  if (!load()) return;
  CUcontext c;
  CUmodule m;
  int v = 0;
  unsigned char elf[512];
  char ptx[sizeof kPtx];
  CHECK_CU(cu.Init(0), CUDA_SUCCESS);
  CHECK_CU(cu.DriverGetVersion(&v), CUDA_SUCCESS);
  CHECK(v == 12040);
  CHECK_CU(cu.DevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
  CHECK_CU(cu.CtxPushCurrent(c), CUDA_SUCCESS);
  make_cubin(elf, 190, 8, 0x6005a04, "kiln_scaled_softmax_fwd_f32_w1");
  CHECK_CU(cu.ModuleLoadDataEx(&m, elf, 0, NULL, NULL), CUDA_ERROR_INVALID_IMAGE);
  CHECK_CU(cu.ModuleLoadDataEx(&m, kPtx, 0, NULL, NULL), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  memcpy(ptx, kPtx, sizeof ptx);
  memcpy(strstr(ptx, ".version 9.0"), ".version 8.4", 12);
  CHECK_CU(cu.ModuleLoadDataEx(&m, ptx, 0, NULL, NULL), CUDA_SUCCESS);
}

/* KILN_FAKE_CUDA_CAPTURE=1 (read on every call): every stream reports an
 * active capture; a module load is refused as during a global-mode capture
 * and invalidates it (launches then fail too) until the knob is off. */
static void graph_capture(void) {
  if (!load()) return;
  CUcontext c;
  CUmodule m = NULL;
  CUfunction f = NULL;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  unsigned char elf[512];
  CHECK_CU(cu.Init(0), CUDA_SUCCESS);
  CHECK_CU(cu.StreamIsCapturing(NULL, &st), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_CU(cu.DevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
  CHECK_CU(cu.CtxPushCurrent(c), CUDA_SUCCESS);
  CHECK_CU(cu.StreamIsCapturing(NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(cu.StreamIsCapturing(NULL, &st), CUDA_SUCCESS);
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
  make_cubin(elf, 190, 8, 0x6005a04, "kiln_scaled_softmax_fwd_f32_w1");
  CHECK_CU(cu.ModuleLoadDataEx(&m, elf, 0, NULL, NULL), CUDA_SUCCESS);
  CHECK_CU(cu.ModuleGetFunction(&f, m, "kiln_scaled_softmax_fwd_f32_w1"), CUDA_SUCCESS);

  setenv("KILN_FAKE_CUDA_CAPTURE", "1", 1);
  CHECK_CU(cu.StreamIsCapturing((CUstream)(uintptr_t)0x1000, &st), CUDA_SUCCESS);
  CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUmodule m2 = NULL;
  CHECK_CU(cu.ModuleLoadDataEx(&m2, elf, 0, NULL, NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(m2 == NULL);
  CHECK_CU(cu.StreamIsCapturing(NULL, &st), CUDA_SUCCESS);
  CHECK(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  float buf[8] = {0};
  CUdeviceptr d = upload(buf, sizeof buf);
  long long rows = 1;
  int cols = 8;
  float scale = 1.0f;
  void *params[] = {&d, &d, &scale, &rows, &cols};
  CHECK_CU(cu.LaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL),
           CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  const char *name = NULL;
  CHECK_CU(cu.GetErrorName(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, &name), CUDA_SUCCESS);
  CHECK(name && !strcmp(name, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"));

  unsetenv("KILN_FAKE_CUDA_CAPTURE"); /* the capture ended */
  CHECK_CU(cu.StreamIsCapturing(NULL, &st), CUDA_SUCCESS);
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK_CU(cu.ModuleLoadDataEx(&m2, elf, 0, NULL, NULL), CUDA_SUCCESS);
  setenv("KILN_FAKE_CUDA_CAPTURE", "1", 1); /* a new capture: active, not invalidated */
  CHECK_CU(cu.StreamIsCapturing(NULL, &st), CUDA_SUCCESS);
  CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  unsetenv("KILN_FAKE_CUDA_CAPTURE");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <libkiln_fakecuda.so>\n", argv[0]);
    return 2;
  }
  g_lib = argv[1];
  static const char *const knobs[] = {"KILN_FAKE_CUDA_DEVICES", "KILN_FAKE_CUDA_DRIVER",
                                      "KILN_FAKE_CUDA_LOG",     "KILN_FAKE_CUDA_REJECT",
                                      "KILN_FAKE_CUDA_WRONG",   "KILN_FAKE_CUDA_CAPTURE",
                                      "KILN_FAKE_CUDA_RUN"};
  for (size_t i = 0; i < sizeof knobs / sizeof *knobs; i++)
    unsetenv(knobs[i]);
  scenario("devices, contexts, memory, events", devices_and_contexts);
  scenario("images and launches", images_and_launches);
  scenario("masked, causal, backward", other_units);
  scenario("threads", threads);
  scenario("no device", no_device);
  scenario("a bad knob fails cuInit", bad_knob);
  scenario("KILN_FAKE_CUDA_REJECT=cubin, driver 12.4", reject_cubin_old_driver);
  scenario("KILN_FAKE_CUDA_CAPTURE: graph capture", graph_capture);
  if (g_failures) fprintf(stderr, "%d failure(s)\n", g_failures);
  return g_failures ? 1 : 0;
}
