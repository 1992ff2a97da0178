/*
 * test_quant_iq.c: the Q2_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ1_S and IQ1_M formats: the lattice tables against their
 * definition, dequantisation bitwise against the float64 reference written
 * from the format (tests/fixtures/ref_dequant.c) on random blocks, the
 * fixture quantisers, the float dot and the int8-activation kernels within
 * their bounds, and every kernel's (row, token) result bitwise the same
 * whatever the batch (batch independence), in every kernel table
 * (src/kern) this CPU runs.
 */
#include "gguf/gguf.h"
#include "kern/kern.h"
#include "quant/quant.h"
#include "quant/quant_iq.h"
#include "quant/quant_ref.h"
#include "../fixtures/ref_dequant.h"
#include "test.h"

#include <stdint.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;

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

static const enum gguf_dtype types[] = {
	GGML_TYPE_Q2_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4, GGML_TYPE_IQ3_XXS,
	GGML_TYPE_IQ3_S, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ1_S,
	GGML_TYPE_IQ1_M,
};
#define N_TYPES (sizeof types / sizeof types[0])

static uint64_t
fnv(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* the bytes of every entry of a grid are among the format's levels, and no entry repeats */
static int
grid_bad(const void *grid, int count, int bytes, const uint8_t *levels, int nlev)
{
	int bad = 0;

	for (int k = 0; k < count; k++) {
		uint64_t g = bytes == 8 ? ((const uint64_t *)grid)[k] : ((const uint32_t *)grid)[k];
		for (int j = 0; j < bytes; j++) {
			int ok = 0;
			for (int v = 0; v < nlev; v++)
				ok |= (int)((g >> (8 * j)) & 0xFF) == levels[v];
			bad += !ok;
		}
		for (int m = 0; m < k; m++)
			bad += (bytes == 8 ? ((const uint64_t *)grid)[m] : ((const uint32_t *)grid)[m]) == g;
	}
	return bad;
}

static void
test_tables(void)
{
	static const uint8_t l2[] = {0x08, 0x19, 0x2b}, l3x[] = {4, 12, 20, 28, 36, 44, 52, 62},
	    l3s[] = {1, 3, 5, 7, 9, 11, 13, 15}, l1[] = {0xFF, 0, 1};
	int bad = 0;

	/* the checksums scripts/gen-quant-grid.py printed when it wrote quant_grid.c (x86 is little-endian) */
	test_cond(fnv(q_iq_ksigns, sizeof q_iq_ksigns) == 0xf19ba8f8c3292ba5ull, "ksigns checksum");
	test_cond(fnv(q_iq2xxs_grid, sizeof q_iq2xxs_grid) == 0xbb4ee025b5ac6e8eull, "iq2xxs checksum");
	test_cond(fnv(q_iq2xs_grid, sizeof q_iq2xs_grid) == 0xc9b1ee61e79909bdull, "iq2xs checksum");
	test_cond(fnv(q_iq2s_grid, sizeof q_iq2s_grid) == 0x123edd38a3b62b90ull, "iq2s checksum");
	test_cond(fnv(q_iq3xxs_grid, sizeof q_iq3xxs_grid) == 0xdfa5dc83d6a155d5ull, "iq3xxs checksum");
	test_cond(fnv(q_iq3s_grid, sizeof q_iq3s_grid) == 0xfa37020c25b44829ull, "iq3s checksum");
	test_cond(fnv(q_iq4nl_values, 16) == 0x055d06d2d8fa0f75ull, "iq4nl checksum");
	test_cond(fnv(q_iq1s_grid, sizeof q_iq1s_grid) == 0x6703ed863501ae2eull, "iq1s checksum");
	test_cond(grid_bad(q_iq1s_grid, 2048, 8, l1, 3) == 0, "iq1s grid levels");
	test_cond(q_iq1s_grid[0] == ~0ull && q_iq1s_grid[1] == 0xffffffffffffff01ull &&
	    q_iq1s_grid[2047] == 0x0101010101010101ull, "iq1s spot");
	test_cond(grid_bad(q_iq2xxs_grid, 256, 8, l2, 3) == 0, "iq2xxs grid levels");
	test_cond(grid_bad(q_iq2xs_grid, 512, 8, l2, 3) == 0, "iq2xs grid levels");
	test_cond(grid_bad(q_iq2s_grid, 1024, 8, l2, 3) == 0, "iq2s grid levels");
	test_cond(grid_bad(q_iq3xxs_grid, 256, 4, l3x, 8) == 0, "iq3xxs grid levels");
	test_cond(grid_bad(q_iq3s_grid, 512, 4, l3s, 8) == 0, "iq3s grid levels");
	/* spot values of the grids (first and last entries) */
	test_cond(q_iq2xxs_grid[0] == 0x0808080808080808ull && q_iq2xxs_grid[1] == 0x080808080808082bull,
	    "iq2xxs spot");
	test_cond(q_iq3xxs_grid[0] == 0x04040404u && q_iq3s_grid[0] == 0x01010101u && q_iq3s_grid[1] == 0x01010103u,
	    "iq3 spot");
	/* the sign table: 7 bits as given, the 8th the parity */
	for (int s = 0; s < 128; s++)
		bad += q_iq_ksigns[s] != (s | (__builtin_popcount((unsigned)s) & 1) << 7);
	test_cond(bad == 0, "ksigns parity: %d bad", bad);
	/* IQ4_NL: 16 increasing levels from -127 to 113; MXFP4: twice E2M1, sign in bit 3 */
	bad = q_iq4nl_values[0] != -127 || q_iq4nl_values[15] != 113;
	for (int k = 1; k < 16; k++)
		bad += q_iq4nl_values[k] <= q_iq4nl_values[k - 1];
	static const int e2m1x2[8] = {0, 1, 2, 3, 4, 6, 8, 12};
	for (int k = 0; k < 16; k++)
		bad += q_mxfp4_values[k] != (k & 8 ? -e2m1x2[k & 7] : e2m1x2[k & 7]);
	test_cond(bad == 0, "iq4nl/mxfp4 levels: %d bad", bad);
	test_cond(q_mxfp4_scale(0) == ldexpf(1, -128) && q_mxfp4_scale(128) == 1 && q_mxfp4_scale(255) == ldexpf(1, 127),
	    "e8m0 scale");
}

static void
test_sizes(void)
{
	for (size_t ti = 0; ti < N_TYPES; ti++) {
		enum gguf_dtype t = types[ti];
		int64_t b = q_block_elems(t);
		test_cond(q_supported(t) && q_act_supported(t), "%s supported", gguf_dtype_name(t));
		test_cond(b == gguf_dtype_block(t) && q_row_bytes(t, 4 * b) == 4 * gguf_dtype_size(t) &&
		    q_row_bytes(t, b + 16) == 0, "%s sizes", gguf_dtype_name(t));
	}
	test_cond(strcmp(gguf_dtype_name(GGML_TYPE_MXFP4), "MXFP4") == 0 && gguf_dtype_size(GGML_TYPE_MXFP4) == 17,
	    "MXFP4 in gguf");
	test_cond(!q_supported(GGML_TYPE_TQ1_0) && !q_supported(GGML_TYPE_TQ2_0), "ternary types not supported");
}

/* A random normal half in [2^-10, 4), either sign. */
static uint16_t
random_half(void)
{
	uint16_t h = q_f32_to_fp16(ldexpf(1 + (float)(rnd() % 1024) / 1024, (int)(rnd() % 12) - 10));

	return rnd() & 1 ? h | 0x8000 : h;
}

/* Random bytes, with each fp16 scale a random_half (MXFP4: exponents 100..150). */
static void
random_block(enum gguf_dtype t, uint8_t *p)
{
	size_t bb = gguf_dtype_size(t);
	int off[2] = {0, -1};

	for (size_t i = 0; i < bb; i++)
		p[i] = (uint8_t)rnd();
	if (t == GGML_TYPE_MXFP4) {
		p[0] = (uint8_t)(100 + rnd() % 51);
		return;
	}
	if (t == GGML_TYPE_IQ1_M) {
		/* the half in the top nibbles of the four scale words (bytes 49, 51, 53, 55) */
		uint16_t h = random_half();
		for (int k = 0; k < 4; k++)
			p[49 + 2 * k] = (uint8_t)((p[49 + 2 * k] & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
		return;
	}
	if (t == GGML_TYPE_Q2_K) {
		off[0] = 80;
		off[1] = 82;
	}
	for (int k = 0; k < 2 && off[k] >= 0; k++) {
		uint16_t h = random_half();
		p[off[k]] = (uint8_t)h;
		p[off[k] + 1] = (uint8_t)(h >> 8);
	}
}

/* Every value of random rows, at an odd address, equals the float64 reference's (exact in a float). */
static void
test_dequant(void)
{
	enum { NB = 64 };
	static uint8_t raw[NB * 136 + 1];
	static float y[NB * 256];
	static double r[NB * 256];

	for (size_t ti = 0; ti < N_TYPES; ti++) {
		enum gguf_dtype t = types[ti];
		int64_t n = NB * q_block_elems(t);
		uint8_t *row = raw + 1;
		int bad = 0;
		test_cond(ref_dequant_known(t), "reference knows %s", gguf_dtype_name(t));
		for (int b = 0; b < NB; b++)
			random_block(t, row + (size_t)b * gguf_dtype_size(t));
		q_dequant_row(t, row, y, n);
		ref_dequant_row(t, row, r, n);
		for (int64_t i = 0; i < n; i++)
			if (y[i] != (float)r[i] && bad++ < 3)
				fprintf(stderr, "%s value %lld: %.9g, reference %.17g\n", gguf_dtype_name(t),
				    (long long)i, y[i], r[i]);
		test_cond(bad == 0, "%s dequantisation bitwise the reference's: %d bad", gguf_dtype_name(t), bad);
	}
}

/*
 * The fixture quantisers: rows quantised at an odd address decode (through
 * the reference) to values near the input. The bound is loose and per
 * type, from the levels each format has per group: a check that the
 * encoding is the intended one, not a measure of quality.
 */
static void
test_quantize(void)
{
	enum { N = 2048 };
	static float x[N];
	static uint8_t raw[N + 1];
	static double r[N];
	/* relative RMS error allowed: 2-bit grids coarse, 4-bit levels fine */
	static const double max_rel[N_TYPES] = {0.45, 0.12, 0.12, 0.2, 0.3, 0.3, 0.6, 0.55, 0.5, 0.7, 0.7};

	for (int i = 0; i < N; i++)
		x[i] = frand() * (1 + (float)(i % 37) / 8);
	for (size_t ti = 0; ti < N_TYPES; ti++) {
		enum gguf_dtype t = types[ti];
		double e2 = 0, x2 = 0;
		test_cond(q_quantize_row(t, x, raw + 1, N) == 0, "%s quantises", gguf_dtype_name(t));
		ref_dequant_row(t, raw + 1, r, N);
		for (int i = 0; i < N; i++) {
			e2 += (r[i] - x[i]) * (r[i] - x[i]);
			x2 += (double)x[i] * x[i];
		}
		test_cond(sqrt(e2 / x2) <= max_rel[ti], "%s relative RMS error %.3f > %.2f", gguf_dtype_name(t),
		    sqrt(e2 / x2), max_rel[ti]);
	}
	float z[256] = {0};
	for (size_t ti = 0; ti < N_TYPES; ti++) {
		double rz[256];
		int bad = 0;
		q_quantize_row(types[ti], z, raw, q_block_elems(types[ti]));
		ref_dequant_row(types[ti], raw, rz, q_block_elems(types[ti]));
		for (int i = 0; i < q_block_elems(types[ti]); i++)
			bad += rz[i] != 0;
		test_cond(bad == 0, "%s zeros stay zeros", gguf_dtype_name(types[ti]));
	}
}

/* the float kernel (q_dot): within float summation's bound of the exact dot of the reference's values */
static void
test_dot(void)
{
	enum { N = 4096 };
	static float x[N], w[N];
	static uint8_t raw[N + 1];
	static double r[N];

	for (size_t ti = 0; ti < N_TYPES; ti++) {
		enum gguf_dtype t = types[ti];
		for (int64_t n = q_block_elems(t); n <= N; n *= 4) {
			double want = 0, mag = 0;
			for (int64_t i = 0; i < n; i++) {
				w[i] = frand() * (1 + (float)(i % 97) / 10);
				x[i] = frand();
			}
			q_quantize_row(t, w, raw + 1, n);
			ref_dequant_row(t, raw + 1, r, n);
			for (int64_t i = 0; i < n; i++) {
				want += r[i] * x[i];
				mag += fabs(r[i] * x[i]);
			}
			/* recursive float summation of n products: |error| <= (n + 1) u sum |w x| */
			double tol = (double)(n + 1) * ldexp(1, -24) * mag;
			for (int ki = 0; kern_list(ki) != NULL; ki++) {
				const struct kern *k = kern_list(ki);
				if (!kern_runs(k))
					continue;
				float got = kern_dot(k, t, raw + 1, x, n);
				test_cond(fabs(got - want) <= tol, "%s n %lld table %s: %g want %g (bound %g)",
				    gguf_dtype_name(t), (long long)n, k->name, got, want, tol);
			}
		}
	}
}

/*
 * The int8 kernels: |q_dot_act - exact| <= sum_b (d_b / 2) sum_{i in b} |w_i|
 * (the rounding of x; w the reference's values) plus float rounding of the
 * scaled group sums, on every path; the SIMD paths within float rounding
 * (1e-5 of sum |w| (|x| + d_b)) of the portable kernel's, which forms the
 * same integer sums (a much tighter check than the bound: a scale off by
 * one step fails it); and each table's kern_matmul_act result for each
 * (row, token) bitwise its kern_dot_act's, whatever rows and tokens share
 * the call.
 */
static void
test_act(void)
{
	enum { N = 1024, N_OUT = 7, N_TOK = 37 };	/* more tokens than one call decodes a block for (Q_IQ_TOKENS) */
	static float x[N_TOK * N], w[N_OUT * N], yb[N_TOK * N_OUT], y1[N_OUT];
	static uint8_t W[N_OUT * N], act[N_TOK * (N + 8 * N / 32)];
	static double r[N];
	static const int ranges[][2] = { { 0, 7 }, { 3, 7 }, { 1, 4 }, { 5, 6 } };
	size_t ab = q_act_bytes(N);

	for (int i = 0; i < N_TOK * N; i++)
		x[i] = frand() * (1 + (float)((i / 32) % 5));
	for (int i = 0; i < N_OUT * N; i++)
		w[i] = frand() * (1 + (float)(i % 13) / 4);
	for (int tok = 0; tok < N_TOK; tok++)
		q_act_prepare(x + tok * N, N, act + tok * ab);
	for (size_t ti = 0; ti < N_TYPES; ti++) {
		enum gguf_dtype t = types[ti];
		size_t rb = q_row_bytes(t, N);
		int bad = 0, bad_batch = 0;
		for (int r0 = 0; r0 < N_OUT; r0++)
			q_quantize_row(t, w + r0 * N, W + r0 * rb, N);
		for (int ki = 0; kern_list(ki) != NULL; ki++) {
			const struct kern *k = kern_list(ki);
			if (!kern_runs(k))
				continue;
			kern_matmul_act(k, t, W, rb, act, N_TOK, N, yb, N_OUT, 0, N_OUT);
			for (int row = 0; row < N_OUT; row++) {
				ref_dequant_row(t, W + row * rb, r, N);
				for (int tok = 0; tok < N_TOK; tok++) {
					const float *xt = x + tok * N, *d = (const float *)(act + tok * ab);
					double exact = 0, bound = 0, mag = 0;
					for (int i = 0; i < N; i++) {
						exact += r[i] * xt[i];
						bound += d[i / 32] / 2 * fabs(r[i]);
						mag += fabs(r[i]) * (fabs(xt[i]) + d[i / 32]);
					}
					bound += 1e-5 * mag;
					float got = kern_dot_act(k, t, W + row * rb, act + tok * ab, N);
					float sc = q_dot_act(t, W + row * rb, act + tok * ab, N);
					if ((!(fabs(got - exact) <= bound) || yb[tok * N_OUT + row] != got ||
					    !(fabs(got - sc) <= 1e-5 * mag)) && bad++ < 3)
						fprintf(stderr, "%s table %s row %d tok %d: %g (matmul %g, scalar %g) exact %g "
						    "bound %g\n", gguf_dtype_name(t), k->name, row, tok, got, yb[tok * N_OUT + row], sc,
						    exact, bound);
				}
			}
			/* one token at a time, over ranges of rows: bitwise the batch's, rows outside untouched */
			for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++) {
				for (int tok = 0; tok < N_TOK; tok++) {
					for (int o = 0; o < N_OUT; o++)
						y1[o] = -1e30f;
					kern_matmul_act(k, t, W, rb, act + tok * ab, 1, N, y1, N_OUT,
					    ranges[ri][0], ranges[ri][1]);
					for (int o = 0; o < N_OUT; o++) {
						bool in = o >= ranges[ri][0] && o < ranges[ri][1];
						bad_batch += in ? y1[o] != yb[tok * N_OUT + o] : y1[o] != -1e30f;
					}
				}
			}
		}
		test_cond(bad == 0, "%s int8 kernels within the bound: %d bad", gguf_dtype_name(t), bad);
		test_cond(bad_batch == 0, "%s int8 kernels batch independent: %d bad", gguf_dtype_name(t), bad_batch);
	}
}

/*
 * Rows of 32-value blocks (IQ4_NL, MXFP4) whose count is odd or not a
 * multiple of 8: the AVX-512 kernel takes pairs of blocks from chunks of 8
 * and ends with a half step. Against the scalar integer product, for every
 * token, in a batch and alone (bitwise).
 */
static void
test_act_odd(void)
{
	enum { N_MAX = 288, N_OUT = 3, N_TOK = 5 };
	static const enum gguf_dtype ts[] = { GGML_TYPE_IQ4_NL, GGML_TYPE_MXFP4 };
	static const int ns[] = { 96, 288 };	/* 3 blocks; 9 (a chunk of 8, then 1) */
	static float x[N_TOK * N_MAX], w[N_OUT * N_MAX], yb[N_TOK * N_OUT], y1[N_OUT];
	static uint8_t W[N_OUT * N_MAX], act[N_TOK * (N_MAX + 8 * N_MAX / 32)];

	for (int i = 0; i < N_TOK * N_MAX; i++)
		x[i] = frand() * (1 + (float)((i / 32) % 3));
	for (int i = 0; i < N_OUT * N_MAX; i++)
		w[i] = frand();
	for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
		for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
			enum gguf_dtype t = ts[ti];
			int n = ns[ni], bad = 0;
			size_t rb = q_row_bytes(t, n), ab = q_act_bytes(n);

			for (int tok = 0; tok < N_TOK; tok++)
				q_act_prepare(x + tok * n, n, act + tok * ab);
			for (int r = 0; r < N_OUT; r++)
				q_quantize_row(t, w + r * n, W + r * rb, n);
			for (int ki = 0; kern_list(ki) != NULL; ki++) {
				const struct kern *k = kern_list(ki);
				if (!kern_runs(k))
					continue;
				kern_matmul_act(k, t, W, rb, act, N_TOK, n, yb, N_OUT, 0, N_OUT);
				for (int tok = 0; tok < N_TOK; tok++) {
					kern_matmul_act(k, t, W, rb, act + tok * ab, 1, n, y1, N_OUT, 0, N_OUT);
					for (int r = 0; r < N_OUT; r++) {
						float sc = q_dot_act(t, W + r * rb, act + tok * ab, n);
						bad += !(fabsf(yb[tok * N_OUT + r] - sc) <= 1e-5f * (1 + fabsf(sc)) * 8) ||
						    y1[r] != yb[tok * N_OUT + r];
					}
				}
			}
			test_cond(bad == 0, "%s rows of %d: every table as the scalar product, batch independent: %d bad",
			    gguf_dtype_name(t), n, bad);
		}
	}
}

/*
 * Blocks of every bit pattern, not only what the fixture quantisers write
 * (random bytes: every nibble, IQ4_XS's 6-bit scales 0 and 63, Q2_K's
 * scales and mins 0 and 15), and the extremes: the largest levels and
 * scales (IQ4_NL nibble 0 = -127, IQ4_XS ls 0 = -32, Q2_K levels 3 with
 * scale and min 15; a row of MXFP4 exponents 0 and 1 alone, whose scales
 * are subnormal, and 200 in another) against tokens of full-scale x (+127
 * everywhere, alternating signs, a zero token), on rows whose 32-value
 * blocks end with 1 to 7 of a
 * group of 8 and an odd number of rows, for 1 and 33 (> Q_IQ_TOKENS)
 * tokens. Every table's result within float rounding of the portable
 * kernel's (q_iq_dot_act: the same integer sums), bitwise the same one
 * token at a time and one row at a time.
 */
static void
test_act_raw(void)
{
	enum { N_MAX = 768, N_OUT = 5, N_TOK = 33 };
	static const enum gguf_dtype ts[] = { GGML_TYPE_MXFP4, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_Q2_K };
	static const int ns32[] = { 32, 224, 288, 544, 768 }, ns256[] = { 256, 768 };
	static float x[N_TOK * N_MAX], yb[N_TOK * N_OUT], y1[N_OUT];
	static uint8_t W[N_OUT * N_MAX], act[N_TOK * (N_MAX + 8 * N_MAX / 32)];
	static double r[N_MAX];

	for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
		enum gguf_dtype t = ts[ti];
		bool b32 = q_block_elems(t) == 32;
		const int *ns = b32 ? ns32 : ns256;
		int n_ns = b32 ? 5 : 2;
		for (int ni = 0; ni < n_ns; ni++) {
			int n = ns[ni], bad = 0, bad_batch = 0;
			size_t rb = q_row_bytes(t, n), ab = q_act_bytes(n), bb = gguf_dtype_size(t);
			int64_t nblk = n / q_block_elems(t);

			for (int tok = 0; tok < N_TOK; tok++)
				for (int i = 0; i < n; i++)
					x[tok * n + i] = tok == 0 ? 1.0f : tok == 1 ? (i % 2 ? -3.0f : 3.0f) :
					    tok == 2 ? 0.0f : frand() * (1 + (float)((i / 32) % 4));
			for (int tok = 0; tok < N_TOK; tok++)
				q_act_prepare(x + tok * n, n, act + tok * ab);
			for (int row = 0; row < N_OUT; row++) {
				for (int64_t b = 0; b < nblk; b++) {
					uint8_t *p = W + (size_t)row * rb + (size_t)b * bb;
					random_block(t, p);
					/* MXFP4: a row of exponents 0 and 1 only (subnormal scales), 200 in another */
					if (row == 0 && t == GGML_TYPE_MXFP4)
						p[0] = (uint8_t)(b % 2);
					if (row == 2 && t == GGML_TYPE_MXFP4 && b % 3 == 0)
						p[0] = 200;
					if (row != 1)
						continue;
					/* the extremes: largest levels and scales */
					if (t == GGML_TYPE_IQ4_NL)
						memset(p + 2, 0, 16);
					else if (t == GGML_TYPE_MXFP4)
						memset(p + 1, b % 2 ? 0x77 : 0xFF, 16);	/* 12 or -12 */
					else if (t == GGML_TYPE_IQ4_XS)
						memset(p + 2, 0, 134);	/* ls 0: -32 * d, levels -127 */
					else
						memset(p, 0xFF, 80);	/* Q2_K: scale and min 15, levels 3 */
				}
			}
			for (int ki = 0; kern_list(ki) != NULL; ki++) {
				const struct kern *k = kern_list(ki);
				if (!kern_runs(k))
					continue;
				kern_matmul_act(k, t, W, rb, act, N_TOK, n, yb, N_OUT, 0, N_OUT);
				for (int row = 0; row < N_OUT; row++) {
					/* the magnitudes of the terms summed: |s q| and Q2_K's offset m, per value */
					for (int64_t b = 0; b < nblk; b++) {
						struct q_iq_int ib;
						int64_t be = q_block_elems(t);
						q_iq_unpack(t, W + (size_t)row * rb + (size_t)b * bb, &ib);
						for (int64_t e = 0; e < be; e++)
							r[b * be + e] = fabs((double)ib.s[e / 16] * ib.q[e]) + fabs(ib.m[e / 16]);
					}
					for (int tok = 0; tok < N_TOK; tok++) {
						const float *d = (const float *)(act + tok * ab);
						const int8_t *q = (const int8_t *)(d + 2 * (n / 32));
						double mag = 0;
						for (int i = 0; i < n; i++)
							mag += r[i] * d[i / 32] * (abs(q[i]) + 1);
						float sc = q_iq_dot_act(t, W + row * rb, act + tok * ab, n);
						float got = yb[tok * N_OUT + row];
						if (!(fabs(got - sc) <= 1e-5 * mag) && bad++ < 3)
							fprintf(stderr, "%s n %d table %s row %d tok %d: %.9g, scalar %.9g (mag %g)\n",
							    gguf_dtype_name(t), n, k->name, row, tok, got, sc, mag);
						/* alone: one token, one row */
						kern_matmul_act(k, t, W, rb, act + tok * ab, 1, n, y1, N_OUT, row, row + 1);
						bad_batch += y1[row] != got;
					}
				}
			}
			test_cond(bad == 0, "%s raw blocks, n %d: every table as the scalar product: %d bad",
			    gguf_dtype_name(t), n, bad);
			test_cond(bad_batch == 0, "%s raw blocks, n %d: batch independent: %d bad", gguf_dtype_name(t), n,
			    bad_batch);
		}
	}
}

int
main(void)
{
	printf("kernels: %s\n", kern_best()->name);
	test_tables();
	test_sizes();
	test_dequant();
	test_quantize();
	test_dot();
	test_act();
	test_act_odd();
	test_act_raw();
	return test_done();
}
