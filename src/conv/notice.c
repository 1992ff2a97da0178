/*
 * notice.c: one-line notices to the caller of the conversation layer, and
 * the writes that failed without stopping the conversation: each one is
 * said and counted, and the next turn's figures report the count.
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "conv_int.h"

void
conv_notice(struct conv_mgr *m, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (m->p.notice == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	m->p.notice(m->p.notice_arg, line);
}

void
conv_store_failed(struct conv *c, const char *what, const char *why)
{
	c->store_errors++;
	conv_notice(c->m, "conversation %" PRId64 ": could not save the %s (%s)", c->id, what,
	    why != NULL && why[0] != '\0' ? why : "no reason given");
}
