/*
 * test_att_tile.c: the attention tile kernels of every kernel table this
 * CPU runs (src/kern, kern_att_tile) give each query the same bits whatever
 * else is in its tile: each query alone (decode) against the same query
 * inside a tile of up to 64, over F16 and F32 rows, head sizes 64/80/256,
 * causal and windowed ranges, softcaps, gpt-oss's sinks (the scalar table
 * also against a float64 softmax with the sink as one more score, no value
 * row); the avx512 table's tile (prefill's
 * many-query tiles) bitwise the avx2 table's; and every table within
 * float rounding of the scalar one. And the F16 cache rows' stores of each
 * table, bitwise q_f32_to_fp16.
 */
#include "kern/kern.h"
#include "test.h"

#include <math.h>

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

	r->s = calloc((size_t)MAXQ * (NP + KERN_ATT_PB), sizeof(float));
	r->buf = calloc(kern_att_buf_floats(hd), sizeof(float));
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

/* Each query's outputs from table k's tile of all nq, and alone: 0 or the queries that differ. */
static int
tile_run(const struct kern *k, const struct kern_att_tile *t, struct run *all, struct run *one_r)
{
	struct kern_att_tile tt = *t;
	int j, diff = 0;

	tt.o = all->o, tt.s = all->s, tt.buf = all->buf;
	k->att_tile(&tt);
	for (j = 0; j < t->nq; j++) {
		struct kern_att_tile one = tt;

		one.nq = 1, one.q = t->q + j, one.o = one_r->o + j, one.lo = t->lo + j, one.hi = t->hi + j;
		one.s = one_r->s, one.buf = one_r->buf, one.sink = t->sink != NULL ? t->sink + j : NULL;
		k->att_tile(&one);
		diff += memcmp(all->o[j], one_r->o[j], (size_t)t->hd * sizeof(float)) != 0;
	}
	return diff;
}

/*
 * Query j's output in float64 from the rows as stored: softmax over its
 * scores and, where sink is not NULL, sink[j] as one more score with no
 * value row. Returns how many of its hd outputs o is not within tol of.
 */
static int
ref_query(const struct kern_att_tile *t, int j, const float *o, double tol)
{
	static double s[NP], acc[MAXHD];
	double mx = t->sink != NULL ? t->sink[j] : -INFINITY, sum = 0;
	int p, i, bad = 0;

	for (p = t->lo[j]; p < t->hi[j]; p++) {
		double d = 0;

		for (i = 0; i < t->hd; i++)
			d += (double)t->q[j][i] * (t->f16 ? q_fp16_to_f32(((const uint16_t *)(t->k + p * t->rb))[i]) :
			    ((const float *)(t->k + p * t->rb))[i]);
		s[p] = t->cap > 0 ? t->cap * tanh(d * t->scale / t->cap) : d * t->scale;
		mx = s[p] > mx ? s[p] : mx;
	}
	for (p = t->lo[j]; p < t->hi[j]; p++)
		sum += exp(s[p] - mx);
	if (t->sink != NULL)
		sum += exp(t->sink[j] - mx);
	for (i = 0; i < t->hd; i++)
		acc[i] = 0;
	for (p = t->lo[j]; p < t->hi[j]; p++)
		for (i = 0; i < t->hd; i++)
			acc[i] += exp(s[p] - mx) / sum * (t->f16 ? q_fp16_to_f32(((const uint16_t *)(t->v +
			    p * t->rb))[i]) : ((const float *)(t->v + p * t->rb))[i]);
	for (i = 0; i < t->hd; i++)
		bad += !(fabs(o[i] - acc[i]) <= tol * (1 + fabs(acc[i])));
	return bad;
}

/* One tile shape: nq queries of head size hd, their ranges by kind, in every table; sinks or not. */
static void
tile_case(bool f16, int hd, int nq, int kind, float cap, bool sinks)
{
	static float sink[MAXQ];
	static uint16_t kh[NP * MAXHD], vh[NP * MAXHD];
	static float kf[NP * MAXHD], vf[NP * MAXHD], qv[MAXQ][MAXHD];
	const float *q[MAXQ];
	int lo[MAXQ], hi[MAXQ], j, i, ti, diff_ref = 0, diff_512 = 0;
	struct run ref, avx2, out, one;
	struct kern_att_tile t;
	bool have_avx2 = false;
	double worst = 0;

	for (i = 0; i < NP * hd; i++) {
		kf[i] = frand() * 2, vf[i] = frand();
		kh[i] = q_f32_to_fp16(kf[i]), vh[i] = q_f32_to_fp16(vf[i]);
	}
	for (j = 0; j < nq; j++) {
		int tok = j / 4;	/* four heads per token, like gemma 3 270M */

		for (i = 0; i < hd; i++)
			qv[j][i] = frand();
		q[j] = qv[j];
		/* around the scores' spread, and above every score for some queries */
		sink[j] = j % 7 == 3 ? 6.0f : frand() * 2 + 1;
		hi[j] = NP - 20 + tok;
		lo[j] = kind == 0 ? 0 : kind == 1 ? hi[j] - 37 : (int)(rng % 50) * (j % 3);
		if (kind == 3)	/* a first chunk: few positions, one empty range */
			hi[j] = tok + 1, lo[j] = j == 5 ? hi[j] : 0;
	}
	run_init(&ref, hd), run_init(&avx2, hd), run_init(&out, hd), run_init(&one, hd);
	t = (struct kern_att_tile){ f16 ? (const char *)kh : (const char *)kf,
		f16 ? (const char *)vh : (const char *)vf, (size_t)hd * (f16 ? 2 : 4), f16, hd, nq,
		q, NULL, lo, hi, 0.0625f, cap, NULL, NP + KERN_ATT_PB, NULL, sinks ? sink : NULL };
	for (ti = 0; kern_list(ti) != NULL; ti++) {
		const struct kern *k = kern_list(ti);
		bool is_scalar = strcmp(k->name, "scalar") == 0, is_avx2 = strcmp(k->name, "avx2") == 0;
		int diff_alone;

		if (!kern_runs(k))
			continue;
		diff_alone = tile_run(k, &t, is_scalar ? &ref : is_avx2 ? &avx2 : &out, &one);
		test_cond(diff_alone == 0, "%s %s hd %d nq %d ranges %d cap %g%s: each query alone "
		    "bitwise (%d differ)", k->name, f16 ? "f16" : "f32", hd, nq, kind, cap,
		    sinks ? " sinks" : "", diff_alone);
		if (is_scalar) {
			int bad = 0;

			for (j = 0; j < nq; j++)
				bad += ref_query(&t, j, ref.o[j], 1e-5);
			test_cond(bad == 0, "scalar %s hd %d nq %d ranges %d cap %g%s: float64 softmax's "
			    "outputs (%d outside 1e-5)", f16 ? "f16" : "f32", hd, nq, kind, cap,
			    sinks ? " sinks" : "", bad);
		}
		have_avx2 |= is_avx2;
		for (j = 0; j < nq && !is_scalar; j++) {
			const float *o = is_avx2 ? avx2.o[j] : out.o[j];

			for (i = 0; i < hd; i++) {
				double e = fabs((double)o[i] - ref.o[j][i]);

				worst = e > worst ? e : worst;
				diff_ref += !(e <= 1e-5 * (1 + fabs(ref.o[j][i])));
			}
			/* AVX-512's tile: the AVX2 tile's sums, in the same order */
			if (strcmp(k->name, "avx512") == 0 && have_avx2)
				diff_512 += memcmp(out.o[j], avx2.o[j], (size_t)hd * sizeof(float)) != 0;
		}
	}
	test_cond(diff_ref == 0, "%s hd %d nq %d ranges %d cap %g%s: the SIMD tables within 1e-5 of "
	    "scalar (%d outside, worst %.3g)", f16 ? "f16" : "f32", hd, nq, kind, cap, sinks ? " sinks" : "",
	    diff_ref, worst);
	test_cond(diff_512 == 0, "%s hd %d nq %d ranges %d cap %g%s: avx512 tile bitwise avx2's "
	    "(%d queries differ)", f16 ? "f16" : "f32", hd, nq, kind, cap, sinks ? " sinks" : "", diff_512);
	run_free(&ref), run_free(&avx2), run_free(&out), run_free(&one);
}

/* Table k's F16 cache stores against q_f32_to_fp16 over a sweep of float bit patterns. */
static void
f16_store(const struct kern *k)
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
		k->f32_to_f16(d, x, N - 3);
		for (i = 0; i < N; i++)
			if (i < N - 3 && d[i] != q_f32_to_fp16(x[i]) && bad++ < 3)
				fprintf(stderr, "  %a: %04x, q_f32_to_fp16 %04x\n", (double)x[i], d[i],
				    q_f32_to_fp16(x[i]));
	}
	test_cond(bad == 0, "%s stores the bits q_f32_to_fp16 gives (%d differ)", k->name, bad);
}

int
main(void)
{
	static const int hds[] = { 64, 80, 256 }, nqs[] = { 9, 16, 17, 31, 32, 33, 64 };
	int h, n, kind;

	for (h = 0; h < 3; h++)
		for (n = 0; n < 7; n++)
			for (kind = 0; kind < 4; kind++)
				tile_case((h + n + kind) % 2 == 0, hds[h], nqs[n], kind, 0.0f, false);
	tile_case(true, 256, 32, 0, 50.0f, false);
	tile_case(false, 64, 20, 1, 30.0f, false);
	/* gpt-oss: head size 64, 64 heads of 8 per KV head; full and 128-wide windows */
	for (kind = 0; kind < 4; kind++) {
		tile_case(kind % 2 == 0, 64, 17, kind, 0.0f, true);
		tile_case(kind % 2 == 1, 64, 64, kind, 0.0f, true);
	}
	for (int i = 0; kern_list(i) != NULL; i++)
		if (kern_runs(kern_list(i)))
			f16_store(kern_list(i));
	return test_done();
}
