/* fake_context.cpp — devices (from KILN_FAKE_CUDA_DEVICES) and their primary
 * contexts: a reference count per device, and per thread a stack of current
 * contexts (push/pop), as the driver keeps them. Releasing a primary context
 * to zero destroys what it owned (memory, modules, events) and clears a
 * sticky launch error; its handle stays the same for the next retain. */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* getenv */
#include <string.h> /* strcmp */

#include "fake.h"

namespace kiln_fake {
namespace {

const int kMaxDevices = 64;                  /* parse_devices' limit */
const int kSmCount = 132;                    /* an H100 SXM's */
const size_t kTotalMem = 80ull << 30;        /* 80 GiB */
context g_contexts[kMaxDevices];             /* device d's primary context: &g_contexts[d] */
thread_local std::vector<CUcontext> t_stack; /* back(): the current context */

bool valid_device(CUdevice d) {
  return d >= 0 && d < (int)cfg().devices.size();
}

/* A device handle's checks, in the driver's order. */
CUresult check_device(CUdevice d) {
  if (CUresult r = initialized()) return r;
  return valid_device(d) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

} // namespace

context *context_of(CUcontext c) {
  for (int d = 0; d < (int)cfg().devices.size(); ++d)
    if ((void *)c == (void *)&g_contexts[d]) return &g_contexts[d];
  return nullptr;
}

CUresult current(context **out) {
  *out = nullptr;
  if (CUresult r = initialized()) return r;
  if (t_stack.empty() || !t_stack.back()) return CUDA_ERROR_INVALID_CONTEXT;
  context *c = context_of(t_stack.back());
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (c->refs == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (c->sticky != CUDA_SUCCESS) return c->sticky;
  *out = c;
  return CUDA_SUCCESS;
}

/* ---- devices ------------------------------------------------------------------ */

CUresult fake_DeviceGetCount(int *n) {
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = initialized()) return r;
  *n = (int)cfg().devices.size();
  return CUDA_SUCCESS;
}

CUresult fake_DeviceGet(CUdevice *d, int ordinal) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(ordinal)) return r;
  *d = ordinal;
  return CUDA_SUCCESS;
}

CUresult fake_DeviceGetName(char *name, int len, CUdevice d) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(d)) return r;
  const device &dev = cfg().devices[d];
  snprintf(name, (size_t)len, "Fake GPU sm_%d%d", dev.major, dev.minor); /* truncates, as cuda */
  return CUDA_SUCCESS;
}

CUresult fake_DeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(d)) return r;
  const device &dev = cfg().devices[d];
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = dev.major; return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = dev.minor; return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = kSmCount; return CUDA_SUCCESS;
  default: /* the fake models no other attribute: a caller that needs one must say so here */
    return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult fake_DeviceTotalMem(size_t *bytes, CUdevice d) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(d)) return r;
  *bytes = kTotalMem;
  return CUDA_SUCCESS;
}

/* ---- primary contexts ----------------------------------------------------------- */

CUresult fake_DevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(lock());
  if (CUresult r = check_device(d)) return r;
  context &ctx = g_contexts[d];
  if (ctx.refs++ == 0) {
    ctx.device = d;
    ctx.sticky = CUDA_SUCCESS;
  }
  *c = (CUcontext)&ctx;
  return CUDA_SUCCESS;
}

CUresult fake_DevicePrimaryCtxRelease(CUdevice d) {
  std::lock_guard<std::mutex> g(lock());
  if (CUresult r = check_device(d)) return r;
  context &ctx = g_contexts[d];
  if (ctx.refs == 0) return CUDA_ERROR_INVALID_CONTEXT; /* released more often than retained */
  if (--ctx.refs == 0) {
    modules_drop_context(&ctx);
    events_drop_context(&ctx);
    memory_drop_context(&ctx);
    ctx.sticky = CUDA_SUCCESS;
  }
  return CUDA_SUCCESS;
}

/* ---- the current context ---------------------------------------------------------- */

CUresult fake_CtxGetCurrent(CUcontext *c) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = initialized()) return r;
  *c = t_stack.empty() ? nullptr : t_stack.back();
  return CUDA_SUCCESS;
}

CUresult fake_CtxPushCurrent(CUcontext c) {
  std::lock_guard<std::mutex> g(lock());
  if (CUresult r = initialized()) return r;
  const context *ctx = context_of(c);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx->refs == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  t_stack.push_back(c);
  return CUDA_SUCCESS;
}

CUresult fake_CtxPopCurrent(CUcontext *c) {
  if (CUresult r = initialized()) return r;
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (c) *c = t_stack.back();
  t_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult fake_CtxGetDevice(CUdevice *d) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  *d = c->device;
  return CUDA_SUCCESS;
}

/* Launches run synchronously: there is never work to wait for, only errors. */
CUresult fake_CtxSynchronize() {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  return current(&c);
}

CUresult fake_StreamSynchronize(CUstream) {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  return current(&c);
}

/* Work is done when it is enqueued, so a stream is always idle, unless
 * KILN_FAKE_CUDA_STREAM_HANG=1 says the stream never drains (a collective
 * whose peer never joins). Read on every call, unlike the other knobs, so a
 * test can turn it on and off between calls. */
CUresult fake_StreamQuery(CUstream) {
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  const char *hang = getenv("KILN_FAKE_CUDA_STREAM_HANG");
  return hang && !strcmp(hang, "1") ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

namespace {
bool g_capture_invalidated; /* lock() held */
} // namespace

CUstreamCaptureStatus capture_status() {
  const char *on = getenv("KILN_FAKE_CUDA_CAPTURE");
  if (!on || strcmp(on, "1")) {
    g_capture_invalidated = false; /* the capture ended */
    return CU_STREAM_CAPTURE_STATUS_NONE;
  }
  return g_capture_invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                               : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

void capture_invalidate() {
  g_capture_invalidated = true;
}

/* Any stream, the legacy one (NULL) included: the fake has no stream objects,
 * and KILN_FAKE_CUDA_CAPTURE stands for a capture on the stream the caller
 * launches on. */
CUresult fake_StreamIsCapturing(CUstream, CUstreamCaptureStatus *status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(lock());
  context *c;
  if (CUresult r = current(&c)) return r;
  *status = capture_status();
  return CUDA_SUCCESS;
}

} // namespace kiln_fake
