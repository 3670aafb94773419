/* bench_util — what the GPU benchmarks (softmax_bw, kernels_bw, loader_warm) share: the skip
 * without a device, the loader/context/events set-up, the "# <unit>: <source> <target>" header
 * lines, the median-of-reps event timing of one launch and the copy baseline, the --dtypes list
 * and the inputs' random numbers (bench/README.md).
 *
 * Every message names the program (env->prog) and, for a timing, what was timed; the skip line
 * goes to stdout (a missing GPU is not a failure), errors to stderr. */
#ifndef KILN_BENCH_UTIL_H
#define KILN_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/loader.h"   /* kiln_loader, kiln_device_info */
#include "kiln/ops.h"      /* kiln_dtype */
#include "loader/driver.h" /* kiln_cuda_api: memory, events, contexts */

#define BENCH_MAX_REPS 1000 /* the most --reps bench_time can take the median of */

/* What bench_open sets up; zeroed by bench_open, released by bench_close. */
typedef struct bench_env {
  const char *prog; /* the program's name, the prefix of every message */
  const kiln_cuda_api *cu;
  kiln_loader *l;        /* device 0 */
  kiln_device_info info; /* of device 0 */
  CUdevice dev;
  CUcontext ctx; /* device 0's primary context, retained and current */
  CUevent e0, e1;
} bench_env;

/* bench_open's outcomes. */
typedef enum { BENCH_FAILED = -1, BENCH_SKIPPED = 0, BENCH_READY = 1 } bench_open_result;

/* Returns 1 when the driver reports a CUDA device. Otherwise prints "<prog>: skipped: <why>" to
 * stdout and returns 0: the caller exits 0. */
int bench_have_device(const char *prog);

/* Checks for a device (bench_have_device), then opens kiln's driver table and a loader on device 0,
 * builds or loads every unit first when warmup is set (kiln_loader_warmup), and makes device 0's
 * primary context current with two events for bench_time. BENCH_READY: env is set up, release it
 * with bench_close. BENCH_SKIPPED: the skip line is printed, exit 0. BENCH_FAILED: the reason is
 * printed to stderr, env is already released; exit 1. */
bench_open_result bench_open(bench_env *env, const char *prog, int warmup);

/* Destroys the events, pops and releases the context, closes the loader. Safe on a partly set-up
 * env, and twice. */
void bench_close(bench_env *env);

/* Prints the header: "# <prog>: <device> (sm_XY, N SMs, G GiB), driver D; " and then fmt (the
 * benchmark's own settings) on one line, then a line "# <unit>: <source> <target>" per unit the
 * loader has loaded, so that a result says which binary ran. */
void bench_header(const bench_env *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Launches what is timed once, asynchronously on the default stream. Returns 1, or 0 with *why
 * set to a one-line reason that outlives the call (kiln_last_error(), kiln_cuda_error_name()). */
typedef int (*bench_launch_fn)(void *arg, const char **why);

/* bench_copy's argument: a device-to-device copy of bytes from src to dst. */
typedef struct bench_copy_args {
  const kiln_cuda_api *cu;
  CUdeviceptr dst, src;
  size_t bytes;
} bench_copy_args;

/* A bench_launch_fn for the baseline: cuMemcpyDtoD as arg (a bench_copy_args) says. */
int bench_copy(void *arg, const char **why);

/* Times launch(arg): warmup untimed launches, then reps (1..BENCH_MAX_REPS) launches, each between
 * env's two events; *ms is the median of the reps. Returns 1, or 0 after printing
 * "<prog>: <what>: <why>" to stderr when a launch or an event fails (an asynchronous fault shows
 * up as the events failing). */
int bench_time(const bench_env *env, int reps, int warmup, bench_launch_fn launch, void *arg,
               const char *what, double *ms);

/* Reads the next name in a comma list of dtypes (--dtypes: bf16, f16, f32) at *p and moves *p
 * past it. Returns 1 with *out set; -1 for an unknown name, after printing
 * "<prog>: unknown dtype '<name>' (bf16, f16, f32)" to stderr; 0 at the end of the list. */
int bench_next_dtype(kiln_dtype *out, const char **p, const char *prog);

/* xorshift64*: the benchmarks' inputs, reproducible from a fixed nonzero seed in *s. */
uint64_t bench_rng_next(uint64_t *s);

#endif
