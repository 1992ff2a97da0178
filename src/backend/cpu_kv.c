/*
 * cpu_kv.c: the CPU backend's KV caches. Per layer, K and V are (cap,
 * kv_dim) rows of F16, F32 or Q8_0 blocks, grown by doubling up to n_ctx;
 * rows are read and written whole (snapshots), moved and re-rotated by a
 * slide (kv_shift.c), and stored from the forward's float rows. Windowed
 * layers are bounded (cpu_int.h): positions map to slots through base.
 */
#include "backend.h"
#include "cpu_int.h"
#include "kv_shift.h"
#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>

static size_t
kv_bytes_at(const struct cpu_ctx *c, const struct cpu_kv *kv, int cap, int wcap)
{
	return ((size_t)cap * (size_t)(c->hp.n_layer - kv->n_win) + (size_t)wcap * (size_t)kv->n_win) *
	    kv->row_bytes * 2;
}

static void
kv_free(const struct cpu_ctx *c, struct cpu_kv *kv)
{
	if (kv->k)
		for (int il = 0; il < c->hp.n_layer; il++)
			free(kv->k[il]);
	if (kv->v)
		for (int il = 0; il < c->hp.n_layer; il++)
			free(kv->v[il]);
	free(kv->k);
	free(kv->v);
	free(kv->base);
	free(kv->bounded);
	free(kv);
}

int
cpu_kv_create(void *ctx, int n_ctx, enum gguf_dtype kv_type, void **out, char *err, size_t errlen)
{
	struct cpu_ctx *c = ctx;
	size_t nl = (size_t)c->hp.n_layer;
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
	if (kv == NULL || (kv->k = calloc(nl, sizeof *kv->k)) == NULL ||
	    (kv->v = calloc(nl, sizeof *kv->v)) == NULL ||
	    (kv->base = calloc(nl, sizeof *kv->base)) == NULL ||
	    (kv->bounded = calloc(nl, sizeof *kv->bounded)) == NULL) {
		if (kv)
			kv_free(c, kv);
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	kv->n_ctx = n_ctx;
	kv->type = kv_type;
	kv->row_bytes = kvc_kv_row_bytes(kv_type, c->kv_dim);
	kv->win_max = c->kv_whole ? n_ctx : kvc_kv_window_cap(&c->hp, n_ctx);
	for (int il = 0; il < c->hp.n_layer; il++)
		if (kv->win_max < n_ctx && model_layer_swa(&c->hp, il)) {
			kv->bounded[il] = true;
			kv->n_win++;
		}
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

	if (kv == NULL)
		return;
	for (pp = &c->caches; *pp != NULL; pp = &(*pp)->next)
		if (*pp == kv) {
			*pp = kv->next;
			break;
		}
	c->kv_used -= kv_bytes_at(c, kv, kv->cap, kv->wcap);
	kv_free(c, kv);
}

size_t
cpu_kv_bytes(void *ctx, void *kvp)
{
	struct cpu_kv *kv = kvp;

	return kv_bytes_at(ctx, kv, kv->cap, kv->wcap);
}

int
cpu_kv_lowest(void *ctx, void *kvp)
{
	struct cpu_ctx *c = ctx;
	struct cpu_kv *kv = kvp;
	int lo = 0;

	for (int il = 0; il < c->hp.n_layer; il++)
		if (kv->bounded[il] && kv->base[il] > lo)
			lo = kv->base[il];
	return lo;
}

/* Grow the full layers (win false) or the bounded ones to at least want slots, at most limit. */
static int
grow(struct cpu_ctx *c, struct cpu_kv *kv, bool win, int want, int limit, char *err, size_t errlen)
{
	int *capp = win ? &kv->wcap : &kv->cap, cap = *capp ? *capp : 64;
	size_t old = kv_bytes_at(c, kv, kv->cap, kv->wcap);

	if (want <= *capp)
		return 0;
	while (cap < want)
		cap = cap > limit / 2 ? limit : cap * 2;
	if (cap > limit)
		cap = limit;
	for (int il = 0; il < c->hp.n_layer; il++) {
		void *k;

		if (kv->bounded[il] != win)
			continue;
		if ((k = realloc(kv->k[il], (size_t)cap * kv->row_bytes)) == NULL)
			goto nomem;
		kv->k[il] = k;
		if ((k = realloc(kv->v[il], (size_t)cap * kv->row_bytes)) == NULL)
			goto nomem;
		kv->v[il] = k;
	}
	*capp = cap;
	c->kv_used = c->kv_used - old + kv_bytes_at(c, kv, kv->cap, kv->wcap);
	return 0;
nomem:
	/* layers already grown keep their larger blocks: harmless, cap is unchanged */
	kvc_err(err, errlen, "out of memory for a KV cache of %d positions", cap);
	return KVC_ENOMEM;
}

int
cpu_kv_reserve(struct cpu_ctx *c, struct cpu_kv *kv, int n_pos, char *err, size_t errlen)
{
	int rc, lo = n_pos;

	if (n_pos > kv->n_ctx) {
		kvc_err(err, errlen, "context full: %d positions do not fit in %d", n_pos, kv->n_ctx);
		return KVC_ERANGE;
	}
	if ((rc = grow(c, kv, false, n_pos, kv->n_ctx, err, errlen)) || kv->n_win == 0)
		return rc;
	for (int il = 0; il < c->hp.n_layer; il++)
		if (kv->bounded[il] && kv->base[il] < lo)
			lo = kv->base[il];
	return grow(c, kv, true, n_pos - lo < kv->win_max ? n_pos - lo : kv->win_max, kv->win_max,
	    err, errlen);
}

int
cpu_kv_prepare(struct cpu_ctx *c, struct cpu_kv *kv, int pos0, int n, char *err, size_t errlen)
{
	/* the first new position attends back to pos0 - n_swa + 1 in windowed layers */
	int need = pos0 - c->hp.n_swa + 1 > 0 ? pos0 - c->hp.n_swa + 1 : 0;

	for (int il = 0; il < c->hp.n_layer; il++) {
		if (!kv->bounded[il])
			continue;
		if (pos0 == 0)
			kv->base[il] = 0;
		else if (kv->base[il] > need || kv->base[il] > pos0) {
			kvc_err(err, errlen, "windowed layer %d holds positions from %d on, a forward "
			    "at %d needs them from %d: recompute from the start", il, kv->base[il],
			    pos0, need);
			return KVC_ENOTFOUND;
		}
	}
	return cpu_kv_reserve(c, kv, pos0 + n, err, errlen);
}

/* Move layer il's rows of positions [nb, end) to the slots that start at nb. */
static void
rebase(struct cpu_kv *kv, int il, int nb, int end)
{
	int from = nb - kv->base[il];

	if (end > nb && from > 0) {
		memmove(kv->k[il], (char *)kv->k[il] + (size_t)from * kv->row_bytes,
		    (size_t)(end - nb) * kv->row_bytes);
		memmove(kv->v[il], (char *)kv->v[il] + (size_t)from * kv->row_bytes,
		    (size_t)(end - nb) * kv->row_bytes);
	}
	kv->base[il] = nb;
}

void
cpu_kv_room(struct cpu_ctx *c, struct cpu_kv *kv, int pos, int n)
{
	/* a trim every KVC_KV_WINDOW_SLACK positions or so, each moving the kept rows once */
	for (int il = 0; il < c->hp.n_layer; il++)
		if (kv->bounded[il] && pos + n - kv->base[il] > kv->win_max)
			rebase(kv, il, pos - KVC_KV_WINDOW_KEEP(c->hp.n_swa), pos);
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
	if (n > 0 && pos0 < kv->base[layer]) {
		kvc_err(err, errlen, "KV positions %d..%d: windowed layer %d holds them from %d on",
		    pos0, pos0 + n, layer, kv->base[layer]);
		return KVC_ENOTFOUND;
	}
	if (n > 0)
		memcpy(dst, (char *)(part == KVC_KV_K ? kv->k : kv->v)[layer] +
		    (size_t)cpu_kv_slot(kv, layer, pos0) * kv->row_bytes, (size_t)n * kv->row_bytes);
	return 0;
}

/*
 * A bounded layer's K write makes the room: rows it held past pos0 are
 * dropped (or all, when pos0 is below what it holds), and when the end
 * runs past win_max only the last KVC_KV_WINDOW_KEEP positions stay. The V
 * write that follows finds the same base. *first: the first position stored.
 */
static int
bounded_room(struct cpu_ctx *c, struct cpu_kv *kv, int il, enum kvc_kv_part part, int pos0,
    int end, bool absent, int *first, char *err, size_t errlen)
{
	int b = kv->base[il], rc;

	if (part == KVC_KV_K) {
		if (absent || pos0 < b)
			b = absent ? end : pos0;
		kv->base[il] = b;
		if (end - b > kv->win_max)
			rebase(kv, il, end - KVC_KV_WINDOW_KEEP(c->hp.n_swa), pos0);
		b = kv->base[il];
		if ((rc = cpu_kv_reserve(c, kv, end, err, errlen)))
			return rc;
	} else if (end - b > kv->wcap) {
		kvc_err(err, errlen, "KV write: windowed layer %d's V at %d..%d before its K",
		    il, pos0, end);
		return KVC_EINVAL;
	}
	*first = pos0 > b ? pos0 : b;
	return 0;
}

int
cpu_kv_write(void *ctx, void *kvp, int layer, enum kvc_kv_part part, int pos0, int n,
    const void *src, char *err, size_t errlen)
{
	struct cpu_ctx *c = ctx;
	struct cpu_kv *kv = kvp;
	int rc, first = pos0;

	if ((rc = kv_check_range(c, kv, layer, pos0, n, err, errlen)))
		return rc;
	if (pos0 > kv->n_valid) {
		kvc_err(err, errlen, "KV write at position %d would leave a gap (have %d)",
		    pos0, kv->n_valid);
		return KVC_EINVAL;
	}
	if (src == NULL && !kv->bounded[layer]) {
		kvc_err(err, errlen, "KV write: layer %d keeps every position, its rows are needed",
		    layer);
		return KVC_ENOTFOUND;
	}
	if (kv->bounded[layer])
		rc = bounded_room(c, kv, layer, part, pos0, pos0 + n, src == NULL, &first, err, errlen);
	else
		rc = cpu_kv_reserve(c, kv, pos0 + n, err, errlen);
	if (rc)
		return rc;
	if (src != NULL && pos0 + n > first)
		memcpy((char *)(part == KVC_KV_K ? kv->k : kv->v)[layer] +
		    (size_t)cpu_kv_slot(kv, layer, first) * kv->row_bytes,
		    (const char *)src + (size_t)(first - pos0) * kv->row_bytes,
		    (size_t)(pos0 + n - first) * kv->row_bytes);
	kv->n_valid = pos0 + n;	/* like a forward: what lay past the write is gone */
	return 0;
}

/*
 * The shift's rows are few next to a forward pass: one thread does them.
 * A trimmed layer holding positions [b, n_valid) loses the part of the
 * dropped range it holds, and moves by n_drop all the same.
 */
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
		int b = kv->base[il], held = kv->n_valid - b > 0 ? kv->n_valid - b : 0;
		int lo = p0 - b, hi = p0 + n_drop - b;

		lo = lo < 0 ? 0 : lo > held ? held : lo;
		hi = hi < 0 ? 0 : hi > held ? held : hi;
		r.inv_freq = model_layer_swa(hp, il) ? c->inv_freq_swa : c->inv_freq;
		rc = kv_shift_cache(kv->k + il, kv->v + il, 1, kv->type, held, lo, hi - lo, -n_drop, &r);
		kv->base[il] = b - (n_drop - (hi - lo));
	}
	kv->n_valid -= n_drop;	/* after a failure the caller drops the cache */
	if (rc)
		kvc_err(err, errlen, "KV shift: %s", kvc_strerror(rc));
	return rc;
}

void
cpu_kv_store_row(const struct cpu_ctx *c, const struct cpu_kv *kv, void *base, int slot,
    const float *src, int n)
{
	void *d = (char *)base + (size_t)slot * kv->row_bytes;

	if (kv->type == GGML_TYPE_F32)
		memcpy(d, src, (size_t)n * sizeof(float));
	else if (kv->type == GGML_TYPE_Q8_0)
		kern_kvq8_quantize(src, d, n);
	else	/* every table rounds as q_f32_to_fp16 does: the same bits */
		c->kern->f32_to_f16(d, src, n);
}

void
cpu_kv_describe(const struct cpu_ctx *c, struct kvc_buf *out)
{
	int n_win = 0, n_max = 0;

	for (const struct cpu_kv *kv = c->caches; kv != NULL; kv = kv->next)
		if (kv->n_win > 0) {
			n_win = kv->n_win;
			n_max = kv->win_max;
		}
	if (n_win > 0)
		kvc_buf_printf(out, "windowed layers: %d of %d keep at most %d positions "
		    "(window %d), the others every position\n", n_win, c->hp.n_layer, n_max,
		    c->hp.n_swa);
}
