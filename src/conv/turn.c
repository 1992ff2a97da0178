/*
 * turn.c: what changes a conversation's exchanges: a turn (the user's
 * delta into the cache, a reply generated, both committed with the new
 * cache positions in one transaction), /retry, /undo and /clear.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "conv_int.h"

/*
 * After a turn's prompt is in the cache: its prefill figures, and the
 * buffer that keeps the first reply position's logits for /retry (optional:
 * without it /retry recomputes one position).
 */
static void
prompt_done(struct conv *c, const struct eng_stats *es, struct conv_stats *st)
{
	st->reused_tokens = es->n_reused;
	st->prefill_tokens = es->n_computed;
	st->prefill_tps = es->t_prefill > 0 ? es->n_computed / es->t_prefill : 0;
	if (c->reply_logits == NULL)
		c->reply_logits = malloc((size_t)eng_n_vocab(c->m->e) * sizeof *c->reply_logits);
}

/*
 * Generate the reply after the prompt in the cache, streaming it through
 * io. first (or NULL): what to sample the first id from when the sequence
 * has no logits at hand (/retry).
 */
static int
reply(struct conv *c, const struct conv_io *io, const float *first, struct conv_gen *g,
    struct conv_reason *rs, struct conv_stats *st, double t0, char *err, size_t errlen)
{
	struct conv_gen_params gp;
	struct conv_spec sp = { NULL, c->m->p.lookup, c->m->p.spec_k };
	struct kvc_tokens forced = {0};
	int rc;

	memset(&gp, 0, sizeof gp);
	if (c->m->p.draft != NULL && c->draft == NULL &&
	    eng_seq_new(c->m->p.draft, &c->draft, err, errlen) != 0)
		return KVC_ENOMEM;
	sp.draft = c->draft;
	if (sp.k == 0)
		sp.k = sp.draft ? 4 : 8;
	if (sp.draft != NULL || sp.lookup > 0)
		gp.spec = &sp;
	gp.mode = CONV_GEN_REPLY;
	gp.max_tokens = c->set.max_tokens > 0 ? c->set.max_tokens : -1;
	gp.stop = chat_stop_strings(c->m->p.family);
	conv_reason_begin(c, rs, io, &gp);
	if (io)
		gp.interrupt = io->interrupt;
	gp.first_logits = first;
	gp.keep_first_logits = c->reply_logits;
	if (c->m->p.test_replies != NULL &&
	    (rc = conv_test_reply(c->m, &forced, err, errlen)) != 0)
		return rc;
	gp.forced = forced.v;
	gp.n_forced = (int)forced.n;
	rc = conv_generate(c->m->e, c->seq, c->smp, &gp, g, err, errlen);
	kvc_tokens_free(&forced);
	if (g->first_logits_pos >= 0)
		c->reply_logits_pos = g->first_logits_pos;
	st->interrupted = g->interrupted;
	st->ctx_full = g->ctx_full;
	st->gen_tokens = (int)g->ids.n;
	st->spec_proposed = g->proposed;
	st->spec_accepted = g->accepted;
	st->forward_passes = g->n_passes;
	if (g->t_first > 0) {
		double dt = kvc_now() - g->t_first;

		st->ttft_ms = (g->t_first - t0) * 1e3;
		st->decode_tps = dt > 0 && g->ids.n > 0 ? (double)g->ids.n / dt : 0;
	}
	if (rc && g->ids.n > 0) {
		/* Keep what was said before the failure, as an interrupted reply. */
		st->interrupted = true;
		rc = 0;
	}
	st->context_used = eng_seq_n_pos(c->seq);
	st->context_total = eng_n_ctx(c->m->e);
	return rc;
}

/* The stored form of a reply: its answer and reasoning apart (rs's). */
static int
reply_msg(struct sess_msg *rec, const struct conv_gen *g, struct conv_reason *rs,
    struct conv_stats *st, char *err, size_t errlen)
{
	memset(rec, 0, sizeof *rec);
	rec->role = SESS_ASSISTANT;
	if (conv_reason_end(rs, rec, st) != 0) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	rec->ids = g->ids.v;
	rec->n_ids = (int)g->ids.n;
	rec->interrupted = st->interrupted;
	rec->stats.ttft_ms = st->ttft_ms;
	rec->stats.prefill_tokens = st->prefill_tokens;
	rec->stats.reused_tokens = st->reused_tokens;
	rec->stats.prefill_tps = st->prefill_tps;
	rec->stats.gen_tokens = st->gen_tokens;
	rec->stats.decode_tps = st->decode_tps;
	return KVC_OK;
}

/* The window's stream up to message k: its length, from the sequence or the messages. */
static int
stream_len(struct conv *c, int k, int *n_pos, char *err, size_t errlen)
{
	struct kvc_tokens s = {0};
	int rc = KVC_OK;

	if (c->seq != NULL) {
		*n_pos = eng_seq_n_pos(c->seq);
		for (int i = k; i < c->n_msgs; i++)
			*n_pos -= c->msgs[i].n_ids;
	} else {
		rc = conv_build_cached(c, k, &s, err, errlen);
		*n_pos = (int)s.n;
		kvc_tokens_free(&s);
	}
	if (rc == 0 && *n_pos < 0) {
		kvc_err(err, errlen, "stream shorter than its messages");
		rc = KVC_ECORRUPT;
	}
	return rc;
}

/*
 * Drop msgs[k..n_msgs) and choose the window again (window w, unslid):
 * the new window's cache is computed first, then the rewind, the window
 * and that cache's snapshot are stored in one transaction. Rewound first
 * and snapshotted after (as this was), a kill in between left no snapshot
 * and the next start rebuilt from the tokens (test_kill_window.sh). On a
 * failure nothing is stored and the old cache is restored when next used.
 */
static int
rewindow(struct conv *c, int k, int w, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct kvc_tokens s = {0};
	int rc;

	rc = conv_build_stream(c, w, k, &s, err, errlen);
	conv_drop_seq(c);	/* the old window's cache: the store still holds its snapshot */
	c->n_chunk_ends = 0;
	c->snap_end = 0;
	if (rc == 0) {
		conv_mgr_fit(m, c, eng_kv_bytes_for(m->e, s.n));
		rc = eng_seq_new(m->e, &c->seq, err, errlen);
	}
	if (rc == 0 && s.n > 0) {
		conv_work_begin(m, "recomputing", m->p.interrupt);
		rc = eng_seq_sync(c->seq, s.v, (int)s.n, NULL, err, errlen);
		conv_work_end(m);
		if (rc == KVC_EINTR)
			kvc_err(err, errlen, "recomputing the cache of conversation %" PRId64 " (%zu "
			    "positions) was stopped; nothing was taken back", c->id, s.n);
	}
	if (rc == 0)
		rc = conv_commit_rewind(c, k, conv_window_key(c, w), err, errlen);
	kvc_tokens_free(&s);
	if (rc) {
		conv_drop_seq(c);
		return rc;
	}
	conv_msgs_drop(c, k);
	c->win = w;
	c->pend_resumed = c->pend_rebuilt = false;
	return KVC_OK;
}

/*
 * Drop msgs[k..n_msgs) (msgs[k] a user message) from the store and the
 * cache: one rewind of the store, then the in-memory picture follows.
 */
static int
drop_tail(struct conv *c, int k, char *err, size_t errlen)
{
	int n_pos, w = 0, rc;

	c->reply_logits_pos = -1;
	if ((c->win > 0 && c->win >= k) || conv_slide_cuts(c, k)) {
		/*
		 * The window began at a message being dropped, or the message
		 * begins in the part slid away: choose the window again.
		 */
		int n_all = c->n_msgs, keep = c->slide_keep, cut = c->slide_cut;

		conv_slide_reset(c);
		/* The window of msgs[0..k). */
		c->n_msgs = k;
		if (conv_fit_window(c, 0, eng_n_ctx(c->m->e) - conv_reply_reserve(c), &w,
		    NULL, 0) != 0)
			w = c->n_msgs > 0 ? c->n_msgs - 2 : 0;
		c->n_msgs = n_all;
		rc = rewindow(c, k, w, err, errlen);
		if (rc) {
			/* the stored window, which the stored chunks were made over */
			c->slide_keep = keep;
			c->slide_cut = cut;
		}
		return rc;
	}
	rc = stream_len(c, k, &n_pos, err, errlen);
	if (rc)
		return rc;
	if (c->seq != NULL && eng_seq_resident(c->seq) && eng_seq_truncate(c->seq, n_pos) == 0) {
		/*
		 * The rewind may take a chunk that began before n_pos (a slid or
		 * dropped turn's one chunk from 0): the kept positions' tail is
		 * written in the rewind's transaction. Written after it, a kill
		 * in between left no snapshot, and the next start rebuilt a slid
		 * cache from the tokens, which answers differently
		 * (scripts/kill-campaign.sh found it).
		 */
		rc = conv_commit_reply(c, NULL, 0, k, n_pos, conv_window_key(c, c->win), err, errlen);
		if (rc) {
			conv_drop_seq(c);	/* cut already: computed again from the store */
			return rc;
		}
	} else {
		rc = sess_rewind(c->m->st, c->id, k, n_pos, err, errlen);
		if (rc)
			return rc;
		conv_chunks_trim(c, n_pos);
		if (c->seq)
			(void)eng_seq_truncate(c->seq, n_pos);
	}
	conv_msgs_drop(c, k);
	return KVC_OK;
}

/*
 * The user's delta: closes the last reply, adds the turn and the generation
 * prompt. With the model's own template over the whole conversation, the
 * tokens the whole render (rr) puts after the cached positions it keeps;
 * *rewrite when that is short of the cache's end or earlier messages' tokens
 * changed (the render is then the cache's target). A render that cannot be
 * had, or no longer fits, leaves the delta after the last reply.
 */
static int
user_delta(struct conv *c, const char *text, int old_n, struct kvc_tokens *delta,
    struct conv_rerender *rr, bool *rewrite, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct chat_msg *cl = NULL;
	size_t ncl;
	int rc;

	*rewrite = false;
	if (old_n > 0 && c->n_msgs > 0 && c->id != 0 && conv_rerender_applies(c)) {
		rc = conv_rerender(c, text, true, c->n_msgs, rr, err, errlen);
		if (rc == KVC_ENOMEM)
			return rc;
		if (rc == 0 && (int)rr->target.n + conv_reply_reserve(c) <= eng_n_ctx(m->e)) {
			size_t from = rr->target.n - (size_t)rr->spans[c->n_msgs];

			*rewrite = rr->first < c->n_msgs || rr->keep < old_n;
			return kvc_tokens_append(delta, rr->target.v + from, rr->target.n - from);
		}
		conv_rerender_free(rr);
	}

	rc = conv_chat_list(c, c->win, c->n_msgs, text, &cl, &ncl);
	if (rc == 0)
		rc = conv_render_delta(m, cl,
		    old_n ? ncl - 1 : 0, ncl, true, delta, err, errlen);
	free(cl);
	return rc;
}

/* What a drop cost, for the stats line: the recompute's share of the prefill. */
static void
drop_stats(const struct conv *c, int new_win, int old_n, const struct kvc_tokens *delta,
    const struct kvc_tokens *target, const struct eng_stats *es, struct conv_stats *st)
{
	int re = es->n_computed - (int)delta->n;

	st->dropped_tokens = old_n + (int)delta->n - (int)target->n;
	if (st->dropped_tokens < 0)
		st->dropped_tokens = 0;
	st->dropped_msgs = new_win - c->win;
	st->recomputed_tokens = re > 0 ? re : 0;
	st->recompute_ms = es->n_computed > 0 ?
	    es->t_prefill * 1e3 * st->recomputed_tokens / es->n_computed : 0;
}

/*
 * Where the turn's prompt goes: after the stream when it fits with room for
 * a reply (*sync false), else (policy drop) the cache is to be synced to
 * target, a shorter window starting at *new_win. Policy slide moves the
 * cache itself here (and the prompt then goes after the slid stream);
 * otherwise only checks and plans: KVC_ERANGE when it does not fit at all.
 */
static int
prompt_plan(struct conv *c, const char *text, const struct kvc_tokens *delta, int old_n,
    int *new_win, struct kvc_tokens *target, bool *sync, struct conv_stats *st, char *err,
    size_t errlen)
{
	struct conv_mgr *m = c->m;
	int n_ctx = eng_n_ctx(m->e), reserve = conv_reply_reserve(c), rc;

	*sync = false;
	if (old_n == 0 && (int)delta->n >= n_ctx) {
		kvc_err(err, errlen, "input too long: %zu tokens with the template, the context "
		    "holds %d", delta->n, n_ctx);
		return KVC_ERANGE;
	}
	/* An empty conversation may start with less room for the reply. */
	if (old_n == 0 || old_n + (int)delta->n + reserve <= n_ctx)
		return KVC_OK;
	if (m->p.overflow == CONV_OVERFLOW_STOP) {
		kvc_err(err, errlen, "context full: %d of %d positions used, this turn needs %zu "
		    "more plus room for the reply (/clear, /new, or --ctx-overflow drop)", old_n,
		    n_ctx, delta->n);
		return KVC_ERANGE;
	}
	if (m->p.overflow == CONV_OVERFLOW_SLIDE) {
		char why[256];

		/* The cache itself moves (the turn's rollback takes a slide back). */
		rc = conv_slide(c, old_n + (int)delta->n + reserve - n_ctx, &st->slid_tokens, why,
		    sizeof why);
		if (rc == 0)
			return KVC_OK;	/* the delta now fits after the slid stream */
		if (!eng_seq_resident(c->seq))
			conv_drop_seq(c);	/* a failed shift: rebuilt from the messages */
		/* nothing slid: the old exchanges are dropped and recomputed instead */
		conv_notice(m, "conversation %" PRId64 ": %s; dropping old exchanges instead", c->id, why);
		if (c->seq == NULL && (rc = conv_activate(c, err, errlen)) != 0)
			return rc;
	}
	*sync = true;
	rc = conv_plan_window(c, text, delta, reserve, new_win, target, err, errlen);
	return rc;
}

/*
 * Compute the planned prompt (stoppable by io's interrupt). Nothing changes
 * in the cache on an error, except that a half-done sync drops the
 * sequence (it is rebuilt from the messages when next used).
 */
static int
prompt_compute(struct conv *c, const struct kvc_tokens *delta, const struct kvc_tokens *target,
    bool sync, int old_n, int new_win, const struct conv_io *io, struct eng_stats *es,
    struct conv_stats *st, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	const struct kvc_tokens *t = sync ? target : delta;
	int reserve = conv_reply_reserve(c), rc;

	conv_mgr_fit(m, c, eng_kv_bytes_for(m->e, (size_t)(reserve + (int)t->n)));
	conv_work_begin(m, "prefill", io ? io->interrupt : NULL);
	rc = sync ? eng_seq_sync(c->seq, t->v, (int)t->n, es, err, errlen) :
	    eng_seq_append(c->seq, t->v, (int)t->n, es, err, errlen);
	conv_work_end(m);
	if (rc && sync)
		conv_drop_seq(c);	/* half synced: rebuilt from the messages */
	if (rc == 0 && sync) {
		conv_slide_reset(c);	/* the new window's stream, whole */
		drop_stats(c, new_win, old_n, delta, target, es, st);
	}
	return rc;
}

/*
 * The user's message goes to the store before anything is computed, so a
 * kill during the prefill or the reply keeps what was typed; a fresh
 * conversation is stored with it. Its fsync waits for the reply's commit
 * (sess_user_commit): time to first token holds no disk sync.
 */
static int
store_user(struct conv *c, const char *text, const struct kvc_tokens *delta, char *err,
    size_t errlen)
{
	struct sess_msg rec;
	int rc = conv_store_new(c, text, err, errlen);

	if (rc)
		return rc;
	memset(&rec, 0, sizeof rec);
	rec.role = SESS_USER;
	rec.text = (char *)text;
	rec.ids = delta->v;
	rec.n_ids = (int)delta->n;
	rc = sess_user_commit(c->m->st, c->id, &rec, err, errlen);
	if (rc == 0 && conv_msgs_push(c, &rec) != 0) {
		kvc_err(err, errlen, "out of memory");
		rc = KVC_ENOMEM;
		/* Stored but not in memory: take it back so the two agree. */
		if (sess_rewind(c->m->st, c->id, c->n_msgs, c->snap_end, NULL, 0) != 0)
			conv_drop_seq(c);
	}
	return rc;
}

/*
 * The turn is taken back before its reply: the user's message leaves the
 * store (and a conversation this turn stored leaves it whole). Should the
 * store refuse, the message stays, answered at the next turn.
 */
static void
unstore_user(struct conv *c, bool fresh, bool was_auto)
{
	if (fresh) {
		conv_unstore(c, was_auto);
		conv_msgs_drop(c, c->n_msgs - 1);
		return;
	}
	if (sess_rewind(c->m->st, c->id, c->n_msgs - 1, c->snap_end, NULL, 0) == 0)
		conv_msgs_drop(c, c->n_msgs - 1);
}

/*
 * store_user for a turn whose render changed earlier messages' tokens:
 * those, the chunks past what the cache keeps and the user's message in one
 * transaction.
 */
static int
store_rewrite(struct conv *c, const char *text, const struct kvc_tokens *delta,
    const struct conv_rerender *rr, char *err, size_t errlen)
{
	struct sess_msg rec;
	int rc;

	memset(&rec, 0, sizeof rec);
	rec.role = SESS_USER;
	rec.text = (char *)text;
	rec.ids = delta->v;
	rec.n_ids = (int)delta->n;
	rc = conv_rerender_store(c, rr, c->n_msgs, &rec, err, errlen);
	if (rc == 0 && conv_msgs_push(c, &rec) != 0) {
		kvc_err(err, errlen, "out of memory");
		rc = KVC_ENOMEM;
		if (sess_rewind(c->m->st, c->id, c->n_msgs, c->snap_end, NULL, 0) != 0)
			conv_drop_seq(c);
	}
	return rc;
}

/* A rewritten turn's figures: what of earlier turns was computed again, and why. */
static void
rewrite_stats(const struct conv_rerender *rr, const struct kvc_tokens *delta, int old_n,
    struct conv_stats *st)
{
	int re = old_n - rr->keep;

	(void)delta;
	/* this turn's prompt is what the render adds past the positions kept */
	st->prompt_tokens = (int)rr->target.n - rr->keep;
	st->dropped_tokens = st->dropped_msgs = st->recomputed_tokens = 0;
	st->recompute_ms = 0;
	st->rewritten_tokens = re > 0 ? re : 0;
	st->rewrite_why = rr->why ? rr->why : "the template renders earlier turns' tokens otherwise";
}

/*
 * A user message left without its reply (kvchat was stopped while it
 * answered, and the user went on instead of /retry): it stays, with an
 * empty reply marked interrupted, as a reply cut off at once would be.
 */
static int
close_unanswered(struct conv *c, char *err, size_t errlen)
{
	struct sess_msg rec;
	int rc;

	memset(&rec, 0, sizeof rec);
	rec.role = SESS_ASSISTANT;
	rec.text = (char *)"";
	rec.interrupted = true;
	rc = conv_commit_reply(c, &rec, 1, -1, 0, conv_window_key(c, c->win), err, errlen);
	if (rc == 0 && conv_msgs_push(c, &rec) != 0) {
		kvc_err(err, errlen, "out of memory");
		conv_drop_seq(c);
		rc = KVC_ENOMEM;
	}
	return rc;
}

/*
 * The reply and the new cache positions, in one transaction; on a new
 * window the chunks of the old stream go first (they no longer describe
 * the cache). Then the in-memory picture follows.
 */
static int
commit_reply_turn(struct conv *c, struct sess_msg *rec, int new_win, int64_t old_key, char *err,
    size_t errlen)
{
	int64_t key = conv_window_key(c, new_win);
	bool rewindow = new_win != c->win || key != old_key;
	int rc;

	rc = rewindow ? conv_commit_window(c, rec, key, err, errlen) :
	    conv_commit_reply(c, rec, 1, -1, 0, key, err, errlen);
	if (rc)
		return rc;
	if (conv_msgs_push(c, rec)) {
		/* Stored: the next use renders the messages again from the store's picture. */
		kvc_err(err, errlen, "out of memory");
		conv_drop_seq(c);
		return KVC_OK;
	}
	c->win = new_win;
	c->pend_resumed = c->pend_rebuilt = false;
	return KVC_OK;
}

/*
 * A turn that slid the cache and then failed: the slide cannot be taken
 * back in the cache, so the conversation's window goes back to what the
 * store holds and the cache is rebuilt from the messages when next used.
 */
static void
unslide(struct conv *c, int old_keep, int old_cut)
{
	if (c->slide_keep == old_keep && c->slide_cut == old_cut)
		return;
	c->slide_keep = old_keep;
	c->slide_cut = old_cut;
	conv_drop_seq(c);
}

/*
 * A turn on a store that cannot be written is refused before anything is
 * tokenized or generated: a reply that could not be kept is not worth its
 * time. Here, so that every front end (the chat, batch, a server) gives the
 * same answer.
 */
static int
refuse_readonly(const struct conv *c, char *err, size_t errlen)
{
	const char *why = NULL;

	if (!sess_readonly(c->m->st, &why))
		return 0;
	kvc_err(err, errlen, "the database is open read-only (%s): no turn can be saved",
	    why ? why : "not writable");
	return KVC_EIO;
}

/* The turn's figures before its reply. */
static void
turn_begin(struct conv *c, struct conv_stats *st)
{
	st->resumed_from_snapshot = c->pend_resumed;
	st->rebuilt = c->pend_rebuilt;
	st->context_used = eng_seq_n_pos(c->seq);
	st->context_total = eng_n_ctx(c->m->e);
}

int
conv_turn(struct conv *c, const char *text, const struct conv_io *io,
    struct conv_stats *st, char *err, size_t errlen)
{
	struct kvc_tokens delta = {0}, target = {0};
	struct conv_gen g;
	struct conv_reason rs;
	struct eng_stats es = {0};
	struct sess_msg rec;
	double t0 = io && io->t_enter > 0 ? io->t_enter : kvc_now();
	bool sync = false, fresh = c->id == 0, was_auto = c->auto_title, rewrite = false;
	struct conv_rerender rr;
	int new_win, old_n, old_keep, old_cut, rc;
	int64_t old_key;

	memset(st, 0, sizeof *st);
	memset(&g, 0, sizeof g);
	memset(&rs, 0, sizeof rs);
	memset(&rr, 0, sizeof rr);
	if ((rc = refuse_readonly(c, err, errlen)) != 0)
		return rc;
	if ((rc = conv_check_length(c, text, err, errlen)) != 0)
		return rc;	/* before anything is tokenized or changed */
	rc = conv_activate(c, err, errlen);
	if (rc == 0 && c->n_msgs > 0 && c->msgs[c->n_msgs - 1].role == SESS_USER)
		rc = close_unanswered(c, err, errlen);
	if (rc)
		return rc;
	new_win = c->win;
	old_n = eng_seq_n_pos(c->seq);
	old_key = conv_window_key(c, c->win);
	old_keep = c->slide_keep;
	old_cut = c->slide_cut;
	turn_begin(c, st);
	rc = user_delta(c, text, old_n, &delta, &rr, &rewrite, err, errlen);
	if (rc == 0 && rewrite) {
		/* the render is the cache's target: the common prefix kept, the rest computed */
		sync = true;
		rc = kvc_tokens_append(&target, rr.target.v, rr.target.n);
		if (rc == 0)
			rc = store_rewrite(c, text, &delta, &rr, err, errlen);
	} else {
		if (rc == 0)
			rc = prompt_plan(c, text, &delta, old_n, &new_win, &target, &sync, st, err,
			    errlen);
		if (rc == 0 && (rc = store_user(c, text, &delta, err, errlen)) != 0 && fresh)
			conv_unstore(c, was_auto);	/* a row without its first message: gone again */
	}
	if (rc) {
		unslide(c, old_keep, old_cut);
		goto out;
	}
	st->prompt_tokens = (int)delta.n;
	rc = prompt_compute(c, &delta, &target, sync, old_n, new_win, io, &es, st, err, errlen);
	if (rc) {
		/* Stopped or failed before the reply: the turn is taken back whole.
		 * Its figures still say what was reused and computed, and how fast. */
		st->interrupted = rc == KVC_EINTR;
		st->reused_tokens = es.n_reused;
		st->prefill_tokens = es.n_computed;
		st->prefill_tps = es.t_prefill > 0 ? es.n_computed / es.t_prefill : 0;
		unslide(c, old_keep, old_cut);
		unstore_user(c, fresh, was_auto);
		goto out;
	}
	if (rewrite)
		rewrite_stats(&rr, &delta, old_n, st);
	prompt_done(c, &es, st);
	c->reply_logits_pos = -1;
	rc = reply(c, io, NULL, &g, &rs, st, t0, err, errlen);
	if (rc == 0)
		rc = reply_msg(&rec, &g, &rs, st, err, errlen);
	if (rc)
		goto rollback;
	rc = commit_reply_turn(c, &rec, new_win, old_key, err, errlen);
	if (rc)
		goto rollback;
	st->store_errors = c->store_errors;
	c->store_errors = 0;
	goto out;
rollback:
	/* The reply was not stored: the cache goes back to the stored stream. */
	c->reply_logits_pos = -1;
	if (!rewrite && new_win == c->win && c->slide_cut == old_cut && c->seq != NULL)
		(void)eng_seq_truncate(c->seq, old_n);
	else	/* a new window or a slide cannot be taken back in the cache: rebuilt */
		conv_drop_seq(c);
	c->slide_keep = old_keep;
	c->slide_cut = old_cut;
	unstore_user(c, fresh, was_auto);
out:
	kvc_tokens_free(&delta);
	kvc_tokens_free(&target);
	conv_gen_free(&g);
	conv_reason_free(&rs);
	conv_rerender_free(&rr);
	return rc;
}

int
conv_undo(struct conv *c, char *err, size_t errlen)
{
	int n = c->n_msgs;

	if (n >= 1 && c->msgs[n - 1].role == SESS_USER)
		return drop_tail(c, n - 1, err, errlen);	/* a reply that never came */
	if (n < 2 || c->msgs[n - 1].role != SESS_ASSISTANT || c->msgs[n - 2].role != SESS_USER) {
		kvc_err(err, errlen, "nothing to undo");
		return KVC_ENOTFOUND;
	}
	return drop_tail(c, n - 2, err, errlen);
}

/*
 * The cache cut to the end of the user's delta (n_pos): the first answer's
 * logits reused when they are at hand (*first), else the last position
 * recomputed.
 */
static int
retry_prompt(struct conv *c, int n_pos, const float **first, struct eng_stats *es,
    char *err, size_t errlen)
{
	/* (not when the windowed layers let the positions go: the sync recomputes them) */
	if (c->reply_logits != NULL && c->reply_logits_pos == n_pos &&
	    eng_seq_n_pos(c->seq) >= n_pos && eng_seq_keeps(c->seq, n_pos)) {
		*first = c->reply_logits;
		es->n_reused = n_pos;
		return eng_seq_truncate(c->seq, n_pos);
	}
	/* The engine copies its own tokens before it syncs to them. */
	return eng_seq_sync(c->seq, eng_seq_tokens(c->seq), n_pos, es, err, errlen);
}

/*
 * Only the reply is taken back: the cache is cut to the end of the user's
 * delta, a new reply is generated, and then the store drops the old reply
 * and the chunks past that point and takes the new one in one
 * transaction: a crash or a failed write leaves the old reply in place.
 */
int
conv_retry(struct conv *c, const struct conv_io *io, struct conv_stats *st,
    char *err, size_t errlen)
{
	struct conv_gen g;
	struct conv_reason rs;
	struct eng_stats es = {0};
	struct sess_msg rec;
	const float *first = NULL;
	double t0 = io && io->t_enter > 0 ? io->t_enter : kvc_now();
	int n = c->n_msgs, u, n_pos, rc;
	bool synced = false;

	memset(st, 0, sizeof *st);
	memset(&g, 0, sizeof g);
	memset(&rs, 0, sizeof rs);
	if ((rc = refuse_readonly(c, err, errlen)) != 0)
		return rc;
	if (n >= 1 && c->msgs[n - 1].role == SESS_USER)
		u = n - 1;
	else if (n >= 2 && c->msgs[n - 1].role == SESS_ASSISTANT && c->msgs[n - 2].role == SESS_USER)
		u = n - 2;
	else {
		kvc_err(err, errlen, "nothing to retry");
		return KVC_ENOTFOUND;
	}
	rc = conv_activate(c, err, errlen);
	if (rc)
		return rc;
	n_pos = eng_seq_n_pos(c->seq) - (u == n - 2 ? c->msgs[n - 1].n_ids : 0);
	if (conv_rerender_applies(c) && c->id != 0 &&
	    (rc = conv_rerender_prompt(c, u, &n_pos, &es, &synced, err, errlen)) != 0)
		return rc;
	if (n_pos <= 0) {
		kvc_err(err, errlen, "stream shorter than its messages");
		return KVC_ECORRUPT;
	}
	st->resumed_from_snapshot = c->pend_resumed;
	st->rebuilt = c->pend_rebuilt;
	rc = synced ? KVC_OK : retry_prompt(c, n_pos, &first, &es, err, errlen);
	if (rc)
		goto fail;
	prompt_done(c, &es, st);
	rc = reply(c, io, first, &g, &rs, st, t0, err, errlen);
	if (rc == 0)
		rc = reply_msg(&rec, &g, &rs, st, err, errlen);
	if (rc)
		goto fail;
	rc = conv_commit_reply(c, &rec, 1, u + 1, n_pos, conv_window_key(c, c->win), err, errlen);
	if (rc)
		goto fail;
	/* The store holds the new reply in place of the old one: the picture follows. */
	conv_msgs_drop(c, u + 1);
	if (conv_msgs_push(c, &rec)) {
		rc = KVC_ENOMEM;
		kvc_err(err, errlen, "out of memory");
		conv_drop_seq(c);
		goto out;
	}
	c->pend_resumed = c->pend_rebuilt = false;
	st->store_errors = c->store_errors;
	c->store_errors = 0;
	goto out;
fail:
	/* Nothing changed on disk: the cache goes back to the stored stream. */
	c->reply_logits_pos = -1;
	if (eng_seq_truncate(c->seq, n_pos) != 0 || (u == n - 2 && eng_seq_append(c->seq,
	    c->msgs[n - 1].ids, c->msgs[n - 1].n_ids, NULL, NULL, 0) != 0))
		conv_drop_seq(c);
out:
	conv_gen_free(&g);
	conv_reason_free(&rs);
	return rc;
}

int
conv_clear(struct conv *c, char *err, size_t errlen)
{
	int rc;

	if (c->id == 0)
		return KVC_OK;	/* nothing stored, nothing said */
	/* Messages, chunks and window in one transaction. */
	rc = sess_rewind_window(c->m->st, c->id, 0, 0, NULL, err, errlen);
	if (rc)
		return rc;
	conv_msgs_drop(c, 0);
	c->n_chunk_ends = 0;
	c->snap_end = 0;
	c->win = 0;
	c->win_stored = 0;
	conv_slide_reset(c);
	if (c->seq)
		(void)eng_seq_truncate(c->seq, 0);
	return KVC_OK;
}
