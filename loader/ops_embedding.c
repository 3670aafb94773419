/* Typed launchers for the embedding family (include/kiln/ops.h,
 * docs/kernels/embedding.md): check, size the grid, launch. */
#include <stdint.h>

#include "common/error.h"
#include "kiln/ops.h"
#include "loader/ops_internal.h"

#define EMB_THREADS 256u       /* kernels/embedding/embedding.cu KILN_EMB_THREADS */
#define EMB_WARPS 8ull         /* warps per block: one token (or work item) each */
#define EMB_SCAN_THREADS 1024u /* KILN_EMB_SCAN_THREADS */
#define EMB_ERR_THREADS 32u
#define EMB_TILE 2048ll      /* KILN_EMB_TILE: tokens per sort tile */
#define EMB_RADIX 256ll      /* 8-bit digits */
#define EMB_PIECE_MIN 64ll   /* the shortest piece of a long run (docs/kernels/embedding.md) */
#define EMB_SLOT_BYTES 128ll /* slot bytes per token: pieces are >= hidden * 4 / 128 rows */
#define EMB_MAX_BLOCKS                                                                             \
  2112ull /* 132 SMs x 16 blocks of 256: two full waves, grid-stride beyond                        \
           */

static unsigned long long blocks_for(unsigned long long work, unsigned long long per_block) {
  unsigned long long b = (work + per_block - 1) / per_block;
  if (b < 1) b = 1;
  return b < EMB_MAX_BLOCKS ? b : EMB_MAX_BLOCKS;
}

/* The deterministic path's workspace: keys/pos twice (ping-pong), the
 * digit-major tile histogram and the tail pieces' slots, each 256-byte
 * aligned. 0 on overflow. */
typedef struct emb_ws {
  size_t keys_a, pos_a, keys_b, pos_b, hist, slots, total;
  long long ntiles;
} emb_ws;

/* The rows of a piece for this hidden: at least EMB_PIECE_MIN, and enough
 * that the slots ((n_tokens - 1) / piece rows of hidden fp32) fit in
 * EMB_SLOT_BYTES per token, so the workspace does not depend on hidden. A
 * function of hidden only: the order of the sums never depends on the GPU. */
static int emb_piece(int hidden) {
  const long long p = ((long long)hidden * 4 + EMB_SLOT_BYTES - 1) / EMB_SLOT_BYTES;
  return (int)(p > EMB_PIECE_MIN ? p : EMB_PIECE_MIN);
}

static size_t align256(size_t v) {
  return (v + 255u) & ~(size_t)255u;
}

static int ws_layout(long long n_tokens, emb_ws *w) {
  size_t arr, hist;
  if (n_tokens < 1 || (unsigned long long)n_tokens > SIZE_MAX / 256u) return 0;
  w->ntiles = (n_tokens + EMB_TILE - 1) / EMB_TILE;
  arr = align256((size_t)n_tokens * 8u);
  hist = align256((size_t)w->ntiles * EMB_RADIX * 8u);
  w->keys_a = 0;
  w->pos_a = arr;
  w->keys_b = 2 * arr;
  w->pos_b = 3 * arr;
  w->hist = 4 * arr;
  w->slots = 4 * arr + hist;
  w->total = w->slots + align256((size_t)n_tokens * EMB_SLOT_BYTES);
  return 1;
}

size_t kiln_embedding_bwd_workspace_size(long long n_tokens, long long vocab_start,
                                         long long vocab_end, int deterministic) {
  emb_ws w;
  if (!deterministic || vocab_start < 0 || vocab_end <= vocab_start) return 0;
  return ws_layout(n_tokens, &w) ? w.total : 0;
}

static kiln_status check_rows(const char *op, long long n_tokens, int hidden, long long vocab_start,
                              long long vocab_end, unsigned out_bytes, unsigned w_bytes) {
  kiln_status rc;
  long long prod;
  KILN_CHECK(kiln_op_need_count(op, n_tokens, "n_tokens"));
  KILN_CHECK(kiln_op_need_positive(op, hidden, "hidden"));
  if (vocab_start < 0 || vocab_end <= vocab_start) {
    rc = kiln_fail(KILN_EINVAL,
                   "%s: vocab_start = %lld, vocab_end = %lld: the partition must be a non-empty "
                   "range with 0 <= vocab_start < vocab_end",
                   op, vocab_start, vocab_end);
    goto out;
  }
  KILN_CHECK(kiln_op_product(op, n_tokens, hidden, out_bytes, &prod));
  KILN_CHECK(kiln_op_product(op, vocab_end - vocab_start, hidden, w_bytes, &prod));
  rc = kiln_op_product(op, n_tokens, 8, 1, &prod);
out:
  return rc;
}

kiln_status kiln_embedding_fwd(kiln_loader *l, kiln_dtype dt, void *y, const int64_t *ids,
                               const void *weight, long long n_tokens, int hidden,
                               long long vocab_start, long long vocab_end, long long vocab_size,
                               unsigned flags, struct CUstream_st *stream) {
  static const char op[] = "kiln_embedding_fwd";
  char entry[64];
  CUdeviceptr err = 0;
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  KILN_CHECK(kiln_op_need_positive(op, vocab_size, "vocab_size"));
  KILN_CHECK(check_rows(op, n_tokens, hidden, vocab_start, vocab_end, kiln_dtype_size(dt),
                        kiln_dtype_size(dt)));
  if (vocab_end > vocab_size) {
    rc = kiln_fail(KILN_EINVAL, "%s: vocab_end = %lld is past vocab_size = %lld", op, vocab_end,
                   vocab_size);
    goto out;
  }
  if (flags & ~KILN_OPS_SYNC_CHECK) {
    rc = kiln_fail(KILN_EINVAL, "%s: unknown flags 0x%x (only KILN_OPS_SYNC_CHECK)", op,
                   flags & ~KILN_OPS_SYNC_CHECK);
    goto out;
  }
  if (n_tokens == 0) goto out; /* an empty batch: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"y", y}, {"ids", ids}, {"weight", weight}));
  KILN_CHECK(kiln_op_error_block(l, &err));
  {
    CUdeviceptr e = err;
    void *args[] = {&y,           &ids,       &weight,     &n_tokens, &hidden,
                    &vocab_start, &vocab_end, &vocab_size, &e};
    void *eargs[] = {&e, &ids, &n_tokens, &vocab_size};
    KILN_OP_ENTRY(entry, "kiln_embedding_fwd", kiln_dtype_str(dt), "g");
    KILN_CHECK(kiln_op_launch(l, op, entry, blocks_for((unsigned long long)n_tokens, EMB_WARPS),
                              EMB_THREADS, args, stream));
    KILN_CHECK(
        kiln_op_launch(l, op, "kiln_embedding_err_i64_g", 1, EMB_ERR_THREADS, eargs, stream));
  }
  if (flags & KILN_OPS_SYNC_CHECK) rc = kiln_ops_check(l, stream);
out:
  return rc;
}

/* The stable LSD radix sort of the partition's tokens by row (docs/kernels/
 * embedding.md), then the tail pieces of long runs, then the per-row sums. */
static kiln_status bwd_sorted(kiln_loader *l, const char *op, kiln_dtype dt, float *dweight,
                              const void *dy, const int64_t *ids, long long n_tokens, int hidden,
                              long long vocab_start, long long vocab_end, const emb_ws *w,
                              void *workspace, struct CUstream_st *stream) {
  char entry[64];
  const uintptr_t base = (uintptr_t)workspace;
  void *ka = (void *)(base + w->keys_a), *pa = (void *)(base + w->pos_a);
  void *kb = (void *)(base + w->keys_b), *pb = (void *)(base + w->pos_b);
  void *hist = (void *)(base + w->hist);
  long long rows = vocab_end - vocab_start, count = w->ntiles * EMB_RADIX;
  const unsigned long long tiles = blocks_for((unsigned long long)w->ntiles, 1);
  int bits = 0, shift;
  kiln_status rc;
  while (bits < 63 && (rows >> bits) != 0)
    bits++; /* keys are in [0, rows]: rows itself marks tokens outside the partition */
  {
    void *args[] = {&ka, &pa, &ids, &n_tokens, &vocab_start, &vocab_end};
    KILN_CHECK(kiln_op_launch(l, op, "kiln_embedding_keys_i64_g",
                              blocks_for((unsigned long long)n_tokens, EMB_THREADS), EMB_THREADS,
                              args, stream));
  }
  for (shift = 0; shift < bits; shift += 8) {
    void *hargs[] = {&hist, &ka, &n_tokens, &shift};
    void *sargs[] = {&hist, &count};
    void *xargs[] = {&kb, &pb, &ka, &pa, &hist, &n_tokens, &shift};
    void *t;
    KILN_CHECK(
        kiln_op_launch(l, op, "kiln_embedding_hist_i64_g", tiles, EMB_THREADS, hargs, stream));
    KILN_CHECK(
        kiln_op_launch(l, op, "kiln_embedding_scan_i64_g", 1, EMB_SCAN_THREADS, sargs, stream));
    KILN_CHECK(
        kiln_op_launch(l, op, "kiln_embedding_scatter_i64_g", tiles, EMB_THREADS, xargs, stream));
    t = ka, ka = kb, kb = t;
    t = pa, pa = pb, pb = t;
  }
  {
    /* one warp per (tail candidate or sorted token, 32 x 16 bytes of columns) */
    const unsigned long long chunk = 32ull * (16u / kiln_dtype_size(dt));
    const unsigned long long chunks = ((unsigned long long)hidden + chunk - 1) / chunk;
    int piece = emb_piece(hidden);
    const unsigned long long tails = (unsigned long long)((n_tokens - 1) / piece);
    void *slots = (void *)(base + w->slots);
    void *pargs[] = {&slots, &dy, &ka, &pa, &n_tokens, &hidden, &rows, &piece};
    void *args[] = {&dweight, &dy, &ka, &pa, &slots, &n_tokens, &hidden, &rows, &piece};
    if (tails > 0) {
      KILN_OP_ENTRY(entry, "kiln_embedding_bwd", kiln_dtype_str(dt), "pieces");
      KILN_CHECK(kiln_op_launch(l, op, entry, blocks_for(tails * chunks, EMB_WARPS), EMB_THREADS,
                                pargs, stream));
    }
    KILN_OP_ENTRY(entry, "kiln_embedding_bwd", kiln_dtype_str(dt), "sorted");
    rc = kiln_op_launch(l, op, entry, blocks_for((unsigned long long)n_tokens * chunks, EMB_WARPS),
                        EMB_THREADS, args, stream);
  }
out:
  return rc;
}

kiln_status kiln_embedding_bwd(kiln_loader *l, kiln_dtype dt, float *dweight, const void *dy,
                               const int64_t *ids, long long n_tokens, int hidden,
                               long long vocab_start, long long vocab_end, int deterministic,
                               void *workspace, size_t workspace_bytes,
                               struct CUstream_st *stream) {
  static const char op[] = "kiln_embedding_bwd";
  char entry[64];
  emb_ws w;
  kiln_status rc;
  KILN_CHECK(kiln_op_check_common(op, l, dt));
  KILN_CHECK(check_rows(op, n_tokens, hidden, vocab_start, vocab_end, kiln_dtype_size(dt), 4));
  if (deterministic != 0 && deterministic != 1) {
    rc = kiln_fail(KILN_EINVAL, "%s: deterministic = %d, must be 0 or 1", op, deterministic);
    goto out;
  }
  if (n_tokens == 0) goto out; /* no token adds to dweight: nothing to do */
  KILN_CHECK(KILN_OP_NEED_PTRS(op, {"dweight", dweight}, {"dy", dy}, {"ids", ids}));
  if (!deterministic) {
    void *args[] = {&dweight, &dy, &ids, &n_tokens, &hidden, &vocab_start, &vocab_end};
    KILN_OP_ENTRY(entry, "kiln_embedding_bwd", kiln_dtype_str(dt), "atomic");
    rc = kiln_op_launch(l, op, entry, blocks_for((unsigned long long)n_tokens, EMB_WARPS),
                        EMB_THREADS, args, stream);
    goto out;
  }
  if (!ws_layout(n_tokens, &w)) {
    rc = kiln_fail(KILN_EINVAL, "%s: n_tokens = %lld is too large for the workspace", op, n_tokens);
    goto out;
  }
  KILN_CHECK(kiln_op_need_ptr(op, workspace, "workspace"));
  if (workspace_bytes < w.total) {
    rc = kiln_fail(KILN_EINVAL,
                   "%s: workspace_bytes = %zu, the deterministic path needs %zu "
                   "(kiln_embedding_bwd_workspace_size)",
                   op, workspace_bytes, w.total);
    goto out;
  }
  if ((uintptr_t)workspace % 256u) {
    rc = kiln_fail(KILN_EINVAL, "%s: workspace %p is not 256-byte aligned", op, workspace);
    goto out;
  }
  rc = bwd_sorted(l, op, dt, dweight, dy, ids, n_tokens, hidden, vocab_start, vocab_end, &w,
                  workspace, stream);
out:
  return rc;
}
