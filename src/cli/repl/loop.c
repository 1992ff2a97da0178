/*
 * loop.c: the two ways of talking to the model. At a terminal: readline
 * with history and completion, /commands, a bold prompt. Otherwise (batch
 * mode): each line of stdin is one user message, and the program ends at
 * the end of input.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "cmd.h"
#include "cli/colour.h"

int
repl_loop_terminal(struct kvc_repl *r)
{
	char hist[4096], prompt[64], line[512];
	char *text;

	repl_xdg_path(hist, sizeof hist, "XDG_STATE_HOME", ".local/state", "kvchat/history");
	(void)repl_mkdir_parents(hist);
	using_history();
	stifle_history(2000);
	repl_history_load(hist);
	rl_readline_name = "kvchat";
	repl_complete_begin(r);
	rl_catch_signals = 0;

	repl_describe(r, line, sizeof line);
	printf("kvchat: %s. /help for commands.\n", line);
	/* Coming back: where the conversation was left (--recap). */
	if (r->recap > 0 && conv_n_msgs(r->cur) > 0)
		repl_show_msgs(r, r->recap);
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
	repl_history_save(hist);
	repl_complete_end();
	return 0;
}

/* "\n" (two characters) in a non-interactive line stands for a newline. */
static void
unescape_newlines(char *s)
{
	char *w = s;

	for (const char *p = s; *p; p++) {
		if (p[0] == '\\' && p[1] == 'n') {
			*w++ = '\n';
			p++;
		} else {
			*w++ = *p;
		}
	}
	*w = '\0';
}

int
repl_loop_batch(struct kvc_repl *r)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int status = 0;

	while ((n = getline(&line, &cap, stdin)) >= 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0)
			continue;
		unescape_newlines(line);
		if (kvc_utf8_valid_prefix(line, strlen(line)) != strlen(line)) {
			repl_error(r, "input line is not valid UTF-8");
			status = 1;
			break;
		}
		if (repl_turn(r, line, false) != 0) {
			status = 1;
			break;
		}
	}
	if (n < 0 && *r->interrupt && status == 0) {
		/* Ctrl-C while waiting for input: everything is saved, leave like a shell tool. */
		status = 130;
	}
	free(line);
	return status;
}
