/*
 * llama2c.h: convert a llama2.c legacy checkpoint and its tokenizer.bin into
 * a GGUF (architecture "llama", F32 tensors, SentencePiece-style vocab).
 *
 * Checkpoint: 7 x int32 LE header (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size, seq_len; vocab_size < 0 means a separate
 * classifier follows), then float32 arrays token_embedding[V][dim],
 * rms_att[L][dim], wq[L][dim][dim], wk[L][kv_dim][dim], wv[L][kv_dim][dim],
 * wo[L][dim][dim], rms_ffn[L][dim], w1[L][hidden][dim], w2[L][dim][hidden],
 * w3[L][hidden][dim], rms_final[dim], freq_cis[seq_len][head_size] (unused),
 * [wcls[V][dim]].
 * Tokenizer: int32 max_token_length, then per token float32 score, int32
 * len, len bytes.
 */
#ifndef KVC_LLAMA2C_H
#define KVC_LLAMA2C_H

#include "core/kvc.h"

/* The checkpoint's header, as read. */
struct l2c_config {
	int dim;		/* model width */
	int hidden_dim;		/* FFN hidden width */
	int n_layers;
	int n_heads;
	int n_kv_heads;
	int vocab_size;		/* absolute value; shared_cls tells the sign */
	int seq_len;		/* training context */
	bool shared_cls;	/* classifier == token embedding */
};

/*
 * Convert ckpt_path + tok_path into out_path. Returns 0, KVC_EIO (cannot
 * read/write), KVC_EFORMAT (bad header, truncated or oversized file, bad
 * tokenizer) or KVC_ENOMEM. cfg (optional) receives the header.
 */
int l2c_convert(const char *ckpt_path, const char *tok_path, const char *out_path,
    struct l2c_config *cfg, char *err, size_t errlen);

#endif
