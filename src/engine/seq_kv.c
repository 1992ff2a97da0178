/*
 * seq_kv.c: a sequence's cache saved and restored as snapshots (the byte
 * layout is snapshot.c's). Windowed layers of a bounded cache hold only
 * their last positions: a chunk records from which position their rows are
 * real and holds only those (version 4; version 3, still read, has zeros
 * before it), and restoring it tells the backend the others are not held,
 * so a later rewind past them recomputes.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

/*
 * The model's windowed layers as version 4 flags (a new array, n_layer
 * bytes), or NULL when none is bounded (then chunks are version 2).
 */
static unsigned char *
swa_flags(const struct kvc_engine *e)
{
	unsigned char *f = calloc((size_t)e->model.hp.n_layer, 1);

	for (int l = 0; f && l < e->model.hp.n_layer; l++)
		f[l] = model_layer_swa(&e->model.hp, l) ? 1 : 0;
	return f;
}

int
eng_seq_kv_save(struct kvc_seq *s, int pos0, int pos1, struct kvc_buf *out,
    char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	struct eng_snap h;
	unsigned char *hdr = NULL, *swa = NULL;
	size_t total;
	int n = pos1 - pos0, rc = KVC_OK, lo;

	if (s->kv == NULL) {
		kvc_err(err, errlen, "snapshot: the sequence is evicted");
		return KVC_EINVAL;
	}
	if (pos0 < 0 || pos1 < pos0 || pos1 > s->n_cached) {
		kvc_err(err, errlen, "snapshot: range [%d, %d) is not inside the %d cached positions",
		    pos0, pos1, s->n_cached);
		return KVC_EINVAL;
	}
	/* what the windowed layers of a bounded cache still hold, inside the chunk */
	lo = e->be->kv_lowest ? e->be->kv_lowest(e->bctx, s->kv) : 0;
	lo = lo < pos0 ? pos0 : lo > pos1 ? pos1 : lo;
	h = (struct eng_snap){ .kv_type = (uint32_t)e->kv_type,
	    .n_layer = (uint32_t)e->model.hp.n_layer, .kv_dim = (uint32_t)e->kv_dim,
	    .pos0 = (uint32_t)pos0, .n = (uint32_t)n, .win_from = (uint32_t)lo,
	    .bind = eng_snap_bind(e->fingerprint, s->toks.v, (size_t)pos1) };
	/* rows a windowed layer no longer holds are left out (version 4) */
	if (lo > pos0 && (h.swa = swa = swa_flags(e)) == NULL)
		rc = KVC_ENOMEM;
	eng_snap_choose_version(&h);
	total = eng_snap_bytes(&h, e->kv_row);
	if (rc == KVC_OK && ((hdr = malloc(eng_snap_header_bytes(&h))) == NULL ||
	    kvc_buf_reserve(out, total) != KVC_OK))
		rc = KVC_ENOMEM;
	if (rc) {
		free(swa);
		free(hdr);
		kvc_err(err, errlen, "snapshot: out of memory (%zu bytes)", total);
		return KVC_ENOMEM;
	}
	eng_snap_put_header(hdr, &h);
	kvc_buf_append(out, hdr, eng_snap_header_bytes(&h));
	free(hdr);
	for (int l = 0; l < e->model.hp.n_layer && rc == KVC_OK; l++) {
		/* version 3 (never written now) would zero a windowed layer's first rows */
		int p = (int)eng_snap_layer_first(&h, l);
		size_t part = eng_snap_part_bytes(&h, e->kv_row, l);

		for (int k = KVC_KV_K; k <= KVC_KV_V && rc == KVC_OK; k++) {
			if (pos1 > p)
				rc = e->be->kv_read(e->bctx, s->kv, l, (enum kvc_kv_part)k, p, pos1 - p,
				    out->p + out->n, err, errlen);
			if (rc)
				out->n -= eng_snap_part_offset(&h, e->kv_row, l, (enum kvc_kv_part)k);
			else
				out->n += part;
		}
	}
	free(swa);
	if (rc == KVC_OK && out->n < out->cap)
		out->p[out->n] = '\0';
	return rc;
}

/*
 * Layer l's part of a chunk: rows from eng_snap_layer_first to h->pos0 +
 * h->n, row bytes each. A windowed layer's positions before h->win_from
 * were not held when the chunk was saved (version 4 leaves them out,
 * version 3 has zeros for them): the backend is told so (src NULL).
 */
static int
write_part(struct kvc_seq *s, const struct eng_snap *h, int l, enum kvc_kv_part part,
    const unsigned char *rows, size_t row, char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	int pos0 = (int)h->pos0, w = (int)h->win_from, end = pos0 + (int)h->n, rc;
	int first = (int)eng_snap_layer_first(h, l);

	if (h->n == 0)
		return KVC_OK;
	if (w == pos0 || !model_layer_swa(&e->model.hp, l))
		return e->be->kv_write(e->bctx, s->kv, l, part, pos0, (int)h->n, rows, err, errlen);
	if ((rc = e->be->kv_write(e->bctx, s->kv, l, part, pos0, w - pos0, NULL, err, errlen)))
		return rc;
	return w == end ? KVC_OK : e->be->kv_write(e->bctx, s->kv, l, part, w, end - w,
	    rows + (size_t)(w - first) * row, err, errlen);
}

/* Whether a version 4 chunk's windowed layers are this model's. */
static bool
same_windows(const struct kvc_engine *e, const struct eng_snap *h)
{
	for (uint32_t l = 0; h->swa != NULL && l < h->n_layer && (int)l < e->model.hp.n_layer; l++)
		if ((h->swa[l] != 0) != model_layer_swa(&e->model.hp, (int)l))
			return false;
	return true;
}

/*
 * Write the rows of blob (header h, rows of src_row bytes in h's cache type)
 * into s's cache of another type, through float: a snapshot taken with
 * --kv-type f16 restores into a q8_0 cache as if its rows had been computed
 * there and rounded (and q8_0 into f16 exactly up to the fp16 rounding).
 */
static int
load_converted(struct kvc_seq *s, const struct eng_snap *h, const void *blob, size_t src_row,
    char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	float *f = malloc((size_t)e->kv_dim * sizeof *f);
	unsigned char *rows = malloc((size_t)h->n * e->kv_row);
	int rc = KVC_OK;

	if (f == NULL || rows == NULL) {
		free(f);
		free(rows);
		kvc_err(err, errlen, "KV snapshot: out of memory converting %u positions", h->n);
		return KVC_ENOMEM;
	}
	for (uint32_t l = 0; l < h->n_layer && rc == KVC_OK; l++) {
		for (int part = KVC_KV_K; part <= KVC_KV_V && rc == KVC_OK; part++) {
			const unsigned char *src = (const unsigned char *)blob +
			    eng_snap_part_offset(h, src_row, (int)l, (enum kvc_kv_part)part);

			uint32_t m = h->pos0 + h->n - eng_snap_layer_first(h, (int)l);

			for (uint32_t i = 0; i < m && rc == KVC_OK; i++) {
				rc = kvc_kv_row_to_f32((enum gguf_dtype)h->kv_type, src + i * src_row, f, e->kv_dim);
				if (rc == KVC_OK)
					rc = kvc_kv_row_from_f32(e->kv_type, f, rows + i * e->kv_row, e->kv_dim);
			}
			if (rc != KVC_OK)
				kvc_err(err, errlen, "KV snapshot: cannot convert %s rows to %s",
				    gguf_dtype_name((enum gguf_dtype)h->kv_type), gguf_dtype_name(e->kv_type));
			else
				rc = write_part(s, h, (int)l, (enum kvc_kv_part)part, rows, e->kv_row,
				    err, errlen);
		}
	}
	free(f);
	free(rows);
	return rc;
}

int
eng_seq_kv_load(struct kvc_seq *s, const int32_t *tokens, const void *blob,
    size_t len, char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	struct eng_snap h;
	size_t total, src_row;
	int rc;

	if ((rc = eng_snap_get_header(blob, len, &h, err, errlen)) != KVC_OK)
		return rc;
	/* a blob of another cache type is converted row by row below */
	src_row = h.kv_type <= GGML_TYPE_Q8_0 ? kvc_kv_row_bytes((enum gguf_dtype)h.kv_type, e->kv_dim) : 0;
	if (src_row == 0 || h.n_layer != (uint32_t)e->model.hp.n_layer ||
	    h.kv_dim != (uint32_t)e->kv_dim || !same_windows(e, &h)) {
		kvc_err(err, errlen, "KV snapshot: made for a %s cache with %u layers x %u, this engine has "
		    "%s with %d layers x %d", gguf_dtype_name((enum gguf_dtype)h.kv_type), h.n_layer,
		    h.kv_dim, gguf_dtype_name(e->kv_type), e->model.hp.n_layer, e->kv_dim);
		return KVC_ECORRUPT;
	}
	if (s->kv == NULL)
		s->n_cached = 0;
	if (h.pos0 != (uint32_t)s->n_cached) {
		kvc_err(err, errlen, "KV snapshot: starts at position %u but %d positions are restored",
		    h.pos0, s->n_cached);
		return KVC_ECORRUPT;
	}
	if (h.n > (uint32_t)e->n_ctx || h.pos0 + h.n > (uint32_t)e->n_ctx) {
		kvc_err(err, errlen, "KV snapshot: positions [%u, %u) exceed the context of %d",
		    h.pos0, h.pos0 + h.n, e->n_ctx);
		return KVC_ECORRUPT;
	}
	total = eng_snap_bytes(&h, src_row);
	if (len != total) {
		kvc_err(err, errlen, "KV snapshot: %zu bytes, %u positions need %zu", len, h.n, total);
		return KVC_ECORRUPT;
	}
	if (h.n > 0 && tokens == NULL) {
		kvc_err(err, errlen, "KV snapshot: no tokens given for %u positions", h.n);
		return KVC_EINVAL;
	}
	rc = eng_check_ids(e, tokens, (int)(h.pos0 + h.n), err, errlen);
	if (rc)
		return rc;
	if (h.bind != eng_snap_bind(e->fingerprint, tokens, (size_t)(h.pos0 + h.n))) {
		kvc_err(err, errlen, "KV snapshot: positions [%u, %u) were computed from other "
		    "tokens or by another model", h.pos0, h.pos0 + h.n);
		return KVC_ENOTFOUND;
	}
	rc = eng_ensure_resident(s, err, errlen);
	if (rc)
		return rc;
	if (h.kv_type == (uint32_t)e->kv_type) {
		for (uint32_t l = 0; l < h.n_layer && h.n > 0 && rc == KVC_OK; l++)
			for (int part = KVC_KV_K; part <= KVC_KV_V && rc == KVC_OK; part++)
				rc = write_part(s, &h, (int)l, (enum kvc_kv_part)part,
				    (const unsigned char *)blob + eng_snap_part_offset(&h, src_row, (int)l,
				    (enum kvc_kv_part)part), src_row, err, errlen);
	} else {
		rc = load_converted(s, &h, blob, src_row, err, errlen);
	}
	if (rc)
		return rc;
	s->n_cached = (int)(h.pos0 + h.n);
	s->have_logits = false;
	/* Keep the sequence's later tokens only if they extend what was restored. */
	if (s->toks.n < (size_t)s->n_cached || (s->n_cached > 0 &&
	    memcmp(s->toks.v, tokens, (size_t)s->n_cached * sizeof *tokens) != 0)) {
		s->toks.n = 0;
		if (kvc_tokens_append(&s->toks, tokens, (size_t)s->n_cached) != KVC_OK) {
			s->n_cached = 0;
			kvc_err(err, errlen, "out of memory");
			return KVC_ENOMEM;
		}
	}
	return KVC_OK;
}
