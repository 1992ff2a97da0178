/*
 * matmul.cu: the CUDA backend's matrix products outside the int8 decode
 * kernels: every block type decoded in registers (block_dot, which also
 * dequantises for prefill and the embedding), the F16 and generic
 * matrix-vector kernels, and prefill's cuBLAS GEMM with its F16/BF16
 * conversions of the activations (cu_matmul chooses among them and
 * mv_i8.cu).
 */
#include "cuda_int.h"
#include "dev_util.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__device__ static inline float
h2f(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

__device__ static inline uint16_t
ld16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

__device__ static inline void
k_scale_min(int j, const uint8_t *q, float *sc, float *mn)
{
	if (j < 4) {
		*sc = (float)(q[j] & 63);
		*mn = (float)(q[j + 4] & 63);
	} else {
		*sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*mn = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

/*
 * One function per block type: the dot of block b of a row with x, and
 * when out != NULL the block's values written there. The float types use
 * 32-element pseudo-blocks.
 */
__device__ static inline float
bdot_f32(const uint8_t *row, int64_t b, const float *x, float *out)
{
	const float *w = (const float *)row + b * 32;
	float s = 0.f;

	for (int i = 0; i < 32; i++) {
		if (out) out[i] = w[i];
		s += w[i] * x[i];
	}
	return s;
}

__device__ static inline float
bdot_f16(const uint8_t *row, int64_t b, const float *x, float *out)
{
	const uint16_t *w = (const uint16_t *)row + b * 32;
	float s = 0.f;

	for (int i = 0; i < 32; i++) {
		float f = h2f(w[i]);
		if (out) out[i] = f;
		s += f * x[i];
	}
	return s;
}

__device__ static inline float
bdot_bf16(const uint8_t *row, int64_t b, const float *x, float *out)
{
	const uint16_t *w = (const uint16_t *)row + b * 32;
	float s = 0.f;

	for (int i = 0; i < 32; i++) {
		float f = __uint_as_float((uint32_t)w[i] << 16);
		if (out) out[i] = f;
		s += f * x[i];
	}
	return s;
}

__device__ static inline float
bdot_q8_0(const uint8_t *row, int64_t b, const float *x, float *out)
{
	const uint8_t *p = row + b * 34;
	float d = h2f(ld16(p));
	const int8_t *q = (const int8_t *)(p + 2);
	float s = 0.f;

	for (int i = 0; i < 32; i++) {
		float f = d * q[i];
		if (out) out[i] = f;
		s += f * x[i];
	}
	return s;
}

__device__ static inline float
bdot_q4_0(const uint8_t *row, int64_t b, const float *x, float *out)
{
	const uint8_t *p = row + b * 18;
	float d = h2f(ld16(p));
	const uint8_t *q = p + 2;
	float s = 0.f;

	for (int i = 0; i < 16; i++) {
		float lo = d * ((q[i] & 0xF) - 8), hi = d * ((q[i] >> 4) - 8);
		if (out) { out[i] = lo; out[i + 16] = hi; }
		s += lo * x[i] + hi * x[i + 16];
	}
	return s;
}

/*
 * Q4_1: d m qs (20 bytes); Q5_0: d qh qs (22); Q5_1: d m qh qs (24): 4- or
 * 5-bit levels, with or without an offset m.
 */
__device__ static inline float
bdot_q4_1_q5(int type, const uint8_t *row, int64_t b, const float *x, float *out)
{
	bool has_m = type != GGML_TYPE_Q5_0, q5 = type != GGML_TYPE_Q4_1;
	const uint8_t *p = row + b * (type == GGML_TYPE_Q4_1 ? 20 : type == GGML_TYPE_Q5_0 ? 22 : 24);
	const uint8_t *qh = p + (has_m ? 4 : 2), *q = qh + (q5 ? 4 : 0);
	float d = h2f(ld16(p)), m = has_m ? h2f(ld16(p + 2)) : 0.f;
	uint32_t hw = q5 ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
	    (uint32_t)qh[3] << 24 : 0;
	int sub = type == GGML_TYPE_Q5_0 ? 16 : 0;
	float s = 0.f;

	for (int i = 0; i < 16; i++) {
		float lo = d * (float)((int)((q[i] & 0xF) | ((hw >> i) & 1) << 4) - sub) + m;
		float hi = d * (float)((int)((q[i] >> 4) | ((hw >> (i + 16)) & 1) << 4) - sub) + m;
		if (out) { out[i] = lo; out[i + 16] = hi; }
		s += lo * x[i] + hi * x[i + 16];
	}
	return s;
}

/* Q3_K: hmask[32] qs[64] scales[12] d (110 bytes); value 128h + 32j + l (quant/quant.h) */
__device__ static inline float
bdot_q3_k(const uint8_t *row, int64_t b, const float *x, float *out)
{
	const uint8_t *p = row + b * 110, *hm = p, *qs = p + 32, *sc = p + 96;
	float d = h2f(ld16(p + 108));
	float s = 0.f;

	for (int e = 0; e < 256; e++) {
		int h = e / 128, j = (e % 128) / 32, l = e % 32, k = e / 16;
		int s6 = ((k < 8 ? sc[k] & 15 : sc[k - 8] >> 4) | ((sc[8 + k % 4] >> (2 * (k / 4))) & 3) << 4) - 32;
		int lv = ((qs[32 * h + l] >> (2 * j)) & 3) - (((hm[l] >> (4 * h + j)) & 1) ? 0 : 4);
		float f = d * (float)s6 * (float)lv;
		if (out) out[e] = f;
		s += f * x[e];
	}
	return s;
}

__device__ static inline float
bdot_q4_k(const uint8_t *row, int64_t b, const float *x, float *out)
{
	const uint8_t *p = row + b * 144;
	float d = h2f(ld16(p)), dmin = h2f(ld16(p + 2));
	const uint8_t *scales = p + 4, *q = p + 16;
	float s = 0.f;

	for (int g = 0; g < 4; g++) {
		float sc1, m1, sc2, m2;
		k_scale_min(2 * g, scales, &sc1, &m1);
		k_scale_min(2 * g + 1, scales, &sc2, &m2);
		for (int l = 0; l < 32; l++) {
			float lo = d * sc1 * (q[32 * g + l] & 0xF) - dmin * m1;
			float hi = d * sc2 * (q[32 * g + l] >> 4) - dmin * m2;
			if (out) { out[64 * g + l] = lo; out[64 * g + 32 + l] = hi; }
			s += lo * x[64 * g + l] + hi * x[64 * g + 32 + l];
		}
	}
	return s;
}

__device__ static inline float
bdot_q5_k(const uint8_t *row, int64_t b, const float *x, float *out)
{
	const uint8_t *p = row + b * 176;
	float d = h2f(ld16(p)), dmin = h2f(ld16(p + 2));
	const uint8_t *scales = p + 4, *qh = p + 16, *q = p + 48;
	float s = 0.f;

	for (int g = 0; g < 4; g++) {
		float sc1, m1, sc2, m2;
		k_scale_min(2 * g, scales, &sc1, &m1);
		k_scale_min(2 * g + 1, scales, &sc2, &m2);
		for (int l = 0; l < 32; l++) {
			int ql = q[32 * g + l];
			int h1 = (qh[l] >> (2 * g)) & 1, h2 = (qh[l] >> (2 * g + 1)) & 1;
			float lo = d * sc1 * ((ql & 0xF) + 16 * h1) - dmin * m1;
			float hi = d * sc2 * ((ql >> 4) + 16 * h2) - dmin * m2;
			if (out) { out[64 * g + l] = lo; out[64 * g + 32 + l] = hi; }
			s += lo * x[64 * g + l] + hi * x[64 * g + 32 + l];
		}
	}
	return s;
}

__device__ static inline float
bdot_q6_k(const uint8_t *row, int64_t b, const float *x, float *out)
{
	const uint8_t *p = row + b * 210;
	const uint8_t *ql0 = p, *qh0 = p + 128;
	const int8_t *sc0 = (const int8_t *)(p + 192);
	float d = h2f(ld16(p + 208));
	float s = 0.f;

	for (int h = 0; h < 2; h++) {
		const uint8_t *ql = ql0 + 64 * h, *qh = qh0 + 32 * h;
		const int8_t *sc = sc0 + 8 * h;
		const float *xx = x + 128 * h;
		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			float v1 = d * sc[is + 0] * (((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
			float v2 = d * sc[is + 2] * (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
			float v3 = d * sc[is + 4] * (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
			float v4 = d * sc[is + 6] * (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
			if (out) {
				out[128 * h + l] = v1; out[128 * h + l + 32] = v2;
				out[128 * h + l + 64] = v3; out[128 * h + l + 96] = v4;
			}
			s += v1 * xx[l] + v2 * xx[l + 32] + v3 * xx[l + 64] + v4 * xx[l + 96];
		}
	}
	return s;
}

/* Q2_K: scales[16] qs[64] d dmin (84 bytes); value 128n + 32j + l (quant/quant_iq.h) */
__device__ static inline float
bdot_q2_k(const uint8_t *row, int64_t b, const float *x, float *out)
{
	const uint8_t *p = row + b * 84, *sc = p, *qs = p + 16;
	float d = h2f(ld16(p + 80)), dmin = h2f(ld16(p + 82));
	float s = 0.f;

	for (int e = 0; e < 256; e++) {
		int n = e / 128, j = (e % 128) / 32, l = e % 32, k = e / 16;
		float f = d * (float)(sc[k] & 15) * (float)((qs[32 * n + l] >> (2 * j)) & 3) -
		    dmin * (float)(sc[k] >> 4);
		if (out) out[e] = f;
		s += f * x[e];
	}
	return s;
}

/*
 * Dot of one block (block index b of a row) with x; also usable to
 * dequantise by passing out != NULL. One code path serves every type.
 */
__device__ static float
block_dot(int type, const uint8_t *row, int64_t b, const float *x, float *out)
{
	switch (type) {
	case GGML_TYPE_F32: return bdot_f32(row, b, x, out);
	case GGML_TYPE_F16: return bdot_f16(row, b, x, out);
	case GGML_TYPE_BF16: return bdot_bf16(row, b, x, out);
	case GGML_TYPE_Q8_0: return bdot_q8_0(row, b, x, out);
	case GGML_TYPE_Q4_0: return bdot_q4_0(row, b, x, out);
	case GGML_TYPE_Q4_1:
	case GGML_TYPE_Q5_0:
	case GGML_TYPE_Q5_1: return bdot_q4_1_q5(type, row, b, x, out);
	case GGML_TYPE_Q2_K: return bdot_q2_k(row, b, x, out);
	case GGML_TYPE_Q3_K: return bdot_q3_k(row, b, x, out);
	case GGML_TYPE_Q4_K: return bdot_q4_k(row, b, x, out);
	case GGML_TYPE_Q5_K: return bdot_q5_k(row, b, x, out);
	case GGML_TYPE_Q6_K: return bdot_q6_k(row, b, x, out);
	}
	return 0.f;
}

/* Elements per block as block_dot sees them (32 for the float types). */
static int
dev_block(int type)
{
	int64_t b = gguf_dtype_block((enum gguf_dtype)type);
	return b == 1 ? 32 : (int)b;
}

/*
 * Matrix-vector: y[r] = W[r] . x for one token. One warp per row; x is
 * staged in shared memory (n_in floats). Reads each weight byte once:
 * bytes moved = n_out * row_bytes + n_in * 4.
 * grid: ceil(n_out / 8) blocks of 256 threads (8 warps).
 */
__global__ static void
kernel_matvec(int type, const uint8_t *W, size_t row_bytes, const float *x,
    float *y, int64_t n_in, int64_t n_out, int blk)
{
	extern __shared__ __align__(16) float xs[];
	int64_t r = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	float s = 0.f;

	for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x)
		xs[i] = x[i];
	__syncthreads();
	if (r >= n_out)
		return;
	for (int64_t b = lane; b < n_in / blk; b += 32)
		s += block_dot(type, W + r * row_bytes, b, xs + b * blk, NULL);
	for (int o = 16; o > 0; o /= 2)
		s += __shfl_down_sync(0xffffffffu, s, o);
	if (lane == 0)
		y[r] = s;
}

/* Stage x (n_in floats) in shared memory with 16-byte loads; n_in % 4 == 0. */
__device__ static inline void
stage_x(float *xs, const float *x, int64_t n_in)
{
	for (int64_t i = threadIdx.x; i < n_in / 4; i += blockDim.x)
		((float4 *)xs)[i] = ((const float4 *)x)[i];
	__syncthreads();
}

/*
 * F16 matrix-vector with 16-byte loads: one warp per row; in step k lane l
 * reads 16-byte chunk 32k + l of the row (8 halves), so each load
 * instruction of the warp covers 512 contiguous bytes, and four steps are
 * issued before their first use. Needs n_in % 8 == 0 (rows then start
 * 16-byte aligned). grid ceil(n_out / 8), block 256 (8 warps), dynamic
 * shared memory n_in * 4 (x). Bytes: n_out * n_in * 2 + n_in * 4.
 */
#define MV_UNROLL 4
__global__ static void
kernel_matvec_f16(const uint8_t *W, size_t row_bytes, const float *x, float *y,
    int64_t n_in, int64_t n_out)
{
	extern __shared__ __align__(16) float xs[];
	int64_t r = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	int64_t n_chunk = n_in / 8;
	float s = 0.f;

	stage_x(xs, x, n_in);
	if (r >= n_out)
		return;
	const uint4 *row = (const uint4 *)(W + r * row_bytes);
	for (int64_t c0 = lane; c0 < n_chunk; c0 += 32 * MV_UNROLL) {
		uint4 v[MV_UNROLL];
#pragma unroll
		for (int u = 0; u < MV_UNROLL; u++)
			if (c0 + 32 * u < n_chunk)
				v[u] = __ldg(row + c0 + 32 * u);
#pragma unroll
		for (int u = 0; u < MV_UNROLL; u++) {
			int64_t c = c0 + 32 * u;
			if (c >= n_chunk)
				break;
			const __half2 *h = (const __half2 *)&v[u];
			const float4 *xv = (const float4 *)(xs + 8 * c);
			float4 x0 = xv[0], x1 = xv[1];
			float2 f0 = __half22float2(h[0]), f1 = __half22float2(h[1]);
			float2 f2 = __half22float2(h[2]), f3 = __half22float2(h[3]);
			s += f0.x * x0.x + f0.y * x0.y + f1.x * x0.z + f1.y * x0.w +
			    f2.x * x1.x + f2.y * x1.y + f3.x * x1.z + f3.y * x1.w;
		}
	}
	s = warp_sum(s);
	if (lane == 0)
		y[r] = s;
}

/*
 * Dequantise rows [0, n_out) of W to f16 for prefill's GEMM. The rows'
 * blocks, flattened, are contiguous in the output (n_in is a whole number
 * of blocks), so a block of DQ_THREADS threads takes DQ_THREADS
 * consecutive ones: each thread decodes one into shared memory, then the
 * block writes the whole run with 16-byte stores (a thread writing its own
 * block's 64..512 bytes would leave every store instruction scattered).
 * grid 1024 (grid-stride), block DQ_THREADS, static shared memory
 * DQ_THREADS * 256 * 2 = 32 KB. Bytes: n_out * row_bytes read, n_out *
 * n_in * 2 written.
 */
#define DQ_THREADS 64
__global__ static void __launch_bounds__(DQ_THREADS)
kernel_dequant_f16(int type, const uint8_t *W, size_t row_bytes, __half *out,
    int64_t n_in, int64_t n_out, int blk)
{
	__shared__ __align__(16) __half sh[DQ_THREADS * 256];
	float buf[256];
	int64_t nb = n_in / blk, total = n_out * nb;

	for (int64_t c0 = (int64_t)blockIdx.x * DQ_THREADS; c0 < total; c0 += (int64_t)gridDim.x * DQ_THREADS) {
		int64_t i = c0 + threadIdx.x;
		int nc = (int)(total - c0 < DQ_THREADS ? total - c0 : DQ_THREADS);

		if (i < total) {
			block_dot(type, W + i / nb * row_bytes, i % nb, buf, buf);
			for (int j = 0; j < blk; j++)
				sh[threadIdx.x * blk + j] = __float2half(buf[j]);
		}
		__syncthreads();
		uint4 *dst = (uint4 *)(out + c0 * blk);
		const uint4 *src = (const uint4 *)sh;
		for (int k = threadIdx.x; k < nc * blk / 8; k += DQ_THREADS)
			dst[k] = src[k];
		__syncthreads();	/* sh is refilled by the next run */
	}
}

/*
 * Embedding rows for n tokens: out[t] = dequant(E[tokens[t]]) * scale
 * (gemma: sqrt(n_embd)), plus row *pos0 + t (per_row, forward_multi's
 * rows: pos0[t]) of the learned positions P when P != NULL (gpt2). grid
 * n, block 64. Bytes: n rows of E (and P) read, n * n_embd * 4 written.
 */
__global__ static void
kernel_embed(int type, const uint8_t *E, size_t row_bytes, const int32_t *tokens,
    float *out, int64_t n_embd, int blk, float scale, int ptype, const uint8_t *P,
    size_t prow_bytes, int pblk, const int *pos0, bool per_row)
{
	float buf[256], pb[256];
	int t = blockIdx.x;
	const uint8_t *row = E + (size_t)tokens[t] * row_bytes;

	for (int64_t b = threadIdx.x; b < n_embd / blk; b += blockDim.x) {
		block_dot(type, row, b, buf, buf);
		for (int j = 0; j < blk; j++)
			out[(int64_t)t * n_embd + b * blk + j] = buf[j] * scale;
	}
	if (P == NULL)
		return;
	__syncthreads();	/* the same elements, other threads when pblk != blk */
	row = P + (size_t)(per_row ? pos0[t] : *pos0 + t) * prow_bytes;
	for (int64_t b = threadIdx.x; b < n_embd / pblk; b += blockDim.x) {
		block_dot(ptype, row, b, pb, pb);
		for (int j = 0; j < pblk; j++)
			out[(int64_t)t * n_embd + b * pblk + j] += pb[j];
	}
}

/* The types cuBLAS multiplies as stored (the others are dequantised to F16 first). */
bool
cu_matmul_native(int type)
{
	return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16;
}

/* The matvec kernels' dynamic shared memory (x) can exceed the default 48 KB; the SM count. */
int
cu_set_matvec_smem(struct cuda_ctx *c, char *err, size_t errlen)
{
	struct cudaDeviceProp prop;
	size_t need = (size_t)c->max_n_in * sizeof(float);

	CUDA_CHECK(cudaGetDeviceProperties(&prop, c->dev), err, errlen);
	c->n_sm = prop.multiProcessorCount;	/* the int8 kernels' split-K (launch_plan.c) */
	if (need > prop.sharedMemPerBlockOptin) {
		kvc_err(err, errlen, "cuda: matrices %lld wide need %zu bytes of shared memory, the device has %zu",
		    (long long)c->max_n_in, need, (size_t)prop.sharedMemPerBlockOptin);
		return KVC_EUNSUPPORTED;
	}
	CUDA_CHECK(cudaFuncSetAttribute(kernel_matvec, cudaFuncAttributeMaxDynamicSharedMemorySize,
	    (int)need), err, errlen);
	CUDA_CHECK(cudaFuncSetAttribute(kernel_matvec_f16, cudaFuncAttributeMaxDynamicSharedMemorySize,
	    (int)need), err, errlen);
	return KVC_OK;
}

/*
 * Rows of X (n_in floats each) to F16 for the GEMM, each divided by a power
 * of two s_t when its largest |x| reaches 2^14 (F16 ends at 65504, and
 * some models' FFN activations pass it), s_t kept in scale[t] for
 * kernel_unscale_rows; a power of two changes no significant bit. One block
 * of 256 threads per row, static shared memory 32 floats. Bytes: n * n_in
 * * 6 + n * 4.
 */
__global__ static void
kernel_f32_to_f16_scaled(const float *x, __half *y, float *scale, int64_t n_in)
{
	__shared__ float red[32];
	const float *xr = x + (int64_t)blockIdx.x * n_in;
	__half *yr = y + (int64_t)blockIdx.x * n_in;
	float mx = 0.f, s = 1.f;

	for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x)
		mx = fmaxf(mx, fabsf(xr[i]));
	for (int off = 16; off > 0; off /= 2)
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
	if (threadIdx.x % 32 == 0)
		red[threadIdx.x / 32] = mx;
	__syncthreads();
	for (int w = 0; w < (int)blockDim.x / 32; w++)
		mx = fmaxf(mx, red[w]);
	if (mx >= 16384.f && mx <= 3.0e38f) {	/* inf or NaN stays as it is */
		int e;
		frexpf(mx, &e);			/* mx < 2^e */
		s = ldexpf(1.f, e - 14);	/* mx / s < 2^14 */
	}
	for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x)
		yr[i] = __float2half(xr[i] / s);
	if (threadIdx.x == 0)
		scale[blockIdx.x] = s;
}

/*
 * Y row t (n_out floats, starting every ld) times scale[t]: undoes
 * kernel_f32_to_f16_scaled after the GEMM. grid (ceil(n_out / 256), n),
 * block 256. Bytes: 2 * n * n_out * 4.
 */
__global__ static void
kernel_unscale_rows(float *y, const float *scale, int64_t n_out, int64_t ld)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	float s = scale[blockIdx.y];

	if (i < n_out && s != 1.f)
		y[(int64_t)blockIdx.y * ld + i] *= s;
}

/* x to BF16 (same exponent range as f32: no scaling needed). Bytes: total * 6. */
__global__ static void
kernel_f32_to_bf16(const float *x, __nv_bfloat16 *y, int64_t total)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < total)
		y[i] = __float2bfloat16(x[i]);
}

/*
 * Y (n, n_out) = X (n, n_in) . W^T. One token: a matrix-vector kernel that
 * streams W once (16-byte loads for F16 and Q8_0 where the shape allows).
 * Several tokens: cublasGemmEx with f32 accumulation; F32 weights as they
 * are (X in f32), BF16 weights as they are (X in BF16), F16 weights as they
 * are with X scaled into F16 (kernel_f32_to_f16_scaled), the quantised
 * types dequantised into the F16 scratch first, as many rows at a time as
 * it holds (all of a layer matrix; the output matrix may take several).
 * same_x: X is the previous call's X, unchanged since (K and V after Q,
 * up after gate): its int8 copy, if that call made one, is reused.
 */
int
cu_matmul(struct cuda_ctx *c, const struct dweight *w, const float *X, float *Y, int n, bool same_x,
    char *err, size_t errlen)
{
	const uint8_t *W = (const uint8_t *)w->d;
	unsigned grid = grid_blocks(w->n_out, 8);
	size_t shmem = (size_t)w->n_in * sizeof(float);
	const struct mv_epi epi_none = { NULL, false };
	int rc;

	if (n == 1) {
		if (mv_i8_supported(w->type)) {
			/* int8: x quantised once for the products that share it (Q, K, V; gate, up) */
			if (!(same_x && c->xq_fresh && c->xq_n == w->n_in)) {
				quantize_x(c->stream, X, c->xq, w->n_in);
				LAUNCHED("kernel_quantize_x");
			}
			c->xq_fresh = true;
			c->xq_n = w->n_in;
			mv_i8(c->stream, w->type, W, w->row_bytes, c->xq, Y, w->n_in, w->n_out, c->n_sm, epi_none);
			LAUNCHED("kernel_mv_i8");
		} else if (w->type == GGML_TYPE_F16 && w->n_in % 8 == 0) {
			kernel_matvec_f16<<<grid, 256, shmem, c->stream>>>(W, w->row_bytes, X, Y,
			    w->n_in, w->n_out);
			LAUNCHED("kernel_matvec_f16");
			c->xq_fresh = false;
		} else {
			kernel_matvec<<<grid, 256, shmem, c->stream>>>(w->type, W, w->row_bytes, X, Y,
			    w->n_in, w->n_out, dev_block(w->type));
			LAUNCHED("kernel_matvec");
			c->xq_fresh = false;
		}
		return KVC_OK;
	}
	c->xq_fresh = false;
	if (mv_multi_passes(n) > 0 && mv_i8_supported(w->type)) {
		/* a short delta: every token's x to int8 (rows are contiguous), the matrix read once per 8 */
		quantize_x(c->stream, X, c->xq, (int64_t)n * w->n_in);
		LAUNCHED("kernel_quantize_x (tokens)");
		mv_i8_multi(c->stream, w->type, W, w->row_bytes, c->xq, Y, w->n_in, w->n_out, c->n_sm, n);
		LAUNCHED("kernel_mv_i8_multi");
		return KVC_OK;
	}
	const float one = 1.f, zero = 0.f;
	const void *B = c->xh;

	cudaDataType_t at = CUDA_R_16F;
	int64_t nx = (int64_t)n * w->n_in, rows = w->n_out;
	bool scaled = false;

	switch (w->type) {
	case GGML_TYPE_F32:
		at = CUDA_R_32F;
		B = X;
		break;
	case GGML_TYPE_BF16:
		at = CUDA_R_16BF;
		kernel_f32_to_bf16<<<grid_blocks(nx, 256), 256, 0, c->stream>>>(X, (__nv_bfloat16 *)c->xh, nx);
		LAUNCHED("kernel_f32_to_bf16");
		break;
	default:
		kernel_f32_to_f16_scaled<<<n, 256, 0, c->stream>>>(X, c->xh, c->xscale, w->n_in);
		LAUNCHED("kernel_f32_to_f16_scaled");
		scaled = true;
		if (w->type != GGML_TYPE_F16)
			rows = (int64_t)(c->ws_elems / (size_t)w->n_in);
		break;
	}
	if (rows < 1) {
		kvc_err(err, errlen, "cuda: no scratch for a %s matrix", gguf_dtype_name((enum gguf_dtype)w->type));
		return KVC_EUNSUPPORTED;
	}
	for (int64_t r0 = 0; r0 < w->n_out; r0 += rows) {
		int64_t nr = w->n_out - r0 < rows ? w->n_out - r0 : rows;
		const void *A = W + r0 * w->row_bytes;

		if (!cu_matmul_native(w->type)) {
			A = c->wscratch;
			kernel_dequant_f16<<<1024, DQ_THREADS, 0, c->stream>>>(w->type, W + r0 * w->row_bytes,
			    w->row_bytes, c->wscratch, w->n_in, nr, dev_block(w->type));
			LAUNCHED("kernel_dequant_f16");
		}
		/* column-major view: Y^T (n_out x n) = W (n_in x n_out)^T . X^T (n_in x n); rows r0.. of it */
		CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n, (int)w->n_in,
		    &one, A, at, (int)w->n_in, B, at, (int)w->n_in,
		    &zero, Y + r0, CUDA_R_32F, (int)w->n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		    err, errlen);
		LAUNCHED("cublasGemmEx");
	}
	if (scaled) {
		kernel_unscale_rows<<<dim3(grid_blocks(w->n_out, 256), n), 256, 0, c->stream>>>(Y, c->xscale,
		    w->n_out, w->n_out);
		LAUNCHED("kernel_unscale_rows");
	}
	return KVC_OK;
}


void
cu_embed(struct cuda_ctx *c, int n, const int *rows)
{
	const struct kvc_hparams *hp = &c->m->hp;

	kernel_embed<<<n, 64, 0, c->stream>>>(c->tok_embd.type, (const uint8_t *)c->tok_embd.d,
	    c->tok_embd.row_bytes, c->tokens, c->x, hp->n_embd, dev_block(c->tok_embd.type), hp->embd_scale,
	    c->pos_embd.type, (const uint8_t *)c->pos_embd.d, c->pos_embd.row_bytes,
	    c->pos_embd.d ? dev_block(c->pos_embd.type) : 32, rows ? rows : c->d_pos, rows != NULL);
}
