/* torch's stable C shim found at run time (shim.h): dlsym in the libtorch the
 * process already loaded, never a link against it, so one libkiln_torch
 * serves every torch that has these symbols. */
#include "torch/shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

kt_shim kt_torch;
int32_t kt_f32, kt_f16, kt_bf16, kt_u8, kt_bool, kt_i64, kt_cpu, kt_cuda;

static int32_t kt_f64, kt_i32, kt_i16, kt_i8;

typedef struct kt_sym {
  const char *name;
  void **slot;
  int required;
} kt_sym;

#define KT_SYM(field, name, req)                                                                   \
  { name, (void **)&kt_torch.field, req }

static const kt_sym kt_cpu_syms[] = {
    KT_SYM(delete_tensor_object, "aoti_torch_delete_tensor_object", 1),
    KT_SYM(get_data_ptr, "aoti_torch_get_data_ptr", 1),
    KT_SYM(get_dim, "aoti_torch_get_dim", 1),
    KT_SYM(get_sizes, "aoti_torch_get_sizes", 1),
    KT_SYM(get_dtype, "aoti_torch_get_dtype", 1),
    KT_SYM(get_device_type, "aoti_torch_get_device_type", 1),
    KT_SYM(get_device_index, "aoti_torch_get_device_index", 1),
    KT_SYM(is_contiguous, "aoti_torch_is_contiguous", 1),
    KT_SYM(empty_strided, "aoti_torch_empty_strided", 1),
    KT_SYM(copy_, "aoti_torch_copy_", 1),
    KT_SYM(zero_, "aoti_torch_zero_", 1),
    KT_SYM(library_init_impl, "aoti_torch_library_init_impl", 1),
    KT_SYM(library_impl, "aoti_torch_library_impl", 1),
    KT_SYM(delete_library_object, "aoti_torch_delete_library_object", 1),
    KT_SYM(check, "aoti_torch_check", 1),
    KT_SYM(delete_stable_ivalue, "torch_delete_stable_ivalue", 0),
    KT_SYM(string_length, "torch_string_length", 0),
    KT_SYM(string_c_str, "torch_string_c_str", 0),
    KT_SYM(delete_string, "torch_delete_string", 0),
};

/* The dtype and device codes: each read once from its getter; name is what
 * kt_dtype_name prints (NULL: a device type). */
static const struct kt_code {
  const char *sym;
  int32_t *code;
  const char *name;
} kt_codes[] = {
    {"aoti_torch_dtype_float32", &kt_f32, "float32"},
    {"aoti_torch_dtype_float16", &kt_f16, "float16"},
    {"aoti_torch_dtype_bfloat16", &kt_bf16, "bfloat16"},
    {"aoti_torch_dtype_float64", &kt_f64, "float64"},
    {"aoti_torch_dtype_int64", &kt_i64, "int64"},
    {"aoti_torch_dtype_int32", &kt_i32, "int32"},
    {"aoti_torch_dtype_int16", &kt_i16, "int16"},
    {"aoti_torch_dtype_int8", &kt_i8, "int8"},
    {"aoti_torch_dtype_uint8", &kt_u8, "uint8"},
    {"aoti_torch_dtype_bool", &kt_bool, "bool"},
    {"aoti_torch_device_type_cpu", &kt_cpu, NULL},
    {"aoti_torch_device_type_cuda", &kt_cuda, NULL},
};
#define KT_N_CODES (sizeof kt_codes / sizeof kt_codes[0])

static int kt_read_codes(void *lib, char *missing, size_t n) {
  for (size_t i = 0; i < KT_N_CODES; i++) {
    int32_t (*get)(void) = (int32_t(*)(void))dlsym(lib, kt_codes[i].sym);
    if (!get) {
      snprintf(missing, n, "%s", kt_codes[i].sym);
      return -1;
    }
    *kt_codes[i].code = get();
  }
  return 0;
}

static int kt_fill(void *lib, const kt_sym *syms, size_t count, char *missing, size_t n) {
  for (size_t i = 0; i < count; i++) {
    *syms[i].slot = lib ? dlsym(lib, syms[i].name) : NULL;
    if (!*syms[i].slot && syms[i].required) {
      snprintf(missing, n, "%s", syms[i].name);
      return -1;
    }
  }
  return 0;
}

int kt_shim_load(const char *cpu_lib, const char *cuda_lib, char *missing, size_t n) {
  memset(&kt_torch, 0, sizeof kt_torch);
  /* RTLD_NOLOAD: the libtorch `import torch` loaded, or nothing; the handles
   * stay open for the process's life (torch is never unloaded either) */
  void *cpu = cpu_lib ? dlopen(cpu_lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  if (!cpu) {
    snprintf(missing, n, "%s (not loaded)", cpu_lib ? cpu_lib : "libtorch_cpu.so");
    return -1;
  }
  if (kt_read_codes(cpu, missing, n) != 0 ||
      kt_fill(cpu, kt_cpu_syms, sizeof kt_cpu_syms / sizeof kt_cpu_syms[0], missing, n) != 0) {
    memset(&kt_torch, 0, sizeof kt_torch);
    return -1;
  }
  void *cuda = cuda_lib ? dlopen(cuda_lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  if (cuda) {
    kt_torch.get_current_cuda_stream =
        (kt_aoti_error(*)(int32_t, void **))dlsym(cuda, "aoti_torch_get_current_cuda_stream");
  }
  return 0;
}

const char *kt_dtype_name(int32_t dtype, char *buf, size_t n) {
  for (size_t i = 0; i < KT_N_CODES; i++) {
    if (kt_codes[i].name && *kt_codes[i].code == dtype) {
      snprintf(buf, n, "torch.%s", kt_codes[i].name);
      return buf;
    }
  }
  snprintf(buf, n, "torch.<dtype %d>", (int)dtype);
  return buf;
}
