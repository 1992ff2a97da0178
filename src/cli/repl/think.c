/*
 * think.c: a reply's reasoning shown apart from its answer. The
 * conversation layer tells the two apart (conv_io.on_reasoning and
 * on_text); here they are drawn: at a terminal the reasoning streams
 * dimmed, or as one folded line "[thinking: N tokens]" with /set
 * show-thinking off; piped, only the answer is printed unless
 * --show-thinking asks for the reasoning too (then plain, a blank line
 * before the answer). /history shows a stored reply's reasoning the same way.
 * At a terminal both are wrapped between words at its width (cli/wrap.c).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "repl.h"
#include "cli/colour.h"

/* Whether the reasoning is printed: at a terminal unless folded; piped only when asked. */
static bool
shown(const struct kvc_repl *r)
{
	return r->tty ? r->show_thinking != 0 : r->show_thinking > 0;
}

/* Whether it is folded to one line: at a terminal with show-thinking off. */
static bool
folded(const struct kvc_repl *r)
{
	return r->tty && r->show_thinking == 0;
}

void
repl_think_reasoning(struct kvc_repl *r, const char *s, size_t n)
{
	struct repl_think *t = &r->stream;

	if (t->state == REPL_ANSWER || (!shown(r) && !folded(r)))
		return;
	if (t->state == REPL_THINK_NONE) {
		t->state = REPL_THINKING;
		kvc_wrap_begin(&r->wrap, kvc_wrap_width(STDOUT_FILENO));
		printf("%s%s", kvc_sgr(r->color, KVC_SGR_DIM), folded(r) ? "[thinking" : "");
	}
	if (!folded(r))
		kvc_wrap_put(&r->wrap, stdout, s, n);
	fflush(stdout);
}

/* The reasoning shown so far is over: its colour reset, the folded line finished. */
static void
close_reasoning(struct kvc_repl *r)
{
	if (r->stream.state != REPL_THINKING)
		return;
	if (folded(r))
		printf(": %d tokens]%s\n", r->stream.n_tokens, kvc_sgr(r->color, KVC_SGR_RESET));
	else
		printf("%s\n\n", kvc_sgr(r->color, KVC_SGR_RESET));
}

void
repl_think_text(struct kvc_repl *r, const char *s, size_t n)
{
	if (r->stream.state != REPL_ANSWER) {
		/* the answer starts at column 0 of its own row */
		close_reasoning(r);
		kvc_wrap_begin(&r->wrap, kvc_wrap_width(STDOUT_FILENO));
	}
	r->stream.state = REPL_ANSWER;
	kvc_wrap_put(&r->wrap, stdout, s, n);
	fflush(stdout);
}

void
repl_think_end(struct kvc_repl *r)
{
	close_reasoning(r);
	r->stream.state = REPL_THINK_NONE;
	fflush(stdout);
}

void
repl_think_show(struct kvc_repl *r, const char *reasoning)
{
	if (reasoning == NULL || (!shown(r) && !folded(r)))
		return;
	if (folded(r)) {
		printf("%s[thinking: %zu bytes, /set show-thinking on shows it]%s\n",
		    kvc_sgr(r->color, KVC_SGR_DIM), strlen(reasoning), kvc_sgr(r->color, KVC_SGR_RESET));
		return;
	}
	printf("%s[thinking]\n", kvc_sgr(r->color, KVC_SGR_DIM));
	fputs(reasoning, stdout);
	printf("%s\n[answer]\n", kvc_sgr(r->color, KVC_SGR_RESET));
}
