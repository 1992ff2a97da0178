/*
 * test_cuda_plan.c: the CUDA backend's launch shapes (cuda/launch_plan.c)
 * on the CPU, no nvcc or GPU needed: what the kernels' grids will be on a
 * device, checked against the rules their comments state; and the tiled
 * prefill attention's algorithm (its blocks, tiles, masks and online
 * softmax, run on the host by tests/fixtures/att_tile_ref.c) against
 * plain attention in double.
 */
#include "cuda/launch_plan.h"
#include "fixtures/att_tile_ref.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

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

/* forward_multi's attention splits: the rules att_multi_splits states */
static void
test_multi_splits(void)
{
	/* one row is one-token decode's rule at that many positions */
	test_cond(att_multi_splits(132, 4, 1, 32768) == att_decode_splits(132, 4, 32768), "one row");
	/* 8 sequences of Qwen2.5-7B on 132 SMs: 9 wanted, 32 / 8 = 4 allowed */
	test_cond(att_multi_splits(132, 4, 8, 4096) == 4, "8 rows: %d", att_multi_splits(132, 4, 8, 4096));
	test_cond(att_multi_splits(132, 4, 64, 4096) == 1, "64 rows: no partials");
	test_cond(att_multi_splits(132, 4, 8, 100) == 1, "short caches: one split");
	for (int sm = 1; sm <= 160; sm += 31)
		for (int kvh = 1; kvh <= 32; kvh *= 2)
			for (int rows = 1; rows <= 300; rows = rows * 3 + 1)
				for (int np = 1; np <= 1 << 16; np *= 8) {
					int z = att_multi_splits(sm, kvh, rows, np);

					test_cond(z >= 1 && (z == 1 || (z * rows <= ATT_MAX_SPLIT && z <= np / 64)),
					    "sm %d kvh %d rows %d n_pos %d: %d", sm, kvh, rows, np, z);
					/* and no more than two blocks per SM need */
					test_cond(z == 1 || (int64_t)z * kvh * rows < 2 * sm + (int64_t)kvh * rows,
					    "sm %d kvh %d rows %d: %d splits more than needed", sm, kvh, rows, z);
				}
}

/* The tiled attention's plan: head sizes, rows per block, and every row's keys inside its block's. */
static void
test_tile_plan(void)
{
	test_cond(!att_tile_ok(ATT_TILE_MIN - 1, 128) && att_tile_ok(ATT_TILE_MIN, 128), "from ATT_TILE_MIN tokens");
	test_cond(att_tile_ok(512, 64) && att_tile_ok(512, 96) && att_tile_ok(512, 256) && !att_tile_ok(512, 48) &&
	    !att_tile_ok(512, 80), "head sizes 64, 96, 128, 256 only");
	for (int hd = 64; hd <= 256; hd *= 2) {
		/* the kernel's static shared memory: a K/V tile (stride hd + 1) and the block's queries */
		size_t smem = (size_t)ATT_TILE_KEYS * (hd + 1) * 4 + (size_t)att_tile_rows(hd) * hd * 4;

		test_cond(smem <= 48 * 1024, "head %d: %zu bytes of shared memory", hd, smem);
		test_cond(att_tile_rows(hd) == ATT_TILE_WARPS * att_tile_rows_per_warp(hd), "head %d: rows", hd);
	}
	for (int G = 1; G <= 8; G++)
		for (int win = 0; win <= 40; win += 20)
			for (int pos0 = 0; pos0 <= 70; pos0 += 35) {
				int n = 45, R = att_tile_rows(128);

				for (int r0 = 0; r0 < n * G; r0 += R) {
					int r1 = r0 + R < n * G ? r0 + R : n * G, k0, k1, bad = 0;

					att_tile_keys(r0, r1, G, pos0, win, &k0, &k1);
					for (int r = r0; r < r1; r++) {
						int qpos = pos0 + r / G, first = win > 0 && qpos + 1 - win > 0 ? qpos + 1 - win : 0;

						bad += first < k0 || qpos >= k1;
					}
					/* and no key that no row needs at either end */
					bad += k0 != (win > 0 && pos0 + r0 / G + 1 - win > 0 ? pos0 + r0 / G + 1 - win : 0);
					bad += k1 != pos0 + (r1 - 1) / G + 1;
					test_cond(bad == 0, "G %d win %d pos0 %d rows %d..%d: keys %d..%d", G, win, pos0, r0, r1,
					    k0, k1);
				}
			}
}

static uint64_t seed = 0x2545F4914F6CDD1DULL;

/* uniform in [-1, 1) */
static float
frnd(void)
{
	return (float)(2 * test_urand(&seed) - 1);
}

/* largest |tiled - plain| over the outputs */
static double
tile_err(const struct att_ref_shape *s, const float *q, const float *k, const float *v, const double *ref,
    float *out, enum att_ref_fault fault)
{
	size_t no = (size_t)s->n * s->n_head * s->hd;
	double worst = 0;

	att_tile_ref(s, q, k, v, out, fault);
	for (size_t i = 0; i < no; i++)
		worst = fmax(worst, fabs(out[i] - ref[i]));
	return worst;
}

/*
 * The tiling against plain attention: GQA groups of 4 and 7 (Qwen2.5-7B),
 * one KV head per query head (phi3), gemma's window and softcap at head
 * 256, a delta after cached positions; chunks that end mid-block and
 * mid-tile. Bound: float against double over sums of at most a few
 * hundred terms of magnitude 1, 2e-5 (the device test's); each slip
 * att_tile_ref can make must miss it by far on some shape.
 */
static void
test_tile_ref(void)
{
	static const struct att_ref_shape shapes[] = {
		{ 40, 4, 1, 64, 0, 0.125f, 0, 0 },
		{ 37, 7, 1, 128, 100, 0.0884f, 0, 0 },
		{ 50, 8, 2, 256, 30, 0.0625f, 50.f, 16 },
		{ 33, 2, 2, 96, 5, 0.102f, 0, 0 },
		{ 16, 4, 2, 128, 60, 0.0884f, 0, 40 },
	};
	const double bound = 2e-5;
	double worst_slip1 = 0, worst_slip2 = 0;

	for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
		const struct att_ref_shape *s = &shapes[c];
		size_t nq = (size_t)s->n * s->n_head * s->hd, nk = (size_t)(s->pos0 + s->n) * s->n_kv * s->hd;
		float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nk * sizeof *v);
		float *out = malloc(nq * sizeof *out);
		double *ref = malloc(nq * sizeof *ref), e, slip1, slip2;

		/* queries 4x wider than keys: scores spread enough that the running max moves */
		for (size_t i = 0; i < nq; i++)
			q[i] = 4 * frnd();
		for (size_t i = 0; i < nk; i++) {
			k[i] = frnd();
			v[i] = frnd();
		}
		att_plain_ref(s, q, k, v, ref);
		e = tile_err(s, q, k, v, ref, out, ATT_REF_EXACT);
		slip1 = tile_err(s, q, k, v, ref, out, ATT_REF_NO_RESCALE);
		slip2 = tile_err(s, q, k, v, ref, out, ATT_REF_PEEK_AHEAD);
		printf("tiled attention n %d, %d/%d heads of %d, pos0 %d, win %d, cap %g: %.2e (bound %.0e); "
		    "no rescale %.2e, peeking ahead %.2e\n", s->n, s->n_head, s->n_kv, s->hd, s->pos0, s->win,
		    s->cap, e, bound, slip1, slip2);
		test_cond(e <= bound, "tiled attention, shape %zu: %g > %g", c, e, bound);
		worst_slip1 = fmax(worst_slip1, slip1);
		worst_slip2 = fmax(worst_slip2, slip2);
		free(q);
		free(k);
		free(v);
		free(out);
		free(ref);
	}
	/* each slip shows where it matters (a missing rescale only where a block's max rises past its first tile) */
	test_cond(worst_slip1 > 100 * bound, "a missing rescale is not caught: %g", worst_slip1);
	test_cond(worst_slip2 > 100 * bound, "a row seeing the next key is not caught: %g", worst_slip2);
}

int
main(void)
{
	test_multi_splits();
	test_tile_plan();
	test_tile_ref();
	test_multi();
	test_graph_key();
	test_warps_per_row();
	test_att_splits();
	return test_done();
}
