/*
 * launch_plan.c: shape-only launch choices of the CUDA backend (see
 * launch_plan.h). No CUDA here: the module links it, and so does the CPU
 * test that checks it.
 */
#include "launch_plan.h"

#include <string.h>

unsigned
grid_blocks(int64_t total, int threads)
{
	return (unsigned)((total + threads - 1) / threads);
}

int
mv_warps_per_row(int64_t n_out, int n_sm)
{
	int64_t want = 2 * (int64_t)(n_sm > 0 ? n_sm : 1);
	int w = 1;

	/* a block is 8 warps, so 8 / w rows: blocks = n_out * w / 8 */
	while (w < 8 && (n_out * w + 7) / 8 < want)
		w *= 2;
	return w;
}

int
att_decode_splits(int n_sm, int n_head_kv, int n_ctx)
{
	int kvh = n_head_kv > 0 ? n_head_kv : 1;
	int z = (2 * (n_sm > 0 ? n_sm : 1) + kvh - 1) / kvh;
	int most = n_ctx / 64;

	if (z > ATT_MAX_SPLIT)
		z = ATT_MAX_SPLIT;
	if (z > most)
		z = most;
	return z < 1 ? 1 : z;
}

bool
graph_key_same(const struct graph_key *had, const struct graph_key *want)
{
	return had->kv_gen != 0 && had->kv_gen == want->kv_gen && had->scratch_gen == want->scratch_gen &&
	    had->n_ctx == want->n_ctx;
}

bool
graph_wanted(const char *env, bool sync)
{
	return !sync && !(env != NULL && strcmp(env, "0") == 0);
}

int
mv_multi_passes(int n)
{
	if (n < 2 || n > MV_MULTI_MAX)
		return 0;
	return (n + MV_MULTI_TOKENS - 1) / MV_MULTI_TOKENS;
}

int
att_multi_splits(int n_sm, int n_head_kv, int n_rows, int n_pos)
{
	int64_t blocks = (int64_t)(n_head_kv > 0 ? n_head_kv : 1) * (n_rows > 0 ? n_rows : 1);
	int64_t z = (2 * (int64_t)(n_sm > 0 ? n_sm : 1) + blocks - 1) / blocks;
	int most = n_rows > 0 ? ATT_MAX_SPLIT / n_rows : ATT_MAX_SPLIT;

	if (z > most)
		z = most;
	if (z > n_pos / 64)
		z = n_pos / 64;
	return z < 1 ? 1 : (int)z;
}

bool
att_tile_ok(int n, int head_dim)
{
	return n >= ATT_TILE_MIN && (head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256);
}

int
att_tile_rows_per_warp(int head_dim)
{
	return head_dim <= 128 ? 2 : 1;
}

int
att_tile_rows(int head_dim)
{
	return ATT_TILE_WARPS * att_tile_rows_per_warp(head_dim);
}

void
att_tile_keys(int r0, int r1, int G, int pos0, int win, int *k0, int *k1)
{
	int first = pos0 + r0 / G, last = pos0 + (r1 - 1) / G;

	*k0 = win > 0 && first + 1 - win > 0 ? first + 1 - win : 0;
	*k1 = last + 1;
}
