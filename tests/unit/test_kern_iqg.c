/*
 * test_kern_iqg.c: the int8-activation kernels of IQ2_XXS, IQ2_XS and
 * IQ3_XXS (kern_avx2_iqg.c, kern_avx512_iqg.c and the scalar reference) on
 * rows built to reach what quantised rows rarely do: every grid entry,
 * every one of the 128 sign indices (so both parities of the 8th sign),
 * every scale nibble including 15 (the largest, 2 s + 1 = 31), d of either
 * sign, and tokens whose int8 levels are all +-127 (the largest products a
 * SIMD kernel must not saturate). Each table's result for each (row, token)
 * is checked against the exact value of the blocks' integer form
 * (q_iq_unpack) in double, within float rounding, and bitwise against
 * itself whatever the batch: 35 tokens (more than the Q_IQ_TOKENS one pass
 * decodes a block for) against one at a time, over an odd range of rows.
 */
#include "gguf/gguf.h"
#include "kern/kern.h"
#include "quant/quant.h"
#include "quant/quant_iq.h"
#include "test.h"

#include <stdint.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t
rnd(void)
{
	return (uint32_t)(test_urand(&rng) * 4294967296.0);
}

static void
put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void
put32(uint8_t *p, uint32_t v)
{
	for (int k = 0; k < 4; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

/*
 * One block of type t: grid indices and sign indices counted up through
 * *gi and *si (so consecutive blocks walk every entry and sign index),
 * scales from *sc (every nibble in turn, each block's first group at 15),
 * d a half in [2^-8, 2^2) of either sign.
 */
static void
make_block(enum gguf_dtype t, uint8_t *p, unsigned *gi, unsigned *si, unsigned *sc)
{
	float d = ldexpf(1.0f + (float)(rnd() % 1024) / 1024.0f, (int)(rnd() % 10) - 8);

	put16(p, q_f32_to_fp16(rnd() & 1 ? -d : d));
	for (int b = 0; b < 8; b++) {
		unsigned s = b == 0 ? 15 : (*sc)++ & 15;
		uint32_t aux = (uint32_t)s << 28;
		if (t != GGML_TYPE_IQ2_XS)
			for (int l = 0; l < 4; l++)
				aux |= (uint32_t)((*si)++ & 127) << (7 * l);
		switch (t) {
		case GGML_TYPE_IQ2_XXS:
			for (int l = 0; l < 4; l++)
				p[2 + 8 * b + l] = (uint8_t)((*gi)++ & 255);
			put32(p + 2 + 8 * b + 4, aux);
			break;
		case GGML_TYPE_IQ3_XXS:
			for (int l = 0; l < 8; l++)
				p[2 + 8 * b + l] = (uint8_t)((*gi)++ & 255);
			put32(p + 66 + 4 * b, aux);
			break;
		default:	/* IQ2_XS: its own scale nibbles for each 16 */
			for (int l = 0; l < 4; l++) {
				unsigned idx = (*gi)++ & 511, sg = (*si)++ & 127;
				put16(p + 2 + 2 * (4 * b + l), idx | sg << 9);
			}
			p[66 + b] = (uint8_t)(s | ((*sc)++ & 15) << 4);
			break;
		}
	}
}

/* sum_i w_i x^_i in double from the integer forms (exact up to double rounding), and sum |w_i x^_i| */
static double
exact_dot(enum gguf_dtype t, const uint8_t *row, const uint8_t *act, int64_t n, double *mag)
{
	const float *d = (const float *)act;
	const int8_t *q = (const int8_t *)(d + 2 * (n / 32));
	size_t bb = q_iq_block_bytes(t);
	struct q_iq_int b;
	double s = 0;

	*mag = 0;
	for (int64_t k = 0; k < n / QK_K; k++) {
		q_iq_unpack(t, row + (size_t)k * bb, &b);
		for (int i = 0; i < QK_K; i++) {
			int64_t e = k * QK_K + i;
			double v = (double)b.s[i / 16] * b.q[i] * (double)d[e / 32] * q[e];
			s += v;
			*mag += fabs(v);
		}
	}
	return s;
}

static void
test_type(enum gguf_dtype t)
{
	enum { N = 2048, N_OUT = 5, N_TOK = 35 };
	static float x[N_TOK * N], yb[N_TOK * N_OUT], y1[N_OUT], y3[3 * N_OUT];
	static uint8_t W[N_OUT * N], act[N_TOK * (N + 8 * N / 32)];
	size_t rb = q_row_bytes(t, N), ab = q_act_bytes(N);
	unsigned gi = 0, si = 0, sc = 0;
	int bad = 0, bad_batch = 0, n_tables = 0;
	const char *name = gguf_dtype_name(t);

	for (int r = 0; r < N_OUT; r++)
		for (int k = 0; k < N / QK_K; k++)
			make_block(t, W + r * rb + (size_t)k * q_iq_block_bytes(t), &gi, &si, &sc);
	test_cond(gi >= (t == GGML_TYPE_IQ2_XS ? 512u : 256u) && si >= 128, "%s rows reach every index", name);
	/* tokens 0-2: every level +-127 (random signs; all +; alternating blocks), the rest random */
	for (int tok = 0; tok < N_TOK; tok++)
		for (int i = 0; i < N; i++) {
			float *v = x + (size_t)tok * N + i;
			if (tok == 0)
				*v = rnd() & 1 ? 3.0f : -3.0f;
			else if (tok == 1)
				*v = 0.5f;
			else if (tok == 2)
				*v = (i / 32) % 2 ? -100.0f : 0.01f;
			else
				*v = (float)(test_urand(&rng) * 2 - 1) * (float)(1 + (i / 32) % 7);
		}
	for (int tok = 0; tok < N_TOK; tok++)
		q_act_prepare(x + (size_t)tok * N, N, act + (size_t)tok * ab);
	for (int ki = 0; kern_list(ki) != NULL; ki++) {
		const struct kern *k = kern_list(ki);
		if (!kern_runs(k))
			continue;
		n_tables++;
		kern_matmul_act(k, t, W, rb, act, N_TOK, N, yb, N_OUT, 0, N_OUT);
		for (int r = 0; r < N_OUT; r++)
			for (int tok = 0; tok < N_TOK; tok++) {
				double mag, want = exact_dot(t, W + r * rb, act + (size_t)tok * ab, N, &mag);
				float got = yb[tok * N_OUT + r];
				/* float rounding of the scaled group sums; a wrong sign or scale of one group is far more */
				if (!(fabs(got - want) <= 1e-5 * mag) && bad++ < 4)
					fprintf(stderr, "%s table %s row %d tok %d: %.9g, exact %.9g (|w x| sum %g)\n",
					    name, k->name, r, tok, got, want, mag);
			}
		/* one token at a time over rows [1, 4): bitwise the batch's, the rows outside untouched */
		for (int tok = 0; tok < N_TOK; tok++) {
			for (int o = 0; o < N_OUT; o++)
				y1[o] = -1e30f;
			kern_matmul_act(k, t, W, rb, act + (size_t)tok * ab, 1, N, y1, N_OUT, 1, 4);
			for (int o = 0; o < N_OUT; o++)
				bad_batch += o >= 1 && o < 4 ? y1[o] != yb[tok * N_OUT + o] : y1[o] != -1e30f;
		}
		/* tokens 30-32 over rows [2, 5): the batch's first pass split across two calls' */
		kern_matmul_act(k, t, W, rb, act + 30 * ab, 3, N, y3, N_OUT, 2, N_OUT);
		for (int tok = 0; tok < 3; tok++)
			for (int o = 2; o < N_OUT; o++)
				bad_batch += y3[tok * N_OUT + o] != yb[(30 + tok) * N_OUT + o];
	}
	test_cond(n_tables >= 1, "%s: some table runs", name);
	test_cond(bad == 0, "%s: every table within float rounding of the exact product: %d bad", name, bad);
	test_cond(bad_batch == 0, "%s: every table batch independent: %d bad", name, bad_batch);
}

int
main(void)
{
	printf("kernels: %s\n", kern_best()->name);
	test_type(GGML_TYPE_IQ2_XXS);
	test_type(GGML_TYPE_IQ2_XS);
	test_type(GGML_TYPE_IQ3_XXS);
	return test_done();
}
