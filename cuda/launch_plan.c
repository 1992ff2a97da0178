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
