/*
 * kv_shift.c: the RoPE shift behind --ctx-overflow slide. When the middle
 * of a cache is dropped, the K rows after it move down by d positions;
 * their rotation still encodes the old positions, and attention scores
 * depend on the difference of query and key positions, so each moved row
 * is rotated by -d with the very frequencies of the layer's RoPE (base,
 * linear scale and any frequency factors: inv_freq is the backend's own
 * table) instead of being recomputed. V carries no position and moves as
 * it is.
 */
#include "config.h"

#include "backend.h"
#include "kv_shift.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int
kv_shift_rows(void *rows, int n, enum gguf_dtype type, const struct kv_rope *r,
    int delta, float *f)
{
	int w = r->n_head_kv * r->head_dim, half = r->rope_dim / 2, i, h, rc = KVC_OK;
	size_t rb = kvc_kv_row_bytes(type, w);
	double *cs = malloc((size_t)(half > 0 ? half : 1) * 2 * sizeof *cs);

	if (cs == NULL)
		return KVC_ENOMEM;
	if (rb == 0) {
		free(cs);
		return KVC_EUNSUPPORTED;
	}
	for (i = 0; i < half; i++) {
		cs[2 * i] = cos((double)delta * r->inv_freq[i]);
		cs[2 * i + 1] = sin((double)delta * r->inv_freq[i]);
	}
	for (int p = 0; p < n; p++) {
		unsigned char *row = (unsigned char *)rows + (size_t)p * rb;

		if ((rc = kvc_kv_row_to_f32(type, row, f, w)) != KVC_OK)
			break;
		for (h = 0; h < r->n_head_kv; h++) {
			float *x = f + (size_t)h * r->head_dim;

			for (i = 0; i < half; i++) {
				int a = r->neox ? i : 2 * i, b = r->neox ? i + half : 2 * i + 1;
				double x0 = x[a], x1 = x[b];

				x[a] = (float)(x0 * cs[2 * i] - x1 * cs[2 * i + 1]);
				x[b] = (float)(x0 * cs[2 * i + 1] + x1 * cs[2 * i]);
			}
		}
		if ((rc = kvc_kv_row_from_f32(type, f, row, w)) != KVC_OK)
			break;
	}
	free(cs);
	return rc;
}

int
kv_shift_cache(void **k, void **v, int n_layer, enum gguf_dtype type, int n_valid,
    int p0, int n_drop, int delta, const struct kv_rope *r)
{
	size_t rb = kvc_kv_row_bytes(type, r->n_head_kv * r->head_dim);
	int n_move = n_valid - p0 - n_drop, rc = KVC_OK;
	float *f = malloc((size_t)r->n_head_kv * r->head_dim * sizeof *f);

	if (f == NULL)
		return KVC_ENOMEM;
	for (int l = 0; l < n_layer && rc == KVC_OK; l++) {
		char *kl = k[l], *vl = v[l];

		memmove(kl + (size_t)p0 * rb, kl + (size_t)(p0 + n_drop) * rb, (size_t)n_move * rb);
		memmove(vl + (size_t)p0 * rb, vl + (size_t)(p0 + n_drop) * rb, (size_t)n_move * rb);
		rc = kv_shift_rows(kl + (size_t)p0 * rb, n_move, type, r, delta, f);
	}
	free(f);
	return rc;
}
