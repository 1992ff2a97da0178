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

/* kvc engine prefill hook: report the work, stop it when asked. */
static int
work_hook(void *arg, int done, int total)
{
	struct conv_mgr *m = arg;
	struct conv_work *w = &m->work;

	if (w->interrupt != NULL && *w->interrupt)
		return 1;
	if (m->p.progress == NULL)
		return 0;
	if (!w->started) {
		w->started = true;
		m->p.progress(m->p.progress_arg, w->label, 0, (uint64_t)total);
	}
	if (done > 0)
		m->p.progress(m->p.progress_arg, w->label, (uint64_t)done, (uint64_t)total);
	return 0;
}

void
conv_work_begin(struct conv_mgr *m, const char *label, volatile sig_atomic_t *interrupt)
{
	m->work.label = label;
	m->work.interrupt = interrupt;
	m->work.started = false;
	eng_set_prefill_hook(m->e, work_hook, m);
}

void
conv_work_end(struct conv_mgr *m)
{
	eng_set_prefill_hook(m->e, NULL, NULL);
	if (m->work.started && m->p.progress != NULL)
		m->p.progress(m->p.progress_arg, NULL, 0, 0);
	m->work.started = false;
	m->work.interrupt = NULL;
}
