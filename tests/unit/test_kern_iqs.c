/*
 * test_kern_iqs.c: the int8-activation kernels of IQ3_S, IQ2_S, IQ1_S and
 * IQ1_M (src/kern/kern_avx2_iqs.c, kern_avx512_iqs.c) on blocks the
 * fixture quantiser never writes: rows whose grid indices run through every
 * entry of the type's grid (the high bits of the index included), the other
 * bytes random (every sign pattern, scale field and IQ1 shift bit), and a
 * block of all 0xFF bytes (the last grid entry, every value negative, the
 * largest scales), against the portable integer product (q_iq_dot_act,
 * which decodes through quant_iq.c), with activations of random size and
 * at the int8 extremes; in every kernel table this CPU runs, one token at
 * a time and 37 together (more than a block is decoded for at once,
 * Q_IQ_TOKENS), over an odd number of rows and ranges of them: each
 * (row, token) within float rounding of the portable product and bitwise
 * the same however it was batched.
 */
#include "gguf/gguf.h"
#include "kern/kern.h"
#include "quant/quant.h"
#include "quant/quant_iq.h"
#include "../fixtures/ref_dequant.h"
#include "test.h"

#include <stdint.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static float
frand(void)	/* uniform in [-1, 1) */
{
	return (float)(rnd() & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}

static const struct {
	enum gguf_dtype t;
	int entries;	/* grid indices per block */
	int grid;	/* grid entries */
} types[] = {
	{ GGML_TYPE_IQ3_S, 64, 512 }, { GGML_TYPE_IQ2_S, 32, 1024 },
	{ GGML_TYPE_IQ1_S, 32, 2048 }, { GGML_TYPE_IQ1_M, 32, 2048 },
};
#define N_TYPES (sizeof types / sizeof types[0])

/* Index entry e of a block of type t (the rest of the block's bits kept). */
static void
set_index(enum gguf_dtype t, uint8_t *p, int e, int i)
{
	switch (t) {
	case GGML_TYPE_IQ3_S:	/* qs[8b + k], bit k of qh[b] */
		p[2 + e] = (uint8_t)i;
		p[66 + e / 8] = (uint8_t)((p[66 + e / 8] & ~(1 << (e % 8))) | (i >> 8) << (e % 8));
		break;
	case GGML_TYPE_IQ2_S:	/* qs[4b + l], bits 2l, 2l + 1 of qh[b] */
		p[2 + e] = (uint8_t)i;
		p[66 + e / 4] = (uint8_t)((p[66 + e / 4] & ~(3 << 2 * (e % 4))) | (i >> 8) << 2 * (e % 4));
		break;
	case GGML_TYPE_IQ1_S: {	/* qs[4b + l], bits 3l .. 3l + 2 of the u16 qh[b] */
		unsigned h = p[34 + 2 * (e / 4)] | p[35 + 2 * (e / 4)] << 8;
		h = (h & ~(7u << 3 * (e % 4))) | (unsigned)(i >> 8) << 3 * (e % 4);
		p[2 + e] = (uint8_t)i;
		p[34 + 2 * (e / 4)] = (uint8_t)h;
		p[35 + 2 * (e / 4)] = (uint8_t)(h >> 8);
		break;
	}
	default: {		/* IQ1_M: qs[4b + l], low 3 bits of nibble l % 2 of qh[2b + l / 2] */
		int sh = 4 * (e % 2);
		p[e] = (uint8_t)i;
		p[32 + e / 2] = (uint8_t)((p[32 + e / 2] & ~(7 << sh)) | (i >> 8) << sh);
		break;
	}
	}
}

/* The block's fp16 d set to a random normal half in [2^-6, 4) of either sign. */
static void
set_d(enum gguf_dtype t, uint8_t *p)
{
	uint16_t h = q_f32_to_fp16(ldexpf(1 + (float)(rnd() % 1024) / 1024, (int)(rnd() % 8) - 6));

	if (rnd() & 1)
		h |= 0x8000;
	if (t == GGML_TYPE_IQ1_M) {
		/* the top nibbles of the four u16 scale words (bytes 49, 51, 53, 55) */
		for (int k = 0; k < 4; k++)
			p[49 + 2 * k] = (uint8_t)((p[49 + 2 * k] & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
		return;
	}
	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

enum { NB = 4, N = NB * QK_K, N_TOK = 37, MAX_ROWS = 19 };

/*
 * Rows of type t: block j's entry e takes grid index (j * entries + e) mod
 * grid, so every entry appears; one more row of which block 0 is all 0xFF
 * bytes and block 1 all zeros (but for d). Returns the row count (odd).
 */
static int
fill_rows(size_t ti, uint8_t *W, size_t rb)
{
	enum gguf_dtype t = types[ti].t;
	size_t bb = q_iq_block_bytes(t);
	int blocks = (types[ti].grid + types[ti].entries - 1) / types[ti].entries;
	int n_rows = (blocks + NB - 1) / NB + 1;

	if (n_rows < 5)
		n_rows = 5;
	if (n_rows % 2 == 0)
		n_rows++;
	for (int r = 0; r < n_rows; r++)
		for (int j = 0; j < NB; j++) {
			uint8_t *p = W + (size_t)r * rb + (size_t)j * bb;
			int blk = r * NB + j;
			for (size_t k = 0; k < bb; k++)
				p[k] = (uint8_t)rnd();
			if (r == n_rows - 1 && j < 2)
				memset(p, j == 0 ? 0xFF : 0, bb);
			else
				for (int e = 0; e < types[ti].entries; e++)
					set_index(t, p, e, (blk * types[ti].entries + e) % types[ti].grid);
			set_d(t, p);
		}
	return n_rows;
}

static void
test_type(size_t ti, const uint8_t *act, size_t ab, const float *x)
{
	static uint8_t W[MAX_ROWS * NB * 110];
	static float yb[N_TOK * MAX_ROWS], y1[MAX_ROWS];
	static double r[N];
	enum gguf_dtype t = types[ti].t;
	size_t rb = q_row_bytes(t, N);
	int n_rows = fill_rows(ti, W, rb), bad = 0, bad_batch = 0, tables = 0;
	const int ranges[][2] = { { 0, n_rows }, { 1, n_rows - 2 }, { n_rows - 1, n_rows }, { 2, 5 } };

	test_cond(n_rows <= MAX_ROWS && rb * (size_t)n_rows <= sizeof W, "%s rows fit", gguf_dtype_name(t));
	for (int ki = 0; kern_list(ki) != NULL; ki++) {
		const struct kern *k = kern_list(ki);
		if (!kern_runs(k))
			continue;
		tables++;
		kern_matmul_act(k, t, W, rb, act, N_TOK, N, yb, n_rows, 0, n_rows);
		for (int row = 0; row < n_rows; row++) {
			ref_dequant_row(t, W + (size_t)row * rb, r, N);
			for (int tok = 0; tok < N_TOK; tok++) {
				const float *d = (const float *)(act + (size_t)tok * ab);
				double mag = 0;
				for (int i = 0; i < N; i++)
					mag += fabs(r[i]) * (fabs(x[(size_t)tok * N + i]) + d[i / 32]);
				float want = q_iq_dot_act(t, W + (size_t)row * rb, act + (size_t)tok * ab, N);
				float got = yb[tok * n_rows + row];
				if (!(fabs(got - want) <= 1e-5 * mag) && bad++ < 3)
					fprintf(stderr, "%s table %s row %d tok %d: %.9g, portable %.9g (mag %g)\n",
					    gguf_dtype_name(t), k->name, row, tok, got, want, mag);
			}
		}
		/* one token at a time over ranges of rows: bitwise the batch's, other rows untouched */
		for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++)
			for (int tok = 0; tok < N_TOK; tok++) {
				for (int o = 0; o < n_rows; o++)
					y1[o] = -1e30f;
				kern_matmul_act(k, t, W, rb, act + (size_t)tok * ab, 1, N, y1, n_rows,
				    ranges[ri][0], ranges[ri][1]);
				for (int o = 0; o < n_rows; o++) {
					bool in = o >= ranges[ri][0] && o < ranges[ri][1];
					bad_batch += in ? y1[o] != yb[tok * n_rows + o] : y1[o] != -1e30f;
				}
			}
	}
	test_cond(tables >= 1, "%s: some table ran", gguf_dtype_name(t));
	test_cond(bad == 0, "%s every grid entry, every table within rounding of the portable product: %d bad",
	    gguf_dtype_name(t), bad);
	test_cond(bad_batch == 0, "%s every table batch independent: %d bad", gguf_dtype_name(t), bad_batch);
}

int
main(void)
{
	static float x[N_TOK * N];
	static uint8_t act[N_TOK * (N + 8 * N / 32)];
	size_t ab = q_act_bytes(N);

	printf("kernels: %s\n", kern_best()->name);
	test_cond(ab * N_TOK <= sizeof act, "activations fit");
	/* blocks of 32 of random size; token 0 all +-1 (every level +-127), token 1 all zeros */
	for (int tok = 0; tok < N_TOK; tok++)
		for (int i = 0; i < N; i++) {
			float v = frand() * ldexpf(1, (int)((unsigned)(i / 32 + 3 * tok) % 7) - 3);
			x[(size_t)tok * N + i] = tok == 0 ? (rnd() & 1 ? 1.0f : -1.0f) : tok == 1 ? 0.0f : v;
		}
	for (int tok = 0; tok < N_TOK; tok++)
		q_act_prepare(x + (size_t)tok * N, N, act + (size_t)tok * ab);
	for (size_t ti = 0; ti < N_TYPES; ti++)
		test_type(ti, act, ab, x);
	return test_done();
}
