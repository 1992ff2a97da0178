/*
 * test_cuda_i8.cu: the arithmetic of the CUDA backend's int8 decode kernel
 * (kernel_matvec_i8) on the CPU: its per-lane parts (part_q8_0,
 * part_q4_k: block layouts, nibble and scale decoding, the offset term),
 * compiled for the host from backend_cuda.cu itself (included below, as
 * llama2.c's test.c includes run.c), summed over rows of random weights
 * quantised by the fixture quantiser, against the float64 dot of the
 * dequantised row (q_dequant_row) with x. Runs without a GPU; the kernels'
 * indexing over lanes is the loop below, the launch itself is checked only
 * by test_cuda on a device.
 *
 * Bound: x is rounded to int8 per block of 32 (d = max|x| / 127), which
 * test_forward.c's derivation puts at a relative rms error of rho *
 * sqrt(32 / 12) / 127 = 0.0129 rho per product (rho 1 for Q8_0, 2 for Q4_K,
 * whose offsets here use the exact block sum and add nothing); the test
 * allows twice that over 64 rows. Parts fed x's next block instead of their
 * own (what a layout slip does) must miss it by far, so the test can fail.
 */
#include "cuda/backend_cuda.cu"

extern "C" {
#include "quant/quant_ref.h"
}

static int passed, failed;

static void
check(bool ok, const char *what, double got, double bound)
{
	if (ok) {
		passed++;
		return;
	}
	failed++;
	fprintf(stderr, "FAIL: %s: %g (bound %g)\n", what, got, bound);
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static double
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
}

/* x to xq8 blocks as kernel_quantize_x does (a lane per element). */
static void
quantize_x(const float *x, struct xq8 *xq, int64_t n)
{
	for (int64_t b = 0; b < n / 32; b++) {
		float amax = 0, sum = 0, d;

		for (int i = 0; i < 32; i++) {
			amax = fmaxf(amax, fabsf(x[32 * b + i]));
			sum += x[32 * b + i];
		}
		d = amax / 127.f;
		xq[b].d = d;
		xq[b].s = sum;
		for (int i = 0; i < 32; i++)
			xq[b].q[i] = (int8_t)(d > 0 ? lrintf(x[32 * b + i] / d) : 0);
	}
}

/*
 * rms(int8 dot - exact dot) / rms(exact dot) over n_out rows of type t,
 * n_in wide; wrong: pair each part with x's next block of 32.
 */
static double
rel_err(enum gguf_dtype t, int64_t n_in, int n_out, bool wrong)
{
	size_t rb = gguf_dtype_row_size(t, n_in);
	uint8_t *w = (uint8_t *)aligned_alloc(64, (rb * n_out + 63) / 64 * 64);
	float *x = (float *)malloc(n_in * sizeof *x), *row = (float *)malloc(n_in * sizeof *row);
	float *src = (float *)malloc(n_in * sizeof *src);
	struct xq8 *xq = (struct xq8 *)calloc(n_in / 32 + 1, sizeof *xq), *xp = xq + (wrong ? 1 : 0);
	double se = 0, sy = 0;

	for (int64_t i = 0; i < n_in; i++)
		x[i] = (float)(rnd() * (i % 97 == 0 ? 8 : 1));	/* a few outliers widen their blocks */
	quantize_x(x, xq, n_in);
	for (int r = 0; r < n_out; r++) {
		double ref = 0, got = 0;

		for (int64_t i = 0; i < n_in; i++)
			src[i] = (float)rnd();
		q_quantize_row(t, src, w + r * rb, n_in);
		q_dequant_row(t, w + r * rb, row, n_in);
		for (int64_t i = 0; i < n_in; i++)
			ref += (double)row[i] * x[i];
		if (t == GGML_TYPE_Q8_0) {
			for (int64_t p = 0; p < n_in / 8; p++)
				got += part_q8_0(w + r * rb, p / 4, (int)(p % 4), xp);
		} else {
			for (int64_t p = 0; p < n_in / 32; p++)
				got += part_q4_k(w + r * rb, p / 8, (int)(p % 8), xp);
		}
		se += (got - ref) * (got - ref);
		sy += ref * ref;
	}
	free(w);
	free(x);
	free(row);
	free(src);
	free(xq);
	return sqrt(se / sy);
}

int
main(void)
{
	const double eps = sqrt(32.0 / 12) / 127;
	struct { enum gguf_dtype t; int64_t n_in; double rho; } cases[] = {
		{ GGML_TYPE_Q8_0, 896, 1 }, { GGML_TYPE_Q8_0, 4096, 1 },
		{ GGML_TYPE_Q4_K, 256, 2 }, { GGML_TYPE_Q4_K, 3584, 2 },
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		double bound = 2 * eps * cases[i].rho;
		double e = rel_err(cases[i].t, cases[i].n_in, 64, false);
		double bad = rel_err(cases[i].t, cases[i].n_in, 16, true);
		char what[96];

		printf("%s n_in %lld: rel rms error %.2e (bound %.2e), a wrong part %.2e\n",
		    gguf_dtype_name(cases[i].t), (long long)cases[i].n_in, e, bound, bad);
		snprintf(what, sizeof what, "%s %lld wide", gguf_dtype_name(cases[i].t), (long long)cases[i].n_in);
		check(e <= bound, what, e, bound);
		check(bad > 10 * bound, "a part paired with the wrong x is not caught", bad, 10 * bound);
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
