/* harness.h — what every gpu test program shares, so that each
 * test_<family>_gpu.c holds only its checks, shapes and tolerances:
 *   - the run: skip (77) without a device, KILN_GPU_TEST_QUICK and
 *     KILN_GPU_TEST_TRIM, a temp cache
 *     under TMPDIR unless KILN_CACHE_DIR is set, a loader on device 0, its
 *     primary context current, cleanup and the final "gpu.<family>: N passed,
 *     M failed" line with the exit status;
 *   - the pass/fail counters and their "ok   " / "FAIL " lines;
 *   - the invalid-argument checks (KILN_EINVAL with a message, and nothing
 *     launched: a poisoned output comes back all 0xFF);
 *   - host elements of a kiln_dtype (common/half.h conversions, as libkiln
 *     does them) and the xorshift64* generator the inputs are made from.
 * Device buffers are device.h's.
 *
 * Adopting it (add harness.c next to device.c in CMakeLists.txt; it is
 * already there for every family):
 *
 *   int main(void) {
 *     gt_run r;
 *     if (gt_start(&r, "norm", GT_SHOW_DRIVER | GT_SHOW_CACHE)) {
 *       check_invalid_args(r.loader); // gt_expect_einval..., gt_expect_untouched
 *       run_suite(r.loader);          // gt_pass / gt_fail (or gt_check) per check
 *     }
 *     return gt_finish(&r);           // cleanup, final line; 0, 1 or 77
 *   }
 *
 * gt_start is gt_init, gt_open, gt_print_device and gt_context in a row; call
 * them one by one to print more about the device before its context is made
 * (test_softmax_gpu.c does). Shapes: if (gt_quick()) keep them small; if
 * (gt_trim()) run, per dtype and direction, only the shapes most likely to
 * break (odd columns, misaligned rows, the largest columns the family takes,
 * bad token ids at TP=1), each family naming them and why, with every kind of
 * check still made (reference, einval, bad ids). The GPU bundle's `run all`
 * sets it (docs/gpu.md): the whole verdict in its 90 s share.
 *
 * The counters and the quick and trim flags are process-wide (one run per program). */
#ifndef KILN_TESTS_GPU_HARNESS_H
#define KILN_TESTS_GPU_HARNESS_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "kiln/loader.h"      /* kiln_loader, kiln_device_info */
#include "kiln/ops.h"         /* kiln_dtype, kiln_status */
#include "tests/gpu/device.h" /* dbuf */

#define GT_SKIP 77 /* ctest's SKIP_RETURN_CODE for the gpu tests */

/* ---- the run ------------------------------------------------------------------ */

typedef struct gt_run {
  const char *family;    /* "rope": the name in the skip and final lines */
  kiln_loader *loader;   /* after gt_open; closed by gt_finish */
  kiln_device_info info; /* device 0, after gt_open */
  const char *cache;     /* the cache the loader uses: KILN_CACHE_DIR or root/main */
  char root[4096];       /* the temp directory, removed by gt_finish */
  char main_cache[4200]; /* root/main */
  int status;            /* set by gt_init when the run stops before it starts */
} gt_run;

/* What gt_print_device adds to "device 0: <name>, sm_XY, N SMs". */
enum {
  GT_SHOW_DRIVER = 1,  /* ", driver 12040" */
  GT_SHOW_PTX_ISA = 2, /* " (PTX ISA up to 8.5)", after the driver */
  GT_SHOW_CACHE = 4,   /* ", cache <dir>" */
};

/* gt_init, gt_open, gt_print_device(show) and gt_context: 1 when the checks
 * can run; 0 when not (skipped, or a FAIL counted). Either way, main returns
 * gt_finish(r). */
int gt_start(gt_run *r, const char *family, unsigned show);

/* Starts a run of gpu.<family> (family must outlive the run): 0 to go on;
 * GT_SKIP after printing why there is no device; 1 when the temp directory
 * could not be made. On non-zero, return it from main (nothing to clean). */
int gt_init(gt_run *r, const char *family);
/* Opens r->loader on device 0 (cache r->cache) and reads r->info: 1, or 0
 * with a FAIL counted (then go to gt_finish). */
int gt_open(gt_run *r);
/* Makes device 0's primary context (the loader's) current for the test's own
 * allocations, copies and launches: 1, or 0 with a FAIL counted. */
int gt_context(gt_run *r);
/* Prints the device line: "device 0: <name>, sm_XY, N SMs", what show
 * asks for, and ", quick" under KILN_GPU_TEST_QUICK (", trim" under
 * KILN_GPU_TEST_TRIM). */
void gt_print_device(const gt_run *r, unsigned show);
/* Releases everything gt_init/gt_open/gt_context made (fine after any of
 * them failed), prints "gpu.<family>: N passed, M failed"; the exit status.
 * When gt_init stopped the run: its status, and no line. */
int gt_finish(gt_run *r);
/* 1 when KILN_GPU_TEST_QUICK asks for small shapes (set by gt_init; 0
 * under KILN_GPU_TEST_TRIM, which picks its own). */
int gt_quick(void);
/* 1 when KILN_GPU_TEST_TRIM asks for the riskiest shapes only, one run per
 * dtype and direction of each (set by gt_init). */
int gt_trim(void);

/* ---- counted results ---------------------------------------------------------- */

/* One passed check: "ok   " fmt "\n". */
void gt_pass(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One failed check: "FAIL " fmt "\n". */
void gt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A check that passes silently (it would be thousands of lines) and fails
 * with gt_fail(fmt, ...). */
void gt_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- invalid arguments -------------------------------------------------------- */

/* st must be KILN_EINVAL with a message in kiln_last_error(); what names
 * the call in the "einval" line. */
void gt_expect_einval(const char *what, kiln_status st);
/* The same, and the message must contain needle (the argument it blames). */
void gt_expect_einval_naming(const char *what, kiln_status st, const char *needle);
/* An empty batch (0 rows, tokens, batches: docs/api.md, "Empty batches"):
 * st must be KILN_OK, with no launch (gt_expect_untouched after the batch
 * checks that nothing was written). */
void gt_expect_empty(const char *what, kiln_status st);
/* After a batch of invalid calls: syncs and reads out (poisoned before the
 * batch) back; every byte must still be 0xFF, since none may have launched.
 * Counts one "einval" check. */
void gt_expect_untouched(const dbuf *out);
/* The index of the first byte of p[0..n) that is not 0xFF; n when all are. */
size_t gt_first_not_ff(const void *p, size_t n);

/* ---- host elements ------------------------------------------------------------ */

/* Bytes per element: 4 for f32, 2 for f16 and bf16. */
size_t gt_dtype_size(kiln_dtype dt);
/* Element i of p (dt), widened exactly. */
double gt_get(kiln_dtype dt, const void *p, size_t i);
/* Element i of p (dt) = v, rounded to nearest even as libkiln rounds. */
void gt_set(kiln_dtype dt, void *p, size_t i, float v);

/* ---- random numbers ----------------------------------------------------------- */

/* xorshift64* (the state must not be 0): the next draw. */
uint64_t gt_rng_next(uint64_t *s);
/* Uniform in [lo, hi): lo + (hi - lo) * gt_unit53(the next draw). */
double gt_rng_uniform(uint64_t *s, double lo, double hi);
/* A draw's top 53 bits as a double in [0, 1). */
double gt_unit53(uint64_t draw);
/* A draw's top 24 bits as a float in [0, 1) (exact in fp32). */
float gt_unit24(uint64_t draw);

#endif
