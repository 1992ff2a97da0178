/*
 * kv_shift.h: moving a cache's K rows to other positions by rotating them
 * (kv_shift.c); internal to the backend module.
 */
#ifndef KVC_KV_SHIFT_H
#define KVC_KV_SHIFT_H

#include "core/kvc.h"
#include "gguf/gguf.h"

/* How K was rotated: the layer's RoPE. */
struct kv_rope {
	int n_head_kv, head_dim;
	int rope_dim;			/* dimensions rotated per head */
	bool neox;			/* pairs (i, i + rope_dim/2), else (2i, 2i+1) */
	const double *inv_freq;		/* (rope_dim/2): angle per position of pair i */
};

/*
 * Rotate n rows of K (each n_head_kv * head_dim elements of type, rows
 * contiguous) by delta positions, in place: a row computed at position p
 * becomes the row RoPE would have given at p + delta. Rotations compose
 * (R(a) R(b) = R(a + b)), so this is exact up to rounding: the angles are
 * taken in double, the row goes through float and back to type (one more
 * rounding for F16 / Q8_0). f is scratch of n_head_kv * head_dim floats.
 */
int kv_shift_rows(void *rows, int n, enum gguf_dtype type, const struct kv_rope *r,
    int delta, float *f);

/*
 * Drop rows [p0, p0 + n_drop) of a cache whose layers' K and V rows are
 * k[l], v[l] (n_valid rows of type each): the later rows move down and K
 * is rotated by delta (-n_drop for a whole cache; a trimmed windowed layer
 * may hold fewer of the dropped positions than it moves by). 0, KVC_ENOMEM
 * or KVC_EUNSUPPORTED (a type without a row format).
 */
int kv_shift_cache(void **k, void **v, int n_layer, enum gguf_dtype type, int n_valid,
    int p0, int n_drop, int delta, const struct kv_rope *r);

#endif
