/*
 * chat.h: chat templates, rendered straight to token ids.
 *
 * The conversation's token stream is built incrementally: each new user turn
 * appends chat_render_delta() to what is already there, and an assistant's
 * reply is kept as the exact ids the model generated (never re-tokenised
 * from text), so the KV cache always matches the stream. The invariant
 * (tested for each family):
 *
 *   chat_render(msgs[0..n))  ==  chat_render(msgs[0..k)) ++ ...deltas...
 *
 * where an assistant message contributes its ids (plus whatever closing
 * tokens the family puts after a reply, emitted by the next delta).
 */
#ifndef KVC_CHAT_H
#define KVC_CHAT_H

#include "kvc.h"
#include "tokenizer.h"

enum chat_family {
	CHAT_CHATML,	/* Qwen2/2.5 and others: <|im_start|>role\n...<|im_end|>\n */
	CHAT_LLAMA3,	/* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
	CHAT_LLAMA2,	/* <s>[INST] <<SYS>>...<</SYS>> user [/INST] reply </s> */
	CHAT_MISTRAL,	/* <s>[INST] user [/INST] reply</s> */
	CHAT_PHI3,	/* <|user|>\n...<|end|>\n<|assistant|>\n */
	CHAT_DEEPSEEK,	/* User: ...\n\nAssistant: ... */
	CHAT_GEMMA,	/* <start_of_turn>user\n...<end_of_turn>\n */
	CHAT_FAMILY_COUNT
};

enum chat_role { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT };

struct chat_msg {
	enum chat_role role;
	const char *text;	/* UTF-8 (system/user; for assistant only informative) */
	const int32_t *ids;	/* assistant: the exact generated ids (may end with an end-of-generation id) */
	size_t n_ids;
};

/* "chatml", "llama3", ... ; chat_family_from_name returns -1 if unknown. */
const char *chat_family_name(enum chat_family f);
int chat_family_from_name(const char *name);
/*
 * Family of a Jinja template text (tokenizer.chat_template), or -1 when it
 * is not recognised (callers then warn and use CHAT_CHATML).
 */
int chat_detect(const char *jinja);

/* Default system prompt the family inserts when none is given (ChatML/Qwen2.5), or NULL. */
const char *chat_default_system(enum chat_family f, const char *jinja);

/*
 * Render msgs[0..n) (system first if any, then alternating user/assistant)
 * and, if add_gen, the assistant generation prompt; append ids to out.
 * Template text is tokenised with special tokens parsed; message text with
 * TOK_PARSE_SPECIAL off, so a user typing "<|im_end|>" gets plain text.
 * jinja: the model's template text (for defaults such as Qwen's system
 * prompt), may be NULL.
 */
int chat_render(const struct kvc_tokenizer *t, enum chat_family f, const char *jinja,
    const struct chat_msg *msgs, size_t n, bool add_gen, struct kvc_tokens *out,
    char *err, size_t errlen);

/*
 * Tokens to append to a stream that already holds the rendering of
 * msgs[0..n_prev) (ending with the last assistant reply's ids, or with the
 * generation prompt if msgs[n_prev-1] is a user turn awaiting a reply) so
 * that it becomes the rendering of msgs[0..n) (+ generation prompt if add_gen).
 */
int chat_render_delta(const struct kvc_tokenizer *t, enum chat_family f, const char *jinja,
    const struct chat_msg *msgs, size_t n_prev, size_t n, bool add_gen,
    struct kvc_tokens *out, char *err, size_t errlen);

/* Stop strings beyond the tokenizer's end-of-generation ids (e.g. DeepSeek's "User:"), or NULL. */
const char *const *chat_stop_strings(enum chat_family f);

#endif
