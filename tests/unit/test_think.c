/*
 * test_think.c: how the REPL draws a reply's two parts (src/cli/repl/think.c),
 * which the conversation layer has told apart: at a terminal the reasoning
 * is shown (dimmed with colour) or folded to one line, piped only the
 * answer unless --show-thinking; /history shows a stored reasoning the same way.
 */
#include "test.h"

#include <unistd.h>

#include "cli/repl/repl.h"

/* A reply as the parts came: 'R' reasoning, 'A' answer, then the text. */
static const char *const reply[] = { "Rreason", "Ring 1 < 2", "AAnswer", "A.", NULL };

/* Runs fn with stdout going to a file; returns what reached it. */
static const char *
capture(bool tty, int show, int tokens, const char *const *parts, const char *stored)
{
	static char out[4096];
	struct kvc_repl r;
	char path[] = "/tmp/test_think.XXXXXX";
	int fd = mkstemp(path), saved = dup(1);
	FILE *f;
	size_t n;

	memset(&r, 0, sizeof r);
	r.tty = tty;
	r.show_thinking = show;
	fflush(stdout);
	dup2(fd, 1);
	for (size_t i = 0; parts && parts[i]; i++) {
		r.stream.n_tokens = tokens;
		if (parts[i][0] == 'R')
			repl_think_reasoning(&r, parts[i] + 1, strlen(parts[i] + 1));
		else
			repl_think_text(&r, parts[i] + 1, strlen(parts[i] + 1));
	}
	if (parts)
		repl_think_end(&r);
	if (stored)
		repl_think_show(&r, stored);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	f = fdopen(fd, "r");
	rewind(f);
	n = fread(out, 1, sizeof out - 1, f);
	out[n] = '\0';
	fclose(f);
	unlink(path);
	return out;
}

int
main(void)
{
	static const char *const cut[] = { "Rnever closed", NULL };
	static const char *const plain[] = { "AJust ", "A<b>an</b> answer", NULL };
	const char *s;

	s = capture(false, -1, 5, reply, NULL);
	test_cond(strcmp(s, "Answer.") == 0, "piped: only the answer, got [%s]", s);
	s = capture(false, 1, 5, reply, NULL);
	test_cond(strcmp(s, "reasoning 1 < 2\n\nAnswer.") == 0, "piped, --show-thinking: got [%s]", s);
	s = capture(true, -1, 5, reply, NULL);
	test_cond(strcmp(s, "reasoning 1 < 2\n\nAnswer.") == 0, "tty: both, got [%s]", s);
	s = capture(true, 0, 7, reply, NULL);
	test_cond(strcmp(s, "[thinking: 7 tokens]\nAnswer.") == 0, "tty, folded: got [%s]", s);
	s = capture(false, -1, 3, plain, NULL);
	test_cond(strcmp(s, "Just <b>an</b> answer") == 0, "no reasoning: as it is, got [%s]", s);
	s = capture(false, -1, 3, cut, NULL);
	test_cond(strcmp(s, "") == 0, "reasoning cut off: nothing piped, got [%s]", s);
	s = capture(true, -1, 3, cut, NULL);
	test_cond(strcmp(s, "never closed\n\n") == 0, "reasoning cut off at a tty: got [%s]", s);
	s = capture(true, -1, 0, NULL, "Stored.");
	test_cond(strcmp(s, "[thinking]\nStored.\n[answer]\n") == 0, "/history: got [%s]", s);
	s = capture(true, 0, 0, NULL, "Stored.");
	test_cond(strstr(s, "[thinking: 7 bytes") == s, "/history folded: got [%s]", s);
	s = capture(false, -1, 0, NULL, "Stored.");
	test_cond(strcmp(s, "") == 0, "/history piped: got [%s]", s);
	return test_done();
}
