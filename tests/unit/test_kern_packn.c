/*
 * test_kern_packn.c: the packed kernels of IQ4_NL, MXFP4 and IQ4_XS
 * (kern_avx512_packn.c, kern_avx2_packn.c, quant_pack.c's layout) on raw
 * blocks built to reach what quantised rows rarely do: every nibble in
 * every row (so both extreme levels, IQ4_NL's -127 and 113, MXFP4's
 * +-12), d of either sign over a wide range, MXFP4 exponents 0 and 1
 * (subnormal scales) next to large ones, IQ4_XS's 6-bit scales from 0
 * to 63 (-32 .. 31), and tokens whose int8 levels are all +-127. For
 * every table with a packed kernel for the type, each (row, token) is
 * checked bitwise against quant_pack.c's documented
 * float order on the blocks' integers, and within float rounding of the
 * exact product (double); then for batch independence: 37 tokens (more
 * than a tile, a partial last tile) against one token at a time (decode's
 * kernel) over each group alone, and 35 tokens from token 2 over groups
 * [1, 3) with group 0's rows left untouched. The shape has a partial last
 * group (37 rows) and an odd number of blocks (IQ4_XS: of super-blocks).
 */
#include "gguf/gguf.h"
#include "kern/kern.h"
#include "quant/quant.h"
#include "quant/quant_iq.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint32_t
rnd(void)
{
	return (uint32_t)(test_urand(&rng) * 4294967296.0);
}

/* N_MAX values per row at most: IQ4_NL, MXFP4 33 blocks, IQ4_XS 5 super-blocks */
enum { N_MAX = 1280, N_OUT = 37, N_TOK = 37, NG = (N_OUT + 15) / 16 };

static uint16_t
half_of(float d)
{
	return q_f32_to_fp16(rnd() & 1 ? -d : d);
}

/*
 * One block of row r, block b (IQ4_XS: block b of the super-block at p,
 * the scales set by make_sb): nibbles random but for 0 and 15 at values
 * b % 32 and (b + 7) % 32.
 */
static void
make_block(enum gguf_dtype t, uint8_t *p, int r, int b)
{
	uint8_t *qs = t == GGML_TYPE_IQ4_XS ? p + 8 + 16 * (b % 8) : p + (t == GGML_TYPE_MXFP4 ? 1 : 2);

	if (t == GGML_TYPE_IQ4_XS) {
		if (b % 8 == 0) {	/* the super-block's d and 8 scales: 0 and 63 in block 0, 1 */
			uint16_t h = half_of(ldexpf(1.0f + (float)(rnd() % 1024) / 1024.0f, (int)(rnd() % 12) - 12));
			unsigned ls[8], sh = 0;
			for (int j = 0; j < 8; j++)
				ls[j] = j == 0 ? 0 : j == 1 ? 63 : rnd() % 64;
			p[0] = (uint8_t)h;
			p[1] = (uint8_t)(h >> 8);
			for (int j = 0; j < 8; j++) {
				sh |= (ls[j] >> 4) << (2 * j);
				if (j % 2 == 0)
					p[4 + j / 2] = (uint8_t)(ls[j] & 0xF);
				else
					p[4 + j / 2] |= (uint8_t)((ls[j] & 0xF) << 4);
			}
			p[2] = (uint8_t)sh;
			p[3] = (uint8_t)(sh >> 8);
		}
	} else if (t == GGML_TYPE_MXFP4) {
		/* rows 0 and 1: exponents 0 and 1 (subnormal scales); the rest 2^-20 .. 2^8 */
		p[0] = (uint8_t)(r < 2 ? r : 108 + (int)(rnd() % 29));
	} else {
		uint16_t h = half_of(ldexpf(1.0f + (float)(rnd() % 1024) / 1024.0f, (int)(rnd() % 16) - 12));
		p[0] = (uint8_t)h;
		p[1] = (uint8_t)(h >> 8);
	}
	for (int i = 0; i < 16; i++)
		qs[i] = (uint8_t)rnd();
	/* value v is the low nibble of qs[v] (v < 16) or the high one of qs[v - 16] */
	int v0 = b % 32, v1 = (b + 7) % 32;
	qs[v0 % 16] = (uint8_t)(v0 < 16 ? qs[v0 % 16] & 0xF0 : qs[v0 % 16] & 0x0F);
	qs[v1 % 16] = (uint8_t)(v1 < 16 ? qs[v1 % 16] | 0x0F : qs[v1 % 16] | 0xF0);
}

/*
 * Block b of a row: its scale (as quant_pack.c says the kernels form it)
 * and its 32 levels, from quant_iq.h's layouts.
 */
static float
block_ints(enum gguf_dtype t, const uint8_t *row, int b, int *lv)
{
	const int8_t *tab = t == GGML_TYPE_MXFP4 ? q_mxfp4_values : q_iq4nl_values;
	const uint8_t *p = row + (size_t)(t == GGML_TYPE_IQ4_XS ? 136 * (b / 8) :
	    (t == GGML_TYPE_MXFP4 ? 17 : 18) * b);
	const uint8_t *qs = t == GGML_TYPE_IQ4_XS ? p + 8 + 16 * (b % 8) : p + (t == GGML_TYPE_MXFP4 ? 1 : 2);
	float d = q_fp16_to_f32((uint16_t)(p[0] | p[1] << 8));

	for (int i = 0; i < 16; i++) {
		lv[i] = tab[qs[i] & 0xF];
		lv[i + 16] = tab[qs[i] >> 4];
	}
	if (t == GGML_TYPE_IQ4_XS) {
		int j = b % 8, ls = ((p[4 + j / 2] >> (4 * (j % 2))) & 0xF) | ((p[2 | (j / 4)] >> (2 * (j % 4))) & 3) << 4;
		return d * (float)(ls - 32);
	}
	return t == GGML_TYPE_MXFP4 ? q_mxfp4_scale(p[0]) : d;
}

static void
test_type(enum gguf_dtype t)
{
	static float x[N_TOK * N_MAX], y[N_TOK * N_OUT], y1[N_OUT], y2[N_TOK * N_OUT];
	static uint8_t W[N_OUT * N_MAX / 32 * 18], act[N_TOK * (N_MAX + 8 * N_MAX / 32)];
	const int N = t == GGML_TYPE_IQ4_XS ? 1280 : 1056, NB = N / 32;
	size_t rb = q_row_bytes(t, N), ab = q_act_bytes(N), pb = q_pack_bytes(t, N, N_OUT);
	const char *name = gguf_dtype_name(t);
	int n_tables = 0, lv[32];

	/*
	 * the copy is the file's size: Q4_0's nibble vectors, an fp16 d or an
	 * exponent byte per row and block (IQ4_XS: an int8 scale per row and
	 * block, an fp16 d per row and super-block: 32 bytes per 16 rows and
	 * super-block more than the file)
	 */
	test_cond(pb == (size_t)NG * 16 * rb + (t == GGML_TYPE_IQ4_XS ? (size_t)NG * (NB / 8) * 32 : 0),
	    "%s packed bytes %zu", name, pb);
	for (int r = 0; r < N_OUT; r++)
		for (int b = 0; b < NB; b++)
			make_block(t, W + r * rb + (t == GGML_TYPE_IQ4_XS ? (size_t)(136 * (b / 8)) : rb / NB * (size_t)b), r, b);
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
	uint8_t *P = aligned_alloc(64, (pb + 63) / 64 * 64);
	test_cond(P != NULL, "memory");
	memset(P, 0xA5, pb);	/* padding rows must be written, not inherited */
	q_pack(t, W, rb, N, N_OUT, P, 0, 1);
	q_pack(t, W, rb, N, N_OUT, P, 1, NG);
	for (int ki = 0; kern_list(ki) != NULL; ki++) {
		const struct kern *k = kern_list(ki);
		int bad = 0, bad_batch = 0;

		if (!kern_runs(k) || !kern_packs(k, t, N))
			continue;
		n_tables++;
		kern_matmul_packed(k, t, P, act, N_TOK, N, y, N_OUT, 0, NG);
		for (int r = 0; r < N_OUT; r++)
			for (int tok = 0; tok < N_TOK; tok++) {
				const float *d = (const float *)(act + (size_t)tok * ab);
				const int8_t *q = (const int8_t *)(d + 2 * NB);
				double exact = 0, mag = 0;
				float order = 0;
				for (int b = 0; b < NB; b++) {
					float s = block_ints(t, W + r * rb, b, lv);
					int32_t isum = 0;
					for (int i = 0; i < 32; i++)
						isum += lv[i] * q[32 * b + i];
					exact += (double)s * d[b] * isum;
					mag += fabs((double)s * d[b] * isum);
					order = fmaf(s * d[b], (float)isum, order);
				}
				float got = y[tok * N_OUT + r];
				if ((got != order || !(fabs(got - exact) <= 1e-5 * mag + 1e-30)) && bad++ < 4)
					fprintf(stderr, "%s table %s row %d tok %d: %.9g, in order %.9g, exact %.9g\n",
					    name, k->name, r, tok, got, order, exact);
			}
		test_cond(bad == 0, "%s %s: quant_pack.c's order, within rounding of the exact: %d bad", name,
		    k->name, bad);
		/* one token at a time (decode), each group alone and then all at once */
		for (int tok = 0; tok < N_TOK; tok++) {
			for (int g = 0; g < NG; g++)
				kern_matmul_packed(k, t, P, act + (size_t)tok * ab, 1, N, y1, N_OUT, g, g + 1);
			bad_batch += memcmp(y1, y + tok * N_OUT, sizeof y1) != 0;
			memset(y1, 0, sizeof y1);
			kern_matmul_packed(k, t, P, act + (size_t)tok * ab, 1, N, y1, N_OUT, 0, NG);
			bad_batch += memcmp(y1, y + tok * N_OUT, sizeof y1) != 0;
		}
		/* tokens 2 .. 36 over groups [1, 3): rows 16 .. 36 the batch's, rows 0 .. 15 untouched */
		for (int i = 0; i < N_TOK * N_OUT; i++)
			y2[i] = -1e30f;
		kern_matmul_packed(k, t, P, act + 2 * ab, N_TOK - 2, N, y2, N_OUT, 1, NG);
		for (int tok = 0; tok < N_TOK - 2; tok++)
			for (int o = 0; o < N_OUT; o++)
				bad_batch += o >= 16 ? y2[tok * N_OUT + o] != y[(tok + 2) * N_OUT + o] :
				    y2[tok * N_OUT + o] != -1e30f;
		test_cond(bad_batch == 0, "%s %s: batch independent: %d bad", name, k->name, bad_batch);
	}
	printf("%s: %d tables with a packed kernel\n", name, n_tables);
	free(P);
}

int
main(void)
{
	const struct kern *best = kern_best();

	printf("kernels: %s\n", best->name);
	if (!kern_packs(best, GGML_TYPE_IQ4_NL, 1056))
		test_skip("no packed kernel for IQ4_NL in this CPU's best table (%s)", best->name);
	test_type(GGML_TYPE_IQ4_NL);
	test_type(GGML_TYPE_MXFP4);
	test_type(GGML_TYPE_IQ4_XS);
	return test_done();
}
