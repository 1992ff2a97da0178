/*
 * model_layer.c: one layer's tensors, and which tensor names an
 * architecture may carry at all.
 *
 * phi3, chatglm, glm4 (llama.cpp's llm_build_phi3/chatglm/glm4): Q, K, V
 * may come fused as attn_qkv (rows Q, then K, then V; chatglm/glm4 with a
 * fused bias), and the FFN's gate and up fused as one ffn_up of 2 n_ff rows
 * (gate first: ggml_swiglu is silu(first half) * second half). These are
 * split into views of their rows. chatglm/glm4 rotate adjacent pairs over
 * the first rope.dimension_count dimensions of each head; glm4 adds
 * post-norms. phi3's sliding window is ignored, as llama.cpp does; its
 * LongRoPE factors (rope_factors_long/short) are refused by name.
 */
#include "model_int.h"

#include <stdio.h>
#include <string.h>

/* Tensor suffixes a layer may carry, per architecture. */
static const char *const layer_suffixes[] = {
	"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
	"attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
	"ffn_down.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias",
	"attn_q_norm.weight", "attn_k_norm.weight",
	"post_attention_norm.weight", "post_ffw_norm.weight",
	"attn_qkv.weight", "attn_qkv.bias",
	"attn_norm.bias", "ffn_norm.bias", "attn_output.bias", "ffn_up.bias", "ffn_down.bias",
	"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
	"ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
	"ffn_down_shexp.weight",
	"attn_sinks.weight", "ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias",
	"ffn_down_exps.bias", "exp_probs_b.bias",
};

/* phi3, chatglm, glm4, gpt2: Q/K/V (and gate+up) may come fused. */
static bool
arch_fused(enum kvc_arch a)
{
	return a == KVC_ARCH_PHI3 || a == KVC_ARCH_CHATGLM || a == KVC_ARCH_GLM4 || a == KVC_ARCH_GPT2;
}

/* qwen3, qwen3moe, gemma3: per-head RMSNorm of Q and K (glm4moe: optional, GLM-4.6 has them). */
static bool
arch_qk_norm(enum kvc_arch a)
{
	return a == KVC_ARCH_QWEN3 || a == KVC_ARCH_QWEN3MOE || a == KVC_ARCH_GEMMA3;
}

/* gpt-oss, glm4moe: the FFN's input norm is the file's post_attention_norm (no ffn_norm). */
static bool
ffn_norm_post(const struct kvc_hparams *hp)
{
	return hp->gpt_oss || hp->arch == KVC_ARCH_GLM4MOE;
}

/* Layer il routes through experts (glm4moe's leading layers are dense). */
static bool
layer_moe(const struct kvc_hparams *hp, int il)
{
	return hp->n_expert > 0 && il >= hp->n_layer_dense;
}

/*
 * True when the loader knows what to do with tensor `name`; any other
 * tensor means a feature kvchat would silently ignore (an output bias, an
 * MoE router, ...), so the model is refused instead.
 */
bool
model_known_tensor(const struct kvc_model *m, const char *name)
{
	const struct kvc_hparams *hp = &m->hp;
	size_t j, nsuf = sizeof layer_suffixes / sizeof layer_suffixes[0];
	int il, off = 0;
	bool moe;

	if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "output_norm.weight") == 0 ||
	    strcmp(name, "output.weight") == 0)
		return true;
	if (strcmp(name, "rope_freqs.weight") == 0)
		return m->hp.arch == KVC_ARCH_LLAMA;
	if (strcmp(name, "position_embd.weight") == 0 || strcmp(name, "output_norm.bias") == 0)
		return m->hp.arch == KVC_ARCH_GPT2;
	if (sscanf(name, "blk.%d.%n", &il, &off) != 1 || off == 0 || il < 0 ||
	    il >= hp->n_layer + hp->n_layer_nextn)
		return false;
	/* glm4moe's multi-token-prediction blocks: never run, so never read */
	if (il >= hp->n_layer)
		return true;
	for (j = 0; j < nsuf; j++)
		if (strcmp(name + off, layer_suffixes[j]) == 0)
			break;
	if (j == nsuf)
		return false;
	moe = layer_moe(hp, il);
	if (j == 36)	/* the choice's correction bias: glm4moe's */
		return moe && hp->arch == KVC_ARCH_GLM4MOE;
	if (j >= 31 || j == 20)	/* gpt-oss's sinks and biases (attn_output.bias: and gpt2's) */
		return hp->gpt_oss || (j == 20 && hp->arch == KVC_ARCH_GPT2);
	if (j == 14 && ffn_norm_post(hp))	/* post_attention_norm: gpt-oss's, glm4moe's FFN input norm */
		return true;
	if (j == 5 && ffn_norm_post(hp))	/* ffn_norm: they have none */
		return false;
	if (j == 27)	/* the shared expert's gate: qwen2moe's */
		return moe && hp->arch == KVC_ARCH_QWEN2MOE;
	if (j >= 28)	/* the shared expert: qwen2moe's, glm4moe's */
		return moe && hp->n_ff_shexp > 0;
	if (j >= 23)	/* router and experts */
		return moe;
	if (j >= 6 && j <= 8)	/* dense FFN */
		return !moe;
	if (j >= 18)	/* gpt2's norm and product biases */
		return hp->arch == KVC_ARCH_GPT2;
	if (j >= 16)	/* fused Q/K/V: phi3, chatglm, glm4, gpt2 */
		return arch_fused(hp->arch);
	if (j >= 14)	/* post-norms: gemma's, glm4's */
		return hp->post_norms;
	if (j >= 12)	/* q/k norms: qwen3's and gemma3's, glm4moe's when it has them */
		return arch_qk_norm(hp->arch) || hp->arch == KVC_ARCH_GLM4MOE;
	return true;
}

/* Q, K, V (and their biases): separate tensors, or views of a fused attn_qkv. */
static int
load_qkv(struct model_loader *l, struct kvc_layer_weights *w, int il, int64_t qd, int64_t kvd)
{
	const struct kvc_hparams *hp = &l->m->hp;
	struct kvc_weight f, fb;
	char name[96];
	int rc;

	snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", il);
	if (gguf_find_tensor(l->f, name) == NULL)
		return (rc = model_layer_tensor(l, &w->wq, il, "attn_q.weight", hp->n_embd, qd, false)) ||
		    (rc = model_layer_tensor(l, &w->wk, il, "attn_k.weight", hp->n_embd, kvd, false)) ||
		    (rc = model_layer_tensor(l, &w->wv, il, "attn_v.weight", hp->n_embd, kvd, false)) ||
		    (rc = model_layer_tensor(l, &w->bq, il, "attn_q.bias", qd, 1, true)) ||
		    (rc = model_layer_tensor(l, &w->bk, il, "attn_k.bias", kvd, 1, true)) ||
		    (rc = model_layer_tensor(l, &w->bv, il, "attn_v.bias", kvd, 1, true)) ? rc : 0;
	if ((rc = model_layer_tensor(l, &f, il, "attn_qkv.weight", hp->n_embd, qd + 2 * kvd, false)) ||
	    (rc = model_layer_tensor(l, &fb, il, "attn_qkv.bias", qd + 2 * kvd, 1, true)))
		return rc;
	if (fb.data != NULL && gguf_dtype_block(fb.type) != 1) {
		kvc_err(l->err, l->errlen, "%s: blk.%d.attn_qkv.bias has block type %s (F32/F16/BF16 expected)",
		    gguf_path(l->f), il, gguf_dtype_name(fb.type));
		return KVC_EUNSUPPORTED;
	}
	w->wq = model_view(&f, 0, qd);
	w->wk = model_view(&f, qd, kvd);
	w->wv = model_view(&f, qd + kvd, kvd);
	if (fb.data != NULL) {
		w->bq = model_view(&fb, 0, qd);
		w->bk = model_view(&fb, qd, kvd);
		w->bv = model_view(&fb, qd + kvd, kvd);
	}
	return 0;
}

/* The FFN's gate and up: two tensors, or one ffn_up of 2 n_ff rows (gate first). */
static int
load_gate_up(struct model_loader *l, struct kvc_layer_weights *w, int il)
{
	const struct kvc_hparams *hp = &l->m->hp;
	struct kvc_weight f;
	char name[96];
	int rc;

	if (hp->ffn_plain)	/* gpt2: up, GELU, down; no gate */
		return model_layer_tensor(l, &w->w_up, il, "ffn_up.weight", hp->n_embd, hp->n_ff, false);
	snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", il);
	if (gguf_find_tensor(l->f, name) != NULL || !arch_fused(hp->arch))
		return (rc = model_layer_tensor(l, &w->w_gate, il, "ffn_gate.weight", hp->n_embd, hp->n_ff, false)) ||
		    (rc = model_layer_tensor(l, &w->w_up, il, "ffn_up.weight", hp->n_embd, hp->n_ff, false)) ? rc : 0;
	if ((rc = model_layer_tensor(l, &f, il, "ffn_up.weight", hp->n_embd, 2 * (int64_t)hp->n_ff, false)))
		return rc;
	w->w_gate = model_view(&f, 0, hp->n_ff);
	w->w_up = model_view(&f, hp->n_ff, hp->n_ff);
	return 0;
}

/* Layer il's tensors: presence, shapes and types, and their bytes counted. */
int
model_load_layer(struct model_loader *l, int il)
{
	struct kvc_model *m = l->m;
	const struct kvc_hparams *hp = &m->hp;
	struct kvc_layer_weights *w = &m->layers[il];
	int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
	bool qk_norm = arch_qk_norm(hp->arch), fpost = ffn_norm_post(hp);
	bool post = hp->post_norms, moe = layer_moe(hp, il);
	int rc;
	size_t j;

	if ((rc = model_layer_tensor(l, &w->attn_norm, il, "attn_norm.weight", hp->n_embd, 1, false)) ||
	    (rc = load_qkv(l, w, il, qd, kvd)) ||
	    (rc = model_layer_tensor(l, &w->q_norm, il, "attn_q_norm.weight", hp->head_dim, 1, !qk_norm)) ||
	    (rc = model_layer_tensor(l, &w->k_norm, il, "attn_k_norm.weight", hp->head_dim, 1, !qk_norm)) ||
	    (rc = model_layer_tensor(l, &w->wo, il, "attn_output.weight", qd, hp->n_embd, false)) ||
	    (rc = model_layer_tensor(l, &w->ffn_norm, il, fpost ? "post_attention_norm.weight" :
	    "ffn_norm.weight", hp->n_embd, 1, false)) ||
	    (rc = moe ? model_load_experts(l, w, il) : load_gate_up(l, w, il)) ||
	    (rc = model_layer_tensor(l, &w->w_down, il, "ffn_down.weight", hp->n_ff, hp->n_embd, moe)) ||
	    (rc = model_layer_tensor(l, &w->attn_norm_b, il, "attn_norm.bias", hp->n_embd, 1, !hp->layer_norm)) ||
	    (rc = model_layer_tensor(l, &w->ffn_norm_b, il, "ffn_norm.bias", hp->n_embd, 1, !hp->layer_norm)) ||
	    (rc = model_layer_tensor(l, &w->bo, il, "attn_output.bias", hp->n_embd, 1, !hp->ffn_plain)) ||
	    (rc = model_layer_tensor(l, &w->b_up, il, "ffn_up.bias", hp->n_ff, 1, !hp->ffn_plain)) ||
	    (rc = model_layer_tensor(l, &w->b_down, il, "ffn_down.bias", hp->n_embd, 1, !hp->ffn_plain)) ||
	    (!fpost &&	/* gpt-oss's and glm4moe's post_attention_norm is their FFN input norm, above */
	    (rc = model_layer_tensor(l, &w->attn_post_norm, il, "post_attention_norm.weight", hp->n_embd, 1, !post))) ||
	    (rc = model_layer_tensor(l, &w->ffn_post_norm, il, "post_ffw_norm.weight", hp->n_embd, 1, !post)))
		return rc;
	/* qwen2 always has Q/K/V biases; a partial set is a broken file */
	if ((w->bq.data == NULL) != (w->bk.data == NULL) ||
	    (w->bq.data == NULL) != (w->bv.data == NULL)) {
		kvc_err(l->err, l->errlen, "%s: layer %d has only some of the Q/K/V biases",
		    gguf_path(l->f), il);
		return KVC_EFORMAT;
	}
	/* where they are optional (glm4moe), both or neither */
	if ((w->q_norm.data == NULL) != (w->k_norm.data == NULL)) {
		kvc_err(l->err, l->errlen, "%s: layer %d has only one of attn_q_norm and attn_k_norm",
		    gguf_path(l->f), il);
		return KVC_EFORMAT;
	}
	{
		const struct kvc_weight *all[] = {
			&w->attn_norm, &w->wq, &w->wk, &w->wv, &w->bq, &w->bk, &w->bv,
			&w->q_norm, &w->k_norm, &w->wo, &w->ffn_norm, &w->w_gate,
			&w->w_up, &w->w_down, &w->attn_post_norm, &w->ffn_post_norm,
			&w->attn_norm_b, &w->ffn_norm_b, &w->bo, &w->b_up, &w->b_down,
			&w->gate_inp, &w->gate_inp_shexp, &w->gate_shexp, &w->up_shexp, &w->down_shexp,
			&w->gate_inp_b, &w->gate_exps_b, &w->up_exps_b, &w->down_exps_b, &w->attn_sinks,
			&w->exp_probs_b,
		};

		for (j = 0; j < sizeof all / sizeof all[0]; j++)
			if (all[j]->data != NULL)
				m->weight_bytes += all[j]->row_bytes * (size_t)all[j]->n_out;
	}
	return 0;
}
