/*
 * tok_internal.h: what the tokenizer's files share: the vocabulary's
 * layout (tokenizer.c loads it), its hash maps (tok_maps.c), the merge
 * heap (tok_heap.c), the rank buckets of long BPE words (tok_ranks.c), the GPT-2 byte map (tok_bytes.c) and the two merge
 * loops (tok_bpe.c, tok_spm.c). Not part of the module's contract: use
 * tokenizer.h.
 */
#ifndef KVC_TOK_INTERNAL_H
#define KVC_TOK_INTERNAL_H

#include "tokenizer.h"
#include "pretok.h"

/* Open-addressing hash from a byte string to a token id. */
struct tok_strmap {
	int32_t *slot;		/* (mask + 1) token ids, -1 = empty */
	uint32_t *hash;		/* (mask + 1) full hashes of the slots */
	uint32_t mask;
};

/* Open-addressing hash from a pair of token ids to a BPE merge. */
struct tok_pairmap {
	uint64_t *key;		/* (mask + 1) (left << 32 | right), UINT64_MAX = empty */
	int32_t *rank;		/* (mask + 1) merge rank: lower merges first */
	int32_t *result;	/* (mask + 1) id of the merged token */
	uint32_t mask;
};

/*
 * A merge candidate of the BPE and SPM loops, kept in a binary heap: the
 * lowest key merges first, ties going to the leftmost pair.
 */
struct tok_cand {
	float key;		/* BPE: merge rank (exact below 2^24); SPM: -score */
	int32_t left, right;	/* symbol indices */
	int32_t lid, rid;	/* BPE: the symbols' ids when the candidate was made */
	int32_t result;		/* BPE: id of the merged token */
	uint32_t size;		/* SPM: bytes of the merged text */
};
struct tok_heap {
	struct tok_cand *v;
	size_t n, cap;
	size_t steps;		/* work: one a pair tried, one a push or pop and a level it moved */
};
/* tok_heap.c. 0 or KVC_ENOMEM. */
int tok_heap_push(struct tok_heap *h, const struct tok_cand *c);
/* Remove the best candidate into *top; h->n must be > 0. */
void tok_heap_pop(struct tok_heap *h, struct tok_cand *top);

struct kvc_tokenizer {
	enum tok_kind kind;
	char model[16];		/* tokenizer.ggml.model */
	char pre[48];		/* tokenizer.ggml.pre ("" for SPM) */
	int32_t n_vocab;

	char *text;		/* all token strings, as stored, each NUL-terminated */
	uint32_t *text_off;	/* (n_vocab + 1) byte offsets into text */
	uint8_t *type;		/* (n_vocab) enum tok_attr */
	float *score;		/* (n_vocab) SPM scores (0 when absent) */
	char *dec;		/* decoded bytes of every token (what detok writes) */
	uint32_t *dec_off;	/* (n_vocab + 1) byte offsets into dec */
	uint8_t *eog;		/* (n_vocab) 1 = ends a turn */
	size_t max_token_bytes;	/* longest stored string (tok_max_token_bytes) */

	struct tok_strmap map;	/* every token string -> id (a later duplicate wins, as llama.cpp) */
	struct tok_strmap smap;	/* control/user-defined/unknown strings -> id */
	uint32_t *slen;		/* (n_slen) distinct lengths of smap's strings, longest first */
	size_t n_slen;
	uint8_t sfirst[256];	/* 1 = some special string starts with this byte */
	bool has_user_defined;	/* smap holds user-defined tokens (split out always) */

	/* BPE */
	struct tok_pairmap merges;
	enum pretok_kind pre_kind;
	bool ignore_merges;	/* Llama 3: a pre-token already in the vocab is emitted whole */
	size_t long_word;	/* words of this many bytes or more merge by rank buckets
				 * (TOK_LONG_WORD; the tests set it to take either path) */
	int32_t byte_tok[256];	/* BPE: id of the byte's GPT-2 unicode char; SPM: <0xXX>; -1 none */

	/* SPM */
	bool add_space_prefix;	/* tokenizer.ggml.add_space_prefix (default true) */
	uint8_t barrier[128];	/* 1 = no mergeable token of 2+ bytes holds this ASCII byte:
				 * it never merges, so the text can be cut around it */

	int32_t bos, eos, eot, eom, unk, pad;	/* -1 when absent */
	bool add_bos;
};

/* Length and pointer of token id's stored string. */
static inline const char *
tok_text(const struct kvc_tokenizer *t, int32_t id, size_t *len)
{
	*len = t->text_off[id + 1] - t->text_off[id] - 1;
	return t->text + t->text_off[id];
}

/* tok_maps.c: FNV-1a of s[0..n). */
uint32_t tok_hash_bytes(const char *s, size_t n);
/* Room for n strings: 0 or KVC_ENOMEM (then tok_strmap_free what was allocated). */
int tok_strmap_init(struct tok_strmap *m, size_t n);
void tok_strmap_free(struct tok_strmap *m);
/* Insert id under its own string; an earlier id with the same string is replaced. */
void tok_strmap_put(const struct kvc_tokenizer *t, struct tok_strmap *m, int32_t id);
/* Id whose string is s[0..n) in m, or -1. */
int32_t tok_strmap_find(const struct kvc_tokenizer *t, const struct tok_strmap *m, const char *s, size_t n);
/* Room for n merges: 0 or KVC_ENOMEM (then tok_pairmap_free what was allocated). */
int tok_pairmap_init(struct tok_pairmap *m, size_t n);
void tok_pairmap_free(struct tok_pairmap *m);
/* Add the merge (a, b) -> result of this rank; the first merge of a pair wins. */
void tok_pairmap_put(struct tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t result);
/* Merge of (a, b): its rank and result, or false. */
bool tok_pairmap_find(const struct tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *result);

/* tok_bytes.c: GPT-2's byte <-> unicode table. */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);	/* -1 if cp is not one of the 256 */
/* Writes cp (< 0x110000) as UTF-8 to o, which has room for 4; returns the byte count. */
size_t tok_put_utf8(char *o, uint32_t cp);

/*
 * Scratch buffers reused across the words of one tok_encode call (no
 * global state: each call owns its own).
 */
/*
 * tok_ranks.c: the merge candidates of a long BPE word by rank, for a
 * merge loop linear in the word: one bucket of left positions per rank
 * present (any order), the buckets taken lowest rank first. A rank maps to
 * its bucket through a small open-addressing hash; the ranks present sit
 * in a heap of their own, which holds as many ranks as the word has
 * distinct pairs, not one entry per pair.
 */
struct tok_bucket {
	int32_t rank;
	int32_t *left;		/* (n) left symbols of the candidate pairs */
	size_t n, cap;
};
struct tok_rankq {
	struct tok_bucket *b;	/* (nb) buckets; kept with their arrays for reuse */
	size_t nb, b_cap;
	int32_t *slot;		/* (mask + 1) bucket index of a rank, -1 = empty */
	uint32_t mask;
	int32_t *heap;		/* (nheap) bucket indices, lowest rank on top */
	size_t nheap, heap_cap;
	size_t steps;		/* work: one a push or pop and a level it moved, one a
				 * candidate visited by the merge loop (tok_bpe.c) */
};
/* Empty the queue (its memory is kept). */
void tok_rankq_reset(struct tok_rankq *q);
/* Add the candidate whose left symbol is left to rank's bucket: 0 or KVC_ENOMEM. */
int tok_rankq_push(struct tok_rankq *q, int32_t rank, int32_t left);
/*
 * The lowest rank's bucket taken off the queue: its rank and candidates
 * (left[0..n), valid while no candidate of this rank is pushed: the caller
 * pushes only higher ranks from then on); false when empty.
 */
bool tok_rankq_pop(struct tok_rankq *q, int32_t *rank, const int32_t **left, size_t *n);
void tok_rankq_free(struct tok_rankq *q);

/* Words this long (bytes) merge by rank buckets; shorter ones with the heap, faster there. */
#define TOK_LONG_WORD 256

struct tok_scratch {
	size_t work;		/* units of work of this call: symbols made, special-token
				 * scan and escaping bytes, the heaps' and rank queue's
				 * steps; with pieces.work, what test_tok_linear bounds */
	void *sym;		/* symbols of the current word */
	size_t sym_cap;
	struct tok_cand *heap;	/* candidate merges */
	size_t heap_cap;
	struct tok_rankq ranks;	/* candidate merges of a long BPE word, by rank */
	char *buf;		/* mapped text of the current word */
	size_t buf_cap;
	struct pretok_out pieces;
};
void tok_scratch_free(struct tok_scratch *s);

/*
 * tok_encode that also adds its units of work (tok_scratch.work and the
 * pre-tokenizer's) to *work: test_tok_linear holds their growth with the
 * text to linear, a count that does not depend on the machine's load.
 */
int tok_encode_work(const struct kvc_tokenizer *t, const char *text, size_t len,
    unsigned flags, struct kvc_tokens *out, size_t *work, char *err, size_t errlen);

/* BPE: tokenize text[0..len) (no special tokens inside). */
int tok_bpe_encode(const struct kvc_tokenizer *t, const char *text, size_t len,
    struct tok_scratch *s, struct kvc_tokens *out);
/* SPM: tokenize text[0..len) after the space escaping (already applied). */
int tok_spm_encode(const struct kvc_tokenizer *t, const char *text, size_t len,
    struct tok_scratch *s, struct kvc_tokens *out);

#endif
