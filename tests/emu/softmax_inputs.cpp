/* softmax_inputs.cpp — see softmax_inputs.h. */
#include "softmax_inputs.h"

#include <math.h>   /* INFINITY, NAN */
#include <string.h> /* memset */

namespace kiln_emu {

/* The largest finite value worth planting per dtype (f16 tops out at 65504). */
static float huge_value(int dtype) {
  return dtype == kF16 ? 60000.f : 1e38f;
}

void fill_forward_inputs(buffer *x, buffer *mask, const test_case &c, const row_geometry &g,
                         std::mt19937_64 &rng) {
  std::normal_distribution<float> nd(0.f, 3.f);
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  for (size_t i = 0; i < x->n; ++i)
    x->set(i, nd(rng));
  if (g.unit == kUnitMasked) {
    for (size_t i = 0; i < mask->n; ++i) /* != 0 is masked, whatever the byte */
      *mask->at(i) = ud(rng) < 0.3f ? (unsigned char)(1 + rng() % 255) : 0;
    for (int mb = 0; mb < c.mask_batches; ++mb) {
      const size_t base = (size_t)mb * c.sq * c.cols;
      if (c.sq >= 2) /* query 1: every column masked */
        memset(mask->at(base + (size_t)c.cols), 1, (size_t)c.cols);
      if (c.sq >= 3) { /* query 2: all but one */
        memset(mask->at(base + 2 * (size_t)c.cols), 1, (size_t)c.cols);
        *mask->at(base + 2 * (size_t)c.cols + rng() % c.cols) = 0;
      }
    }
  }
  for (long long r = 0; r < g.rows; ++r) {
    const size_t off = (size_t)r * c.cols;
    const int lim = row_limit(g, r);
    const int j = (int)(rng() % (unsigned)lim);
    switch (c.special ? r % 9 : 0) {
    case 1: x->set(off + j, NAN); break;
    case 2: x->set(off + j, INFINITY); break;
    case 3:
      for (int k = 0; k < c.cols; k += 2)
        x->set(off + k, -INFINITY);
      break;
    case 4:
      for (int k = 0; k < c.cols; ++k)
        x->set(off + k, -INFINITY);
      break;
    case 5: x->set(off + j, huge_value(x->dtype)); break;
    case 6:
      for (int k = 0; k < c.cols; ++k)
        x->set(off + k, 1.5f);
      break;
    case 7:
      for (int k = 0; k < c.cols; ++k)
        x->set(off + k, nd(rng) * 1e-6f);
      break;
    case 8: /* scale * x around -300: exp2 of anything but t - max flushes to 0 */
      for (int k = 0; k < c.cols; ++k)
        x->set(off + k, (nd(rng) - 300.f) / c.scale);
      break;
    default: break;
    }
    /* Values the contract says are never used: NaN must not leak from them. */
    for (int k = lim; k < c.cols; ++k) /* causal upper triangle */
      x->set(off + k, NAN);
  }
  if (g.unit == kUnitMasked)
    for (long long r = 0; r < g.rows; ++r) {
      const long long batch = r / ((long long)c.heads * c.sq), i = r % c.sq;
      const size_t mrow = (size_t)((c.mask_batches == 1 ? 0 : batch) * c.sq + i) * c.cols;
      for (int k = 0; k < c.cols; ++k)
        if (*mask->at(mrow + k) && ud(rng) < 0.5f) x->set((size_t)r * c.cols + k, NAN);
    }
}

void fill_backward_inputs(buffer *y, buffer *dy, const std::vector<expected> &fwd,
                          const test_case &c, const row_geometry &g, std::mt19937_64 &rng) {
  std::normal_distribution<float> nd(0.f, 3.f);
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  for (size_t i = 0; i < y->n; ++i) {
    y->set(i, c.random_y ? ud(rng) : (float)fwd[i].value);
    dy->set(i, nd(rng));
  }
  for (long long r = 0; r < g.rows; ++r) {
    const size_t off = (size_t)r * c.cols;
    const int lim = row_limit(g, r);
    const int j = (int)(rng() % (unsigned)lim);
    if (c.special && r % 9 == 1) dy->set(off + j, NAN);
    if (c.special && r % 9 == 2) dy->set(off + j, INFINITY);
    for (int k = lim; k < c.cols; ++k) {
      y->set(off + k, NAN);
      dy->set(off + k, NAN);
    }
  }
}

} // namespace kiln_emu
