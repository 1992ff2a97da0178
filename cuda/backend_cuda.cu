/*
 * backend_cuda.cu: the CUDA backend behind kvc_backend_i (src/backend.h).
 *
 * Weights are uploaded in their GGUF block formats (no whole-model
 * dequantisation). Decode (one token) runs one matrix-vector kernel per
 * weight type that dequantises in registers; prefill (several tokens)
 * dequantises one matrix at a time into an F16 scratch buffer and calls
 * cublasGemmEx on the tensor cores. Attention is one fused kernel with an
 * online softmax over the cache (no score matrix in device memory).
 *
 * STATUS: compiled on machines without a GPU; NOT yet run on a device.
 * Speed work (wide loads, split-K attention, CUDA graphs, GPU sampling,
 * paged KV blocks) is still to do; see issue 5 and docs/BENCHMARKS.md.
 */
extern "C" {
#include "backend.h"
#include "quant.h"
}

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

/* A weight on the device, in its file type. */
struct dweight {
	const void *d;		/* device bytes; NULL if absent */
	int type;		/* enum ggml_type */
	int64_t n_in, n_out;
	size_t row_bytes;
};

struct dlayer {
	float *attn_norm, *ffn_norm;		/* (n_embd) f32 */
	float *bq, *bk, *bv;			/* biases or NULL */
	float *q_norm, *k_norm;			/* (head_dim) or NULL */
	struct dweight wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct cuda_ctx {
	const struct kvc_model *m;
	int dev;
	cublasHandle_t blas;
	cudaStream_t stream;
	struct dweight tok_embd, output;
	float *output_norm;
	float *rope_freqs;			/* (rope_dim/2) or NULL */
	struct dlayer *layers;
	size_t weight_bytes;
	size_t kv_budget, kv_used;
	/* scratch, grown to the largest batch seen */
	int cap_tok;
	float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *logits;	/* (cap_tok, dim) f32 */
	int32_t *tokens;
	__half *wscratch;			/* largest matrix as f16 */
	__half *xh;				/* activations as f16 for GEMM */
	size_t wscratch_elems, xh_elems;
};

struct cuda_kv {
	int n_ctx, cap;				/* positions allowed / allocated */
	int type;				/* GGML_TYPE_F16 or GGML_TYPE_F32 */
	int n_layer, kv_dim;
	void **k, **v;				/* [n_layer] device (cap, kv_dim) */
	size_t bytes;
};

/* ---- dequantisation in registers (block layouts as in src/quant.h) ---- */

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
 * Dot of one block (block index b of a row) with x; also usable to
 * dequantise by passing out != NULL. Blocks: F32/F16/BF16 use 32-element
 * pseudo-blocks so one code path serves every type.
 */
__device__ static float
block_dot(int type, const uint8_t *row, int64_t b, const float *x, float *out)
{
	float s = 0.f;

	switch (type) {
	case GGML_TYPE_F32: {
		const float *w = (const float *)row + b * 32;
		for (int i = 0; i < 32; i++) {
			if (out) out[i] = w[i];
			s += w[i] * x[i];
		}
		break;
	}
	case GGML_TYPE_F16: {
		const uint16_t *w = (const uint16_t *)row + b * 32;
		for (int i = 0; i < 32; i++) {
			float f = h2f(w[i]);
			if (out) out[i] = f;
			s += f * x[i];
		}
		break;
	}
	case GGML_TYPE_BF16: {
		const uint16_t *w = (const uint16_t *)row + b * 32;
		for (int i = 0; i < 32; i++) {
			float f = __uint_as_float((uint32_t)w[i] << 16);
			if (out) out[i] = f;
			s += f * x[i];
		}
		break;
	}
	case GGML_TYPE_Q8_0: {
		const uint8_t *p = row + b * 34;
		float d = h2f(ld16(p));
		const int8_t *q = (const int8_t *)(p + 2);
		for (int i = 0; i < 32; i++) {
			float f = d * q[i];
			if (out) out[i] = f;
			s += f * x[i];
		}
		break;
	}
	case GGML_TYPE_Q4_0: {
		const uint8_t *p = row + b * 18;
		float d = h2f(ld16(p));
		const uint8_t *q = p + 2;
		for (int i = 0; i < 16; i++) {
			float lo = d * ((q[i] & 0xF) - 8), hi = d * ((q[i] >> 4) - 8);
			if (out) { out[i] = lo; out[i + 16] = hi; }
			s += lo * x[i] + hi * x[i + 16];
		}
		break;
	}
	case GGML_TYPE_Q4_K: {
		const uint8_t *p = row + b * 144;
		float d = h2f(ld16(p)), dmin = h2f(ld16(p + 2));
		const uint8_t *scales = p + 4, *q = p + 16;
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
		break;
	}
	case GGML_TYPE_Q5_K: {
		const uint8_t *p = row + b * 176;
		float d = h2f(ld16(p)), dmin = h2f(ld16(p + 2));
		const uint8_t *scales = p + 4, *qh = p + 16, *q = p + 48;
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
		break;
	}
	case GGML_TYPE_Q6_K: {
		const uint8_t *p = row + b * 210;
		const uint8_t *ql0 = p, *qh0 = p + 128;
		const int8_t *sc0 = (const int8_t *)(p + 192);
		float d = h2f(ld16(p + 208));
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
		break;
	}
	}
	return s;
}

/* Elements per block as block_dot sees them (32 for the float types). */
static int
dev_block(int type)
{
	int64_t b = ggml_blck_size((enum ggml_type)type);
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
	extern __shared__ float xs[];
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

/* Embedding rows for n tokens: out[t] = dequant(E[tokens[t]]). */
__global__ static void
kernel_embed(int type, const uint8_t *E, size_t row_bytes, const int32_t *tokens,
    float *out, int64_t n_embd, int blk)
{
	float buf[256];
	int t = blockIdx.x;
	const uint8_t *row = E + (size_t)tokens[t] * row_bytes;

	for (int64_t b = threadIdx.x; b < n_embd / blk; b += blockDim.x) {
		block_dot(type, row, b, buf, buf);
		for (int j = 0; j < blk; j++)
			out[(int64_t)t * n_embd + b * blk + j] = buf[j];
	}
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

/* hb = silu(hb) * hb2 */
__global__ static void
kernel_swiglu(float *hb, const float *hb2, int64_t total)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < total) {
		float g = hb[i];
		hb[i] = g / (1.f + expf(-g)) * hb2[i];
	}
}

/*
 * RoPE on n tokens x n_heads heads of head_dim, rotating the first rope_dim
 * dims: adjacent pairs (2i, 2i+1) or NeoX halves (i, i + rope_dim/2).
 */
__global__ static void
kernel_rope(float *x, int n_heads, int head_dim, int rope_dim, int pos0,
    float theta, float freq_scale, bool neox, const float *freq_factors)
{
	int t = blockIdx.x, h = blockIdx.y;
	float *v = x + ((int64_t)t * n_heads + h) * head_dim;
	int pos = pos0 + t;

	for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x) {
		float freq = freq_scale * powf(theta, -2.f * i / rope_dim);
		if (freq_factors)
			freq /= freq_factors[i];
		float a = pos * freq, c = cosf(a), s = sinf(a);
		int i0 = neox ? i : 2 * i, i1 = neox ? i + rope_dim / 2 : 2 * i + 1;
		float x0 = v[i0], x1 = v[i1];
		v[i0] = x0 * c - x1 * s;
		v[i1] = x0 * s + x1 * c;
	}
}

/* Store n rows of kv_dim floats into the cache (f16 or f32) at pos0. */
__global__ static void
kernel_kv_store(void *cache, bool f16, const float *src, int pos0, int64_t total, int kv_dim)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= total)
		return;
	int64_t dst = (int64_t)pos0 * kv_dim + i;
	if (f16)
		((__half *)cache)[dst] = __float2half(src[i]);
	else
		((float *)cache)[dst] = src[i];
}

__device__ static inline float
kv_at(const void *c, bool f16, int64_t i)
{
	return f16 ? __half2float(((const __half *)c)[i]) : ((const float *)c)[i];
}

/*
 * Causal grouped-query attention with an online softmax. One block per
 * (query token, head); each warp walks a strided subset of positions
 * keeping its own max, sum and output accumulator (in shared memory), then
 * the warps are merged. head_dim <= 256. Reads K and V of positions
 * [0, pos0 + t] once per head: bytes = 2 * (pos+1) * head_dim * elt.
 */
#define ATT_WARPS 4
__global__ static void
kernel_attention(const float *q, const void *kc, const void *vc, bool f16,
    float *out, int n_head, int n_head_kv, int head_dim, int pos0, float scale)
{
	__shared__ float acc[ATT_WARPS][256];
	__shared__ float wm[ATT_WARPS], ws[ATT_WARPS];
	int t = blockIdx.x, h = blockIdx.y;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int kvh = h / (n_head / n_head_kv), kv_dim = n_head_kv * head_dim;
	const float *qv = q + ((int64_t)t * n_head + h) * head_dim;
	int n_pos = pos0 + t + 1;
	float m = -INFINITY, s = 0.f;

	for (int i = lane; i < head_dim; i += 32)
		acc[warp][i] = 0.f;
	for (int p = warp; p < n_pos; p += ATT_WARPS) {
		int64_t base = (int64_t)p * kv_dim + (int64_t)kvh * head_dim;
		float dot = 0.f;
		for (int i = lane; i < head_dim; i += 32)
			dot += qv[i] * kv_at(kc, f16, base + i);
		for (int o = 16; o > 0; o /= 2)
			dot += __shfl_xor_sync(0xffffffffu, dot, o);
		dot *= scale;
		float m2 = fmaxf(m, dot), corr = expf(m - m2), e = expf(dot - m2);
		s = s * corr + e;
		for (int i = lane; i < head_dim; i += 32)
			acc[warp][i] = acc[warp][i] * corr + e * kv_at(vc, f16, base + i);
		m = m2;
	}
	if (lane == 0) {
		wm[warp] = m;
		ws[warp] = s;
	}
	__syncthreads();
	float M = -INFINITY, S = 0.f;
	for (int w = 0; w < ATT_WARPS; w++)
		M = fmaxf(M, wm[w]);
	for (int w = 0; w < ATT_WARPS; w++)
		if (ws[w] > 0.f)
			S += ws[w] * expf(wm[w] - M);
	float *o = out + ((int64_t)t * n_head + h) * head_dim;
	for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
		float v = 0.f;
		for (int w = 0; w < ATT_WARPS; w++)
			if (ws[w] > 0.f)
				v += acc[w][i] * expf(wm[w] - M);
		o[i] = v / S;
	}
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

static int
upload(struct cuda_ctx *c, const void *src, size_t bytes, void **dst, char *err, size_t errlen)
{
	CUDA_CHECK(cudaMalloc(dst, bytes), err, errlen);
	CUDA_CHECK(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice), err, errlen);
	c->weight_bytes += bytes;
	return KVC_OK;
}

static int
upload_weight(struct cuda_ctx *c, const struct kvc_weight *w, struct dweight *d, char *err, size_t errlen)
{
	void *p = NULL;
	int rc;

	memset(d, 0, sizeof *d);
	if (w->data == NULL)
		return KVC_OK;
	if ((rc = upload(c, w->data, w->row_bytes * (size_t)w->n_out, &p, err, errlen)) != KVC_OK)
		return rc;
	d->d = p;
	d->type = w->type;
	d->n_in = w->n_in;
	d->n_out = w->n_out;
	d->row_bytes = w->row_bytes;
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
	if ((tmp = (float *)malloc((size_t)n * sizeof *tmp)) == NULL)
		return KVC_ENOMEM;
	q_dequant_row(w->type, w->data, tmp, n);
	rc = upload(c, tmp, (size_t)n * sizeof *tmp, (void **)out, err, errlen);
	free(tmp);
	return rc;
}

static void cuda_free(void *ctx);

static int
cuda_init(void **out, const struct kvc_model *m, const struct kvc_backend_params *p,
    char *err, size_t errlen)
{
	struct cuda_ctx *c;
	const struct kvc_hparams *hp = &m->hp;
	uint64_t done = 0, total = (uint64_t)hp->n_layer + 2;
	int rc, n_dev = 0;

	*out = NULL;
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
		kvc_err(err, errlen, "cuda: no CUDA device found");
		return KVC_EUNSUPPORTED;
	}
	if (p->gpu < 0 || p->gpu >= n_dev) {
		kvc_err(err, errlen, "cuda: device %d does not exist (%d found)", p->gpu, n_dev);
		return KVC_EINVAL;
	}
	if (hp->head_dim > 256) {
		kvc_err(err, errlen, "cuda: head size %d is larger than the 256 supported", hp->head_dim);
		return KVC_EUNSUPPORTED;
	}
	if ((c = (struct cuda_ctx *)calloc(1, sizeof *c)) == NULL)
		return KVC_ENOMEM;
	c->m = m;
	c->dev = p->gpu;
	c->kv_budget = p->kv_budget;
	*out = c;
#define TRY(x) do { if ((rc = (x)) != KVC_OK) { cuda_free(c); *out = NULL; return rc; } } while (0)
	TRY(cudaSetDevice(c->dev) == cudaSuccess ? KVC_OK : KVC_EIO);
	TRY(cudaStreamCreate(&c->stream) == cudaSuccess ? KVC_OK : KVC_EIO);
	if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
		kvc_err(err, errlen, "cublas: cannot create a handle");
		cuda_free(c);
		*out = NULL;
		return KVC_EIO;
	}
	cublasSetStream(c->blas, c->stream);
	TRY(upload_weight(c, &m->tok_embd, &c->tok_embd, err, errlen));
	TRY(upload_weight(c, &m->output, &c->output, err, errlen));
	TRY(upload_vec(c, &m->output_norm, &c->output_norm, err, errlen));
	TRY(upload_vec(c, &m->rope_freqs, &c->rope_freqs, err, errlen));
	if (p->progress)
		p->progress(p->progress_arg, ++done, total);
	c->layers = (struct dlayer *)calloc((size_t)hp->n_layer, sizeof *c->layers);
	if (c->layers == NULL)
		TRY(KVC_ENOMEM);
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
		TRY(upload_weight(c, &lw->wq, &dl->wq, err, errlen));
		TRY(upload_weight(c, &lw->wk, &dl->wk, err, errlen));
		TRY(upload_weight(c, &lw->wv, &dl->wv, err, errlen));
		TRY(upload_weight(c, &lw->wo, &dl->wo, err, errlen));
		TRY(upload_weight(c, &lw->w_gate, &dl->w_gate, err, errlen));
		TRY(upload_weight(c, &lw->w_up, &dl->w_up, err, errlen));
		TRY(upload_weight(c, &lw->w_down, &dl->w_down, err, errlen));
		if (p->progress)
			p->progress(p->progress_arg, ++done, total);
	}
	if (p->progress)
		p->progress(p->progress_arg, total, total);
#undef TRY
	return KVC_OK;
}

static void
free_scratch(struct cuda_ctx *c)
{
	cudaFree(c->x); cudaFree(c->xb); cudaFree(c->q); cudaFree(c->k); cudaFree(c->v);
	cudaFree(c->att); cudaFree(c->hb); cudaFree(c->hb2); cudaFree(c->logits);
	cudaFree(c->tokens); cudaFree(c->wscratch); cudaFree(c->xh);
}

static void
cuda_free(void *ctx)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	if (c == NULL)
		return;
	if (c->layers) {
		for (int l = 0; l < c->m->hp.n_layer; l++) {
			struct dlayer *d = &c->layers[l];
			cudaFree(d->attn_norm); cudaFree(d->ffn_norm);
			cudaFree(d->bq); cudaFree(d->bk); cudaFree(d->bv);
			cudaFree(d->q_norm); cudaFree(d->k_norm);
			cudaFree((void *)d->wq.d); cudaFree((void *)d->wk.d); cudaFree((void *)d->wv.d);
			cudaFree((void *)d->wo.d); cudaFree((void *)d->w_gate.d);
			cudaFree((void *)d->w_up.d); cudaFree((void *)d->w_down.d);
		}
		free(c->layers);
	}
	cudaFree((void *)c->tok_embd.d);
	if (c->output.d != c->tok_embd.d)
		cudaFree((void *)c->output.d);
	cudaFree(c->output_norm);
	cudaFree(c->rope_freqs);
	free_scratch(c);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c);
}

/* Grow scratch to hold n tokens (and the largest matrix for GEMM). */
static int
ensure_scratch(struct cuda_ctx *c, int n, bool all_logits, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int64_t q_dim = (int64_t)hp->n_head * hp->head_dim, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
	int64_t wide = hp->n_ff > q_dim ? hp->n_ff : q_dim;
	size_t welems = 0;

	if (wide < hp->n_embd)
		wide = hp->n_embd;
	if (n <= c->cap_tok)
		return KVC_OK;
	free_scratch(c);
	c->cap_tok = n;
	CUDA_CHECK(cudaMalloc(&c->x, (size_t)n * hp->n_embd * 4), err, errlen);
	CUDA_CHECK(cudaMalloc(&c->xb, (size_t)n * wide * 4), err, errlen);
	CUDA_CHECK(cudaMalloc(&c->q, (size_t)n * q_dim * 4), err, errlen);
	CUDA_CHECK(cudaMalloc(&c->k, (size_t)n * kv_dim * 4), err, errlen);
	CUDA_CHECK(cudaMalloc(&c->v, (size_t)n * kv_dim * 4), err, errlen);
	CUDA_CHECK(cudaMalloc(&c->att, (size_t)n * q_dim * 4), err, errlen);
	CUDA_CHECK(cudaMalloc(&c->hb, (size_t)n * hp->n_ff * 4), err, errlen);
	CUDA_CHECK(cudaMalloc(&c->hb2, (size_t)n * hp->n_ff * 4), err, errlen);
	CUDA_CHECK(cudaMalloc(&c->logits, (size_t)(all_logits ? n : 1) * hp->n_vocab * 4), err, errlen);
	CUDA_CHECK(cudaMalloc(&c->tokens, (size_t)n * 4), err, errlen);
	c->xh_elems = (size_t)n * wide;
	CUDA_CHECK(cudaMalloc(&c->xh, c->xh_elems * 2), err, errlen);
	if (n > 1) {
		/* the largest matrix: output (vocab x embd) or an FFN matrix */
		welems = (size_t)hp->n_vocab * hp->n_embd;
		if ((size_t)hp->n_ff * hp->n_embd > welems)
			welems = (size_t)hp->n_ff * hp->n_embd;
		CUDA_CHECK(cudaMalloc(&c->wscratch, welems * 2), err, errlen);
	}
	c->wscratch_elems = welems;
	return KVC_OK;
}

__global__ static void
kernel_f32_to_f16(const float *x, __half *y, int64_t total)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < total)
		y[i] = __float2half(x[i]);
}

/*
 * Y (n, n_out) = X (n, n_in) . W^T. use_gemm = n > 1: dequantise W to f16
 * scratch and run cublasGemmEx (tensor cores, f32 accumulation); otherwise
 * the matrix-vector kernel that streams W once.
 */
static int
matmul(struct cuda_ctx *c, const struct dweight *w, const float *X, float *Y, int n,
    char *err, size_t errlen)
{
	int blk = dev_block(w->type);
	bool use_gemm = n > 1;

	if (!use_gemm) {
		size_t shmem = (size_t)w->n_in * sizeof(float);
		if (shmem > 48 * 1024)
			CUDA_CHECK(cudaFuncSetAttribute(kernel_matvec,
			    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem), err, errlen);
		kernel_matvec<<<nblk(w->n_out, 8), 256, shmem, c->stream>>>(w->type,
		    (const uint8_t *)w->d, w->row_bytes, X, Y, w->n_in, w->n_out, blk);
		CUDA_CHECK(cudaGetLastError(), err, errlen);
		return KVC_OK;
	}
	const float one = 1.f, zero = 0.f;
	kernel_dequant_f16<<<1024, 128, 0, c->stream>>>(w->type, (const uint8_t *)w->d,
	    w->row_bytes, c->wscratch, w->n_in, w->n_out, blk);
	kernel_f32_to_f16<<<nblk((int64_t)n * w->n_in, 256), 256, 0, c->stream>>>(X, c->xh,
	    (int64_t)n * w->n_in);
	CUDA_CHECK(cudaGetLastError(), err, errlen);
	/* column-major view: Y^T (n_out x n) = W (n_in x n_out)^T . X^T (n_in x n) */
	CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->n_out, n, (int)w->n_in,
	    &one, c->wscratch, CUDA_R_16F, (int)w->n_in, c->xh, CUDA_R_16F, (int)w->n_in,
	    &zero, Y, CUDA_R_32F, (int)w->n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), err, errlen);
	return KVC_OK;
}

static int
kv_grow(struct cuda_ctx *c, struct cuda_kv *kv, int need, char *err, size_t errlen)
{
	size_t elt = kv->type == GGML_TYPE_F16 ? 2 : 4;
	int cap = kv->cap ? kv->cap : 256;
	size_t add;

	if (need <= kv->cap)
		return KVC_OK;
	while (cap < need)
		cap *= 2;
	if (cap > kv->n_ctx)
		cap = kv->n_ctx;
	add = (size_t)(cap - kv->cap) * kv->kv_dim * elt * 2 * kv->n_layer;
	if (c->kv_budget && c->kv_used + add > c->kv_budget) {
		kvc_err(err, errlen, "cuda: KV cache budget of %zu MiB exhausted", c->kv_budget >> 20);
		return KVC_ERANGE;
	}
	for (int l = 0; l < kv->n_layer; l++) {
		void **parts[2] = { &kv->k[l], &kv->v[l] };
		for (int p = 0; p < 2; p++) {
			void *nb;
			CUDA_CHECK(cudaMalloc(&nb, (size_t)cap * kv->kv_dim * elt), err, errlen);
			if (*parts[p]) {
				CUDA_CHECK(cudaMemcpy(nb, *parts[p], (size_t)kv->cap * kv->kv_dim * elt,
				    cudaMemcpyDeviceToDevice), err, errlen);
				cudaFree(*parts[p]);
			}
			*parts[p] = nb;
		}
	}
	c->kv_used += add;
	kv->bytes += add;
	kv->cap = cap;
	return KVC_OK;
}

static int
cuda_kv_create(void *ctx, int n_ctx, enum ggml_type kv_type, void **out, char *err, size_t errlen)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	struct cuda_kv *kv;

	if (kv_type != GGML_TYPE_F16 && kv_type != GGML_TYPE_F32) {
		kvc_err(err, errlen, "cuda: KV cache type %s not supported", ggml_type_name(kv_type));
		return KVC_EUNSUPPORTED;
	}
	if ((kv = (struct cuda_kv *)calloc(1, sizeof *kv)) == NULL)
		return KVC_ENOMEM;
	kv->n_ctx = n_ctx;
	kv->type = kv_type;
	kv->n_layer = c->m->hp.n_layer;
	kv->kv_dim = c->m->hp.n_head_kv * c->m->hp.head_dim;
	kv->k = (void **)calloc((size_t)kv->n_layer, sizeof *kv->k);
	kv->v = (void **)calloc((size_t)kv->n_layer, sizeof *kv->v);
	if (kv->k == NULL || kv->v == NULL) {
		free(kv->k);
		free(kv->v);
		free(kv);
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

static int
cuda_forward(void *ctx, void *p, const int32_t *tokens, int n, int pos0,
    float *logits, bool all_logits, char *err, size_t errlen)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	struct cuda_kv *kv = (struct cuda_kv *)p;
	const struct kvc_hparams *hp = &c->m->hp;
	int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
	int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
	bool f16 = kv->type == GGML_TYPE_F16;
	int rc;

	if (n <= 0 || pos0 < 0 || pos0 + n > kv->n_ctx) {
		kvc_err(err, errlen, "cuda: positions %d..%d outside the context of %d", pos0, pos0 + n, kv->n_ctx);
		return KVC_ERANGE;
	}
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= hp->n_vocab) {
			kvc_err(err, errlen, "cuda: token id %d out of range", tokens[i]);
			return KVC_EINVAL;
		}
	if ((rc = ensure_scratch(c, n, all_logits, err, errlen)) != KVC_OK ||
	    (rc = kv_grow(c, kv, pos0 + n, err, errlen)) != KVC_OK)
		return rc;
	CUDA_CHECK(cudaMemcpyAsync(c->tokens, tokens, (size_t)n * 4, cudaMemcpyHostToDevice, c->stream), err, errlen);
	kernel_embed<<<n, 64, 0, c->stream>>>(c->tok_embd.type, (const uint8_t *)c->tok_embd.d,
	    c->tok_embd.row_bytes, c->tokens, c->x, E, dev_block(c->tok_embd.type));
	for (int l = 0; l < hp->n_layer; l++) {
		struct dlayer *d = &c->layers[l];
		launch_rmsnorm(c->stream, c->x, d->attn_norm, c->xb, n, (int)E, hp->rms_eps);
		if ((rc = matmul(c, &d->wq, c->xb, c->q, n, err, errlen)) != KVC_OK ||
		    (rc = matmul(c, &d->wk, c->xb, c->k, n, err, errlen)) != KVC_OK ||
		    (rc = matmul(c, &d->wv, c->xb, c->v, n, err, errlen)) != KVC_OK)
			return rc;
		if (d->bq) {
			kernel_add_bias<<<nblk(n * q_dim, 256), 256, 0, c->stream>>>(c->q, d->bq, n * q_dim, (int)q_dim);
			kernel_add_bias<<<nblk(n * kv_dim, 256), 256, 0, c->stream>>>(c->k, d->bk, n * kv_dim, (int)kv_dim);
			kernel_add_bias<<<nblk(n * kv_dim, 256), 256, 0, c->stream>>>(c->v, d->bv, n * kv_dim, (int)kv_dim);
		}
		if (d->q_norm) {
			launch_rmsnorm(c->stream, c->q, d->q_norm, c->q, n * hp->n_head, hp->head_dim, hp->rms_eps);
			launch_rmsnorm(c->stream, c->k, d->k_norm, c->k, n * hp->n_head_kv, hp->head_dim, hp->rms_eps);
		}
		kernel_rope<<<dim3(n, hp->n_head), 64, 0, c->stream>>>(c->q, hp->n_head, hp->head_dim,
		    hp->rope_dim, pos0, hp->rope_theta, hp->rope_freq_scale, hp->rope_neox, c->rope_freqs);
		kernel_rope<<<dim3(n, hp->n_head_kv), 64, 0, c->stream>>>(c->k, hp->n_head_kv, hp->head_dim,
		    hp->rope_dim, pos0, hp->rope_theta, hp->rope_freq_scale, hp->rope_neox, c->rope_freqs);
		kernel_kv_store<<<nblk(n * kv_dim, 256), 256, 0, c->stream>>>(kv->k[l], f16, c->k, pos0, n * kv_dim, (int)kv_dim);
		kernel_kv_store<<<nblk(n * kv_dim, 256), 256, 0, c->stream>>>(kv->v[l], f16, c->v, pos0, n * kv_dim, (int)kv_dim);
		kernel_attention<<<dim3(n, hp->n_head), 32 * ATT_WARPS, 0, c->stream>>>(c->q, kv->k[l], kv->v[l],
		    f16, c->att, hp->n_head, hp->n_head_kv, hp->head_dim, pos0, 1.f / sqrtf((float)hp->head_dim));
		if ((rc = matmul(c, &d->wo, c->att, c->xb, n, err, errlen)) != KVC_OK)
			return rc;
		kernel_add<<<nblk(n * E, 256), 256, 0, c->stream>>>(c->x, c->xb, n * E);
		launch_rmsnorm(c->stream, c->x, d->ffn_norm, c->xb, n, (int)E, hp->rms_eps);
		if ((rc = matmul(c, &d->w_gate, c->xb, c->hb, n, err, errlen)) != KVC_OK ||
		    (rc = matmul(c, &d->w_up, c->xb, c->hb2, n, err, errlen)) != KVC_OK)
			return rc;
		kernel_swiglu<<<nblk((int64_t)n * hp->n_ff, 256), 256, 0, c->stream>>>(c->hb, c->hb2, (int64_t)n * hp->n_ff);
		if ((rc = matmul(c, &d->w_down, c->hb, c->xb, n, err, errlen)) != KVC_OK)
			return rc;
		kernel_add<<<nblk(n * E, 256), 256, 0, c->stream>>>(c->x, c->xb, n * E);
	}
	CUDA_CHECK(cudaGetLastError(), err, errlen);
	if (logits != NULL) {
		int nl = all_logits ? n : 1;
		const float *src = c->x + (all_logits ? 0 : (int64_t)(n - 1) * E);
		launch_rmsnorm(c->stream, src, c->output_norm, c->xb, nl, (int)E, hp->rms_eps);
		if ((rc = matmul(c, &c->output, c->xb, c->logits, nl, err, errlen)) != KVC_OK)
			return rc;
		CUDA_CHECK(cudaMemcpyAsync(logits, c->logits, (size_t)nl * hp->n_vocab * 4,
		    cudaMemcpyDeviceToHost, c->stream), err, errlen);
	}
	CUDA_CHECK(cudaStreamSynchronize(c->stream), err, errlen);
	return KVC_OK;
}

static int
kv_copy(struct cuda_ctx *c, struct cuda_kv *kv, int layer, enum kvc_kv_part part, int pos0, int n,
    void *host, bool to_host, char *err, size_t errlen)
{
	size_t elt = kv->type == GGML_TYPE_F16 ? 2 : 4, row = (size_t)kv->kv_dim * elt;
	int rc;

	if (layer < 0 || layer >= kv->n_layer || pos0 < 0 || n < 0 || pos0 + n > kv->n_ctx) {
		kvc_err(err, errlen, "cuda: KV range %d..%d of layer %d out of bounds", pos0, pos0 + n, layer);
		return KVC_ERANGE;
	}
	if (!to_host && (rc = kv_grow(c, kv, pos0 + n, err, errlen)) != KVC_OK)
		return rc;
	if (to_host && pos0 + n > kv->cap) {
		kvc_err(err, errlen, "cuda: KV positions %d..%d were never written", pos0, pos0 + n);
		return KVC_ERANGE;
	}
	char *dev = (char *)(part == KVC_KV_K ? kv->k[layer] : kv->v[layer]) + (size_t)pos0 * row;
	if (to_host)
		CUDA_CHECK(cudaMemcpy(host, dev, (size_t)n * row, cudaMemcpyDeviceToHost), err, errlen);
	else
		CUDA_CHECK(cudaMemcpy(dev, host, (size_t)n * row, cudaMemcpyHostToDevice), err, errlen);
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

	cudaGetDeviceProperties(&prop, c->dev);
	cudaMemGetInfo(&free_b, &total_b);
	kvc_buf_printf(out, "cuda device %d (%s): weights %.1f MiB, KV caches %.1f MiB, %.1f of %.1f GiB free",
	    c->dev, prop.name, c->weight_bytes / 1048576.0, c->kv_used / 1048576.0,
	    free_b / 1073741824.0, total_b / 1073741824.0);
}

extern "C" int
kvc_cuda_device_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess)
		return 0;
	return n;
}

extern "C" const struct kvc_backend_i kvc_backend_cuda = {
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
