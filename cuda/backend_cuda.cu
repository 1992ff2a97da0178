/*
 * backend_cuda.cu: the CUDA backend behind kvc_backend_i (src/backend/backend.h).
 *
 * Weights are uploaded in their GGUF block formats (no whole-model
 * dequantisation). Decode (one token) runs one matrix-vector kernel per
 * weight type that dequantises in registers; prefill (several tokens)
 * dequantises one matrix at a time into an F16 scratch buffer and calls
 * cublasGemmEx on the tensor cores, the activations rounded to F16 after a
 * per-token power-of-two scale that keeps them inside F16's range (FFN
 * activations can pass 65504). Attention is one fused kernel with an
 * online softmax over the cache (no score matrix in device memory).
 *
 * Decode runs every quantised type on int8 dot products (cuda/mv_i8.cu:
 * x quantised once per token to int8 blocks of 32, dp4a against the
 * weights' integers, split-K for narrow matrices), F16 through a
 * 16-byte-load kernel, F32/BF16 through a generic one-block-per-lane one;
 * attention is split-K over ~256-position slices. Prefill runs in chunks
 * of CHUNK tokens; F32/F16/BF16 weights go
 * to cuBLAS as stored, the quantised types through an F16 scratch matrix
 * sized by the largest quantised layer matrix (a larger output matrix goes
 * through it in slices of rows).
 *
 * KVCHAT_CUDA_SYNC=1 synchronises after every kernel launch and names the
 * kernel that failed (launches are otherwise asynchronous: an error shows
 * up at the next synchronisation, far from its cause).
 *
 * Built as the module kvchat-cuda.so (cuda/cuda.am), loaded at run time by
 * src/backend/backend.c through kvc_cuda_module_get; it calls back into the
 * program only for the functions cuda/host.syms lists.
 *
 * Decode (one token wanting its logits) runs as one CUDA graph per step,
 * replayed with the token and position copied in from pinned memory
 * (decode_graph; KVCHAT_CUDA_GRAPH=0 runs it kernel by kernel, to measure
 * both ways).
 *
 * STATUS: compiled on machines without a GPU; NOT yet run on a device.
 * Still to do: GPU sampling, a batched prefill path for short deltas, a
 * tiled prefill attention, q8_0 caches, slide and forward_multi on the
 * device (issue 25 lists what is left; docs/BENCHMARKS.md what is
 * unmeasured).
 */
extern "C" {
#include "backend/backend.h"
#include "quant/quant.h"
}

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda_int.h"
#include "dev_util.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Record the failing call with file:line and return an error, never abort. */
#define CUDA_CHECK(call, err, errlen) do {					\
	cudaError_t e_ = (call);						\
	if (e_ != cudaSuccess) {						\
		kvc_err((err), (errlen), "cuda: %s failed at %s:%d: %s",	\
		    #call, __FILE__, __LINE__, cudaGetErrorString(e_));		\
		return e_ == cudaErrorMemoryAllocation ? KVC_ENOMEM : KVC_EIO;	\
	}									\
} while (0)
#define CUBLAS_CHECK(call, err, errlen) do {					\
	cublasStatus_t s_ = (call);						\
	if (s_ != CUBLAS_STATUS_SUCCESS) {					\
		kvc_err((err), (errlen), "cublas: %s failed at %s:%d: status %d", \
		    #call, __FILE__, __LINE__, (int)s_);			\
		return KVC_EIO;							\
	}									\
} while (0)

#define CHUNK 2048		/* tokens per prefill step (bounds the scratch) */

/* A weight on the device, in its file type. */
struct dweight {
	const void *d;		/* device bytes; NULL if absent */
	int type;		/* enum gguf_dtype */
	int64_t n_in, n_out;
	size_t row_bytes;
};

struct dlayer {
	float *attn_norm, *ffn_norm;		/* (n_embd) f32 */
	float *bq, *bk, *bv;			/* biases or NULL */
	float *q_norm, *k_norm;			/* (head_dim) or NULL */
	float *attn_post_norm, *ffn_post_norm;	/* gemma, glm4: (n_embd) or NULL */
	float *attn_norm_b, *ffn_norm_b;	/* gpt2 LayerNorm biases (n_embd) or NULL */
	float *bo, *b_up, *b_down;		/* gpt2 product biases (n_embd), (n_ff), (n_embd) or NULL */
	bool swa;				/* model_layer_swa: attends to the last n_swa positions */
	struct dweight wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct cuda_ctx {
	const struct kvc_model *m;
	int dev;
	int n_sm;				/* the device's multiprocessors (launch shapes) */
	cublasHandle_t blas;
	cudaStream_t stream;
	struct dweight tok_embd, output;
	float *output_norm;
	float *output_norm_b;			/* gpt2: (n_embd) or NULL */
	struct dweight pos_embd;		/* gpt2: learned positions (n_ctx_train rows), or absent */
	double *inv_freq_swa;			/* (rope_dim/2): the windowed layers' (gemma's local base) */
	int *d_pos;				/* (1) first position of the running forward */
	double *inv_freq;			/* (rope_dim/2): freq_scale * theta^(-2i/d) / factor[i] */
	struct dlayer *layers;
	size_t weight_bytes;
	size_t kv_used;				/* bytes committed by all caches */
	int64_t max_n_in;			/* widest matrix input (matvec shared memory) */
	size_t ws_elems;			/* wscratch capacity: largest quantised layer matrix, elements */
	bool sync_check;			/* KVCHAT_CUDA_SYNC=1: synchronise and check after every launch */
	/* decode as one CUDA graph per step (launch_plan.h's graph_key says when to recapture) */
	bool use_graph;				/* graph_wanted: KVCHAT_CUDA_GRAPH != 0 and no sync_check */
	uint64_t gen;				/* last generation number handed out (caches, scratch) */
	uint64_t scratch_gen;			/* generation of the scratch and logits buffers */
	struct graph_key graph_key;		/* what graph_exec was captured for */
	cudaGraphExec_t graph_exec;		/* the decode step, or NULL */
	unsigned long graph_captures, graph_replays;
	int *h_in;				/* (2) pinned: the step's token and position */
	/* scratch, grown to the largest batch seen (at most CHUNK tokens) */
	int cap_tok;
	float *x;				/* (cap_tok, n_embd) residual stream */
	float *xb;				/* (cap_tok, max(n_embd, q_dim)) normed input / product out */
	float *q, *att;				/* (cap_tok, q_dim) */
	float *k, *v;				/* (cap_tok, kv_dim) */
	float *hb, *hb2;			/* (cap_tok, n_ff) */
	int32_t *tokens;			/* (cap_tok) */
	__half *wscratch;			/* (ws_elems) dequantised matrix for GEMM; NULL until n > 1 */
	__half *xh;				/* (cap_tok, max_n_in) activations as f16 for GEMM */
	float *xscale;				/* (cap_tok) power-of-two scale of each row of xh */
	struct xq8 *xq;				/* (max_n_in / 32) one token's x in int8 blocks (decode) */
	bool xq_fresh;				/* xq holds the last matmul's x (its n_in: xq_n) */
	int64_t xq_n;
	float *att_part;			/* (ATT_MAX_SPLIT, n_head, head_dim + 2) split-K partials */
	int cap_logits;				/* rows of logits */
	float *logits;				/* (cap_logits, n_vocab) */
};

struct cuda_kv {
	int n_ctx, cap;				/* positions allowed / allocated */
	int n_valid;				/* positions [0, n_valid) hold data */
	int type;				/* GGML_TYPE_F16 or GGML_TYPE_F32 */
	int n_layer, kv_dim;
	void **k, **v;				/* [n_layer] device (cap, kv_dim) */
	size_t bytes;
	uint64_t gen;				/* bumped when k, v are reallocated (graph_key) */
};

/* ---- dequantisation in registers (block layouts as in src/quant/quant.h) ---- */

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

/* Dequantise rows [0, n_out) of W to f16 (n_out * n_in elements written). */
__global__ static void
kernel_dequant_f16(int type, const uint8_t *W, size_t row_bytes, __half *out,
    int64_t n_in, int64_t n_out, int blk)
{
	float buf[256];
	int64_t nb = n_in / blk;
	int64_t total = n_out * nb;

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
	    i += (int64_t)gridDim.x * blockDim.x) {
		int64_t r = i / nb, b = i % nb;
		block_dot(type, W + r * row_bytes, b, buf, buf);
		for (int j = 0; j < blk; j++)
			out[r * n_in + b * blk + j] = __float2half(buf[j]);
	}
}

/*
 * Embedding rows for n tokens: out[t] = dequant(E[tokens[t]]) * scale
 * (gemma: sqrt(n_embd)), plus row *pos0 + t of the learned positions P
 * when P != NULL (gpt2). grid n, block 64. Bytes: n rows of E (and P) read,
 * n * n_embd * 4 written.
 */
__global__ static void
kernel_embed(int type, const uint8_t *E, size_t row_bytes, const int32_t *tokens,
    float *out, int64_t n_embd, int blk, float scale, int ptype, const uint8_t *P,
    size_t prow_bytes, int pblk, const int *pos0)
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
	row = P + (size_t)(*pos0 + t) * prow_bytes;
	for (int64_t b = threadIdx.x; b < n_embd / pblk; b += blockDim.x) {
		block_dot(ptype, row, b, pb, pb);
		for (int j = 0; j < pblk; j++)
			out[(int64_t)t * n_embd + b * pblk + j] += pb[j];
	}
}

/*
 * gpt2's LayerNorm of each of n rows of width d: (x - mean) / sqrt(var +
 * eps) * w + b (b may be NULL; out may be x), the mean and variance in two
 * passes as on the CPU. One block of 256 threads per row. Bytes: 3 * n * d * 4.
 */
__global__ static void
kernel_layernorm(const float *x, const float *w, const float *b, float *out, int d, float eps)
{
	__shared__ float red[32];
	const float *xr = x + (int64_t)blockIdx.x * d;
	float *o = out + (int64_t)blockIdx.x * d;
	float acc = 0.f, mean, var;

	for (int i = threadIdx.x; i < d; i += blockDim.x)
		acc += xr[i];
	for (int off = 16; off > 0; off /= 2)
		acc += __shfl_xor_sync(0xffffffffu, acc, off);
	if (threadIdx.x % 32 == 0)
		red[threadIdx.x / 32] = acc;
	__syncthreads();
	mean = 0.f;
	for (int w2 = 0; w2 < (int)blockDim.x / 32; w2++)
		mean += red[w2];
	mean /= d;
	__syncthreads();	/* red is reused below */
	acc = 0.f;
	for (int i = threadIdx.x; i < d; i += blockDim.x)
		acc += (xr[i] - mean) * (xr[i] - mean);
	for (int off = 16; off > 0; off /= 2)
		acc += __shfl_xor_sync(0xffffffffu, acc, off);
	if (threadIdx.x % 32 == 0)
		red[threadIdx.x / 32] = acc;
	__syncthreads();
	var = 0.f;
	for (int w2 = 0; w2 < (int)blockDim.x / 32; w2++)
		var += red[w2];
	float sc = rsqrtf(var / d + eps);
	for (int i = threadIdx.x; i < d; i += blockDim.x)
		o[i] = (xr[i] - mean) * sc * w[i] + (b ? b[i] : 0.f);
}

/*
 * RMSNorm of each of n rows of width d (in place into out), weight w.
 * One block per row. bytes: 2 * n * d * 4.
 */
__global__ static void
kernel_rmsnorm(const float *x, const float *w, float *out, int d, float eps)
{
	__shared__ float red[32];
	const float *xr = x + (int64_t)blockIdx.x * d;
	float *o = out + (int64_t)blockIdx.x * d;
	float ss = 0.f;

	for (int i = threadIdx.x; i < d; i += blockDim.x)
		ss += xr[i] * xr[i];
	for (int off = 16; off > 0; off /= 2)
		ss += __shfl_down_sync(0xffffffffu, ss, off);
	if (threadIdx.x % 32 == 0)
		red[threadIdx.x / 32] = ss;
	__syncthreads();
	if (threadIdx.x < 32) {
		ss = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.f;
		for (int off = 16; off > 0; off /= 2)
			ss += __shfl_down_sync(0xffffffffu, ss, off);
		if (threadIdx.x == 0)
			red[0] = ss;
	}
	__syncthreads();
	float scale = rsqrtf(red[0] / d + eps);
	for (int i = threadIdx.x; i < d; i += blockDim.x)
		o[i] = xr[i] * scale * w[i];
}

/* x[i] += b[i % d] over n*d elements. */
__global__ static void
kernel_add_bias(float *x, const float *b, int64_t total, int d)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < total)
		x[i] += b[i % d];
}

__global__ static void
kernel_add(float *x, const float *y, int64_t total)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < total)
		x[i] += y[i];
}

/* GELU, tanh form (as ggml and the CPU backend): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
__device__ static inline float
gelu_tanh(float x)
{
	return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/* hb = act(hb) * hb2: act SiLU, or GELU (gemma) when gelu. Bytes: total * 12. */
__global__ static void
kernel_swiglu(float *hb, const float *hb2, int64_t total, bool gelu)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < total) {
		float g = hb[i];
		hb[i] = (gelu ? gelu_tanh(g) : g / (1.f + expf(-g))) * hb2[i];
	}
}

/* gpt2's MLP: x = GELU(x + b[i % d]) (b may be NULL). Bytes: total * 8. */
__global__ static void
kernel_gelu_bias(float *x, const float *b, int64_t total, int d)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < total)
		x[i] = gelu_tanh(x[i] + (b ? b[i % d] : 0.f));
}

/* x = cap * tanh(x / cap) (gemma2's final softcap). Bytes: total * 8. */
__global__ static void
kernel_softcap(float *x, int64_t total, float cap)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < total)
		x[i] = cap * tanhf(x[i] / cap);
}

/*
 * RoPE on n tokens x n_heads heads of head_dim, rotating the first rope_dim
 * dims: adjacent pairs (2i, 2i+1) or NeoX halves (i, i + rope_dim/2).
 * The angle is formed in double as on the CPU (inv_freq from the host, with
 * rope_freq_scale and rope_freqs folded in): in float, pos * freq loses
 * about 1e-3 rad at 16k positions. The first position comes from device
 * memory so that a captured graph can be replayed at any position.
 * grid (n, n_heads), block 64; bytes: 2 * n * n_heads * rope_dim * 4.
 */
__global__ static void
kernel_rope(float *x, int n_heads, int head_dim, int rope_dim, const int *pos0,
    bool neox, const double *inv_freq)
{
	int t = blockIdx.x, h = blockIdx.y;
	float *v = x + ((int64_t)t * n_heads + h) * head_dim;
	int pos = *pos0 + t;

	for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x) {
		double sd, cd;
		sincos((double)pos * inv_freq[i], &sd, &cd);
		float c = (float)cd, s = (float)sd;
		int i0 = neox ? i : 2 * i, i1 = neox ? i + rope_dim / 2 : 2 * i + 1;
		float x0 = v[i0], x1 = v[i1];
		v[i0] = x0 * c - x1 * s;
		v[i1] = x0 * s + x1 * c;
	}
}

/* Store n rows of kv_dim floats into the cache (f16 or f32) at *pos0. */
__global__ static void
kernel_kv_store(void *cache, bool f16, const float *src, const int *pos0, int64_t total, int kv_dim)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= total)
		return;
	int64_t dst = (int64_t)*pos0 * kv_dim + i;
	if (f16)
		((__half *)cache)[dst] = __float2half(src[i]);
	else
		((float *)cache)[dst] = src[i];
}

/* RMSNorm over each head (qwen3 q/k norms): n_rows rows of head_dim. */
static void
launch_rmsnorm(cudaStream_t st, const float *x, const float *w, float *out, int rows, int d, float eps)
{
	kernel_rmsnorm<<<rows, 256, 0, st>>>(x, w, out, d, eps);
}

static unsigned
nblk(int64_t total, int threads)
{
	return (unsigned)((total + threads - 1) / threads);
}

/* ---- host side ---- */

/*
 * After a kernel launch: the launch's error and, with KVCHAT_CUDA_SYNC=1,
 * the kernel's own (the stream is synchronised), naming the kernel.
 */
static int
launched(struct cuda_ctx *c, const char *kernel, char *err, size_t errlen)
{
	cudaError_t e = cudaGetLastError();

	if (e == cudaSuccess && c->sync_check)
		e = cudaStreamSynchronize(c->stream);
	if (e == cudaSuccess)
		return KVC_OK;
	kvc_err(err, errlen, "cuda: kernel %s failed: %s%s", kernel, cudaGetErrorString(e),
	    c->sync_check ? "" : " (KVCHAT_CUDA_SYNC=1 names the kernel that failed)");
	return e == cudaErrorMemoryAllocation ? KVC_ENOMEM : KVC_EIO;
}
#define LAUNCHED(kernel) do {							\
	if ((rc = launched(c, (kernel), err, errlen)) != KVC_OK)		\
		return rc;							\
} while (0)

/* KVC_OK, or the error of a failed runtime call with its name and reason. */
static int
cuda_call(cudaError_t e, const char *what, char *err, size_t errlen)
{
	if (e == cudaSuccess)
		return KVC_OK;
	kvc_err(err, errlen, "cuda: %s failed: %s", what, cudaGetErrorString(e));
	return e == cudaErrorMemoryAllocation ? KVC_ENOMEM : KVC_EIO;
}

static int
upload(struct cuda_ctx *c, const void *src, size_t bytes, void **dst, char *err, size_t errlen)
{
	cudaError_t e = cudaMalloc(dst, bytes);

	if (e != cudaSuccess) {
		*dst = NULL;
		kvc_err(err, errlen, "cuda: cannot allocate %.1f MiB for weights (%.1f MiB uploaded): %s",
		    bytes / 1048576.0, c->weight_bytes / 1048576.0, cudaGetErrorString(e));
		return e == cudaErrorMemoryAllocation ? KVC_ENOMEM : KVC_EIO;
	}
	/*
	 * On the compute stream, and waited for: src may be a temporary the
	 * caller frees, and a kernel on the non-blocking stream is not ordered
	 * after a copy on the legacy stream.
	 */
	c->weight_bytes += bytes;
	CUDA_CHECK(cudaMemcpyAsync(*dst, src, bytes, cudaMemcpyHostToDevice, c->stream), err, errlen);
	CUDA_CHECK(cudaStreamSynchronize(c->stream), err, errlen);
	return KVC_OK;
}

/*
 * The weight types block_dot has a case for (and, the quantised ones,
 * mv_i8.cu); the CPU computes more: the IQ lattice types and MXFP4 run on
 * the CPU (--device auto falls back there with a notice naming the type).
 */
static bool
dev_type_ok(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q8_0:
	case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
	case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
	case GGML_TYPE_Q6_K:
		return true;
	default:
		return false;
	}
}

/* The types cuBLAS multiplies as stored (the others are dequantised to F16 first). */
static bool
matmul_native(int type)
{
	return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16;
}

/* w to the device; layer: one of the layers' matrices (not the embedding or output). */
static int
upload_weight(struct cuda_ctx *c, const struct kvc_weight *w, struct dweight *d, bool layer,
    char *err, size_t errlen)
{
	void *p = NULL;
	int rc;

	memset(d, 0, sizeof *d);
	if (w->data == NULL)
		return KVC_OK;
	if (!dev_type_ok(w->type)) {
		/* block_dot would give zeros: refuse, the CPU backend runs these files */
		kvc_err(err, errlen, "cuda: no GPU kernel for %s weights yet (the CPU backend runs them: "
		    "--device cpu)", gguf_dtype_name(w->type));
		return KVC_EUNSUPPORTED;
	}
	if (q_block_elems(w->type) == 1 && w->n_in % 32 != 0) {
		/* the float types run through 32-element pseudo-blocks */
		kvc_err(err, errlen, "cuda: %s matrix with %lld columns (not a multiple of 32)",
		    gguf_dtype_name(w->type), (long long)w->n_in);
		return KVC_EUNSUPPORTED;
	}
	if ((rc = upload(c, w->data, w->row_bytes * (size_t)w->n_out, &p, err, errlen)) != KVC_OK)
		return rc;
	/* only the quantised types pass through wscratch (see matmul) */
	if (layer && !matmul_native(w->type) && (size_t)(w->n_in * w->n_out) > c->ws_elems)
		c->ws_elems = (size_t)(w->n_in * w->n_out);
	d->d = p;
	d->type = w->type;
	d->n_in = w->n_in;
	d->n_out = w->n_out;
	d->row_bytes = w->row_bytes;
	if (w->n_in > c->max_n_in)
		c->max_n_in = w->n_in;
	return KVC_OK;
}

/* Small vectors (norms, biases) go up as f32 whatever their file type. */
static int
upload_vec(struct cuda_ctx *c, const struct kvc_weight *w, float **out, char *err, size_t errlen)
{
	float *tmp;
	int64_t n;
	int rc;

	*out = NULL;
	if (w->data == NULL)
		return KVC_OK;
	n = w->n_in * w->n_out;
	if ((tmp = (float *)malloc((size_t)n * sizeof *tmp)) == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	q_dequant_row(w->type, w->data, tmp, n);
	rc = upload(c, tmp, (size_t)n * sizeof *tmp, (void **)out, err, errlen);
	free(tmp);
	return rc;
}

static void cuda_free(void *ctx);

/* The matvec kernels' dynamic shared memory (x) can exceed the default 48 KB; the SM count. */
static int
set_matvec_smem(struct cuda_ctx *c, char *err, size_t errlen)
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
 * inv_freq[i] as the CPU backend computes it, in double: base theta,
 * linear scale, and llama 3.1's factors when factors (the global layers').
 */
static int
upload_inv_freq(struct cuda_ctx *c, double theta, double scale, bool factors, double **out,
    char *err, size_t errlen)
{
	const struct kvc_model *m = c->m;
	const struct kvc_hparams *hp = &m->hp;
	int half = hp->rope_dim / 2, rc;
	double *f = (double *)malloc((size_t)(half > 0 ? half : 1) * sizeof *f);

	if (f == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	for (int i = 0; i < half; i++) {
		f[i] = scale * pow(theta, -2.0 * i / hp->rope_dim);
		if (factors && m->rope_freqs.data != NULL) {
			float ff;

			q_dequant_row(m->rope_freqs.type, (const char *)m->rope_freqs.data +
			    (size_t)i * gguf_dtype_size(m->rope_freqs.type), &ff, 1);
			f[i] /= ff;
		}
	}
	rc = upload(c, f, (size_t)(half > 0 ? half : 1) * sizeof *f, (void **)out, err, errlen);
	free(f);
	return rc;
}

/* The decode step's inputs: the position in device memory, the pinned token and position, graphs on or off. */
static int
init_decode_state(struct cuda_ctx *c, char *err, size_t errlen)
{
	int rc;

	if ((rc = cuda_call(cudaMalloc(&c->d_pos, sizeof(int)), "cudaMalloc", err, errlen)) != KVC_OK ||
	    (rc = cuda_call(cudaMallocHost(&c->h_in, 2 * sizeof(int)), "cudaMallocHost", err, errlen)) != KVC_OK)
		return rc;
	c->use_graph = graph_wanted(getenv("KVCHAT_CUDA_GRAPH"), c->sync_check);
	return KVC_OK;
}

static int
cuda_init(void **out, const struct kvc_model *m, const struct kvc_backend_params *p,
    char *err, size_t errlen)
{
	struct cuda_ctx *c;
	const struct kvc_hparams *hp = &m->hp;
	uint64_t done = 0, total = (uint64_t)hp->n_layer + 2;
	int rc, n_dev = 0, gpu = p ? p->gpu : 0;
	cudaError_t ce;

	*out = NULL;
	if ((ce = cudaGetDeviceCount(&n_dev)) != cudaSuccess || n_dev == 0) {
		/* an old driver is cudaErrorInsufficientDriver, not "no device": say which */
		kvc_err(err, errlen, "cuda: cannot use CUDA: %s",
		    ce != cudaSuccess ? cudaGetErrorString(ce) : "no CUDA device present");
		return KVC_EUNSUPPORTED;
	}
	if (p && p->kv_type == GGML_TYPE_Q8_0) {
		kvc_err(err, errlen, "cuda: no q8_0 KV cache on the GPU (use --kv-type f16)");
		return KVC_EUNSUPPORTED;
	}
	if (gpu < 0 || gpu >= n_dev) {
		kvc_err(err, errlen, "cuda: device %d does not exist (%d found)", gpu, n_dev);
		return KVC_EINVAL;
	}
	/*
	 * Every dense architecture model_load accepts runs here (gemma's
	 * windowed layers keep every position: kv_lowest stays 0); experts and
	 * YaRN are CPU-only for now, refused by name, and --device auto runs
	 * them on the CPU.
	 */
	if (hp->n_expert > 0 || hp->rope_yarn) {
		kvc_err(err, errlen, "cuda: %s is not implemented on the GPU (use --device cpu)",
		    hp->n_expert > 0 ? "a mixture of experts" : "YaRN RoPE scaling");
		return KVC_EUNSUPPORTED;
	}
	if (hp->head_dim > 256 || hp->n_head % hp->n_head_kv != 0 || hp->rope_dim > hp->head_dim) {
		kvc_err(err, errlen, "cuda: %s's head shape (%d heads, %d KV heads, head size %d, "
		    "%d rotated) is not one the GPU kernels take (head size at most 256)",
		    model_arch_name(hp->arch), hp->n_head, hp->n_head_kv, hp->head_dim, hp->rope_dim);
		return KVC_EUNSUPPORTED;
	}
	if ((c = (struct cuda_ctx *)calloc(1, sizeof *c)) == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	c->m = m;
	c->dev = gpu;
	c->sync_check = getenv("KVCHAT_CUDA_SYNC") != NULL && strcmp(getenv("KVCHAT_CUDA_SYNC"), "1") == 0;
	*out = c;
#define TRY(x) do { if ((rc = (x)) != KVC_OK) { cuda_free(c); *out = NULL; return rc; } } while (0)
	TRY(cuda_call(cudaSetDevice(c->dev), "cudaSetDevice", err, errlen));
	TRY(cuda_call(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
	    "cudaStreamCreate", err, errlen));
	if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
		kvc_err(err, errlen, "cublas: cannot create a handle");
		cuda_free(c);
		*out = NULL;
		return KVC_EIO;
	}
	if (cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS) {
		kvc_err(err, errlen, "cublas: cannot set the stream");
		cuda_free(c);
		*out = NULL;
		return KVC_EIO;
	}
	TRY(init_decode_state(c, err, errlen));
	TRY(upload_weight(c, &m->tok_embd, &c->tok_embd, false, err, errlen));
	if (m->output.data == m->tok_embd.data)
		c->output = c->tok_embd;	/* tied: one copy on the device */
	else
		TRY(upload_weight(c, &m->output, &c->output, false, err, errlen));
	TRY(upload_vec(c, &m->output_norm, &c->output_norm, err, errlen));
	TRY(upload_inv_freq(c, hp->rope_theta, hp->rope_freq_scale, true, &c->inv_freq, err, errlen));
	if (hp->n_swa > 0)
		TRY(upload_inv_freq(c, hp->rope_theta_swa, hp->rope_freq_scale_swa, false, &c->inv_freq_swa,
		    err, errlen));
	TRY(upload_vec(c, &m->output_norm_b, &c->output_norm_b, err, errlen));
	TRY(upload_weight(c, &m->pos_embd, &c->pos_embd, false, err, errlen));
	if (p && p->progress)
		p->progress(p->progress_arg, ++done, total);
	c->layers = (struct dlayer *)calloc((size_t)hp->n_layer, sizeof *c->layers);
	if (c->layers == NULL) {
		kvc_err(err, errlen, "out of memory");
		TRY(KVC_ENOMEM);
	}
	for (int l = 0; l < hp->n_layer; l++) {
		const struct kvc_layer_weights *lw = &m->layers[l];
		struct dlayer *dl = &c->layers[l];
		TRY(upload_vec(c, &lw->attn_norm, &dl->attn_norm, err, errlen));
		TRY(upload_vec(c, &lw->ffn_norm, &dl->ffn_norm, err, errlen));
		TRY(upload_vec(c, &lw->bq, &dl->bq, err, errlen));
		TRY(upload_vec(c, &lw->bk, &dl->bk, err, errlen));
		TRY(upload_vec(c, &lw->bv, &dl->bv, err, errlen));
		TRY(upload_vec(c, &lw->q_norm, &dl->q_norm, err, errlen));
		TRY(upload_vec(c, &lw->k_norm, &dl->k_norm, err, errlen));
		TRY(upload_vec(c, &lw->attn_post_norm, &dl->attn_post_norm, err, errlen));
		TRY(upload_vec(c, &lw->ffn_post_norm, &dl->ffn_post_norm, err, errlen));
		TRY(upload_vec(c, &lw->attn_norm_b, &dl->attn_norm_b, err, errlen));
		TRY(upload_vec(c, &lw->ffn_norm_b, &dl->ffn_norm_b, err, errlen));
		TRY(upload_vec(c, &lw->bo, &dl->bo, err, errlen));
		TRY(upload_vec(c, &lw->b_up, &dl->b_up, err, errlen));
		TRY(upload_vec(c, &lw->b_down, &dl->b_down, err, errlen));
		dl->swa = model_layer_swa(hp, l);
		TRY(upload_weight(c, &lw->wq, &dl->wq, true, err, errlen));
		TRY(upload_weight(c, &lw->wk, &dl->wk, true, err, errlen));
		TRY(upload_weight(c, &lw->wv, &dl->wv, true, err, errlen));
		TRY(upload_weight(c, &lw->wo, &dl->wo, true, err, errlen));
		TRY(upload_weight(c, &lw->w_gate, &dl->w_gate, true, err, errlen));
		TRY(upload_weight(c, &lw->w_up, &dl->w_up, true, err, errlen));
		TRY(upload_weight(c, &lw->w_down, &dl->w_down, true, err, errlen));
		if (p && p->progress)
			p->progress(p->progress_arg, ++done, total);
	}
	/* a quantised output matrix of a file whose layers are not goes through 256 rows at a time */
	if (!matmul_native(c->output.type) && c->ws_elems < (size_t)c->output.n_in * 256)
		c->ws_elems = (size_t)c->output.n_in * 256;
	TRY(set_matvec_smem(c, err, errlen));
	TRY(cuda_call(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", err, errlen));
	if (p && p->progress)
		p->progress(p->progress_arg, total, total);
#undef TRY
	return KVC_OK;
}

static void
free_scratch(struct cuda_ctx *c)
{
	cudaFree(c->x); cudaFree(c->xb); cudaFree(c->q); cudaFree(c->k); cudaFree(c->v);
	cudaFree(c->att); cudaFree(c->hb); cudaFree(c->hb2);
	cudaFree(c->tokens); cudaFree(c->wscratch); cudaFree(c->xh); cudaFree(c->att_part);
	cudaFree(c->xscale); cudaFree(c->xq);
	c->xq = NULL;
	c->x = c->xb = c->q = c->k = c->v = c->att = c->hb = c->hb2 = c->att_part = c->xscale = NULL;
	c->tokens = NULL;
	c->wscratch = c->xh = NULL;
	c->cap_tok = 0;
}

static void
cuda_free(void *ctx)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	if (c == NULL)
		return;
	cudaSetDevice(c->dev);
	if (c->stream)
		cudaStreamSynchronize(c->stream);
	if (c->layers) {
		for (int l = 0; l < c->m->hp.n_layer; l++) {
			struct dlayer *d = &c->layers[l];
			cudaFree(d->attn_norm); cudaFree(d->ffn_norm);
			cudaFree(d->bq); cudaFree(d->bk); cudaFree(d->bv);
			cudaFree(d->q_norm); cudaFree(d->k_norm);
			cudaFree(d->attn_post_norm); cudaFree(d->ffn_post_norm);
			cudaFree(d->attn_norm_b); cudaFree(d->ffn_norm_b);
			cudaFree(d->bo); cudaFree(d->b_up); cudaFree(d->b_down);
			cudaFree((void *)d->wq.d); cudaFree((void *)d->wk.d); cudaFree((void *)d->wv.d);
			cudaFree((void *)d->wo.d); cudaFree((void *)d->w_gate.d);
			cudaFree((void *)d->w_up.d); cudaFree((void *)d->w_down.d);
		}
		free(c->layers);
	}
	if (c->output.d != c->tok_embd.d)
		cudaFree((void *)c->output.d);
	cudaFree((void *)c->tok_embd.d);
	cudaFree(c->output_norm);
	cudaFree(c->inv_freq);
	cudaFree(c->inv_freq_swa);
	cudaFree(c->output_norm_b);
	cudaFree((void *)c->pos_embd.d);
	cudaFree(c->d_pos);
	cudaFreeHost(c->h_in);
	if (c->graph_exec)
		cudaGraphExecDestroy(c->graph_exec);
	free_scratch(c);
	cudaFree(c->logits);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c);
}

/* One allocation of scratch; on failure the caller frees what was made. */
static int
scratch_alloc(void **p, size_t bytes, int n, char *err, size_t errlen)
{
	cudaError_t e = cudaMalloc(p, bytes);

	if (e != cudaSuccess) {
		*p = NULL;
		kvc_err(err, errlen, "cuda: cannot allocate %.1f MiB of scratch for %d tokens: %s",
		    bytes / 1048576.0, n, cudaGetErrorString(e));
		return e == cudaErrorMemoryAllocation ? KVC_ENOMEM : KVC_EIO;
	}
	return KVC_OK;
}

/* Grow scratch to hold n tokens (n <= CHUNK) and the largest matrix for GEMM. */
static int
ensure_scratch(struct cuda_ctx *c, int n, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	size_t t = (size_t)n, q_dim = (size_t)hp->n_head * hp->head_dim;
	size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
	size_t wide = q_dim > (size_t)hp->n_embd ? q_dim : (size_t)hp->n_embd;
	int rc;

	if (n <= c->cap_tok && (n == 1 || c->xh != NULL))
		return KVC_OK;
	if (n < c->cap_tok)
		n = c->cap_tok;	/* only the GEMM buffers are missing: keep the capacity */
	t = (size_t)n;
	free_scratch(c);
	if ((rc = scratch_alloc((void **)&c->x, t * hp->n_embd * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->xb, t * wide * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->q, t * q_dim * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->att, t * q_dim * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->k, t * kv_dim * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->v, t * kv_dim * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->hb, t * hp->n_ff * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->hb2, t * hp->n_ff * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->tokens, t * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->xq, (size_t)(c->max_n_in / 32 + 1) * sizeof(struct xq8), n,
	    err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->att_part,
	    (size_t)ATT_MAX_SPLIT * hp->n_head * (hp->head_dim + 2) * 4, n, err, errlen)))
		goto fail;
	if (n > 1 && ((rc = scratch_alloc((void **)&c->xh, t * (size_t)c->max_n_in * 2, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->xscale, t * 4, n, err, errlen)) ||
	    (c->ws_elems > 0 &&
	    (rc = scratch_alloc((void **)&c->wscratch, c->ws_elems * 2, n, err, errlen)))))
		goto fail;
	c->cap_tok = n;
	c->scratch_gen = ++c->gen;
	return KVC_OK;
fail:
	free_scratch(c);
	return rc;
}

/* Room for rows x n_vocab logits on the device. */
static int
ensure_logits(struct cuda_ctx *c, int rows, char *err, size_t errlen)
{
	int rc;

	if (rows <= c->cap_logits)
		return KVC_OK;
	cudaFree(c->logits);
	c->logits = NULL;
	c->cap_logits = 0;
	if ((rc = scratch_alloc((void **)&c->logits, (size_t)rows * c->m->hp.n_vocab * 4, rows,
	    err, errlen)))
		return rc;
	c->cap_logits = rows;
	c->scratch_gen = ++c->gen;
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
static int
matmul(struct cuda_ctx *c, const struct dweight *w, const float *X, float *Y, int n, bool same_x,
    char *err, size_t errlen)
{
	const uint8_t *W = (const uint8_t *)w->d;
	unsigned grid = nblk(w->n_out, 8);
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
	const float one = 1.f, zero = 0.f;
	const void *B = c->xh;

	c->xq_fresh = false;
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
		kernel_f32_to_bf16<<<nblk(nx, 256), 256, 0, c->stream>>>(X, (__nv_bfloat16 *)c->xh, nx);
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

		if (!matmul_native(w->type)) {
			A = c->wscratch;
			kernel_dequant_f16<<<1024, 128, 0, c->stream>>>(w->type, W + r0 * w->row_bytes,
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
		kernel_unscale_rows<<<dim3(nblk(w->n_out, 256), n), 256, 0, c->stream>>>(Y, c->xscale,
		    w->n_out, w->n_out);
		LAUNCHED("kernel_unscale_rows");
	}
	return KVC_OK;
}

static size_t
kv_bytes_at(const struct cuda_kv *kv, int cap)
{
	size_t elt = kv->type == GGML_TYPE_F16 ? 2 : 4;

	return (size_t)cap * kv->kv_dim * elt * 2 * kv->n_layer;
}

/*
 * Make kv hold positions [0, need): doubling, capped by n_ctx, as on the
 * CPU. New buffers are all allocated before any old one is released, so a
 * failure leaves the cache as it was.
 */
static int
kv_grow(struct cuda_ctx *c, struct cuda_kv *kv, int need, char *err, size_t errlen)
{
	size_t elt = kv->type == GGML_TYPE_F16 ? 2 : 4, row = (size_t)kv->kv_dim * elt;
	size_t old = kv_bytes_at(kv, kv->cap);
	int cap = kv->cap ? kv->cap : 256, rc = KVC_OK;
	void **nb;

	if (need <= kv->cap)
		return KVC_OK;
	if (need > kv->n_ctx) {
		kvc_err(err, errlen, "context full: %d positions do not fit in %d", need, kv->n_ctx);
		return KVC_ERANGE;
	}
	while (cap < need)
		cap = cap > kv->n_ctx / 2 ? kv->n_ctx : cap * 2;
	if (cap > kv->n_ctx)
		cap = kv->n_ctx;
	if ((nb = (void **)calloc(2 * (size_t)kv->n_layer, sizeof *nb)) == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	for (int i = 0; i < 2 * kv->n_layer && rc == KVC_OK; i++) {
		cudaError_t e = cudaMalloc(&nb[i], (size_t)cap * row);
		if (e != cudaSuccess) {
			nb[i] = NULL;
			kvc_err(err, errlen, "cuda: out of GPU memory for a KV cache of %d positions (%.1f MiB): %s",
			    cap, kv_bytes_at(kv, cap) / 1048576.0, cudaGetErrorString(e));
			rc = e == cudaErrorMemoryAllocation ? KVC_ENOMEM : KVC_EIO;
		}
	}
	for (int i = 0; i < 2 * kv->n_layer && rc == KVC_OK && kv->n_valid > 0; i++) {
		void *src = i < kv->n_layer ? kv->k[i] : kv->v[i - kv->n_layer];
		rc = cuda_call(cudaMemcpyAsync(nb[i], src, (size_t)kv->n_valid * row,
		    cudaMemcpyDeviceToDevice, c->stream), "cudaMemcpyAsync (KV growth)", err, errlen);
	}
	if (rc == KVC_OK)
		rc = cuda_call(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", err, errlen);
	for (int i = 0; i < 2 * kv->n_layer; i++) {
		void **slot = i < kv->n_layer ? &kv->k[i] : &kv->v[i - kv->n_layer];
		if (rc == KVC_OK) {
			cudaFree(*slot);
			*slot = nb[i];
		} else {
			cudaFree(nb[i]);
		}
	}
	free(nb);
	if (rc != KVC_OK)
		return rc;
	c->kv_used = c->kv_used - old + kv_bytes_at(kv, cap);
	kv->bytes = kv_bytes_at(kv, cap);
	kv->cap = cap;
	kv->gen = ++c->gen;
	return KVC_OK;
}

static int
cuda_kv_create(void *ctx, int n_ctx, enum gguf_dtype kv_type, void **out, char *err, size_t errlen)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	struct cuda_kv *kv;
	int rc;

	*out = NULL;
	if ((rc = kvc_backend_kv_check(n_ctx, kv_type, err, errlen)) != KVC_OK)
		return rc;
	if ((kv = (struct cuda_kv *)calloc(1, sizeof *kv)) == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	kv->n_ctx = n_ctx;
	kv->type = kv_type;
	kv->n_layer = c->m->hp.n_layer;
	kv->gen = ++c->gen;
	kv->kv_dim = c->m->hp.n_head_kv * c->m->hp.head_dim;
	kv->k = (void **)calloc((size_t)kv->n_layer, sizeof *kv->k);
	kv->v = (void **)calloc((size_t)kv->n_layer, sizeof *kv->v);
	if (kv->k == NULL || kv->v == NULL) {
		free(kv->k);
		free(kv->v);
		free(kv);
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	*out = kv;
	return KVC_OK;
}

static void
cuda_kv_destroy(void *ctx, void *p)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	struct cuda_kv *kv = (struct cuda_kv *)p;

	if (kv == NULL)
		return;
	cudaSetDevice(c->dev);
	cudaStreamSynchronize(c->stream);	/* no kernel may still read it */
	for (int l = 0; l < kv->n_layer; l++) {
		cudaFree(kv->k[l]);
		cudaFree(kv->v[l]);
	}
	c->kv_used -= kv->bytes;
	free(kv->k);
	free(kv->v);
	free(kv);
}

static size_t
cuda_kv_bytes(void *ctx, void *p)
{
	(void)ctx;
	return ((struct cuda_kv *)p)->bytes;
}

/* The block norm of rows rows of x into out: RMSNorm, or gpt2's LayerNorm with bias b. */
static int
block_norm(struct cuda_ctx *c, const float *x, const float *w, const float *b, float *out, int rows,
    char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int rc;

	if (hp->layer_norm) {
		kernel_layernorm<<<rows, 256, 0, c->stream>>>(x, w, b, out, hp->n_embd, hp->rms_eps);
		LAUNCHED("kernel_layernorm");
	} else {
		launch_rmsnorm(c->stream, x, w, out, rows, hp->n_embd, hp->rms_eps);
		LAUNCHED("kernel_rmsnorm");
	}
	return KVC_OK;
}

/*
 * A block's output y (n rows of n_embd) into the residual stream x: its
 * bias added (gpt2), its post-norm applied (gemma, glm4), then x += y.
 */
static int
residual(struct cuda_ctx *c, float *x, float *y, const float *bias, const float *post, int n,
    char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int64_t E = hp->n_embd;
	int rc;

	if (bias) {
		kernel_add_bias<<<nblk(n * E, 256), 256, 0, c->stream>>>(y, bias, n * E, (int)E);
		LAUNCHED("kernel_add_bias (output bias)");
	}
	if (post) {
		launch_rmsnorm(c->stream, y, post, y, n, (int)E, hp->rms_eps);
		LAUNCHED("kernel_rmsnorm (post-norm)");
	}
	kernel_add<<<nblk(n * E, 256), 256, 0, c->stream>>>(x, y, n * E);
	LAUNCHED("kernel_add");
	return KVC_OK;
}

/*
 * block_norm into c->xb, and for one token under RMSNorm its int8 blocks
 * too, in the same kernel (kernel_rmsnorm_q8): the products that follow
 * (same_x) then skip their own quantisation of x.
 */
static int
block_norm_q(struct cuda_ctx *c, const float *x, const float *w, const float *b, int rows,
    char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int rc;

	c->xq_fresh = false;
	if (rows != 1 || hp->layer_norm || hp->n_embd % 32 != 0)
		return block_norm(c, x, w, b, c->xb, rows, err, errlen);
	rmsnorm_quantize(c->stream, x, w, c->xb, c->xq, hp->n_embd, hp->rms_eps);
	LAUNCHED("kernel_rmsnorm_q8");
	c->xq_fresh = true;
	c->xq_n = hp->n_embd;
	return KVC_OK;
}

/* c->xq made to hold X's blocks (n_in values) unless it already does (same_x). */
static int
need_xq(struct cuda_ctx *c, const float *X, int64_t n_in, bool same_x, char *err, size_t errlen)
{
	int rc;

	if (same_x && c->xq_fresh && c->xq_n == n_in)
		return KVC_OK;
	quantize_x(c->stream, X, c->xq, n_in);
	LAUNCHED("kernel_quantize_x");
	c->xq_fresh = true;
	c->xq_n = n_in;
	return KVC_OK;
}

/*
 * An output projection into the residual stream: x += W X (+ bias). For
 * one token of an int8 type without a post-norm, the add and bias are the
 * product's epilogue; otherwise the product goes through c->xb and
 * residual() (a post-norm needs the whole product first).
 */
static int
project_add(struct cuda_ctx *c, const struct dweight *w, const float *X, const float *bias, const float *post,
    int n, char *err, size_t errlen)
{
	int rc;

	if (n == 1 && post == NULL && mv_i8_supported(w->type)) {
		const struct mv_epi epi = { bias, true };

		if ((rc = need_xq(c, X, w->n_in, false, err, errlen)) != KVC_OK)
			return rc;
		mv_i8(c->stream, w->type, (const uint8_t *)w->d, w->row_bytes, c->xq, c->x, w->n_in, w->n_out,
		    c->n_sm, epi);
		LAUNCHED("kernel_mv_i8 (residual epilogue)");
		return KVC_OK;
	}
	if ((rc = matmul(c, w, X, c->xb, n, false, err, errlen)) != KVC_OK)
		return rc;
	return residual(c, c->x, c->xb, bias, post, n, err, errlen);
}

/*
 * One token's Q, K and V, each one kernel_mv_i8_qkv: bias, RoPE and the
 * cache store in the product's epilogue (no q/k norms: those need the
 * whole head before RoPE, see qkv_fusable).
 */
static int
qkv_fused(struct cuda_ctx *c, struct cuda_kv *kv, int l, const struct dlayer *d, const double *freq,
    char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	const struct dweight *w[3] = { &d->wq, &d->wk, &d->wv };
	const float *bias[3] = { d->bq, d->bk, d->bv };
	int rc;

	if ((rc = need_xq(c, c->xb, d->wq.n_in, true, err, errlen)) != KVC_OK)
		return rc;
	for (int i = 0; i < 3; i++) {
		struct mv_qkv e = { bias[i], freq, c->d_pos, hp->head_dim, i == 2 ? 0 : hp->rope_dim,
			hp->rope_neox, i == 0 ? c->q : NULL, i == 1 ? kv->k[l] : i == 2 ? kv->v[l] : NULL,
			kv->type == GGML_TYPE_F16 };

		mv_i8_qkv(c->stream, w[i]->type, (const uint8_t *)w[i]->d, w[i]->row_bytes, c->xq, w[i]->n_in,
		    w[i]->n_out, c->n_sm, e);
		LAUNCHED("kernel_mv_i8_qkv");
	}
	return KVC_OK;
}

/* Whether layer d's Q/K/V of one token can run as qkv_fused. */
static bool
qkv_fusable(const struct cuda_ctx *c, const struct dlayer *d, int n)
{
	return n == 1 && d->q_norm == NULL && d->k_norm == NULL && c->m->hp.head_dim % 2 == 0 &&
	    mv_i8_supported(d->wq.type) && mv_i8_supported(d->wk.type) && mv_i8_supported(d->wv.type);
}

/* Whether gate, up and the activation of one token can run as one kernel_mv_i8_glu. */
static bool
glu_fusable(const struct dlayer *d, int n)
{
	return n == 1 && mv_i8_supported(d->w_gate.type) && d->w_gate.type == d->w_up.type &&
	    d->w_gate.row_bytes == d->w_up.row_bytes && d->w_gate.n_out == d->w_up.n_out &&
	    d->w_gate.n_in == d->w_up.n_in;
}

/*
 * Q, K and V of n tokens kernel by kernel: products (x's int8 blocks from
 * block_norm_q when it made them), biases, q/k norms, RoPE, cache store.
 */
static int
qkv_plain(struct cuda_ctx *c, struct cuda_kv *kv, int l, const struct dlayer *d, const double *freq, int n,
    char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int64_t q_dim = (int64_t)hp->n_head * hp->head_dim, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
	bool f16 = kv->type == GGML_TYPE_F16;
	int rc;

	if ((rc = matmul(c, &d->wq, c->xb, c->q, n, true, err, errlen)) != KVC_OK ||
	    (rc = matmul(c, &d->wk, c->xb, c->k, n, true, err, errlen)) != KVC_OK ||
	    (rc = matmul(c, &d->wv, c->xb, c->v, n, true, err, errlen)) != KVC_OK)
		return rc;
	if (d->bq) {
		kernel_add_bias<<<nblk(n * q_dim, 256), 256, 0, c->stream>>>(c->q, d->bq, n * q_dim, (int)q_dim);
		LAUNCHED("kernel_add_bias (q)");
		kernel_add_bias<<<nblk(n * kv_dim, 256), 256, 0, c->stream>>>(c->k, d->bk, n * kv_dim, (int)kv_dim);
		LAUNCHED("kernel_add_bias (k)");
		kernel_add_bias<<<nblk(n * kv_dim, 256), 256, 0, c->stream>>>(c->v, d->bv, n * kv_dim, (int)kv_dim);
		LAUNCHED("kernel_add_bias (v)");
	}
	if (d->q_norm) {
		launch_rmsnorm(c->stream, c->q, d->q_norm, c->q, n * hp->n_head, hp->head_dim, hp->rms_eps);
		LAUNCHED("kernel_rmsnorm (q norm)");
	}
	if (d->k_norm) {
		launch_rmsnorm(c->stream, c->k, d->k_norm, c->k, n * hp->n_head_kv, hp->head_dim, hp->rms_eps);
		LAUNCHED("kernel_rmsnorm (k norm)");
	}
	if (hp->rope_dim > 0) {
		kernel_rope<<<dim3(n, hp->n_head), 64, 0, c->stream>>>(c->q, hp->n_head, hp->head_dim,
		    hp->rope_dim, c->d_pos, hp->rope_neox, freq);
		LAUNCHED("kernel_rope (q)");
		kernel_rope<<<dim3(n, hp->n_head_kv), 64, 0, c->stream>>>(c->k, hp->n_head_kv, hp->head_dim,
		    hp->rope_dim, c->d_pos, hp->rope_neox, freq);
		LAUNCHED("kernel_rope (k)");
	}
	kernel_kv_store<<<nblk(n * kv_dim, 256), 256, 0, c->stream>>>(kv->k[l], f16, c->k, c->d_pos, n * kv_dim, (int)kv_dim);
	LAUNCHED("kernel_kv_store (k)");
	kernel_kv_store<<<nblk(n * kv_dim, 256), 256, 0, c->stream>>>(kv->v[l], f16, c->v, c->d_pos, n * kv_dim, (int)kv_dim);
	LAUNCHED("kernel_kv_store (v)");
	return KVC_OK;
}

/*
 * The forward's kernels for n tokens already in c->tokens at *c->d_pos:
 * embedding, layers, and when nl > 0 the logits of the last nl rows into
 * c->logits. No host synchronisation and launch shapes that do not depend
 * on the position, so that one token's run can be captured as a graph.
 */
static int
forward_kernels(struct cuda_ctx *c, struct cuda_kv *kv, int n, int nl, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int64_t E = hp->n_embd;
	bool f16 = kv->type == GGML_TYPE_F16;
	int rc;

	kernel_embed<<<n, 64, 0, c->stream>>>(c->tok_embd.type, (const uint8_t *)c->tok_embd.d,
	    c->tok_embd.row_bytes, c->tokens, c->x, E, dev_block(c->tok_embd.type), hp->embd_scale,
	    c->pos_embd.type, (const uint8_t *)c->pos_embd.d, c->pos_embd.row_bytes,
	    c->pos_embd.d ? dev_block(c->pos_embd.type) : 32, c->d_pos);
	LAUNCHED("kernel_embed");
	for (int l = 0; l < hp->n_layer; l++) {
		struct dlayer *d = &c->layers[l];
		int win = d->swa ? hp->n_swa : 0;
		const double *freq = d->swa ? c->inv_freq_swa : c->inv_freq;

		if ((rc = block_norm_q(c, c->x, d->attn_norm, d->attn_norm_b, n, err, errlen)) != KVC_OK)
			return rc;
		if (qkv_fusable(c, d, n)) {
			if ((rc = qkv_fused(c, kv, l, d, freq, err, errlen)) != KVC_OK)
				return rc;
		} else if ((rc = qkv_plain(c, kv, l, d, freq, n, err, errlen)) != KVC_OK) {
			return rc;
		}
		struct att_args aa = { c->q, kv->k[l], kv->v[l], f16, c->att, c->att_part, hp->n_head,
			hp->n_head_kv, hp->head_dim, c->d_pos, hp->attn_scale, hp->attn_softcap, win };
		if (n == 1)
			attention_decode(c->stream, &aa, att_decode_splits(c->n_sm, hp->n_head_kv, kv->n_ctx));
		else
			attention_tokens(c->stream, &aa, n);
		LAUNCHED(n == 1 ? "kernel_attn_gqa / kernel_attention_merge" : "kernel_attention");
		if ((rc = project_add(c, &d->wo, c->att, d->bo, d->attn_post_norm, n, err, errlen)) != KVC_OK ||
		    (rc = block_norm_q(c, c->x, d->ffn_norm, d->ffn_norm_b, n, err, errlen)) != KVC_OK)
			return rc;
		if (hp->ffn_plain) {
			/* gpt2: GELU(up x + b_up), no gate */
			if ((rc = matmul(c, &d->w_up, c->xb, c->hb, n, true, err, errlen)) != KVC_OK)
				return rc;
			kernel_gelu_bias<<<nblk((int64_t)n * hp->n_ff, 256), 256, 0, c->stream>>>(c->hb, d->b_up,
			    (int64_t)n * hp->n_ff, hp->n_ff);
			LAUNCHED("kernel_gelu_bias");
		} else if (glu_fusable(d, n)) {
			if ((rc = need_xq(c, c->xb, d->w_gate.n_in, true, err, errlen)) != KVC_OK)
				return rc;
			mv_i8_glu(c->stream, d->w_gate.type, (const uint8_t *)d->w_gate.d, (const uint8_t *)d->w_up.d,
			    d->w_gate.row_bytes, c->xq, c->hb, d->w_gate.n_in, d->w_gate.n_out, c->n_sm, hp->ffn_gelu);
			LAUNCHED("kernel_mv_i8_glu");
		} else {
			if ((rc = matmul(c, &d->w_gate, c->xb, c->hb, n, true, err, errlen)) != KVC_OK ||
			    (rc = matmul(c, &d->w_up, c->xb, c->hb2, n, true, err, errlen)) != KVC_OK)
				return rc;
			kernel_swiglu<<<nblk((int64_t)n * hp->n_ff, 256), 256, 0, c->stream>>>(c->hb, c->hb2,
			    (int64_t)n * hp->n_ff, hp->ffn_gelu);
			LAUNCHED("kernel_swiglu");
		}
		if ((rc = project_add(c, &d->w_down, c->hb, d->b_down, d->ffn_post_norm, n, err, errlen)) != KVC_OK)
			return rc;
	}
	if (nl > 0) {
		if ((rc = block_norm_q(c, c->x + (int64_t)(n - nl) * E, c->output_norm, c->output_norm_b, nl,
		    err, errlen)) != KVC_OK ||
		    (rc = matmul(c, &c->output, c->xb, c->logits, nl, true, err, errlen)) != KVC_OK)
			return rc;
		if (hp->final_softcap > 0) {
			kernel_softcap<<<nblk((int64_t)nl * hp->n_vocab, 256), 256, 0, c->stream>>>(c->logits,
			    (int64_t)nl * hp->n_vocab, hp->final_softcap);
			LAUNCHED("kernel_softcap");
		}
	}
	return KVC_OK;
}

/*
 * One token's forward_kernels as a CUDA graph: captured when graph_key
 * changes (another cache, a grown one, reallocated scratch), updated in
 * place when the new capture has the same shape, then replayed. A capture
 * the runtime refuses turns graphs off for this context and runs the step
 * kernel by kernel (KVC_OK); a kernel's own launch error is returned.
 */
static int
decode_graph(struct cuda_ctx *c, struct cuda_kv *kv, char *err, size_t errlen)
{
	struct graph_key want = { kv->gen, c->scratch_gen, kv->n_ctx };
	cudaGraph_t g = NULL;
	cudaError_t e;
	int rc;

	if (!graph_key_same(&c->graph_key, &want)) {
		c->graph_key.kv_gen = 0;
		if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
			cudaGetLastError();
			c->use_graph = false;
			return forward_kernels(c, kv, 1, 1, err, errlen);
		}
		rc = forward_kernels(c, kv, 1, 1, err, errlen);
		e = cudaStreamEndCapture(c->stream, &g);
		if (rc != KVC_OK || e != cudaSuccess) {
			if (g)
				cudaGraphDestroy(g);
			cudaGetLastError();
			if (rc != KVC_OK)
				return rc;
			c->use_graph = false;
			return forward_kernels(c, kv, 1, 1, err, errlen);
		}
		if (c->graph_exec) {
			cudaGraphExecUpdateResultInfo info;

			if (cudaGraphExecUpdate(c->graph_exec, g, &info) != cudaSuccess) {
				cudaGetLastError();
				cudaGraphExecDestroy(c->graph_exec);
				c->graph_exec = NULL;
			}
		}
		e = c->graph_exec ? cudaSuccess : cudaGraphInstantiate(&c->graph_exec, g, 0);
		cudaGraphDestroy(g);
		if (e != cudaSuccess) {
			cudaGetLastError();
			c->graph_exec = NULL;
			c->use_graph = false;
			return forward_kernels(c, kv, 1, 1, err, errlen);
		}
		c->graph_key = want;
		c->graph_captures++;
	}
	CUDA_CHECK(cudaGraphLaunch(c->graph_exec, c->stream), err, errlen);
	c->graph_replays++;
	return KVC_OK;
}

/* Tokens tok[0..n) (n <= CHUNK) at positions pos0..; logits of rows [lo, n) into out. */
static int
forward_chunk(struct cuda_ctx *c, struct cuda_kv *kv, const int32_t *tokens, int n, int pos0,
    float *logits, int lo, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int nl = logits != NULL && lo < n ? n - lo : 0;
	int rc;

	if (nl > 0 && (rc = ensure_logits(c, nl, err, errlen)) != KVC_OK)
		return rc;
	if (n == 1) {
		/* pinned: truly asynchronous copies, reused by every step */
		c->h_in[0] = tokens[0];
		c->h_in[1] = pos0;
		CUDA_CHECK(cudaMemcpyAsync(c->tokens, c->h_in, sizeof(int), cudaMemcpyHostToDevice, c->stream),
		    err, errlen);
		CUDA_CHECK(cudaMemcpyAsync(c->d_pos, c->h_in + 1, sizeof(int), cudaMemcpyHostToDevice, c->stream),
		    err, errlen);
	} else {
		CUDA_CHECK(cudaMemcpyAsync(c->tokens, tokens, (size_t)n * 4, cudaMemcpyHostToDevice, c->stream),
		    err, errlen);
		CUDA_CHECK(cudaMemcpyAsync(c->d_pos, &pos0, sizeof pos0, cudaMemcpyHostToDevice, c->stream),
		    err, errlen);
	}
	if (n == 1 && nl == 1 && c->use_graph)
		rc = decode_graph(c, kv, err, errlen);
	else
		rc = forward_kernels(c, kv, n, nl, err, errlen);
	if (rc != KVC_OK)
		return rc;
	if (nl > 0)
		CUDA_CHECK(cudaMemcpyAsync(logits, c->logits, (size_t)nl * hp->n_vocab * 4,
		    cudaMemcpyDeviceToHost, c->stream), err, errlen);
	/* also keeps &pos0, tokens and h_in alive until their copies are done */
	CUDA_CHECK(cudaStreamSynchronize(c->stream), err, errlen);
	return KVC_OK;
}

static int
cuda_forward(void *ctx, void *p, const int32_t *tokens, int n, int pos0,
    float *logits, bool all_logits, char *err, size_t errlen)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	struct cuda_kv *kv = (struct cuda_kv *)p;
	const struct kvc_hparams *hp = &c->m->hp;
	int rc, done;

	if ((rc = kvc_backend_forward_check(n, pos0, kv->n_valid, kv->n_ctx, err, errlen)) != KVC_OK)
		return rc;
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= hp->n_vocab) {
			kvc_err(err, errlen, "token id %d out of range (vocabulary %d)", tokens[i], hp->n_vocab);
			return KVC_EINVAL;
		}
	if (c->pos_embd.d != NULL && pos0 + n > c->pos_embd.n_out) {
		kvc_err(err, errlen, "position %d is past the model's %lld learned positions",
		    pos0 + n - 1, (long long)c->pos_embd.n_out);
		return KVC_ERANGE;
	}
	CUDA_CHECK(cudaSetDevice(c->dev), err, errlen);
	if ((rc = kv_grow(c, kv, pos0 + n, err, errlen)) != KVC_OK ||
	    (rc = ensure_scratch(c, n < CHUNK ? n : CHUNK, err, errlen)) != KVC_OK)
		return rc;
	kv->n_valid = pos0;	/* what lies past pos0 is being replaced */
	for (done = 0; done < n; ) {
		int nc = n - done < CHUNK ? n - done : CHUNK, lo = nc;
		float *out = NULL;

		if (logits != NULL && all_logits) {
			out = logits + (size_t)done * hp->n_vocab;
			lo = 0;
		} else if (logits != NULL && done + nc == n) {
			out = logits;
			lo = nc - 1;
		}
		if ((rc = forward_chunk(c, kv, tokens + done, nc, pos0 + done, out, lo, err, errlen)) != KVC_OK)
			return rc;
		done += nc;
		kv->n_valid = pos0 + done;
	}
	return KVC_OK;
}

static int
kv_copy(struct cuda_ctx *c, struct cuda_kv *kv, int layer, enum kvc_kv_part part, int pos0, int n,
    void *host, bool to_host, char *err, size_t errlen)
{
	size_t elt = kv->type == GGML_TYPE_F16 ? 2 : 4, row = (size_t)kv->kv_dim * elt;
	int rc;

	if (layer < 0 || layer >= kv->n_layer || pos0 < 0 || n < 0 || pos0 > kv->n_ctx - n) {
		kvc_err(err, errlen, "bad KV range: layer %d, positions %d+%d (context %d)",
		    layer, pos0, n, kv->n_ctx);
		return KVC_EINVAL;
	}
	if (to_host && pos0 + n > kv->n_valid) {
		kvc_err(err, errlen, "KV positions %d..%d are not computed (have %d)",
		    pos0, pos0 + n, kv->n_valid);
		return KVC_EINVAL;
	}
	if (!to_host && host == NULL) {
		/* "not held": this cache keeps every position, so the caller recomputes (backend.h) */
		kvc_err(err, errlen, "the CUDA backend keeps every position: positions %d..%d cannot be "
		    "marked as not held", pos0, pos0 + n);
		return KVC_ENOTFOUND;
	}
	if (!to_host && pos0 > kv->n_valid) {
		kvc_err(err, errlen, "KV write at position %d would leave a gap (have %d)",
		    pos0, kv->n_valid);
		return KVC_EINVAL;
	}
	CUDA_CHECK(cudaSetDevice(c->dev), err, errlen);
	if (!to_host && (rc = kv_grow(c, kv, pos0 + n, err, errlen)) != KVC_OK)
		return rc;
	if (n == 0)
		return KVC_OK;
	char *dev = (char *)(part == KVC_KV_K ? kv->k[layer] : kv->v[layer]) + (size_t)pos0 * row;
	/* on our stream: ordered after any forward still touching the cache */
	CUDA_CHECK(cudaMemcpyAsync(to_host ? host : dev, to_host ? dev : host, (size_t)n * row,
	    to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, c->stream), err, errlen);
	CUDA_CHECK(cudaStreamSynchronize(c->stream), err, errlen);
	if (!to_host && pos0 + n > kv->n_valid)
		kv->n_valid = pos0 + n;
	return KVC_OK;
}

static int
cuda_kv_read(void *ctx, void *kv, int layer, enum kvc_kv_part part, int pos0, int n, void *dst,
    char *err, size_t errlen)
{
	return kv_copy((struct cuda_ctx *)ctx, (struct cuda_kv *)kv, layer, part, pos0, n, dst, true, err, errlen);
}

static int
cuda_kv_write(void *ctx, void *kv, int layer, enum kvc_kv_part part, int pos0, int n, const void *src,
    char *err, size_t errlen)
{
	return kv_copy((struct cuda_ctx *)ctx, (struct cuda_kv *)kv, layer, part, pos0, n, (void *)src, false,
	    err, errlen);
}

static void
cuda_describe(void *ctx, struct kvc_buf *out)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	struct cudaDeviceProp prop;
	size_t free_b = 0, total_b = 0;

	cudaSetDevice(c->dev);
	if (cudaGetDeviceProperties(&prop, c->dev) != cudaSuccess)
		snprintf(prop.name, sizeof prop.name, "?");
	cudaMemGetInfo(&free_b, &total_b);
	kvc_buf_printf(out, "backend cuda: device %d (%s), %.1f of %.1f GiB free\n",
	    c->dev, prop.name, free_b / 1073741824.0, total_b / 1073741824.0);
	kvc_buf_printf(out, "weights: %.1f MiB in GPU memory\n", c->weight_bytes / 1048576.0);
	kvc_buf_printf(out, "KV caches: %.1f MiB committed in GPU memory\n", c->kv_used / 1048576.0);
	kvc_buf_printf(out, "decode: %s (%lu captures, %lu replays)\n", c->use_graph ? "one CUDA graph per step" :
	    "kernel by kernel (KVCHAT_CUDA_GRAPH=0, KVCHAT_CUDA_SYNC=1 or a refused capture)",
	    c->graph_captures, c->graph_replays);
}

/* CUDA devices usable now; 0 with cudaGetErrorString's words (an old driver, no device). */
static int
cuda_device_count(char *why, size_t whylen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess) {
		kvc_err(why, whylen, "%s", cudaGetErrorString(e));
		return 0;
	}
	if (n == 0)
		kvc_err(why, whylen, "no CUDA device present");
	return n;
}

static void
cuda_describe_devices(struct kvc_buf *out)
{
	int n = 0, drv = 0, rt = 0;

	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	kvc_buf_printf(out, "cuda: driver %d.%d, runtime %d.%d\n", drv / 1000, drv % 1000 / 10,
	    rt / 1000, rt % 1000 / 10);
	if (cudaGetDeviceCount(&n) != cudaSuccess)
		return;
	for (int i = 0; i < n; i++) {
		struct cudaDeviceProp prop;

		if (cudaGetDeviceProperties(&prop, i) != cudaSuccess)
			continue;
		kvc_buf_printf(out, "cuda: device %d: %s, compute %d.%d, %.1f GiB\n", i, prop.name,
		    prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0);
	}
}

/* kv_shift, kv_lowest and forward_multi (the members after describe) stay NULL: slide
 * recomputes, and the engine decodes a batch of sequences one at a time with cuda_forward. */
static const struct kvc_backend_i cuda_backend = {
	"cuda",
	cuda_init,
	cuda_free,
	cuda_kv_create,
	cuda_kv_destroy,
	cuda_kv_bytes,
	cuda_forward,
	cuda_kv_read,
	cuda_kv_write,
	cuda_describe,
};

static const struct kvc_cuda_module cuda_module = {
	KVC_CUDA_ABI,
	PACKAGE_VERSION,
	KVC_CUDA_ARCHS,
	&cuda_backend,
	cuda_device_count,
	cuda_describe_devices,
};

/* The module's entry point (KVC_CUDA_ENTRY), the one symbol src/backend/backend.c looks up. */
extern "C" __attribute__((visibility("default"))) const struct kvc_cuda_module *
kvc_cuda_module_get(void)
{
	return &cuda_module;
}
