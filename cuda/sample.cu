/*
 * sample.cu: the next token picked on the device from the logits the last
 * forward kept there (backend.h's forward_keep / sample), so that a decode
 * step copies one id and the generator's state (16 bytes) back instead of
 * n_vocab floats (600 KB for Qwen's 152k). The decisions are
 * sample_core.cuh's, src/sampler's algorithm step for step, so the same
 * seed picks the same token as smp_sample on the same logits.
 *
 * Taken here: greedy, and top-k from 1 to 1024 (the default 40) with any
 * temperature, top-p, min-p and repetition penalty. Without top-k (or
 * above 1024) smp_sample sorts the whole vocabulary in an order a
 * parallel selection would not reproduce: cu_sample says KVC_EUNSUPPORTED
 * and the caller samples on the host from the copied logits.
 */
#include "cuda_int.h"
#include "dev_util.cuh"
#include "sample_core.cuh"

#include <stdlib.h>

#define SC_THREADS 1024			/* threads of the sampling kernels' one block */
#define SC_PER (SC_STRETCH_MAX / SC_THREADS)	/* ids a thread tests in the longest stretch */

/* The result a sampling kernel writes: the id and the generator's state after the draw. */
struct sc_out {
	int32_t id, pad;
	uint64_t rng;
};

/* Per-context buffers, made at the first sample. */
struct cu_sampler {
	float *vals;			/* (n_vocab) the values smp_sample ranks: NaN as -inf, penalised */
	int32_t *hist;			/* (hist_cap) the recent ids, device */
	int32_t *h_hist;		/* (hist_cap) pinned staging for them */
	int hist_cap;
	struct sc_out *d_out, *h_out;	/* device result, pinned copy */
};

/*
 * vals[i] = sc_value(l[i]) without the penalty (NaN as -inf). grid
 * ceil(n / 256), block 256. Bytes: 8 n.
 */
__global__ static void
kernel_sample_values(const float *l, float *vals, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		vals[i] = sc_value(l[i], false, 1.f);
}

/*
 * The repetition penalty on the recent ids' values, from their raw logits
 * (an id met twice is written twice with the same value: applied once, as
 * smp_sample's seen[]). grid 1, block 256. Bytes: 12 n_recent.
 */
__global__ static void
kernel_sample_penalty(const float *l, float *vals, const int32_t *recent, int n_recent, int n, float penalty)
{
	for (int j = threadIdx.x; j < n_recent; j += blockDim.x) {
		int32_t id = recent[j];

		if (id >= 0 && id < n)
			vals[id] = sc_value(l[id], true, penalty);
	}
}

/*
 * Greedy: the largest logit, the lowest id among equals, NaN never (as
 * smp_argmax). grid 1, block SC_THREADS, static shared memory 256 bytes.
 * Bytes: 4 n read, 16 written.
 */
__global__ static void __launch_bounds__(SC_THREADS)
kernel_sample_argmax(const float *l, int n, uint64_t rng, struct sc_out *out)
{
	__shared__ float sv[SC_THREADS / 32];
	__shared__ int32_t si[SC_THREADS / 32];
	float bv = -INFINITY;
	int32_t bi = INT32_MAX;
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

	for (int i = threadIdx.x; i < n; i += blockDim.x)
		if (sc_argmax_better(l[i], i, bv, bi)) {
			bv = l[i];
			bi = i;
		}
	for (int o = 16; o > 0; o /= 2) {
		float v = __shfl_xor_sync(0xffffffffu, bv, o);
		int32_t i = __shfl_xor_sync(0xffffffffu, bi, o);
		if (sc_argmax_better(v, i, bv, bi)) {
			bv = v;
			bi = i;
		}
	}
	if (lane == 0) {
		sv[warp] = bv;
		si[warp] = bi;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		for (int w = 1; w < (int)blockDim.x / 32; w++)
			if (sc_argmax_better(sv[w], si[w], bv, bi)) {
				bv = sv[w];
				bi = si[w];
			}
		out->id = sc_argmax_result(bv, bi);
		out->rng = rng;
	}
}

/*
 * top-k (1 <= k <= SC_TOPK_MAX, k < n) then temperature, min-p, top-p and
 * the draw, as smp_sample: thread 0 builds the heap of ids 0..k-1; then,
 * stretch by stretch (SC_STRETCH_FIRST ids doubling to SC_STRETCH_MAX),
 * every thread tests its ids of the stretch (up to SC_PER) against the
 * root as it stood before the stretch, the ones that beat it are packed
 * in id order (ballots and a prefix over the warps), and thread 0 offers
 * them to the heap in that order (sample_core.cuh says why that is the
 * CPU's heap exactly). Thread 0 then runs sc_finish.
 * grid 1, block SC_THREADS, static shared memory 16 KB (heap) + 16 KB
 * (ids) + 1 KB. Bytes: 4 n of values read once (plus the offered ones
 * again), 16 written.
 */
__global__ static void __launch_bounds__(SC_THREADS)
kernel_sample_topk(const float *vals, int n, int k, float temp, float min_p, float top_p, uint64_t rng,
    struct sc_out *out)
{
	__shared__ struct sc_cand c[SC_TOPK_MAX];
	__shared__ int32_t ids[SC_STRETCH_MAX];
	__shared__ int cnt[SC_PER][SC_THREADS / 32], off[SC_PER][SC_THREADS / 32];
	__shared__ float root;
	__shared__ int n_ids;
	int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

	if (tid == 0) {
		sc_heap_init(c, vals, (size_t)k);
		root = c[0].logit;
	}
	__syncthreads();
	for (int base = k, len = SC_STRETCH_FIRST; base < n; base += len, len = sc_next_stretch(len)) {
		float r = root;
		bool f[SC_PER];
		int rank[SC_PER];

#pragma unroll
		for (int j = 0; j < SC_PER; j++) {
			int i = base + j * SC_THREADS + tid;
			unsigned m;

			f[j] = i < n && i - base < len && vals[i] > r;
			m = __ballot_sync(0xffffffffu, f[j]);
			rank[j] = __popc(m & ((1u << lane) - 1));
			if (lane == 0)
				cnt[j][warp] = __popc(m);
		}
		__syncthreads();
		if (tid == 0) {
			int s = 0;

			for (int j = 0; j < SC_PER; j++)
				for (int w = 0; w < SC_THREADS / 32; w++) {
					off[j][w] = s;
					s += cnt[j][w];
				}
			n_ids = s;
		}
		__syncthreads();
#pragma unroll
		for (int j = 0; j < SC_PER; j++)
			if (f[j])
				ids[off[j][warp] + rank[j]] = base + j * SC_THREADS + tid;
		__syncthreads();
		if (tid == 0) {
			for (int t = 0; t < n_ids; t++)
				sc_heap_offer(c, (size_t)k, ids[t], vals[ids[t]]);
			root = c[0].logit;
		}
		__syncthreads();
	}
	if (tid == 0) {
		out->id = sc_finish(c, (size_t)k, temp, min_p, top_p, &rng);
		out->rng = rng;
	}
}

void
cu_sample_free(struct cuda_ctx *c)
{
	struct cu_sampler *s = c->smp;

	if (s == NULL)
		return;
	cudaFree(s->vals);
	cudaFree(s->hist);
	cudaFree(s->d_out);
	cudaFreeHost(s->h_hist);
	cudaFreeHost(s->h_out);
	free(s);
	c->smp = NULL;
}

/* The sampler's buffers, with room for n_recent ids. */
static int
sampler_ready(struct cuda_ctx *c, int n_recent, char *err, size_t errlen)
{
	struct cu_sampler *s = c->smp;
	int rc;

	if (s == NULL) {
		if ((s = (struct cu_sampler *)calloc(1, sizeof *s)) == NULL) {
			kvc_err(err, errlen, "out of memory");
			return KVC_ENOMEM;
		}
		c->smp = s;
		if ((rc = cu_call(cudaMalloc(&s->vals, (size_t)c->m->hp.n_vocab * sizeof *s->vals),
		    "cudaMalloc (sampler)", err, errlen)) != KVC_OK ||
		    (rc = cu_call(cudaMalloc(&s->d_out, sizeof *s->d_out), "cudaMalloc (sampler)", err, errlen)) != KVC_OK ||
		    (rc = cu_call(cudaMallocHost(&s->h_out, sizeof *s->h_out), "cudaMallocHost (sampler)", err,
		    errlen)) != KVC_OK) {
			cu_sample_free(c);
			return rc;
		}
	}
	if (n_recent > s->hist_cap) {
		int cap = n_recent < 256 ? 256 : n_recent;

		cudaFree(s->hist);
		cudaFreeHost(s->h_hist);
		s->hist = s->h_hist = NULL;
		s->hist_cap = 0;
		if ((rc = cu_call(cudaMalloc(&s->hist, (size_t)cap * sizeof *s->hist), "cudaMalloc (sampler)",
		    err, errlen)) != KVC_OK ||
		    (rc = cu_call(cudaMallocHost(&s->h_hist, (size_t)cap * sizeof *s->h_hist),
		    "cudaMallocHost (sampler)", err, errlen)) != KVC_OK)
			return rc;
		s->hist_cap = cap;
	}
	return KVC_OK;
}

int
cu_sample(struct cuda_ctx *c, const struct kvc_sample_req *r, int32_t *id, uint64_t *rng, char *err,
    size_t errlen)
{
	const int n = c->m->hp.n_vocab;
	bool pen = r->temp > 0.0f && sc_pen_on(r->repeat_penalty, r->n_recent, r->n_recent);
	struct cu_sampler *s;
	int rc;

	if (!c->logits_kept) {
		kvc_err(err, errlen, "cuda: no logits kept to sample from");
		return KVC_EINVAL;
	}
	if (!sc_takes(r->temp, r->top_k, n)) {
		kvc_err(err, errlen, "cuda: top-k %d is sampled on the host", r->top_k);
		return KVC_EUNSUPPORTED;
	}
	CUDA_CHECK(cudaSetDevice(c->dev), err, errlen);
	if ((rc = sampler_ready(c, pen ? r->n_recent : 0, err, errlen)) != KVC_OK)
		return rc;
	s = c->smp;
	if (r->temp <= 0.0f) {
		kernel_sample_argmax<<<1, SC_THREADS, 0, c->stream>>>(c->logits, n, r->rng, s->d_out);
		LAUNCHED("kernel_sample_argmax");
	} else {
		kernel_sample_values<<<grid_blocks(n, 256), 256, 0, c->stream>>>(c->logits, s->vals, n);
		LAUNCHED("kernel_sample_values");
		if (pen) {
			memcpy(s->h_hist, r->recent, (size_t)r->n_recent * sizeof *s->h_hist);
			CUDA_CHECK(cudaMemcpyAsync(s->hist, s->h_hist, (size_t)r->n_recent * sizeof *s->hist,
			    cudaMemcpyHostToDevice, c->stream), err, errlen);
			kernel_sample_penalty<<<1, 256, 0, c->stream>>>(c->logits, s->vals, s->hist, r->n_recent, n,
			    r->repeat_penalty);
			LAUNCHED("kernel_sample_penalty");
		}
		kernel_sample_topk<<<1, SC_THREADS, 0, c->stream>>>(s->vals, n, r->top_k, r->temp, r->min_p, r->top_p,
		    r->rng, s->d_out);
		LAUNCHED("kernel_sample_topk");
	}
	CUDA_CHECK(cudaMemcpyAsync(s->h_out, s->d_out, sizeof *s->h_out, cudaMemcpyDeviceToHost, c->stream),
	    err, errlen);
	CUDA_CHECK(cudaStreamSynchronize(c->stream), err, errlen);
	*id = s->h_out->id;
	*rng = s->h_out->rng;
	return KVC_OK;
}
