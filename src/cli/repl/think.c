/*
 * think.c: a reply's reasoning told apart from its answer as it streams.
 * Reasoning models (Qwen3, QwQ, DeepSeek-R1 distills, SmolLM3, GLM-4.6)
 * write it inside <think>...</think> at the start of the reply, or the
 * template's generation prompt opens the block and the model writes only
 * the close. At a terminal the reasoning is shown dimmed; piped, only the
 * answer is printed. Tags split across the detokenizer's pieces are held
 * back until they can be told apart from text.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "repl.h"
#include "cli/colour.h"
#include "tokenizer/tokenizer.h"

#define OPEN "<think>"
#define CLOSE "</think>"

/* Whether the prompt ends inside a reasoning block: its last ids read "<think>" and white space. */
static bool
prompt_opens_think(struct kvc_repl *r)
{
	int n = conv_n_msgs(r->cur);
	const struct sess_msg *m = n > 0 ? conv_msg(r->cur, n - 1) : NULL;
	struct kvc_buf b = {0};
	bool open = false;

	if (m == NULL || m->role != SESS_USER || m->n_ids <= 0)
		return false;
	int k = m->n_ids < 4 ? m->n_ids : 4;

	if (tok_decode(eng_tokenizer(r->e), m->ids + m->n_ids - k, (size_t)k, TOK_DETOK_SPECIAL, &b) == 0 &&
	    b.p) {
		size_t e = b.n;

		while (e > 0 && strchr(" \n", b.p[e - 1]))
			e--;
		open = e >= strlen(OPEN) && memcmp(b.p + e - strlen(OPEN), OPEN, strlen(OPEN)) == 0;
	}
	kvc_buf_free(&b);
	return open;
}

void
repl_think_begin(struct kvc_repl *r)
{
	memset(&r->stream, 0, sizeof r->stream);
	r->stream.started = true;
	/* wrapped only on a terminal: piped, the reply's bytes are written as they are */
	kvc_wrap_begin(&r->wrap, kvc_wrap_width(STDOUT_FILENO));
	r->stream.state = prompt_opens_think(r) ? REPL_THINKING : REPL_THINK_START;
	if (r->stream.state == REPL_THINKING && r->tty)
		printf("%s", kvc_sgr(r->color, KVC_SGR_DIM));
}

/* Text of the reasoning (dim at a terminal, not at all when piped) or of the answer. */
static void
emit(struct kvc_repl *r, const char *s, size_t n)
{
	if (n == 0 || (r->stream.state == REPL_THINKING && !r->tty))
		return;
	kvc_wrap_put(&r->wrap, stdout, s, n);
}

/* How much of s[0..n) could be the start of tag (a prefix cut by the piece's end). */
static size_t
partial_tail(const char *s, size_t n, const char *tag)
{
	size_t tl = strlen(tag);

	for (size_t k = tl - 1; k > 0; k--)
		if (n >= k && memcmp(s + n - k, tag, k) == 0)
			return k;
	return 0;
}

static void
feed(struct kvc_repl *r, const char *s, size_t n)
{
	struct repl_think *t = &r->stream;

	while (n > 0) {
		if (t->state == REPL_THINK_START) {
			/* white space, then "<think>" or anything else */
			size_t w = 0;

			while (w < n && strchr(" \n", s[w]))
				w++;
			size_t m = n - w < strlen(OPEN) ? n - w : strlen(OPEN);

			if (w == n && n > sizeof t->pend) {
				t->state = REPL_ANSWER;	/* a long run of white space: an answer's */
				continue;
			}
			if (w < n && memcmp(s + w, OPEN, m) != 0) {
				t->state = REPL_ANSWER;
				continue;
			}
			if (w == n || m < strlen(OPEN)) {
				/* white space only, or a cut "<think>": held until told apart */
				memcpy(t->pend, s, n);
				t->npend = n;
				return;
			}
			t->state = REPL_THINKING;
			if (r->tty)
				printf("%s", kvc_sgr(r->color, KVC_SGR_DIM));
			emit(r, s + w, strlen(OPEN));
			s += w + strlen(OPEN);
			n -= w + strlen(OPEN);
		} else if (t->state == REPL_THINKING) {
			const char *end = memmem(s, n, CLOSE, strlen(CLOSE));

			if (end == NULL) {
				size_t keep = partial_tail(s, n, CLOSE);

				emit(r, s, n - keep);
				memcpy(t->pend, s + n - keep, keep);
				t->npend = keep;
				return;
			}
			emit(r, s, (size_t)(end - s) + strlen(CLOSE));
			if (r->tty)
				printf("%s", kvc_sgr(r->color, KVC_SGR_RESET));
			n -= (size_t)(end - s) + strlen(CLOSE);
			s = end + strlen(CLOSE);
			t->state = REPL_AFTER_THINK;
		} else if (t->state == REPL_AFTER_THINK) {
			/* the blank lines between the reasoning and the answer */
			while (n > 0 && strchr(" \n", s[0])) {
				if (r->tty)
					kvc_wrap_put(&r->wrap, stdout, s, 1);
				s++;
				n--;
			}
			if (n > 0)
				t->state = REPL_ANSWER;
		} else {
			emit(r, s, n);
			return;
		}
	}
}

void
repl_think_text(struct kvc_repl *r, const char *s, size_t n)
{
	struct repl_think *t = &r->stream;
	char buf[sizeof t->pend + 256];

	if (!t->started)
		repl_think_begin(r);	/* the prompt is stored by the first piece */
	/* A held-back tag prefix goes in front of the new piece. */
	while (t->npend > 0 && n > 0) {
		size_t take = n < 256 ? n : 256;

		memcpy(buf, t->pend, t->npend);
		memcpy(buf + t->npend, s, take);
		size_t len = t->npend + take;

		t->npend = 0;
		s += take;
		n -= take;
		feed(r, buf, len);
	}
	if (n > 0)
		feed(r, s, n);
	fflush(stdout);
}

void
repl_think_end(struct kvc_repl *r)
{
	struct repl_think *t = &r->stream;

	if (!t->started)
		return;
	if (t->npend > 0) {
		if (t->state == REPL_THINK_START)
			t->state = REPL_ANSWER;
		emit(r, t->pend, t->npend);
		t->npend = 0;
	}
	if (t->state == REPL_THINKING && r->tty)
		printf("%s", kvc_sgr(r->color, KVC_SGR_RESET));
	fflush(stdout);
}

int
repl_think_tokens(struct kvc_repl *r)
{
	int n = conv_n_msgs(r->cur);
	const struct sess_msg *m = n > 0 ? conv_msg(r->cur, n - 1) : NULL;
	int32_t close = tok_lookup(eng_tokenizer(r->e), CLOSE);

	if (m == NULL || m->role != SESS_ASSISTANT || close < 0)
		return 0;
	for (int i = 0; i < m->n_ids; i++)
		if (m->ids[i] == close)
			return i + 1;
	return 0;
}
