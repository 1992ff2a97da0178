/*
 * launch_plan.h: the CUDA backend's host-side choices that depend only on
 * shapes and counts (launch_plan.c), plain C so that tests/unit/
 * test_cuda_plan.c checks them on machines without nvcc or a GPU.
 */
#ifndef KVC_CUDA_LAUNCH_PLAN_H
#define KVC_CUDA_LAUNCH_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks of threads each that cover total items: the element-wise kernels' grids. */
unsigned grid_blocks(int64_t total, int threads);

/*
 * Warps that share one row of a matrix-vector product (split-K inside a
 * block of 8 warps): 1, 2, 4 or 8, the fewest that give at least two
 * blocks per SM (n_sm > 0), so a 512-row K/V projection still fills the
 * device while a wide one keeps a row per warp.
 */
int mv_warps_per_row(int64_t n_out, int n_sm);

#define MV_MULTI_TOKENS 8	/* tokens one pass of the batched int8 kernel takes */
#define MV_MULTI_MAX 32		/* most tokens that take it rather than dequantisation + GEMM */

/*
 * Passes of the batched int8 matrix-vector kernel (each reads the matrix
 * once for up to MV_MULTI_TOKENS tokens) for a product over n tokens, or 0
 * when n is 1 (the one-token kernels) or past MV_MULTI_MAX (dequantising
 * the matrix to F16 for cuBLAS reads and writes it about 3.5 times at
 * Q4_K, which more than 4 passes cost; an estimate, not measured).
 */
int mv_multi_passes(int n);

#define ATT_MAX_SPLIT 32	/* most splits of one token's attention over the cache */

/*
 * Splits of one token's attention over the cache (flash-decoding): enough
 * blocks (n_head_kv of them per split) for two per SM, at most
 * ATT_MAX_SPLIT and at most one per 64 positions of a context of n_ctx.
 * It depends on the cache's size, not on the position, so one decode graph
 * serves every position: short contexts leave splits empty (cheap: an
 * empty split reads nothing).
 */
int att_decode_splits(int n_sm, int n_head_kv, int n_ctx);

/*
 * Splits of forward_multi's attention (n_rows sequences' one token each,
 * the longest at n_pos positions): enough blocks (n_head_kv * n_rows per
 * split) for two per SM, at most one per 64 positions of the longest, and
 * n_rows * splits within ATT_MAX_SPLIT (the partials share one-token
 * decode's buffer) unless there is one split (no partials). No graph is
 * captured for these steps, so the count may follow the positions.
 */
int att_multi_splits(int n_sm, int n_head_kv, int n_rows, int n_pos);

#define ATT_TILE_KEYS 32	/* keys per tile of the tiled prefill attention: one per lane */
#define ATT_TILE_WARPS 8	/* warps per block of it */
#define ATT_TILE_MIN 16		/* fewest new tokens that take it (fewer: a block per token and head) */

/*
 * Whether a prefill of n tokens runs the tiled attention: n >= ATT_TILE_MIN
 * and a head size it is built for (64, 96, 128, 256).
 */
bool att_tile_ok(int n, int head_dim);

/*
 * Query rows one block of the tiled attention takes: ATT_TILE_WARPS warps
 * of att_tile_rows_per_warp rows (2 up to 128 wide heads, 1 for 256, so its
 * shared memory stays within the 48 KB a block gets without opting in).
 * Rows are numbered r = t * G + j for token t of the chunk and head j of
 * the KV head's group of G query heads, so a block's rows share one KV
 * head's K and V tiles.
 */
int att_tile_rows_per_warp(int head_dim);
int att_tile_rows(int head_dim);

/*
 * The key positions [*k0, *k1) that the block holding rows [r0, r1) (of
 * group size G, the chunk's first token at position pos0) reads, tile by
 * tile from *k0: from the first key its first token sees (the window's
 * start for a windowed layer, win > 0, else 0) to its last token's own
 * position.
 */
void att_tile_keys(int r0, int r1, int G, int pos0, int win, int *k0, int *k1);

/*
 * What a captured decode step (one CUDA graph: embedding to logits of one
 * token) bakes into its kernels' arguments: the cache's buffers and size
 * and the scratch buffers. Each is named by a generation number that the
 * backend bumps whenever the buffers behind it are reallocated (never a
 * pointer alone: a freed cache's address can come back for a new one).
 * The token and position are not in it: they are read from device memory
 * the step's copies fill before each replay.
 */
struct graph_key {
	uint64_t kv_gen;	/* the cache's buffers (0: no graph captured) */
	uint64_t scratch_gen;	/* activations, logits */
	int n_ctx;		/* attention splits (att_decode_splits) */
};

/* Whether a graph captured under *had replays correctly for *want. */
bool graph_key_same(const struct graph_key *had, const struct graph_key *want);

/*
 * Whether decode runs as a replayed graph: on unless KVCHAT_CUDA_GRAPH
 * (env, may be NULL) is "0", and never with KVCHAT_CUDA_SYNC=1 (sync:
 * synchronising after each kernel cannot happen inside a capture).
 */
bool graph_wanted(const char *env, bool sync);

#ifdef __cplusplus
}
#endif

#endif
