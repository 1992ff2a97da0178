/*
 * cpu_kv.c: the CPU backend's KV caches. Per layer, K and V are (cap,
 * kv_dim) rows of F16, F32 or Q8_0 blocks, grown by doubling up to n_ctx;
 * rows are read and written whole (snapshots), moved and re-rotated by a
 * slide (kv_shift.c), and stored from the forward's float rows.
 */
#include "backend.h"
#include "cpu_int.h"
#include "kv_q8.h"
#include "kv_shift.h"
#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>

static size_t
kv_bytes_at(const struct cpu_ctx *c, const struct cpu_kv *kv, int cap)
{
	return (size_t)cap * kv->row_bytes * 2 * (size_t)c->hp.n_layer;
}

int
cpu_kv_create(void *ctx, int n_ctx, enum gguf_dtype kv_type, void **out, char *err, size_t errlen)
{
	struct cpu_ctx *c = ctx;
	struct cpu_kv *kv;
	int rc;

	*out = NULL;
	if (kv_type == GGML_TYPE_Q8_0 && kvc_kv_row_bytes(kv_type, c->kv_dim) == 0) {
		kvc_err(err, errlen, "KV cache type Q8_0 needs rows of whole blocks of 32, "
		    "this model's are %d wide", c->kv_dim);
		return KVC_EUNSUPPORTED;
	}
	if (kv_type != GGML_TYPE_Q8_0 &&
	    (rc = kvc_backend_kv_check(n_ctx, kv_type, err, errlen)) != KVC_OK)
		return rc;
	if (n_ctx < 1) {
		kvc_err(err, errlen, "bad context size %d", n_ctx);
		return KVC_EINVAL;
	}
	kv = calloc(1, sizeof *kv);
	if (kv == NULL || (kv->k = calloc((size_t)c->hp.n_layer, sizeof *kv->k)) == NULL ||
	    (kv->v = calloc((size_t)c->hp.n_layer, sizeof *kv->v)) == NULL) {
		if (kv)
			free(kv->k);
		free(kv);
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	kv->n_ctx = n_ctx;
	kv->type = kv_type;
	kv->row_bytes = kvc_kv_row_bytes(kv_type, c->kv_dim);
	kv->next = c->caches;
	c->caches = kv;
	*out = kv;
	return 0;
}

void
cpu_kv_destroy(void *ctx, void *kvp)
{
	struct cpu_ctx *c = ctx;
	struct cpu_kv *kv = kvp, **pp;
	int il;

	if (kv == NULL)
		return;
	for (pp = &c->caches; *pp != NULL; pp = &(*pp)->next)
		if (*pp == kv) {
			*pp = kv->next;
			break;
		}
	c->kv_used -= kv_bytes_at(c, kv, kv->cap);
	for (il = 0; il < c->hp.n_layer; il++) {
		free(kv->k[il]);
		free(kv->v[il]);
	}
	free(kv->k);
	free(kv->v);
	free(kv);
}

size_t
cpu_kv_bytes(void *ctx, void *kv)
{
	return kv_bytes_at(ctx, kv, ((struct cpu_kv *)kv)->cap);
}

int
cpu_kv_reserve(struct cpu_ctx *c, struct cpu_kv *kv, int n_pos, char *err, size_t errlen)
{
	size_t old = kv_bytes_at(c, kv, kv->cap);
	int cap, il;

	if (n_pos <= kv->cap)
		return 0;
	if (n_pos > kv->n_ctx) {
		kvc_err(err, errlen, "context full: %d positions do not fit in %d", n_pos, kv->n_ctx);
		return KVC_ERANGE;
	}
	cap = kv->cap ? kv->cap : 64;
	while (cap < n_pos)
		cap = cap > kv->n_ctx / 2 ? kv->n_ctx : cap * 2;
	if (cap > kv->n_ctx)
		cap = kv->n_ctx;
	for (il = 0; il < c->hp.n_layer; il++) {
		void *k = realloc(kv->k[il], (size_t)cap * kv->row_bytes);

		if (k == NULL)
			goto nomem;
		kv->k[il] = k;
		k = realloc(kv->v[il], (size_t)cap * kv->row_bytes);
		if (k == NULL)
			goto nomem;
		kv->v[il] = k;
	}
	c->kv_used = c->kv_used - old + kv_bytes_at(c, kv, cap);
	kv->cap = cap;
	return 0;
nomem:
	/* layers already grown keep their larger blocks: harmless, cap is unchanged */
	kvc_err(err, errlen, "out of memory for a KV cache of %d positions", cap);
	return KVC_ENOMEM;
}

static int
kv_check_range(const struct cpu_ctx *c, const struct cpu_kv *kv, int layer, int pos0, int n,
    char *err, size_t errlen)
{
	if (layer < 0 || layer >= c->hp.n_layer || pos0 < 0 || n < 0 || pos0 > kv->n_ctx - n) {
		kvc_err(err, errlen, "bad KV range: layer %d, positions %d+%d (context %d)",
		    layer, pos0, n, kv->n_ctx);
		return KVC_EINVAL;
	}
	return 0;
}

int
cpu_kv_read(void *ctx, void *kvp, int layer, enum kvc_kv_part part, int pos0, int n,
    void *dst, char *err, size_t errlen)
{
	struct cpu_ctx *c = ctx;
	struct cpu_kv *kv = kvp;
	int rc;

	if ((rc = kv_check_range(c, kv, layer, pos0, n, err, errlen)))
		return rc;
	if (pos0 + n > kv->n_valid) {
		kvc_err(err, errlen, "KV positions %d..%d are not computed (have %d)",
		    pos0, pos0 + n, kv->n_valid);
		return KVC_EINVAL;
	}
	if (n > 0)
		memcpy(dst, (char *)(part == KVC_KV_K ? kv->k : kv->v)[layer] +
		    (size_t)pos0 * kv->row_bytes, (size_t)n * kv->row_bytes);
	return 0;
}

int
cpu_kv_write(void *ctx, void *kvp, int layer, enum kvc_kv_part part, int pos0, int n,
    const void *src, char *err, size_t errlen)
{
	struct cpu_ctx *c = ctx;
	struct cpu_kv *kv = kvp;
	int rc;

	if ((rc = kv_check_range(c, kv, layer, pos0, n, err, errlen)))
		return rc;
	if (pos0 > kv->n_valid) {
		kvc_err(err, errlen, "KV write at position %d would leave a gap (have %d)",
		    pos0, kv->n_valid);
		return KVC_EINVAL;
	}
	if ((rc = cpu_kv_reserve(c, kv, pos0 + n, err, errlen)))
		return rc;
	if (n > 0)
		memcpy((char *)(part == KVC_KV_K ? kv->k : kv->v)[layer] +
		    (size_t)pos0 * kv->row_bytes, src, (size_t)n * kv->row_bytes);
	if (pos0 + n > kv->n_valid)
		kv->n_valid = pos0 + n;
	return 0;
}

/* The shift's rows are few next to a forward pass: one thread does them. */
int
cpu_kv_shift(void *ctx, void *kvp, int p0, int n_drop, char *err, size_t errlen)
{
	struct cpu_ctx *c = ctx;
	struct cpu_kv *kv = kvp;
	const struct kvc_hparams *hp = &c->hp;
	struct kv_rope r = { hp->n_head_kv, hp->head_dim, hp->rope_dim, hp->rope_neox, c->inv_freq };
	int rc = KVC_OK;

	if (hp->arch == KVC_ARCH_GPT2) {
		/* learned absolute positions: no rotation moves a key to another position */
		kvc_err(err, errlen, "KV shift: gpt2's learned positions cannot be shifted");
		return KVC_EUNSUPPORTED;
	}
	if (p0 < 0 || n_drop < 1 || p0 > kv->n_valid - n_drop) {
		kvc_err(err, errlen, "bad KV shift: drop %d positions at %d (cache holds %d)",
		    n_drop, p0, kv->n_valid);
		return KVC_EINVAL;
	}
	/* layer by layer: gemma's windowed layers rotate with their own base */
	for (int il = 0; il < hp->n_layer && rc == KVC_OK; il++) {
		r.inv_freq = model_layer_swa(hp, il) ? c->inv_freq_swa : c->inv_freq;
		rc = kv_shift_cache(kv->k + il, kv->v + il, 1, kv->type, kv->n_valid, p0, n_drop, &r);
	}
	kv->n_valid -= n_drop;	/* after a failure the caller drops the cache */
	if (rc)
		kvc_err(err, errlen, "KV shift: %s", kvc_strerror(rc));
	return rc;
}

void
cpu_kv_store_row(const struct cpu_kv *kv, void *base, int pos, const float *src, int n)
{
	int i;

	if (kv->type == GGML_TYPE_F32) {
		memcpy((char *)base + (size_t)pos * kv->row_bytes, src, (size_t)n * sizeof(float));
	} else if (kv->type == GGML_TYPE_Q8_0) {
		kvq8_quantize(src, (char *)base + (size_t)pos * kv->row_bytes, n);
	} else {
		uint16_t *d = (uint16_t *)((char *)base + (size_t)pos * kv->row_bytes);

		for (i = 0; i < n; i++)
			d[i] = q_f32_to_fp16(src[i]);
	}
}
