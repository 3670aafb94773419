/* libkiln_torch's entry points (kiln_torch.h): the shim, the registration of
 * the kernels per dispatch key, and the loader of each device. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "torch/call.h"
#include "torch/kiln_torch.h"
#include "torch/ops.h"

#define KT_MAX_DEVICES 64

static pthread_mutex_t kt_lock = PTHREAD_MUTEX_INITIALIZER;
static kiln_loader *kt_loaders[KT_MAX_DEVICES];
static int kt_opened;
static char kt_names[1024];

static const kt_kernel *const kt_families[] = {kt_softmax_kernels, kt_norm_kernels, kt_act_kernels,
                                               kt_vocab_kernels, kt_rope_kernels};
#define KT_N_FAMILIES (sizeof kt_families / sizeof kt_families[0])

/* The shim's optional symbols a kernel's arguments need: a Tensor? arrives
 * as a heap StableIValue the kernel frees (torch >= 2.13), a str as a
 * StringHandle it reads and frees (torch >= 2.10). Writes the missing ones'
 * names into missing (size n); 0 when none is. */
static int kt_missing(const kt_op *op, char *missing, size_t n) {
  int w = 0;
  missing[0] = 0;
  if (op->opt && !kt_torch.delete_stable_ivalue)
    w = snprintf(missing, n, "torch_delete_stable_ivalue");
  if (op->strs && !(kt_torch.string_length && kt_torch.string_c_str && kt_torch.delete_string))
    snprintf(missing + w, n - (size_t)w,
             "%storch_string_length, torch_string_c_str, "
             "torch_delete_string",
             w ? ", " : "");
  return missing[0] != 0;
}

static int kt_usable(const kt_kernel *k) {
  char missing[256];
  return !kt_missing(k->op, missing, sizeof missing);
}

int kiln_torch_open(const char *cpu_lib, const char *cuda_lib, char *missing, size_t n) {
  pthread_mutex_lock(&kt_lock);
  int rc = kt_opened ? 0 : kt_shim_load(cpu_lib, cuda_lib, missing, n);
  if (rc == 0 && !kt_opened) {
    size_t at = 0;
    for (size_t f = 0; f < KT_N_FAMILIES; f++) {
      for (const kt_kernel *k = kt_families[f]; k->op; k++) {
        if (!kt_usable(k)) continue;
        int w = snprintf(kt_names + at, sizeof kt_names - at, "%s%s", at ? "," : "", k->op->name);
        if (w > 0 && (size_t)w < sizeof kt_names - at) at += (size_t)w;
      }
    }
    kt_opened = 1;
  }
  pthread_mutex_unlock(&kt_lock);
  return rc;
}

const char *kiln_torch_ops(void) {
  return kt_names;
}

/* the kernel of the op named by name[0, len), usable or not */
static const kt_kernel *kt_lookup(const char *name, size_t len) {
  for (size_t f = 0; f < KT_N_FAMILIES; f++) {
    for (const kt_kernel *k = kt_families[f]; k->op; k++) {
      if (strlen(k->op->name) == len && strncmp(k->op->name, name, len) == 0) return k;
    }
  }
  return NULL;
}

static const kt_kernel *kt_find(const char *name, size_t len) {
  const kt_kernel *k = kt_lookup(name, len);
  return k && kt_usable(k) ? k : NULL;
}

int kiln_torch_op_missing(const char *name, char *missing, size_t n) {
  const kt_kernel *k = name ? kt_lookup(name, strlen(name)) : NULL;
  if (n) missing[0] = 0;
  if (!k) return -1;
  return kt_opened && n ? kt_missing(k->op, missing, n) : 0;
}

kiln_status kiln_torch_register(void **out, const char *key, const char *names) {
  *out = NULL;
  if (!kt_opened || !key || !names) return KILN_EINVAL;
  kt_library_handle lib = NULL;
  if (kt_torch.library_init_impl("kiln", key, __FILE__, __LINE__, &lib) != 0 || !lib)
    return KILN_EINTERNAL;
  for (const char *p = names; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const kt_kernel *k = kt_find(p, len);
    if (!k || kt_torch.library_impl(lib, k->op->name, k->fn) != 0) {
      kt_torch.delete_library_object(lib);
      return k ? KILN_EINTERNAL : KILN_EINVAL;
    }
    p = end ? end + 1 : p + len;
  }
  *out = lib;
  return KILN_OK;
}

void kiln_torch_unregister(void *lib) {
  if (lib) kt_torch.delete_library_object((kt_library_handle)lib);
}

kiln_status kt_loader_get(kiln_loader **out, int dev, const kiln_loader_options *opts) {
  *out = NULL;
  if (dev < 0 || dev >= KT_MAX_DEVICES) return KILN_EINVAL;
  kiln_loader *l = __atomic_load_n(&kt_loaders[dev], __ATOMIC_ACQUIRE);
  if (l) {
    *out = l;
    return KILN_OK;
  }
  kiln_status st = KILN_OK;
  pthread_mutex_lock(&kt_lock);
  l = kt_loaders[dev];
  if (!l) {
    kiln_loader_options o;
    if (opts)
      o = *opts;
    else
      st = kiln_loader_options_init(&o, KILN_LOADER_OPTIONS_VERSION);
    o.device = dev;
    if (st == KILN_OK) st = kiln_loader_open(&l, &o);
    if (st == KILN_OK) __atomic_store_n(&kt_loaders[dev], l, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&kt_lock);
  *out = l;
  return st;
}

kiln_status kiln_torch_loader(kiln_loader **out, int dev, const kiln_loader_options *opts) {
  return kt_loader_get(out, dev, opts);
}

kiln_loader *kiln_torch_loader_peek(int dev) {
  if (dev < 0 || dev >= KT_MAX_DEVICES) return NULL;
  return __atomic_load_n(&kt_loaders[dev], __ATOMIC_ACQUIRE);
}

void kiln_torch_close_loaders(void) {
  pthread_mutex_lock(&kt_lock);
  for (int i = 0; i < KT_MAX_DEVICES; i++) {
    kiln_loader_close(kt_loaders[i]);
    __atomic_store_n(&kt_loaders[i], NULL, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&kt_lock);
}
