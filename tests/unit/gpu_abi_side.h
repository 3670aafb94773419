/* The two halves of test_common_gpu_abi (gpu_abi_side.c, compiled twice). */
#ifndef KILN_TESTS_UNIT_GPU_ABI_SIDE_H
#define KILN_TESTS_UNIT_GPU_ABI_SIDE_H

typedef struct abi_entry {
  const char *name;
  long long value;
} abi_entry;

extern const abi_entry abi_kiln[];    /* common/gpu_abi.h's own declarations */
extern const abi_entry abi_toolkit[]; /* the toolkit's headers */

#endif
