/* Typed launchers for layer norm and RMSNorm (docs/kernels/norm.md): check,
 * pick the r or g path, launch; the backward then launches bwdw, which
 * reduces the per-part dgamma/dbeta partials in a fixed order. */
#include <stdint.h>

#include "common/error.h"
#include "kiln/ops.h"
#include "loader/ops_internal.h"

#define NORM_THREADS 256u       /* KILN_NORM_THREADS (kernels/norm/norm_core.cuh) */
#define NORM_BWD_R_THREADS 512u /* KILN_NORM_BWD_R_THREADS: the r backward's blocks */
#define NORM_R_VECS 4           /* KILN_NORM_R_VECS */
#define NORM_BWDW_MIN_TILES 256 /* KILN_NORM_BWDW_MIN_TILES */
#define NORM_MAX_PARTS 512LL    /* backward row parts: a function of rows only */
#define NORM_MAX_GRID 65536ULL
#define NORM_MAX_COLS (2147483647 - 8 * 256) /* KILN_NORM_MAX_COLS */

/* The backward's row parts for rows x cols: min(rows, 512); the same on
 * every GPU, so the reduction order (and its bits) is too. */
static long long norm_parts(long long rows) {
  return rows < NORM_MAX_PARTS ? rows : NORM_MAX_PARTS;
}

static size_t align256(size_t n) {
  return (n + 255) & ~(size_t)255;
}

/* One section of fp32 partials: parts x cols. */
static size_t norm_section(long long rows, int cols) {
  if (rows < 1 || cols < 1) return 0;
  return align256((size_t)norm_parts(rows) * (size_t)cols * sizeof(float));
}

size_t kiln_layer_norm_bwd_workspace_size(long long rows, int cols) {
  return 2 * norm_section(rows, cols);
}

size_t kiln_rms_norm_bwd_workspace_size(long long rows, int cols) {
  return norm_section(rows, cols);
}

static int aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

/* The r path: cols a whole number of 16-byte vectors, at most the capacity,
 * and every tensor it reads or writes by vector 16-byte aligned (NULL, an
 * unused argument, counts as aligned). */
static int norm_use_r(kiln_dtype dt, int cols, const void *a, const void *b, const void *c,
                      const void *d, const void *e) {
  const int vec = 16 / (int)kiln_dtype_size(dt);
  return cols % vec == 0 && cols <= (int)NORM_THREADS * NORM_R_VECS * vec && aligned16(a) &&
         aligned16(b) && aligned16(c) && aligned16(d) && aligned16(e);
}

static kiln_status check_shape(const char *op, kiln_loader *l, kiln_dtype dt, kiln_dtype wdt,
                               long long rows, int cols) {
  long long n = 0;
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  KILN_CHECK(kiln_op_check_wdtype(op, dt, wdt));
  KILN_CHECK(kiln_op_need_count(op, rows, "rows"));
  KILN_CHECK(kiln_op_need_positive(op, cols, "cols"));
  if (cols > NORM_MAX_COLS) {
    rc = kiln_fail(KILN_EINVAL, "%s: cols = %d is more than the %d a row may have", op, cols,
                   NORM_MAX_COLS);
    goto out;
  }
  rc = kiln_op_product(op, rows, cols, kiln_dtype_size(dt), &n);
out:
  return rc;
}

static kiln_status check_eps(const char *op, float eps) {
  kiln_status rc;
  KILN_CHECK(kiln_op_need_finite(op, eps, "eps"));
  if (eps < 0.f) rc = kiln_fail(KILN_EINVAL, "%s: eps %g is negative", op, eps);
out:
  return rc;
}

static kiln_status check_workspace(const char *op, const void *ws, size_t bytes, size_t need) {
  kiln_status rc;
  KILN_CHECK(kiln_op_need_ptr(op, ws, "workspace"));
  if (((uintptr_t)ws & 255u) != 0) {
    rc = kiln_fail(KILN_EINVAL, "%s: workspace %p is not 256-byte aligned", op, ws);
    goto out;
  }
  if (bytes < need)
    rc = kiln_fail(KILN_EINVAL, "%s: workspace_bytes %zu < the %zu bytes this shape needs", op,
                   bytes, need);
out:
  return rc;
}

static void entry_name(char *buf, size_t cap, const char *unit, const char *dir, kiln_dtype dt,
                       kiln_dtype wdt, int r) {
  /* wdt is checked already (kiln_op_check_wdtype) */
  const char *w = wdt == KILN_F32 ? "wf32" : wdt == KILN_F16 ? "wf16" : "wbf16";
  const char *const parts[] = {"kiln", unit, dir, kiln_dtype_str(dt), w, r ? "r" : "g"};
  kiln_op_entry_name(buf, cap, parts, sizeof parts / sizeof *parts);
}

/* bwdw's column tile width: kiln_norm_bwdw_width (kernels/norm/norm_core.cuh),
 * the widest of 32, 16, 8, 4 giving at least 256 tiles. */
static int bwdw_width(int cols) {
  int w = 32;
  while (w > 4 && (cols + w - 1) / w < NORM_BWDW_MIN_TILES)
    w >>= 1;
  return w;
}

static unsigned long long row_grid(long long rows) {
  return (unsigned long long)rows < NORM_MAX_GRID ? (unsigned long long)rows : NORM_MAX_GRID;
}

static kiln_status norm_fwd(kiln_loader *l, const char *op, const char *unit, kiln_dtype dt,
                            kiln_dtype wdt, void *y, float *mean, float *rstd, const void *x,
                            const void *gamma, const void *beta, long long rows, int cols,
                            float eps, struct CUstream_st *stream) {
  char entry[128];
  void *args[] = {&y, &mean, &rstd, &x, &gamma, &beta, &rows, &cols, &eps};
  entry_name(entry, sizeof entry, unit, "fwd", dt, wdt,
             norm_use_r(dt, cols, y, x, gamma, beta, NULL));
  return kiln_op_launch(l, op, entry, row_grid(rows), NORM_THREADS, args, stream);
}

static kiln_status norm_bwd(kiln_loader *l, const char *op, const char *unit, int ln, kiln_dtype dt,
                            kiln_dtype wdt, void *dx, void *dgamma, void *dbeta, const void *dy,
                            const void *x, const float *mean, const float *rstd, const void *gamma,
                            long long rows, int cols, void *workspace, struct CUstream_st *stream) {
  char entry[128];
  kiln_status rc;
  int parts = (int)norm_parts(rows);
  float *ws_g = (float *)workspace;
  float *ws_b = ln ? (float *)((char *)workspace + norm_section(rows, cols)) : NULL;
  const float *ws_gc = ws_g, *ws_bc = ws_b;
  void *args[] = {&dx, &ws_g, &ws_b, &dy, &x, &mean, &rstd, &gamma, &rows, &cols, &parts};
  void *wargs[] = {&dgamma, &dbeta, &ws_gc, &ws_bc, &parts, &cols};
  const int r = norm_use_r(dt, cols, dx, dy, x, gamma, NULL);
  const unsigned long long w = (unsigned)bwdw_width(cols);
  const unsigned long long tiles = ((unsigned long long)cols + w - 1) / w;
  entry_name(entry, sizeof entry, unit, "bwd", dt, wdt, r);
  if (parts > 0) /* rows = 0: no partials; bwdw sums none, writing zeros */
    KILN_CHECK(kiln_op_launch(l, op, entry, (unsigned long long)parts,
                              r ? NORM_BWD_R_THREADS : NORM_THREADS, args, stream));
  KILN_OP_ENTRY(entry, "kiln", unit, "bwdw", kiln_dtype_str(wdt), "g");
  rc = kiln_op_launch(l, op, entry, tiles < NORM_MAX_GRID ? tiles : NORM_MAX_GRID, NORM_THREADS,
                      wargs, stream);
out:
  return rc;
}

kiln_status kiln_layer_norm_fwd(kiln_loader *l, kiln_dtype dt, kiln_dtype wdt, void *y, float *mean,
                                float *rstd, const void *x, const void *gamma, const void *beta,
                                long long rows, int cols, float eps, struct CUstream_st *stream) {
  static const char op[] = "kiln_layer_norm_fwd";
  kiln_status rc;
  KILN_CHECK(check_shape(op, l, dt, wdt, rows, cols));
  KILN_CHECK(check_eps(op, eps));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"y", y}, {"x", x}, {"gamma", gamma}, {"beta", beta}));
  rc = norm_fwd(l, op, "layer_norm", dt, wdt, y, mean, rstd, x, gamma, beta, rows, cols, eps,
                stream);
out:
  return rc;
}

kiln_status kiln_layer_norm_bwd(kiln_loader *l, kiln_dtype dt, kiln_dtype wdt, void *dx,
                                void *dgamma, void *dbeta, const void *dy, const void *x,
                                const float *mean, const float *rstd, const void *gamma,
                                long long rows, int cols, void *workspace, size_t workspace_bytes,
                                struct CUstream_st *stream) {
  static const char op[] = "kiln_layer_norm_bwd";
  kiln_status rc;
  KILN_CHECK(check_shape(op, l, dt, wdt, rows, cols));
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"dgamma", dgamma}, {"dbeta", dbeta}));
  if (rows > 0) { /* rows = 0: dgamma, dbeta are zeros (a sum over no rows), nothing else */
    KILN_CHECK(KILN_OP_NEED_PTRS(op, {"dx", dx}, {"dy", dy}, {"x", x}, {"mean", mean},
                                 {"rstd", rstd}, {"gamma", gamma}));
    KILN_CHECK(check_workspace(op, workspace, workspace_bytes,
                               kiln_layer_norm_bwd_workspace_size(rows, cols)));
  }
  rc = norm_bwd(l, op, "layer_norm", 1, dt, wdt, dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows,
                cols, workspace, stream);
out:
  return rc;
}

kiln_status kiln_rms_norm_fwd(kiln_loader *l, kiln_dtype dt, kiln_dtype wdt, void *y, float *rstd,
                              const void *x, const void *gamma, long long rows, int cols, float eps,
                              struct CUstream_st *stream) {
  static const char op[] = "kiln_rms_norm_fwd";
  kiln_status rc;
  KILN_CHECK(check_shape(op, l, dt, wdt, rows, cols));
  KILN_CHECK(check_eps(op, eps));
  if (rows == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"y", y}, {"x", x}, {"gamma", gamma}));
  rc = norm_fwd(l, op, "rms_norm", dt, wdt, y, NULL, rstd, x, gamma, NULL, rows, cols, eps, stream);
out:
  return rc;
}

kiln_status kiln_rms_norm_bwd(kiln_loader *l, kiln_dtype dt, kiln_dtype wdt, void *dx, void *dgamma,
                              const void *dy, const void *x, const float *rstd, const void *gamma,
                              long long rows, int cols, void *workspace, size_t workspace_bytes,
                              struct CUstream_st *stream) {
  static const char op[] = "kiln_rms_norm_bwd";
  kiln_status rc;
  KILN_CHECK(check_shape(op, l, dt, wdt, rows, cols));
  KILN_CHECK(kiln_op_need_ptr(op, dgamma, "dgamma"));
  if (rows > 0) { /* rows = 0: dgamma is zeros (a sum over no rows), nothing else */
    KILN_CHECK(
        KILN_OP_NEED_PTRS(op, {"dx", dx}, {"dy", dy}, {"x", x}, {"rstd", rstd}, {"gamma", gamma}));
    KILN_CHECK(check_workspace(op, workspace, workspace_bytes,
                               kiln_rms_norm_bwd_workspace_size(rows, cols)));
  }
  rc = norm_bwd(l, op, "rms_norm", 0, dt, wdt, dx, dgamma, NULL, dy, x, NULL, rstd, gamma, rows,
                cols, workspace, stream);
out:
  return rc;
}
