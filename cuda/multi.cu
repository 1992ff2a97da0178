/*
 * multi.cu: forward_multi on the GPU, one decode step of several
 * sequences (kvchat batch, serve's continuous batching) in one pass.
 *
 * Decode is bound by reading the weights; one sequence at a time reads
 * every matrix once per sequence. Here the sequences' next tokens are the
 * rows of one batch (layers.cu's forward_kernels with a struct cu_rows),
 * so the products read each matrix once for several of them (up to
 * MV_MULTI_MAX rows the batched int8 kernel of short prefills, once per
 * MV_MULTI_TOKENS rows; past that cuBLAS, once), while each row's RoPE, cache store and attention use its own
 * position and its own cache: no padding, the sequences at any positions.
 * This file checks the arguments and fills the tables the kernels read:
 * per row its position and token, per layer and row the K and V buffers
 * of the row's cache, written to pinned memory and sent in one copy
 * (backend_cuda.cu grows the caches in between).
 *
 * A row's logits equal its one-token forward's to float rounding, not bit
 * for bit: the one-token step fuses its RMSNorm, RoPE and cache stores
 * into other kernels, whose sums run in another order (and the CPU, not
 * the GPU, is what kvchat's tests hold to bitwise batching).
 */
#include "cuda_int.h"

#include <stdlib.h>

/* The row tables: pinned on the host, their device copy, bytes each. */
struct cu_multi {
	char *h, *d;
	size_t bytes;
};

/*
 * The tables' layout for n rows of L layers: K pointers [L][n], V pointers
 * [L][n], positions [n], tokens [n]; the offsets of the last three, and
 * the total.
 */
static size_t
tables_layout(int n, int L, size_t *v_off, size_t *pos_off, size_t *tok_off)
{
	size_t ptrs = (size_t)L * n * sizeof(void *);

	*v_off = ptrs;
	*pos_off = 2 * ptrs;
	*tok_off = 2 * ptrs + (size_t)n * sizeof(int);
	return 2 * ptrs + 2 * (size_t)n * sizeof(int);
}

void
cu_multi_free(struct cuda_ctx *c)
{
	if (c->multi == NULL)
		return;
	cudaFreeHost(c->multi->h);
	cudaFree(c->multi->d);
	free(c->multi);
	c->multi = NULL;
}

/*
 * The tables of the n rows kvs, tokens, pos to the device (and the tokens
 * into c->tokens, where the embedding reads them), described in *r.
 */
static int
send_tables(struct cuda_ctx *c, int n, void *const *kvs, const int32_t *tokens, const int *pos,
    struct cu_rows *r, char *err, size_t errlen)
{
	int L = c->m->hp.n_layer, rc;
	size_t vo, po, to, need = tables_layout(n, L, &vo, &po, &to);
	struct cu_multi *mu = c->multi;

	if (mu == NULL) {
		if ((mu = (struct cu_multi *)calloc(1, sizeof *mu)) == NULL) {
			kvc_err(err, errlen, "out of memory");
			return KVC_ENOMEM;
		}
		c->multi = mu;
	}
	if (need > mu->bytes) {
		cudaFreeHost(mu->h);
		cudaFree(mu->d);
		mu->h = mu->d = NULL;
		mu->bytes = 0;
		if ((rc = cu_call(cudaMallocHost((void **)&mu->h, need), "cudaMallocHost (forward_multi tables)",
		    err, errlen)) != KVC_OK ||
		    (rc = cu_call(cudaMalloc((void **)&mu->d, need), "cudaMalloc (forward_multi tables)",
		    err, errlen)) != KVC_OK)
			return rc;
		mu->bytes = need;
	}
	void **hk = (void **)mu->h, **hv = (void **)(mu->h + vo);
	int *hpos = (int *)(mu->h + po), *htok = (int *)(mu->h + to);

	r->n = n;
	r->n_pos_max = 0;
	r->f16 = ((const struct cuda_kv *)kvs[0])->type == GGML_TYPE_F16;
	r->q8 = ((const struct cuda_kv *)kvs[0])->type == GGML_TYPE_Q8_0;
	for (int t = 0; t < n; t++) {
		const struct cuda_kv *kv = (const struct cuda_kv *)kvs[t];

		for (int l = 0; l < L; l++) {
			hk[(size_t)l * n + t] = kv->k[l];
			hv[(size_t)l * n + t] = kv->v[l];
		}
		hpos[t] = pos[t];
		htok[t] = tokens[t];
		if (pos[t] + 1 > r->n_pos_max)
			r->n_pos_max = pos[t] + 1;
	}
	CUDA_CHECK(cudaMemcpyAsync(mu->d, mu->h, need, cudaMemcpyHostToDevice, c->stream), err, errlen);
	CUDA_CHECK(cudaMemcpyAsync(c->tokens, mu->d + to, (size_t)n * sizeof(int), cudaMemcpyDeviceToDevice,
	    c->stream), err, errlen);
	r->k = (void *const *)mu->d;
	r->v = (void *const *)(mu->d + vo);
	r->pos = (const int *)(mu->d + po);
	return KVC_OK;
}

int
cu_multi_check(const struct cuda_ctx *c, int n_seq, void *const *kvs, const int32_t *tokens, const int *pos,
    const float *logits, bool *mixed, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int type, rc;

	*mixed = false;
	if (n_seq < 1 || kvs == NULL || tokens == NULL || pos == NULL || logits == NULL) {
		kvc_err(err, errlen, "forward_multi: bad arguments (%d sequences)", n_seq);
		return KVC_EINVAL;
	}
	type = ((const struct cuda_kv *)kvs[0])->type;
	*mixed = type != GGML_TYPE_F16 && type != GGML_TYPE_F32 && type != GGML_TYPE_Q8_0;
	for (int i = 0; i < n_seq; i++) {
		const struct cuda_kv *kv = (const struct cuda_kv *)kvs[i];

		if ((rc = kvc_backend_forward_check(1, pos[i], kv->n_valid, kv->n_ctx, err, errlen)) != KVC_OK)
			return rc;
		if (tokens[i] < 0 || tokens[i] >= hp->n_vocab) {
			kvc_err(err, errlen, "token id %d out of range (vocabulary %d)", tokens[i], hp->n_vocab);
			return KVC_EINVAL;
		}
		if (c->pos_embd.d != NULL && pos[i] >= c->pos_embd.n_out) {
			kvc_err(err, errlen, "position %d is past the model's %lld learned positions", pos[i],
			    (long long)c->pos_embd.n_out);
			return KVC_ERANGE;
		}
		/* two rows writing one cache would race, and the second would not see the first */
		for (int j = 0; j < i; j++)
			if (kvs[j] == kvs[i]) {
				kvc_err(err, errlen, "forward_multi: sequences %d and %d share a cache", j, i);
				return KVC_EINVAL;
			}
		if (kv->type != type)
			*mixed = true;
	}
	return KVC_OK;
}

int
cu_forward_multi(struct cuda_ctx *c, int n_seq, void *const *kvs, const int32_t *tokens, const int *pos,
    float *logits, char *err, size_t errlen)
{
	const struct kvc_hparams *hp = &c->m->hp;
	int rc;

	for (int done = 0; done < n_seq; done += CHUNK) {
		int n = n_seq - done < CHUNK ? n_seq - done : CHUNK;
		struct cu_rows rows;

		if ((rc = cu_ensure_scratch(c, n, err, errlen)) != KVC_OK ||
		    (rc = send_tables(c, n, kvs + done, tokens + done, pos + done, &rows, err, errlen)) != KVC_OK)
			return rc;
		for (int i = done; i < done + n; i++)
			((struct cuda_kv *)kvs[i])->n_valid = pos[i];	/* what lies past pos is replaced */
		if ((rc = cu_forward_rows(c, &rows, logits + (size_t)done * hp->n_vocab, err, errlen)) != KVC_OK)
			return rc;
		for (int i = done; i < done + n; i++)
			((struct cuda_kv *)kvs[i])->n_valid = pos[i] + 1;
	}
	return KVC_OK;
}
