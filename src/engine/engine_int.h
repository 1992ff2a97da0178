/*
 * engine_int.h: what the engine's files share: the engine and sequence
 * structures, and the checks engine.c offers seq_kv.c (the snapshots) and
 * multi.c (several sequences in one pass). Internal to src/engine.
 */
#ifndef KVC_ENGINE_INT_H
#define KVC_ENGINE_INT_H

#include "engine.h"
#include "backend/backend.h"
#include "snapshot.h"

struct kvc_engine {
	struct gguf_file *gf;		/* owned */
	struct kvc_tokenizer *tok;	/* owned */
	struct kvc_model model;		/* weights point into gf's mapping */
	const struct kvc_backend_i *be;
	void *bctx;			/* backend context */
	int n_ctx;			/* positions per sequence */
	enum gguf_dtype kv_type;		/* F16, F32 or Q8_0 */
	int kv_dim;			/* n_head_kv * head_dim */
	size_t kv_row;			/* bytes of one K (or V) row of kv_dim elements */
	char fingerprint[17];		/* 64-bit hash, hex */
	char vocab_fp[17];		/* the vocabulary's alone (make_vocab_fingerprint) */
	int (*hook)(void *arg, int done, int total);	/* eng_set_prefill_hook */
	void *hook_arg;
	double slice_tps;		/* positions/s of the last slice run with the hook; 0: none yet */
	/* eng_seq_decode_multi's pass, kept for the next step: (multi_cap,
	 * n_vocab) logits and each sequence's cache and position */
	float *multi_logits;
	void **multi_kvs;
	int *multi_pos;
	int multi_cap;
	struct kvc_seq *dev_logits;	/* whose logits only the backend holds (forward_keep), or NULL */
};

struct kvc_seq {
	struct kvc_engine *e;
	struct kvc_tokens toks;		/* the sequence's tokens (all of them, even when evicted) */
	void *kv;			/* backend cache, NULL when evicted */
	int n_cached;			/* positions [0, n_cached) of kv hold toks' K/V; <= toks.n */
	float *logits;			/* (n_vocab) after toks[toks.n - 1] when have_logits */
	bool have_logits;
	bool logits_dev;		/* have_logits, but still in the backend (seq_sample.c) */
};

/* Make the cache exist again after an eviction (n_cached 0). */
int eng_ensure_resident(struct kvc_seq *s, char *err, size_t errlen);
/*
 * seq_sample.c: before any forward, the logits only the backend holds are
 * copied into their sequence (forward replaces them); after forward_keep,
 * s's logits are the ones the backend holds.
 */
void eng_logits_settle(struct kvc_engine *e);
void eng_logits_kept(struct kvc_seq *s);
/* KVC_EINVAL, with the message, when one of t[0..n) is outside the vocabulary. */
int eng_check_ids(const struct kvc_engine *e, const int32_t *t, int n, char *err, size_t errlen);

#endif
