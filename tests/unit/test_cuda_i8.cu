/*
 * test_cuda_i8.cu: the arithmetic of the CUDA backend's int8 decode kernels
 * (cuda/mv_i8.cu) on the CPU: the per-lane parts of every type they take
 * (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: block
 * layouts, nibble, fifth-bit and scale decoding, the offset terms),
 * compiled for the host from the kernel files themselves (included below,
 * as llama2.c's test.c includes run.c), summed over rows of random weights
 * quantised by the fixture quantiser, against the float64 dot of the
 * dequantised row (q_dequant_row) with x. Runs without a GPU.
 *
 * With a GPU it also launches the matrix-vector kernels on random data of
 * every weight type and checks them against the same float64 dot:
 * kernel_quantize_x against the host's quantisation (bit for bit),
 * kernel_mv_i8 (every quantised type, with and without the bias and
 * accumulate epilogue), kernel_mv_i8_glu, kernel_rmsnorm_q8, kernel_matvec
 * (the float types), kernel_matvec_f16
 * and kernel_dequant_f16, at 896 wide (Qwen2.5-0.5B) and 14336 (past the
 * 48 KB shared-memory default, so the opt-in is exercised); the q8_0
 * cache's kernels (kv_q8.cu): the store bit for bit against the CPU's
 * kern_kvq8_quantize, the slide's rotation against kv_shift_rows, and
 * attention over Q8_0 rows against the float64 softmax.
 *
 * Bound: x is rounded to int8 per block of 32 (d = max|x| / 127), which
 * test_forward.c's derivation puts at a relative rms error of rho *
 * sqrt(32 / 12) / 127 = 0.0129 rho per product (rho 1 for Q8_0, 2 for the
 * others, whose offsets add a block sum of x's rounding); the test allows
 * twice that over 64 rows. Parts fed x's next block instead of their own
 * (what a layout slip does) must miss it by far, so the test can fail.
 *
 * And exactly (to float rounding, 1e-5 of sum |w x|): each dot is the
 * dequantised row times the rounded x, d q, offsets included, as the
 * CPU's q_act_prepare makes it: the block sum is d times the levels'
 * integer sum. With x's exact sum instead (what the kernel once used) the
 * offset terms of Q4_0, Q4_1, Q5_0, Q5_1, Q4_K and Q5_K see another x than
 * their levels: the test checks that those sums miss the bound (they
 * miss by 5e-4 to 1.5e-3 here).
 */
#include "cuda/backend_cuda.cu"
#include "cuda/cuda_err.cu"
#include "cuda/matmul.cu"
#include "cuda/layers.cu"
#include "cuda/mv_i8.cu"
#include "cuda/attention.cu"
#include "cuda/attn_prefill.cu"
#include "cuda/multi.cu"
#include "cuda/kv_q8.cu"
#include "cuda/sample.cu"

extern "C" {
#include "backend/kv_shift.h"
#include "kern/kern.h"
#include "sampler/sampler.h"
#include "quant/quant_ref.h"
#include "tests/fixtures/att_tile_ref.h"
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

/*
 * x to xq8 blocks as kernel_quantize_x does (a lane per element); exact:
 * the block sums as the kernel once made them, x's exact sum.
 */
static void
host_quantize_x_as(const float *x, struct xq8 *xq, int64_t n, bool exact)
{
	for (int64_t b = 0; b < n / 32; b++) {
		float amax = 0, sum = 0, d;
		int isum = 0;

		for (int i = 0; i < 32; i++) {
			amax = fmaxf(amax, fabsf(x[32 * b + i]));
			sum += x[32 * b + i];
		}
		d = amax / 127.f;
		xq[b].d = d;
		for (int i = 0; i < 32; i++) {
			xq[b].q[i] = (int8_t)(d > 0 ? lrintf(x[32 * b + i] / d) : 0);
			isum += xq[b].q[i];
		}
		xq[b].s = exact ? sum : d * (float)isum;
	}
}

static void
host_quantize_x(const float *x, struct xq8 *xq, int64_t n)
{
	host_quantize_x_as(x, xq, n, false);
}


/*
 * One row of type t from src: the fixture quantiser, or for Q2_K (which it
 * has no quantiser for) random levels, scales and mins with d and dmin set
 * so values stay near src's range.
 */
static void
make_row(enum gguf_dtype t, const float *src, uint8_t *dst, int64_t n_in)
{
	if (t != GGML_TYPE_Q2_K) {
		q_quantize_row(t, src, dst, n_in);
		return;
	}
	for (int64_t b = 0; b < n_in / 256; b++) {
		uint8_t *blk = dst + b * 84;
		uint16_t d = q_f32_to_fp16(0.1f), dmin = q_f32_to_fp16(0.05f);

		for (int i = 0; i < 80; i++)
			blk[i] = (uint8_t)(rng = rng * 6364136223846793005ULL + 1442695040888963407ULL, rng >> 56);
		memcpy(blk + 80, &d, 2);
		memcpy(blk + 82, &dmin, 2);
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
	host_quantize_x(x, xq, n_in);
	for (int r = 0; r < n_out; r++) {
		double ref = 0, got;

		for (int64_t i = 0; i < n_in; i++)
			src[i] = (float)rnd();
		make_row(t, src, w + r * rb, n_in);
		q_dequant_row(t, w + r * rb, row, n_in);
		for (int64_t i = 0; i < n_in; i++)
			ref += (double)row[i] * x[i];
		got = mv_i8_row_host(t, w + r * rb, xp, n_in);
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

/*
 * The largest |int8 dot - (dequantised row) . (rounded x)| / sum |w x| over
 * n_out rows of type t, n_in wide, with the block sums rounded (*now) and
 * exact (*old, the sums the kernel once used).
 */
static void
rounded_err(enum gguf_dtype t, int64_t n_in, int n_out, double *now, double *old)
{
	size_t rb = gguf_dtype_row_size(t, n_in);
	uint8_t *w = (uint8_t *)malloc(rb);
	float *x = (float *)malloc(n_in * sizeof *x), *row = (float *)malloc(n_in * sizeof *row);
	float *src = (float *)malloc(n_in * sizeof *src);
	struct xq8 *xq = (struct xq8 *)calloc(n_in / 32, sizeof *xq), *xe = (struct xq8 *)calloc(n_in / 32, sizeof *xe);

	*now = *old = 0;
	for (int64_t i = 0; i < n_in; i++)
		x[i] = (float)(rnd() * (i % 97 == 0 ? 8 : 1));
	host_quantize_x_as(x, xq, n_in, false);
	host_quantize_x_as(x, xe, n_in, true);
	for (int r = 0; r < n_out; r++) {
		double ref = 0, mag = 0;

		for (int64_t i = 0; i < n_in; i++)
			src[i] = (float)rnd();
		make_row(t, src, w, n_in);
		q_dequant_row(t, w, row, n_in);
		for (int64_t i = 0; i < n_in; i++) {
			ref += (double)row[i] * xq[i / 32].d * xq[i / 32].q[i % 32];
			mag += fabs((double)row[i] * x[i]);
		}
		*now = fmax(*now, fabs(mv_i8_row_host(t, w, xq, n_in) - ref) / mag);
		*old = fmax(*old, fabs(mv_i8_row_host(t, w, xe, n_in) - ref) / mag);
	}
	free(w);
	free(x);
	free(row);
	free(src);
	free(xq);
	free(xe);
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
 * The fused int8 kernels against the plain one's output y (dy on the
 * device, from x's blocks dq): the bias + accumulate epilogue gives y + y +
 * b, the gate/up kernel with W as both gives silu(y) * y, and the fused
 * RMSNorm + quantisation gives the host's norm of x.
 */
static void
device_fused(enum gguf_dtype t, const uint8_t *dw, size_t rb, const float *dx, struct xq8 *dq, float *dy,
    const float *y, int64_t n_in, int n_out, int n_sm)
{
	float *b = (float *)malloc(n_out * 4), *y2 = (float *)malloc(n_out * 4);
	float *x = (float *)malloc(n_in * 4), *w = (float *)malloc(n_in * 4), *xb = (float *)malloc(n_in * 4);
	float *db = NULL, *dw2 = NULL, *dxb = NULL;
	double worst = 0, ss = 0;
	bool ok = true;

	for (int r = 0; r < n_out; r++)
		b[r] = (float)rnd();
	for (int64_t i = 0; i < n_in; i++)
		w[i] = (float)(1 + 0.5 * rnd());
	if (!ok_cuda(cudaMalloc(&db, n_out * 4), "cudaMalloc") || !ok_cuda(cudaMalloc(&dw2, n_in * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dxb, n_in * 4), "cudaMalloc"))
		goto out;
	cudaMemcpy(db, b, n_out * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dw2, w, n_in * 4, cudaMemcpyHostToDevice);
	{
		const struct mv_epi epi = { db, true };

		mv_i8(0, t, dw, rb, dq, dy, n_in, n_out, n_sm, epi);
	}
	if (!ok_cuda(cudaDeviceSynchronize(), "kernel_mv_i8 (bias, accumulate)"))
		goto out;
	cudaMemcpy(y2, dy, n_out * 4, cudaMemcpyDeviceToHost);
	for (int r = 0; r < n_out; r++)
		ok = ok && fabs(y2[r] - (2.0 * y[r] + b[r])) <= 1e-5 * (fabs(2.0 * y[r]) + fabs(b[r]) + 1);
	check(ok, "kernel_mv_i8's epilogue: y + W x + b", 0, 0);
	mv_i8_glu(0, t, dw, dw, rb, dq, dy, n_in, n_out, n_sm, false);
	if (!ok_cuda(cudaDeviceSynchronize(), "kernel_mv_i8_glu"))
		goto out;
	cudaMemcpy(y2, dy, n_out * 4, cudaMemcpyDeviceToHost);
	ok = true;
	for (int r = 0; r < n_out; r++) {
		double want = y[r] / (1 + exp(-(double)y[r])) * y[r];
		ok = ok && fabs(y2[r] - want) <= 1e-4 * (fabs(want) + 1e-3);
	}
	check(ok, "kernel_mv_i8_glu = silu(Wx) * Wx", 0, 0);
	cudaMemcpy(x, dx, n_in * 4, cudaMemcpyDeviceToHost);
	for (int64_t i = 0; i < n_in; i++)
		ss += (double)x[i] * x[i];
	ss = 1 / sqrt(ss / n_in + 1e-6);
	rmsnorm_quantize(0, dx, dw2, dxb, dq, (int)n_in, 1e-6f);
	if (!ok_cuda(cudaDeviceSynchronize(), "kernel_rmsnorm_q8"))
		goto out;
	cudaMemcpy(xb, dxb, n_in * 4, cudaMemcpyDeviceToHost);
	for (int64_t i = 0; i < n_in; i++)
		worst = fmax(worst, fabs(xb[i] - x[i] * ss * w[i]) / (fabs(x[i] * ss * w[i]) + 1e-6));
	check(worst <= 1e-5, "kernel_rmsnorm_q8's floats = the host's RMSNorm", worst, 1e-5);
	{
		struct xq8 *hq = (struct xq8 *)malloc((n_in / 32) * sizeof *hq);
		struct xq8 *gq = (struct xq8 *)malloc((n_in / 32) * sizeof *gq);

		host_quantize_x(xb, hq, n_in);
		cudaMemcpy(gq, dq, (n_in / 32) * sizeof *gq, cudaMemcpyDeviceToHost);
		check(memcmp(hq, gq, (n_in / 32) * sizeof *hq) == 0,
		    "kernel_rmsnorm_q8's blocks = the host's quantisation of its floats", 0, 0);
		free(hq);
		free(gq);
	}
out:
	cudaFree(db);
	cudaFree(dw2);
	cudaFree(dxb);
	free(b);
	free(y2);
	free(x);
	free(w);
	free(xb);
}

/*
 * kernel_kv_rotate (a slid cache's K rows on the device) against the CPU's
 * kv_shift_rows on the same f16 and f32 rows: 2 KV heads of 64, 48 dims
 * rotated (a partial rotation), NeoX and adjacent pairs, delta -37.
 */
static void
device_kv_rotate(void)
{
	const int n = 9, nkv = 2, hd = 64, rd = 48, w = nkv * hd, delta = -37;
	double fr[24], *dfr = NULL;
	float *src = (float *)malloc((size_t)n * w * 4), *cpu = (float *)malloc((size_t)n * w * 4);
	float *f = (float *)malloc(w * 4), *got = (float *)malloc((size_t)n * w * 4);
	void *ds = NULL, *dd = NULL;

	for (int i = 0; i < rd / 2; i++)
		fr[i] = pow(10000.0, -2.0 * i / rd);
	if (!ok_cuda(cudaMalloc(&dfr, sizeof fr), "cudaMalloc") || !ok_cuda(cudaMalloc(&ds, (size_t)n * w * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dd, (size_t)n * w * 4), "cudaMalloc"))
		goto out;
	cudaMemcpy(dfr, fr, sizeof fr, cudaMemcpyHostToDevice);
	for (int f16 = 0; f16 < 2; f16++)
		for (int neox = 0; neox < 2; neox++) {
			struct kv_rope r = { nkv, hd, rd, neox != 0, fr };
			size_t elt = f16 ? 2 : 4;
			bool same = true;

			for (int i = 0; i < n * w; i++) {
				float v = (float)rnd();
				if (f16)
					((uint16_t *)src)[i] = q_f32_to_fp16(v);
				else
					src[i] = v;
			}
			memcpy(cpu, src, (size_t)n * w * elt);
			kv_shift_rows(cpu, n, f16 ? GGML_TYPE_F16 : GGML_TYPE_F32, &r, delta, f);
			cudaMemcpy(ds, src, (size_t)n * w * elt, cudaMemcpyHostToDevice);
			kernel_kv_rotate<<<dim3(n, nkv), 64>>>(ds, dd, f16 != 0, nkv, hd, rd, neox != 0, dfr, delta);
			if (!ok_cuda(cudaDeviceSynchronize(), "kernel_kv_rotate"))
				goto out;
			cudaMemcpy(got, dd, (size_t)n * w * elt, cudaMemcpyDeviceToHost);
			for (int i = 0; i < n * w; i++) {
				float a = f16 ? q_fp16_to_f32(((uint16_t *)cpu)[i]) : cpu[i];
				float b = f16 ? q_fp16_to_f32(((uint16_t *)got)[i]) : got[i];
				same = same && fabsf(a - b) <= (f16 ? 1e-3f : 1e-6f) * (fabsf(a) + 1e-3f);
			}
			check(same, f16 ? (neox ? "kernel_kv_rotate = kv_shift_rows (f16, NeoX)" :
			    "kernel_kv_rotate = kv_shift_rows (f16, pairs)") : (neox ?
			    "kernel_kv_rotate = kv_shift_rows (f32, NeoX)" : "kernel_kv_rotate = kv_shift_rows (f32, pairs)"),
			    0, 0);
		}
out:
	cudaFree(dfr); cudaFree(ds); cudaFree(dd);
	free(src); free(cpu); free(f); free(got);
}

/*
 * kernel_mv_i8_multi over 20 tokens (passes of 8, 8 and 4) against
 * kernel_mv_i8 token by token on the same int8 blocks.
 */
static void
device_multi(enum gguf_dtype t, const uint8_t *dw, size_t rb, int64_t n_in, int n_out, int n_sm)
{
	const int n = 20;
	float *x = (float *)malloc((size_t)n * n_in * 4), *y1 = (float *)malloc((size_t)n * n_out * 4);
	float *y2 = (float *)malloc((size_t)n * n_out * 4), *dx = NULL, *dy = NULL;
	struct xq8 *dq = NULL;
	const struct mv_epi none = { NULL, false };
	bool same = true;

	for (int64_t i = 0; i < (int64_t)n * n_in; i++)
		x[i] = (float)rnd();
	if (!ok_cuda(cudaMalloc(&dx, (size_t)n * n_in * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dy, (size_t)n * n_out * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dq, (size_t)n * n_in / 32 * sizeof *dq), "cudaMalloc"))
		goto out;
	cudaMemcpy(dx, x, (size_t)n * n_in * 4, cudaMemcpyHostToDevice);
	quantize_x(0, dx, dq, (int64_t)n * n_in);
	mv_i8_multi(0, t, dw, rb, dq, dy, n_in, n_out, n_sm, n);
	if (!ok_cuda(cudaDeviceSynchronize(), "kernel_mv_i8_multi"))
		goto out;
	cudaMemcpy(y1, dy, (size_t)n * n_out * 4, cudaMemcpyDeviceToHost);
	for (int k = 0; k < n; k++)
		mv_i8(0, t, dw, rb, dq + (size_t)k * n_in / 32, dy + (size_t)k * n_out, n_in, n_out, n_sm, none);
	if (!ok_cuda(cudaDeviceSynchronize(), "kernel_mv_i8"))
		goto out;
	cudaMemcpy(y2, dy, (size_t)n * n_out * 4, cudaMemcpyDeviceToHost);
	for (int64_t i = 0; i < (int64_t)n * n_out; i++)
		same = same && fabsf(y1[i] - y2[i]) <= 1e-5f * (fabsf(y2[i]) + 1e-3f);
	check(same, "kernel_mv_i8_multi (20 tokens) = kernel_mv_i8 token by token", 0, 0);
out:
	cudaFree(dx); cudaFree(dy); cudaFree(dq);
	free(x); free(y1); free(y2);
}

/*
 * kernel_mv_i8_qkv against the kernels it replaces (product, bias, RoPE,
 * cache store) on type t, 4 heads of 48 (odd for a warp: 24 pairs), 32
 * dims rotated, NeoX and adjacent pairs, into y and into an f16 cache row
 * at position 5.
 */
static void
device_qkv(enum gguf_dtype t, int64_t n_in, int n_sm)
{
	const int hd = 48, rd = 32, n_out = 4 * hd, pos = 5;
	size_t rb = gguf_dtype_row_size(t, n_in);
	uint8_t *w = (uint8_t *)malloc(rb * n_out), *dw = NULL;
	float *x = (float *)malloc(n_in * 4), *src = (float *)malloc(n_in * 4), *b = (float *)malloc(n_out * 4);
	float *y1 = (float *)malloc(n_out * 4), *y2 = (float *)malloc(n_out * 4), *dx = NULL, *dy = NULL, *db = NULL;
	double fr[16], *dfr = NULL;
	uint16_t *hc = (uint16_t *)malloc(8 * n_out * 2);
	__half *dc = NULL;
	int *dpos = NULL;
	struct xq8 *dq = NULL;

	for (int r = 0; r < n_out; r++) {
		for (int64_t i = 0; i < n_in; i++)
			src[i] = (float)rnd();
		make_row(t, src, w + r * rb, n_in);
		b[r] = (float)rnd();
	}
	for (int64_t i = 0; i < n_in; i++)
		x[i] = (float)rnd();
	for (int i = 0; i < rd / 2; i++)
		fr[i] = pow(10000.0, -2.0 * i / rd);
	if (!ok_cuda(cudaMalloc(&dw, rb * n_out), "cudaMalloc") || !ok_cuda(cudaMalloc(&dx, n_in * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dy, n_out * 4), "cudaMalloc") || !ok_cuda(cudaMalloc(&db, n_out * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dfr, sizeof fr), "cudaMalloc") || !ok_cuda(cudaMalloc(&dc, 8 * n_out * 2), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dpos, 4), "cudaMalloc") || !ok_cuda(cudaMalloc(&dq, n_in / 32 * sizeof *dq), "cudaMalloc"))
		goto out;
	cudaMemcpy(dw, w, rb * n_out, cudaMemcpyHostToDevice);
	cudaMemcpy(dx, x, n_in * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(db, b, n_out * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dfr, fr, sizeof fr, cudaMemcpyHostToDevice);
	cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice);
	quantize_x(0, dx, dq, n_in);
	for (int neox = 0; neox < 2; neox++) {
		const struct mv_epi none = { NULL, false };
		struct mv_qkv e = { db, dfr, 1.25f, dpos, hd, rd, neox != 0, dy, NULL, false };
		bool same = true;

		mv_i8(0, t, dw, rb, dq, dy, n_in, n_out, n_sm, none);
		kernel_add_bias<<<1, 256>>>(dy, db, n_out, n_out);
		kernel_rope<<<dim3(1, 4), 64>>>(dy, 4, hd, rd, dpos, false, neox != 0, dfr, 1.25f);
		cudaMemcpy(y1, dy, n_out * 4, cudaMemcpyDeviceToHost);
		mv_i8_qkv(0, t, dw, rb, dq, n_in, n_out, n_sm, e);
		cudaMemcpy(y2, dy, n_out * 4, cudaMemcpyDeviceToHost);
		e.y = NULL;
		e.cache = dc;
		e.f16 = true;
		mv_i8_qkv(0, t, dw, rb, dq, n_in, n_out, n_sm, e);
		if (!ok_cuda(cudaDeviceSynchronize(), "kernel_mv_i8_qkv"))
			goto out;
		cudaMemcpy(hc, dc, 8 * n_out * 2, cudaMemcpyDeviceToHost);
		for (int r = 0; r < n_out; r++) {
			same = same && fabsf(y1[r] - y2[r]) <= 1e-5f * (fabsf(y1[r]) + 1);
			same = same && fabsf(q_fp16_to_f32(hc[pos * n_out + r]) - y2[r]) <= 1e-3f * (fabsf(y2[r]) + 1e-3f);
		}
		check(same, neox ? "kernel_mv_i8_qkv = product, bias, RoPE (NeoX), store" :
		    "kernel_mv_i8_qkv = product, bias, RoPE (adjacent pairs), store", 0, 0);
	}
out:
	cudaFree(dw); cudaFree(dx); cudaFree(dy); cudaFree(db); cudaFree(dfr); cudaFree(dc); cudaFree(dpos);
	cudaFree(dq);
	free(w); free(x); free(src); free(b); free(y1); free(y2); free(hc);
}

/*
 * One token's attention on the device (attention_decode: the GQA
 * flash-decoding kernel, or the per-head one for shapes it does not take,
 * with nz splits; attention_tokens) against a float64 host softmax over
 * the same cache: head size hd, n_head query heads over n_kv KV heads, the
 * token at position pos, window win, softcap cap.
 */
static void
device_attention(int hd, int n_head, int n_kv, bool f16, int pos, int win, float cap, int nz, bool q8 = false)
{
	int kv_dim = n_kv * hd, n_pos = pos + 1, G = n_head / n_kv;
	float *q = (float *)malloc((size_t)n_head * hd * 4), *kc = (float *)malloc((size_t)n_pos * kv_dim * 4);
	float *vc = (float *)malloc((size_t)n_pos * kv_dim * 4), *out = (float *)malloc((size_t)n_head * hd * 4);
	uint16_t *kh = (uint16_t *)malloc((size_t)n_pos * kv_dim * 2), *vh = (uint16_t *)malloc((size_t)n_pos * kv_dim * 2);
	double *sc = (double *)malloc(n_pos * sizeof *sc), worst = 0;
	float *dq = NULL, *dout = NULL, *dpart = NULL;
	void *dk = NULL, *dv = NULL;
	int *dpos = NULL, first = win > 0 && n_pos > win ? n_pos - win : 0;
	size_t cb = q8 ? (size_t)n_pos * kvc_kv_row_bytes(GGML_TYPE_Q8_0, kv_dim) : (size_t)n_pos * kv_dim * (f16 ? 2 : 4);
	uint8_t *k8 = (uint8_t *)malloc(cb), *v8 = (uint8_t *)malloc(cb);
	float scale = 1.f / sqrtf((float)hd);
	char what[128];

	for (int i = 0; i < n_head * hd; i++)
		q[i] = (float)rnd();
	for (size_t i = 0; i < (size_t)n_pos * kv_dim; i++) {
		kh[i] = q_f32_to_fp16((float)rnd());
		vh[i] = q_f32_to_fp16((float)rnd());
		kc[i] = q_fp16_to_f32(kh[i]);	/* the same values in either cache */
		vc[i] = q_fp16_to_f32(vh[i]);
	}
	if (q8) {
		/* Q8_0 rows (the CPU's rounding), the reference reading their values */
		size_t rb = kvc_kv_row_bytes(GGML_TYPE_Q8_0, kv_dim);
		for (int p = 0; p < n_pos; p++) {
			kvc_kv_row_from_f32(GGML_TYPE_Q8_0, kc + (size_t)p * kv_dim, k8 + p * rb, kv_dim);
			kvc_kv_row_from_f32(GGML_TYPE_Q8_0, vc + (size_t)p * kv_dim, v8 + p * rb, kv_dim);
			kvc_kv_row_to_f32(GGML_TYPE_Q8_0, k8 + p * rb, kc + (size_t)p * kv_dim, kv_dim);
			kvc_kv_row_to_f32(GGML_TYPE_Q8_0, v8 + p * rb, vc + (size_t)p * kv_dim, kv_dim);
		}
	}
	if (!ok_cuda(cudaMalloc(&dq, (size_t)n_head * hd * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dout, (size_t)n_head * hd * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dpart, (size_t)ATT_MAX_SPLIT * n_head * (hd + 2) * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dk, cb), "cudaMalloc") || !ok_cuda(cudaMalloc(&dv, cb), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dpos, 4), "cudaMalloc"))
		goto out;
	cudaMemcpy(dq, q, (size_t)n_head * hd * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dk, q8 ? (void *)k8 : f16 ? (void *)kh : (void *)kc, cb, cudaMemcpyHostToDevice);
	cudaMemcpy(dv, q8 ? (void *)v8 : f16 ? (void *)vh : (void *)vc, cb, cudaMemcpyHostToDevice);
	cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice);
	for (int way = 0; way < 2; way++) {
		struct att_args a = { dq, dk, dv, f16 && !q8, dout, dpart, n_head, n_kv, hd, dpos, scale, cap, win, NULL, NULL, q8 };

		if (way == 0)
			attention_decode(0, &a, nz);
		else
			attention_tokens(0, &a, 1);
		snprintf(what, sizeof what, "%s hd %d, %d/%d heads, %s cache, pos %d, win %d, cap %g, %d splits",
		    way == 0 ? "attention_decode" : "attention_tokens", hd, n_head, n_kv, q8 ? "q8_0" : f16 ? "f16" : "f32",
		    pos, win, cap, way == 0 ? nz : 1);
		if (!ok_cuda(cudaDeviceSynchronize(), what))
			goto out;
		cudaMemcpy(out, dout, (size_t)n_head * hd * 4, cudaMemcpyDeviceToHost);
		worst = 0;
		for (int h = 0; h < n_head; h++) {
			const float *kq = q + (size_t)h * hd;
			int kvh = h / G;
			double mx = -INFINITY, sum = 0;

			for (int p = first; p < n_pos; p++) {
				double d = 0;
				for (int i = 0; i < hd; i++)
					d += (double)kq[i] * kc[(size_t)p * kv_dim + kvh * hd + i];
				d *= scale;
				if (cap > 0)
					d = cap * tanh(d / cap);
				sc[p] = d;
				mx = fmax(mx, d);
			}
			for (int p = first; p < n_pos; p++)
				sum += (sc[p] = exp(sc[p] - mx));
			for (int i = 0; i < hd; i++) {
				double o = 0;
				for (int p = first; p < n_pos; p++)
					o += sc[p] * vc[(size_t)p * kv_dim + kvh * hd + i];
				worst = fmax(worst, fabs(out[h * hd + i] - o / sum));
			}
		}
		printf("device %s: worst %.2e\n", what, worst);
		check(worst <= 2e-5, what, worst, 2e-5);
	}
out:
	cudaFree(dq); cudaFree(dout); cudaFree(dpart); cudaFree(dk); cudaFree(dv); cudaFree(dpos);
	free(q); free(kc); free(vc); free(out); free(kh); free(vh); free(sc); free(k8); free(v8);
}

/*
 * cu_sample (sample.cu's kernels) on logits in device memory against
 * src/sampler's smp_sample on the same logits with the same seed: the
 * same token and the same generator state afterwards, greedy and top-k
 * with temperature, top-p, min-p and the repetition penalty, ties and NaN
 * included, at 32000 and 151936 (Qwen's vocabulary).
 */
static void
device_sample(int n, int n_cases)
{
	static const float temps[] = { 0.f, 0.3f, 0.8f, 1.5f };
	static const int topks[] = { 1, 40, 200, 1024, 0 };
	struct kvc_model m;
	struct cuda_ctx c;
	float *l = (float *)malloc((size_t)n * 4);
	int32_t hist[200];
	int bad = 0, done = 0, host = 0;
	char err[256], what[96];

	memset(&m, 0, sizeof m);
	memset(&c, 0, sizeof c);
	m.hp.n_vocab = n;
	c.m = &m;
	if (!ok_cuda(cudaMalloc(&c.logits, (size_t)n * 4), "cudaMalloc"))
		goto out;
	for (int it = 0; it < n_cases; it++) {
		struct kvc_sampler_params p = kvc_sampler_default_params();
		struct kvc_sampler *smp = NULL;
		struct kvc_sample_req r;
		int nh = (int)(fabs(rnd()) * 200), rc;
		int32_t id = -1, want;
		uint64_t rng = 0;

		for (int i = 0; i < n; i++) {
			double g = rnd() * 8;
			l[i] = it % 3 == 0 ? (float)floor(g) : it % 3 == 1 && i % 97 == 5 ? NAN : (float)g;
		}
		for (int j = 0; j < nh; j++)
			hist[j] = (int32_t)(fabs(rnd()) * 100);
		p.temp = temps[it % 4];
		p.top_k = topks[it / 4 % 5];
		p.top_p = it % 7 == 0 ? 1.f : 0.9f;
		p.min_p = it % 5 == 0 ? 0.f : 0.05f;
		p.repeat_penalty = it % 6 == 0 ? 1.f : 1.3f;
		p.seed = (uint64_t)it * 7919;
		if (smp_new(&smp, &p, n) != 0)
			break;
		cudaMemcpy(c.logits, l, (size_t)n * 4, cudaMemcpyHostToDevice);
		c.logits_kept = true;
		memset(&r, 0, sizeof r);
		r.temp = p.temp;
		r.top_k = p.top_k;
		r.top_p = p.top_p;
		r.min_p = p.min_p;
		r.repeat_penalty = p.repeat_penalty;
		r.n_recent = nh < p.repeat_last_n ? nh : p.repeat_last_n;
		r.recent = hist + nh - r.n_recent;
		r.rng = smp_rng_state(smp);
		rc = cu_sample(&c, &r, &id, &rng, err, sizeof err);
		want = smp_sample(smp, l, hist, (size_t)nh);
		if (rc == KVC_EUNSUPPORTED) {
			host++;
			bad += p.temp > 0 && p.top_k > 0 && p.top_k <= 1024;	/* one it should have taken */
		} else if (rc != KVC_OK) {
			fprintf(stderr, "cu_sample: %s\n", err);
			bad++;
		} else {
			done++;
			if (id != want || rng != smp_rng_state(smp)) {
				if (bad < 5)
					fprintf(stderr, "sample case %d (temp %g top-k %d): device %d, CPU %d%s\n", it,
					    p.temp, p.top_k, id, want, rng != smp_rng_state(smp) ? ", generator differs" : "");
				bad++;
			}
		}
		smp_free(smp);
	}
	snprintf(what, sizeof what, "cu_sample = smp_sample, vocabulary %d (%d on the device, %d left to the host)",
	    n, done, host);
	printf("device %s: %d differ\n", what, bad);
	check(bad == 0 && done > 0, what, bad, 0);
out:
	cu_sample_free(&c);
	cudaFree(c.logits);
	free(l);
}

/*
 * kernel_kv_store_q8 on random K and V rows of 3 tokens (kv_dim 896 + 128:
 * 2 KV heads of 64 in 32 blocks, and a wider row) against the CPU's
 * kern_kvq8_quantize: the same bytes, at the rows *pos0 names.
 */
static void
device_kv_store_q8(int kv_dim)
{
	const int n = 3, pos = 5;
	size_t rb = kvc_kv_row_bytes(GGML_TYPE_Q8_0, kv_dim), cb = (size_t)(pos + n) * rb;
	float *k = (float *)malloc((size_t)n * kv_dim * 4), *v = (float *)malloc((size_t)n * kv_dim * 4);
	uint8_t *want = (uint8_t *)calloc(2, cb), *got = (uint8_t *)calloc(2, cb);
	float *dk = NULL, *dv = NULL;
	void *dkc = NULL, *dvc = NULL;
	int *dpos = NULL;
	char what[96];

	for (int i = 0; i < n * kv_dim; i++) {
		/* some blocks of zeros, some tiny, some large, ties at halves */
		int blk = i / 32 % 5;
		k[i] = blk == 0 ? 0.f : blk == 1 ? (float)rnd() * 1e-6f : blk == 2 ? (float)(int)(rnd() * 254) * 0.5f :
		    (float)rnd() * (blk == 3 ? 3000.f : 1.f);
		v[i] = (float)rnd() * 4.f;
	}
	for (int t = 0; t < n; t++) {
		kern_kvq8_quantize(k + (size_t)t * kv_dim, want + (pos + t) * rb, kv_dim);
		kern_kvq8_quantize(v + (size_t)t * kv_dim, want + cb + (pos + t) * rb, kv_dim);
	}
	if (!ok_cuda(cudaMalloc(&dk, (size_t)n * kv_dim * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dv, (size_t)n * kv_dim * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dkc, cb), "cudaMalloc") || !ok_cuda(cudaMalloc(&dvc, cb), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dpos, 4), "cudaMalloc"))
		goto out;
	cudaMemcpy(dk, k, (size_t)n * kv_dim * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dv, v, (size_t)n * kv_dim * 4, cudaMemcpyHostToDevice);
	cudaMemset(dkc, 0, cb);
	cudaMemset(dvc, 0, cb);
	cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice);
	kv_store_q8(0, dk, dv, dkc, dvc, dpos, n, kv_dim);
	snprintf(what, sizeof what, "kernel_kv_store_q8 = kern_kvq8_quantize (kv_dim %d)", kv_dim);
	if (!ok_cuda(cudaDeviceSynchronize(), what))
		goto out;
	cudaMemcpy(got, dkc, cb, cudaMemcpyDeviceToHost);
	cudaMemcpy(got + cb, dvc, cb, cudaMemcpyDeviceToHost);
	check(memcmp(got, want, 2 * cb) == 0, what, 0, 0);
out:
	cudaFree(dk); cudaFree(dv); cudaFree(dkc); cudaFree(dvc); cudaFree(dpos);
	free(k); free(v); free(want); free(got);
}

/*
 * forward_multi's store into Q8_0 caches (kv_store_q8_rows): 3 rows, each
 * its own caches for 2 layers at its own position, layer 1 written;
 * against kern_kvq8_quantize: the same bytes at each row's position of its
 * own layer-1 buffers, and layer 0's buffers untouched.
 */
static void
device_kv_store_q8_rows(int kv_dim)
{
	const int n = 3, L = 2, pos[3] = { 4, 0, 9 }, cap = 10;
	size_t rb = kvc_kv_row_bytes(GGML_TYPE_Q8_0, kv_dim), cb = (size_t)cap * rb;
	float *k = (float *)malloc((size_t)n * kv_dim * 4), *v = (float *)malloc((size_t)n * kv_dim * 4);
	uint8_t *want = (uint8_t *)calloc((size_t)2 * L * n, cb), *got = (uint8_t *)calloc((size_t)2 * L * n, cb);
	void *buf[2 * 2 * 3] = { NULL }, *tab[2 * 2 * 3];	/* [kv][l][t] */
	void **dtab = NULL;
	float *dk = NULL, *dv = NULL;
	int *dpos = NULL;
	char what[96];

	for (int i = 0; i < n * kv_dim; i++) {
		k[i] = (float)rnd() * (i / 32 % 3 == 0 ? 100.f : 1.f);
		v[i] = (float)rnd() * 4.f;
	}
	for (int t = 0; t < n; t++) {
		/* layer 1's buffers of row t: [kv][1][t] */
		kern_kvq8_quantize(k + (size_t)t * kv_dim, want + ((size_t)(0 * L + 1) * n + t) * cb + pos[t] * rb, kv_dim);
		kern_kvq8_quantize(v + (size_t)t * kv_dim, want + ((size_t)(1 * L + 1) * n + t) * cb + pos[t] * rb, kv_dim);
	}
	if (!ok_cuda(cudaMalloc(&dk, (size_t)n * kv_dim * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dv, (size_t)n * kv_dim * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dpos, sizeof pos), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dtab, sizeof tab), "cudaMalloc"))
		goto out;
	for (int i = 0; i < 2 * L * n; i++) {
		if (!ok_cuda(cudaMalloc(&buf[i], cb), "cudaMalloc"))
			goto out;
		cudaMemset(buf[i], 0, cb);
		tab[i] = buf[i];
	}
	cudaMemcpy(dk, k, (size_t)n * kv_dim * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dv, v, (size_t)n * kv_dim * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dpos, pos, sizeof pos, cudaMemcpyHostToDevice);
	cudaMemcpy(dtab, tab, sizeof tab, cudaMemcpyHostToDevice);
	{
		struct cu_rows r = { dpos, dtab, dtab + L * n, n, cap, false, true };

		kv_store_q8_rows(0, &r, 1, dk, dv, kv_dim);
	}
	snprintf(what, sizeof what, "kv_store_q8_rows = kern_kvq8_quantize (kv_dim %d, 3 rows)", kv_dim);
	if (!ok_cuda(cudaDeviceSynchronize(), what))
		goto out;
	for (int i = 0; i < 2 * L * n; i++)
		cudaMemcpy(got + (size_t)i * cb, buf[i], cb, cudaMemcpyDeviceToHost);
	check(memcmp(got, want, (size_t)2 * L * n * cb) == 0, what, 0, 0);
out:
	for (int i = 0; i < 2 * L * n; i++)
		cudaFree(buf[i]);
	cudaFree(dk); cudaFree(dv); cudaFree(dpos); cudaFree(dtab);
	free(k); free(v); free(want); free(got);
}

/*
 * kernel_kv_rotate_q8 against kv_shift_rows on the same Q8_0 rows (2 KV
 * heads of 64, 48 dims rotated, NeoX and pairs, delta -37): every value
 * within one level of its block (the angle's sin and cos may differ in
 * the last bit between the device and libm, and a level can round the
 * other way), and no more than 1 % of the levels differing at all.
 */
static void
device_kv_rotate_q8(void)
{
	const int n = 9, nkv = 2, hd = 64, rd = 48, w = nkv * hd, delta = -37;
	size_t rb = kvc_kv_row_bytes(GGML_TYPE_Q8_0, w);
	double fr[24], *dfr = NULL;
	uint8_t *src = (uint8_t *)malloc(n * rb), *cpu = (uint8_t *)malloc(n * rb), *got = (uint8_t *)malloc(n * rb);
	float *f = (float *)malloc(w * 4), *a = (float *)malloc(w * 4), *b = (float *)malloc(w * 4);
	void *ds = NULL, *dd = NULL;

	for (int i = 0; i < rd / 2; i++)
		fr[i] = pow(10000.0, -2.0 * i / rd);
	if (!ok_cuda(cudaMalloc(&dfr, sizeof fr), "cudaMalloc") || !ok_cuda(cudaMalloc(&ds, n * rb), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dd, n * rb), "cudaMalloc"))
		goto out;
	cudaMemcpy(dfr, fr, sizeof fr, cudaMemcpyHostToDevice);
	for (int neox = 0; neox < 2; neox++) {
		struct kv_rope r = { nkv, hd, rd, neox != 0, fr };
		bool close = true;
		int differ = 0;

		for (int p = 0; p < n; p++) {
			for (int i = 0; i < w; i++)
				f[i] = (float)rnd();
			kvc_kv_row_from_f32(GGML_TYPE_Q8_0, f, src + p * rb, w);
		}
		memcpy(cpu, src, n * rb);
		kv_shift_rows(cpu, n, GGML_TYPE_Q8_0, &r, delta, f);
		cudaMemcpy(ds, src, n * rb, cudaMemcpyHostToDevice);
		kv_rotate_q8(0, ds, dd, n, w, hd, rd, neox != 0, dfr, delta);
		if (!ok_cuda(cudaDeviceSynchronize(), "kernel_kv_rotate_q8"))
			goto out;
		cudaMemcpy(got, dd, n * rb, cudaMemcpyDeviceToHost);
		for (int p = 0; p < n; p++) {
			kvc_kv_row_to_f32(GGML_TYPE_Q8_0, cpu + p * rb, a, w);
			kvc_kv_row_to_f32(GGML_TYPE_Q8_0, got + p * rb, b, w);
			for (int i = 0; i < w; i++) {
				float d = q_fp16_to_f32((uint16_t)(cpu[p * rb + i / 32 * 34] | cpu[p * rb + i / 32 * 34 + 1] << 8));
				close = close && fabsf(a[i] - b[i]) <= 1.01f * d + 1e-7f;
				differ += a[i] != b[i];
			}
		}
		check(close && differ <= n * w / 100, neox ? "kernel_kv_rotate_q8 = kv_shift_rows (q8_0, NeoX)" :
		    "kernel_kv_rotate_q8 = kv_shift_rows (q8_0, pairs)", differ, n * w / 100);
	}
out:
	cudaFree(dfr); cudaFree(ds); cudaFree(dd);
	free(src); free(cpu); free(got); free(f); free(a); free(b);
}

/*
 * The tiled prefill attention (attention_prefill) on the device against
 * plain attention in double (att_plain_ref) over an n-token chunk at
 * pos0, f16, f32 or Q8_0 cache with the same values (Q8_0: the
 * reference reads the rows' dequantised values); and attention_tokens,
 * the kernel it replaces, on the same data. Bound as device_attention's.
 */
static void
device_attention_tile(const struct att_ref_shape *s, bool f16, bool q8 = false)
{
	size_t nq = (size_t)s->n * s->n_head * s->hd, nk = (size_t)(s->pos0 + s->n) * s->n_kv * s->hd;
	float *q = (float *)malloc(nq * 4), *k = (float *)malloc(nk * 4), *v = (float *)malloc(nk * 4);
	float *out = (float *)malloc(nq * 4), *dq = NULL, *dout = NULL;
	uint16_t *kh = (uint16_t *)malloc(nk * 2), *vh = (uint16_t *)malloc(nk * 2);
	double *ref = (double *)malloc(nq * sizeof *ref);
	void *dk = NULL, *dv = NULL;
	int *dpos = NULL;
	int kv_dim = s->n_kv * s->hd;
	size_t rb8 = kvc_kv_row_bytes(GGML_TYPE_Q8_0, kv_dim);
	size_t cb = q8 ? (size_t)(s->pos0 + s->n) * rb8 : nk * (f16 ? 2 : 4);
	uint8_t *k8 = (uint8_t *)malloc(q8 ? cb : 1), *v8 = (uint8_t *)malloc(q8 ? cb : 1);
	char what[160];

	for (size_t i = 0; i < nq; i++)
		q[i] = (float)(4 * rnd());
	for (size_t i = 0; i < nk; i++) {
		kh[i] = q_f32_to_fp16((float)rnd());
		vh[i] = q_f32_to_fp16((float)rnd());
		k[i] = q_fp16_to_f32(kh[i]);
		v[i] = q_fp16_to_f32(vh[i]);
	}
	for (int p = 0; q8 && p < s->pos0 + s->n; p++) {
		/* Q8_0 rows (the CPU's rounding); the reference reads their values */
		kvc_kv_row_from_f32(GGML_TYPE_Q8_0, k + (size_t)p * kv_dim, k8 + p * rb8, kv_dim);
		kvc_kv_row_from_f32(GGML_TYPE_Q8_0, v + (size_t)p * kv_dim, v8 + p * rb8, kv_dim);
		kvc_kv_row_to_f32(GGML_TYPE_Q8_0, k8 + p * rb8, k + (size_t)p * kv_dim, kv_dim);
		kvc_kv_row_to_f32(GGML_TYPE_Q8_0, v8 + p * rb8, v + (size_t)p * kv_dim, kv_dim);
	}
	att_plain_ref(s, q, k, v, ref);
	if (!ok_cuda(cudaMalloc(&dq, nq * 4), "cudaMalloc") || !ok_cuda(cudaMalloc(&dout, nq * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dk, cb), "cudaMalloc") || !ok_cuda(cudaMalloc(&dv, cb), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dpos, 4), "cudaMalloc"))
		goto out;
	cudaMemcpy(dq, q, nq * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dk, q8 ? (void *)k8 : f16 ? (void *)kh : (void *)k, cb, cudaMemcpyHostToDevice);
	cudaMemcpy(dv, q8 ? (void *)v8 : f16 ? (void *)vh : (void *)v, cb, cudaMemcpyHostToDevice);
	cudaMemcpy(dpos, &s->pos0, 4, cudaMemcpyHostToDevice);
	for (int way = 0; way < 2; way++) {
		struct att_args a = { dq, dk, dv, f16 && !q8, dout, NULL, s->n_head, s->n_kv, s->hd, dpos, s->scale,
			s->cap, s->win, NULL, NULL, q8 };
		double worst = 0;

		if (way == 0)
			attention_prefill(0, &a, s->n);
		else
			attention_tokens(0, &a, s->n);
		snprintf(what, sizeof what, "%s n %d, %d/%d heads of %d, %s cache, pos0 %d, win %d, cap %g",
		    way == 0 ? "attention_prefill (tiles)" : "attention_tokens", s->n, s->n_head, s->n_kv, s->hd,
		    q8 ? "q8_0" : f16 ? "f16" : "f32", s->pos0, s->win, s->cap);
		if (!ok_cuda(cudaDeviceSynchronize(), what))
			goto out;
		cudaMemcpy(out, dout, nq * 4, cudaMemcpyDeviceToHost);
		for (size_t i = 0; i < nq; i++)
			worst = fmax(worst, fabs(out[i] - ref[i]));
		printf("device %s: worst %.2e\n", what, worst);
		check(worst <= 2e-5, what, worst, 2e-5);
	}
out:
	cudaFree(dq); cudaFree(dout); cudaFree(dk); cudaFree(dv); cudaFree(dpos);
	free(q); free(k); free(v); free(out); free(kh); free(vh); free(ref); free(k8); free(v8);
}

/*
 * forward_multi's attention (attention_rows) on the device: n_rows
 * sequences, each one token at its own position (1 .. 900, one inside its
 * first split) over its own f16 (or Q8_0) cache, split as
 * att_multi_splits says for 132 SMs, against each sequence alone through
 * attention_decode (the one-token kernel, same splits, same cache type;
 * device_attention checks that one against a float64 softmax): equal
 * within float rounding of the split merge.
 */
static void
device_attention_rows(int hd, int n_head, int n_kv, int n_rows, int win, bool q8 = false)
{
	int kv_dim = n_kv * hd, nq = n_head * hd, maxp = 0, nz;
	int *pos = (int *)malloc(n_rows * sizeof *pos), *dpos = NULL;
	void **dk = (void **)calloc(n_rows, sizeof *dk), **dv = (void **)calloc(n_rows, sizeof *dv), **dtab = NULL;
	float *q = (float *)malloc((size_t)n_rows * nq * 4), *o1 = (float *)malloc((size_t)n_rows * nq * 4);
	float *o2 = (float *)malloc((size_t)nq * 4), *dq = NULL, *dout = NULL, *dpart = NULL;
	double worst = 0;
	char what[128];

	for (int t = 0; t < n_rows; t++) {
		pos[t] = t == 0 ? 1 : (int)(450 + 450 * rnd());
		maxp = pos[t] + 1 > maxp ? pos[t] + 1 : maxp;
	}
	nz = att_multi_splits(132, n_kv, n_rows, maxp);
	for (int i = 0; i < n_rows * nq; i++)
		q[i] = (float)rnd();
	if (!ok_cuda(cudaMalloc(&dq, (size_t)n_rows * nq * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dout, (size_t)n_rows * nq * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dpart, (size_t)ATT_MAX_SPLIT * n_head * (hd + 2) * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dpos, (n_rows + 1) * 4), "cudaMalloc") ||
	    !ok_cuda(cudaMalloc(&dtab, 2 * n_rows * sizeof(void *)), "cudaMalloc"))
		goto out;
	for (int t = 0; t < n_rows; t++) {
		size_t rb = q8 ? kvc_kv_row_bytes(GGML_TYPE_Q8_0, kv_dim) : (size_t)kv_dim * 2;
		size_t cb = (size_t)(pos[t] + 1) * rb;
		uint16_t *h = (uint16_t *)malloc(cb);
		float *f = (float *)malloc((size_t)kv_dim * 4);

		if (!ok_cuda(cudaMalloc(&dk[t], cb), "cudaMalloc") || !ok_cuda(cudaMalloc(&dv[t], cb), "cudaMalloc")) {
			free(h);
			free(f);
			goto out;
		}
		for (int kv = 0; kv < 2; kv++) {
			if (q8) {
				/* Q8_0 rows as the CPU writes them */
				for (int p = 0; p <= pos[t]; p++) {
					for (int i = 0; i < kv_dim; i++)
						f[i] = (float)rnd();
					kvc_kv_row_from_f32(GGML_TYPE_Q8_0, f, (uint8_t *)h + p * rb, kv_dim);
				}
			} else {
				for (size_t i = 0; i < cb / 2; i++)
					h[i] = q_f32_to_fp16((float)rnd());
			}
			cudaMemcpy(kv ? dv[t] : dk[t], h, cb, cudaMemcpyHostToDevice);
		}
		free(h);
		free(f);
	}
	cudaMemcpy(dq, q, (size_t)n_rows * nq * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dpos, pos, n_rows * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dtab, dk, n_rows * sizeof(void *), cudaMemcpyHostToDevice);
	cudaMemcpy(dtab + n_rows, dv, n_rows * sizeof(void *), cudaMemcpyHostToDevice);
	{
		struct att_args a = { dq, NULL, NULL, !q8, dout, dpart, n_head, n_kv, hd, dpos, 1.f / sqrtf((float)hd),
			0.f, win, dtab, dtab + n_rows, q8 };

		attention_rows(0, &a, nz, n_rows);
	}
	snprintf(what, sizeof what, "attention_rows: %d rows, hd %d, %d/%d heads, win %d, %d splits, %s cache",
	    n_rows, hd, n_head, n_kv, win, nz, q8 ? "q8_0" : "f16");
	if (!ok_cuda(cudaDeviceSynchronize(), what))
		goto out;
	cudaMemcpy(o1, dout, (size_t)n_rows * nq * 4, cudaMemcpyDeviceToHost);
	for (int t = 0; t < n_rows; t++) {
		struct att_args a = { dq + (size_t)t * nq, dk[t], dv[t], !q8, dout, dpart, n_head, n_kv, hd,
			dpos + n_rows, 1.f / sqrtf((float)hd), 0.f, win, NULL, NULL, q8 };

		cudaMemcpy(dpos + n_rows, &pos[t], 4, cudaMemcpyHostToDevice);
		attention_decode(0, &a, nz);
		if (!ok_cuda(cudaDeviceSynchronize(), "attention_decode"))
			goto out;
		cudaMemcpy(o2, dout, (size_t)nq * 4, cudaMemcpyDeviceToHost);
		for (int i = 0; i < nq; i++)
			worst = fmax(worst, fabs(o1[(size_t)t * nq + i] - o2[i]));
	}
	printf("device %s: worst %.2e against one at a time\n", what, worst);
	check(worst <= 1e-6, what, worst, 1e-6);
out:
	for (int t = 0; t < n_rows; t++) {
		cudaFree(dk[t]);
		cudaFree(dv[t]);
	}
	cudaFree(dq); cudaFree(dout); cudaFree(dpart); cudaFree(dpos); cudaFree(dtab);
	free(pos); free(dk); free(dv); free(q); free(o1); free(o2);
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
	bool i8 = mv_i8_supported(t);
	double tol = i8 ? 2 * sqrt(32.0 / 12) / 127 * (t == GGML_TYPE_Q8_0 ? 1 : 2) * 4 : 1e-4;
	int n_sm = 1;
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
			make_row(t, src, w + r * rb, n_in);
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
	cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0);
	if (i8) {
		const struct mv_epi none = { NULL, false };

		quantize_x(0, dx, dq, n_in);
		mv_i8(0, t, dw, rb, dq, dy, n_in, n_out, n_sm, none);
		if (!ok_cuda(cudaDeviceSynchronize(), what))
			goto out;
		host_quantize_x(x, hq, n_in);
		cudaMemcpy(hq2, dq, (n_in / 32) * sizeof *hq2, cudaMemcpyDeviceToHost);
		check(memcmp(hq, hq2, (n_in / 32) * sizeof *hq) == 0, "kernel_quantize_x = the host's", 0, 0);
	} else if (t == GGML_TYPE_F16 && n_in % 8 == 0) {
		cudaFuncSetAttribute(kernel_matvec_f16, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(n_in * 4));
		kernel_matvec_f16<<<grid_blocks(n_out, 8), 256, n_in * 4>>>(dw, rb, dx, dy, n_in, n_out);
	} else {
		cudaFuncSetAttribute(kernel_matvec, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(n_in * 4));
		kernel_matvec<<<grid_blocks(n_out, 8), 256, n_in * 4>>>(t, dw, rb, dx, dy, n_in, n_out, dev_block(t));
	}
	if (!ok_cuda(cudaDeviceSynchronize(), what))
		goto out;
	cudaMemcpy(y, dy, n_out * 4, cudaMemcpyDeviceToHost);
	for (int r = 0; r < n_out; r++)
		worst = fmax(worst, fabs(y[r] - ref[r]) / ss);
	printf("device %s: matvec worst %.2e of rms (bound %.2e)\n", what, worst, tol);
	check(worst <= tol, what, worst, tol);
	if (i8) {
		device_fused(t, dw, rb, dx, dq, dy, y, n_in, n_out, n_sm);
		device_qkv(t, n_in, n_sm);
		device_multi(t, dw, rb, n_in, n_out, n_sm);
	}
	/* prefill's dequantisation: every element as q_dequant_row gives it, rounded to f16 */
	if (t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_BF16) {
		uint16_t *h = (uint16_t *)malloc((size_t)n_in * n_out * 2);
		bool same = true;

		kernel_dequant_f16<<<1024, DQ_THREADS>>>(t, dw, rb, dd, n_in, n_out, dev_block(t));
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
		{ GGML_TYPE_Q4_0, 896, 2 }, { GGML_TYPE_Q4_1, 896, 2 },
		{ GGML_TYPE_Q5_0, 896, 2 }, { GGML_TYPE_Q5_1, 4096, 2 },
		{ GGML_TYPE_Q2_K, 512, 2 }, { GGML_TYPE_Q3_K, 768, 2 },
		{ GGML_TYPE_Q4_K, 256, 2 }, { GGML_TYPE_Q4_K, 3584, 2 },
		{ GGML_TYPE_Q5_K, 1024, 2 }, { GGML_TYPE_Q6_K, 3584, 2 },
	};

	check(!mv_i8_supported(GGML_TYPE_F16) && !mv_i8_supported(GGML_TYPE_IQ4_NL) &&
	    mv_i8_supported(GGML_TYPE_Q6_K), "mv_i8_supported", 0, 0);

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
		{
			enum gguf_dtype t = cases[i].t;
			bool offsets = t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_0 ||
			    t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K;
			double now, old;

			rounded_err(t, cases[i].n_in, 16, &now, &old);
			printf("%s n_in %lld: against w . (rounded x) %.2e of sum |w x| (bound 1e-5); with exact "
			    "block sums %.2e\n", gguf_dtype_name(t), (long long)cases[i].n_in, now, old);
			snprintf(what, sizeof what, "%s %lld wide: the dot of the rounded x", gguf_dtype_name(t),
			    (long long)cases[i].n_in);
			check(now <= 1e-5, what, now, 1e-5);
			/* the offset types must tell the two sums apart, or the check above could not fail */
			if (offsets)
				check(old > 2e-5, "exact block sums are not caught", old, 2e-5);
		}
	}
	{
		static const enum gguf_dtype all[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16,
			GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
			GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };
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
			device_kv_rotate();
			/* GQA groups of 7 (Qwen2.5-7B), 4 (Llama-3.1-8B), head 256 (gemma3) and 96 (phi3) */
			device_attention(128, 28, 4, true, 1000, 0, 0.f, att_decode_splits(132, 4, 32768));
			device_attention(128, 32, 8, false, 700, 0, 0.f, 32);
			device_attention(256, 4, 1, true, 300, 128, 0.f, 8);
			device_attention(96, 32, 32, true, 77, 0, 0.f, 3);
			device_attention(64, 14, 2, true, 5, 0, 50.f, 32);	/* most splits empty */
			/* 48-wide heads and groups of 16: the per-head kernel */
			device_attention(48, 16, 1, false, 200, 0, 0.f, 4);
			device_attention(128, 16, 2, false, 2000, 512, 30.f, 16);
			/* the tiled prefill: the test_cuda_plan shapes, and a long chunk after a long history */
			static const struct att_ref_shape tiles[] = {
				{ 40, 4, 1, 64, 0, 0.125f, 0, 0 }, { 37, 7, 1, 128, 100, 0.0884f, 0, 0 },
				{ 50, 8, 2, 256, 30, 0.0625f, 50.f, 16 }, { 33, 2, 2, 96, 5, 0.102f, 0, 0 },
				{ 300, 28, 4, 128, 1000, 0.0884f, 0, 0 }, { 200, 16, 2, 256, 700, 0.0625f, 30.f, 512 },
			};
			for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++)
				device_attention_tile(&tiles[i], i % 2 == 0);
			/* forward_multi's rows: GQA kernel shapes, and 48-wide heads (the per-head kernel) */
			device_attention_rows(128, 28, 4, 8, 0);
			device_attention_rows(256, 8, 4, 3, 128);
			device_attention_rows(64, 14, 2, 40, 0);
			device_attention_rows(48, 16, 1, 5, 0);
			/* Q8_0 caches: the GQA kernel's 2-byte loads (64, 128, 256), value by value (96, 48) */
			device_attention(128, 28, 4, false, 1000, 0, 0.f, att_decode_splits(132, 4, 32768), true);
			device_attention(64, 14, 2, false, 300, 0, 50.f, 8, true);
			device_attention(256, 4, 1, false, 300, 128, 0.f, 8, true);
			device_attention(96, 32, 32, false, 77, 0, 0.f, 3, true);
			device_attention(48, 16, 2, false, 200, 0, 0.f, 4, true);	/* a head starting mid-block */
			device_kv_store_q8(128);
			device_kv_store_q8(896);
			device_kv_rotate_q8();
			/* Q8_0 caches in cuda4's paths: the tiles, forward_multi's rows' attention and store */
			for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++)
				device_attention_tile(&tiles[i], false, true);
			device_attention_rows(128, 28, 4, 8, 0, true);
			device_attention_rows(256, 8, 4, 3, 128, true);
			device_attention_rows(96, 16, 2, 5, 0, true);	/* value by value (PL 3) */
			device_attention_rows(48, 16, 2, 5, 0, true);	/* the per-head kernel, a head mid-block */
			device_kv_store_q8_rows(128);
			device_kv_store_q8_rows(896);
			device_sample(32000, 200);
			device_sample(151936, 40);
		}
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
