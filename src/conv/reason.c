/*
 * reason.c: a reply's reasoning told from its answer while it streams
 * (chat's splitter between the generation loop and the caller), so every
 * front end stores the same two texts: the answer as the message's text,
 * the reasoning in its own column, and the template gets the reasoning
 * back as reasoning_content.
 */
#include "config.h"

#include <string.h>

#include "conv_int.h"

#define THINK_OPEN "<think>"

/*
 * Whether the prompt ends inside a reasoning block: the generation prompt
 * wrote "<think>" (DeepSeek-R1 distills; Qwen3 with thinking forced), so
 * the model writes only the close.
 */
static bool
prompt_opens_think(const struct conv *c)
{
	const int32_t *ids = eng_seq_tokens(c->seq);
	int n = eng_seq_n_pos(c->seq), k = n < 16 ? n : 16;
	struct kvc_buf b = {0};
	bool open = false;

	if (k > 0 && tok_decode(eng_tokenizer(c->m->e), ids + n - k, (size_t)k, TOK_DETOK_SPECIAL,
	    &b) == 0 && b.p != NULL) {
		size_t e = b.n, ol = strlen(THINK_OPEN);

		while (e > 0 && strchr(" \n\r\t", b.p[e - 1]))
			e--;
		open = e >= ol && memcmp(b.p + e - ol, THINK_OPEN, ol) == 0;
	}
	kvc_buf_free(&b);
	return open;
}

/* chat_reason's emit: each part to the caller's callback for it. */
static int
emit(void *arg, enum chat_part part, const char *s, size_t n)
{
	struct conv_reason *r = arg;

	if (part == CHAT_PART_REASONING)
		return r->io && r->io->on_reasoning ? r->io->on_reasoning(r->io->arg, s, n) : 0;
	return r->io && r->io->on_text ? r->io->on_text(r->io->arg, s, n) : 0;
}

/* conv_gen_params.on_text: the reply's text into the splitter. */
static int
on_text(void *arg, const char *s, size_t n)
{
	struct conv_reason *r = arg;

	return chat_reason_feed(&r->cr, s, n);
}

/* conv_gen_params.on_id: an id that comes while the reasoning streams counts as thinking. */
static int
on_id(void *arg, int32_t id)
{
	struct conv_reason *r = arg;

	(void)id;
	if (!chat_reason_in_answer(&r->cr))
		r->n_tokens++;
	if (r->io && r->io->reasoning_tokens)
		*r->io->reasoning_tokens = r->n_tokens;
	return 0;
}

void
conv_reason_begin(const struct conv *c, struct conv_reason *r, const struct conv_io *io,
    struct conv_gen_params *gp)
{
	const char *jinja = c->m->p.family == CHAT_JINJA ? c->m->jinja : NULL;
	enum chat_reason_style style = chat_reason_style_of(jinja);

	memset(r, 0, sizeof *r);
	r->io = io;
	chat_reason_init(&r->cr, style, style == CHAT_REASON_THINK && prompt_opens_think(c), emit, r);
	gp->on_text = on_text;
	gp->on_id = on_id;
	gp->arg = r;
	/* harmony's channels are special tokens: the splitter reads them as text */
	if (style == CHAT_REASON_HARMONY)
		gp->detok_flags |= TOK_DETOK_SPECIAL;
}

int
conv_reason_end(struct conv_reason *r, struct sess_msg *rec, struct conv_stats *st)
{
	(void)chat_reason_end(&r->cr);
	if (r->cr.oom)
		return KVC_ENOMEM;
	rec->text = r->cr.answer.p ? r->cr.answer.p : (char *)"";
	rec->reasoning = r->cr.reasoning.n > 0 ? r->cr.reasoning.p : NULL;
	st->reasoning_tokens = rec->reasoning ? r->n_tokens : 0;
	return KVC_OK;
}

int
conv_test_reply(struct conv_mgr *m, struct kvc_tokens *out, char *err, size_t errlen)
{
	const char *s = m->p.test_replies + m->test_at, *end = strchr(s, '\n');
	size_t n = end ? (size_t)(end - s) : strlen(s);
	struct kvc_buf b = {0};
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < n; i++) {
		bool esc = s[i] == '\\' && i + 1 < n && (s[i + 1] == 'n' || s[i + 1] == '\\');

		rc = kvc_buf_append(&b, esc && s[i + 1] == 'n' ? "\n" : s + i, 1);
		i += esc;
	}
	m->test_at += n + (end != NULL);
	if (rc == 0 && b.n > 0)
		rc = tok_encode(eng_tokenizer(m->e), b.p, b.n, TOK_PARSE_SPECIAL | TOK_NO_SPACE_PREFIX,
		    out, err, errlen);
	kvc_buf_free(&b);
	return rc;
}

void
conv_reason_free(struct conv_reason *r)
{
	chat_reason_free(&r->cr);
}
