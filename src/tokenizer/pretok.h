/*
 * pretok.h: the pre-tokenizers of byte-level BPE vocabularies. Each splits
 * text into the pieces BPE merges never cross, with the semantics of the
 * regular expressions llama.cpp (and the HF tokenizer.json files) use for
 * that tokenizer.ggml.pre value, written as hand scanners over Unicode
 * categories from utf8proc instead of a regex engine.
 *
 * A pre-tokenizer is a list of stages; each stage splits every piece of the
 * previous stage into the matches of its pattern and the unmatched stretches
 * between them (both are kept), as llama.cpp's unicode_regex_split does.
 */
#ifndef KVC_PRETOK_H
#define KVC_PRETOK_H

#include "core/kvc.h"

enum pretok_kind {
	PRETOK_DEFAULT,		/* "default" or missing: llama.cpp's DEFAULT list */
	PRETOK_GPT2,		/* gpt-2, phi-2, mpt, olmo, roberta-bpe */
	PRETOK_LLAMA3,		/* llama3, llama-v3, llama-bpe (\p{N}{1,3}) */
	PRETOK_QWEN2,		/* qwen2, deepseek-r1-qwen, stablelm2 (\p{N}) */
	PRETOK_DEEPSEEK_LLM,
	PRETOK_DEEPSEEK_CODER,
	PRETOK_FALCON,
	PRETOK_STARCODER,	/* starcoder, refact, command-r, smollm, codeshell */
};

/*
 * Map a tokenizer.ggml.pre value to its scanner. *ignore_merges is set for
 * the Llama 3 family (a pre-token already in the vocabulary is emitted
 * whole). Returns 0 or KVC_EUNSUPPORTED for an unknown name.
 */
int pretok_from_name(const char *name, enum pretok_kind *kind, bool *ignore_merges);

/* Piece boundaries, as byte offsets into the text. */
struct pretok_out {
	size_t *end;	/* (n) exclusive end byte offset of each piece, ascending */
	size_t n;
	size_t cap;
	size_t work;	/* added to by each call: code points decoded and looked at
			 * by the scanners (each look), a count test_tok_linear
			 * holds to grow linearly with the text */
};

/*
 * Split text[0..len) (valid UTF-8: the caller checks) into pieces; the
 * pieces cover the text exactly. Appends to out (reset out->n to reuse).
 * Time and memory are linear in len for every kind (test_tok_linear
 * counts out->work): each scanner's work at a position is O(1) or paid for
 * by the piece it returns.
 * Returns 0, KVC_ENOMEM, or KVC_ERANGE (len of 4 GiB or more).
 */
int pretok_split(enum pretok_kind kind, const char *text, size_t len, struct pretok_out *out);
void pretok_out_free(struct pretok_out *out);

/* Decode one code point of valid UTF-8 at s (n bytes left); returns its length in bytes. */
size_t pretok_utf8_decode(const char *s, size_t n, uint32_t *cp);

#endif
