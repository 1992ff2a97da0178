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
 */
#include "model_int.h"

#include <stdio.h>

/* The experts' keys (see the top); n_ff is read. */
int
model_read_experts(struct model_loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	bool moe_arch = hp->arch == KVC_ARCH_QWEN3MOE || hp->arch == KVC_ARCH_QWEN2MOE ||
	    hp->arch == KVC_ARCH_GPT_OSS;
	int rc;

	if ((rc = model_hp_int(l, "expert_count", 0, &hp->n_expert)))
		return rc;
	if (hp->n_expert == 0 && !moe_arch)
		return 0;
	if (hp->n_expert > 0 && !moe_arch && hp->arch != KVC_ARCH_LLAMA) {
		kvc_err(l->err, l->errlen, "%s: mixture-of-experts %s (%s.expert_count = %d) is not supported "
		    "(llama, qwen2moe, qwen3moe, gpt-oss)", gguf_path(l->f), l->arch, l->arch, hp->n_expert);
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
	if ((rc = model_hp_int(l, "expert_feed_forward_length", hp->arch == KVC_ARCH_GPT_OSS ? -1 :
	    moe_arch ? hp->n_ff / hp->n_expert_used : hp->n_ff, &hp->n_ff_exp)))
		return rc;
	if (hp->arch == KVC_ARCH_QWEN2MOE &&
	    (rc = model_hp_int(l, "expert_shared_feed_forward_length", hp->n_ff, &hp->n_ff_shexp)))
		return rc;
	if (hp->n_ff_exp <= 0 || (hp->arch == KVC_ARCH_QWEN2MOE && hp->n_ff_shexp <= 0)) {
		kvc_err(l->err, l->errlen, "%s: bad expert width %d (shared %d)", gguf_path(l->f),
		    hp->n_ff_exp, hp->n_ff_shexp);
		return KVC_EFORMAT;
	}
	hp->expert_norm = hp->arch != KVC_ARCH_QWEN2MOE && hp->arch != KVC_ARCH_GPT_OSS;
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
	bool sh = hp->n_ff_shexp > 0;
	struct kvc_weight *st[] = { &w->gate_exps, &w->up_exps, &w->down_exps };
	char name[96];
	int rc, i;

	if ((rc = model_layer_tensor(l, &w->gate_inp, il, "ffn_gate_inp.weight", E, ne, false)) ||
	    (rc = model_layer_tensor(l, &w->gate_inp_shexp, il, "ffn_gate_inp_shexp.weight", E, 1, !sh)) ||
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
