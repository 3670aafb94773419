/* The rotary position embedding kernels (kiln::rope, rope_backward): the
 * checks and messages of python/kiln/torch/ops.py's impls (_rope_shape's
 * messages name x and kiln.torch.rope in both), in the same order, then the
 * launcher on torch's current stream. The layout is a str: an owning
 * StringHandle (torch >= 2.10's torch_string_*; without them these stay in
 * Python). */
#include <string.h>

#include "torch/ops.h"

typedef struct rope_shape {
  kiln_rope_layout layout;
  int s, b, h, d, rot;
} rope_shape;

/* ops.py _rope_shape */
static int rope_args(kt_call *c, const kt_arg *x, const kt_arg *angles, rope_shape *rs) {
  size_t len;
  const char *layout = kt_str(c, 2, &len);
  char xs[256], as[256], ad[48], d1[48], d2[48];
  if (len == 4 && memcmp(layout, "sbhd", 4) == 0)
    rs->layout = KILN_ROPE_SBHD;
  else if (len == 4 && memcmp(layout, "bshd", 4) == 0)
    rs->layout = KILN_ROPE_BSHD;
  else
    return kt_fail(c, "kiln.torch.rope: layout '%.*s'; want 'sbhd' or 'bshd'", (int)len, layout);
  int sbhd = rs->layout == KILN_ROPE_SBHD;
  if (x->dim != 4)
    return kt_fail(c, "kiln.torch.rope: want x [%s]; got %s", sbhd ? "s, b, h, d" : "b, s, h, d",
                   KT_SHAPE(xs, x));
  const int64_t *z = x->sizes;
  int64_t s = sbhd ? z[0] : z[1], b = sbhd ? z[1] : z[0], h = z[2], d = z[3];
  if (angles->dtype != kt_f32 || angles->dim != 2 || angles->sizes[0] != s)
    return kt_fail(c, "kiln.torch.rope: angles must be float32 [s=%lld, rot_dim/2]; got %s %s",
                   (long long)s, kt_dtype(ad, sizeof ad, angles), KT_SHAPE(as, angles));
  if (!kt_same_device(angles, x))
    return kt_fail(c, "kiln.torch.rope: angles are on %s, x on %s",
                   kt_device(d1, sizeof d1, angles), kt_device(d2, sizeof d2, x));
  int64_t rot = 2 * angles->sizes[1];
  if (d == 0 || rot < 2 || rot > d)
    return kt_fail(c,
                   "kiln.torch.rope: rot_dim = 2 * angles.shape[1] = %lld must be in [2, d = %lld]",
                   (long long)rot, (long long)d);
  rs->s = (int)s, rs->b = (int)b, rs->h = (int)h, rs->d = (int)d, rs->rot = (int)rot;
  return 0;
}

/* both directions: dtype (of x or dy, named what), the output, the checks,
 * then the launch of fwd or bwd */
static void rope_run(kt_call *c, const char *what, int bwd) {
  kt_arg *x = &c->arg[0], *angles = &c->arg[1];
  kiln_dtype dt;
  rope_shape rs;
  void *y;
  if (kt_dtype_code(c, x, what, &dt) || kt_contig(c, x) || kt_out_like(c, x, &y) ||
      rope_args(c, x, angles, &rs) || kt_skip(c, x, kt_numel(x)) || kt_contig(c, angles))
    return;
  kiln_rope_style style = kt_bool_arg(c, 3) ? KILN_ROPE_INTERLEAVED : KILN_ROPE_ROTATE_HALF;
  kt_status(c, (bwd ? kiln_rope_bwd : kiln_rope_fwd)(c->l, dt, rs.layout, style, y, x->data,
                                                     (const float *)angles->data, rs.s, rs.b, rs.h,
                                                     rs.d, rs.rot, c->s));
}

KT_OP(rope, 0x3, 0, 0x4)
static void rope(kt_call *c) {
  rope_run(c, "x", 0);
}

KT_OP(rope_backward, 0x3, 0, 0x4)
static void rope_backward(kt_call *c) {
  rope_run(c, "dy", 1);
}

const kt_kernel kt_rope_kernels[] = {
    KT_KERNEL(rope),
    KT_KERNEL(rope_backward),
    {NULL, NULL},
};
