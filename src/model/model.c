/*
 * model.c: read a transformer's hyper-parameters and locate its weights in
 * a GGUF (architectures llama, qwen2, qwen3, gemma2, gemma3), checking everything a backend
 * will rely on: presence, shape and type of every tensor, and that the file
 * asks for nothing kvchat does not implement.
 *
 * Keys and tensor names are llama.cpp's. RoPE pairing follows llama.cpp's
 * rope types: its converter permutes llama Q/K rows into Meta's interleaved
 * order, so GGUF llama files rotate adjacent pairs (2i, 2i+1); qwen2/qwen3
 * keep the Hugging Face order and rotate (i, i + d/2) ("NeoX"), as do gemma2/3.
 *
 * Gemma: llama.cpp's converter adds 1 to every Gemma norm weight (Hugging
 * Face computes x * (1 + w)), so the GGUF norms are plain RMSNorm weights.
 * The defaults for keys a gemma file may lack are llama.cpp's
 * (llama-model.cpp, load_hparams): gemma3 windows only when
 * attention.sliding_window is present and > 0, every 6th layer global,
 * windowed layers' RoPE base 10000 at scale 1; gemma2 window 4096, every
 * other layer global, softcaps 50 (scores) and 30 (logits).
 *
 * phi3, chatglm, glm4 (llama.cpp's llm_build_phi3/chatglm/glm4): Q, K, V
 * may come fused as attn_qkv (rows Q, then K, then V; chatglm/glm4 with a
 * fused bias), and the FFN's gate and up fused as one ffn_up of 2 n_ff rows
 * (gate first: ggml_swiglu is silu(first half) * second half). These are
 * split into views of their rows. chatglm/glm4 rotate adjacent pairs over
 * the first rope.dimension_count dimensions of each head; glm4 adds
 * post-norms. phi3's sliding window is ignored, as llama.cpp does; its
 * LongRoPE factors (rope_factors_long/short) are refused by name.
 *
 * Mixture of experts (llama.cpp's load_hparams/load_tensors for QWEN3MOE, QWEN2MOE,
 * OPENAI_MOE and LLAMA with expert_count > 0): a router ffn_gate_inp and the experts
 * stacked in 3-D ffn_{gate,up,down}_exps of width expert_feed_forward_length (default
 * feed_forward_length for llama, / expert_used_count for qwen; required for gpt-oss).
 * qwen2moe adds a shared expert (ffn_*_shexp, expert_shared_feed_forward_length,
 * default feed_forward_length) gated by ffn_gate_inp_shexp. Weights are renormalised
 * for llama and qwen3moe, not qwen2moe (llama.cpp's norm_w); expert_weights_scale is
 * not read for these architectures there, nor here.
 */
#include "model.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Generous bounds that keep every size product far from overflow. */
#define MAX_DIM (1 << 24)
#define MAX_LAYERS 4096
#define MAX_EXPERTS 4096

const char *
model_arch_name(enum kvc_arch a)
{
	switch (a) {
	case KVC_ARCH_LLAMA: return "llama";
	case KVC_ARCH_QWEN2: return "qwen2";
	case KVC_ARCH_QWEN3: return "qwen3";
	case KVC_ARCH_GEMMA2: return "gemma2";
	case KVC_ARCH_GEMMA3: return "gemma3";
	case KVC_ARCH_PHI3: return "phi3";
	case KVC_ARCH_CHATGLM: return "chatglm";
	case KVC_ARCH_GLM4: return "glm4";
	case KVC_ARCH_GPT2: return "gpt2";
	case KVC_ARCH_QWEN3MOE: return "qwen3moe";
	case KVC_ARCH_QWEN2MOE: return "qwen2moe";
	case KVC_ARCH_GPT_OSS: return "gpt-oss";
	}
	return "?";
}

struct loader {
	struct kvc_model *m;
	const struct gguf_file *f;
	const char *arch;	/* key prefix */
	char *err;
	size_t errlen;
};

/*
 * Integer hyper-parameter ARCH.name: *out = value, or def when absent and
 * def >= 0. A per-layer array (some architectures vary heads per layer) is
 * refused rather than misread.
 */
static int
hp_int(struct loader *l, const char *name, int64_t def, int *out)
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
	if (gguf_kv_int(l->f, i, &v) != 0 || v < 0 || v > MAX_DIM) {
		kvc_err(l->err, l->errlen, "%s: key %s is not an integer in [0, %d]",
		    gguf_path(l->f), key, MAX_DIM);
		return KVC_EFORMAT;
	}
	*out = (int)v;
	return 0;
}

static int
hp_float(struct loader *l, const char *name, double def, bool required, float *out)
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
tensor_rows(struct loader *l, struct kvc_weight *w, const struct gguf_tensor *t, int64_t n_in,
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
static int
tensor(struct loader *l, struct kvc_weight *w, const char *name, int64_t n_in,
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
static int
tensor3(struct loader *l, struct kvc_weight *w, const char *name, int64_t n_in,
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

static int
layer_tensor(struct loader *l, struct kvc_weight *w, int il, const char *suffix,
    int64_t n_in, int64_t n_out, bool optional)
{
	char name[96];

	snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
	return tensor(l, w, name, n_in, n_out, optional);
}

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
	"ffn_down_exps.bias",
};

/* phi3, chatglm, glm4, gpt2: Q/K/V (and gate+up) may come fused. */
static bool
arch_fused(enum kvc_arch a)
{
	return a == KVC_ARCH_PHI3 || a == KVC_ARCH_CHATGLM || a == KVC_ARCH_GLM4 || a == KVC_ARCH_GPT2;
}

/* qwen3, qwen3moe, gemma3: per-head RMSNorm of Q and K. */
static bool
arch_qk_norm(enum kvc_arch a)
{
	return a == KVC_ARCH_QWEN3 || a == KVC_ARCH_QWEN3MOE || a == KVC_ARCH_GEMMA3;
}

/*
 * True when the loader knows what to do with tensor `name`; any other
 * tensor means a feature kvchat would silently ignore (an output bias, an
 * MoE router, ...), so the model is refused instead.
 */
static bool
known_tensor(const struct kvc_model *m, const char *name)
{
	size_t j, nsuf = sizeof layer_suffixes / sizeof layer_suffixes[0];
	int il, off = 0;

	if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "output_norm.weight") == 0 ||
	    strcmp(name, "output.weight") == 0)
		return true;
	if (strcmp(name, "rope_freqs.weight") == 0)
		return m->hp.arch == KVC_ARCH_LLAMA;
	if (strcmp(name, "position_embd.weight") == 0 || strcmp(name, "output_norm.bias") == 0)
		return m->hp.arch == KVC_ARCH_GPT2;
	if (sscanf(name, "blk.%d.%n", &il, &off) != 1 || off == 0 || il < 0 ||
	    il >= m->hp.n_layer)
		return false;
	for (j = 0; j < nsuf; j++)
		if (strcmp(name + off, layer_suffixes[j]) == 0)
			break;
	if (j == nsuf)
		return false;
	if (j >= 31 || j == 20)	/* gpt-oss's sinks and biases (attn_output.bias: and gpt2's) */
		return m->hp.gpt_oss || (j == 20 && m->hp.arch == KVC_ARCH_GPT2);
	if (j == 14 && m->hp.gpt_oss)	/* post_attention_norm: gpt-oss's FFN input norm */
		return true;
	if (j == 5 && m->hp.gpt_oss)	/* ffn_norm: gpt-oss has none */
		return false;
	if (j >= 27)	/* the shared expert: qwen2moe's */
		return m->hp.n_ff_shexp > 0;
	if (j >= 23)	/* router and experts */
		return m->hp.n_expert > 0;
	if (j >= 6 && j <= 8)	/* dense FFN */
		return m->hp.n_expert == 0;
	if (j >= 18)	/* gpt2's norm and product biases */
		return m->hp.arch == KVC_ARCH_GPT2;
	if (j >= 16)	/* fused Q/K/V: phi3, chatglm, glm4, gpt2 */
		return arch_fused(m->hp.arch);
	if (j >= 14)	/* post-norms: gemma's, glm4's */
		return m->hp.post_norms;
	if (j >= 12)	/* q/k norms: qwen3's and gemma3's */
		return arch_qk_norm(m->hp.arch);
	return true;
}

/*
 * Gemma 2 and 3 (llama.cpp's load_hparams for LLM_ARCH_GEMMA2/GEMMA3):
 * embeddings scaled by sqrt(n_embd), GELU gate, post-norms, interleaved
 * sliding-window layers with their own RoPE base, optional softcaps. The 27B
 * models (recognised, as llama.cpp does, by their layer count) scale
 * queries by 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim).
 */
static int
read_gemma(struct loader *l)
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
	if ((rc = hp_int(l, "attention.sliding_window", hp->n_swa, &hp->n_swa)))
		return rc;
	if ((hp->n_swa > 0 || g2) &&
	    ((rc = hp_int(l, "attention.sliding_window_pattern", hp->swa_period, &hp->swa_period)) ||
	    (rc = hp_float(l, "rope.freq_base_swa", hp->rope_theta_swa, false, &hp->rope_theta_swa))))
		return rc;
	if (!(hp->rope_theta_swa > 1)) {
		kvc_err(l->err, l->errlen, "%s: bad rope base %g for the windowed layers",
		    gguf_path(l->f), hp->rope_theta_swa);
		return KVC_EFORMAT;
	}
	if (g2 && (rc = hp_float(l, "attn_logit_softcapping", 50.0, false, &hp->attn_softcap)))
		return rc;
	if ((rc = hp_float(l, "final_logit_softcapping", g2 ? 30.0 : 0.0, false, &hp->final_softcap)))
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
read_yarn(struct loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	float factor, attn = 1.0f;
	int n_orig, rc;
	double lo, hi;

	if ((rc = hp_float(l, "rope.scaling.factor", 1.0, false, &factor)) ||
	    (rc = hp_int(l, "rope.scaling.original_context_length", hp->n_ctx_train, &n_orig)) ||
	    (rc = hp_float(l, "rope.scaling.attn_factor", 1.0, false, &attn)))
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

/* The experts' keys (see the top); n_ff is read. */
static int
read_experts(struct loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	bool moe_arch = hp->arch == KVC_ARCH_QWEN3MOE || hp->arch == KVC_ARCH_QWEN2MOE ||
	    hp->arch == KVC_ARCH_GPT_OSS;
	int rc;

	if ((rc = hp_int(l, "expert_count", 0, &hp->n_expert)))
		return rc;
	if (hp->n_expert == 0 && !moe_arch)
		return 0;
	if (hp->n_expert > 0 && !moe_arch && hp->arch != KVC_ARCH_LLAMA) {
		kvc_err(l->err, l->errlen, "%s: mixture-of-experts %s (%s.expert_count = %d) is not supported "
		    "(llama, qwen2moe, qwen3moe, gpt-oss)", gguf_path(l->f), l->arch, l->arch, hp->n_expert);
		return KVC_EUNSUPPORTED;
	}
	if ((rc = hp_int(l, "expert_used_count", 0, &hp->n_expert_used)))
		return rc;
	if (hp->n_expert < 1 || hp->n_expert > MAX_EXPERTS || hp->n_expert_used < 1 ||
	    hp->n_expert_used > hp->n_expert || hp->n_ff <= 0) {
		kvc_err(l->err, l->errlen, "%s: bad experts: %s.expert_count %d, expert_used_count %d "
		    "(1 <= used <= count <= %d)", gguf_path(l->f), l->arch, hp->n_expert,
		    hp->n_expert_used, MAX_EXPERTS);
		return KVC_EFORMAT;
	}
	if ((rc = hp_int(l, "expert_feed_forward_length", hp->arch == KVC_ARCH_GPT_OSS ? -1 :
	    moe_arch ? hp->n_ff / hp->n_expert_used : hp->n_ff, &hp->n_ff_exp)))
		return rc;
	if (hp->arch == KVC_ARCH_QWEN2MOE &&
	    (rc = hp_int(l, "expert_shared_feed_forward_length", hp->n_ff, &hp->n_ff_shexp)))
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
 * gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE): a window of
 * attention.sliding_window positions in every other layer (the pattern's
 * default 2: even layers windowed), the windowed layers rotating with the
 * global RoPE (rope.freq_base_swa may set their base), the clamped SwiGLU
 * of alpha 1.702 and limit 7 (constants in llama.cpp's graph).
 */
static int
read_gpt_oss(struct loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	int rc;

	hp->gpt_oss = true;
	hp->swiglu_alpha = 1.702f;
	hp->swiglu_limit = 7.0f;
	hp->swa_period = 2;
	hp->rope_theta_swa = hp->rope_theta;
	hp->rope_freq_scale_swa = hp->rope_freq_scale;
	if ((rc = hp_int(l, "attention.sliding_window", -1, &hp->n_swa)) ||
	    (rc = hp_int(l, "attention.sliding_window_pattern", 2, &hp->swa_period)) ||
	    (rc = hp_float(l, "rope.freq_base_swa", hp->rope_theta, false, &hp->rope_theta_swa)))
		return rc;
	if (hp->n_swa <= 0 || hp->swa_period <= 0 || !(hp->rope_theta_swa > 1)) {
		kvc_err(l->err, l->errlen, "%s: bad sliding window %d (period %d, base %g)", gguf_path(l->f),
		    hp->n_swa, hp->swa_period, hp->rope_theta_swa);
		return KVC_EFORMAT;
	}
	return 0;
}

static int
read_hparams(struct loader *l)
{
	struct kvc_hparams *hp = &l->m->hp;
	const struct gguf_file *f = l->f;
	char key[128];
	const char *st;
	int rc, v_len = 0;
	float factor;

	if ((rc = hp_int(l, "context_length", 0, &hp->n_ctx_train)) ||
	    (rc = hp_int(l, "embedding_length", -1, &hp->n_embd)) ||
	    (rc = hp_int(l, "block_count", -1, &hp->n_layer)) ||
	    (rc = hp_int(l, "feed_forward_length", -1, &hp->n_ff)) ||
	    (rc = hp_int(l, "attention.head_count", -1, &hp->n_head)) ||
	    (rc = read_experts(l)))
		return rc;
	if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_layer > MAX_LAYERS ||
	    hp->n_ff <= 0 || hp->n_head <= 0) {
		kvc_err(l->err, l->errlen, "%s: bad dimensions (embedding %d, layers %d, ffn %d, heads %d)",
		    gguf_path(f), hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head);
		return KVC_EFORMAT;
	}
	if ((rc = hp_int(l, "attention.head_count_kv", hp->n_head, &hp->n_head_kv)))
		return rc;
	if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0) {
		kvc_err(l->err, l->errlen, "%s: %d heads cannot share %d key/value heads",
		    gguf_path(f), hp->n_head, hp->n_head_kv);
		return KVC_EFORMAT;
	}
	if ((rc = hp_int(l, "attention.key_length",
	    hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : -1, &hp->head_dim)) ||
	    (rc = hp_int(l, "attention.value_length", hp->head_dim, &v_len)))
		return rc;
	if (hp->head_dim <= 0 || hp->head_dim % 2 != 0 || v_len != hp->head_dim) {
		kvc_err(l->err, l->errlen, "%s: head size %d (value size %d) not supported: must be even and equal",
		    gguf_path(f), hp->head_dim, v_len);
		return KVC_EUNSUPPORTED;
	}
	if ((rc = hp_int(l, "rope.dimension_count", hp->arch == KVC_ARCH_GPT2 ? 0 : hp->head_dim,
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
	if ((rc = hp_float(l, hp->arch == KVC_ARCH_GPT2 ? "attention.layer_norm_epsilon" :
	    "attention.layer_norm_rms_epsilon", 0, true, &hp->rms_eps)) ||
	    (rc = hp_float(l, "rope.freq_base", 10000.0, false, &hp->rope_theta)))
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
		if ((rc = hp_float(l, st ? "rope.scaling.factor" : "rope.scale_linear", 1.0, false, &factor)))
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
	if (hp->arch == KVC_ARCH_GLM4) {
		/* multimodal RoPE sections and multi-token-prediction layers change the graph */
		static const char *const refused[] = { "rope.dimension_sections", "nextn_predict_layers" };
		size_t i;

		for (i = 0; i < 2; i++) {
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

/* Rows [r0, r0 + n) of matrix f as a matrix of its own (a vector: elements). */
static struct kvc_weight
view(const struct kvc_weight *f, int64_t r0, int64_t n)
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

/* Q, K, V (and their biases): separate tensors, or views of a fused attn_qkv. */
static int
load_qkv(struct loader *l, struct kvc_layer_weights *w, int il, int64_t qd, int64_t kvd)
{
	const struct kvc_hparams *hp = &l->m->hp;
	struct kvc_weight f, fb;
	char name[96];
	int rc;

	snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", il);
	if (gguf_find_tensor(l->f, name) == NULL)
		return (rc = layer_tensor(l, &w->wq, il, "attn_q.weight", hp->n_embd, qd, false)) ||
		    (rc = layer_tensor(l, &w->wk, il, "attn_k.weight", hp->n_embd, kvd, false)) ||
		    (rc = layer_tensor(l, &w->wv, il, "attn_v.weight", hp->n_embd, kvd, false)) ||
		    (rc = layer_tensor(l, &w->bq, il, "attn_q.bias", qd, 1, true)) ||
		    (rc = layer_tensor(l, &w->bk, il, "attn_k.bias", kvd, 1, true)) ||
		    (rc = layer_tensor(l, &w->bv, il, "attn_v.bias", kvd, 1, true)) ? rc : 0;
	if ((rc = layer_tensor(l, &f, il, "attn_qkv.weight", hp->n_embd, qd + 2 * kvd, false)) ||
	    (rc = layer_tensor(l, &fb, il, "attn_qkv.bias", qd + 2 * kvd, 1, true)))
		return rc;
	if (fb.data != NULL && gguf_dtype_block(fb.type) != 1) {
		kvc_err(l->err, l->errlen, "%s: blk.%d.attn_qkv.bias has block type %s (F32/F16/BF16 expected)",
		    gguf_path(l->f), il, gguf_dtype_name(fb.type));
		return KVC_EUNSUPPORTED;
	}
	w->wq = view(&f, 0, qd);
	w->wk = view(&f, qd, kvd);
	w->wv = view(&f, qd + kvd, kvd);
	if (fb.data != NULL) {
		w->bq = view(&fb, 0, qd);
		w->bk = view(&fb, qd, kvd);
		w->bv = view(&fb, qd + kvd, kvd);
	}
	return 0;
}

/* The FFN's gate and up: two tensors, or one ffn_up of 2 n_ff rows (gate first). */
static int
load_gate_up(struct loader *l, struct kvc_layer_weights *w, int il)
{
	const struct kvc_hparams *hp = &l->m->hp;
	struct kvc_weight f;
	char name[96];
	int rc;

	if (hp->ffn_plain)	/* gpt2: up, GELU, down; no gate */
		return layer_tensor(l, &w->w_up, il, "ffn_up.weight", hp->n_embd, hp->n_ff, false);
	snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", il);
	if (gguf_find_tensor(l->f, name) != NULL || !arch_fused(hp->arch))
		return (rc = layer_tensor(l, &w->w_gate, il, "ffn_gate.weight", hp->n_embd, hp->n_ff, false)) ||
		    (rc = layer_tensor(l, &w->w_up, il, "ffn_up.weight", hp->n_embd, hp->n_ff, false)) ? rc : 0;
	if ((rc = layer_tensor(l, &f, il, "ffn_up.weight", hp->n_embd, 2 * (int64_t)hp->n_ff, false)))
		return rc;
	w->w_gate = view(&f, 0, hp->n_ff);
	w->w_up = view(&f, hp->n_ff, hp->n_ff);
	return 0;
}

/*
 * A mixture-of-experts layer's router, experts and shared expert. Only
 * n_expert_used of the experts count as read per token (weight_bytes,
 * n_params_active): decode reads nothing of the others.
 */
static int
load_experts(struct loader *l, struct kvc_layer_weights *w, int il)
{
	struct kvc_model *m = l->m;
	const struct kvc_hparams *hp = &m->hp;
	int64_t E = hp->n_embd, F = hp->n_ff_exp, ne = hp->n_expert, unused = ne - hp->n_expert_used;
	bool sh = hp->n_ff_shexp > 0;
	struct kvc_weight *st[] = { &w->gate_exps, &w->up_exps, &w->down_exps };
	char name[96];
	int rc, i;

	if ((rc = layer_tensor(l, &w->gate_inp, il, "ffn_gate_inp.weight", E, ne, false)) ||
	    (rc = layer_tensor(l, &w->gate_inp_shexp, il, "ffn_gate_inp_shexp.weight", E, 1, !sh)) ||
	    (rc = layer_tensor(l, &w->gate_shexp, il, "ffn_gate_shexp.weight", E, hp->n_ff_shexp, !sh)) ||
	    (rc = layer_tensor(l, &w->up_shexp, il, "ffn_up_shexp.weight", E, hp->n_ff_shexp, !sh)) ||
	    (rc = layer_tensor(l, &w->down_shexp, il, "ffn_down_shexp.weight", hp->n_ff_shexp, E, !sh)))
		return rc;
	for (i = 0; i < 3; i++) {
		static const char *const sfx[] = { "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps" };

		snprintf(name, sizeof name, "blk.%d.%s.weight", il, sfx[i]);
		if ((rc = tensor3(l, st[i], name, i == 2 ? F : E, i == 2 ? E : F, ne)))
			return rc;
		m->n_params_active -= (uint64_t)(st[i]->n_in * st[i]->n_out / ne * unused);
		m->weight_bytes += st[i]->row_bytes * (size_t)(st[i]->n_out / ne * hp->n_expert_used);
	}
	if (hp->gpt_oss) {
		/* biases: read whole at init (cpu_moe.c), so counted in full */
		struct kvc_weight *b[] = { &w->gate_inp_b, &w->gate_exps_b, &w->up_exps_b, &w->down_exps_b };

		if ((rc = layer_tensor(l, b[0], il, "ffn_gate_inp.bias", ne, 1, false)) ||
		    (rc = layer_tensor(l, b[1], il, "ffn_gate_exps.bias", F, ne, false)) ||
		    (rc = layer_tensor(l, b[2], il, "ffn_up_exps.bias", F, ne, false)) ||
		    (rc = layer_tensor(l, b[3], il, "ffn_down_exps.bias", E, ne, false)) ||
		    (rc = layer_tensor(l, &w->attn_sinks, il, "attn_sinks.weight", hp->n_head, 1, false)))
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

	return view(stack, e * rows, rows);
}

/* Layer il's tensors: presence, shapes and types, and their bytes counted. */
static int
load_layer(struct loader *l, int il)
{
	struct kvc_model *m = l->m;
	const struct kvc_hparams *hp = &m->hp;
	struct kvc_layer_weights *w = &m->layers[il];
	int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
	bool qk_norm = arch_qk_norm(hp->arch);
	bool post = hp->post_norms, moe = hp->n_expert > 0;
	int rc;
	size_t j;

	if ((rc = layer_tensor(l, &w->attn_norm, il, "attn_norm.weight", hp->n_embd, 1, false)) ||
	    (rc = load_qkv(l, w, il, qd, kvd)) ||
	    (rc = layer_tensor(l, &w->q_norm, il, "attn_q_norm.weight", hp->head_dim, 1, !qk_norm)) ||
	    (rc = layer_tensor(l, &w->k_norm, il, "attn_k_norm.weight", hp->head_dim, 1, !qk_norm)) ||
	    (rc = layer_tensor(l, &w->wo, il, "attn_output.weight", qd, hp->n_embd, false)) ||
	    (rc = layer_tensor(l, &w->ffn_norm, il, hp->gpt_oss ? "post_attention_norm.weight" :
	    "ffn_norm.weight", hp->n_embd, 1, false)) ||
	    (rc = moe ? load_experts(l, w, il) : load_gate_up(l, w, il)) ||
	    (rc = layer_tensor(l, &w->w_down, il, "ffn_down.weight", hp->n_ff, hp->n_embd, moe)) ||
	    (rc = layer_tensor(l, &w->attn_norm_b, il, "attn_norm.bias", hp->n_embd, 1, !hp->layer_norm)) ||
	    (rc = layer_tensor(l, &w->ffn_norm_b, il, "ffn_norm.bias", hp->n_embd, 1, !hp->layer_norm)) ||
	    (rc = layer_tensor(l, &w->bo, il, "attn_output.bias", hp->n_embd, 1, !hp->ffn_plain)) ||
	    (rc = layer_tensor(l, &w->b_up, il, "ffn_up.bias", hp->n_ff, 1, !hp->ffn_plain)) ||
	    (rc = layer_tensor(l, &w->b_down, il, "ffn_down.bias", hp->n_embd, 1, !hp->ffn_plain)) ||
	    (!hp->gpt_oss &&	/* gpt-oss's post_attention_norm is its FFN input norm, above */
	    (rc = layer_tensor(l, &w->attn_post_norm, il, "post_attention_norm.weight", hp->n_embd, 1, !post))) ||
	    (rc = layer_tensor(l, &w->ffn_post_norm, il, "post_ffw_norm.weight", hp->n_embd, 1, !post)))
		return rc;
	/* qwen2 always has Q/K/V biases; a partial set is a broken file */
	if ((w->bq.data == NULL) != (w->bk.data == NULL) ||
	    (w->bq.data == NULL) != (w->bv.data == NULL)) {
		kvc_err(l->err, l->errlen, "%s: layer %d has only some of the Q/K/V biases",
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
		};

		for (j = 0; j < sizeof all / sizeof all[0]; j++)
			if (all[j]->data != NULL)
				m->weight_bytes += all[j]->row_bytes * (size_t)all[j]->n_out;
	}
	return 0;
}

int
model_load(struct kvc_model *m, const struct gguf_file *f, char *err, size_t errlen)
{
	struct loader l = { m, f, NULL, err, errlen };
	struct kvc_hparams *hp = &m->hp;
	const struct gguf_tensor *te;
	const char *arch;
	int64_t i;
	int rc, il;

	memset(m, 0, sizeof *m);
	m->file = f;
	arch = gguf_get_str(f, "general.architecture", NULL);
	if (arch == NULL) {
		kvc_err(err, errlen, "%s: no general.architecture", gguf_path(f));
		return KVC_EFORMAT;
	}
	if (strcmp(arch, "llama") == 0)
		hp->arch = KVC_ARCH_LLAMA;
	else if (strcmp(arch, "qwen2") == 0)
		hp->arch = KVC_ARCH_QWEN2;
	else if (strcmp(arch, "qwen3") == 0)
		hp->arch = KVC_ARCH_QWEN3;
	else if (strcmp(arch, "gemma2") == 0)
		hp->arch = KVC_ARCH_GEMMA2;
	else if (strcmp(arch, "gemma3") == 0)
		hp->arch = KVC_ARCH_GEMMA3;
	else if (strcmp(arch, "phi3") == 0)
		hp->arch = KVC_ARCH_PHI3;
	else if (strcmp(arch, "chatglm") == 0)
		hp->arch = KVC_ARCH_CHATGLM;
	else if (strcmp(arch, "glm4") == 0)
		hp->arch = KVC_ARCH_GLM4;
	else if (strcmp(arch, "gpt2") == 0)
		hp->arch = KVC_ARCH_GPT2;
	else if (strcmp(arch, "qwen3moe") == 0)
		hp->arch = KVC_ARCH_QWEN3MOE;
	else if (strcmp(arch, "qwen2moe") == 0)
		hp->arch = KVC_ARCH_QWEN2MOE;
	else if (strcmp(arch, "gpt-oss") == 0)
		hp->arch = KVC_ARCH_GPT_OSS;
	else {
		kvc_err(err, errlen, "%s: architecture '%s' is not supported "
		    "(llama, qwen2, qwen3, gemma2, gemma3, phi3, chatglm, glm4, gpt2, qwen2moe, qwen3moe, gpt-oss)",
		    gguf_path(f), arch);
		return KVC_EUNSUPPORTED;
	}
	l.arch = arch;
	if ((rc = read_hparams(&l)))
		goto fail;

	/* the vocabulary size is the embedding's row count */
	te = gguf_find_tensor(f, "token_embd.weight");
	if ((rc = tensor(&l, &m->tok_embd, "token_embd.weight", hp->n_embd, te ? te->ne[1] : 1, false)))
		goto fail;
	if (m->tok_embd.n_out < 1 || m->tok_embd.n_out > INT32_MAX / 2) {
		kvc_err(err, errlen, "%s: bad vocabulary size %lld", gguf_path(f),
		    (long long)m->tok_embd.n_out);
		rc = KVC_EFORMAT;
		goto fail;
	}
	hp->n_vocab = (int)m->tok_embd.n_out;
	if ((rc = tensor(&l, &m->output_norm, "output_norm.weight", hp->n_embd, 1, false)) ||
	    (rc = tensor(&l, &m->output, "output.weight", hp->n_embd, hp->n_vocab, true)) ||
	    (rc = tensor(&l, &m->rope_freqs, "rope_freqs.weight", hp->rope_dim / 2, 1, true)) ||
	    (rc = tensor(&l, &m->pos_embd, "position_embd.weight", hp->n_embd, hp->n_ctx_train,
	    hp->arch != KVC_ARCH_GPT2)) ||
	    (rc = tensor(&l, &m->output_norm_b, "output_norm.bias", hp->n_embd, 1, hp->arch != KVC_ARCH_GPT2)))
		goto fail;
	if (m->rope_freqs.data != NULL && hp->arch != KVC_ARCH_LLAMA) {
		kvc_err(err, errlen, "%s: rope_freqs.weight is not supported for %s", gguf_path(f), arch);
		rc = KVC_EUNSUPPORTED;
		goto fail;
	}
	if (m->output.data == NULL)
		m->output = m->tok_embd;	/* tied */
	/* the output matrix is read whole for every token, tied or not (a tied
	 * one is most of Gemma 3 270M's reads: 262,144 rows) */
	m->weight_bytes += m->output.row_bytes * (size_t)m->output.n_out;
	m->weight_bytes += m->output_norm.row_bytes;

	m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
	if (m->layers == NULL) {
		kvc_err(err, errlen, "out of memory for %d layers", hp->n_layer);
		rc = KVC_ENOMEM;
		goto fail;
	}
	for (il = 0; il < hp->n_layer; il++)
		if ((rc = load_layer(&l, il)))
			goto fail;
	for (i = 0; i < gguf_n_tensors(f); i++) {
		const char *name = gguf_tensor(f, i)->name;

		if (strncmp(name, "rope_factors_", 13) == 0) {
			kvc_err(err, errlen, "%s: LongRoPE (tensor %s) is not supported", gguf_path(f), name);
			rc = KVC_EUNSUPPORTED;
			goto fail;
		}
		if (!known_tensor(m, name)) {
			kvc_err(err, errlen, "%s: tensor %s is not implemented for %s",
			    gguf_path(f), name, arch);
			rc = KVC_EUNSUPPORTED;
			goto fail;
		}
	}
	return 0;
fail:
	model_free(m);
	return rc;
}

void
model_free(struct kvc_model *m)
{
	if (m == NULL)
		return;
	free(m->layers);
	m->layers = NULL;
}
