/*
 * test_cuda_plan.c: the CUDA backend's launch shapes (cuda/launch_plan.c)
 * on the CPU, no nvcc or GPU needed: what the kernels' grids will be on a
 * device, checked against the rules their comments state.
 */
#include "cuda/launch_plan.h"
#include "test.h"

/* blocks of 8 warps a matrix-vector launch of n_out rows gets with w warps per row */
static int64_t
mv_blocks(int64_t n_out, int w)
{
	return (n_out * w + 7) / 8;
}

static void
test_warps_per_row(void)
{
	static const int64_t outs[] = { 1, 64, 256, 512, 896, 1024, 3584, 4096, 14336, 18944, 152064 };
	static const int sms[] = { 1, 46, 108, 132, 144 };

	/* H100/H200 (132 SMs): Qwen2.5-7B's K/V (512 rows) split 8 ways, its FFN a warp per row */
	test_cond(mv_warps_per_row(512, 132) == 8, "512 rows on 132 SMs: %d", mv_warps_per_row(512, 132));
	test_cond(mv_warps_per_row(18944, 132) == 1, "18944 rows: %d", mv_warps_per_row(18944, 132));
	test_cond(mv_warps_per_row(896, 132) == 4, "896 rows: %d", mv_warps_per_row(896, 132));
	for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
		for (size_t j = 0; j < sizeof sms / sizeof sms[0]; j++) {
			int w = mv_warps_per_row(outs[i], sms[j]);

			test_cond(w == 1 || w == 2 || w == 4 || w == 8, "%lld rows, %d SMs: %d warps per row",
			    (long long)outs[i], sms[j], w);
			/* enough blocks, or already the most splitting a block allows */
			test_cond(w == 8 || mv_blocks(outs[i], w) >= 2 * sms[j], "%lld rows, %d SMs: %lld blocks",
			    (long long)outs[i], sms[j], (long long)mv_blocks(outs[i], w));
			/* and no more splitting than that needs */
			test_cond(w == 1 || mv_blocks(outs[i], w / 2) < 2 * sms[j], "%lld rows, %d SMs: %d is "
			    "more than needed", (long long)outs[i], sms[j], w);
		}
	test_cond(mv_warps_per_row(512, 0) >= 1, "no SM count");
}

static void
test_att_splits(void)
{
	/* H100 (132 SMs), Qwen2.5-7B (4 KV heads), 32k context: the most splits */
	test_cond(att_decode_splits(132, 4, 32768) == ATT_MAX_SPLIT, "7B: %d", att_decode_splits(132, 4, 32768));
	/* a 70B-like 8 KV heads on 132 SMs: 33 wanted, capped */
	test_cond(att_decode_splits(132, 8, 8192) == 32, "8 KV heads: %d", att_decode_splits(132, 8, 8192));
	/* 64 KV heads fill 132 SMs with 5 splits (320 blocks) */
	test_cond(att_decode_splits(132, 64, 8192) == 5, "64 KV heads: %d", att_decode_splits(132, 64, 8192));
	/* a 256-position context: at most 4 (one per 64 positions) */
	test_cond(att_decode_splits(132, 2, 256) == 4, "n_ctx 256: %d", att_decode_splits(132, 2, 256));
	test_cond(att_decode_splits(132, 2, 16) == 1, "n_ctx 16: %d", att_decode_splits(132, 2, 16));
	for (int sm = 1; sm <= 160; sm += 13)
		for (int kvh = 1; kvh <= 64; kvh *= 2)
			for (int ctx = 1; ctx <= 1 << 17; ctx *= 4) {
				int z = att_decode_splits(sm, kvh, ctx);

				test_cond(z >= 1 && z <= ATT_MAX_SPLIT && (z == 1 || z <= ctx / 64),
				    "sm %d kvh %d ctx %d: %d", sm, kvh, ctx, z);
				/* the grid reaches two blocks per SM unless a cap stopped it */
				test_cond(z == ATT_MAX_SPLIT || z == ctx / 64 || z * kvh >= 2 * sm || z == 1,
				    "sm %d kvh %d ctx %d: %d splits leave SMs idle", sm, kvh, ctx, z);
			}
}

static void
test_graph_key(void)
{
	struct graph_key none = { 0, 0, 0 }, a = { 3, 1, 4096 }, b = a;

	test_cond(!graph_key_same(&none, &none), "nothing captured yet replays nothing");
	test_cond(graph_key_same(&a, &b), "the same cache and scratch replay");
	b.kv_gen = 4;
	test_cond(!graph_key_same(&a, &b), "another cache (or this one grown) recaptures");
	b = a;
	b.scratch_gen = 2;
	test_cond(!graph_key_same(&a, &b), "reallocated scratch recaptures");
	b = a;
	b.n_ctx = 8192;
	test_cond(!graph_key_same(&a, &b), "another context size (other splits) recaptures");
	test_cond(graph_wanted(NULL, false) && graph_wanted("1", false), "graphs on by default");
	test_cond(!graph_wanted("0", false), "KVCHAT_CUDA_GRAPH=0 turns them off");
	test_cond(!graph_wanted(NULL, true), "KVCHAT_CUDA_SYNC=1 turns them off");
}

static void
test_multi(void)
{
	test_cond(mv_multi_passes(1) == 0, "one token: the one-token kernels");
	test_cond(mv_multi_passes(2) == 1 && mv_multi_passes(8) == 1, "up to 8 tokens: one pass");
	test_cond(mv_multi_passes(20) == 3, "a 20-token delta: 3 passes, not dequantisation: %d",
	    mv_multi_passes(20));
	test_cond(mv_multi_passes(MV_MULTI_MAX) == MV_MULTI_MAX / MV_MULTI_TOKENS, "the most");
	test_cond(mv_multi_passes(MV_MULTI_MAX + 1) == 0 && mv_multi_passes(2048) == 0, "long prompts: GEMM");
}

int
main(void)
{
	test_multi();
	test_graph_key();
	test_warps_per_row();
	test_att_splits();
	return test_done();
}
