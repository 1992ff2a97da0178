/*
 * turn.c: one turn of the chat and what follows it: the reply streamed to
 * stdout, the stats line, the --stats-json record; and switching to another
 * conversation. Both the loops and the /commands (/retry, /new, /resume)
 * come here.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "repl.h"
#include "cli/colour.h"
#include "cli/json_text.h"
#include "tokenizer/tokenizer.h"

/* conv_io.on_text: the answer as it comes. */
static int
on_text(void *arg, const char *s, size_t n)
{
	repl_think_text(arg, s, n);
	return 0;
}

/* conv_io.on_reasoning: the reasoning as it comes. */
static int
on_reasoning(void *arg, const char *s, size_t n)
{
	repl_think_reasoning(arg, s, n);
	return 0;
}

/*
 * Why the reply stopped when it was not the model ending its turn, or NULL.
 * The cap is read from the reply itself: it holds max_tokens ids and its
 * last one is not an end of turn (one that is counts as the model's end).
 */
static const char *
stop_reason(struct kvc_repl *r, const struct conv_stats *s)
{
	const struct sess_msg *m;
	int cap = conv_get_settings(r->cur)->max_tokens, n = conv_n_msgs(r->cur);

	if (s->interrupted)
		return "interrupted";
	if (s->ctx_full)
		return "context full";
	m = n > 0 ? conv_msg(r->cur, n - 1) : NULL;
	if (cap > 0 && s->gen_tokens >= cap && m != NULL && m->role == SESS_ASSISTANT &&
	    m->n_ids > 0 && !tok_is_eog(eng_tokenizer(r->e), m->ids[m->n_ids - 1]))
		return "max tokens";
	return NULL;
}

void
repl_print_stats(struct kvc_repl *r, FILE *f, const struct conv_stats *s)
{
	bool color = r->color && f == stdout;
	const char *stop = stop_reason(r, s);

	/*
	 * The turn's own tokens and the history kept from the cache, apart; what
	 * was computed is said only when it is not just the new tokens (a
	 * rebuild or a drop recomputes history too). A turn stopped before its
	 * first token has no time to first token.
	 */
	if (s->interrupted && s->gen_tokens == 0)
		fprintf(f, "%s[ttft interrupted", kvc_sgr(color, KVC_SGR_DIM));
	else
		fprintf(f, "%s[ttft %.0f ms", kvc_sgr(color, KVC_SGR_DIM), s->ttft_ms);
	fprintf(f, " | prompt %d new + %d reused", s->prompt_tokens, s->reused_tokens);
	if (s->prefill_tokens != s->prompt_tokens)
		fprintf(f, ", %d computed", s->prefill_tokens);
	fprintf(f, ", %.0f tok/s | %d tokens, %.1f tok/s | ctx %d/%d", s->prefill_tps,
	    s->gen_tokens, s->decode_tps, s->context_used, s->context_total);
	if (s->dropped_msgs || s->dropped_tokens)
		fprintf(f, " | context full: dropped %d messages (%d tokens), recomputed %d in %.0f ms",
		    s->dropped_msgs, s->dropped_tokens, s->recomputed_tokens, s->recompute_ms);
	if (s->rewrite_why)
		fprintf(f, " | cache cut back %d positions: %s", s->rewritten_tokens,
		    s->rewrite_why);
	if (s->reasoning_tokens > 0)
		fprintf(f, " | thinking %d tokens", s->reasoning_tokens);
	if (s->spec_proposed)
		fprintf(f, " | speculative: %d of %d accepted, %.2f tokens per pass", s->spec_accepted,
		    s->spec_proposed, s->forward_passes ? (double)s->gen_tokens / s->forward_passes : 0.0);
	if (s->slid_tokens)
		fprintf(f, " | context full: slid %d positions away, none recomputed", s->slid_tokens);
	if (s->resumed_from_snapshot)
		fprintf(f, " | resumed from snapshot");
	if (s->rebuilt)
		fprintf(f, " | rebuilt");
	if (stop)
		fprintf(f, " | stopped: %s", stop);
	fprintf(f, "]%s\n", kvc_sgr(color, KVC_SGR_RESET));
	fflush(f);
}

/* A rate or a time with three decimals, as the stats line rounds them; null when not finite. */
static json_t *
milli(double x)
{
	return isfinite(x) ? json_real(round(x * 1000.0) / 1000.0) : json_null();
}

int
repl_stats_record(struct kvc_buf *b, int turn, int64_t id, const char *title,
    const struct conv_stats *s, const char *stop, const struct repl_kv_facts *kv)
{
	json_t *o = json_object();
	bool bad = false;
	int rc;

	cli_json_put(o, "turn", json_integer(turn), &bad);
	cli_json_put(o, "conversation_id", json_integer(id), &bad);
	cli_json_put(o, "title", cli_json_cstr(title), &bad);
	cli_json_put(o, "stop", json_string(stop ? stop : "eos"), &bad);
	/* No reply token, no time to it: null, never a 0 that reads as instant. */
	cli_json_put(o, "ttft_ms", s->gen_tokens > 0 ? milli(s->ttft_ms) : json_null(), &bad);
	cli_json_put(o, "prompt_tokens", json_integer(s->prompt_tokens), &bad);
	cli_json_put(o, "reused_tokens", json_integer(s->reused_tokens), &bad);
	cli_json_put(o, "prefill_tokens", json_integer(s->prefill_tokens), &bad);
	cli_json_put(o, "gen_tokens", json_integer(s->gen_tokens), &bad);
	cli_json_put(o, "prefill_tps", milli(s->prefill_tps), &bad);
	cli_json_put(o, "decode_tps", milli(s->decode_tps), &bad);
	cli_json_put(o, "context_used", json_integer(s->context_used), &bad);
	cli_json_put(o, "context_total", json_integer(s->context_total), &bad);
	cli_json_put(o, "resumed_from_snapshot", json_boolean(s->resumed_from_snapshot), &bad);
	cli_json_put(o, "rebuilt", json_boolean(s->rebuilt), &bad);
	cli_json_put(o, "dropped_tokens", json_integer(s->dropped_tokens), &bad);
	cli_json_put(o, "interrupted", json_boolean(s->interrupted), &bad);
	cli_json_put(o, "prefill_tok_s", milli(s->prefill_tps), &bad);
	cli_json_put(o, "decode_tok_s", milli(s->decode_tps), &bad);
	cli_json_put(o, "ctx_used", json_integer(s->context_used), &bad);
	cli_json_put(o, "ctx_size", json_integer(s->context_total), &bad);
	cli_json_put(o, "store_errors", json_integer(s->store_errors), &bad);
	cli_json_put(o, "dropped_messages", json_integer(s->dropped_msgs), &bad);
	cli_json_put(o, "recomputed_tokens", json_integer(s->recomputed_tokens), &bad);
	cli_json_put(o, "recompute_ms", milli(s->recompute_ms), &bad);
	cli_json_put(o, "kv_type", json_string(kv->type), &bad);
	cli_json_put(o, "kv_bytes_per_pos", json_integer((json_int_t)kv->bytes_per_pos), &bad);
	cli_json_put(o, "snapshot_bytes_per_pos", json_integer((json_int_t)(kv->snap_bytes_per_pos ?
	    kv->snap_bytes_per_pos : kv->bytes_per_pos)), &bad);
	cli_json_put(o, "slid_tokens", json_integer(s->slid_tokens), &bad);
	cli_json_put(o, "spec_proposed", json_integer(s->spec_proposed), &bad);
	cli_json_put(o, "spec_accepted", json_integer(s->spec_accepted), &bad);
	cli_json_put(o, "forward_passes", json_integer(s->forward_passes), &bad);
	cli_json_put(o, "reasoning_tokens", json_integer(s->reasoning_tokens), &bad);
	cli_json_put(o, "rewritten_tokens", json_integer(s->rewritten_tokens), &bad);
	/* why earlier turns were computed again (the template rewrote them), or null */
	cli_json_put(o, "rewrite_reason", s->rewrite_why ? cli_json_cstr(s->rewrite_why) : json_null(),
	    &bad);
	/* 15 digits show the three decimals exactly: 12.5, never 12.500000000000002 */
	rc = bad ? KVC_ENOMEM : cli_json_line(o, JSON_REAL_PRECISION(15), b);
	json_decref(o);
	return rc;
}

/* One JSON object per turn, appended to --stats-json's file. */
static void
write_stats_json(struct kvc_repl *r, const struct conv_stats *s)
{
	struct kvc_buf b = {0};
	struct repl_kv_facts kv = { eng_kv_type_name(eng_kv_type(r->e)),
	    eng_kv_mem_bytes_per_pos(r->e), eng_kv_bytes_per_pos(r->e) };
	char err[1024];
	int rc, fd;

	rc = repl_stats_record(&b, r->turn, conv_id(r->cur), conv_title(r->cur), s,
	    stop_reason(r, s), &kv);
	if (rc == 0) {
		/* 0600 when created (titles are the first words of a conversation),
		 * never through a link planted by someone else. */
		fd = kvc_file_open_write(r->stats_json, true, err, sizeof err);
		if (fd >= 0) {
			rc = kvc_write_all(fd, b.p, b.n);
			rc = close(fd) != 0 ? KVC_EIO : rc;
			snprintf(err, sizeof err, "%s", r->stats_json);
		}
		if (fd < 0 || rc != 0)
			repl_error(r, "cannot append to %s", err);
	}
	kvc_buf_free(&b);
}

int
repl_turn(struct kvc_repl *r, const char *text, bool retry)
{
	struct conv_stats s;
	struct conv_io io;
	char err[512];
	int sigint;	/* *r->interrupt as the turn ended (repl.c's on_sigint) */
	int rc;

	/* A read-only store: conv refuses the turn before generating. */
	memset(&io, 0, sizeof io);
	io.on_text = on_text;
	io.on_reasoning = on_reasoning;
	io.reasoning_tokens = &r->stream.n_tokens;
	io.arg = r;
	io.interrupt = r->interrupt;
	io.t_enter = kvc_now();
	*r->interrupt = 0;
	memset(&r->stream, 0, sizeof r->stream);
	rc = retry ? conv_retry(r->cur, &io, &s, err, sizeof err) :
	    conv_turn(r->cur, text, &io, &s, err, sizeof err);
	repl_think_end(r);
	sigint = *r->interrupt;
	*r->interrupt = 0;
	if (rc == KVC_EINTR && !s.interrupted) {
		/* Stopped in the rebuild of the cache, before the turn began. */
		printf("%s", r->tty ? " ^C\n" : "");
		fprintf(stderr, "kvchat: %s; the message was not sent%s\n", err,
		    r->tty ? " (the Up key brings it back)" : "");
		return KVC_EINTR;
	}
	if (rc == KVC_EINTR) {
		/* Stopped in the prefill: the turn was taken back whole. */
		printf("%s", r->tty ? " ^C\n" : "");
		fprintf(stderr, "kvchat: interrupted while reading the message (%d of %d positions "
		    "computed): nothing was stored%s\n", s.prefill_tokens, s.prompt_tokens,
		    r->tty ? "; the Up key brings the message back" : "");
		repl_print_stats(r, r->tty ? stdout : stderr, &s);
		return KVC_EINTR;
	}
	if (rc && !retry && sess_readonly(r->st, NULL)) {
		/*
		 * Why the store is read-only was said at start; this names the
		 * line refused (its start, if long), so a batch's log shows which
		 * lines were not sent.
		 */
		size_t n = strcspn(text, "\n");

		n = kvc_utf8_valid_prefix(text, n > 60 ? 60 : n);
		repl_error(r, "not sent, the database being read-only: \"%.*s%s\"", (int)n, text,
		    text[n] != '\0' ? "..." : "");
		return rc;
	}
	if (rc) {
		repl_error(r, "%s", err);
		return rc;
	}
	r->turn++;
	if (r->tty) {
		printf("%s\n", s.interrupted && sigint != 1 ? " ^C" : "");
		if (!r->quiet)
			repl_print_stats(r, stdout, &s);
	} else {
		printf("\n\n");
		fflush(stdout);
		repl_print_stats(r, stderr, &s);
	}
	if (r->stats_json)
		write_stats_json(r, &s);
	return sigint ? KVC_EINTR : 0;
}

void
repl_switch(struct kvc_repl *r, struct conv *c)
{
	r->cur = c;
}

void
repl_describe(struct kvc_repl *r, char *buf, size_t len)
{
	char title[256];

	/* The title as stored may hold anything: shown cleaned, as /list does. */
	(void)repl_title(conv_title(r->cur), title, sizeof title);
	if (conv_id(r->cur) == 0)
		snprintf(buf, len, "new conversation (%s)", title);
	else
		snprintf(buf, len, "conversation %" PRId64 " (%s), %d messages", conv_id(r->cur),
		    title, conv_n_msgs(r->cur));
}

/* A recap shows a long message's first lines: a paste of pages hides the reply. */
#define RECAP_LINES 4
#define RECAP_BYTES 320

/*
 * One stored message, as the terminal showed it; brief (a recap): a user
 * message past RECAP_LINES lines or RECAP_BYTES bytes is cut there, with a
 * line saying how much more /history shows.
 */
static void
show_msg(struct kvc_repl *r, const struct sess_msg *x, bool brief)
{
	if (x->role == SESS_USER) {
		const char *p = x->text, *end = p + strlen(p);
		int lines = 1;

		if (brief) {
			const char *q;

			for (q = p; q < end && q - p < RECAP_BYTES; q++)
				if (*q == '\n' && ++lines > RECAP_LINES)
					break;
			end = p + kvc_utf8_valid_prefix(p, (size_t)(q - p));
		}
		/* The prompt, then the lines as typed (a block's lines after "... "). */
		printf("%s>>> %s", kvc_sgr(r->color, KVC_SGR_BOLD), kvc_sgr(r->color, KVC_SGR_RESET));
		for (; p < end; p++) {
			putchar(*p);
			if (*p == '\n' && p + 1 < end)
				printf("... ");
		}
		putchar('\n');
		if (*end != '\0') {
			int more = 0;

			for (const char *q = end; *q; q++)
				more += *q == '\n';
			printf("%s[%zu more bytes, %d more lines of this message: /history shows it "
			    "whole]%s\n", kvc_sgr(r->color, KVC_SGR_DIM), strlen(end), more,
			    kvc_sgr(r->color, KVC_SGR_RESET));
		}
		return;
	}
	if (x->role != SESS_ASSISTANT)
		return;
	repl_think_show(r, x->reasoning);
	fputs(x->text ? x->text : "", stdout);
	printf("%s\n", x->interrupted ? " ^C" : "");
	if (x->interrupted)
		printf("%s[interrupted]%s\n", kvc_sgr(r->color, KVC_SGR_DIM),
		    kvc_sgr(r->color, KVC_SGR_RESET));
}

void
repl_show_msgs(struct kvc_repl *r, int n, bool brief)
{
	int total = conv_n_msgs(r->cur);
	const struct sess_msg **v = calloc(total > 0 ? (size_t)total : 1, sizeof *v);

	if (v == NULL) {
		repl_error(r, "out of memory");
		return;
	}
	for (int i = 0; i < total; i++)
		v[i] = conv_msg(r->cur, i);
	repl_show_list(r, v, total, n, brief);
	free(v);
}

void
repl_show_list(struct kvc_repl *r, const struct sess_msg *const *msgs, int total, int n,
    bool brief)
{
	int i = n < 0 || n > total ? 0 : total - n;

	for (; i < total; i++)
		show_msg(r, msgs[i], brief);
	if (total > 0 && msgs[total - 1]->role == SESS_USER)
		printf("%s[the reply was cut off: /retry answers it]%s\n",
		    kvc_sgr(r->color, KVC_SGR_DIM), kvc_sgr(r->color, KVC_SGR_RESET));
	fflush(stdout);
}
