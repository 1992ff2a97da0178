/*
 * loop.c: the two ways of talking to the model. At a terminal: readline
 * with history and completion, /commands, a bold prompt. Otherwise (batch
 * mode): each line of stdin is one user message, and the program ends at
 * the end of input.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "cmd.h"
#include "cli/colour.h"

/*
 * A history file that cannot be written is not an error (the chat works
 * without it), but the user should know before typing anything worth
 * recalling: its (private) folder is probed with a file of our own.
 */
static bool
history_writable(struct kvc_repl *r, const char *hist)
{
	char probe[4200];
	int fd;

	snprintf(probe, sizeof probe, "%s.probe.%ld", hist, (long)getpid());
	fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
	if (fd >= 0) {
		close(fd);
		unlink(probe);
		return true;
	}
	repl_error(r, "warning: the line history will not be saved: %s: "
	    "cannot write in its folder (%s; check $XDG_STATE_HOME)", hist, strerror(errno));
	return false;
}

int
repl_loop_terminal(struct kvc_repl *r)
{
	char hist[4096], prompt[64], err[1024], line[512];
	char *text;
	bool keep;

	using_history();
	stifle_history(2000);
	/* Without a private folder for it, the history is not kept. */
	keep = false;
	if (repl_xdg_path(hist, sizeof hist, "XDG_STATE_HOME", ".local/state", "kvchat/history",
	    err, sizeof err) != 0)
		repl_error(r, "warning: the line history will not be saved: %s", err);
	else if (repl_private_dir(hist, err, sizeof err) != 0)
		repl_error(r, "warning: the line history will not be saved: %s: %s", hist, err);
	else
		keep = history_writable(r, hist);
	if (keep)
		repl_history_load(hist);
	rl_readline_name = "kvchat";
	repl_complete_begin(r);
	rl_catch_signals = 0;

	repl_describe(r, line, sizeof line);
	printf("kvchat: %s. /help for commands.\n", line);
	/* Coming back: where the conversation was left (--recap). */
	if (r->recap > 0 && conv_n_msgs(r->cur) > 0)
		repl_show_msgs(r, r->recap, true);
	snprintf(prompt, sizeof prompt, "%s>>> %s", kvc_sgr(r->color, KVC_SGR_BOLD),
	    kvc_sgr(r->color, KVC_SGR_RESET));
	/* \001 \002 tell readline the escapes take no columns. */
	if (r->color)
		snprintf(prompt, sizeof prompt, "\001%s\002>>> \001%s\002", KVC_SGR_BOLD,
		    KVC_SGR_RESET);
	while (!r->quit) {
		text = repl_read_input(r, prompt);
		if (text == NULL) {
			putchar('\n');
			break;
		}
		if (text[0] == '\0') {
			free(text);
			continue;
		}
		add_history(text);
		/* "//text" sends "/text" as a message. */
		if (text[0] == '/' && text[1] != '/')
			(void)cmd_exec(r, text);
		else
			(void)repl_turn(r, text[0] == '/' ? text + 1 : text, false);
		free(text);
	}
	if (keep && repl_history_save(hist, err, sizeof err) != 0)
		repl_error(r, "%s", err);
	repl_complete_end();
	return 0;
}

/*
 * "\n" (two characters) in a non-interactive line stands for a newline, and
 * "\\" for one backslash, so "\\n" is a backslash and an n.
 */
static void
unescape_newlines(char *s)
{
	char *w = s;

	for (const char *p = s; *p; p++) {
		if (p[0] == '\\' && (p[1] == 'n' || p[1] == '\\')) {
			*w++ = p[1] == 'n' ? '\n' : '\\';
			p++;
		} else {
			*w++ = *p;
		}
	}
	*w = '\0';
}

/*
 * Why line (n bytes, newline cut) cannot be a message, or NULL. A NUL byte
 * would cut the message short without a word, so it is refused too.
 */
static const char *
bad_line(const char *line, size_t n)
{
	if (strlen(line) != n)
		return "it holds a NUL byte";
	if (kvc_utf8_valid_prefix(line, n) != n)
		return "it is not valid UTF-8";
	return NULL;
}

/*
 * Ctrl-C stops a batch as it stops a shell script: at once, saying where,
 * with status 130. What was answered before stays stored; the line in
 * flight was not answered (stopped in its prefill or a rebuild: nothing
 * of it stored) or its reply was cut off (kept, marked interrupted); the
 * lines after it are not sent.
 */
/* n_before: messages before line no was sent; -1: it was not. */
static int
batch_interrupted(struct kvc_repl *r, long no, int n_before)
{
	if (n_before < 0)
		repl_error(r, "stopped by Ctrl-C before line %ld: it and the lines after it were "
		    "not sent", no);
	else if (conv_n_msgs(r->cur) >= n_before + 2)
		repl_error(r, "stopped by Ctrl-C: the reply to line %ld was cut off (kept, marked "
		    "interrupted); the lines after it were not sent", no);
	else
		repl_error(r, "stopped by Ctrl-C: line %ld was not answered, nor the lines after "
		    "it", no);
	return 130;
}

int
repl_loop_batch(struct kvc_repl *r)
{
	char *line = NULL;
	const char *why;
	size_t cap = 0;
	ssize_t n;
	long no = 0;
	int status = 0, rc, n_before;

	/*
	 * A line that cannot be a message (bad bytes, or a turn refused as too
	 * long) is reported by its number and skipped: the batch goes on and
	 * the exit status says something was left out. Other failures end it.
	 */
	while ((n = getline(&line, &cap, stdin)) >= 0) {
		no++;
		/* A Ctrl-C between turns (or while the model loaded) stops here. */
		if (*r->interrupt) {
			status = batch_interrupted(r, no, -1);
			break;
		}
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0)
			continue;
		if ((why = bad_line(line, (size_t)n)) != NULL) {
			repl_error(r, "line %ld skipped: %s", no, why);
			status = 1;
			continue;
		}
		unescape_newlines(line);
		n_before = conv_n_msgs(r->cur);
		rc = repl_turn(r, line, false);
		if (rc == KVC_EINTR) {
			status = batch_interrupted(r, no, n_before);
			break;
		}
		if (rc == KVC_ERANGE) {
			repl_error(r, "line %ld skipped", no);
			status = 1;
			continue;
		}
		if (rc != 0) {
			status = 1;
			break;
		}
	}
	if (n < 0 && *r->interrupt) {
		/* Ctrl-C while waiting for input: everything is saved, leave like a shell tool. */
		status = 130;
	}
	free(line);
	return status;
}
