/*
 * test_think.c: the REPL's split of a streaming reply into reasoning and
 * answer (src/cli/repl/think.c), fed in pieces that cut the tags anywhere:
 * at a terminal everything is shown (the reasoning dimmed), piped only the
 * answer; a prompt that opened the block leaves the reply inside it.
 */
#include "test.h"

#include <unistd.h>

#include "cli/repl/repl.h"

/* Feeds pieces to a fresh stream state and returns what reached stdout. */
static const char *
run(bool tty, enum repl_think_state start, const char *const *pieces)
{
	static char out[4096];
	struct kvc_repl r;
	char path[] = "/tmp/test_think.XXXXXX";
	int fd = mkstemp(path), saved = dup(1);
	FILE *f;
	size_t n;

	memset(&r, 0, sizeof r);
	r.tty = tty;
	r.stream.started = true;
	r.stream.state = start;
	fflush(stdout);
	dup2(fd, 1);
	for (size_t i = 0; pieces[i]; i++)
		repl_think_text(&r, pieces[i], strlen(pieces[i]));
	repl_think_end(&r);
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
	static const char *const split[] = { "  <thi", "nk>\nreason", "ing 1 < 2</th", "ink>", "\n\nAns", "wer.", NULL };
	static const char *const plain[] = { "Just ", "<b>an</b> answer", NULL };
	static const char *const opened[] = { "still reasoning\n<", "/think>\n\n42", NULL };
	static const char *const cut[] = { "<think>never closed", NULL };
	const char *s;

	s = run(false, REPL_THINK_START, split);
	test_cond(strcmp(s, "Answer.") == 0, "piped: only the answer, got [%s]", s);
	s = run(true, REPL_THINK_START, split);
	test_cond(strcmp(s, "<think>\nreasoning 1 < 2</think>\n\nAnswer.") == 0, "tty: all, got [%s]", s);
	s = run(false, REPL_THINK_START, plain);
	test_cond(strcmp(s, "Just <b>an</b> answer") == 0, "no reasoning: as it is, got [%s]", s);
	s = run(false, REPL_THINKING, opened);
	test_cond(strcmp(s, "42") == 0, "prompt opened the block: got [%s]", s);
	s = run(false, REPL_THINK_START, cut);
	test_cond(strcmp(s, "") == 0, "reasoning cut off: nothing piped, got [%s]", s);
	s = run(true, REPL_THINK_START, cut);
	test_cond(strcmp(s, "<think>never closed") == 0, "reasoning cut off at a tty: shown, got [%s]", s);
	return test_done();
}
