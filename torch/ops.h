/* The boxed kernels of kiln's ops (one file per op family), by kiln:: name. */
#ifndef KILN_TORCH_OPS_H
#define KILN_TORCH_OPS_H

#include "torch/shim.h"

typedef struct kt_kernel {
  const char *name;
  kt_boxed_fn fn;
  int optional_args; /* takes a Tensor?: needs the shim's delete_stable_ivalue */
} kt_kernel;

extern const kt_kernel kt_softmax_kernels[];
extern const kt_kernel kt_norm_kernels[];
extern const kt_kernel kt_act_kernels[];

#endif
