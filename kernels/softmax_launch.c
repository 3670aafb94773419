/* softmax_launch.c — variant and grid choice for the softmax entry points. */
#include "softmax_launch.h"

#include <string.h> /* memcpy */

#include "softmax/softmax_variants.def" /* KILN_SOFTMAX_VARIANTS */

/* Capacity (largest cols; 0 = any) and rows per block of each kind, exactly
 * as softmax_core.cuh lays rows out: w gives each warp a row, b and g give
 * each block a row. */
#define KILN_SM_CAP_w(elems, threads) (32LL * (elems))
#define KILN_SM_CAP_b(elems, threads) ((long long)(threads) * (elems))
#define KILN_SM_CAP_g(elems, threads) 0LL
#define KILN_SM_CAP_wv KILN_SM_CAP_w
#define KILN_SM_CAP_bv KILN_SM_CAP_b
#define KILN_SM_CAP_gv KILN_SM_CAP_g
#define KILN_SM_RPB_w(threads) ((threads) / 32)
#define KILN_SM_RPB_b(threads) 1
#define KILN_SM_RPB_g(threads) 1
#define KILN_SM_RPB_wv KILN_SM_RPB_w
#define KILN_SM_RPB_bv KILN_SM_RPB_b
#define KILN_SM_RPB_gv KILN_SM_RPB_g
#define KILN_SM_VEC_w 0
#define KILN_SM_VEC_b 0
#define KILN_SM_VEC_g 0
#define KILN_SM_VEC_wv 1
#define KILN_SM_VEC_bv 1
#define KILN_SM_VEC_gv 1

typedef struct softmax_variant {
  const char *name;
  long long max_cols; /* 0: any */
  unsigned threads;
  unsigned rows_per_block;
  int vec; /* 16-byte access: aligned tensors, cols % (16 / elem_bytes) == 0 */
} softmax_variant;

#define KILN_SM_ROW(a, name, kind, elems, threads)                                                 \
  {#name, KILN_SM_CAP_##kind(elems, threads), threads, KILN_SM_RPB_##kind(threads),                \
   KILN_SM_VEC_##kind},
static const softmax_variant k_variants[] = {KILN_SOFTMAX_VARIANTS(KILN_SM_ROW, ~)};
#undef KILN_SM_ROW

#define KILN_SM_NAME_FITS(a, name, kind, elems, threads)                                           \
  _Static_assert(sizeof(#name) <= sizeof(((kiln_softmax_launch *)0)->variant),                     \
                 "variant name " #name " does not fit kiln_softmax_launch.variant");
KILN_SOFTMAX_VARIANTS(KILN_SM_NAME_FITS, ~)
#undef KILN_SM_NAME_FITS

int kiln_softmax_pick_launch(kiln_softmax_launch *out, long long rows, int cols,
                             unsigned elem_bytes, int aligned16) {
  const size_t n = sizeof(k_variants) / sizeof(k_variants[0]);
  const softmax_variant *v = NULL;
  unsigned long long grid;
  int vec_ok;

  if (!out || rows < 1 || cols < 1 || (elem_bytes != 2 && elem_bytes != 4)) return -1;
  vec_ok = aligned16 && cols % (int)(16 / elem_bytes) == 0;
  for (size_t i = 0; i < n && !v; ++i)
    if ((vec_ok || !k_variants[i].vec) &&
        (k_variants[i].max_cols == 0 || cols <= k_variants[i].max_cols))
      v = &k_variants[i];
  if (!v) /* unreachable while the table ends with g; keeps a bad edit loud */
    return -1;

  /* ceil(rows / rows_per_block) without overflowing near LLONG_MAX */
  grid = (unsigned long long)rows / v->rows_per_block +
         ((unsigned long long)rows % v->rows_per_block != 0);
  if (grid > KILN_SOFTMAX_GRID_MAX) grid = KILN_SOFTMAX_GRID_MAX;

  memset(out->variant, 0, sizeof(out->variant));
  memcpy(out->variant, v->name, strlen(v->name)); /* fits: checked at compile time */
  out->block = v->threads;
  out->grid = grid;
  return 0;
}
