/*
 * engine.h: a loaded model and the conversations ("sequences") running on it.
 *
 * A sequence owns a KV cache for its whole life and remembers the exact
 * tokens in it. Appending computes only new positions; syncing to a token
 * list keeps the longest common prefix and computes the rest; truncating
 * rewinds. Every call says how many positions were reused and computed.
 */
#ifndef KVC_ENGINE_H
#define KVC_ENGINE_H

#include <signal.h>

#include "core/kvc.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

struct kvc_engine_params {
	const char *device;	/* "auto", "cpu", "cuda" (default "auto") */
	int gpu;		/* CUDA device ordinal (default 0) */
	int n_threads;		/* 0 = number of cores */
	int n_ctx;		/* 0 = min(model's training context, 8192) */
	enum gguf_dtype kv_type;	/* GGML_TYPE_F16 (default), GGML_TYPE_F32 or GGML_TYPE_Q8_0 */
	const char *kernels;	/* CPU kernel table by name (kvc_backend_params; NULL: the best) */
	void (*progress)(void *arg, uint64_t done, uint64_t total);	/* load progress (optional) */
	void *progress_arg;
	/* The caller's interrupt flag (optional): set while the weights load, eng_open stops, KVC_EINTR. */
	volatile sig_atomic_t *interrupt;
	/*
	 * One line to show the user (optional): with device "auto", why the
	 * CUDA backend could not run this model and the CPU runs it instead.
	 */
	void (*notice)(void *arg, const char *msg);
	void *notice_arg;
	/* Pack a mixture of experts' experts ahead while idle (kvc_backend_params.pack_ahead): chat, serve. */
	bool pack_ahead;
	/* Pack them all at load instead (kvc_backend_params.pack_experts_now): bench. */
	bool pack_experts_now;
};
struct kvc_engine_params kvc_engine_default_params(void);

struct kvc_engine;
struct kvc_seq;

/* Timings and counts of one engine call (all times in seconds). */
struct eng_stats {
	int n_reused;		/* positions kept from the cache */
	int n_computed;		/* positions run through the model */
	double t_prefill;	/* wall time of the forward passes */
};

/* Open model_path (GGUF), load tokenizer and weights, start the backend. */
int eng_open(struct kvc_engine **out, const char *model_path,
    const struct kvc_engine_params *p, char *err, size_t errlen);
void eng_close(struct kvc_engine *e);

const struct kvc_tokenizer *eng_tokenizer(const struct kvc_engine *e);
const struct kvc_model *eng_model(const struct kvc_engine *e);
const struct gguf_file *eng_gguf(const struct kvc_engine *e);
const char *eng_backend_name(const struct kvc_engine *e);
int eng_n_ctx(const struct kvc_engine *e);
int eng_n_vocab(const struct kvc_engine *e);
enum gguf_dtype eng_kv_type(const struct kvc_engine *e);
/* The option spelling of a cache type: "f16", "f32", "q8_0" ("?" for another). */
const char *eng_kv_type_name(enum gguf_dtype t);
/* *t = the cache type spelled s (as --kv-type takes it); KVC_EINVAL if none. */
int eng_kv_type_parse(const char *s, enum gguf_dtype *t);
/*
 * Bytes of K+V per cached position (all layers) in the cache's type: the
 * memory a position takes and the rows it adds to a snapshot (Q8_0: 34
 * bytes per 32 elements, 53 % of F16).
 */
size_t eng_kv_bytes_per_pos(const struct kvc_engine *e);
/*
 * Memory of a cache when its windowed layers are bounded (gemma's sliding
 * window, backend.h kvc_kv_window_cap; else every layer grows with the
 * context): eng_kv_mem_bytes_per_pos per position for the layers that keep
 * every position, plus at most eng_kv_window_bytes for the windowed ones (0
 * when they are not bounded).
 */
size_t eng_kv_mem_bytes_per_pos(const struct kvc_engine *e);
size_t eng_kv_window_bytes(const struct kvc_engine *e);
/*
 * Memory a cache of n positions holds: every position of the layers that
 * keep them all, at most the window's of the bounded windowed ones (what
 * --kv-budget counts before a cache grows).
 */
size_t eng_kv_bytes_for(const struct kvc_engine *e, size_t n);
/*
 * Hex string identifying the weights and everything that changes the cache's
 * contents (architecture, shapes, types, sampled tensor-data hash). The
 * cache type is not in it: a snapshot records its own (the store keeps it
 * beside the fingerprint, and eng_seq_kv_load refuses another). Snapshots
 * are only restored into an engine with the same fingerprint and type.
 */
const char *eng_fingerprint(const struct kvc_engine *e);
/*
 * The vocabulary's own fingerprint (16 hex digits over every piece, its
 * type, the tokenizer's kind): equal for two models whose token ids mean
 * the same text, so a conversation's stored ids may be fed to either.
 */
const char *eng_vocab_fingerprint(const struct kvc_engine *e);
/* Backend memory report (weights, caches), for /show. */
void eng_describe(const struct kvc_engine *e, struct kvc_buf *out);

int eng_seq_new(struct kvc_engine *e, struct kvc_seq **out, char *err, size_t errlen);
void eng_seq_free(struct kvc_seq *s);

int eng_seq_n_pos(const struct kvc_seq *s);
struct kvc_engine *eng_seq_engine(const struct kvc_seq *s);
const int32_t *eng_seq_tokens(const struct kvc_seq *s);
size_t eng_seq_kv_bytes(const struct kvc_seq *s);	/* memory the cache holds now */

/*
 * Compute tokens[0..n) at the end of the sequence. KVC_ERANGE when the
 * context would overflow (nothing is changed then).
 */
int eng_seq_append(struct kvc_seq *s, const int32_t *tokens, int n,
    struct eng_stats *st, char *err, size_t errlen);
/*
 * Append tokens[0..n) (n <= 64) in one forward pass and receive the logits
 * after each of them: logits[i * n_vocab ..] follow tokens[i]. The last row
 * is also the sequence's logits at hand. Speculative decoding verifies its
 * proposals this way. KVC_ERANGE when the context would overflow.
 */
int eng_seq_append_all(struct kvc_seq *s, const int32_t *tokens, int n, float *logits,
    char *err, size_t errlen);
/*
 * multi.c: one decode step of n sequences of one engine (distinct, each
 * with room for one more position): tokens[i] is appended to seqs[i], as
 * eng_seq_append of that one token would, and the logits after it are at
 * hand (eng_seq_logits). With a backend that runs several sequences in one
 * pass (forward_multi: the CPU's, CUDA's) all n go through the model
 * together, each at its own position over its own cache, and each gets the
 * logits it would get alone (bit for bit on the CPU, to float rounding on
 * the GPU: backend.h); otherwise they run one after the other. Positions a
 * sequence has pending (evicted, rewound) are first computed by its own
 * prefill. KVC_ERANGE when a sequence's context is full, KVC_EINVAL for a
 * bad argument (nothing changes then). On a failed pass every sequence is
 * left as it was before the call, its logits no longer at hand.
 */
int eng_seq_decode_multi(struct kvc_seq *const *seqs, int n, const int32_t *tokens,
    char *err, size_t errlen);
/*
 * multi.c: eng_seq_append of toks[i][0..n_tok[i]) (n_tok[i] >= 1) to each
 * of n distinct sequences of one engine, all computed in one pass where
 * the backend can (the CPU's prefill_multi: each weight row read once for
 * every prompt), each sequence getting the bits its own append gives it;
 * otherwise, or while a prefill hook is set (its slices stop on Ctrl-C),
 * one after the other. st (NULL, or n entries): each sequence's figures,
 * t_prefill the shared pass's time. Positions a sequence has pending are
 * computed first by its own prefill. KVC_ERANGE when a sequence's tokens
 * do not fit its context, KVC_EINVAL for a bad argument (nothing changes
 * then); after a failure every sequence is as it was before the call.
 */
int eng_seq_append_multi(struct kvc_seq *const *seqs, int n, const int32_t *const *toks,
    const int *n_tok, struct eng_stats *st, char *err, size_t errlen);
/* Whether two engines share a vocabulary (same ids, same pieces): a draft model's test. */
bool eng_same_vocab(const struct kvc_engine *a, const struct kvc_engine *b);
/*
 * eng_seq_append that also hands back the logits of every appended
 * position: all_logits[i * n_vocab ..] follows tokens[i] (n x n_vocab
 * floats, the caller's). For scoring a given text (perplexity, teacher
 * forcing); callers bound n to bound the memory. The last row is also
 * what eng_seq_logits returns afterwards.
 */
int eng_seq_append_scored(struct kvc_seq *s, const int32_t *tokens, int n, float *all_logits,
    struct eng_stats *st, char *err, size_t errlen);
/*
 * Make the sequence hold exactly tokens[0..n): keep the longest common
 * prefix with what is cached, compute the rest. If nothing would be computed
 * but the logits of the last position are not at hand, the last position is
 * recomputed (n_computed = 1).
 */
int eng_seq_sync(struct kvc_seq *s, const int32_t *tokens, int n,
    struct eng_stats *st, char *err, size_t errlen);
/*
 * Long work made visible and interruptible: while fn is set, every prefill
 * (append, sync) runs in slices sized by the measured rate to about 0.2 s,
 * and fn is called before each slice with the positions done and the total
 * of that call (done = 0 first) and once more at the end (done = total).
 * A non-zero return stops the call with KVC_EINTR: eng_seq_append then
 * leaves the sequence as it was; eng_seq_sync leaves the positions
 * computed so far. fn NULL turns it off (512-token slices).
 */
void eng_set_prefill_hook(struct kvc_engine *e, int (*fn)(void *arg, int done, int total),
    void *arg);
/*
 * Whether the cache still holds what position n_pos (<= the cached ones)
 * attends to: false when the bounded windowed layers (eng_kv_window_bytes)
 * let those positions go, and then the next append after a rewind to
 * n_pos recomputes the sequence from position 0.
 */
bool eng_seq_keeps(const struct kvc_seq *s, int n_pos);
/* Drop positions >= n_pos (n_pos <= current length). */
int eng_seq_truncate(struct kvc_seq *s, int n_pos);
/*
 * Slide: drop positions [keep, keep + n_drop) from the sequence, its
 * tokens and its cache, moving the later ones down and re-rotating their
 * K in place (the backend's kv_shift) instead of recomputing them. The
 * logits at hand are forgotten (they were computed at the old positions).
 * KVC_EUNSUPPORTED when the backend cannot shift (nothing changes then);
 * on another failure the cache is evicted (the tokens are kept, the next
 * append recomputes them).
 */
int eng_seq_slide(struct kvc_seq *s, int keep, int n_drop, char *err, size_t errlen);
/* Whether the backend can slide a cache (eng_seq_slide). */
bool eng_can_slide(const struct kvc_engine *e);
/* Release the cache memory but keep the tokens (an evicted conversation). */
void eng_seq_evict(struct kvc_seq *s);
bool eng_seq_resident(const struct kvc_seq *s);

/*
 * Logits (n_vocab) after the last computed position, or NULL if not at
 * hand. With a backend that samples where it computes (CUDA), they are
 * copied out of it by this call, the first time it is made for them.
 */
const float *eng_seq_logits(const struct kvc_seq *s);

/* What eng_seq_sample needs of a sampler: src/sampler's parameters and its generator's state. */
struct eng_sample_req {
	float temp;
	int top_k;
	float top_p, min_p, repeat_penalty;
	int repeat_last_n;
	uint64_t rng;		/* smp_rng_state */
};
/*
 * seq_sample.c: the next token picked by the backend from the logits at
 * hand, where it computed them, as smp_sample would pick it from
 * eng_seq_logits with the sequence's tokens as history: *id, and in *rng
 * the generator's state after the draw (smp_set_rng_state). Nothing but
 * the id crosses from the device. KVC_EUNSUPPORTED when the backend does
 * not sample (the CPU's), the logits are not held there, or it does not
 * take the request (top-k off or above 1024 on CUDA): the caller then
 * samples from eng_seq_logits.
 */
int eng_seq_sample(struct kvc_seq *s, const struct eng_sample_req *r, int32_t *id, uint64_t *rng,
    char *err, size_t errlen);

/*
 * Snapshots. Stable, versioned byte layout, independent of the in-memory one
 * (see docs/ARCHITECTURE.md, "KV snapshot layout"):
 *   header (40 bytes, little-endian): "KVC1", u32 version (2, or 3 when
 *   windowed layers' rows of positions [pos0, win_from) were no longer held
 *   and are zeros), u32 kv_type (ggml type), u32 n_layer, u32 kv_dim,
 *   u32 pos0, u32 n, u32 win_from (version 2: reserved = 0),
 *   u64 bind (a hash of this engine's fingerprint and the token ids of
 *   positions [0, pos1)); then for each layer: K rows [n][kv_dim], then V
 *   rows [n][kv_dim].
 * eng_seq_kv_save appends positions [pos0, pos1) to out.
 * eng_seq_kv_load restores one such blob: its pos0 must equal the number of
 * positions already restored, tokens[0..pos1) are the tokens they belong to.
 * A blob that does not match this engine's shape is KVC_ECORRUPT; one of
 * another cache type (F32, F16, Q8_0) is converted into this cache's type.
 * One made from other tokens or by another model (its bind word differs),
 * or a version 1 blob (no bind word), is KVC_ENOTFOUND: nothing is restored.
 * Restoring a version 3 chunk tells the backend which rows it does not hold
 * (a later rewind past them recomputes); a backend whose layers all keep
 * every position refuses it with KVC_ENOTFOUND.
 */
int eng_seq_kv_save(struct kvc_seq *s, int pos0, int pos1, struct kvc_buf *out,
    char *err, size_t errlen);
int eng_seq_kv_load(struct kvc_seq *s, const int32_t *tokens, const void *blob,
    size_t len, char *err, size_t errlen);

#endif
