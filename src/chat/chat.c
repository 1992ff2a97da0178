/*
 * chat.c: chat templates rendered as a list of segments (special token,
 * template text, message text, assistant ids), then tokenised.
 *
 * Tokenisation follows llama.cpp's treatment of a rendered prompt with
 * special tokens parsed: the text between two special tokens (a "run") is
 * tokenised as one piece, with the vocabulary's SentencePiece space prefix
 * when it asks for one, and a special token string is only a special token
 * when the vocabulary has it as a control or user-defined token (otherwise
 * it is text, e.g. Llama 2's "[INST]"). Message text joins its run but is
 * never searched for special tokens, because the special tokens are
 * separate segments found by the template, not in the text.
 *
 * Because runs end at special tokens and at assistant ids, the rendering of
 * a conversation is a prefix of the rendering of any continuation of it,
 * token for token; chat_render_delta checks that rather than assumes it.
 */
#include <stdlib.h>
#include <string.h>
#include "chat.h"

/* Llama 3.1/3.2 templates: fixed date, so a stored conversation's prefix never changes. */
#define LLAMA31_MARK "Cutting Knowledge Date"
#define LLAMA31_DATES "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"

enum seg_kind {
	SEG_SPECIAL,	/* s: a special token's text (text if the vocabulary lacks it) */
	SEG_TEXT,	/* s[0..len): template or message text, tokenised with its run */
	SEG_BOS,	/* the vocabulary's BOS */
	SEG_EOS,	/* the vocabulary's EOS */
	SEG_IDS,	/* ids[0..n_ids): an assistant reply as generated */
	SEG_REPLY,	/* s[0..len): an assistant reply given only as text, tokenised alone */
};

struct seg {
	enum seg_kind kind;
	const char *s;		/* borrowed: a literal or the caller's message text */
	size_t len;		/* bytes of s */
	const int32_t *ids;	/* borrowed from the caller's message */
	size_t n_ids;
	const char *pre;	/* SEG_REPLY: text to put before s ("" or " ") */
};

struct seg_list {
	struct seg *v;
	size_t n, cap;
	int err;	/* KVC_ENOMEM after a failed push */
};

/* What a family's template looks like, beyond the per-message code below. */
struct family_info {
	const char *end;	/* end-of-turn special token; NULL: the vocabulary's EOS */
	const char *close;	/* template text after a reply's end token ("\n") or "" */
	const char *reply_sep;	/* before a text-only reply: the space a model's first token carries */
	bool bos;		/* the template starts with BOS */
	bool trim;		/* the template trims message text (Jinja's | trim) */
};

static const struct family_info families[CHAT_FAMILY_COUNT] = {
	[CHAT_CHATML] = { "<|im_end|>", "\n", "", false, false },
	[CHAT_LLAMA3] = { "<|eot_id|>", "", "", true, true },
	[CHAT_LLAMA2] = { NULL, "", " ", true, true },
	[CHAT_MISTRAL] = { NULL, "", " ", true, false },
	[CHAT_PHI3] = { "<|end|>", "\n", "", true, false },
	[CHAT_DEEPSEEK] = { NULL, "", " ", true, false },
	[CHAT_GEMMA] = { "<end_of_turn>", "\n", "", true, true },
	/* the reply's end token, <|user|>, is the next user turn's opening */
	[CHAT_GLM] = { "<|user|>", "", "", false, false },
	[CHAT_CHATGLM3] = { "<|user|>", "", "", false, false },
};

/* ---- segments ---- */

static void
seg_push(struct seg_list *l, enum seg_kind kind, const char *s, size_t len,
    const int32_t *ids, size_t n_ids)
{
	if (l->err)
		return;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 32;
		struct seg *v = realloc(l->v, cap * sizeof *v);

		if (v == NULL) {
			l->err = KVC_ENOMEM;
			return;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = (struct seg){ kind, s, len, ids, n_ids, "" };
}

static void
sp(struct seg_list *l, const char *special)
{
	seg_push(l, SEG_SPECIAL, special, strlen(special), NULL, 0);
}

static void
tx(struct seg_list *l, const char *text)
{
	if (*text)
		seg_push(l, SEG_TEXT, text, strlen(text), NULL, 0);
}

static int
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Message text, trimmed of ASCII whitespace when the family's template does. */
static void
mt(struct seg_list *l, const struct family_info *fi, const char *text)
{
	size_t a = 0, b;

	if (text == NULL)
		return;
	b = strlen(text);
	if (fi->trim) {
		while (a < b && is_space(text[a]))
			a++;
		while (b > a && is_space(text[b - 1]))
			b--;
	}
	if (b > a)
		seg_push(l, SEG_TEXT, text + a, b - a, NULL, 0);
}

/* Rendering inputs that do not change between a full and a delta rendering. */
struct render_ctx {
	const struct kvc_tokenizer *t;	/* NULL: text rendering */
	enum chat_family f;
	const struct family_info *fi;
	const char *jinja;
	bool bos;		/* BOS at the start */
	bool llama31;		/* Llama 3.1/3.2 system block with dates */
	bool inst_special;	/* Mistral v3+: [INST] and [/INST] are control tokens */
	int32_t end_id;		/* id of the end-of-turn token, -1 when unknown */
};

/* Id of a special token's text when the vocabulary has it as a special token, else -1. */
static int32_t
special_id(const struct kvc_tokenizer *t, const char *s)
{
	int32_t id;
	enum tok_attr a;

	if (t == NULL)
		return -1;
	id = tok_lookup(t, s);
	if (id < 0)
		return -1;
	a = tok_type(t, id);
	return a == TOK_TYPE_CONTROL || a == TOK_TYPE_USER_DEFINED ? id : -1;
}

static void
ctx_init(struct render_ctx *c, const struct kvc_tokenizer *t, enum chat_family f, const char *jinja)
{
	c->t = t;
	c->f = f;
	c->fi = &families[f];
	c->jinja = jinja;
	if (t != NULL)
		c->bos = c->fi->bos && tok_add_bos_default(t) && tok_bos(t) >= 0;
	else
		c->bos = c->fi->bos;
	c->llama31 = f == CHAT_LLAMA3 && jinja != NULL && strstr(jinja, LLAMA31_MARK) != NULL;
	c->inst_special = f == CHAT_MISTRAL && special_id(t, "[INST]") >= 0 &&
	    special_id(t, "[/INST]") >= 0;
	if (t == NULL)
		c->end_id = -1;
	else if (c->fi->end != NULL)
		c->end_id = special_id(t, c->fi->end);
	else
		c->end_id = tok_eos(t);
}

static void
end_token(struct seg_list *l, const struct render_ctx *c)
{
	if (c->fi->end != NULL)
		sp(l, c->fi->end);
	else
		seg_push(l, SEG_EOS, NULL, 0, NULL, 0);
}

/* The assistant turn's opening, i.e. the generation prompt. */
static void
gen_prompt(struct seg_list *l, const struct render_ctx *c)
{
	switch (c->f) {
	case CHAT_CHATML:
		sp(l, "<|im_start|>");
		tx(l, "assistant\n");
		break;
	case CHAT_LLAMA3:
		sp(l, "<|start_header_id|>");
		tx(l, "assistant");
		sp(l, "<|end_header_id|>");
		tx(l, "\n\n");
		break;
	case CHAT_PHI3:
		sp(l, "<|assistant|>");
		tx(l, "\n");
		break;
	case CHAT_DEEPSEEK:
		tx(l, "Assistant:");
		break;
	case CHAT_GEMMA:
		sp(l, "<start_of_turn>");
		tx(l, "model\n");
		break;
	case CHAT_GLM:
		sp(l, "<|assistant|>");
		tx(l, "\n");
		break;
	case CHAT_CHATGLM3:
		/* the model writes the "\n " that follows */
		sp(l, "<|assistant|>");
		break;
	case CHAT_LLAMA2:
	case CHAT_MISTRAL:
	case CHAT_FAMILY_COUNT:
	case CHAT_JINJA:
		break;	/* the user turn ends with [/INST] */
	}
}

static void
reply(struct seg_list *l, const struct render_ctx *c, const struct chat_msg *m)
{
	if (m->ids != NULL && m->n_ids > 0 && (c->t != NULL || m->text == NULL))
		seg_push(l, SEG_IDS, NULL, 0, m->ids, m->n_ids);
	else if (c->f == CHAT_CHATGLM3 && m->text != NULL) {
		/* as the template writes a past reply: "\n " and the text, one run */
		tx(l, "\n ");
		mt(l, c->fi, m->text);
	} else if (m->text != NULL && *m->text) {
		seg_push(l, SEG_REPLY, m->text, strlen(m->text), NULL, 0);
		if (!l->err && !is_space(m->text[0]))
			l->v[l->n - 1].pre = c->fi->reply_sep;
	}
}

/* What follows a reply once the conversation goes on: the end token if the reply lacks it, then the separator. */
static void
close_reply(struct seg_list *l, const struct render_ctx *c, const struct chat_msg *m)
{
	bool ended = c->t != NULL && m->ids != NULL && m->n_ids > 0 && c->end_id >= 0 &&
	    m->ids[m->n_ids - 1] == c->end_id;

	if (!ended)
		end_token(l, c);
	tx(l, c->fi->close);
}

/*
 * A self-contained system turn (families with a system role). first: the
 * conversation's opening one (Llama 3.1 puts its dates only there).
 */
static void
system_turn(struct seg_list *l, const struct render_ctx *c, const char *text, bool is_template_text,
    bool first)
{
	switch (c->f) {
	case CHAT_CHATML:
		sp(l, "<|im_start|>");
		tx(l, "system\n");
		if (is_template_text)
			tx(l, text);
		else
			mt(l, c->fi, text);
		sp(l, "<|im_end|>");
		tx(l, "\n");
		break;
	case CHAT_LLAMA3:
		sp(l, "<|start_header_id|>");
		tx(l, "system");
		sp(l, "<|end_header_id|>");
		tx(l, "\n\n");
		if (c->llama31 && first)
			tx(l, LLAMA31_DATES);
		mt(l, c->fi, text);
		sp(l, "<|eot_id|>");
		break;
	case CHAT_PHI3:
		sp(l, "<|system|>");
		tx(l, "\n");
		mt(l, c->fi, text);
		sp(l, "<|end|>");
		tx(l, "\n");
		break;
	case CHAT_GLM:
	case CHAT_CHATGLM3:
		sp(l, "<|system|>");
		tx(l, c->f == CHAT_GLM ? "\n" : "\n ");
		mt(l, c->fi, text);
		break;
	default:
		break;
	}
}

static bool
has_system_role(enum chat_family f)
{
	return f == CHAT_CHATML || f == CHAT_LLAMA3 || f == CHAT_PHI3 || f == CHAT_GLM ||
	    f == CHAT_CHATGLM3;
}

/*
 * GLM, ChatGLM3: true when the stream already ends with <|user|> (a reply's end
 * token, generated or added by close_reply), which opens the next user turn.
 */
static bool
user_opened(const struct seg_list *l, const struct render_ctx *c)
{
	const struct seg *s = l->n > 0 ? &l->v[l->n - 1] : NULL;

	if (s == NULL)
		return false;
	if (s->kind == SEG_SPECIAL)
		return strcmp(s->s, "<|user|>") == 0;
	return s->kind == SEG_IDS && s->n_ids > 0 && c->end_id >= 0 && s->ids[s->n_ids - 1] == c->end_id;
}

/* A user turn; sys: a system message the family folds into it, or NULL. */
static void
user_turn(struct seg_list *l, const struct render_ctx *c, const struct chat_msg *m,
    const struct chat_msg *sys, bool started)
{
	switch (c->f) {
	case CHAT_CHATML:
		sp(l, "<|im_start|>");
		tx(l, "user\n");
		mt(l, c->fi, m->text);
		sp(l, "<|im_end|>");
		tx(l, "\n");
		break;
	case CHAT_LLAMA3:
		sp(l, "<|start_header_id|>");
		tx(l, "user");
		sp(l, "<|end_header_id|>");
		tx(l, "\n\n");
		mt(l, c->fi, m->text);
		sp(l, "<|eot_id|>");
		break;
	case CHAT_PHI3:
		sp(l, "<|user|>");
		tx(l, "\n");
		mt(l, c->fi, m->text);
		sp(l, "<|end|>");
		tx(l, "\n");
		break;
	case CHAT_LLAMA2:
		/* Meta's format: every later turn starts again with BOS */
		if (started && (c->t == NULL || tok_bos(c->t) >= 0))
			seg_push(l, SEG_BOS, NULL, 0, NULL, 0);
		tx(l, "[INST] ");
		if (sys != NULL) {
			tx(l, "<<SYS>>\n");
			mt(l, c->fi, sys->text);
			tx(l, "\n<</SYS>>\n\n");
		}
		mt(l, c->fi, m->text);
		tx(l, " [/INST]");
		break;
	case CHAT_MISTRAL:
		if (c->inst_special) {
			/* v3 and later: control tokens, text without padding spaces */
			sp(l, "[INST]");
		} else {
			tx(l, "[INST] ");
		}
		if (sys != NULL) {
			mt(l, c->fi, sys->text);
			tx(l, "\n\n");
		}
		mt(l, c->fi, m->text);
		if (c->inst_special)
			sp(l, "[/INST]");
		else
			tx(l, " [/INST]");
		break;
	case CHAT_DEEPSEEK:
		if (sys != NULL) {
			mt(l, c->fi, sys->text);
			tx(l, "\n\n");
		}
		tx(l, "User: ");
		mt(l, c->fi, m->text);
		tx(l, "\n\n");
		break;
	case CHAT_GEMMA:
		sp(l, "<start_of_turn>");
		tx(l, "user\n");
		if (sys != NULL) {
			mt(l, c->fi, sys->text);
			tx(l, "\n\n");
		}
		mt(l, c->fi, m->text);
		sp(l, "<end_of_turn>");
		tx(l, "\n");
		break;
	case CHAT_GLM:
	case CHAT_CHATGLM3:
		if (!user_opened(l, c))
			sp(l, "<|user|>");
		tx(l, c->f == CHAT_GLM ? "\n" : "\n ");
		mt(l, c->fi, m->text);
		break;
	case CHAT_FAMILY_COUNT:
	case CHAT_JINJA:
		break;
	}
}

/* The segments of msgs[0..n) plus, if add_gen, the generation prompt. */
static int
build(struct seg_list *l, const struct render_ctx *c, const struct chat_msg *m, size_t n, bool add_gen)
{
	const struct chat_msg *pending = NULL;	/* system text waiting for the next user turn */
	bool started = false;			/* some turn has been written */
	size_t i = 0;

	/* An empty conversation is an empty stream, so a delta from 0 messages is the whole rendering. */
	if (n == 0 && !add_gen)
		return 0;
	if (c->bos)
		seg_push(l, SEG_BOS, NULL, 0, NULL, 0);
	if (c->f == CHAT_GLM || c->f == CHAT_CHATGLM3) {
		sp(l, "[gMASK]");
		sp(l, c->f == CHAT_GLM ? "<sop>" : "sop");
	}
	if (has_system_role(c->f)) {
		const char *def = chat_default_system(c->f, c->jinja);

		if (n > 0 && m[0].role == CHAT_SYSTEM) {
			system_turn(l, c, m[0].text, false, true);
			i = 1;
			started = true;
		} else if (def != NULL) {
			system_turn(l, c, def, true, true);
			started = true;
		} else if (c->llama31) {
			system_turn(l, c, "", false, true);
			started = true;
		}
	}
	for (; i < n; i++) {
		if (i > 0 && m[i - 1].role == CHAT_ASSISTANT)
			close_reply(l, c, &m[i - 1]);
		switch (m[i].role) {
		case CHAT_SYSTEM:
			if (has_system_role(c->f)) {
				system_turn(l, c, m[i].text, false, false);
				started = true;
			} else {
				pending = &m[i];
			}
			break;
		case CHAT_USER:
			user_turn(l, c, &m[i], pending, started);
			pending = NULL;
			started = true;
			break;
		case CHAT_ASSISTANT:
			gen_prompt(l, c);
			reply(l, c, &m[i]);
			started = true;
			break;
		default:
			return KVC_EINVAL;
		}
	}
	if (add_gen) {
		if (n > 0 && m[n - 1].role == CHAT_ASSISTANT)
			close_reply(l, c, &m[n - 1]);
		gen_prompt(l, c);
	}
	return l->err;
}

/* ---- tokens ---- */

/*
 * Segments that join a run. A template's special-token text the vocabulary
 * lacks (ChatML on a model without <|im_start|>) is not one of them: it is
 * tokenised alone, so turn boundaries stay run boundaries.
 */
static bool
seg_is_text(const struct seg *s)
{
	return s->kind == SEG_TEXT;
}

static int
flush_run(const struct render_ctx *c, struct kvc_buf *run, struct kvc_tokens *out, char *err, size_t errlen)
{
	int rc = 0;

	if (run->n > 0)
		rc = tok_encode(c->t, run->p, run->n, 0, out, err, errlen);
	run->n = 0;
	return rc;
}

/* Append the tokens of v[0..n) to out. v[0] must start a run. */
static int
seg_tokens(const struct render_ctx *c, const struct seg *v, size_t n, struct kvc_tokens *out,
    char *err, size_t errlen)
{
	struct kvc_buf run = {0};
	int rc = 0;
	size_t i;

	for (i = 0; i < n && rc == 0; i++) {
		const struct seg *s = &v[i];
		int32_t id;

		if (seg_is_text(s)) {
			rc = kvc_buf_append(&run, s->s, s->len);
			continue;
		}
		rc = flush_run(c, &run, out, err, errlen);
		if (rc != 0)
			break;
		switch (s->kind) {
		case SEG_SPECIAL:
			id = special_id(c->t, s->s);
			if (id >= 0)
				rc = kvc_tokens_push(out, id);
			else
				rc = tok_encode(c->t, s->s, s->len, 0, out, err, errlen);
			break;
		case SEG_BOS:
		case SEG_EOS:
			id = s->kind == SEG_BOS ? tok_bos(c->t) : tok_eos(c->t);
			if (id < 0) {
				kvc_err(err, errlen, "chat: the %s template needs an %s token the vocabulary lacks",
				    chat_family_name(c->f), s->kind == SEG_BOS ? "BOS" : "EOS");
				rc = KVC_EUNSUPPORTED;
			} else {
				rc = kvc_tokens_push(out, id);
			}
			break;
		case SEG_IDS:
			rc = kvc_tokens_append(out, s->ids, s->n_ids);
			break;
		case SEG_REPLY:
			/* as a model would have written it: no special tokens, no SPM space prefix */
			rc = kvc_buf_append(&run, s->pre, strlen(s->pre));
			if (rc == 0)
				rc = kvc_buf_append(&run, s->s, s->len);
			if (rc == 0)
				rc = tok_encode(c->t, run.p, run.n, TOK_NO_SPACE_PREFIX, out, err, errlen);
			run.n = 0;
			break;
		case SEG_TEXT:
			break;
		}
	}
	if (rc == 0)
		rc = flush_run(c, &run, out, err, errlen);
	if (rc == KVC_ENOMEM)
		kvc_err(err, errlen, "chat: out of memory");
	kvc_buf_free(&run);
	return rc;
}

static int
check_args(const struct kvc_tokenizer *t, enum chat_family f, const struct chat_msg *msgs, size_t n,
    char *err, size_t errlen)
{
	size_t i;

	if ((unsigned)f >= CHAT_FAMILY_COUNT) {
		kvc_err(err, errlen, "chat: unknown template family %d", (int)f);
		return KVC_EINVAL;
	}
	for (i = 0; i < n; i++) {
		if (msgs[i].role != CHAT_SYSTEM && msgs[i].role != CHAT_USER && msgs[i].role != CHAT_ASSISTANT) {
			kvc_err(err, errlen, "chat: message %zu has an unknown role", i);
			return KVC_EINVAL;
		}
		if (msgs[i].role != CHAT_ASSISTANT && msgs[i].text == NULL) {
			kvc_err(err, errlen, "chat: message %zu has no text", i);
			return KVC_EINVAL;
		}
	}
	(void)t;
	return 0;
}

int
chat_render(const struct kvc_tokenizer *t, enum chat_family f, const char *jinja,
    const struct chat_msg *msgs, size_t n, bool add_gen, struct kvc_tokens *out,
    char *err, size_t errlen)
{
	struct render_ctx c;
	struct seg_list l = {0};
	int rc;

	if (t == NULL) {
		kvc_err(err, errlen, "chat: no tokenizer");
		return KVC_EINVAL;
	}
	if (f == CHAT_JINJA)
		return chat_jinja_render(t, jinja, NULL, msgs, 0, n, add_gen, out, err, errlen);
	rc = check_args(t, f, msgs, n, err, errlen);
	if (rc != 0)
		return rc;
	ctx_init(&c, t, f, jinja);
	rc = build(&l, &c, msgs, n, add_gen);
	if (rc == 0)
		rc = seg_tokens(&c, l.v, l.n, out, err, errlen);
	else
		kvc_err(err, errlen, "chat: out of memory");
	free(l.v);
	return rc;
}

static bool
seg_equal(const struct seg *a, const struct seg *b)
{
	if (a->kind != b->kind || a->len != b->len || a->n_ids != b->n_ids || strcmp(a->pre, b->pre) != 0)
		return false;
	if (a->len && memcmp(a->s, b->s, a->len) != 0)
		return false;
	return a->n_ids == 0 || memcmp(a->ids, b->ids, a->n_ids * sizeof *a->ids) == 0;
}

int
chat_render_delta(const struct kvc_tokenizer *t, enum chat_family f, const char *jinja,
    const struct chat_msg *msgs, size_t n_prev, size_t n, bool add_gen,
    struct kvc_tokens *out, char *err, size_t errlen)
{
	struct render_ctx c;
	struct seg_list prev = {0}, full = {0};
	struct kvc_tokens tp = {0}, tf = {0};
	bool prev_gen;
	size_t k, start;
	int rc;

	if (t == NULL || n_prev > n) {
		kvc_err(err, errlen, "chat: bad delta arguments (%zu > %zu messages)", n_prev, n);
		return KVC_EINVAL;
	}
	if (f == CHAT_JINJA)
		return chat_jinja_render(t, jinja, NULL, msgs, n_prev, n, add_gen, out, err, errlen);
	rc = check_args(t, f, msgs, n, err, errlen);
	if (rc != 0)
		return rc;
	ctx_init(&c, t, f, jinja);
	/* the stream holds the generation prompt iff its last message is a user turn awaiting a reply */
	prev_gen = n_prev > 0 && msgs[n_prev - 1].role == CHAT_USER;
	rc = build(&prev, &c, msgs, n_prev, prev_gen);
	if (rc == 0)
		rc = build(&full, &c, msgs, n, add_gen);
	if (rc != 0) {
		kvc_err(err, errlen, "chat: out of memory");
		goto out;
	}
	for (k = 0; k < prev.n && k < full.n && seg_equal(&prev.v[k], &full.v[k]); k++)
		;
	if (k < prev.n) {
		kvc_err(err, errlen, "chat: the %s template rewrites earlier text; render the whole conversation",
		    chat_family_name(c.f));
		rc = KVC_EINVAL;
		goto out;
	}
	/*
	 * Normally the boundary lies between runs and the delta is the new
	 * segments' tokens. If a text run crosses it, re-tokenise that run both
	 * ways and keep only what extends the old tokens exactly.
	 */
	start = k;
	if (k < full.n && k > 0 && seg_is_text(&full.v[k]))
		while (start > 0 && seg_is_text(&full.v[start - 1]))
			start--;
	if (start == k) {
		rc = seg_tokens(&c, full.v + k, full.n - k, out, err, errlen);
		goto out;
	}
	rc = seg_tokens(&c, prev.v + start, prev.n - start, &tp, err, errlen);
	if (rc == 0)
		rc = seg_tokens(&c, full.v + start, full.n - start, &tf, err, errlen);
	if (rc != 0)
		goto out;
	if (tp.n > tf.n || memcmp(tp.v, tf.v, tp.n * sizeof *tp.v) != 0) {
		kvc_err(err, errlen, "chat: the new turn changes how earlier text tokenises; render the whole conversation");
		rc = KVC_EINVAL;
		goto out;
	}
	rc = kvc_tokens_append(out, tf.v + tp.n, tf.n - tp.n);
out:
	free(prev.v);
	free(full.v);
	kvc_tokens_free(&tp);
	kvc_tokens_free(&tf);
	return rc;
}

/* ---- text ---- */

static const char *
family_bos_text(enum chat_family f)
{
	switch (f) {
	case CHAT_LLAMA3:
		return "<|begin_of_text|>";
	case CHAT_GEMMA:
		return "<bos>";
	case CHAT_DEEPSEEK:
		return "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
	default:
		return "<s>";
	}
}

static const char *
family_eos_text(enum chat_family f)
{
	switch (f) {
	case CHAT_DEEPSEEK:
		return "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
	case CHAT_CHATML:
		return "<|endoftext|>";
	case CHAT_LLAMA3:
		return "<|end_of_text|>";
	case CHAT_GEMMA:
		return "<eos>";
	case CHAT_PHI3:
		return "<|endoftext|>";
	default:
		return "</s>";
	}
}

static int
piece_text(const struct kvc_tokenizer *t, int32_t id, const char *fallback, struct kvc_buf *out)
{
	size_t len;
	const char *p = (t != NULL && id >= 0) ? tok_piece(t, id, &len) : NULL;

	if (p == NULL)
		return kvc_buf_append(out, fallback, strlen(fallback));
	return kvc_buf_append(out, p, len);
}

int
chat_render_text(const struct kvc_tokenizer *t, enum chat_family f, const char *jinja,
    const struct chat_msg *msgs, size_t n, bool add_gen, struct kvc_buf *out)
{
	struct render_ctx c;
	struct seg_list l = {0};
	size_t i;
	int rc;

	if (f == CHAT_JINJA)
		return t ? chat_jinja_text(t, jinja, NULL, msgs, n, add_gen, out, NULL, 0) : KVC_EINVAL;
	if (check_args(t, f, msgs, n, NULL, 0) != 0)
		return KVC_EINVAL;
	ctx_init(&c, t, f, jinja);
	rc = build(&l, &c, msgs, n, add_gen);
	for (i = 0; i < l.n && rc == 0; i++) {
		const struct seg *s = &l.v[i];

		switch (s->kind) {
		case SEG_SPECIAL:
		case SEG_TEXT:
			rc = kvc_buf_append(out, s->s, s->len);
			break;
		case SEG_REPLY:
			rc = kvc_buf_append(out, s->pre, strlen(s->pre));
			if (rc == 0)
				rc = kvc_buf_append(out, s->s, s->len);
			break;
		case SEG_BOS:
			rc = piece_text(t, t ? tok_bos(t) : -1, family_bos_text(f), out);
			break;
		case SEG_EOS:
			rc = piece_text(t, t ? tok_eos(t) : -1, family_eos_text(f), out);
			break;
		case SEG_IDS:
			if (t == NULL)
				rc = KVC_EINVAL;
			else
				rc = tok_decode(t, s->ids, s->n_ids,
				    TOK_DETOK_SPECIAL | TOK_DETOK_KEEP_LEADING_SPACE, out);
			break;
		}
	}
	free(l.v);
	if (rc == 0 && out->p == NULL)
		rc = kvc_buf_append(out, "", 0);
	return rc;
}
