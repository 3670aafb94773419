/* Shared by the unit tests that open a loader on the fake CUDA driver
 * (tests/fakecuda): the driver from argv[1], one fake sm_90 device, and a
 * fresh cache directory with no read-only layers. */
#ifndef KILN_TEST_FAKE_LOADER_H
#define KILN_TEST_FAKE_LOADER_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kiln/cache.h"

/* 0 when the fake driver is set up and co names the new cache in dir (a
 * mkdtemp template, kept by the caller and removed with test_rm_rf); 77
 * (skip) without a fake libcuda; 1 when the directory cannot be made. */
static inline int test_fake_loader_start(int argc, char **argv, char *dir, kiln_cache_options *co) {
  if (argc < 2 || access(argv[1], R_OK) != 0) {
    printf("no fake libcuda (tests/fakecuda needs a C++ compiler); skipped\n");
    return 77;
  }
  setenv("KILN_CUDA_LIBRARY", argv[1], 1);
  setenv("KILN_FAKE_CUDA_DEVICES", "90", 1);
  if (!mkdtemp(dir)) return 1;
  co->dir = dir;
  co->ro_path = "";
  return 0;
}

#endif
