/*
 * test_cuda_i8.cu: the arithmetic of the CUDA backend's int8 decode kernel
 * (kernel_matvec_i8) on the CPU: its per-lane parts (part_q8_0,
 * part_q4_k: block layouts, nibble and scale decoding, the offset term),
 * compiled for the host from backend_cuda.cu itself (included below, as
 * llama2.c's test.c includes run.c), summed over rows of random weights
 * quantised by the fixture quantiser, against the float64 dot of the
 * dequantised row (q_dequant_row) with x. Runs without a GPU.
 *
 * With a GPU it also launches the matrix-vector kernels on random data of
 * every weight type and checks them against the same float64 dot:
 * kernel_quantize_x against the host's quantisation (bit for bit),
 * kernel_matvec_i8 (Q8_0, Q4_K), kernel_matvec (every type), kernel_matvec_f16
 * and kernel_dequant_f16, at 896 wide (Qwen2.5-0.5B) and 14336 (past the
 * 48 KB shared-memory default, so the opt-in is exercised).
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

/* true, or a failure counted with the CUDA error's words */
static bool
ok_cuda(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return true;
	failed++;
	fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorString(e));
	return false;
}

/*
 * The matrix-vector kernels on the device for type t, n_in wide, n_out rows:
 * each output within tol * rms(reference) of the float64 dot of the
 * dequantised row with x (the int8 kernels: the bound of the host check).
 */
static void
device_matvec(enum gguf_dtype t, int64_t n_in, int n_out)
{
	size_t rb = gguf_dtype_row_size(t, n_in), nw = rb * n_out;
	uint8_t *w = (uint8_t *)malloc(nw);
	float *x = (float *)malloc(n_in * sizeof *x), *row = (float *)malloc(n_in * sizeof *row);
	float *src = (float *)malloc(n_in * sizeof *src), *y = (float *)malloc(n_out * sizeof *y);
	double *ref = (double *)calloc(n_out, sizeof *ref), ss = 0, worst = 0;
	struct xq8 *hq = (struct xq8 *)malloc((n_in / 32) * sizeof *hq), *hq2 = (struct xq8 *)malloc((n_in / 32) * sizeof *hq2);
	uint8_t *dw = NULL;
	float *dx = NULL, *dy = NULL;
	struct xq8 *dq = NULL;
	__half *dd = NULL;
	bool i8 = t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_K;
	double tol = i8 ? 2 * sqrt(32.0 / 12) / 127 * (t == GGML_TYPE_Q4_K ? 2 : 1) * 4 : 1e-4;
	char what[96];

	for (int64_t i = 0; i < n_in; i++)
		x[i] = (float)rnd();
	for (int r = 0; r < n_out; r++) {
		for (int64_t i = 0; i < n_in; i++)
			src[i] = (float)rnd();
		if (t == GGML_TYPE_F32)
			memcpy(w + r * rb, src, rb);
		else if (t == GGML_TYPE_F16)
			for (int64_t i = 0; i < n_in; i++)
				((uint16_t *)(w + r * rb))[i] = q_f32_to_fp16(src[i]);
		else if (t == GGML_TYPE_BF16)
			for (int64_t i = 0; i < n_in; i++)
				((uint16_t *)(w + r * rb))[i] = q_f32_to_bf16(src[i]);
		else
			q_quantize_row(t, src, w + r * rb, n_in);
		q_dequant_row(t, w + r * rb, row, n_in);
		for (int64_t i = 0; i < n_in; i++)
			ref[r] += (double)row[i] * x[i];
		ss += ref[r] * ref[r];
	}
	ss = sqrt(ss / n_out);
	snprintf(what, sizeof what, "%s %lld wide", gguf_dtype_name(t), (long long)n_in);
	if (!ok_cuda(cudaMalloc(&dw, nw), "cudaMalloc") || !ok_cuda(cudaMalloc(&dx, n_in * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dy, n_out * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dq, (n_in / 32) * sizeof *dq), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dd, (size_t)n_in * n_out * 2), "cudaMalloc"))
		goto out;
	cudaMemcpy(dw, w, nw, cudaMemcpyHostToDevice);
	cudaMemcpy(dx, x, n_in * 4, cudaMemcpyHostToDevice);
	if (i8) {
		kernel_quantize_x<<<nblk(n_in, 256), 256>>>(dx, dq, n_in);
		kernel_matvec_i8<<<nblk(n_out, 8), 256>>>(t, dw, rb, dq, dy, n_in, n_out);
		if (!ok_cuda(cudaDeviceSynchronize(), what))
			goto out;
		quantize_x(x, hq, n_in);
		cudaMemcpy(hq2, dq, (n_in / 32) * sizeof *hq2, cudaMemcpyDeviceToHost);
		check(memcmp(hq, hq2, (n_in / 32) * sizeof *hq) == 0, "kernel_quantize_x = the host's", 0, 0);
	} else if (t == GGML_TYPE_F16 && n_in % 8 == 0) {
		cudaFuncSetAttribute(kernel_matvec_f16, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(n_in * 4));
		kernel_matvec_f16<<<nblk(n_out, 8), 256, n_in * 4>>>(dw, rb, dx, dy, n_in, n_out);
	} else {
		cudaFuncSetAttribute(kernel_matvec, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(n_in * 4));
		kernel_matvec<<<nblk(n_out, 8), 256, n_in * 4>>>(t, dw, rb, dx, dy, n_in, n_out, dev_block(t));
	}
	if (!ok_cuda(cudaDeviceSynchronize(), what))
		goto out;
	cudaMemcpy(y, dy, n_out * 4, cudaMemcpyDeviceToHost);
	for (int r = 0; r < n_out; r++)
		worst = fmax(worst, fabs(y[r] - ref[r]) / ss);
	printf("device %s: matvec worst %.2e of rms (bound %.2e)\n", what, worst, tol);
	check(worst <= tol, what, worst, tol);
	/* prefill's dequantisation: every element as q_dequant_row gives it, rounded to f16 */
	if (t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_BF16) {
		uint16_t *h = (uint16_t *)malloc((size_t)n_in * n_out * 2);
		bool same = true;

		kernel_dequant_f16<<<1024, 128>>>(t, dw, rb, dd, n_in, n_out, dev_block(t));
		if (ok_cuda(cudaDeviceSynchronize(), "kernel_dequant_f16")) {
			cudaMemcpy(h, dd, (size_t)n_in * n_out * 2, cudaMemcpyDeviceToHost);
			for (int r = 0; r < n_out && same; r++) {
				q_dequant_row(t, w + r * rb, row, n_in);
				for (int64_t i = 0; i < n_in && same; i++)
					same = fabsf(q_fp16_to_f32(h[(size_t)r * n_in + i]) - row[i]) <=
					    fabsf(row[i]) * 1e-3f + 1e-7f;
			}
			check(same, "kernel_dequant_f16 = q_dequant_row within f16 rounding", 0, 0);
		}
		free(h);
	}
out:
	cudaFree(dw);
	cudaFree(dx);
	cudaFree(dy);
	cudaFree(dq);
	cudaFree(dd);
	free(w);
	free(x);
	free(row);
	free(src);
	free(y);
	free(ref);
	free(hq);
	free(hq2);
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
	{
		static const enum gguf_dtype all[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16,
			GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
			GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };
		char why[256] = "";

		if (cuda_device_count(why, sizeof why) <= 0) {
			printf("no CUDA device (%s): the kernels themselves are not run\n", why);
		} else {
			for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
				/* the K-quants need whole 256-blocks: 896 is not one */
				if (gguf_dtype_block(all[i]) < 256)
					device_matvec(all[i], 896, 64);
				device_matvec(all[i], 14336, 16);
			}
		}
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
