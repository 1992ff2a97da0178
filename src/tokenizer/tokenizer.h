/*
 * tokenizer.h: text <-> token ids for the vocabularies GGUF files carry.
 *
 *   tokenizer.ggml.model = "gpt2"  byte-level BPE (merges), pre-tokenizer
 *                                  chosen by tokenizer.ggml.pre
 *   tokenizer.ggml.model = "llama" SentencePiece-style (scores, U+2581 as
 *                                  space, <0xXX> byte fallback)
 *
 * Special (control) tokens are recognised in text only when the caller asks
 * (TOK_PARSE_SPECIAL): the chat templates do, text a user typed never is.
 */
#ifndef KVC_TOKENIZER_H
#define KVC_TOKENIZER_H

#include "core/kvc.h"
#include "gguf/gguf.h"

struct kvc_tokenizer;

enum tok_kind { TOK_KIND_BPE, TOK_KIND_SPM };

/* tokenizer.ggml.token_type values (llama.cpp's numbering, part of the format) */
enum tok_attr {
	TOK_TYPE_UNDEFINED = 0,
	TOK_TYPE_NORMAL = 1,
	TOK_TYPE_UNKNOWN = 2,
	TOK_TYPE_CONTROL = 3,
	TOK_TYPE_USER_DEFINED = 4,
	TOK_TYPE_UNUSED = 5,
	TOK_TYPE_BYTE = 6,
};

/* Flags for tok_encode. */
enum {
	/* match control/unknown token texts in the input; user-defined tokens
	 * (type 4, e.g. <tool_call>) are split out always, as llama.cpp and HF
	 * added tokens do, so typed text never becomes a control token */
	TOK_PARSE_SPECIAL = 1 << 0,
	TOK_ADD_BOS = 1 << 1,		/* prepend BOS (if the vocabulary has one) */
	TOK_NO_SPACE_PREFIX = 1 << 2,	/* SPM: do not add the leading U+2581 even if the vocab asks */
};

/*
 * Build a tokenizer from a GGUF's tokenizer.ggml.* keys (the file may be
 * closed afterwards: everything needed is copied). Unknown model or pre
 * values are refused with a message naming them (KVC_EUNSUPPORTED).
 */
int tok_load(struct kvc_tokenizer **out, const struct gguf_file *f, char *err, size_t errlen);
void tok_free(struct kvc_tokenizer *t);

enum tok_kind tok_kind(const struct kvc_tokenizer *t);
const char *tok_model_name(const struct kvc_tokenizer *t);	/* "gpt2" / "llama" */
const char *tok_pre_name(const struct kvc_tokenizer *t);	/* "qwen2", ...; "" for SPM */
int32_t tok_n_vocab(const struct kvc_tokenizer *t);
int32_t tok_bos(const struct kvc_tokenizer *t);	/* -1 if none */
int32_t tok_eos(const struct kvc_tokenizer *t);	/* -1 if none */
bool tok_add_bos_default(const struct kvc_tokenizer *t);	/* tokenizer.ggml.add_bos_token */
/* True for ids that end a turn or the text (eos, eot, <|im_end|>, <|eot_id|>, <|end|>, ...). */
bool tok_is_eog(const struct kvc_tokenizer *t, int32_t id);
enum tok_attr tok_type(const struct kvc_tokenizer *t, int32_t id);
/*
 * Bytes of the longest token string (at least 1). No token stands for more
 * bytes of input text, so text of n bytes tokenizes to at least
 * n / tok_max_token_bytes() ids: a caller can refuse text that cannot fit
 * a context by its length alone, before paying for tokenizing it.
 */
size_t tok_max_token_bytes(const struct kvc_tokenizer *t);
/* The vocabulary string of id (raw form as stored; NULL if out of range). */
const char *tok_piece(const struct kvc_tokenizer *t, int32_t id, size_t *len);
/* Id whose vocabulary string is exactly text (e.g. "<|im_start|>"), or -1. */
int32_t tok_lookup(const struct kvc_tokenizer *t, const char *text);

/*
 * Tokenize text[0..len) and append the ids to out. The text must be valid
 * UTF-8: otherwise KVC_EFORMAT with the byte offset in err. Returns 0 or
 * KVC_E*.
 */
int tok_encode(const struct kvc_tokenizer *t, const char *text, size_t len,
    unsigned flags, struct kvc_tokens *out, char *err, size_t errlen);

/*
 * Streaming detokenizer. Bytes of an incomplete UTF-8 sequence are held back
 * until a later token completes them; a sequence that can never complete is
 * written as U+FFFD, so the output is always valid UTF-8.
 */
struct tok_detok {
	uint8_t pending[4];	/* bytes of an incomplete UTF-8 sequence */
	int n_pending;
	int n_emitted;		/* tokens seen (SPM drops the space of the first piece) */
	unsigned flags;		/* TOK_DETOK_* */
};
enum {
	TOK_DETOK_SPECIAL = 1 << 0,	/* write control tokens' text (otherwise they write nothing) */
	TOK_DETOK_KEEP_LEADING_SPACE = 1 << 1,	/* SPM: keep the first piece's leading space */
};
void tok_detok_init(struct tok_detok *d, unsigned flags);
/* Append the text of id to out. 0 or KVC_ENOMEM / KVC_EINVAL (id out of range). */
int tok_detok_push(const struct kvc_tokenizer *t, struct tok_detok *d, int32_t id, struct kvc_buf *out);
/* End of stream: write U+FFFD for any held-back bytes. */
int tok_detok_flush(struct tok_detok *d, struct kvc_buf *out);

/*
 * Whole-sequence convenience: detokenize ids into out (init + push all + flush).
 * tok_decode(tok_encode(text, 0), 0) == text byte for byte (SPM: the space
 * the leading U+2581 stands for is dropped again; with TOK_NO_SPACE_PREFIX
 * decode with TOK_DETOK_KEEP_LEADING_SPACE).
 */
int tok_decode(const struct kvc_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, struct kvc_buf *out);

#endif
