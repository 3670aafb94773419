/* Typed launchers for rotary position embedding (docs/kernels/rope.md):
 * check, pick the chunking and grid, launch kernels/rope/rope.cu. */

#include "common/error.h"
#include "kiln/loader.h"
#include "kiln/ops.h"
#include "loader/ops_internal.h"

#define ROPE_THREADS 256        /* KILN_ROPE_THREADS of rope.cu */
#define ROPE_UNIT_ELEMS 8192    /* elements a block works on per unit (per cache fill), at least */
#define ROPE_BLOCKS_PER_SM 6    /* KILN_ROPE_MIN_BLOCKS of rope.cu: resident blocks per SM */
#define ROPE_MIN_UNITS_PER_SM 4 /* units per SM before chunks shrink to one token */

static kiln_status check(const char *op, kiln_loader *l, kiln_dtype dt, kiln_rope_layout layout,
                         kiln_rope_style style, const void *out, const char *out_name,
                         const void *in, const char *in_name, const float *angles, int s, int b,
                         int h, int d, int rot_dim) {
  long long n = 0;
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  if (layout != KILN_ROPE_SBHD && layout != KILN_ROPE_BSHD) {
    rc =
        kiln_fail(KILN_EINVAL, "%s: layout %d (KILN_ROPE_SBHD or KILN_ROPE_BSHD)", op, (int)layout);
    goto out;
  }
  if (style != KILN_ROPE_ROTATE_HALF && style != KILN_ROPE_INTERLEAVED) {
    rc = kiln_fail(KILN_EINVAL, "%s: style %d (KILN_ROPE_ROTATE_HALF or KILN_ROPE_INTERLEAVED)", op,
                   (int)style);
    goto out;
  }
  KILN_CHECK(kiln_op_need_count(op, s, "s"));
  KILN_CHECK(kiln_op_need_count(op, b, "b"));
  KILN_CHECK(kiln_op_need_count(op, h, "h"));
  KILN_CHECK(kiln_op_need_positive(op, d, "d"));
  if (rot_dim < 2 || rot_dim > d || rot_dim % 2) {
    rc =
        kiln_fail(KILN_EINVAL, "%s: rot_dim = %d, must be even and in [2, d = %d]", op, rot_dim, d);
    goto out;
  }
  KILN_CHECK(kiln_op_product(op, s, b, h, &n));
  if (n == 0) goto out; /* an empty batch: no pointer is read */
  KILN_CHECK(kiln_op_need_ptr(op, out, out_name));
  KILN_CHECK(kiln_op_need_ptr(op, in, in_name));
  KILN_CHECK(kiln_op_need_ptr(op, angles, "angles"));
  KILN_CHECK(kiln_op_product(op, n, d, kiln_dtype_size(dt), &n));
out:
  return rc;
}

/* bchunk tokens of one position per unit: about ROPE_UNIT_ELEMS elements, but
 * small enough that there are ROPE_MIN_UNITS_PER_SM units per SM when the
 * shape allows; grid: every unit, at most ROPE_BLOCKS_PER_SM blocks per SM
 * (the kernel grid-strides beyond). */
static void pick(int sm_count, int s, int b, int h, int d, int *bchunk, unsigned long long *grid) {
  const long long hd = (long long)h * d, want = (long long)sm_count * ROPE_MIN_UNITS_PER_SM;
  long long c = hd >= ROPE_UNIT_ELEMS ? 1 : ROPE_UNIT_ELEMS / hd, units;
  if (c > b) c = b;
  while (c > 1 && (long long)s * ((b + c - 1) / c) < want)
    c = (c + 1) / 2;
  units = (long long)s * ((b + c - 1) / c);
  *bchunk = (int)c;
  *grid = (unsigned long long)(units < (long long)sm_count * ROPE_BLOCKS_PER_SM
                                   ? units
                                   : (long long)sm_count * ROPE_BLOCKS_PER_SM);
}

static kiln_status launch(kiln_loader *l, const char *op, int bwd, kiln_dtype dt,
                          kiln_rope_layout layout, kiln_rope_style style, void *out, const void *in,
                          const float *angles, int s, int b, int h, int d, int rot_dim,
                          struct CUstream_st *stream) {
  kiln_device_info info;
  unsigned long long grid = 0;
  int bchunk = 1, lay = (int)layout;
  char entry[64];
  kiln_status rc;
  void *args[] = {&out, &in, &angles, &s, &b, &h, &d, &rot_dim, &lay, &bchunk};
  KILN_CHECK(kiln_loader_device(&info, l));
  pick(info.sm_count > 0 ? info.sm_count : 1, s, b, h, d, &bchunk, &grid);
  KILN_OP_ENTRY(entry, "kiln_rope", bwd ? "bwd" : "fwd", kiln_dtype_str(dt),
                style == KILN_ROPE_INTERLEAVED ? "il" : "rh");
  rc = kiln_op_launch(l, op, entry, grid, ROPE_THREADS, args, stream);
out:
  return rc;
}

kiln_status kiln_rope_fwd(kiln_loader *l, kiln_dtype dt, kiln_rope_layout layout,
                          kiln_rope_style style, void *y, const void *x, const float *angles, int s,
                          int b, int h, int d, int rot_dim, struct CUstream_st *stream) {
  static const char op[] = "kiln_rope_fwd";
  kiln_status rc;
  KILN_CHECK(check(op, l, dt, layout, style, y, "y", x, "x", angles, s, b, h, d, rot_dim));
  if ((long long)s * b * h > 0) /* else an empty batch: nothing to do */
    rc = launch(l, op, 0, dt, layout, style, y, x, angles, s, b, h, d, rot_dim, stream);
out:
  return rc;
}

kiln_status kiln_rope_bwd(kiln_loader *l, kiln_dtype dt, kiln_rope_layout layout,
                          kiln_rope_style style, void *dx, const void *dy, const float *angles,
                          int s, int b, int h, int d, int rot_dim, struct CUstream_st *stream) {
  static const char op[] = "kiln_rope_bwd";
  kiln_status rc;
  KILN_CHECK(check(op, l, dt, layout, style, dx, "dx", dy, "dy", angles, s, b, h, d, rot_dim));
  if ((long long)s * b * h > 0) /* else an empty batch: nothing to do */
    rc = launch(l, op, 1, dt, layout, style, dx, dy, angles, s, b, h, d, rot_dim, stream);
out:
  return rc;
}
