/* bench_util — the GPU benchmarks' shared set-up, header and timing (bench_util.h). */
#include "bench/bench_util.h"

#include <stdarg.h> /* bench_header's settings */
#include <stdio.h>
#include <stdlib.h> /* qsort */
#include <string.h> /* memset, strcspn, strncmp */

#include "kiln/kernels.h" /* kiln_unit_count, kiln_unit_at */

int bench_have_device(const char *prog) {
  int n = 0;
  const kiln_status st = kiln_device_count(&n);
  if (st == KILN_OK && n > 0) return 1;
  printf("%s: skipped: %s\n", prog,
         st != KILN_OK ? kiln_last_error() : "the driver reports no CUDA device");
  return 0;
}

bench_open_result bench_open(bench_env *env, const char *prog, int warmup) {
  kiln_loader_options o = KILN_LOADER_OPTIONS_INIT;
  memset(env, 0, sizeof *env);
  env->prog = prog;
  if (!bench_have_device(prog)) return BENCH_SKIPPED;
  o.device = 0;
  if (kiln_cuda(&env->cu) != KILN_OK || kiln_loader_open(&env->l, &o) != KILN_OK ||
      (warmup && kiln_loader_warmup(env->l, NULL) != KILN_OK) ||
      kiln_loader_device(&env->info, env->l) != KILN_OK) {
    fprintf(stderr, "%s: %s\n", prog, kiln_last_error());
    goto fail;
  }
  /* The driver table's memory and event calls act on the current context: the loader's. */
  if (env->cu->DeviceGet(&env->dev, 0) != CUDA_SUCCESS ||
      env->cu->DevicePrimaryCtxRetain(&env->ctx, env->dev) != CUDA_SUCCESS ||
      env->cu->CtxPushCurrent(env->ctx) != CUDA_SUCCESS ||
      env->cu->EventCreate(&env->e0, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
      env->cu->EventCreate(&env->e1, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    fprintf(stderr, "%s: could not set up the context and events\n", prog);
    goto fail;
  }
  return BENCH_READY;
fail:
  bench_close(env);
  return BENCH_FAILED;
}

void bench_close(bench_env *env) {
  CUcontext popped;
  if (env->e1) env->cu->EventDestroy(env->e1);
  if (env->e0) env->cu->EventDestroy(env->e0);
  if (env->ctx) {
    env->cu->CtxPopCurrent(&popped);
    env->cu->DevicePrimaryCtxRelease(env->dev);
  }
  kiln_loader_close(env->l);
  env->e0 = env->e1 = NULL;
  env->ctx = NULL;
  env->l = NULL;
}

void bench_header(const bench_env *env, const char *fmt, ...) {
  const kiln_device_info *d = &env->info;
  va_list ap;
  printf("# %s: %s (sm_%d%d, %d SMs, %.0f GiB), driver %d; ", env->prog, d->name, d->cc_major,
         d->cc_minor, d->sm_count, (double)d->total_mem / (1 << 30), d->driver_version);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    kiln_unit_load ul;
    if (kiln_loader_unit_load(&ul, env->l, kiln_unit_at(u)->name) == KILN_OK)
      printf("# %s: %s %s\n", ul.unit, kiln_load_source_str(ul.source), ul.target);
  }
}

int bench_copy(void *arg, const char **why) {
  const bench_copy_args *c = arg;
  const CUresult r = c->cu->MemcpyDtoD(c->dst, c->src, c->bytes);
  if (r == CUDA_SUCCESS) return 1;
  *why = kiln_cuda_error_name(r);
  return 0;
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

int bench_time(const bench_env *env, int reps, int warmup, bench_launch_fn launch, void *arg,
               const char *what, double *ms) {
  float t[BENCH_MAX_REPS];
  const kiln_cuda_api *cu = env->cu;
  const char *why = NULL;
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < warmup + reps; i++) {
    const int timed = i >= warmup;
    if (timed && (r = cu->EventRecord(env->e0, NULL)) != CUDA_SUCCESS) goto driver;
    if (!launch(arg, &why)) goto fail;
    if (!timed) continue;
    if ((r = cu->EventRecord(env->e1, NULL)) != CUDA_SUCCESS ||
        (r = cu->EventSynchronize(env->e1)) != CUDA_SUCCESS ||
        (r = cu->EventElapsedTime(&t[i - warmup], env->e0, env->e1)) != CUDA_SUCCESS)
      goto driver;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmp_float);
  *ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
  return 1;
driver:
  why = kiln_cuda_error_name(r);
fail:
  fprintf(stderr, "%s: %s: %s\n", env->prog, what, why);
  return 0;
}

int bench_next_dtype(kiln_dtype *out, const char **p, const char *prog) {
  const char *s = *p;
  const size_t len = strcspn(s, ",");
  int found = 1;
  if (!*s) return 0;
  if (len == 3 && strncmp(s, "f32", 3) == 0)
    *out = KILN_F32;
  else if (len == 3 && strncmp(s, "f16", 3) == 0)
    *out = KILN_F16;
  else if (len == 4 && strncmp(s, "bf16", 4) == 0)
    *out = KILN_BF16;
  else {
    fprintf(stderr, "%s: unknown dtype '%.*s' (bf16, f16, f32)\n", prog, (int)len, s);
    found = -1;
  }
  *p = s + len + (s[len] == ',');
  return found;
}

uint64_t bench_rng_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1DULL;
}
