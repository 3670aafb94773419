/* softmax_reference.cpp — see softmax_reference.h. */
#include "softmax_reference.h"

#include <math.h> /* exp2, fabs, isnan, INFINITY, NAN */

#include <algorithm> /* std::max, std::min */

namespace kiln_emu {
namespace {

const double kEps32 = 0x1p-23;

/* Half an ulp of the output dtype, relative (0 for f32: the fp32 terms cover
 * it), plus 1% for rounding a value that already carries fp32 error. */
double output_rel(int dtype) {
  return (dtype == kF16 ? 0x1p-11 : dtype == kBf16 ? 0x1p-8 : 0.0) * (1.0 + 0x1p-7);
}

/* Absolute slack near zero, for results in the subnormal range: a few steps
 * of f32's (the fp32 arithmetic), one of f16's (2^-24) or bf16's (2^-133). */
double output_abs(int dtype) {
  return dtype == kF16 ? 0x1p-24 : dtype == kBf16 ? 0x1p-132 : 0x1p-146;
}

/* Relative rounding error of a row's sums in fp32: the elements one thread
 * adds in sequence, a tree over the warp or block, the operations around
 * them; for g, up to ~60 eps per rescale by exp2(m - m'), one per chunk of
 * 4096 columns plus the block combine. */
double sum_rel(const row_geometry &g) {
  const double per_thread = (double)((g.cols + g.width - 1) / g.width);
  const double rescales = g.width == 32 ? 0.0 : (double)((g.cols + 4095) / 4096) + 1.0;
  return kEps32 * (per_thread + 24.0 + 60.0 * rescales);
}

/* Rounding [lo, hi] to the output dtype lands within this. */
void widen_to_output(expected *e, int dtype) {
  const double rel = output_rel(dtype), abs = output_abs(dtype);
  e->lo -= rel * fabs(e->lo) + abs;
  e->hi += rel * fabs(e->hi) + abs;
}

} // namespace

int row_limit(const row_geometry &g, long long r) {
  if (g.unit != kUnitCausal) return g.cols;
  const long long i = r % g.sq;
  return i < g.cols ? (int)i + 1 : g.cols;
}

/* t_j = scale * x_j; P = columns not masked with t_j != -inf; y_j =
 * exp(t_j - m) / sum_P exp(t_k - m) on P, 0 elsewhere; NaN on P when a t_j on
 * P is NaN or +inf. Whether t_j is +-inf is decided in fp32 as the kernel
 * computes it (v_j = x_j * (scale * log2 e)), so a product that overflows
 * counts as infinite, as docs/kernels.md says.
 *
 * Bounds: the kernel's exponent v_j - max v differs from the exact d_j =
 * (t_j - m) log2 e by at most 2 eps |d_j| (the folded constant, the
 * subtraction) plus eps (|v_j| + |max v|) (the two products) unless x_j is
 * the maximum's own value (then both products round alike and cancel). ex2
 * adds 4 eps and flushes below 2^-126; the sum and the division add sum_rel. */
void reference_forward(std::vector<expected> *out, const row_geometry &g, int dtype,
                       const std::vector<float> &x, const unsigned char *mask, float scale) {
  const float c32 = scale * 1.4426950408889634f; /* KILN_LOG2E, folded as the kernel folds it */
  const double log2e = 1.4426950408889634, srel = sum_rel(g);
  std::vector<char> part(g.cols);
  std::vector<double> e_lo(g.cols), e_hi(g.cols);
  out->assign((size_t)g.rows * g.cols, expected{0.0, 0.0, 0.0, true});
  for (long long r = 0; r < g.rows; ++r) {
    const size_t off = (size_t)r * g.cols;
    const float *xr = &x[off];
    const unsigned char *mrow = nullptr;
    if (g.unit == kUnitMasked) {
      const long long batch = r / ((long long)g.heads * g.sq), i = r % g.sq;
      mrow = mask + (size_t)((g.mask_batches == 1 ? 0 : batch) * g.sq + i) * g.cols;
    }
    const int lim = row_limit(g, r);
    bool bad = false, any = false;
    int arg = -1; /* the participating maximum */
    for (int j = 0; j < g.cols; ++j) {
      const float v = xr[j] * c32;
      part[j] = j < lim && !(mrow && mrow[j] != 0) && v != -INFINITY;
      if (!part[j]) continue;
      any = true;
      if (isnan(v) || v == INFINITY)
        bad = true;
      else if (arg < 0 || v > xr[arg] * c32)
        arg = j;
    }
    if (!any) continue; /* a fully masked row: all zeros */
    if (bad) {          /* NaN wherever something takes part */
      for (int j = 0; j < g.cols; ++j)
        if (part[j]) (*out)[off + j] = expected{NAN, 0.0, 0.0, false};
      continue;
    }
    const double m = (double)xr[arg] * scale, vmax = fabs((double)(xr[arg] * c32));
    double sum = 0.0, s_lo = 0.0, s_hi = 0.0;
    for (int j = 0; j < g.cols; ++j) {
      if (!part[j]) continue;
      const double d = ((double)xr[j] * scale - m) * log2e;
      const double err = 2.0 * kEps32 * fabs(d) +
                         (xr[j] == xr[arg] ? 0.0 : kEps32 * (fabs((double)(xr[j] * c32)) + vmax));
      e_lo[j] = d - err < -126.0 ? 0.0 : exp2(d - err) * (1.0 - 4.0 * kEps32);
      e_hi[j] = d + err < -126.0 ? 0.0 : exp2(std::min(0.0, d + err)) * (1.0 + 4.0 * kEps32);
      sum += exp2(d);
      s_lo += e_lo[j];
      s_hi += e_hi[j];
    }
    for (int j = 0; j < g.cols; ++j) {
      if (!part[j]) continue;
      expected &e = (*out)[off + j];
      e.exact_zero = false;
      e.value = exp2(((double)xr[j] * scale - m) * log2e) / sum;
      e.lo = e_lo[j] / (s_hi * (1.0 + srel));
      e.hi = e_hi[j] / (s_lo * (1.0 - srel));
      widen_to_output(&e, dtype);
    }
  }
}

/* dx_j = scale * y_j * (dy_j - s), s = sum_k dy_k * y_k over the row (the
 * causal unit: over k <= i, and dx_j = 0 beyond). IEEE in double, so NaN and
 * inf reach dx exactly as in fp32 as long as nothing finite overflows fp32.
 * Bound: the sum's error (sum_rel of sum |y_k dy_k|) and the three roundings
 * after it. */
void reference_backward(std::vector<expected> *out, const row_geometry &g, int dtype,
                        const std::vector<float> &y, const std::vector<float> &dy, float scale) {
  const double srel = sum_rel(g);
  out->assign((size_t)g.rows * g.cols, expected{0.0, 0.0, 0.0, true});
  for (long long r = 0; r < g.rows; ++r) {
    const size_t off = (size_t)r * g.cols;
    const int lim = row_limit(g, r);
    double s = 0.0, sabs = 0.0;
    for (int k = 0; k < lim; ++k) {
      s += (double)y[off + k] * dy[off + k];
      sabs += fabs((double)y[off + k] * dy[off + k]);
    }
    for (int j = 0; j < lim; ++j) {
      expected &e = (*out)[off + j];
      const double yj = y[off + j], d = dy[off + j] - s;
      e.exact_zero = false;
      e.value = scale * (yj * d);
      const double err = fabs(scale) * fabs(yj) * (srel * sabs + 2.0 * kEps32 * fabs(d)) +
                         2.0 * kEps32 * fabs(e.value);
      e.lo = e.value - err;
      e.hi = e.value + err;
      widen_to_output(&e, dtype);
    }
  }
}

bool meets(double got, const expected &e) {
  if (e.exact_zero) return got == 0.0;
  if (isnan(e.value)) return isnan(got);
  if (isinf(e.value)) return got == e.value;
  return got >= e.lo && got <= e.hi;
}

} // namespace kiln_emu
