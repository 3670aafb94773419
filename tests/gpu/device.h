/* device.h — device memory for the gpu tests, through kiln's own driver
 * table (loader/driver.h), so they need nothing but libkiln and a libcuda
 * (the real one, or the one KILN_CUDA_LIBRARY names).
 *
 * Every buffer is followed by GUARD_BYTES of 0xFF (a NaN in every dtype):
 * dev_get fails when a kernel wrote past the end of its output. Functions
 * return 1 on success, 0 with a one-line reason in msg. */
#ifndef KILN_TESTS_GPU_DEVICE_H
#define KILN_TESTS_GPU_DEVICE_H

#include <stddef.h> /* size_t */

#include "loader/driver.h" /* CUdeviceptr, kiln_cuda_api */

#define GUARD_BYTES 256

typedef struct dbuf {
  CUdeviceptr p;
  size_t bytes; /* payload; GUARD_BYTES follow it */
} dbuf;

/* Loads the driver table and makes device `ordinal`'s primary context (the
 * one a loader opened on that ordinal uses) current on this thread. */
int dev_open(int ordinal, char *msg, size_t cap);
/* Pops and releases it again; fine when dev_open failed. */
void dev_close(void);

/* bytes + the guard, all 0xFF. */
int dev_alloc(dbuf *b, size_t bytes, char *msg, size_t cap);
void dev_free(dbuf *b);
/* Every byte, the guard too, to 0xFF. */
int dev_poison(dbuf *b, char *msg, size_t cap);
/* The payload from host memory h. */
int dev_put(dbuf *b, const void *h, char *msg, size_t cap);
/* The payload into h; fails when the guard is no longer all 0xFF (name is
 * the buffer's, for the message). */
int dev_get(const dbuf *b, void *h, const char *name, char *msg, size_t cap);
/* Waits for everything launched; an asynchronous launch error fails it. */
int dev_sync(const char *what, char *msg, size_t cap);
/* A device address as the void * the ops take. */
void *dptr(CUdeviceptr p);

#endif
