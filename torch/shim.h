/* torch's stable C shim, as libkiln_torch reaches it: the prototypes of the
 * functions it calls (torch's own headers, torch/csrc/inductor/aoti_torch/c/
 * shim.h and torch/csrc/stable/c/shim.h, are C++ and not a build dependency),
 * and one table of pointers filled by dlsym from the libtorch the process
 * already loaded (NCCL's cudawrap.h pattern: an optional symbol may be
 * missing, and then the fast path is off).
 *
 * The oldest torch that exports each symbol is in docs/python.md ("The fast
 * path"). The types are torch's: AtenTensorHandle is an opaque at::Tensor*,
 * StableIValue a uint64_t holding the bits of each boxed argument. */
#ifndef KILN_TORCH_SHIM_H
#define KILN_TORCH_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int32_t kt_aoti_error;                      /* AOTITorchError: 0 = success */
typedef struct kt_aten_tensor *kt_tensor_handle;    /* AtenTensorHandle */
typedef struct kt_torch_library *kt_library_handle; /* TorchLibraryHandle */
typedef uint64_t kt_ivalue;                         /* StableIValue */
typedef struct kt_torch_string *kt_string_handle;   /* StringHandle */
/* A boxed kernel: stack[0, num_args) holds the arguments (tensors as new
 * handles the kernel owns); the kernel writes its outputs to
 * stack[0, num_outputs) (new handles whose ownership passes to torch). */
typedef void (*kt_boxed_fn)(kt_ivalue *stack, uint64_t num_args, uint64_t num_outputs);

typedef struct kt_shim {
  /* tensors */
  kt_aoti_error (*delete_tensor_object)(kt_tensor_handle t);
  kt_aoti_error (*get_data_ptr)(kt_tensor_handle t, void **ret);
  kt_aoti_error (*get_dim)(kt_tensor_handle t, int64_t *ret);
  kt_aoti_error (*get_sizes)(kt_tensor_handle t, int64_t **ret);
  kt_aoti_error (*get_dtype)(kt_tensor_handle t, int32_t *ret);
  kt_aoti_error (*get_device_type)(kt_tensor_handle t, int32_t *ret);
  kt_aoti_error (*get_device_index)(kt_tensor_handle t, int32_t *ret);
  kt_aoti_error (*is_contiguous)(kt_tensor_handle t, bool *ret);
  kt_aoti_error (*empty_strided)(int64_t ndim, const int64_t *sizes, const int64_t *strides,
                                 int32_t dtype, int32_t device_type, int32_t device_index,
                                 kt_tensor_handle *ret);
  kt_aoti_error (*copy_)(kt_tensor_handle self, kt_tensor_handle src, int32_t non_blocking);
  kt_aoti_error (*zero_)(kt_tensor_handle self);
  /* registration */
  kt_aoti_error (*library_init_impl)(const char *ns, const char *k, const char *file, uint32_t line,
                                     kt_library_handle *ret);
  kt_aoti_error (*library_impl)(kt_library_handle lib, const char *name, kt_boxed_fn fn);
  kt_aoti_error (*delete_library_object)(kt_library_handle lib);
  /* raises c10::Error (a Python RuntimeError) with msg when cond is false */
  void (*check)(bool cond, const char *func, const char *file, uint32_t line, const char *msg);
  /* optional: the boxed T? argument's heap StableIValue (torch >= 2.13);
   * without it the ops taking an optional tensor stay on the Python path */
  kt_aoti_error (*delete_stable_ivalue)(kt_ivalue *v);
  /* optional: str arguments arrive as an owning StringHandle (torch >= 2.10);
   * without these the ops taking a str stay on the Python path */
  kt_aoti_error (*string_length)(kt_string_handle s, size_t *ret);
  kt_aoti_error (*string_c_str)(kt_string_handle s, const char **ret);
  kt_aoti_error (*delete_string)(kt_string_handle s);
  /* optional: libtorch_cuda's (a CPU-only torch has none) */
  kt_aoti_error (*get_current_cuda_stream)(int32_t device_index, void **ret);
} kt_shim;

/* The table, filled by kt_shim_load; read-only afterwards. */
extern kt_shim kt_torch;
/* dtype and device codes, read once at load from torch's getters
 * (aoti_torch_dtype_float32() ...: functions in torch, constants in practice) */
extern int32_t kt_f32, kt_f16, kt_bf16, kt_u8, kt_bool, kt_i64, kt_cpu, kt_cuda;

/* Fills kt_torch from the already loaded libtorch_cpu.so and libtorch_cuda.so
 * at these paths (RTLD_NOLOAD: never loads a second torch). Returns 0, or -1
 * with the first missing required symbol's name in missing (size n). */
int kt_shim_load(const char *cpu_lib, const char *cuda_lib, char *missing, size_t n);

/* torch's name of a dtype code ("torch.float16"); "torch.<dtype N>" for a
 * dtype kiln never names. Writes into buf (size n), returns buf. */
const char *kt_dtype_name(int32_t dtype, char *buf, size_t n);

#endif
