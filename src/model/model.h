/*
 * model.h: a transformer's hyper-parameters and weight tensors, read from a
 * GGUF (architectures llama, qwen2, qwen3, gemma2, gemma3, phi3, chatglm,
 * glm4, gpt2, and the mixture-of-experts qwen3moe, qwen2moe, llama with
 * experts, gpt-oss and glm4moe). Fused tensors (attn_qkv, a gate+up ffn_up) are presented as their
 * parts: views of the fused rows, so backends see one layout. The weights stay in the file's
 * mapping in their stored types; backends compute from (or upload) them.
 *
 * GGUF tensor shapes are ne[0] = columns (input dim), ne[1] = rows (output
 * dim): a matrix W "(n_out, n_in)" has ne = {n_in, n_out} and row r is
 * gguf_dtype_row_size(type, n_in) bytes long.
 */
#ifndef KVC_MODEL_H
#define KVC_MODEL_H

#include "core/kvc.h"
#include "gguf/gguf.h"

enum kvc_arch {
	KVC_ARCH_LLAMA, KVC_ARCH_QWEN2, KVC_ARCH_QWEN3, KVC_ARCH_GEMMA2, KVC_ARCH_GEMMA3,
	KVC_ARCH_PHI3, KVC_ARCH_CHATGLM, KVC_ARCH_GLM4, KVC_ARCH_GPT2,
	KVC_ARCH_QWEN3MOE, KVC_ARCH_QWEN2MOE, KVC_ARCH_GPT_OSS, KVC_ARCH_GLM4MOE,
};

struct kvc_hparams {
	enum kvc_arch arch;
	int n_vocab;
	int n_ctx_train;	/* <arch>.context_length */
	int n_embd;		/* model width */
	int n_layer;		/* layers run (glm4moe: block_count less its n_layer_nextn) */
	int n_head;
	int n_head_kv;		/* grouped-query: n_head % n_head_kv == 0 */
	int head_dim;		/* qwen3: <arch>.attention.key_length; else n_embd / n_head */
	int n_ff;		/* FFN hidden width */
	float rms_eps;
	float rope_theta;	/* <arch>.rope.freq_base */
	int rope_dim;		/* dimensions rotated per head (rope.dimension_count; default head_dim) */
	bool rope_neox;		/* qwen2/qwen3/gemma/phi3: rotate (i, i + d/2); llama/chatglm/glm4: adjacent pairs (2i, 2i+1) */
	float rope_freq_scale;	/* linear rope scaling: angle = pos * freq_scale * theta^(-2i/d) / freq_factor[i] (1 = none) */
	/*
	 * YaRN (rope.scaling.type yarn; llama.cpp's rope_yarn): pair i's
	 * frequency blends the scaled one (freq_scale * f_i) and the unscaled f_i
	 * with weight ramp_i = 1 - clamp((i - yarn_low) / max(0.001, yarn_high -
	 * yarn_low), 0, 1) on the unscaled; cos and sin are multiplied by
	 * rope_mscale. yarn_low/high are llama.cpp's correction dims (from the
	 * original context, the base and beta fast 32 / slow 1).
	 */
	bool rope_yarn;
	float yarn_low, yarn_high;
	float rope_mscale;	/* 1 without YaRN */

	/* Gemma's additions (neutral values for the other architectures) */
	float embd_scale;	/* token embeddings are multiplied by this: gemma sqrt(n_embd), else 1 */
	float attn_scale;	/* scores = q.k * attn_scale: 1/sqrt(head_dim), gemma 27B 1/sqrt(n_embd/n_head) */
	float attn_softcap;	/* gemma2: scores = c * tanh(scores / c); 0 = none */
	float final_softcap;	/* gemma2: logits = c * tanh(logits / c); 0 = none */
	bool ffn_gelu;		/* gate activation GELU (tanh form) instead of SiLU */
	bool post_norms;	/* RMSNorm of the attention and FFN outputs before each residual add */
	int n_swa;		/* sliding window: a windowed layer attends to the last n_swa positions (0 = none) */
	int swa_period;		/* layer il is windowed when il % swa_period < swa_period - 1 */
	float rope_theta_swa;	/* windowed layers' RoPE base (gemma3 default 10000) */
	float rope_freq_scale_swa;	/* and linear scale (gemma3: 1; gemma2: the global one) */

	/* gpt2: LayerNorm with bias (eps in rms_eps), learned positions (rope_dim 0: no RoPE),
	 * an ungated GELU MLP; biases on every product */
	bool layer_norm;
	bool ffn_plain;

	/*
	 * Mixture of experts (n_expert 0: a dense FFN). A router picks, per
	 * token, the n_expert_used experts with the largest softmax
	 * probabilities; their outputs are summed weighted by those
	 * probabilities, renormalised to sum 1 when expert_norm (llama.cpp's
	 * norm_w: llama and qwen3moe yes, qwen2moe no). n_ff_shexp > 0: a shared
	 * expert every token runs too, scaled by a sigmoid gate (qwen2moe).
	 */
	int n_expert;
	int n_expert_used;
	int n_ff_exp;		/* one expert's FFN width */
	int n_ff_shexp;		/* the shared expert's, or 0 */
	bool expert_norm;
	/*
	 * gpt-oss (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE, gating SOFTMAX_WEIGHT):
	 * the router has a bias, the n_expert_used largest logits are chosen and
	 * their weights are the softmax over those logits only; every expert
	 * product has a bias; the activation is (u + 1) * g' * sigmoid(alpha
	 * g'), g' = min(g, limit), u clamped to [-limit, limit]. Attention
	 * adds one learned logit per head (attn_sinks) to each softmax's
	 * denominator.
	 */
	bool gpt_oss;
	float swiglu_alpha, swiglu_limit;	/* 1.702, 7 */
	/*
	 * glm4moe (llama.cpp's LLM_ARCH_GLM4_MOE): the router's probabilities
	 * are sigmoid(logit) (expert_sigmoid); the experts are chosen by
	 * probability + exp_probs_b (a correction bias that only steers the
	 * choice); their weights are the unbiased probabilities, renormalised
	 * when expert_norm, then times expert_scale. The first n_layer_dense
	 * layers have a dense FFN instead (their gate_inp is absent); the shared
	 * expert (expert_shared_count x expert width) has no gate. The file's
	 * last n_layer_nextn blocks (multi-token prediction) are never run.
	 */
	bool expert_sigmoid;
	float expert_scale;	/* 1: none */
	int n_layer_dense;
	int n_layer_nextn;
};

/*
 * True when layer il attends only to the last hp->n_swa positions
 * (llama.cpp's set_swa_pattern: in each period of layers the last is global).
 */
static inline bool
model_layer_swa(const struct kvc_hparams *hp, int il)
{
	return hp->n_swa > 0 && (hp->swa_period <= 0 || il % hp->swa_period < hp->swa_period - 1);
}

/* One weight matrix or vector, pointing into the GGUF mapping. */
struct kvc_weight {
	const void *data;	/* NULL if absent */
	enum gguf_dtype type;
	int64_t n_in;		/* ne[0] */
	int64_t n_out;		/* ne[1] (1 for vectors) */
	size_t row_bytes;	/* gguf_dtype_row_size(type, n_in) */
};

struct kvc_layer_weights {
	struct kvc_weight attn_norm;	/* (n_embd) */
	struct kvc_weight wq, wk, wv;	/* (n_head*head_dim, n_embd), (n_head_kv*head_dim, n_embd) x2 */
	struct kvc_weight bq, bk, bv;	/* qwen2 biases, else absent */
	struct kvc_weight q_norm, k_norm;	/* qwen3 per-head RMSNorm (head_dim), else absent */
	struct kvc_weight wo;		/* (n_embd, n_head*head_dim) */
	struct kvc_weight attn_norm_b, ffn_norm_b;	/* gpt2 LayerNorm biases (n_embd), else absent */
	struct kvc_weight bo, b_up, b_down;	/* gpt2 product biases (n_embd), (n_ff), (n_embd), else absent */
	struct kvc_weight attn_post_norm;	/* gemma: (n_embd), else absent */
	struct kvc_weight ffn_norm;	/* (n_embd); gpt-oss, glm4moe: the file's post_attention_norm */
	struct kvc_weight w_gate, w_up;	/* (n_ff, n_embd) */
	struct kvc_weight w_down;	/* (n_embd, n_ff) */
	struct kvc_weight ffn_post_norm;	/* gemma: (n_embd), else absent */

	/*
	 * Mixture-of-experts layers (gate_inp.data != NULL: hp.n_expert > 0,
	 * past glm4moe's leading dense layers) have these instead of
	 * w_gate/w_up/w_down. A GGUF stacks the experts in one 3-D tensor
	 * (ne = {n_in, n_out, n_expert}), which is a matrix of n_expert * n_out
	 * rows: expert e is rows [e * n_out, (e + 1) * n_out) (model_expert).
	 * They stay in the file's mapping in the type the file has.
	 */
	struct kvc_weight gate_inp;	/* router (n_expert, n_embd) */
	struct kvc_weight gate_exps, up_exps;	/* (n_expert * n_ff_exp, n_embd) */
	struct kvc_weight down_exps;	/* (n_expert * n_embd, n_ff_exp) */
	struct kvc_weight gate_inp_shexp;	/* qwen2moe: shared expert's gate (n_embd), else absent */
	struct kvc_weight gate_shexp, up_shexp;	/* (n_ff_shexp, n_embd) or absent */
	struct kvc_weight down_shexp;	/* (n_embd, n_ff_shexp) or absent */
	/* gpt-oss: router bias (n_expert), the experts' biases as n_expert rows of
	 * (n_ff_exp) (gate, up) and (n_embd) (down), attention sinks (n_head) */
	struct kvc_weight gate_inp_b, gate_exps_b, up_exps_b, down_exps_b;
	struct kvc_weight attn_sinks;
	struct kvc_weight exp_probs_b;	/* glm4moe: the choice's correction bias (n_expert), else absent */
};

struct kvc_model {
	struct kvc_hparams hp;
	struct kvc_weight tok_embd;	/* (n_vocab, n_embd): row t = embedding of token t */
	struct kvc_weight output_norm;	/* (n_embd) */
	struct kvc_weight output;	/* (n_vocab, n_embd); == tok_embd when tied */
	struct kvc_weight rope_freqs;	/* llama 3.1 frequency factors (rope_dim/2), or absent */
	struct kvc_weight pos_embd;	/* gpt2: (n_ctx_train, n_embd) learned positions, or absent */
	struct kvc_weight output_norm_b;	/* gpt2: (n_embd), or absent */
	struct kvc_layer_weights *layers;	/* [n_layer] */
	uint64_t n_params;
	uint64_t n_params_active;	/* used per token: only n_expert_used of each layer's experts */
	uint64_t weight_bytes;		/* bytes of the tensors read per token (active experts only) */
	const struct gguf_file *file;	/* not owned */
};

/*
 * Fill m from f: checks architecture, hyper-parameters, every tensor's
 * presence, shape and type. Anything unimplemented is refused with a message
 * naming it (KVC_EUNSUPPORTED); inconsistent files give KVC_EFORMAT.
 */
int model_load(struct kvc_model *m, const struct gguf_file *f, char *err, size_t errlen);
void model_free(struct kvc_model *m);
/* Expert e (< hp.n_expert) of a stacked expert tensor, as a matrix of its own (a view). */
struct kvc_weight model_expert(const struct kvc_model *m, const struct kvc_weight *stack, int e);
const char *model_arch_name(enum kvc_arch a);
/*
 * The feed-forward part of the one-line description ("ffn 4864"; with
 * experts "ffn 768 x 128 experts, 8 per token" and any shared expert and
 * leading dense layers): a mixture's feed_forward_length is the dense
 * layers' width, not what most of its layers run.
 */
void model_ffn_desc(const struct kvc_hparams *hp, char *buf, size_t n);

#endif
