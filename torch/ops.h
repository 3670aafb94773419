/* The boxed kernels of kiln's ops (one file per op family), by kiln:: name:
 * each family's table of KT_KERNEL entries (call.h), ended by {NULL, NULL}. */
#ifndef KILN_TORCH_OPS_H
#define KILN_TORCH_OPS_H

#include "torch/call.h"

typedef struct kt_kernel {
  const kt_op *op;
  kt_boxed_fn fn;
} kt_kernel;

extern const kt_kernel kt_softmax_kernels[];
extern const kt_kernel kt_norm_kernels[];
extern const kt_kernel kt_act_kernels[];
extern const kt_kernel kt_vocab_kernels[];
extern const kt_kernel kt_rope_kernels[];

#endif
