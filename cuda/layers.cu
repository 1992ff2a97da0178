/*
 * layers.cu: the CUDA backend's forward pass: the order of kernels from
 * the embedding to the logits (norms, Q/K/V with RoPE and the cache store,
 * attention, FFN, residuals; fused for one token where exact), the small
 * element-wise kernels between the products, the scratch they use, and
 * decode as one replayed CUDA graph per step, and forward_multi's pass
 * (several sequences' tokens as the rows of one batch, struct cu_rows).
 */
#include "cuda_int.h"
#include "dev_util.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * memory so that a captured graph can be replayed at any position. cos
 * and sin are multiplied by mscale (YaRN's rope_mscale, else 1), as the
 * CPU's. per_row (forward_multi): token t's position is pos0[t], else
 * *pos0 + t. grid (n, n_heads), block 64; bytes: 2 * n * n_heads *
 * rope_dim * 4.
 */
__global__ static void
kernel_rope(float *x, int n_heads, int head_dim, int rope_dim, const int *pos0, bool per_row,
    bool neox, const double *inv_freq, float mscale)
{
	int t = blockIdx.x, h = blockIdx.y;
	float *v = x + ((int64_t)t * n_heads + h) * head_dim;
	int pos = per_row ? pos0[t] : *pos0 + t;

	for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x) {
		double sd, cd;
		sincos((double)pos * inv_freq[i], &sd, &cd);
		float c = (float)(cd * mscale), s = (float)(sd * mscale);
		int i0 = neox ? i : 2 * i, i1 = neox ? i + rope_dim / 2 : 2 * i + 1;
		float x0 = v[i0], x1 = v[i1];
		v[i0] = x0 * c - x1 * s;
		v[i1] = x0 * s + x1 * c;
	}
}

/* Store n rows of kv_dim floats into the cache (f16 or f32; Q8_0 is kv_q8.cu's) at *pos0. */
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

/*
 * Row t's K and V (kv_dim floats each, row t of k and of v) into layer l's
 * buffers of row t's cache at position pos[t]. grid n, block 256. Bytes:
 * 2 * n * kv_dim * 4 read, 2 * n * kv_dim * elt written.
 */
__global__ static void
kernel_kv_store_rows(void *const *kc, void *const *vc, const int *pos, bool f16, const float *k,
    const float *v, int kv_dim)
{
	int t = blockIdx.x;
	int64_t src = (int64_t)t * kv_dim, dst = (int64_t)pos[t] * kv_dim;

	for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
		if (f16) {
			((__half *)kc[t])[dst + i] = __float2half(k[src + i]);
			((__half *)vc[t])[dst + i] = __float2half(v[src + i]);
		} else {
			((float *)kc[t])[dst + i] = k[src + i];
			((float *)vc[t])[dst + i] = v[src + i];
		}
	}
}

static cudaError_t
kv_store_rows(cudaStream_t st, const struct cu_rows *r, int l, const float *k, const float *v, int kv_dim)
{
	kernel_kv_store_rows<<<r->n, 256, 0, st>>>(r->k + (size_t)l * r->n, r->v + (size_t)l * r->n, r->pos,
	    r->f16, k, v, kv_dim);
	return cudaPeekAtLastError();
}

/* RMSNorm over each head (qwen3 q/k norms): n_rows rows of head_dim. */
static void
launch_rmsnorm(cudaStream_t st, const float *x, const float *w, float *out, int rows, int d, float eps)
{
	kernel_rmsnorm<<<rows, 256, 0, st>>>(x, w, out, d, eps);
}

void
cu_free_scratch(struct cuda_ctx *c)
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
int
cu_ensure_scratch(struct cuda_ctx *c, int n, char *err, size_t errlen)
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
	cu_free_scratch(c);
	if ((rc = scratch_alloc((void **)&c->x, t * hp->n_embd * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->xb, t * wide * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->q, t * q_dim * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->att, t * q_dim * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->k, t * kv_dim * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->v, t * kv_dim * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->hb, t * hp->n_ff * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->hb2, t * hp->n_ff * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->tokens, t * 4, n, err, errlen)) ||
	    (rc = scratch_alloc((void **)&c->xq, (size_t)(c->max_n_in / 32 * MV_MULTI_MAX + 1) * sizeof(struct xq8), n,
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
	cu_free_scratch(c);
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
		kernel_add_bias<<<grid_blocks(n * E, 256), 256, 0, c->stream>>>(y, bias, n * E, (int)E);
		LAUNCHED("kernel_add_bias (output bias)");
	}
	if (post) {
		launch_rmsnorm(c->stream, y, post, y, n, (int)E, hp->rms_eps);
		LAUNCHED("kernel_rmsnorm (post-norm)");
	}
	kernel_add<<<grid_blocks(n * E, 256), 256, 0, c->stream>>>(x, y, n * E);
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
	if ((rc = cu_matmul(c, w, X, c->xb, n, false, err, errlen)) != KVC_OK)
		return rc;
	return residual(c, c->x, c->xb, bias, post, n, err, errlen);
}

/*
 * One token's Q, K and V, each one kernel_mv_i8_qkv: bias, RoPE and the
 * cache store in the product's epilogue (no q/k norms: those need the
 * whole head before RoPE, see qkv_fusable); a Q8_0 cache's store is one
 * kernel after them (kv_q8.cu).
 */
static int
qkv_fused(struct cuda_ctx *c, struct cuda_kv *kv, int l, const struct dlayer *d, const double *freq,
    char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	const struct dweight *w[3] = { &d->wq, &d->wk, &d->wv };
	const float *bias[3] = { d->bq, d->bk, d->bv };
	int rc;

	bool q8 = kv->type == GGML_TYPE_Q8_0;
	float *y[3] = { c->q, q8 ? c->k : NULL, q8 ? c->v : NULL };

	if ((rc = need_xq(c, c->xb, d->wq.n_in, true, err, errlen)) != KVC_OK)
		return rc;
	for (int i = 0; i < 3; i++) {
		struct mv_qkv e = { bias[i], freq, hp->rope_mscale, c->d_pos, hp->head_dim,
			i == 2 ? 0 : hp->rope_dim, hp->rope_neox, y[i],
			i == 1 ? kv->k[l] : i == 2 ? kv->v[l] : NULL, kv->type == GGML_TYPE_F16 };

		mv_i8_qkv(c->stream, w[i]->type, (const uint8_t *)w[i]->d, w[i]->row_bytes, c->xq, w[i]->n_in,
		    w[i]->n_out, c->n_sm, e);
		LAUNCHED("kernel_mv_i8_qkv");
	}
	if (q8) {
		/* a Q8_0 block's scale needs all 32 of its values: K and V went to scratch (kv_q8.cu) */
		kv_store_q8(c->stream, c->k, c->v, kv->k[l], kv->v[l], c->d_pos, 1, hp->n_head_kv * hp->head_dim);
		LAUNCHED("kernel_kv_store_q8");
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
 * block_norm_q when it made them), biases, q/k norms, RoPE, cache store;
 * with rows (forward_multi, kv NULL) each token at its own position of
 * its own cache.
 */
static int
qkv_plain(struct cuda_ctx *c, struct cuda_kv *kv, int l, const struct dlayer *d, const double *freq, int n,
    const struct cu_rows *rows, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int64_t q_dim = (int64_t)hp->n_head * hp->head_dim, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
	bool f16 = rows ? rows->f16 : kv->type == GGML_TYPE_F16;
	const int *pos = rows ? rows->pos : c->d_pos;
	int rc;

	if ((rc = cu_matmul(c, &d->wq, c->xb, c->q, n, true, err, errlen)) != KVC_OK ||
	    (rc = cu_matmul(c, &d->wk, c->xb, c->k, n, true, err, errlen)) != KVC_OK ||
	    (rc = cu_matmul(c, &d->wv, c->xb, c->v, n, true, err, errlen)) != KVC_OK)
		return rc;
	if (d->bq) {
		kernel_add_bias<<<grid_blocks(n * q_dim, 256), 256, 0, c->stream>>>(c->q, d->bq, n * q_dim, (int)q_dim);
		LAUNCHED("kernel_add_bias (q)");
		kernel_add_bias<<<grid_blocks(n * kv_dim, 256), 256, 0, c->stream>>>(c->k, d->bk, n * kv_dim, (int)kv_dim);
		LAUNCHED("kernel_add_bias (k)");
		kernel_add_bias<<<grid_blocks(n * kv_dim, 256), 256, 0, c->stream>>>(c->v, d->bv, n * kv_dim, (int)kv_dim);
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
		    hp->rope_dim, pos, rows != NULL, hp->rope_neox, freq, hp->rope_mscale);
		LAUNCHED("kernel_rope (q)");
		kernel_rope<<<dim3(n, hp->n_head_kv), 64, 0, c->stream>>>(c->k, hp->n_head_kv, hp->head_dim,
		    hp->rope_dim, pos, rows != NULL, hp->rope_neox, freq, hp->rope_mscale);
		LAUNCHED("kernel_rope (k)");
	}
	if (rows) {
		if (rows->q8)
			kv_store_q8_rows(c->stream, rows, l, c->k, c->v, (int)kv_dim);
		else
			kv_store_rows(c->stream, rows, l, c->k, c->v, (int)kv_dim);
		LAUNCHED(rows->q8 ? "kernel_kv_store_q8 (rows)" : "kernel_kv_store_rows");
		return KVC_OK;
	}
	if (kv->type == GGML_TYPE_Q8_0) {
		kv_store_q8(c->stream, c->k, c->v, kv->k[l], kv->v[l], c->d_pos, n, (int)kv_dim);
		LAUNCHED("kernel_kv_store_q8");
		return KVC_OK;
	}
	kernel_kv_store<<<grid_blocks(n * kv_dim, 256), 256, 0, c->stream>>>(kv->k[l], f16, c->k, c->d_pos, n * kv_dim, (int)kv_dim);
	LAUNCHED("kernel_kv_store (k)");
	kernel_kv_store<<<grid_blocks(n * kv_dim, 256), 256, 0, c->stream>>>(kv->v[l], f16, c->v, c->d_pos, n * kv_dim, (int)kv_dim);
	LAUNCHED("kernel_kv_store (v)");
	return KVC_OK;
}

/*
 * The forward's kernels for n tokens already in c->tokens at *c->d_pos:
 * embedding, layers, and when nl > 0 the logits of the last nl rows into
 * c->logits. No host synchronisation and launch shapes that do not depend
 * on the position, so that one token's run can be captured as a graph.
 * With rows (forward_multi, kv NULL), token t is a sequence of its own:
 * its position and cache are the rows' (the products run over all rows
 * at once, each row's RoPE, cache store and attention its own).
 */
static int
forward_kernels(struct cuda_ctx *c, struct cuda_kv *kv, int n, int nl, const struct cu_rows *rows,
    char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int64_t E = hp->n_embd;
	bool f16 = rows ? rows->f16 : kv->type == GGML_TYPE_F16;
	int rc;

	cu_embed(c, n, rows ? rows->pos : NULL);
	LAUNCHED("kernel_embed");
	for (int l = 0; l < hp->n_layer; l++) {
		struct dlayer *d = &c->layers[l];
		int win = d->swa ? hp->n_swa : 0;
		const double *freq = d->swa ? c->inv_freq_swa : c->inv_freq;

		if ((rc = block_norm_q(c, c->x, d->attn_norm, d->attn_norm_b, n, err, errlen)) != KVC_OK)
			return rc;
		if (rows == NULL && qkv_fusable(c, d, n)) {
			if ((rc = qkv_fused(c, kv, l, d, freq, err, errlen)) != KVC_OK)
				return rc;
		} else if ((rc = qkv_plain(c, kv, l, d, freq, n, rows, err, errlen)) != KVC_OK) {
			return rc;
		}
		struct att_args aa = { c->q, rows ? NULL : kv->k[l], rows ? NULL : kv->v[l], f16, c->att,
			c->att_part, hp->n_head, hp->n_head_kv, hp->head_dim, rows ? rows->pos : c->d_pos,
			hp->attn_scale, hp->attn_softcap, win, rows ? rows->k + (size_t)l * n : NULL,
			rows ? rows->v + (size_t)l * n : NULL, rows ? rows->q8 : kv->type == GGML_TYPE_Q8_0 };
		if (rows) {
			attention_rows(c->stream, &aa, att_multi_splits(c->n_sm, hp->n_head_kv, n, rows->n_pos_max), n);
			LAUNCHED("kernel_attn_gqa / kernel_attention (rows)");
		} else if (n == 1) {
			attention_decode(c->stream, &aa, att_decode_splits(c->n_sm, hp->n_head_kv, kv->n_ctx));
			LAUNCHED("kernel_attn_gqa / kernel_attention_merge");
		} else if (att_tile_ok(n, hp->head_dim)) {
			attention_prefill(c->stream, &aa, n);
			LAUNCHED("kernel_attn_tile");
		} else {
			attention_tokens(c->stream, &aa, n);
			LAUNCHED("kernel_attention");
		}
		if ((rc = project_add(c, &d->wo, c->att, d->bo, d->attn_post_norm, n, err, errlen)) != KVC_OK ||
		    (rc = block_norm_q(c, c->x, d->ffn_norm, d->ffn_norm_b, n, err, errlen)) != KVC_OK)
			return rc;
		if (hp->ffn_plain) {
			/* gpt2: GELU(up x + b_up), no gate */
			if ((rc = cu_matmul(c, &d->w_up, c->xb, c->hb, n, true, err, errlen)) != KVC_OK)
				return rc;
			kernel_gelu_bias<<<grid_blocks((int64_t)n * hp->n_ff, 256), 256, 0, c->stream>>>(c->hb, d->b_up,
			    (int64_t)n * hp->n_ff, hp->n_ff);
			LAUNCHED("kernel_gelu_bias");
		} else if (glu_fusable(d, n)) {
			if ((rc = need_xq(c, c->xb, d->w_gate.n_in, true, err, errlen)) != KVC_OK)
				return rc;
			mv_i8_glu(c->stream, d->w_gate.type, (const uint8_t *)d->w_gate.d, (const uint8_t *)d->w_up.d,
			    d->w_gate.row_bytes, c->xq, c->hb, d->w_gate.n_in, d->w_gate.n_out, c->n_sm, hp->ffn_gelu);
			LAUNCHED("kernel_mv_i8_glu");
		} else {
			if ((rc = cu_matmul(c, &d->w_gate, c->xb, c->hb, n, true, err, errlen)) != KVC_OK ||
			    (rc = cu_matmul(c, &d->w_up, c->xb, c->hb2, n, true, err, errlen)) != KVC_OK)
				return rc;
			kernel_swiglu<<<grid_blocks((int64_t)n * hp->n_ff, 256), 256, 0, c->stream>>>(c->hb, c->hb2,
			    (int64_t)n * hp->n_ff, hp->ffn_gelu);
			LAUNCHED("kernel_swiglu");
		}
		if ((rc = project_add(c, &d->w_down, c->hb, d->b_down, d->ffn_post_norm, n, err, errlen)) != KVC_OK)
			return rc;
	}
	if (nl > 0) {
		if ((rc = block_norm_q(c, c->x + (int64_t)(n - nl) * E, c->output_norm, c->output_norm_b, nl,
		    err, errlen)) != KVC_OK ||
		    (rc = cu_matmul(c, &c->output, c->xb, c->logits, nl, true, err, errlen)) != KVC_OK)
			return rc;
		if (hp->final_softcap > 0) {
			kernel_softcap<<<grid_blocks((int64_t)nl * hp->n_vocab, 256), 256, 0, c->stream>>>(c->logits,
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
			return forward_kernels(c, kv, 1, 1, NULL, err, errlen);
		}
		rc = forward_kernels(c, kv, 1, 1, NULL, err, errlen);
		e = cudaStreamEndCapture(c->stream, &g);
		if (rc != KVC_OK || e != cudaSuccess) {
			if (g)
				cudaGraphDestroy(g);
			cudaGetLastError();
			if (rc != KVC_OK)
				return rc;
			c->use_graph = false;
			return forward_kernels(c, kv, 1, 1, NULL, err, errlen);
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
			return forward_kernels(c, kv, 1, 1, NULL, err, errlen);
		}
		c->graph_key = want;
		c->graph_captures++;
	}
	CUDA_CHECK(cudaGraphLaunch(c->graph_exec, c->stream), err, errlen);
	c->graph_replays++;
	return KVC_OK;
}

/* Tokens tok[0..n) (n <= CHUNK) at positions pos0..; logits of rows [lo, n) into out. */
int
cu_forward_chunk(struct cuda_ctx *c, struct cuda_kv *kv, const int32_t *tokens, int n, int pos0,
    float *logits, int lo, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	/* keep_logits: the last row's logits stay in c->logits (backend.h's forward_keep) */
	int nl = (logits != NULL || c->keep_logits) && lo < n ? n - lo : 0;
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
		rc = forward_kernels(c, kv, n, nl, NULL, err, errlen);
	if (rc != KVC_OK)
		return rc;
	if (nl > 0 && logits != NULL)
		CUDA_CHECK(cudaMemcpyAsync(logits, c->logits, (size_t)nl * hp->n_vocab * 4,
		    cudaMemcpyDeviceToHost, c->stream), err, errlen);
	/* also keeps &pos0, tokens and h_in alive until their copies are done */
	CUDA_CHECK(cudaStreamSynchronize(c->stream), err, errlen);
	return KVC_OK;
}

int
cu_forward_rows(struct cuda_ctx *c, const struct cu_rows *rows, float *logits, char *err, size_t errlen)
{
	int n = rows->n, rc;

	if ((rc = ensure_logits(c, n, err, errlen)) != KVC_OK ||
	    (rc = forward_kernels(c, NULL, n, n, rows, err, errlen)) != KVC_OK)
		return rc;
	CUDA_CHECK(cudaMemcpyAsync(logits, c->logits, (size_t)n * c->m->hp.n_vocab * 4, cudaMemcpyDeviceToHost,
	    c->stream), err, errlen);
	/* the tables' pinned copy is rewritten by the next step: wait for this one */
	CUDA_CHECK(cudaStreamSynchronize(c->stream), err, errlen);
	return KVC_OK;
}
