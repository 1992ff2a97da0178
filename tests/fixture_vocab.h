/*
 * fixture_vocab.h: kvchat's own tokenizer vocabularies for fixture models,
 * learned at run time from a small built-in English and Chinese text, so
 * tests need nothing from outside the repository.
 *
 *   BPE (tokenizer.ggml.model = gpt2, pre = qwen2): the 256 bytes in GPT-2's
 *     byte-to-unicode form, then one token per learned merge, then control
 *     tokens (<|endoftext|>, <|im_start|>, <|im_end|>, Llama 3, Phi-3 and
 *     Gemma turn markers, <s>, </s>); bos = <|endoftext|>, eos = <|im_end|>;
 *     a ChatML chat template.
 *   SPM (model = llama): <unk>, <s>, </s>, the 256 <0xXX> byte tokens, then
 *     U+2581-prefixed pieces learned the same way, scored by merge order
 *     (earlier merge = higher score); a Llama 2 [INST] chat template.
 *
 * The same inputs always give the same vocabulary (ids, merges, scores).
 */
#ifndef KVC_FIXTURE_VOCAB_H
#define KVC_FIXTURE_VOCAB_H

#include "gguf_write.h"

enum fixture_vocab_kind { FIXTURE_VOCAB_BPE, FIXTURE_VOCAB_SPM };

/*
 * Add tokenizer.ggml.* and tokenizer.chat_template to w. When n_vocab_min
 * exceeds the vocabulary's own size, unused tokens "[PAD<id>]" (type 5) fill
 * it up to n_vocab_min. *n_vocab (if not NULL) receives the final size.
 * Returns 0 or KVC_ENOMEM.
 */
int fixture_vocab_add(struct gguf_writer *w, enum fixture_vocab_kind kind,
    int32_t n_vocab_min, int32_t *n_vocab);

/* The vocabulary's own size (no padding), or a negative KVC_E* code. */
int32_t fixture_vocab_size(enum fixture_vocab_kind kind);

/* The built-in training text (UTF-8), e.g. for tokenizer round-trip tests. */
const char *fixture_vocab_text(void);

#endif
