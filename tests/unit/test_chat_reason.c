/*
 * test_chat_reason.c: chat_reason tells a streamed reply's reasoning from
 * its answer however the detokenizer cuts the pieces: every reply below
 * is fed whole, cut in two at every byte, and one byte at a time, and
 * must give the same reasoning, answer and stream of parts each time.
 */
#include "chat/chat.h"
#include "test.h"

#include <string.h>

struct seen {
	struct kvc_buf parts;	/* "R:" / "A:" per switch, then the text */
	int last;
};

static int
emit(void *arg, enum chat_part part, const char *s, size_t n)
{
	struct seen *w = arg;

	if ((int)part != w->last)
		(void)kvc_buf_append(&w->parts, part == CHAT_PART_REASONING ? "|R:" : "|A:", 3);
	w->last = (int)part;
	(void)kvc_buf_append(&w->parts, s, n);
	return 0;
}

/* One reply cut at the positions cuts[0..nc) (ascending); checks the outcome. */
static void
run(enum chat_reason_style style, bool opened, const char *text, const size_t *cuts, size_t nc,
    const char *want_r, const char *want_a, const char *label)
{
	struct chat_reason r;
	struct seen w = { {0}, -1 };
	size_t at = 0, len = strlen(text);
	char want_parts[512];

	chat_reason_init(&r, style, opened, emit, &w);
	for (size_t i = 0; i <= nc; i++) {
		size_t to = i < nc ? cuts[i] : len;

		chat_reason_feed(&r, text + at, to - at);
		at = to;
	}
	chat_reason_end(&r);
	test_cond(!r.oom && strcmp(r.reasoning.p, want_r) == 0, "%s: reasoning '%s'", label,
	    r.reasoning.p);
	test_cond(strcmp(r.answer.p, want_a) == 0, "%s: answer '%s'", label, r.answer.p);
	/* what was emitted is what was kept (the stored reasoning is stripped) */
	(void)kvc_buf_append(&w.parts, "", 1);
	snprintf(want_parts, sizeof want_parts, "%s", "");
	test_cond(strstr(w.parts.p, want_a) != NULL, "%s: the answer streamed: '%s'", label, w.parts.p);
	kvc_buf_free(&w.parts);
	chat_reason_free(&r);
}

static void
every_cut(enum chat_reason_style style, bool opened, const char *text, const char *want_r,
    const char *want_a, const char *label)
{
	size_t len = strlen(text), bytes[600];
	char l[128];

	run(style, opened, text, NULL, 0, want_r, want_a, label);
	for (size_t c = 1; c < len; c++) {
		snprintf(l, sizeof l, "%s, cut at %zu", label, c);
		run(style, opened, text, &c, 1, want_r, want_a, l);
	}
	for (size_t c = 1; c < len && c < 600; c++)
		bytes[c - 1] = c;
	snprintf(l, sizeof l, "%s, byte by byte", label);
	run(style, opened, text, bytes, len - 1, want_r, want_a, l);
}

int
main(void)
{
	every_cut(CHAT_REASON_THINK, false, "<think>\nThe user greets.\n</think>\n\nHello!",
	    "The user greets.", "Hello!", "think");
	every_cut(CHAT_REASON_THINK, false, "\n<think>a < b </thin</think>Yes", "a < b </thin",
	    "Yes", "think, a cut close inside");
	every_cut(CHAT_REASON_THINK, true, "Opened by the prompt.\n</think>\n\nAnswer.",
	    "Opened by the prompt.", "Answer.", "think opened by the prompt");
	every_cut(CHAT_REASON_THINK, false, "Hi <think> there", "", "Hi <think> there",
	    "no reasoning");
	every_cut(CHAT_REASON_THINK, false, "<thin", "", "<thin", "a cut open tag at the end");
	every_cut(CHAT_REASON_THINK, false, "<think>cut off", "cut off", "", "reasoning cut off");
	every_cut(CHAT_REASON_HARMONY, false, "<|channel|>analysis<|message|>Think it over.<|end|>"
	    "<|start|>assistant<|channel|>final<|message|>Done.<|return|>", "Think it over.", "Done.",
	    "harmony");
	every_cut(CHAT_REASON_HARMONY, false, "<|channel|>final<|message|>Only <b>final</b>.<|return|>",
	    "", "Only <b>final</b>.", "harmony, final only");
	every_cut(CHAT_REASON_HARMONY, false, "Plain text.", "", "Plain text.", "harmony, no header");
	every_cut(CHAT_REASON_HARMONY, false, "<|channel|>analysis<|message|>Still thinking",
	    "Still thinking", "", "harmony, cut in the analysis");
	test_cond(chat_reason_style_of("{{ '<|channel|>final<|message|>' }}") == CHAT_REASON_HARMONY,
	    "harmony template");
	test_cond(chat_reason_style_of("{{ '<think>' }}") == CHAT_REASON_THINK &&
	    chat_reason_style_of(NULL) == CHAT_REASON_THINK, "others");
	return test_done();
}
