/*
 * model_read.c: the loader's primitives: one hyper-parameter key, one
 * tensor (shape, type, size) located in the mapping, and views of a
 * matrix's rows. Every size is checked here before anyone multiplies it.
 */
#include "model_int.h"
#include "quant/quant.h"

#include <stdio.h>
#include <string.h>

/*
 * Integer hyper-parameter ARCH.name: *out = value, or def when absent and
 * def >= 0. A per-layer array (some architectures vary heads per layer) is
 * refused rather than misread.
 */
int
model_hp_int(struct model_loader *l, const char *name, int64_t def, int *out)
{
	char key[128];
	int64_t i, v;

	snprintf(key, sizeof key, "%s.%s", l->arch, name);
	i = gguf_find_key(l->f, key);
	if (i < 0) {
		if (def < 0) {
			kvc_err(l->err, l->errlen, "%s: missing key %s", gguf_path(l->f), key);
			return KVC_EFORMAT;
		}
		*out = (int)def;
		return 0;
	}
	if (gguf_kv_type(l->f, i) == GGUF_TYPE_ARRAY) {
		kvc_err(l->err, l->errlen, "%s: per-layer %s is not supported",
		    gguf_path(l->f), key);
		return KVC_EUNSUPPORTED;
	}
	if (gguf_kv_int(l->f, i, &v) != 0 || v < 0 || v > MODEL_MAX_DIM) {
		kvc_err(l->err, l->errlen, "%s: key %s is not an integer in [0, %d]",
		    gguf_path(l->f), key, MODEL_MAX_DIM);
		return KVC_EFORMAT;
	}
	*out = (int)v;
	return 0;
}

int
model_hp_float(struct model_loader *l, const char *name, double def, bool required, float *out)
{
	char key[128];
	int64_t i;
	double v;

	snprintf(key, sizeof key, "%s.%s", l->arch, name);
	i = gguf_find_key(l->f, key);
	if (i < 0) {
		if (required) {
			kvc_err(l->err, l->errlen, "%s: missing key %s", gguf_path(l->f), key);
			return KVC_EFORMAT;
		}
		*out = (float)def;
		return 0;
	}
	if (gguf_kv_float(l->f, i, &v) != 0 || !(v == v)) {
		kvc_err(l->err, l->errlen, "%s: key %s is not a number", gguf_path(l->f), key);
		return KVC_EFORMAT;
	}
	*out = (float)v;
	return 0;
}

/* t, whose shape the caller checked, as n_out rows of n_in: type and size. */
static int
tensor_rows(struct model_loader *l, struct kvc_weight *w, const struct gguf_tensor *t, int64_t n_in,
    int64_t n_out)
{
	const char *name = t->name;
	size_t rb;

	if (!q_supported(t->type)) {
		kvc_err(l->err, l->errlen,
		    "%s: tensor %s has type %s, which kvchat does not implement "
		    "(F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K)",
		    gguf_path(l->f), name, gguf_dtype_name(t->type));
		return KVC_EUNSUPPORTED;
	}
	rb = gguf_dtype_row_size(t->type, n_in);
	if (rb == 0) {
		kvc_err(l->err, l->errlen,
		    "%s: tensor %s: row length %lld is not a multiple of the %s block size %lld",
		    gguf_path(l->f), name, (long long)n_in, gguf_dtype_name(t->type),
		    (long long)gguf_dtype_block(t->type));
		return KVC_EFORMAT;
	}
	if (t->data == NULL || t->nbytes < rb * (size_t)n_out) {
		kvc_err(l->err, l->errlen, "%s: tensor %s holds %zu bytes, expected %zu",
		    gguf_path(l->f), name, t->nbytes, rb * (size_t)n_out);
		return KVC_EFORMAT;
	}
	w->data = t->data;
	w->type = t->type;
	w->n_in = n_in;
	w->n_out = n_out;
	w->row_bytes = rb;
	l->m->n_params += (uint64_t)n_in * (uint64_t)n_out;
	l->m->n_params_active += (uint64_t)n_in * (uint64_t)n_out;
	return 0;
}

/*
 * Locate tensor `name` of shape (n_out, n_in) (n_out = 1: a vector) into w.
 * An optional tensor that is absent leaves w->data NULL.
 */
int
model_tensor(struct model_loader *l, struct kvc_weight *w, const char *name, int64_t n_in,
    int64_t n_out, bool optional)
{
	const struct gguf_tensor *t = gguf_find_tensor(l->f, name);

	memset(w, 0, sizeof *w);
	if (t == NULL) {
		if (optional)
			return 0;
		kvc_err(l->err, l->errlen, "%s: missing tensor %s", gguf_path(l->f), name);
		return KVC_EFORMAT;
	}
	if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1) {
		kvc_err(l->err, l->errlen,
		    "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
		    gguf_path(l->f), name, (long long)t->ne[0], (long long)t->ne[1],
		    (long long)t->ne[2], (long long)t->ne[3], (long long)n_in, (long long)n_out);
		return KVC_EFORMAT;
	}
	return tensor_rows(l, w, t, n_in, n_out);
}

/*
 * A stack of n_expert matrices (n_out, n_in), GGUF ne = {n_in, n_out,
 * n_expert}: contiguous, so w is one matrix of n_expert * n_out rows.
 */
int
model_tensor3(struct model_loader *l, struct kvc_weight *w, const char *name, int64_t n_in,
    int64_t n_out, int64_t n_expert)
{
	const struct gguf_tensor *t = gguf_find_tensor(l->f, name);

	memset(w, 0, sizeof *w);
	if (t == NULL) {
		kvc_err(l->err, l->errlen, "%s: missing tensor %s", gguf_path(l->f), name);
		return KVC_EFORMAT;
	}
	if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert || t->ne[3] != 1) {
		kvc_err(l->err, l->errlen,
		    "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]",
		    gguf_path(l->f), name, (long long)t->ne[0], (long long)t->ne[1],
		    (long long)t->ne[2], (long long)t->ne[3], (long long)n_in, (long long)n_out,
		    (long long)n_expert);
		return KVC_EFORMAT;
	}
	return tensor_rows(l, w, t, n_in, n_out * n_expert);
}

int
model_layer_tensor(struct model_loader *l, struct kvc_weight *w, int il, const char *suffix,
    int64_t n_in, int64_t n_out, bool optional)
{
	char name[96];

	snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
	return model_tensor(l, w, name, n_in, n_out, optional);
}

/* Rows [r0, r0 + n) of matrix f as a matrix of its own (a vector: elements). */
struct kvc_weight
model_view(const struct kvc_weight *f, int64_t r0, int64_t n)
{
	struct kvc_weight v = *f;

	if (f->n_out == 1) {
		/* a vector (a fused bias, block size 1): elements r0 .. r0 + n */
		v.data = (const char *)f->data + (size_t)r0 * gguf_dtype_size(f->type);
		v.n_in = n;
		v.row_bytes = gguf_dtype_row_size(f->type, n);
	} else {
		v.data = (const char *)f->data + (size_t)r0 * f->row_bytes;
		v.n_out = n;
	}
	return v;
}
