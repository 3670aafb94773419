/* softmax_launch.h — launch configuration for the softmax entry points.
 *
 * Plain C11, no CUDA headers: the loader uses it to turn (rows, cols, the
 * tensors' alignment) into the entry point's variant suffix and a 1-D launch
 * shape. The variant table comes from softmax/softmax_variants.def (the
 * single source of truth); the kernels grid-stride over rows, so any grid
 * >= 1 is correct and the grid chosen here is only a performance choice.
 */
#ifndef KILN_KERNELS_SOFTMAX_LAUNCH_H
#define KILN_KERNELS_SOFTMAX_LAUNCH_H

/* Largest grid kiln_softmax_pick_launch returns. Far above what any GPU keeps
 * resident at once (a few thousand blocks), far below gridDim.x's limit
 * (2^31 - 1); beyond it each block simply takes more rows. */
#define KILN_SOFTMAX_GRID_MAX 1048576ULL

typedef struct kiln_softmax_launch {
  char variant[8]; /* "v256".."vg", "w1".."w32", "b4".."b32" or "g": the <v> in the entry name */
  unsigned block;  /* threads per block (blockDim.x); blockDim.y = z = 1 */
  unsigned long long grid; /* blocks (gridDim.x), 1..KILN_SOFTMAX_GRID_MAX */
} kiln_softmax_launch;

/* Picks the launch for a softmax over `rows` rows of `cols` elements of
 * elem_bytes (4 for fp32, 2 for fp16/bf16) each (same choice for forward and
 * backward and every unit): the first variant of softmax_variants.def whose
 * capacity covers cols, among the 16-byte vector variants (v256 .. v16k, vg)
 * only when aligned16 is nonzero — every tensor the entry reads or writes,
 * the mask included, 16-byte aligned — and cols % (16 / elem_bytes) == 0.
 * So: the vector variant when the tensors allow it, else the smallest w<E>
 * with cols <= 32*E, else the smallest b<E> with cols <= 512*E, else g.
 * grid = the blocks needed to give every row its own warp (w, v256..v1k: 4
 * rows per block) or block, capped at KILN_SOFTMAX_GRID_MAX.
 * Returns 0 and fills *out, or -1 (and leaves *out untouched) when out is
 * NULL, rows < 1, cols < 1 or elem_bytes is neither 2 nor 4. */
int kiln_softmax_pick_launch(kiln_softmax_launch *out, long long rows, int cols,
                             unsigned elem_bytes, int aligned16);

#endif /* KILN_KERNELS_SOFTMAX_LAUNCH_H */
