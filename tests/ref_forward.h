/*
 * ref_forward.h: a deliberately plain float64 transformer forward, the
 * reference the CPU (and CUDA) backends are checked against. It shares no
 * code with them: it finds tensors by name in the GGUF, dequantises them
 * whole with q_dequant_row, and does everything else in double precision
 * with naive loops, recomputing full causal attention for every position.
 */
#ifndef KVC_REF_FORWARD_H
#define KVC_REF_FORWARD_H

#include "gguf.h"

/* What the caller knows about the model (a test knows what it generated). */
struct ref_config {
	const char *arch;	/* "llama" (adjacent-pair RoPE), "qwen2", "qwen3" (NeoX RoPE) */
	int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, rope_dim;
	double rms_eps, rope_theta;
	double rope_freq_scale;	/* 1 = no linear scaling */
};

/*
 * logits[t * n_vocab + i] for every position t of tokens[0..n), as if the
 * tokens sat at positions 0..n-1. Optional tensors (output.weight, Q/K/V
 * biases, attn_q_norm/attn_k_norm, rope_freqs.weight) are used when the
 * file has them. Returns 0, or -1 with a message on stderr.
 */
int ref_forward(const struct gguf_file *f, const struct ref_config *cfg,
    const int32_t *tokens, int n, double *logits);

#endif
