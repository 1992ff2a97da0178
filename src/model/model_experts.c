/*
 * model_experts.c: the keys and tensors of mixture-of-experts layers.
 *
 * llama.cpp's load_hparams/load_tensors for QWEN3MOE, QWEN2MOE, OPENAI_MOE
 * and LLAMA with expert_count > 0: a router ffn_gate_inp and the experts
 * stacked in 3-D ffn_{gate,up,down}_exps of width expert_feed_forward_length
 * (default feed_forward_length for llama, / expert_used_count for qwen;
 * required for gpt-oss). qwen2moe adds a shared expert (ffn_*_shexp,
 * expert_shared_feed_forward_length, default feed_forward_length) gated by
 * ffn_gate_inp_shexp. Weights are renormalised for llama and qwen3moe, not
 * qwen2moe (llama.cpp's norm_w); expert_weights_scale is not read for these
 * architectures there, nor here.
 *
 * glm4moe (GLM-4.5-Air, GLM-4.6; llama.cpp's LLM_ARCH_GLM4_MOE): required
 * expert_feed_forward_length and expert_shared_count (the shared expert is
 * that many experts wide, with no gate), expert_gating_func (absent or 2:
 * sigmoid, 1: softmax), expert_weights_norm (default no),
 * expert_weights_scale (default none), leading_dense_block_count (default
 * 0: that many first layers have a dense FFN of feed_forward_length), a
 * router correction bias exp_probs_b per layer, and nextn_predict_layers:
 * the file's last blocks are multi-token-prediction layers, which
 * llama.cpp loads and never runs; here they are not loaded at all, so
 * their tensors are only accepted by name (model_layer.c).
 */
#include "model_int.h"

#include <stdio.h>

/* glm4moe's own keys (see the top); n_layer, n_expert and n_ff_exp are read. */
static int
read_glm4moe(struct model_loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	int rc, gating = 0, n_shared = 0;
	char key[128];

	if ((rc = model_hp_int(l, "expert_shared_count", -1, &n_shared)) ||
	    (rc = model_hp_int(l, "expert_gating_func", 0, &gating)) ||
	    (rc = model_hp_float(l, "expert_weights_scale", 0.0, false, &hp->expert_scale)) ||
	    (rc = model_hp_int(l, "leading_dense_block_count", 0, &hp->n_layer_dense)) ||
	    (rc = model_hp_int(l, "nextn_predict_layers", 0, &hp->n_layer_nextn)))
		return rc;
	if (gating != 0 && gating != 1 && gating != 2) {
		kvc_err(l->err, l->errlen, "%s: %s.expert_gating_func %d is not supported (1 softmax, 2 sigmoid)",
		    gguf_path(l->f), l->arch, gating);
		return KVC_EUNSUPPORTED;
	}
	/* llama.cpp: a scale of 0 (absent) or 1 leaves the weights as they are */
	if (hp->expert_scale == 0.0f)
		hp->expert_scale = 1.0f;
	if (!(hp->expert_scale > 0 && hp->expert_scale < 1e6f) || n_shared > 64 ||
	    hp->n_layer_nextn >= hp->n_layer || hp->n_layer_dense > hp->n_layer - hp->n_layer_nextn) {
		kvc_err(l->err, l->errlen, "%s: bad glm4moe experts: weights scale %g, %d shared, %d of %d "
		    "blocks dense, %d of them multi-token prediction", gguf_path(l->f), hp->expert_scale,
		    n_shared, hp->n_layer_dense, hp->n_layer, hp->n_layer_nextn);
		return KVC_EFORMAT;
	}
	hp->n_layer -= hp->n_layer_nextn;
	hp->expert_sigmoid = gating != 1;
	/* a boolean key: one of another type is an error, not the default */
	snprintf(key, sizeof key, "%s.expert_weights_norm", l->arch);
	if (gguf_find_key(l->f, key) >= 0 && gguf_kv_type(l->f, gguf_find_key(l->f, key)) != GGUF_TYPE_BOOL) {
		kvc_err(l->err, l->errlen, "%s: key %s is not a boolean", gguf_path(l->f), key);
		return KVC_EFORMAT;
	}
	hp->expert_norm = gguf_get_bool(l->f, key, false);
	hp->n_ff_shexp = n_shared * hp->n_ff_exp;
	return 0;
}

/* The experts' keys (see the top); n_ff and n_layer are read. */
int
model_read_experts(struct model_loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	bool moe_arch = hp->arch == KVC_ARCH_QWEN3MOE || hp->arch == KVC_ARCH_QWEN2MOE ||
	    hp->arch == KVC_ARCH_GPT_OSS || hp->arch == KVC_ARCH_GLM4MOE;
	int rc;

	if ((rc = model_hp_int(l, "expert_count", 0, &hp->n_expert)))
		return rc;
	if (hp->n_expert == 0 && !moe_arch)
		return 0;
	if (hp->n_expert > 0 && !moe_arch && hp->arch != KVC_ARCH_LLAMA) {
		kvc_err(l->err, l->errlen, "%s: mixture-of-experts %s (%s.expert_count = %d) is not supported "
		    "(llama, qwen2moe, qwen3moe, gpt-oss, glm4moe)", gguf_path(l->f), l->arch, l->arch, hp->n_expert);
		return KVC_EUNSUPPORTED;
	}
	if ((rc = model_hp_int(l, "expert_used_count", 0, &hp->n_expert_used)))
		return rc;
	if (hp->n_expert < 1 || hp->n_expert > MODEL_MAX_EXPERTS || hp->n_expert_used < 1 ||
	    hp->n_expert_used > hp->n_expert || hp->n_ff <= 0) {
		kvc_err(l->err, l->errlen, "%s: bad experts: %s.expert_count %d, expert_used_count %d "
		    "(1 <= used <= count <= %d)", gguf_path(l->f), l->arch, hp->n_expert,
		    hp->n_expert_used, MODEL_MAX_EXPERTS);
		return KVC_EFORMAT;
	}
	if ((rc = model_hp_int(l, "expert_feed_forward_length",
	    hp->arch == KVC_ARCH_GPT_OSS || hp->arch == KVC_ARCH_GLM4MOE ? -1 :
	    moe_arch ? hp->n_ff / hp->n_expert_used : hp->n_ff, &hp->n_ff_exp)))
		return rc;
	hp->expert_norm = hp->arch != KVC_ARCH_QWEN2MOE && hp->arch != KVC_ARCH_GPT_OSS;
	hp->expert_scale = 1.0f;
	if (hp->arch == KVC_ARCH_GLM4MOE && (rc = read_glm4moe(l)))
		return rc;
	if (hp->arch == KVC_ARCH_QWEN2MOE &&
	    (rc = model_hp_int(l, "expert_shared_feed_forward_length", hp->n_ff, &hp->n_ff_shexp)))
		return rc;
	if (hp->n_ff_exp <= 0 || (hp->arch == KVC_ARCH_QWEN2MOE && hp->n_ff_shexp <= 0)) {
		kvc_err(l->err, l->errlen, "%s: bad expert width %d (shared %d)", gguf_path(l->f),
		    hp->n_ff_exp, hp->n_ff_shexp);
		return KVC_EFORMAT;
	}
	return 0;
}

/*
 * A mixture-of-experts layer's router, experts and shared expert. Only
 * n_expert_used of the experts count as read per token (weight_bytes,
 * n_params_active): decode reads nothing of the others.
 */
int
model_load_experts(struct model_loader *l, struct kvc_layer_weights *w, int il)
{
	struct kvc_model *m = l->m;
	const struct kvc_hparams *hp = &m->hp;
	int64_t E = hp->n_embd, F = hp->n_ff_exp, ne = hp->n_expert, unused = ne - hp->n_expert_used;
	bool sh = hp->n_ff_shexp > 0, shg = sh && hp->arch == KVC_ARCH_QWEN2MOE;
	struct kvc_weight *st[] = { &w->gate_exps, &w->up_exps, &w->down_exps };
	char name[96];
	int rc, i;

	if ((rc = model_layer_tensor(l, &w->gate_inp, il, "ffn_gate_inp.weight", E, ne, false)) ||
	    (rc = model_layer_tensor(l, &w->gate_inp_shexp, il, "ffn_gate_inp_shexp.weight", E, 1, !shg)) ||
	    (rc = model_layer_tensor(l, &w->exp_probs_b, il, "exp_probs_b.bias", ne, 1,
	    hp->arch != KVC_ARCH_GLM4MOE)) ||
	    (rc = model_layer_tensor(l, &w->gate_shexp, il, "ffn_gate_shexp.weight", E, hp->n_ff_shexp, !sh)) ||
	    (rc = model_layer_tensor(l, &w->up_shexp, il, "ffn_up_shexp.weight", E, hp->n_ff_shexp, !sh)) ||
	    (rc = model_layer_tensor(l, &w->down_shexp, il, "ffn_down_shexp.weight", hp->n_ff_shexp, E, !sh)))
		return rc;
	for (i = 0; i < 3; i++) {
		static const char *const sfx[] = { "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps" };

		snprintf(name, sizeof name, "blk.%d.%s.weight", il, sfx[i]);
		if ((rc = model_tensor3(l, st[i], name, i == 2 ? F : E, i == 2 ? E : F, ne)))
			return rc;
		m->n_params_active -= (uint64_t)(st[i]->n_in * st[i]->n_out / ne * unused);
		m->weight_bytes += st[i]->row_bytes * (size_t)(st[i]->n_out / ne * hp->n_expert_used);
	}
	if (hp->gpt_oss) {
		/* biases: read whole at init (cpu_moe.c), so counted in full */
		struct kvc_weight *b[] = { &w->gate_inp_b, &w->gate_exps_b, &w->up_exps_b, &w->down_exps_b };

		if ((rc = model_layer_tensor(l, b[0], il, "ffn_gate_inp.bias", ne, 1, false)) ||
		    (rc = model_layer_tensor(l, b[1], il, "ffn_gate_exps.bias", F, ne, false)) ||
		    (rc = model_layer_tensor(l, b[2], il, "ffn_up_exps.bias", F, ne, false)) ||
		    (rc = model_layer_tensor(l, b[3], il, "ffn_down_exps.bias", E, ne, false)) ||
		    (rc = model_layer_tensor(l, &w->attn_sinks, il, "attn_sinks.weight", hp->n_head, 1, false)))
			return rc;
		for (i = 0; i < 4; i++)
			if (gguf_dtype_block(b[i]->type) != 1) {
				kvc_err(l->err, l->errlen, "%s: layer %d: expert bias of type %s (F32/F16/BF16 expected)",
				    gguf_path(l->f), il, gguf_dtype_name(b[i]->type));
				return KVC_EUNSUPPORTED;
			}
	}
	return 0;
}

struct kvc_weight
model_expert(const struct kvc_model *m, const struct kvc_weight *stack, int e)
{
	int64_t rows = stack->n_out / m->hp.n_expert;

	return model_view(stack, e * rows, rows);
}
