/*
 * model_hparams.c: the hyper-parameters every architecture shares, RoPE
 * scaling (linear, YaRN), and gemma's and gpt-oss's own.
 *
 * RoPE pairing follows llama.cpp's rope types: its converter permutes
 * llama Q/K rows into Meta's interleaved order, so GGUF llama files rotate
 * adjacent pairs (2i, 2i+1); qwen2/qwen3 keep the Hugging Face order and
 * rotate (i, i + d/2) ("NeoX"), as do gemma2/3.
 *
 * Gemma: llama.cpp's converter adds 1 to every Gemma norm weight (Hugging
 * Face computes x * (1 + w)), so the GGUF norms are plain RMSNorm weights.
 * The defaults for keys a gemma file may lack are llama.cpp's
 * (llama-model.cpp, load_hparams): gemma3 windows only when
 * attention.sliding_window is present and > 0, every 6th layer global,
 * windowed layers' RoPE base 10000 at scale 1; gemma2 window 4096, every
 * other layer global, softcaps 50 (scores) and 30 (logits).
 */
#include "model_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/*
 * Gemma 2 and 3 (llama.cpp's load_hparams for LLM_ARCH_GEMMA2/GEMMA3):
 * embeddings scaled by sqrt(n_embd), GELU gate, post-norms, interleaved
 * sliding-window layers with their own RoPE base, optional softcaps. The 27B
 * models (recognised, as llama.cpp does, by their layer count) scale
 * queries by 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim).
 */
static int
read_gemma(struct model_loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	bool g2 = hp->arch == KVC_ARCH_GEMMA2;
	int rc, big = g2 ? 46 : 62;

	hp->embd_scale = sqrtf((float)hp->n_embd);
	hp->ffn_gelu = true;
	hp->post_norms = true;
	if (hp->n_layer == big)
		hp->attn_scale = (float)(1.0 / sqrt((double)(hp->n_embd / hp->n_head)));
	hp->n_swa = g2 ? 4096 : 0;
	hp->swa_period = g2 ? 2 : 6;
	hp->rope_theta_swa = g2 ? hp->rope_theta : 10000.0f;
	hp->rope_freq_scale_swa = g2 ? hp->rope_freq_scale : 1.0f;
	if ((rc = model_hp_int(l, "attention.sliding_window", hp->n_swa, &hp->n_swa)))
		return rc;
	if ((hp->n_swa > 0 || g2) &&
	    ((rc = model_hp_int(l, "attention.sliding_window_pattern", hp->swa_period, &hp->swa_period)) ||
	    (rc = model_hp_float(l, "rope.freq_base_swa", hp->rope_theta_swa, false, &hp->rope_theta_swa))))
		return rc;
	if (!(hp->rope_theta_swa > 1)) {
		kvc_err(l->err, l->errlen, "%s: bad rope base %g for the windowed layers",
		    gguf_path(l->f), hp->rope_theta_swa);
		return KVC_EFORMAT;
	}
	if (g2 && (rc = model_hp_float(l, "attn_logit_softcapping", 50.0, false, &hp->attn_softcap)))
		return rc;
	if ((rc = model_hp_float(l, "final_logit_softcapping", g2 ? 30.0 : 0.0, false, &hp->final_softcap)))
		return rc;
	if (!(hp->attn_softcap >= 0) || !(hp->final_softcap >= 0)) {
		kvc_err(l->err, l->errlen, "%s: negative softcap", gguf_path(l->f));
		return KVC_EFORMAT;
	}
	return 0;
}

/*
 * YaRN, as llama.cpp computes it for the architectures here (llama-context.cpp,
 * ggml's rope_yarn): extrapolation factor 1, beta fast 32 and slow 1 (it
 * reads no beta keys for them), the correction dims
 *   dim(beta) = rope_dim * ln(n_ctx_orig / (2 pi beta)) / (2 ln base),
 *   low = max(0, floor(dim(32))), high = min(rope_dim - 1, ceil(dim(1))),
 * and the magnitude factor rope.scaling.attn_factor * (1 + 0.1 ln factor)
 * when factor > 1 (llama.cpp's attn_factor cancels the ramp's own, leaving
 * this on cos and sin).
 */
static int
read_yarn(struct model_loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	float factor, attn = 1.0f;
	int n_orig, rc;
	double lo, hi;

	if ((rc = model_hp_float(l, "rope.scaling.factor", 1.0, false, &factor)) ||
	    (rc = model_hp_int(l, "rope.scaling.original_context_length", hp->n_ctx_train, &n_orig)) ||
	    (rc = model_hp_float(l, "rope.scaling.attn_factor", 1.0, false, &attn)))
		return rc;
	if (!(factor >= 1.0f / 1024 && factor <= 1024) || n_orig <= 0 || !(attn > 0 && attn < 1024)) {
		kvc_err(l->err, l->errlen, "%s: bad YaRN scaling: factor %g, original context %d, attn_factor %g",
		    gguf_path(l->f), factor, n_orig, attn);
		return KVC_EFORMAT;
	}
	lo = floor(hp->rope_dim * log(n_orig / (2 * M_PI * 32.0)) / (2 * log(hp->rope_theta)));
	hi = ceil(hp->rope_dim * log(n_orig / (2 * M_PI * 1.0)) / (2 * log(hp->rope_theta)));
	hp->rope_yarn = true;
	hp->rope_freq_scale = 1.0f / factor;
	hp->yarn_low = (float)(lo > 0 ? lo : 0);
	hp->yarn_high = (float)(hi < hp->rope_dim - 1 ? hi : hp->rope_dim - 1);
	hp->rope_mscale = attn * (factor > 1 ? 1.0f + 0.1f * logf(factor) : 1.0f);
	return 0;
}

/*
 * gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE): a window of
 * attention.sliding_window positions in every other layer (the pattern's
 * default 2: even layers windowed), the windowed layers rotating with the
 * global RoPE (rope.freq_base_swa may set their base), the clamped SwiGLU
 * of alpha 1.702 and limit 7 (constants in llama.cpp's graph).
 */
static int
read_gpt_oss(struct model_loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	int rc;

	hp->gpt_oss = true;
	hp->swiglu_alpha = 1.702f;
	hp->swiglu_limit = 7.0f;
	hp->swa_period = 2;
	hp->rope_theta_swa = hp->rope_theta;
	hp->rope_freq_scale_swa = hp->rope_freq_scale;
	if ((rc = model_hp_int(l, "attention.sliding_window", -1, &hp->n_swa)) ||
	    (rc = model_hp_int(l, "attention.sliding_window_pattern", 2, &hp->swa_period)) ||
	    (rc = model_hp_float(l, "rope.freq_base_swa", hp->rope_theta, false, &hp->rope_theta_swa)))
		return rc;
	if (hp->n_swa <= 0 || hp->swa_period <= 0 || !(hp->rope_theta_swa > 1)) {
		kvc_err(l->err, l->errlen, "%s: bad sliding window %d (period %d, base %g)", gguf_path(l->f),
		    hp->n_swa, hp->swa_period, hp->rope_theta_swa);
		return KVC_EFORMAT;
	}
	return 0;
}

int
model_read_hparams(struct model_loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	const struct gguf_file *f = l->f;
	char key[128];
	const char *st;
	int rc, v_len = 0;
	float factor;

	if ((rc = model_hp_int(l, "context_length", 0, &hp->n_ctx_train)) ||
	    (rc = model_hp_int(l, "embedding_length", -1, &hp->n_embd)) ||
	    (rc = model_hp_int(l, "block_count", -1, &hp->n_layer)) ||
	    (rc = model_hp_int(l, "feed_forward_length", -1, &hp->n_ff)) ||
	    (rc = model_hp_int(l, "attention.head_count", -1, &hp->n_head)) ||
	    (rc = model_read_experts(l)))
		return rc;
	if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_layer > MODEL_MAX_LAYERS ||
	    hp->n_ff <= 0 || hp->n_head <= 0) {
		kvc_err(l->err, l->errlen, "%s: bad dimensions (embedding %d, layers %d, ffn %d, heads %d)",
		    gguf_path(f), hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head);
		return KVC_EFORMAT;
	}
	if ((rc = model_hp_int(l, "attention.head_count_kv", hp->n_head, &hp->n_head_kv)))
		return rc;
	if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0) {
		kvc_err(l->err, l->errlen, "%s: %d heads cannot share %d key/value heads",
		    gguf_path(f), hp->n_head, hp->n_head_kv);
		return KVC_EFORMAT;
	}
	if ((rc = model_hp_int(l, "attention.key_length",
	    hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : -1, &hp->head_dim)) ||
	    (rc = model_hp_int(l, "attention.value_length", hp->head_dim, &v_len)))
		return rc;
	if (hp->head_dim <= 0 || hp->head_dim % 2 != 0 || v_len != hp->head_dim) {
		kvc_err(l->err, l->errlen, "%s: head size %d (value size %d) not supported: must be even and equal",
		    gguf_path(f), hp->head_dim, v_len);
		return KVC_EUNSUPPORTED;
	}
	if ((rc = model_hp_int(l, "rope.dimension_count", hp->arch == KVC_ARCH_GPT2 ? 0 : hp->head_dim,
	    &hp->rope_dim)))
		return rc;
	if (hp->arch == KVC_ARCH_GPT2 && hp->rope_dim != 0) {
		kvc_err(l->err, l->errlen, "%s: gpt2 with rope.dimension_count %d", gguf_path(f), hp->rope_dim);
		return KVC_EFORMAT;
	}
	if ((hp->rope_dim <= 0 && hp->arch != KVC_ARCH_GPT2) || hp->rope_dim % 2 != 0 || hp->rope_dim > hp->head_dim) {
		kvc_err(l->err, l->errlen, "%s: rope dimension %d does not fit head size %d",
		    gguf_path(f), hp->rope_dim, hp->head_dim);
		return KVC_EFORMAT;
	}
	if ((rc = model_hp_float(l, hp->arch == KVC_ARCH_GPT2 ? "attention.layer_norm_epsilon" :
	    "attention.layer_norm_rms_epsilon", 0, true, &hp->rms_eps)) ||
	    (rc = model_hp_float(l, "rope.freq_base", 10000.0, false, &hp->rope_theta)))
		return rc;
	if (!(hp->rms_eps > 0 && hp->rms_eps < 1) || !(hp->rope_theta > 1)) {
		kvc_err(l->err, l->errlen, "%s: bad rms epsilon %g or rope base %g",
		    gguf_path(f), hp->rms_eps, hp->rope_theta);
		return KVC_EFORMAT;
	}

	/* RoPE scaling: none, linear and YaRN; anything else changes the angles. */
	hp->rope_freq_scale = 1.0f;
	hp->rope_mscale = 1.0f;
	snprintf(key, sizeof key, "%s.rope.scaling.type", l->arch);
	st = gguf_get_str(f, key, NULL);
	if (st == NULL && gguf_find_key(f, key) >= 0) {
		kvc_err(l->err, l->errlen, "%s: key %s is not a string", gguf_path(f), key);
		return KVC_EFORMAT;
	}
	if (st != NULL && strcmp(st, "none") != 0 && strcmp(st, "linear") != 0 && strcmp(st, "yarn") != 0) {
		kvc_err(l->err, l->errlen, "%s: rope scaling type '%s' is not supported (none, linear, yarn)",
		    gguf_path(f), st);
		return KVC_EUNSUPPORTED;
	}
	if (st != NULL && strcmp(st, "yarn") == 0 && (rc = read_yarn(l)))
		return rc;
	if (st == NULL || strcmp(st, "linear") == 0) {
		/* older files carry only rope.scale_linear */
		if ((rc = model_hp_float(l, st ? "rope.scaling.factor" : "rope.scale_linear", 1.0, false, &factor)))
			return rc;
		if (!(factor >= 1.0f / 1024 && factor <= 1024)) {
			kvc_err(l->err, l->errlen, "%s: bad rope scaling factor %g", gguf_path(f), factor);
			return KVC_EFORMAT;
		}
		hp->rope_freq_scale = 1.0f / factor;
	}
	hp->rope_neox = hp->arch != KVC_ARCH_LLAMA && hp->arch != KVC_ARCH_CHATGLM &&
	    hp->arch != KVC_ARCH_GLM4;
	hp->post_norms = hp->arch == KVC_ARCH_GLM4;
	hp->layer_norm = hp->ffn_plain = hp->arch == KVC_ARCH_GPT2;
	if (hp->arch == KVC_ARCH_GPT2 && hp->n_ctx_train <= 0) {
		kvc_err(l->err, l->errlen, "%s: gpt2 needs %s.context_length (its position table)",
		    gguf_path(f), l->arch);
		return KVC_EFORMAT;
	}
	if (hp->arch == KVC_ARCH_GLM4 || hp->arch == KVC_ARCH_GLM4MOE) {
		/*
		 * multimodal RoPE sections and multi-token-prediction layers change
		 * the graph (glm4moe's are trailing blocks never run: model_experts.c)
		 */
		static const char *const refused[] = { "rope.dimension_sections", "nextn_predict_layers" };
		size_t i;

		for (i = 0; i < (hp->arch == KVC_ARCH_GLM4 ? 2u : 1u); i++) {
			snprintf(key, sizeof key, "%s.%s", l->arch, refused[i]);
			if (gguf_find_key(f, key) >= 0 && (i == 0 || gguf_get_int(f, key, 0) > 0)) {
				kvc_err(l->err, l->errlen, "%s: %s is not supported", gguf_path(f), key);
				return KVC_EUNSUPPORTED;
			}
		}
	}
	hp->embd_scale = 1.0f;
	hp->attn_scale = (float)(1.0 / sqrt((double)hp->head_dim));
	if (hp->arch == KVC_ARCH_GEMMA2 || hp->arch == KVC_ARCH_GEMMA3)
		return read_gemma(l);
	if (hp->arch == KVC_ARCH_GPT_OSS)
		return read_gpt_oss(l);
	return 0;
}
