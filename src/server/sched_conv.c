/*
 * sched_conv.c: a request that names a stored conversation ("conversation":
 * ID or "new", or the X-Kvchat-Conversation header) runs as one chat turn
 * of it, exactly as the REPL's: conv_open claims the conversation's lock
 * (another process holding it, the REPL say, is a 409) and brings its cache
 * back from the store's snapshot, or from memory, so only the new user
 * message is prefilled, also after the server restarted; conv_turn renders
 * the delta, generates and commits message, reply and snapshot chunk. The
 * lock is released when the request ends, so `kvchat --resume` can open the
 * conversation between two requests and the other way round.
 *
 * The request carries the whole history, as every OpenAI client sends it:
 * it must be the stored one (system prompt, then each message's text) plus
 * one new user message; anything else is refused before anything is
 * written. The turn runs alone on the scheduler thread (it is not batched
 * with the slots' requests).
 */
#include <stdio.h>
#include <string.h>

#include "srv_int.h"

/* What the turn's text callback needs: the job, and the conversation whose id the response names. */
struct turn_ctx {
	struct srv_job *j;
	struct conv *c;
};

static int
on_text(void *arg, const char *s, size_t n)
{
	struct turn_ctx *t = arg;
	struct srv_job *j = t->j;

	if (!j->started) {
		j->conv_out = conv_id(t->c);
		job_start(j, 200);
		/* said once the turn is generating: what a client (or a test) may wait for */
		srv_log(j->srv, "%s: conversation %lld: first token after %.0f ms", j->id,
		    (long long)j->conv_out, (kvc_now() - j->t_start) * 1e3);
	}
	if (kvc_buf_append(&j->text, s, n) != KVC_OK || job_send_text(j, false) != KVC_OK)
		return 1;
	return j->cancel ? 1 : 0;
}

static bool
same_text(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "") == 0;
}

/*
 * Whether j's messages are c's stored history plus one user message. The
 * system prompt (a leading system message, or none) must match too.
 * 0, or 409 with err.
 */
static int
check_history(const struct srv_job *j, struct conv *c, char *err, size_t errlen)
{
	size_t first = j->n_msgs > 0 && j->msgs[0].role == CHAT_SYSTEM ? 1 : 0;
	int n = conv_n_msgs(c);

	if (!same_text(first ? j->msgs[0].text : NULL, conv_system(c))) {
		kvc_err(err, errlen, "the system message differs from conversation %lld's",
		    (long long)conv_id(c));
		return 409;
	}
	if (j->n_msgs - first != (size_t)n + 1) {
		kvc_err(err, errlen, "conversation %lld holds %d messages: the request must resend "
		    "them and add one user message (it has %zu)", (long long)conv_id(c), n,
		    j->n_msgs - first);
		return 409;
	}
	for (int i = 0; i < n; i++) {
		const struct sess_msg *m = conv_msg(c, i);
		const struct chat_msg *q = &j->msgs[first + (size_t)i];
		enum chat_role want = m->role == SESS_USER ? CHAT_USER : m->role == SESS_ASSISTANT ?
		    CHAT_ASSISTANT : CHAT_SYSTEM;

		if (q->role != want || !same_text(q->text, m->text)) {
			kvc_err(err, errlen, "message %d differs from conversation %lld's", i + 1,
			    (long long)conv_id(c));
			return 409;
		}
	}
	return 0;
}

/* Open (or create) j's conversation; 0, or the HTTP status with err. */
static int
open_conv(struct conv_mgr *m, struct srv_job *j, struct conv **c, char *err, size_t errlen)
{
	struct conv_settings set = conv_default_settings();
	size_t first = j->n_msgs > 0 && j->msgs[0].role == CHAT_SYSTEM ? 1 : 0;
	int rc;

	set.smp = j->smp;
	set.max_tokens = j->max_tokens;
	if (j->msgs[j->n_msgs - 1].role != CHAT_USER) {
		kvc_err(err, errlen, "the last message of a conversation's turn must be the user's");
		return 400;
	}
	if (j->n_stop > 0 || j->max_tokens == 0) {
		kvc_err(err, errlen, "a conversation's turn takes neither \"stop\" nor max_tokens 0");
		return 400;
	}
	if (j->conv_id == 0) {
		if (j->n_msgs - first != 1) {
			kvc_err(err, errlen, "a new conversation starts with one user message (and "
			    "maybe a system message)");
			return 400;
		}
		rc = conv_new(m, NULL, first ? j->msgs[0].text : NULL, &set, c, err, errlen);
		return rc == KVC_OK ? 0 : rc == KVC_EINVAL ? 400 : 500;
	}
	rc = conv_open(m, j->conv_id, c, err, errlen);
	if (rc == KVC_EINTR && *c != NULL)
		rc = KVC_OK;	/* open, its cache rebuilt by the turn */
	if (rc != KVC_OK)
		return rc == KVC_EBUSY ? 409 : rc == KVC_ENOTFOUND ? 404 : 500;
	if ((rc = check_history(j, *c, err, errlen)) != 0 ||
	    (rc = conv_set_settings(*c, &set, err, errlen)) != KVC_OK) {
		conv_close(*c);
		*c = NULL;
		return rc > 0 ? rc : 500;
	}
	return 0;
}

/*
 * The line of a turn its client left (or srv_stop ended), in the words of
 * the slots' requests: "ID: conversation N: the client went away after K
 * tokens (what was kept)"; "new" for a new conversation taken back.
 */
static void
log_gone(struct kvc_server *s, const struct srv_job *j, int64_t id, int n, const char *kept)
{
	char cid[24] = "new";

	if (id > 0)
		snprintf(cid, sizeof cid, "%lld", (long long)id);
	srv_log(s, "%s: conversation %s: %s after %d tokens (%s)", j->id, cid, s->quit ?
	    "stopped by the server" : "the client went away", n, kept);
}

void
sched_conv_run(struct kvc_server *s, struct conv_mgr *m, struct srv_job *j)
{
	struct conv *c = NULL;
	struct conv_stats cs;
	struct conv_io io;
	struct turn_ctx tc;
	char err[512] = "";
	int64_t id0;
	int st, rc;

	j->t_start = kvc_now();
	if (m == NULL || (st = open_conv(m, j, &c, err, sizeof err)) != 0) {
		job_fail(j, m == NULL ? 400 : st, m == NULL ? "this server keeps no conversations" : err);
		return;
	}
	memset(&io, 0, sizeof io);
	io.on_text = on_text;
	tc.j = j;
	tc.c = c;
	io.arg = &tc;
	io.interrupt = &j->cancel;
	io.t_enter = j->t_start;
	memset(&cs, 0, sizeof cs);
	id0 = conv_id(c);
	rc = conv_turn(c, j->msgs[j->n_msgs - 1].text, &io, &cs, err, sizeof err);
	j->conv_out = conv_id(c);
	conv_close(c);
	if (rc == KVC_EINTR && j->cancel) {
		/* gone before the reply: conv_turn took the turn back (a new conversation too) */
		log_gone(s, j, id0, 0, id0 > 0 ? "before its reply: the message taken back, the "
		    "conversation as it was" : "before its reply: nothing stored");
		job_fail(j, s->quit ? 503 : 499, s->quit ? "the server is stopping" :
		    "the client went away");
		return;
	}
	if (rc != KVC_OK) {
		job_fail(j, rc == KVC_ERANGE ? 400 : rc == KVC_EINTR ? 499 : 500, err);
		return;
	}
	j->conv_cache = j->conv_id == 0 ? "new" : cs.resumed_from_snapshot ? "snapshot" :
	    cs.rebuilt ? "rebuilt" : "resident";
	j->n_prompt = cs.reused_tokens + cs.prefill_tokens;
	j->cached = cs.reused_tokens;
	j->computed = cs.prefill_tokens;
	j->n_gen = cs.gen_tokens;
	j->t_prefilled = j->t_start + (cs.ttft_ms > 0 ? cs.ttft_ms / 1e3 : 0);
	j->t_end = kvc_now();
	j->finish = cs.ctx_full || (j->max_tokens > 0 && cs.gen_tokens >= j->max_tokens) ?
	    "length" : "stop";
	if (!j->started)
		job_start(j, 200);
	/* also a reply srv_stop cut: the client gets what was stored */
	job_finish_ok(j);
	if (cs.interrupted && j->cancel)
		log_gone(s, j, j->conv_out, j->n_gen, "the reply so far stored, marked interrupted");
	else
		srv_log(s, "%s: conversation %lld: prompt %d (cached %d), %d generated", j->id,
		    (long long)j->conv_out, j->n_prompt, j->cached, j->n_gen);
}
