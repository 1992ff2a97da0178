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
 *
 * Tokens: the text between two special tokens (a "run") is tokenised as one
 * piece, as llama.cpp does with a whole prompt: a SentencePiece vocabulary
 * that asks for a space prefix gets one at the start of every run. A
 * template's special-token text (e.g. "<|im_start|>", "[INST]") is a special
 * token only where the vocabulary has it as a control/user-defined token,
 * else it is text. Message text is never searched for special tokens.
 *
 * Assistant replies: the ids as generated. When they end with the family's
 * end-of-turn token (<|im_end|>, <|eot_id|>, <|end|>, <end_of_turn>, or EOS
 * for Llama 2, Mistral and DeepSeek) the next delta adds only what the
 * template puts after it ("\n" for ChatML, Phi-3, Gemma); otherwise (reply
 * cut by max tokens or Ctrl-C, or ended by another end-of-generation id) it
 * first closes the turn with that token. A reply given only as text (ids
 * NULL) is tokenised on its own without special tokens or space prefix.
 *
 * BOS: added when the vocabulary's add_bos default says so and the family's
 * template starts with it (all but ChatML).
 *
 * Families, and where they differ from the model's Jinja template:
 * - chatml: <|im_start|>role\n text <|im_end|>\n. With a Qwen2/2.5 template
 *   (its Jinja contains the default prompt) and no system message, the
 *   system turn "You are Qwen, created by Alibaba Cloud. You are a helpful
 *   assistant." is inserted. Tool calls are not rendered.
 * - llama3: <|start_header_id|>role<|end_header_id|>\n\n text <|eot_id|>,
 *   message text trimmed as the template does. When the Jinja contains
 *   "Cutting Knowledge Date" (Llama 3.1/3.2) the system turn is always there
 *   and starts "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul
 *   2024\n\n". Llama 3.2's template would put today's date there; kvchat
 *   keeps the fixed default so a stored conversation's prefix (and its KV
 *   cache) stays valid across days.
 * - llama2: <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST]reply</s><s>[INST]
 *   user2 [/INST] (Meta's format: BOS before every user turn; text trimmed).
 *   The reply's leading space is whatever the model generated.
 * - mistral: <s>[INST] user [/INST]reply</s>[INST] ... ; with a vocabulary
 *   that has [INST]/[/INST] as control tokens (v3 and later) they are those
 *   tokens, without the padding spaces. There is no system role: the system
 *   text goes before the first user text, followed by "\n\n".
 * - phi3: <|system|>\n..<|end|>\n<|user|>\n..<|end|>\n<|assistant|>\n
 * - deepseek: sys\n\nUser: ..\n\nAssistant: reply<EOS>User: .. (DeepSeek
 *   LLM / V2); the generation prompt is "Assistant:" without the space,
 *   which the model's first token supplies.
 * - gemma: <start_of_turn>user\n..<end_of_turn>\n<start_of_turn>model\n,
 *   text trimmed; no system role: system text + "\n\n" opens the next user
 *   turn (as Gemma 3's template does).
 * - glm: [gMASK]<sop><|system|>\n..<|user|>\n..<|assistant|>\nreply<|user|>\n..
 *   (llama.cpp's chatglm4): no end-of-turn token of its own, a reply ends
 *   where the model writes <|user|> (its EOT), which then opens the next
 *   user turn.
 * - chatglm3: [gMASK]sop<|system|>\n sys<|user|>\n ..<|assistant|>reply<|user|>\n ..
 *   (ChatGLM3-6B's template: a newline and a space after each role token,
 *   the generation prompt <|assistant|> alone, the model writing the
 *   newline and space itself); [gMASK] and sop are the vocabulary's control
 *   tokens; the reply ends, as with GLM-4, at the <|user|> that opens the
 *   next turn. A reply given only as text is rendered as the template
 *   writes it, "\n " and the text in the run after <|assistant|>.
 * Templates that fold the system message into the next user turn (llama2,
 * mistral, deepseek, gemma) render nothing for it until that turn comes, so
 * a stream holding only a system message is just BOS and the delta that
 * adds the first user turn brings the system text with it. So no family's
 * rendering rewrites earlier text and the invariant holds for all of them.
 * What the real templates do that would rewrite it is not reproduced:
 * Mistral v0.3's template moves the system text to the LAST user turn (here
 * it stays in the first), Llama 3.2's date changes daily (fixed here).
 *
 * A text-only reply (ids NULL) in llama2, mistral and deepseek gets the
 * leading space a model's first token would carry ("[/INST] reply").
 */
#ifndef KVC_CHAT_H
#define KVC_CHAT_H

#include "core/kvc.h"
#include "tokenizer/tokenizer.h"

enum chat_family {
	CHAT_CHATML,	/* Qwen2/2.5 and others: <|im_start|>role\n...<|im_end|>\n */
	CHAT_LLAMA3,	/* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
	CHAT_LLAMA2,	/* <s>[INST] <<SYS>>...<</SYS>> user [/INST] reply </s> */
	CHAT_MISTRAL,	/* <s>[INST] user [/INST] reply</s> */
	CHAT_PHI3,	/* <|user|>\n...<|end|>\n<|assistant|>\n */
	CHAT_DEEPSEEK,	/* User: ...\n\nAssistant: ... */
	CHAT_GEMMA,	/* <start_of_turn>user\n...<end_of_turn>\n */
	CHAT_GLM,	/* [gMASK]<sop><|user|>\n...<|assistant|>\n... (GLM-4) */
	CHAT_CHATGLM3,	/* [gMASK]sop<|user|>\n ...<|assistant|>... (ChatGLM3) */
	CHAT_FAMILY_COUNT,	/* the built-in families above */
	CHAT_JINJA = 32,	/* the model's own template, rendered (chat_jinja.c) */
};

enum chat_role { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT };

struct chat_msg {
	enum chat_role role;
	const char *text;	/* UTF-8; assistant: used only when ids is NULL, and by chat_render_text */
	const int32_t *ids;	/* assistant: the exact generated ids (may end with an end-of-generation id) */
	size_t n_ids;
	/*
	 * assistant: its reasoning without markup, or NULL; the model's own
	 * template gets it as the message's reasoning_content and thinking
	 * (gpt-oss), and decides whether it stays in the prompt
	 */
	const char *reasoning;
};

/* "chatml", "llama3", ... ; chat_family_from_name returns -1 if unknown. */
const char *chat_family_name(enum chat_family f);
int chat_family_from_name(const char *name);
/*
 * Family of a Jinja template text (tokenizer.chat_template), or -1 when it
 * is not recognised (callers then warn and use CHAT_CHATML).
 */
int chat_detect(const char *jinja);
/*
 * Family a file without a chat template implies by its architecture
 * (general.architecture: gemma* -> gemma, phi3 -> phi3, glm4 -> glm;
 * chatglm -> chatglm3 when tok_model, tokenizer.ggml.model, is "llama",
 * SentencePiece, else glm), or -1 when the architecture says nothing
 * (callers then warn and use CHAT_CHATML). tok_model may be NULL.
 */
int chat_family_for_arch(const char *arch, const char *tok_model);
/*
 * The family a loaded file implies, as the chat and kvchat batch pick it
 * when no --chat-template is given: its tokenizer.chat_template
 * (chat_detect), or without one its architecture and vocabulary
 * (chat_family_for_arch); -1 when neither says. *jinja (jinja may be NULL)
 * receives the template text, or NULL when the file has none.
 */
struct gguf_file;
int chat_family_for_file(const struct gguf_file *f, const char **jinja);

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
 * chat_render and chat_render_delta return 0, KVC_EINVAL (bad family or
 * message), KVC_EFORMAT (invalid
 * UTF-8 in a message), KVC_EUNSUPPORTED (the template needs a BOS/EOS the
 * vocabulary lacks) or KVC_ENOMEM; on error out may hold a partial append.
 * Zero messages without add_gen render nothing (not even BOS), so a delta
 * from n_prev = 0 is the whole rendering.
 *
 * Tokens to append to a stream that already holds the rendering of
 * msgs[0..n_prev) (ending with the last assistant reply's ids, or with the
 * generation prompt if msgs[n_prev-1] is a user turn awaiting a reply) so
 * that it becomes the rendering of msgs[0..n) (+ generation prompt if add_gen).
 * KVC_EINVAL (with a message) if that is impossible without changing tokens
 * already in the stream (never for the renderings above); the caller then
 * renders the whole conversation and lets the engine keep the common prefix.
 */
int chat_render_delta(const struct kvc_tokenizer *t, enum chat_family f, const char *jinja,
    const struct chat_msg *msgs, size_t n_prev, size_t n, bool add_gen,
    struct kvc_tokens *out, char *err, size_t errlen);

/*
 * The rendering as text, for display and tests: special tokens as their
 * text, BOS/EOS as the vocabulary's pieces (with t) or the family's usual
 * spelling (t NULL: BOS is then added whenever the family's template has
 * it), assistant messages by their text (by their decoded ids when text is
 * NULL and t is given). 0, KVC_ENOMEM or KVC_EINVAL.
 */
int chat_render_text(const struct kvc_tokenizer *t, enum chat_family f, const char *jinja,
    const struct chat_msg *msgs, size_t n, bool add_gen, struct kvc_buf *out);

/* Stop strings beyond the tokenizer's end-of-generation ids (e.g. DeepSeek's "User:"), or NULL. */
const char *const *chat_stop_strings(enum chat_family f);

/*
 * CHAT_JINJA, the model's own template (chat_jinja.c): chat_render,
 * chat_render_delta and chat_render_text with f == CHAT_JINJA render the
 * Jinja text jinja (src/jinja, as transformers renders it) with messages,
 * add_generation_prompt, bos_token and eos_token (the vocabulary's pieces)
 * and the variables vars_json (members of a JSON object without its
 * braces, e.g. ""enable_thinking": false"; NULL for none).
 *
 * Tokens: only the template's text can make special tokens. Message
 * contents enter the render as markers; the marked render must agree with
 * the real one (each content rendered as it is, or stripped), else
 * KVC_EUNSUPPORTED. Replies with ids are their exact ids (an end-of-turn id
 * they end with stands for the template's text of it); the text between
 * two replies is tokenised as one with special tokens parsed, as llama.cpp
 * tokenises a rendered prompt, unless a content in it holds special-token
 * text: then that content is tokenised alone without. BOS is added as the
 * vocabulary asks unless the template wrote it.
 *
 * A rendering that ends with a reply (with ids, no add_gen) ends with its
 * ids, as the stream does: the template's closing comes with the next delta.
 * Delta (n_prev > 0, msgs[n_prev - 1] a reply with ids): the tokens the
 * render of msgs[0..n) puts after that reply; what the template now renders
 * before it is not looked at, so a chat whose template rewrites earlier
 * turns (Qwen3 drops old reasoning) renders the whole conversation instead
 * (chat_jinja_render_spans, conv's rerender.c) and recomputes from where
 * it differs.
 */
int chat_jinja_render(const struct kvc_tokenizer *t, const char *jinja, const char *vars_json,
    const struct chat_msg *msgs, size_t n_prev, size_t n, bool add_gen, struct kvc_tokens *out,
    char *err, size_t errlen);
/*
 * A whole render (n_prev 0) of msgs[0..n) as chat_jinja_render, and the
 * tokens each message counts for in it (spans[n]): a reply without
 * reasoning its exact ids; the rest, template text included, under the
 * last user message before the next such reply (the first message there
 * if none is a user's). A reply with reasoning is rendered from its texts
 * (the template may drop the reasoning), so it counts for nothing of its
 * own; so does every reply when the template rewrites replies' text (the
 * render with ids then fails chat_jinja_render's check). The spans add up
 * to the tokens appended. KVC_EUNSUPPORTED when two
 * replies with template text between them leave it no message.
 */
int chat_jinja_render_spans(const struct kvc_tokenizer *t, const char *jinja, const char *vars_json,
    const struct chat_msg *msgs, size_t n, bool add_gen, struct kvc_tokens *out, size_t *spans,
    char *err, size_t errlen);
int chat_jinja_text(const struct kvc_tokenizer *t, const char *jinja, const char *vars_json,
    const struct chat_msg *msgs, size_t n, bool add_gen, struct kvc_buf *out, char *err, size_t errlen);
/*
 * Whether the chat can use template jinja with this vocabulary: a trial
 * render of a short conversation (first turn and a delta after a reply;
 * a template that raises on a system message passes without one).
 * 0, or the error with its message (the caller falls back to a family).
 */
int chat_jinja_check(const struct kvc_tokenizer *t, const char *jinja, const char *vars_json,
    char *err, size_t errlen);

/*
 * A reply's reasoning told from its answer as it streams (chat_reason.c).
 * THINK: "<think>...</think>" at the start of the reply, or only the close
 * when the generation prompt opened the block (opened). HARMONY (gpt-oss):
 * the analysis channel is reasoning, the others answer; the reply's special
 * tokens must be in the text (TOK_DETOK_SPECIAL).
 */
enum chat_reason_style { CHAT_REASON_THINK, CHAT_REASON_HARMONY };
enum chat_part { CHAT_PART_ANSWER, CHAT_PART_REASONING };
struct chat_reason {
	enum chat_reason_style style;
	int state;
	enum chat_part part;		/* harmony: the current message's */
	struct kvc_buf hold;		/* text not yet told apart (a cut tag) */
	struct kvc_buf answer;		/* the answer so far, without markup */
	struct kvc_buf reasoning;	/* the reasoning so far; stripped by chat_reason_end */
	bool oom;			/* a buffer could not grow: the texts are short */
	/* Each part as it is told; non-zero asks the caller's loop to stop. */
	int (*emit)(void *arg, enum chat_part part, const char *s, size_t n);
	void *arg;
};
/* HARMONY when the template writes harmony's channels, else THINK. jinja may be NULL. */
enum chat_reason_style chat_reason_style_of(const char *jinja);
void chat_reason_init(struct chat_reason *r, enum chat_reason_style style, bool opened,
    int (*emit)(void *arg, enum chat_part part, const char *s, size_t n), void *arg);
/* The next piece of the reply; returns what emit returned (non-zero: stop). */
int chat_reason_feed(struct chat_reason *r, const char *s, size_t n);
/*
 * The reply is over: what was held is told, the reasoning stripped of white
 * space at both ends; answer.p and reasoning.p are then NUL-terminated
 * (unless oom).
 */
int chat_reason_end(struct chat_reason *r);
/* Whether the text now streaming is the answer. */
bool chat_reason_in_answer(const struct chat_reason *r);
void chat_reason_free(struct chat_reason *r);

#endif
