/* rope.cu — unit: rotary position embedding (docs/kernels/rope.md).
 *
 * x, y: [s, b, h, d] (layout 0, sbhd) or [b, s, h, d] (layout 1, bshd).
 * angles: fp32 [s, rot_dim / 2]. The first rot_dim features of every head
 * are rotated pairwise by the angle of the pair at the token's position, the
 * rest copied (skipped when y == x). Backward: the same rotation by -angle.
 *
 * Work unit (one block at a time, grid-stride over units): one position p
 * and a chunk of `bchunk` of its b tokens (the launcher picks bchunk). The
 * block computes sin/cos of the position's pairs once into shared memory
 * (precise: kiln_rope_sincos) and every head of every token of the chunk
 * reuses them. Vector path: 16-byte loads and stores when x, y are 16-byte
 * aligned, d % V == 0 and (rotate-half) rot_dim/2 % V == 0 or (interleaved)
 * rot_dim % V == 0, V = KILN_VEC(T); else a scalar path, one pair or one
 * copied element per item. rot_dim > 2 * KILN_ROPE_CACHE_PAIRS takes the
 * scalar path, whose pairs past the cache compute their sin/cos in place.
 *
 * Entry points: kiln_rope_{fwd,bwd}_<dt>_{rh,il} of rope.def, all
 * (T *y, const T *x, const float *angles, int s, int b, int h, int d,
 *  int rot_dim, int layout, int bchunk), KILN_ROPE_THREADS threads.
 */
#include "common/kiln_types.cuh"
#include "common/kiln_vec.cuh"
#include "rope/rope.def"

#define KILN_ROPE_THREADS 256
/* Resident blocks per SM the registers must allow (<= 40 registers): with
 * __launch_bounds__(256) alone ptxas chose 32 registers for some entries and
 * spilled (NVRTC 13.0: sm_80, sm_90, sm_120); 6 x 256 threads keep 48 warps per SM in
 * flight, enough for a memory-bound kernel. */
#define KILN_ROPE_MIN_BLOCKS 6
#define KILN_ROPE_CACHE_PAIRS 1024 /* rot_dim <= 2048 uses the shared cache only */

/* sin and cos of a, to ~1 ulp for any float a: Cody-Waite reduction by pi/2
 * in fp32 (three-part constant, exact to |a| <= 105615, as CUDA's sinf), in
 * fp64 beyond (no Payne-Hanek table: no local memory, no stack frame), then
 * minimax polynomials on [-pi/4, pi/4]. NaN or inf gives NaN. */
__device__ __forceinline__ void kiln_rope_sincos(float a, float *sn, float *cs) {
  float r;
  int q;
  if (fabsf(a) <= 105615.0f) {
    const float j = rintf(a * 0.636619772f);
    r = fmaf(j, -1.57079601e+00f, a);
    r = fmaf(j, -3.13916473e-07f, r);
    r = fmaf(j, -5.39030253e-15f, r);
    q = (int)j;
  } else {
    const double jd = rint((double)a * 0.63661977236758134);
    double rd = fma(-jd, 1.5707963267948966, (double)a);
    rd = fma(-jd, 6.123233995736766e-17, rd);
    r = (float)rd;
    /* only q mod 4 matters; the clamp keeps the conversion defined for
     * NaN and |a| >= 2^62, whose r is NaN or meaningless anyway */
    q = (int)(long long)fmin(fmax(jd, -0x1p62), 0x1p62);
  }
  const float t = r * r;
  float ps = 2.86567956e-6f;
  ps = fmaf(ps, t, -1.98559923e-4f);
  ps = fmaf(ps, t, 8.33338592e-3f);
  ps = fmaf(ps, t, -1.66666672e-1f);
  const float s0 = fmaf(ps * t, r, r);
  float pc = 2.44677067e-5f;
  pc = fmaf(pc, t, -1.38877297e-3f);
  pc = fmaf(pc, t, 4.16666567e-2f);
  pc = fmaf(pc, t, -5.00000000e-1f);
  const float c0 = fmaf(pc, t, 1.0f);
  const float ss = (q & 1) ? c0 : s0, cc = (q & 1) ? s0 : c0;
  *sn = (q & 2) ? -ss : ss;
  *cs = ((q + 1) & 2) ? -cc : cc;
}

/* (cos, sin) of pair i at the unit's position: from the cache, or computed
 * (pairs past the cache). bwd negates sin. */
template <bool kBwd, bool kAllCached>
__device__ __forceinline__ void kiln_rope_cs(const float *cache, const float *ang, int i, float *c,
                                             float *sn) {
  float s0, c0;
  if (kAllCached || i < KILN_ROPE_CACHE_PAIRS) {
    c0 = cache[i];
    s0 = cache[KILN_ROPE_CACHE_PAIRS + i];
  } else {
    kiln_rope_sincos(ang[i], &s0, &c0);
    if (kBwd) s0 = -s0;
  }
  *c = c0;
  *sn = s0;
}

/* One unit's rows: nrows = tokens * h rows of d features, row r at
 * tok_base + (r / h) * bs + (r % h) * d; items per row: rot_items then
 * pass_items (copies). */
template <typename T, bool kIl, bool kBwd, bool kVec>
__device__ __forceinline__ void
kiln_rope_unit(T *y, const T *x, const float *cache, const float *ang, kiln_i64 tok_base,
               kiln_i64 bs, int h, int d, int rot, kiln_i64 nrows, int rot_items, int items) {
  const int V = kVec ? KILN_VEC(T) : 1;
  const int half = rot >> 1;
  const kiln_i64 total = nrows * items;
  const bool small = total <= 0x7fffffffLL;
  for (kiln_i64 it = threadIdx.x; it < total; it += KILN_ROPE_THREADS) {
    kiln_i64 r;
    int j;
    if (small) {
      r = (unsigned)it / (unsigned)items;
      j = (int)((unsigned)it - (unsigned)r * (unsigned)items);
    } else {
      r = it / items;
      j = (int)(it - r * items);
    }
    kiln_i64 tok, hd;
    if (h == 1) {
      tok = r;
      hd = 0;
    } else if (small) {
      tok = (unsigned)r / (unsigned)h;
      hd = (unsigned)r - (unsigned)tok * (unsigned)h;
    } else {
      tok = r / h;
      hd = r - tok * h;
    }
    const kiln_i64 row = tok_base + tok * bs + hd * d;
    const T *xr = x + row;
    T *yr = y + row;
    if (j >= rot_items) { /* copy features [rot, d) */
      const int f = rot + (j - rot_items) * V;
      if (kVec) {
        float v[KILN_VEC(T)];
        kiln_load_vec(xr + f, v);
        kiln_store_vec(yr + f, v);
      } else {
        yr[f] = xr[f];
      }
      continue;
    }
    if (kVec) {
      float a[KILN_VEC(T)];
      if (kIl) { /* V elements = V/2 pairs (2i, 2i+1) */
        const int f = j * V;
        kiln_load_vec(xr + f, a);
#pragma unroll
        for (int k = 0; k < KILN_VEC(T); k += 2) {
          float c, sn;
          kiln_rope_cs<kBwd, true>(cache, ang, (f + k) >> 1, &c, &sn);
          const float x0 = a[k], x1 = a[k + 1];
          a[k] = x0 * c - x1 * sn;
          a[k + 1] = x1 * c + x0 * sn;
        }
        kiln_store_vec(yr + f, a);
      } else { /* pairs (i, i + half), i in [f, f + V) */
        float b2[KILN_VEC(T)];
        const int f = j * V;
        kiln_load_vec(xr + f, a);
        kiln_load_vec(xr + f + half, b2);
#pragma unroll
        for (int k = 0; k < KILN_VEC(T); ++k) {
          float c, sn;
          kiln_rope_cs<kBwd, true>(cache, ang, f + k, &c, &sn);
          const float x0 = a[k], x1 = b2[k];
          a[k] = x0 * c - x1 * sn;
          b2[k] = x1 * c + x0 * sn;
        }
        kiln_store_vec(yr + f, a);
        kiln_store_vec(yr + f + half, b2);
      }
    } else {
      float c, sn;
      kiln_rope_cs<kBwd, false>(cache, ang, j, &c, &sn);
      const int i0 = kIl ? 2 * j : j, i1 = kIl ? 2 * j + 1 : j + half;
      const float x0 = kiln_load_f32(xr + i0), x1 = kiln_load_f32(xr + i1);
      kiln_store_f32(yr + i0, x0 * c - x1 * sn);
      kiln_store_f32(yr + i1, x1 * c + x0 * sn);
    }
  }
}

template <typename T, bool kIl, bool kBwd>
__device__ __forceinline__ void kiln_rope(T *y, const T *x, const float *angles, int s, int b,
                                          int h, int d, int rot, int layout, int bchunk) {
  /* cos of pair i at [i], (+-)sin at [KILN_ROPE_CACHE_PAIRS + i]: a vector
   * item reads V consecutive floats of each (16-byte shared loads) */
  __shared__ float cache[2 * KILN_ROPE_CACHE_PAIRS];
  const int half = rot >> 1;
  const int V = KILN_VEC(T);
  const bool vec = kiln_aligned16(x) && kiln_aligned16(y) && d % V == 0 &&
                   (kIl ? rot % V == 0 : half % V == 0) && half <= KILN_ROPE_CACHE_PAIRS;
  const bool copy = y != x; /* in place: features past rot_dim are already there */
  const kiln_i64 hd = (kiln_i64)h * d;
  /* token (p, bi) starts at p * ps + bi * bs */
  const kiln_i64 ps = layout == 0 ? (kiln_i64)b * hd : hd;
  const kiln_i64 bs = layout == 0 ? hd : (kiln_i64)s * hd;
  const int nbc = (b + bchunk - 1) / bchunk;
  const kiln_i64 units = (kiln_i64)s * nbc;
  const int cached = half < KILN_ROPE_CACHE_PAIRS ? half : KILN_ROPE_CACHE_PAIRS;
  const int rot_items = vec ? (kIl ? rot / V : half / V) : half;
  const int items = rot_items + (copy ? (vec ? (d - rot) / V : d - rot) : 0);
  for (kiln_i64 u = blockIdx.x; u < units; u += gridDim.x) {
    const kiln_i64 p = u / nbc;
    const int b0 = (int)(u - p * nbc) * bchunk;
    const int nb = b - b0 < bchunk ? b - b0 : bchunk;
    const float *ang = angles + p * half;
    __syncthreads(); /* the previous unit's readers are done with the cache */
    for (int i = threadIdx.x; i < cached; i += KILN_ROPE_THREADS) {
      float sn, c;
      kiln_rope_sincos(ang[i], &sn, &c);
      cache[i] = c;
      cache[KILN_ROPE_CACHE_PAIRS + i] = kBwd ? -sn : sn;
    }
    __syncthreads();
    const kiln_i64 base = p * ps + (kiln_i64)b0 * bs;
    if (vec)
      kiln_rope_unit<T, kIl, kBwd, true>(y, x, cache, ang, base, bs, h, d, rot, (kiln_i64)nb * h,
                                         rot_items, items);
    else
      kiln_rope_unit<T, kIl, kBwd, false>(y, x, cache, ang, base, bs, h, d, rot, (kiln_i64)nb * h,
                                          rot_items, items);
  }
}

typedef float kiln_rope_ctype_f32;
typedef kiln_f16 kiln_rope_ctype_f16;
typedef kiln_bf16 kiln_rope_ctype_bf16;
#define KILN_ROPE_IS_IL_rh false
#define KILN_ROPE_IS_IL_il true
#define KILN_ROPE_IS_BWD_fwd false
#define KILN_ROPE_IS_BWD_bwd true

#define KILN_ROPE_ENTRY_(unit, dir, dt, v)                                                         \
  extern "C" __global__ void __launch_bounds__(KILN_ROPE_THREADS, KILN_ROPE_MIN_BLOCKS)            \
      kiln_##unit##_##dir##_##dt##_##v(kiln_rope_ctype_##dt *y, const kiln_rope_ctype_##dt *x,     \
                                       const float *angles, int s, int b, int h, int d,            \
                                       int rot_dim, int layout, int bchunk) {                      \
    kiln_rope<kiln_rope_ctype_##dt, KILN_ROPE_IS_IL_##v, KILN_ROPE_IS_BWD_##dir>(                  \
        y, x, angles, s, b, h, d, rot_dim, layout, bchunk);                                        \
  }
KILN_ROPE_ENTRIES(KILN_ROPE_ENTRY_)
#undef KILN_ROPE_ENTRY_
