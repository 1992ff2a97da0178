/*
 * test_att_tile.c: the attention tile kernels of the CPU backend
 * (cpu_simd.c, cpu_att512.c) give every query the same bits whichever
 * kernel runs its tile and whatever else is in the tile: the AVX-512 tile
 * (prefill's many-query tiles) against the AVX2 tile, and each query alone
 * (decode) against the same query inside a tile of up to 64, over F16 and
 * F32 rows, head sizes 64/80/256, causal and windowed ranges, softcaps.
 * And the F16 cache rows' vector stores, bitwise q_f32_to_fp16.
 */
#include "backend/cpu_simd.h"
#include "quant/quant.h"
#include "test.h"

#ifdef HAVE_X86_SIMD
enum { NP = 300, MAXQ = 64, MAXHD = 256 };

static uint32_t rng = 12345;

static float
frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* s rows, the kernel buffer, outputs: one set per kernel run */
struct run {
	float *s, *buf, *o[MAXQ];
};

static void
run_init(struct run *r, int hd)
{
	int j;

	r->s = calloc((size_t)MAXQ * (NP + CPU_ATT_PB), sizeof(float));
	r->buf = calloc(cpu_att_buf_floats(hd), sizeof(float));
	for (j = 0; j < MAXQ; j++)
		r->o[j] = calloc((size_t)hd, sizeof(float));
}

static void
run_free(struct run *r)
{
	int j;

	free(r->s);
	free(r->buf);
	for (j = 0; j < MAXQ; j++)
		free(r->o[j]);
}

/* One tile shape: nq queries of head size hd, their ranges by kind. */
static void
tile_case(bool f16, int hd, int nq, int kind, float cap)
{
	static uint16_t kh[NP * MAXHD], vh[NP * MAXHD];
	static float kf[NP * MAXHD], vf[NP * MAXHD], qv[MAXQ][MAXHD];
	const float *q[MAXQ];
	int lo[MAXQ], hi[MAXQ], j, i, diff_kernel = 0, diff_alone = 0;
	struct run a, b, c;
	struct cpu_att_tile t;

	for (i = 0; i < NP * hd; i++) {
		kf[i] = frand() * 2, vf[i] = frand();
		kh[i] = q_f32_to_fp16(kf[i]), vh[i] = q_f32_to_fp16(vf[i]);
	}
	for (j = 0; j < nq; j++) {
		int tok = j / 4;	/* four heads per token, like gemma 3 270M */

		for (i = 0; i < hd; i++)
			qv[j][i] = frand();
		q[j] = qv[j];
		hi[j] = NP - 20 + tok;
		lo[j] = kind == 0 ? 0 : kind == 1 ? hi[j] - 37 : (int)(rng % 50) * (j % 3);
		if (kind == 3)	/* a first chunk: few positions, one empty range */
			hi[j] = tok + 1, lo[j] = j == 5 ? hi[j] : 0;
	}
	run_init(&a, hd), run_init(&b, hd), run_init(&c, hd);
	t = (struct cpu_att_tile){ f16 ? (const char *)kh : (const char *)kf,
		f16 ? (const char *)vh : (const char *)vf, (size_t)hd * (f16 ? 2 : 4), f16, hd, nq,
		q, a.o, lo, hi, 0.0625f, cap, a.s, NP + CPU_ATT_PB, a.buf };
	cpu_att_tile_avx(&t);
	t.o = b.o, t.s = b.s, t.buf = b.buf;
	test_cond(cpu_att_tile_avx512_fits(&t), "hd %d nq %d fits the AVX-512 tile", hd, nq);
	cpu_att_tile_avx512(&t);
	for (j = 0; j < nq; j++) {
		struct cpu_att_tile one = t;

		diff_kernel += memcmp(a.o[j], b.o[j], (size_t)hd * sizeof(float)) != 0;
		one.nq = 1, one.q = q + j, one.o = c.o + j, one.lo = lo + j, one.hi = hi + j;
		one.s = c.s, one.buf = c.buf;
		cpu_att_tile_avx(&one);
		diff_alone += memcmp(a.o[j], c.o[j], (size_t)hd * sizeof(float)) != 0;
	}
	test_cond(diff_kernel == 0, "%s hd %d nq %d ranges %d cap %g: AVX-512 tile bitwise the AVX2 "
	    "tile (%d queries differ)", f16 ? "f16" : "f32", hd, nq, kind, cap, diff_kernel);
	test_cond(diff_alone == 0, "%s hd %d nq %d ranges %d cap %g: each query alone bitwise "
	    "(%d differ)", f16 ? "f16" : "f32", hd, nq, kind, cap, diff_alone);
	run_free(&a), run_free(&b), run_free(&c);
}

/* The F16 cache stores: F16C's rounding against q_f32_to_fp16 over a sweep of float bit patterns. */
static void
f16_store(void)
{
	enum { N = 4096 };
	static float x[N];
	static uint16_t d[N];
	uint64_t u;
	int i, bad = 0;

	for (u = 0; u < 0x100000000ull; u += N * 257ull) {
		for (i = 0; i < N; i++) {
			uint32_t b = (uint32_t)(u + (uint64_t)i * 257u);

			memcpy(&x[i], &b, 4);
			if (isnan(x[i]))
				x[i] = 0.0f;	/* NaN payloads are not compared */
		}
		x[0] = 65520.0f, x[1] = 65519.996f, x[2] = 2.9802322e-8f, x[3] = 2.9802326e-8f;
		cpu_f32_to_f16_avx(d, x, N - 3);
		for (i = 0; i < N; i++)
			if (i < N - 3 && d[i] != q_f32_to_fp16(x[i]) && bad++ < 3)
				fprintf(stderr, "  %a: %04x, q_f32_to_fp16 %04x\n", (double)x[i], d[i],
				    q_f32_to_fp16(x[i]));
	}
	test_cond(bad == 0, "F16C stores the bits q_f32_to_fp16 gives (%d differ)", bad);
}
#endif

int
main(void)
{
#ifdef HAVE_X86_SIMD
	static const int hds[] = { 64, 80, 256 }, nqs[] = { 9, 16, 17, 31, 32, 33, 64 };
	int h, n, kind;

	if (!kvc_cpu_avx2() || !cpu_att_avx512_cpu())
		test_skip("this CPU has no AVX-512 (the AVX-512 tile is not used here)");
	for (h = 0; h < 3; h++)
		for (n = 0; n < 7; n++)
			for (kind = 0; kind < 4; kind++)
				tile_case((h + n + kind) % 2 == 0, hds[h], nqs[n], kind, 0.0f);
	tile_case(true, 256, 32, 0, 50.0f);
	tile_case(false, 64, 20, 1, 30.0f);
	f16_store();
	return test_done();
#else
	test_skip("not an x86-64 build");
#endif
}
