/*
 * turn.c: one turn of the chat and what follows it: the reply streamed to
 * stdout, the stats line, the --stats-json record; and switching to another
 * conversation. Both the loops and the /commands (/retry, /new, /resume)
 * come here.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "repl.h"
#include "cli/colour.h"

/* conv_io.on_text: the reply as it comes. */
static int
on_text(void *arg, const char *s, size_t n)
{
	(void)arg;
	fwrite(s, 1, n, stdout);
	fflush(stdout);
	return 0;
}

void
repl_print_stats(struct kvc_repl *r, FILE *f, const struct conv_stats *s)
{
	bool color = r->color && f == stdout;

	fprintf(f, "%s[ttft %.0f ms | prompt %d: %d reused, %d computed, %.0f tok/s | "
	    "%d tokens, %.1f tok/s | ctx %d/%d", kvc_sgr(color, KVC_SGR_DIM), s->ttft_ms,
	    s->prompt_tokens, s->reused_tokens, s->prefill_tokens, s->prefill_tps,
	    s->gen_tokens, s->decode_tps, s->context_used, s->context_total);
	if (s->dropped_tokens)
		fprintf(f, " | context full: dropped %d tokens of old exchanges", s->dropped_tokens);
	if (s->resumed_from_snapshot)
		fprintf(f, " | resumed from snapshot");
	if (s->rebuilt)
		fprintf(f, " | rebuilt");
	if (s->interrupted)
		fprintf(f, " | interrupted");
	if (s->ctx_full)
		fprintf(f, " | stopped: context full");
	fprintf(f, "]%s\n", kvc_sgr(color, KVC_SGR_RESET));
	fflush(f);
}

/* One JSON object per turn, appended to --stats-json's file. */
static void
write_stats_json(struct kvc_repl *r, const struct conv_stats *s)
{
	struct kvc_buf b = {0};
	const char *title = conv_title(r->cur);
	FILE *f;
	int rc;

	rc = kvc_buf_printf(&b, "{\"turn\":%d,\"conversation_id\":%" PRId64 ",\"title\":",
	    r->turn, conv_id(r->cur));
	rc = rc ? rc : kvc_json_str(&b, title, title ? strlen(title) : 0);
	rc = rc ? rc : kvc_buf_printf(&b, ",\"prompt_tokens\":%d,\"reused_tokens\":%d,"
	    "\"prefill_tokens\":%d,\"gen_tokens\":%d,\"ttft_ms\":%.3f,\"prefill_tps\":%.3f,"
	    "\"decode_tps\":%.3f,\"context_used\":%d,\"context_total\":%d,"
	    "\"resumed_from_snapshot\":%s,\"rebuilt\":%s,\"dropped_tokens\":%d,"
	    "\"interrupted\":%s,\"prefill_tok_s\":%.3f,\"decode_tok_s\":%.3f,\"ctx_used\":%d,"
	    "\"ctx_size\":%d,\"store_errors\":%d}\n", s->prompt_tokens, s->reused_tokens, s->prefill_tokens,
	    s->gen_tokens, s->ttft_ms, s->prefill_tps, s->decode_tps, s->context_used,
	    s->context_total, s->resumed_from_snapshot ? "true" : "false",
	    s->rebuilt ? "true" : "false", s->dropped_tokens, s->interrupted ? "true" : "false",
	    s->prefill_tps, s->decode_tps, s->context_used, s->context_total,
	    s->store_errors);
	if (rc == 0) {
		f = fopen(r->stats_json, "a");
		if (f == NULL || fwrite(b.p, 1, b.n, f) != b.n || fclose(f) != 0)
			repl_error(r, "cannot append to %s", r->stats_json);
	}
	kvc_buf_free(&b);
}

int
repl_turn(struct kvc_repl *r, const char *text, bool retry)
{
	struct conv_stats s;
	struct conv_io io;
	char err[512];
	const char *why;
	int rc;

	/* Refused before generating: a reply that could not be kept is not worth its time. */
	if (sess_readonly(r->st, &why)) {
		repl_error(r, "%s is open read-only (%s): /list, /resume and /export work, "
		    "but no turn can be saved", r->db_path, why);
		return 1;
	}
	memset(&io, 0, sizeof io);
	io.on_text = on_text;
	io.arg = r;
	io.interrupt = r->interrupt;
	io.t_enter = kvc_now();
	*r->interrupt = 0;
	rc = retry ? conv_retry(r->cur, &io, &s, err, sizeof err) :
	    conv_turn(r->cur, text, &io, &s, err, sizeof err);
	*r->interrupt = 0;
	if (rc) {
		repl_error(r, "%s", err);
		return 1;
	}
	r->turn++;
	if (r->tty) {
		printf("%s\n", s.interrupted ? " ^C" : "");
		repl_print_stats(r, stdout, &s);
	} else {
		printf("\n\n");
		fflush(stdout);
		repl_print_stats(r, stderr, &s);
	}
	if (r->stats_json)
		write_stats_json(r, &s);
	return 0;
}

void
repl_switch(struct kvc_repl *r, struct conv *c)
{
	r->cur = c;
}
