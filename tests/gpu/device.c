/* device.c — device buffers with guards for the gpu tests. */
#include "tests/gpu/device.h"

#include <stdint.h> /* uintptr_t */
#include <stdio.h>  /* snprintf */

static const kiln_cuda_api *cu;
static CUcontext g_ctx;
static CUdevice g_dev;
static int g_pushed;

static int cu_ok(CUresult r, const char *what, char *msg, size_t cap) {
  if (r == CUDA_SUCCESS) return 1;
  snprintf(msg, cap, "%s: %s", what, kiln_cuda_error_name(r));
  return 0;
}

int dev_open(int ordinal, char *msg, size_t cap) {
  if (kiln_cuda(&cu) != KILN_OK) {
    snprintf(msg, cap, "%s", kiln_last_error());
    return 0;
  }
  if (!cu_ok(cu->DeviceGet(&g_dev, ordinal), "cuDeviceGet", msg, cap) ||
      !cu_ok(cu->DevicePrimaryCtxRetain(&g_ctx, g_dev), "cuDevicePrimaryCtxRetain", msg, cap))
    return 0;
  g_pushed = cu_ok(cu->CtxPushCurrent(g_ctx), "cuCtxPushCurrent", msg, cap);
  return g_pushed;
}

void dev_close(void) {
  CUcontext popped;
  if (g_pushed) cu->CtxPopCurrent(&popped);
  if (g_ctx) cu->DevicePrimaryCtxRelease(g_dev);
  g_pushed = 0;
  g_ctx = NULL;
}

int dev_alloc(dbuf *b, size_t bytes, char *msg, size_t cap) {
  b->bytes = bytes;
  return cu_ok(cu->MemAlloc(&b->p, bytes + GUARD_BYTES), "cuMemAlloc", msg, cap) &&
         cu_ok(cu->MemsetD8(b->p, 0xFF, bytes + GUARD_BYTES), "cuMemsetD8", msg, cap);
}

void dev_free(dbuf *b) {
  if (b->p) cu->MemFree(b->p);
  b->p = 0;
}

int dev_poison(dbuf *b, char *msg, size_t cap) {
  return cu_ok(cu->MemsetD8(b->p, 0xFF, b->bytes + GUARD_BYTES), "cuMemsetD8", msg, cap);
}

int dev_put(dbuf *b, const void *h, char *msg, size_t cap) {
  return cu_ok(cu->MemcpyHtoD(b->p, h, b->bytes), "cuMemcpyHtoD", msg, cap);
}

int dev_get(const dbuf *b, void *h, const char *name, char *msg, size_t cap) {
  unsigned char guard[GUARD_BYTES];
  if (!cu_ok(cu->MemcpyDtoH(h, b->p, b->bytes), "cuMemcpyDtoH", msg, cap) ||
      !cu_ok(cu->MemcpyDtoH(guard, b->p + b->bytes, GUARD_BYTES), "cuMemcpyDtoH", msg, cap))
    return 0;
  for (size_t i = 0; i < GUARD_BYTES; i++)
    if (guard[i] != 0xFF) {
      snprintf(msg, cap, "wrote past the end of %s (byte %zu after it)", name, i);
      return 0;
    }
  return 1;
}

int dev_sync(const char *what, char *msg, size_t cap) {
  return cu_ok(cu->CtxSynchronize(), what, msg, cap);
}

void *dptr(CUdeviceptr p) {
  return (void *)(uintptr_t)p;
}
