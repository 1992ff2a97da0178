/*
 * chat_reason.c: a streaming reply told apart into its reasoning and its
 * answer, as the template's markup says.
 *
 * <think> style (Qwen3, QwQ, DeepSeek-R1 distills, SmolLM3, GLM-4.6): the
 * reply opens with "<think>" (after white space), or the generation prompt
 * already opened it and the model writes only "</think>"; what follows the
 * close, past its blank lines, is the answer. A reply that does not open
 * with the tag is all answer.
 *
 * Harmony (gpt-oss): the reply is a run of messages, each a header
 * ("<|channel|>analysis" and the like, after "<|start|>assistant" for all
 * but the first) closed by "<|message|>", then its body up to "<|end|>",
 * "<|return|>" or "<|call|>". The analysis channel is reasoning; final
 * (and commentary, a tool call's text) is answer. The reply's special
 * tokens must reach the splitter as text (TOK_DETOK_SPECIAL).
 *
 * Pieces arrive as the detokenizer cuts them, so a tag may be split across
 * two: what could still be the start of one is held until the next piece
 * says. Nothing here reads a terminal; the emit callback does.
 */
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"

enum {
	T_START, T_THINK, T_AFTER, T_ANSWER,	/* <think> style */
	H_HEAD, H_BODY,				/* harmony */
};

#define T_OPEN "<think>"
#define T_CLOSE "</think>"
#define H_MSG "<|message|>"
#define H_CHANNEL "<|channel|>"
#define HOLD_MAX 256	/* a header or leading white space longer than this is answer text */

/* What ends a harmony message's body; the last two open the next header. */
static const char *const h_ends[] = { "<|end|>", "<|return|>", "<|call|>", "<|start|>", H_CHANNEL };

enum chat_reason_style
chat_reason_style_of(const char *jinja)
{
	return jinja && strstr(jinja, H_CHANNEL) && strstr(jinja, H_MSG) ? CHAT_REASON_HARMONY :
	    CHAT_REASON_THINK;
}

void
chat_reason_init(struct chat_reason *r, enum chat_reason_style style, bool opened,
    int (*emit)(void *arg, enum chat_part part, const char *s, size_t n), void *arg)
{
	memset(r, 0, sizeof *r);
	r->style = style;
	r->state = style == CHAT_REASON_HARMONY ? H_HEAD : opened ? T_THINK : T_START;
	r->emit = emit;
	r->arg = arg;
}

static bool
is_space(char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Part of the text, kept and passed on; non-zero when the callback asks to stop. */
static int
put(struct chat_reason *r, enum chat_part part, const char *s, size_t n)
{
	struct kvc_buf *b = part == CHAT_PART_REASONING ? &r->reasoning : &r->answer;

	if (n == 0)
		return 0;
	if (kvc_buf_append(b, s, n) != 0)
		r->oom = true;
	return r->emit ? r->emit(r->arg, part, s, n) : 0;
}

/* How much of the end of s[0..n) is a proper prefix of tag. */
static size_t
tail_of(const char *s, size_t n, const char *tag)
{
	size_t tl = strlen(tag);

	for (size_t k = tl - 1; k > 0; k--)
		if (n >= k && memcmp(s + n - k, tag, k) == 0)
			return k;
	return 0;
}

/* One step of the <think> style over s[0..n); *used: bytes consumed. 1: wait for more. */
static int
step_think(struct chat_reason *r, const char *s, size_t n, bool last, size_t *used, int *stop)
{
	size_t w = 0, ol = strlen(T_OPEN), cl = strlen(T_CLOSE);
	const char *e;

	*used = 0;
	switch (r->state) {
	case T_START:
		while (w < n && is_space(s[w]))
			w++;
		if (n - w >= ol && memcmp(s + w, T_OPEN, ol) == 0) {
			r->state = T_THINK;
			*used = w + ol;
			return 0;
		}
		if (!last && n <= HOLD_MAX && n - w < ol && memcmp(s + w, T_OPEN, n - w) == 0)
			return 1;	/* white space, or a cut "<think>": not yet told */
		r->state = T_ANSWER;
		return 0;
	case T_THINK:
		e = memmem(s, n, T_CLOSE, cl);
		if (e != NULL) {
			*stop = put(r, CHAT_PART_REASONING, s, (size_t)(e - s));
			r->state = T_AFTER;
			*used = (size_t)(e - s) + cl;
			return 0;
		}
		w = last ? 0 : tail_of(s, n, T_CLOSE);
		*stop = put(r, CHAT_PART_REASONING, s, n - w);
		*used = n - w;
		return 1;
	case T_AFTER:
		while (w < n && is_space(s[w]))
			w++;
		*used = w;
		if (w < n)
			r->state = T_ANSWER;
		return w == n;
	default:
		*stop = put(r, CHAT_PART_ANSWER, s, n);
		*used = n;
		return 1;
	}
}

/* The channel a harmony header names: analysis is reasoning, anything else answer. */
static enum chat_part
header_part(const char *s, size_t n)
{
	const char *c = memmem(s, n, H_CHANNEL, strlen(H_CHANNEL));
	size_t off, al = strlen("analysis");

	if (c == NULL)
		return CHAT_PART_ANSWER;
	off = (size_t)(c - s) + strlen(H_CHANNEL);
	return n - off >= al && memcmp(s + off, "analysis", al) == 0 ? CHAT_PART_REASONING :
	    CHAT_PART_ANSWER;
}

/* One step of harmony over s[0..n), as step_think. */
static int
step_harmony(struct chat_reason *r, const char *s, size_t n, bool last, size_t *used, int *stop)
{
	size_t w = 0, best = n, which = 0, keep = 0;

	*used = 0;
	if (r->state == H_HEAD) {
		const char *m = memmem(s, n, H_MSG, strlen(H_MSG));

		while (w < n && is_space(s[w]))
			w++;
		if (m != NULL) {
			r->part = header_part(s, (size_t)(m - s));
			r->state = H_BODY;
			*used = (size_t)(m - s) + strlen(H_MSG);
			return 0;
		}
		if (!last && n <= HOLD_MAX && (w == n || s[w] == '<'))
			return 1;	/* a header under way */
		r->part = CHAT_PART_ANSWER;	/* no header: plain text is the answer */
		r->state = H_BODY;
		return 0;
	}
	for (size_t i = 0; i < sizeof h_ends / sizeof h_ends[0]; i++) {
		const char *e = memmem(s, n, h_ends[i], strlen(h_ends[i]));

		if (e != NULL && (size_t)(e - s) < best) {
			best = (size_t)(e - s);
			which = i;
		}
	}
	if (best < n) {
		*stop = put(r, r->part, s, best);
		r->state = H_HEAD;
		/* an end tag is consumed; <|start|> and <|channel|> begin the next header */
		*used = best + (which < 3 ? strlen(h_ends[which]) : 0);
		return 0;
	}
	for (size_t i = 0; !last && i < sizeof h_ends / sizeof h_ends[0]; i++) {
		size_t k = tail_of(s, n, h_ends[i]);

		keep = k > keep ? k : keep;
	}
	*stop = put(r, r->part, s, n - keep);
	*used = n - keep;
	return 1;
}

/* Run the held text through the states; last: no more will come. */
static int
drain(struct chat_reason *r, bool last)
{
	size_t off = 0;
	int stop = 0;

	while (stop == 0) {
		size_t used = 0;
		int wait = r->style == CHAT_REASON_HARMONY ?
		    step_harmony(r, r->hold.p + off, r->hold.n - off, last, &used, &stop) :
		    step_think(r, r->hold.p + off, r->hold.n - off, last, &used, &stop);

		off += used;
		if (wait || off == r->hold.n)
			break;
	}
	memmove(r->hold.p, r->hold.p + off, r->hold.n - off);
	r->hold.n -= off;
	return stop;
}

int
chat_reason_feed(struct chat_reason *r, const char *s, size_t n)
{
	if (n == 0)
		return 0;
	if (kvc_buf_append(&r->hold, s, n) != 0) {
		r->oom = true;
		return 0;
	}
	return drain(r, false);
}

/* s[0..*n) without white space at either end: the start, and *n shortened. */
static size_t
trim(const char *s, size_t *n)
{
	size_t a = 0;

	while (a < *n && is_space(s[a]))
		a++;
	while (*n > a && is_space(s[*n - 1]))
		(*n)--;
	*n -= a;
	return a;
}

int
chat_reason_end(struct chat_reason *r)
{
	int stop = r->hold.n > 0 ? drain(r, true) : 0;
	size_t n = r->reasoning.n, a = trim(r->reasoning.p ? r->reasoning.p : "", &n);

	/* Stored and rendered again stripped, as the templates strip it. */
	if (r->reasoning.p != NULL) {
		memmove(r->reasoning.p, r->reasoning.p + a, n);
		r->reasoning.n = n;
	}
	if (kvc_buf_append(&r->reasoning, "", 1) != 0 || kvc_buf_append(&r->answer, "", 1) != 0)
		r->oom = true;
	else {
		r->reasoning.n--;
		r->answer.n--;
	}
	return stop;
}

bool
chat_reason_in_answer(const struct chat_reason *r)
{
	return r->state == T_ANSWER || (r->state == H_BODY && r->part == CHAT_PART_ANSWER);
}

void
chat_reason_free(struct chat_reason *r)
{
	kvc_buf_free(&r->hold);
	kvc_buf_free(&r->answer);
	kvc_buf_free(&r->reasoning);
}
