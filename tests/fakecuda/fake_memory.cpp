/* fake_memory.cpp — device memory (host memory, so kernels use the pointers
 * directly), copies, memset and events.
 *
 * Strictness: every device range a call touches must lie inside one live
 * allocation (CUDA_ERROR_INVALID_VALUE otherwise); new allocations are filled
 * with 0xff bytes (NaN in every float type) so a host that reads memory it
 * never wrote sees garbage, as on a GPU; under ASan the bytes between the
 * requested size and the 256-byte rounding are poisoned, so a kernel that
 * runs off the end of a buffer is caught. */
#include <stdlib.h> /* aligned_alloc, free */
#include <string.h> /* memcpy, memmove, memset */

#include <chrono> /* std::chrono::steady_clock */
#include <map>    /* std::map */

#include "asan.h" /* ASAN_(UN)POISON_MEMORY_REGION (tests/emu) */
#include "fake.h"

namespace kiln_fake {
namespace {

const size_t kAlign = 256;
const unsigned long long kDeviceBytes = 80ull << 30; /* fake_DeviceTotalMem's */

struct allocation {
  size_t size; /* as asked; the block is rounded up to kAlign */
  const context *ctx;
};
std::map<uintptr_t, allocation> g_allocs; /* by base address */
std::map<uintptr_t, allocation> g_host;   /* cuMemAllocHost's, by base address */
unsigned long long g_used[64];            /* bytes allocated per device */

/* The allocation holding [p, p + n), n >= 1, or end(). */
std::map<uintptr_t, allocation>::iterator find(uintptr_t p, unsigned long long n) {
  auto it = g_allocs.upper_bound(p);
  if (it == g_allocs.begin()) return g_allocs.end();
  --it;
  const unsigned long long off = p - it->first;
  return off < it->second.size && n <= it->second.size - off ? it : g_allocs.end();
}

void release(std::map<uintptr_t, allocation>::iterator it) {
  const size_t rounded = (it->second.size + kAlign - 1) / kAlign * kAlign;
  ASAN_UNPOISON_MEMORY_REGION((void *)it->first, rounded);
  g_used[it->second.ctx->device] -= it->second.size;
  free((void *)it->first);
  g_allocs.erase(it);
}

struct event {
  const context *ctx;
  unsigned flags;
  bool recorded;
  std::chrono::steady_clock::time_point at;
};
std::map<uintptr_t, event> g_events;

} // namespace

/* Page-locked host memory belongs to its context as well. */
static void host_drop_context(const context *c) {
  for (auto it = g_host.begin(); it != g_host.end();) {
    if (it->second.ctx == c) {
      free((void *)it->first);
      it = g_host.erase(it);
    } else {
      ++it;
    }
  }
}

bool memory_covers(uintptr_t p, unsigned long long n, const context *c) {
  const unsigned long long len = n ? n : 1;
  auto it = find(p, len);
  if (it != g_allocs.end()) return !c || it->second.ctx == c;
  if (!cfg().host_memory || p + len < p) return false;
  /* host memory: the range must not touch any allocation (nor reach past one's end) */
  auto after = g_allocs.lower_bound(p);
  if (after != g_allocs.end() && after->first < p + len) return false;
  if (after != g_allocs.begin()) {
    auto before = std::prev(after);
    if (before->first + before->second.size > p) return false;
  }
  return true;
}

void memory_drop_context(const context *c) {
  host_drop_context(c);
  for (auto it = g_allocs.begin(); it != g_allocs.end();) {
    auto next = std::next(it);
    if (it->second.ctx == c) release(it);
    it = next;
  }
}

void events_drop_context(const context *c) {
  for (auto it = g_events.begin(); it != g_events.end();)
    it = it->second.ctx == c ? g_events.erase(it) : std::next(it);
}

/* ---- allocations -------------------------------------------------------------- */

CUresult fake_MemAlloc(CUdeviceptr *p, size_t bytes) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > kDeviceBytes - g_used[c->device]) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void *m = aligned_alloc(kAlign, rounded);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(m, 0xff, bytes);
  ASAN_POISON_MEMORY_REGION((char *)m + bytes, rounded - bytes);
  g_allocs[(uintptr_t)m] = allocation{bytes, c};
  g_used[c->device] += bytes;
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}

CUresult fake_MemFree(CUdeviceptr p) {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  auto it = g_allocs.find((uintptr_t)p);
  if (it == g_allocs.end()) return CUDA_ERROR_INVALID_VALUE; /* not a base cuMemAlloc returned */
  release(it);
  return CUDA_SUCCESS;
}

/* Page-locked host memory: plain host memory here, owned by the context
 * (freed with it), and cuMemFreeHost needs the exact base. */
CUresult fake_MemAllocHost(void **p, size_t bytes) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void *m = malloc(bytes);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(m, 0xff, bytes);
  g_host[(uintptr_t)m] = allocation{bytes, c};
  *p = m;
  return CUDA_SUCCESS;
}

CUresult fake_MemFreeHost(void *p) {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  auto it = g_host.find((uintptr_t)p);
  if (it == g_host.end()) return CUDA_ERROR_INVALID_VALUE;
  free(p);
  g_host.erase(it);
  return CUDA_SUCCESS;
}

/* ---- copies ---------------------------------------------------------------------- */

CUresult fake_MemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!src || !memory_covers((uintptr_t)dst, n, nullptr)) return CUDA_ERROR_INVALID_VALUE;
  memcpy((void *)(uintptr_t)dst, src, n);
  return CUDA_SUCCESS;
}

CUresult fake_MemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !memory_covers((uintptr_t)src, n, nullptr)) return CUDA_ERROR_INVALID_VALUE;
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

/* Streams are synchronous: the async copies are the copies (the stream is
 * accepted and ignored, as by every fake entry point). */
CUresult fake_MemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream) {
  return fake_MemcpyHtoD(dst, src, n);
}

CUresult fake_MemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream) {
  return fake_MemcpyDtoH(dst, src, n);
}

CUresult fake_MemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!memory_covers((uintptr_t)dst, n, nullptr) || !memory_covers((uintptr_t)src, n, nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

CUresult fake_MemsetD8(CUdeviceptr dst, unsigned char v, size_t n) {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!memory_covers((uintptr_t)dst, n, nullptr)) return CUDA_ERROR_INVALID_VALUE;
  memset((void *)(uintptr_t)dst, v, n);
  return CUDA_SUCCESS;
}

/* ---- events: host time at record (launches are synchronous, so it is the
 * time the work before it took) ------------------------------------------------- */

CUresult fake_EventCreate(CUevent *e, unsigned int flags) {
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if ((flags & ~known) || ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  const uintptr_t h = next_handle();
  g_events[h] = event{c, flags, false, {}};
  *e = (CUevent)h;
  return CUDA_SUCCESS;
}

CUresult fake_EventDestroy(CUevent e) {
  std::lock_guard<std::mutex> g(lock());
  if (CUresult r = initialized()) return r;
  if (!g_events.erase((uintptr_t)e)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

CUresult fake_EventRecord(CUevent e, CUstream) {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  auto it = g_events.find((uintptr_t)e);
  if (it == g_events.end() || it->second.ctx != c) return CUDA_ERROR_INVALID_HANDLE;
  it->second.recorded = true;
  it->second.at = std::chrono::steady_clock::now();
  return CUDA_SUCCESS;
}

CUresult fake_EventSynchronize(CUevent e) {
  std::lock_guard<std::mutex> g(lock());
  if (CUresult r = initialized()) return r;
  return g_events.count((uintptr_t)e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult fake_EventElapsedTime(float *ms, CUevent start, CUevent end) {
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(lock());
  if (CUresult r = initialized()) return r;
  auto a = g_events.find((uintptr_t)start), b = g_events.find((uintptr_t)end);
  if (a == g_events.end() || b == g_events.end()) return CUDA_ERROR_INVALID_HANDLE;
  /* The driver's answers: never recorded, or created without timing. */
  if (!a->second.recorded || !b->second.recorded) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->second.flags | b->second.flags) & CU_EVENT_DISABLE_TIMING)
    return CUDA_ERROR_INVALID_HANDLE;
  *ms = std::chrono::duration<float, std::milli>(b->second.at - a->second.at).count();
  return CUDA_SUCCESS;
}

} // namespace kiln_fake
