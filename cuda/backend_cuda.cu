/*
 * backend_cuda.cu: the CUDA backend behind kvc_backend_i (src/backend/backend.h):
 * its vtable, the weights' upload, the KV caches and their copies, the
 * module's entry point. The forward is layers.cu's (see cuda_int.h for
 * which file does what).
 *
 * Weights are uploaded in their GGUF block formats (no whole-model
 * dequantisation). Decode (one token) runs every quantised type on int8
 * dot products (mv_i8.cu: x quantised once per token to int8 blocks of
 * 32, dp4a against the weights' integers, split-K for narrow matrices,
 * norms, biases, RoPE, cache stores, activations and residual adds fused
 * in), F16 through a 16-byte-load kernel, F32/BF16 through a generic one
 * (matmul.cu); attention is flash-decoding over the cache (attention.cu).
 * Prefill (several tokens) dequantises one matrix at a time into an F16
 * scratch buffer and calls cublasGemmEx on the tensor cores, the
 * activations rounded to F16 after a per-token power-of-two scale that
 * keeps them inside F16's range (FFN activations can pass 65504), in
 * chunks of CHUNK tokens; the scratch is sized by the largest quantised
 * layer matrix (a larger output matrix goes through it in slices of rows).
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
 * forward_multi (kvchat batch, serve) runs the sequences' tokens as the
 * rows of one batch (multi.cu); long prefills' attention runs over tiles
 * of queries x keys (attn_prefill.cu).
 *
 * KV caches are F16, F32 or Q8_0 (--kv-type q8_0: GGUF's blocks, the CPU
 * backend's and the snapshots' bytes; kv_q8.cu stores and rotates them,
 * for one sequence and forward_multi's rows; attention.cu and
 * attn_prefill.cu read them).
 *
 * Sampling runs on the device when the engine asks (forward_keep, then
 * sample: greedy and top-k up to 1024, sample.cu), so a decode step copies
 * one id back; the logits are copied only for a caller that wants them
 * (logits_get) or a request the device does not take.
 *
 * STATUS: compiled on machines without a GPU; NOT yet run on a device.
 * Still to do: an int8 tensor-core prefill, prefill_multi, and experts /
 * IQ / MXFP4 weights (refused: --device auto runs those on the CPU)
 * (issue 25 lists what is left; docs/BENCHMARKS.md what is
 * unmeasured).
 */
extern "C" {
#include "backend/backend.h"
#include "backend/cpu_arch.h"
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
	/* its type and width: cu_model_check (support.c) refused the model otherwise */
	if ((rc = upload(c, w->data, w->row_bytes * (size_t)w->n_out, &p, err, errlen)) != KVC_OK)
		return rc;
	/* only the quantised types pass through wscratch (see matmul) */
	if (layer && !cu_matmul_native(w->type) && (size_t)(w->n_in * w->n_out) > c->ws_elems)
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

/*
 * inv_freq[i] as the CPU backend computes it, with its own functions
 * (cpu_arch.c): base theta, linear scale, llama 3.1's factors when factors
 * (the global layers'), YaRN's blend when the model has it.
 */
static int
upload_inv_freq(struct cuda_ctx *c, double theta, double scale, bool factors, double **out,
    char *err, size_t errlen)
{
	const struct kvc_model *m = c->m;
	const struct kvc_hparams *hp = &m->hp;
	int half = hp->rope_dim / 2, rc;
	double *f = (double *)calloc((size_t)(half > 0 ? half : 1), sizeof *f);

	if (f == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	cpu_rope_freqs(f, hp->rope_dim, theta, scale, factors ? &m->rope_freqs : NULL);
	if (hp->rope_yarn)
		cpu_rope_yarn(f, hp, scale);
	rc = upload(c, f, (size_t)(half > 0 ? half : 1) * sizeof *f, (void **)out, err, errlen);
	free(f);
	return rc;
}

/* The decode step's inputs: the position in device memory, the pinned token and position, graphs on or off. */
static int
init_decode_state(struct cuda_ctx *c, char *err, size_t errlen)
{
	int rc;

	if ((rc = cu_call(cudaMalloc(&c->d_pos, sizeof(int)), "cudaMalloc", err, errlen)) != KVC_OK ||
	    (rc = cu_call(cudaMallocHost(&c->h_in, 2 * sizeof(int)), "cudaMallocHost", err, errlen)) != KVC_OK)
		return rc;
	c->use_graph = graph_wanted(getenv("KVCHAT_CUDA_GRAPH"), c->sync_check);
	return KVC_OK;
}

/* Whether caches of type t fit this model here: Q8_0 rows of whole blocks, within kernel_kv_rotate_q8's. */
static int
kv_type_check(const struct kvc_hparams *hp, int t, char *err, size_t errlen)
{
	int w = hp->n_head_kv * hp->head_dim;

	if (t != GGML_TYPE_Q8_0)
		return KVC_OK;
	if (cu_kv_row_bytes(t, w) == 0) {
		kvc_err(err, errlen, "KV cache type Q8_0 needs rows of whole blocks of 32, not %d values "
		    "(use --kv-type f16)", w);
		return KVC_EUNSUPPORTED;
	}
	if (w > 12288) {
		/* kernel_kv_rotate_q8 holds a row as floats in 48 KB of shared memory */
		kvc_err(err, errlen, "cuda: a q8_0 KV cache of %d values a row is too wide for the GPU "
		    "kernels (12288 at most; use --kv-type f16)", w);
		return KVC_EUNSUPPORTED;
	}
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
	/* what it lacks named before the device is touched (--device auto's notice) */
	if ((rc = cu_model_check(m, err, errlen)) != KVC_OK)
		return rc;
	if ((ce = cudaGetDeviceCount(&n_dev)) != cudaSuccess || n_dev == 0) {
		/* an old driver is cudaErrorInsufficientDriver, not "no device": say which */
		kvc_err(err, errlen, "cuda: cannot use CUDA: %s",
		    ce != cudaSuccess ? cudaGetErrorString(ce) : "no CUDA device present");
		return KVC_EUNSUPPORTED;
	}
	if (p && (rc = kv_type_check(hp, p->kv_type, err, errlen)) != KVC_OK)
		return rc;
	if (gpu < 0 || gpu >= n_dev) {
		kvc_err(err, errlen, "cuda: device %d does not exist (%d found)", gpu, n_dev);
		return KVC_EINVAL;
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
	TRY(cu_call(cudaSetDevice(c->dev), "cudaSetDevice", err, errlen));
	TRY(cu_call(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
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
	if (!cu_matmul_native(c->output.type) && c->ws_elems < (size_t)c->output.n_in * 256)
		c->ws_elems = (size_t)c->output.n_in * 256;
	TRY(cu_set_matvec_smem(c, err, errlen));
	TRY(cu_call(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", err, errlen));
	if (p && p->progress)
		p->progress(p->progress_arg, total, total);
#undef TRY
	return KVC_OK;
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
	cu_free_scratch(c);
	cu_multi_free(c);
	cudaFree(c->logits);
	cu_sample_free(c);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c);
}

static size_t
kv_bytes_at(const struct cuda_kv *kv, int cap)
{
	return (size_t)cap * cu_kv_row_bytes(kv->type, kv->kv_dim) * 2 * kv->n_layer;
}

/*
 * Make kv hold positions [0, need): doubling, capped by n_ctx, as on the
 * CPU. New buffers are all allocated before any old one is released, so a
 * failure leaves the cache as it was.
 */
static int
kv_grow(struct cuda_ctx *c, struct cuda_kv *kv, int need, char *err, size_t errlen)
{
	size_t row = cu_kv_row_bytes(kv->type, kv->kv_dim), old = kv_bytes_at(kv, kv->cap);
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
		rc = cu_call(cudaMemcpyAsync(nb[i], src, (size_t)kv->n_valid * row,
		    cudaMemcpyDeviceToDevice, c->stream), "cudaMemcpyAsync (KV growth)", err, errlen);
	}
	if (rc == KVC_OK)
		rc = cu_call(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", err, errlen);
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
	if ((rc = kv_type_check(&c->m->hp, kv_type, err, errlen)) != KVC_OK)
		return rc;
	if (kv_type != GGML_TYPE_Q8_0 && (rc = kvc_backend_kv_check(n_ctx, kv_type, err, errlen)) != KVC_OK)
		return rc;
	if (n_ctx < 1) {
		kvc_err(err, errlen, "bad context size %d", n_ctx);
		return KVC_EINVAL;
	}
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

static int
cuda_forward(void *ctx, void *p, const int32_t *tokens, int n, int pos0,
    float *logits, bool all_logits, char *err, size_t errlen)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	struct cuda_kv *kv = (struct cuda_kv *)p;
	const struct kvc_hparams *hp = &c->m->hp;
	int rc, done;

	c->logits_kept = false;		/* whatever happens, c->logits no longer hold the last kept */
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
	    (rc = cu_ensure_scratch(c, n < CHUNK ? n : CHUNK, err, errlen)) != KVC_OK)
		return rc;
	kv->n_valid = pos0;	/* what lies past pos0 is being replaced */
	for (done = 0; done < n; ) {
		int nc = n - done < CHUNK ? n - done : CHUNK, lo = nc;
		float *out = NULL;

		if (logits != NULL && all_logits) {
			out = logits + (size_t)done * hp->n_vocab;
			lo = 0;
		} else if ((logits != NULL || c->keep_logits) && done + nc == n) {
			out = logits;
			lo = nc - 1;
		}
		if ((rc = cu_forward_chunk(c, kv, tokens + done, nc, pos0 + done, out, lo, err, errlen)) != KVC_OK)
			return rc;
		done += nc;
		kv->n_valid = pos0 + done;
	}
	return KVC_OK;
}

/* forward with the last token's logits left in c->logits for cuda_sample (backend.h). */
static int
cuda_forward_keep(void *ctx, void *kv, const int32_t *tokens, int n, int pos0, char *err, size_t errlen)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	int rc;

	c->keep_logits = true;
	rc = cuda_forward(ctx, kv, tokens, n, pos0, NULL, false, err, errlen);
	c->keep_logits = false;
	c->logits_kept = rc == KVC_OK;
	return rc;
}

static int
cuda_logits_get(void *ctx, float *dst, char *err, size_t errlen)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	if (!c->logits_kept) {
		kvc_err(err, errlen, "cuda: no logits kept");
		return KVC_EINVAL;
	}
	CUDA_CHECK(cudaSetDevice(c->dev), err, errlen);
	CUDA_CHECK(cudaMemcpyAsync(dst, c->logits, (size_t)c->m->hp.n_vocab * sizeof *dst, cudaMemcpyDeviceToHost,
	    c->stream), err, errlen);
	CUDA_CHECK(cudaStreamSynchronize(c->stream), err, errlen);
	return KVC_OK;
}

static int
cuda_sample(void *ctx, const struct kvc_sample_req *r, int32_t *id, uint64_t *rng, char *err, size_t errlen)
{
	return cu_sample((struct cuda_ctx *)ctx, r, id, rng, err, errlen);
}

/*
 * K rows of a slid cache rotated by delta positions (as kv_shift_rows on
 * the CPU: the angle in double, the pair rotated in double, rounded to
 * float and back to the cache's type), copied from src to dst (distinct
 * buffers: the caller stages the moved rows). grid (n_rows, n_head_kv),
 * block 64. Bytes: 2 * n_rows * kv_dim * elt.
 */
__global__ static void
kernel_kv_rotate(const void *src, void *dst, bool f16, int n_head_kv, int head_dim, int rope_dim, bool neox,
    const double *inv_freq, int delta)
{
	int64_t base = ((int64_t)blockIdx.x * n_head_kv + blockIdx.y) * head_dim;
	int half = rope_dim / 2;

	for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
		bool rot = i < rope_dim;
		int pi = !rot ? i : neox ? i % half : i / 2;	/* the pair's frequency index */
		int a = neox ? pi : 2 * pi, b = neox ? pi + half : 2 * pi + 1;
		float v;

		if (!rot) {
			v = f16 ? __half2float(((const __half *)src)[base + i]) : ((const float *)src)[base + i];
		} else {
			double x0 = f16 ? (double)__half2float(((const __half *)src)[base + a]) : ((const float *)src)[base + a];
			double x1 = f16 ? (double)__half2float(((const __half *)src)[base + b]) : ((const float *)src)[base + b];
			double sd, cd;
			sincos((double)delta * inv_freq[pi], &sd, &cd);
			v = (float)(i == a ? x0 * cd - x1 * sd : x0 * sd + x1 * cd);
		}
		if (f16)
			((__half *)dst)[base + i] = __float2half(v);
		else
			((float *)dst)[base + i] = v;
	}
}

/*
 * Drop positions [p0, p0 + n_drop): every layer's later K and V rows move
 * down by n_drop through a staging buffer (the ranges overlap), K rotated
 * by -n_drop with the layer's own RoPE base on the way back (kv_shift in
 * backend.h). The buffers stay where they are, so a captured decode graph
 * stays valid.
 */
static int
cuda_kv_shift(void *ctx, void *p, int p0, int n_drop, char *err, size_t errlen)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	struct cuda_kv *kv = (struct cuda_kv *)p;
	const struct kvc_hparams *hp = &c->m->hp;
	bool f16 = kv->type == GGML_TYPE_F16;
	size_t row = cu_kv_row_bytes(kv->type, kv->kv_dim);
	int n_move = kv->n_valid - p0 - n_drop, rc = KVC_OK;
	void *stage = NULL;

	if (hp->arch == KVC_ARCH_GPT2) {
		kvc_err(err, errlen, "KV shift: gpt2's learned positions cannot be shifted");
		return KVC_EUNSUPPORTED;
	}
	if (p0 < 0 || n_drop < 1 || p0 > kv->n_valid - n_drop) {
		kvc_err(err, errlen, "bad KV shift: drop %d positions at %d (cache holds %d)", n_drop, p0,
		    kv->n_valid);
		return KVC_EINVAL;
	}
	CUDA_CHECK(cudaSetDevice(c->dev), err, errlen);
	if (n_move > 0 && (rc = cu_call(cudaMalloc(&stage, (size_t)n_move * row), "cudaMalloc (KV shift)",
	    err, errlen)) != KVC_OK)
		return rc;
	for (int l = 0; l < kv->n_layer && rc == KVC_OK && n_move > 0; l++) {
		char *k = (char *)kv->k[l] + (size_t)p0 * row, *v = (char *)kv->v[l] + (size_t)p0 * row;

		if ((rc = cu_call(cudaMemcpyAsync(stage, v + (size_t)n_drop * row, (size_t)n_move * row,
		    cudaMemcpyDeviceToDevice, c->stream), "cudaMemcpyAsync (KV shift)", err, errlen)) != KVC_OK ||
		    (rc = cu_call(cudaMemcpyAsync(v, stage, (size_t)n_move * row, cudaMemcpyDeviceToDevice,
		    c->stream), "cudaMemcpyAsync (KV shift)", err, errlen)) != KVC_OK ||
		    (rc = cu_call(cudaMemcpyAsync(stage, k + (size_t)n_drop * row, (size_t)n_move * row,
		    cudaMemcpyDeviceToDevice, c->stream), "cudaMemcpyAsync (KV shift)", err, errlen)) != KVC_OK)
			break;
		const double *freq = model_layer_swa(hp, l) ? c->inv_freq_swa : c->inv_freq;

		if (kv->type == GGML_TYPE_Q8_0) {
			/* a whole row at a time: each block is quantised again after the rotation */
			kv_rotate_q8(c->stream, stage, k, n_move, kv->kv_dim, hp->head_dim, hp->rope_dim, hp->rope_neox,
			    freq, -n_drop);
			rc = cu_launched(c, "kernel_kv_rotate_q8", err, errlen);
			continue;
		}
		kernel_kv_rotate<<<dim3(n_move, hp->n_head_kv), 64, 0, c->stream>>>(stage, k, f16, hp->n_head_kv,
		    hp->head_dim, hp->rope_dim, hp->rope_neox, freq, -n_drop);
		rc = cu_launched(c, "kernel_kv_rotate", err, errlen);
	}
	if (rc == KVC_OK)
		rc = cu_call(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", err, errlen);
	else
		cudaStreamSynchronize(c->stream);	/* stage may still be read */
	cudaFree(stage);
	kv->n_valid -= n_drop;	/* after a failure the caller drops the cache */
	return rc;
}

static int
kv_copy(struct cuda_ctx *c, struct cuda_kv *kv, int layer, enum kvc_kv_part part, int pos0, int n,
    void *host, bool to_host, char *err, size_t errlen)
{
	size_t row = cu_kv_row_bytes(kv->type, kv->kv_dim);	/* the snapshot's rows, byte for byte */
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

/*
 * multi.cu's pass over the caches grown first (the tables it sends name
 * their buffers), or one sequence at a time for caches it does not take
 * (mixed types).
 */
static int
cuda_forward_multi(void *ctx, int n_seq, void *const *kvs, const int32_t *tokens, const int *pos,
    float *logits, char *err, size_t errlen)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	bool one_by_one;
	int rc = cu_multi_check(c, n_seq, kvs, tokens, pos, logits, &one_by_one, err, errlen);

	c->logits_kept = false;		/* the rows' logits replace the kept row in c->logits */
	if (rc != KVC_OK)
		return rc;
	CUDA_CHECK(cudaSetDevice(c->dev), err, errlen);
	for (int i = 0; rc == KVC_OK && i < n_seq; i++)
		rc = one_by_one ? cuda_forward(ctx, kvs[i], &tokens[i], 1, pos[i],
		    logits + (size_t)i * c->m->hp.n_vocab, false, err, errlen) :
		    kv_grow(c, (struct cuda_kv *)kvs[i], pos[i] + 1, err, errlen);
	if (rc == KVC_OK && !one_by_one)
		rc = cu_forward_multi(c, n_seq, kvs, tokens, pos, logits, err, errlen);
	return rc;
}

/* kv_lowest stays NULL: every position is kept. prefill_multi too: the engine prefills one at a time. */
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
	cuda_kv_shift,
	NULL,			/* kv_lowest */
	cuda_forward_multi,
	NULL,			/* prefill_multi */
	cuda_forward_keep,
	cuda_logits_get,
	cuda_sample,
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
