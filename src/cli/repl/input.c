/*
 * input.c: reading one message at the terminal with readline: Ctrl-C
 * clears the line being typed, a trailing backslash continues a line, and
 * """ ... """ wraps several lines (Ctrl-D inside one drops it).
 *
 * readline's blocking call cannot be woken by a signal, so the line is read
 * through its callback interface around select(), which SIGINT interrupts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <termios.h>

#include <readline/readline.h>

#include "repl.h"

/*
 * readline's callback interface calls a handler without a user argument, so
 * the line it delivers passes through these file-local variables.
 */
static char *rl_line_got;
static bool rl_line_done;

static void
rl_on_line(char *line)
{
	rl_line_got = line;
	rl_line_done = true;
	rl_callback_handler_remove();
}

/* One line with Ctrl-C clearing it: NULL at EOF; *cancelled when Ctrl-C was pressed. */
static char *
read_line(struct kvc_repl *r, const char *prompt, bool *cancelled)
{
	*cancelled = false;
	rl_line_got = NULL;
	rl_line_done = false;
	*r->interrupt = 0;
	rl_callback_handler_install(prompt, rl_on_line);
	while (!rl_line_done) {
		fd_set fds;
		int n;

		FD_ZERO(&fds);
		FD_SET(fileno(rl_instream), &fds);
		n = select(fileno(rl_instream) + 1, &fds, NULL, NULL, NULL);
		if (n < 0 && errno == EINTR) {
			if (*r->interrupt) {
				*r->interrupt = 0;
				/*
				 * readline has the terminal's echo off: say "^C" once
				 * after what was typed, as a shell does, then drop it.
				 * The cursor goes to the line's end first: on a line
				 * wrapped over several rows it may sit on an earlier
				 * one, and the new prompt would be drawn over the
				 * rows below, leaving their text behind it.
				 */
				rl_point = rl_end;
				rl_redisplay();
				fputs("^C", rl_outstream ? rl_outstream : stdout);
				rl_replace_line("", 0);
				rl_crlf();
				rl_callback_handler_remove();
				*cancelled = true;
				return NULL;
			}
			continue;
		}
		if (n < 0)
			break;
		rl_callback_read_char();
	}
	return rl_line_got;
}

static bool
ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);

	return n >= m && memcmp(s + n - m, suf, m) == 0;
}

bool
repl_tty_echoes_ctl(void)
{
	struct termios t;

	return tcgetattr(0, &t) == 0 && (t.c_lflag & ECHO) && (t.c_lflag & ECHOCTL);
}

char *
repl_read_input(struct kvc_repl *r, const char *prompt)
{
	struct kvc_buf b = {0};
	bool cancelled, block = false;
	char *line;

	for (;;) {
		line = read_line(r, b.n || block ? "... " : prompt, &cancelled);
		if (cancelled) {
			kvc_buf_free(&b);
			return strdup("");
		}
		if (line == NULL) {
			if (b.n == 0 && !block) {
				kvc_buf_free(&b);
				return NULL;
			}
			if (block) {
				/* An unfinished block is not sent half-typed: dropped, as by Ctrl-C. */
				repl_notice(r, "the unfinished \"\"\" block was discarded (Ctrl-D)");
				kvc_buf_free(&b);
				return strdup("");
			}
			break;	/* EOF ends a line continued with a backslash */
		}
		if (!block && b.n == 0 && strncmp(line, "\"\"\"", 3) == 0) {
			const char *rest = line + 3;

			block = true;
			if (strlen(rest) >= 3 && ends_with(rest, "\"\"\"")) {
				(void)kvc_buf_append(&b, rest, strlen(rest) - 3);
				free(line);
				break;
			}
			(void)kvc_buf_append(&b, rest, strlen(rest));
			if (rest[0] != '\0')
				(void)kvc_buf_append(&b, "\n", 1);
			free(line);
			continue;
		}
		if (block) {
			if (ends_with(line, "\"\"\"")) {
				(void)kvc_buf_append(&b, line, strlen(line) - 3);
				free(line);
				/* No trailing newline from the closing line. */
				while (b.n > 0 && b.p[b.n - 1] == '\n')
					b.n--;
				break;
			}
			(void)kvc_buf_append(&b, line, strlen(line));
			(void)kvc_buf_append(&b, "\n", 1);
			free(line);
			continue;
		}
		if (ends_with(line, "\\")) {
			(void)kvc_buf_append(&b, line, strlen(line) - 1);
			(void)kvc_buf_append(&b, "\n", 1);
			free(line);
			continue;
		}
		(void)kvc_buf_append(&b, line, strlen(line));
		free(line);
		break;
	}
	if (kvc_buf_append(&b, "", 0) != 0) {
		kvc_buf_free(&b);
		return strdup("");
	}
	b.p[b.n] = '\0';
	return b.p;
}
