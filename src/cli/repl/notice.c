/*
 * notice.c: the chat program's lines on stderr: errors (red) and notices
 * (yellow), coloured only on a terminal. stdout is flushed first so the
 * lines come in order when both go to the same place.
 */
#include <stdarg.h>
#include <stdio.h>

#include "repl.h"
#include "cli/colour.h"

void
repl_error(struct kvc_repl *r, const char *fmt, ...)
{
	bool color = r != NULL && r->tty && kvc_use_color(2);
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%skvchat: ", kvc_sgr(color, KVC_SGR_RED));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", kvc_sgr(color, KVC_SGR_RESET));
}

void
repl_notice(void *arg, const char *line)
{
	struct kvc_repl *r = arg;
	bool color = r->tty && kvc_use_color(2) && r->color;

	fflush(stdout);
	fprintf(stderr, "%skvchat: %s%s\n", kvc_sgr(color, KVC_SGR_YELLOW), line,
	    kvc_sgr(color, KVC_SGR_RESET));
}
