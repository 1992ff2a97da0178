/*
 * support.c: what the CUDA backend can run (support.h). cuda_init asks
 * first, before it touches the device, so that a model it cannot run is
 * refused by name at once, and --device auto runs it on the CPU with that
 * name in its notice rather than failing halfway through an upload. No
 * CUDA here: the module links it, and so does its CPU test.
 */
#include "support.h"

#include <stddef.h>

#include "quant/quant.h"

bool
cu_dev_type_ok(enum gguf_dtype t)
{
	switch (t) {
	case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q8_0:
	case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
	case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
	case GGML_TYPE_Q6_K:
		return true;
	default:
		return false;
	}
}

/* One matrix the GPU reads, named what for a refusal (layer -1: not a layer's). */
static int
weight_check(const struct kvc_weight *w, const char *what, int layer, char *err, size_t errlen)
{
	char where[64];

	if (w->data == NULL)
		return KVC_OK;
	if (layer >= 0)
		kvc_err(where, sizeof where, "layer %d's %s", layer, what);
	else
		kvc_err(where, sizeof where, "%s", what);
	if (!cu_dev_type_ok(w->type)) {
		kvc_err(err, errlen, "cuda: no GPU kernel for %s weights yet (%s; the CPU backend runs them: "
		    "--device cpu)", gguf_dtype_name(w->type), where);
		return KVC_EUNSUPPORTED;
	}
	if (q_block_elems(w->type) == 1 && w->n_in % 32 != 0) {
		/* the float types run through 32-element pseudo-blocks */
		kvc_err(err, errlen, "cuda: %s matrix with %lld columns, not a multiple of 32 (%s; the CPU "
		    "backend runs it: --device cpu)", gguf_dtype_name(w->type), (long long)w->n_in, where);
		return KVC_EUNSUPPORTED;
	}
	return KVC_OK;
}

int
cu_model_check(const struct kvc_model *m, char *err, size_t errlen)
{
	static const struct { const char *name; size_t off; } mats[] = {
		{ "attn_q", offsetof(struct kvc_layer_weights, wq) },
		{ "attn_k", offsetof(struct kvc_layer_weights, wk) },
		{ "attn_v", offsetof(struct kvc_layer_weights, wv) },
		{ "attn_output", offsetof(struct kvc_layer_weights, wo) },
		{ "ffn_gate", offsetof(struct kvc_layer_weights, w_gate) },
		{ "ffn_up", offsetof(struct kvc_layer_weights, w_up) },
		{ "ffn_down", offsetof(struct kvc_layer_weights, w_down) },
	};
	const struct kvc_hparams *hp = &m->hp;
	int rc;

	/*
	 * Every dense architecture model_load accepts runs here (gemma's
	 * windowed layers keep every position: kv_lowest stays 0), YaRN
	 * included; experts are CPU-only for now.
	 */
	if (hp->n_expert > 0) {
		kvc_err(err, errlen, "cuda: %s's mixture of experts (%d experts) is not implemented on the GPU yet "
		    "(the CPU backend runs it: --device cpu)", model_arch_name(hp->arch), hp->n_expert);
		return KVC_EUNSUPPORTED;
	}
	if (hp->head_dim > 256 || hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv != 0 ||
	    hp->rope_dim > hp->head_dim) {
		kvc_err(err, errlen, "cuda: %s's head shape (%d heads, %d KV heads, head size %d, "
		    "%d rotated) is not one the GPU kernels take (head size at most 256; the CPU backend runs it: "
		    "--device cpu)", model_arch_name(hp->arch), hp->n_head, hp->n_head_kv, hp->head_dim,
		    hp->rope_dim);
		return KVC_EUNSUPPORTED;
	}
	if ((rc = weight_check(&m->tok_embd, "token embedding", -1, err, errlen)) != KVC_OK ||
	    (rc = weight_check(&m->output, "output", -1, err, errlen)) != KVC_OK ||
	    (rc = weight_check(&m->pos_embd, "position embedding", -1, err, errlen)) != KVC_OK)
		return rc;
	for (int l = 0; l < hp->n_layer; l++)
		for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
			if ((rc = weight_check((const struct kvc_weight *)((const char *)&m->layers[l] + mats[i].off),
			    mats[i].name, l, err, errlen)) != KVC_OK)
				return rc;
	return KVC_OK;
}
