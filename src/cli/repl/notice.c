/*
 * notice.c: the chat program's lines on stderr: errors (red) and notices
 * (yellow), coloured only on a terminal. stdout is flushed first so the
 * lines come in order when both go to the same place. Also the notice of
 * a --threads cut to the cores (repl_cap_threads), which the subcommands
 * share: it calls nothing above this file.
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

void
repl_cap_threads(struct kvc_engine_params *ep)
{
	int cores = kvc_n_cores();

	/* 999 threads on 2 cores took turns: a 67 s first token, 0.6 tok/s. */
	if (cores > 0 && ep->n_threads > cores) {
		fprintf(stderr, "kvchat: --threads %d is more than the %d cores this process may "
		    "run on; using %d\n", ep->n_threads, cores, cores);
		ep->n_threads = cores;
	}
}
