/*
 * sched.c: the scheduler thread, the engine's only user while the server
 * runs.
 *
 * It keeps --parallel slots, each an engine sequence whose cache stays
 * resident after its request ends. A new request takes the free slot whose
 * cached tokens share the longest prefix with its rendered prompt (so a
 * client that resends its history prefills only its new message), and
 * eng_seq_sync computes the rest. While other requests are decoding, other
 * prefills wait or a newcomer waits for a free slot, that prefill is cut
 * into slices of about 0.2 s (the engine's prefill hook stops it after one;
 * the next sync keeps what was computed) with one decode step of everyone
 * else between two slices, so a newcomer's long prompt neither stalls the
 * streams nor waits for them. Which waiting prefill gets the next slice is
 * sched_pick.c's choice: the least left to compute, a long wait counting
 * against it, so a short newcomer's first token does not wait for every
 * prompt that came before it, and no prompt waits for ever. Every running
 * request's next token goes through the model in one eng_seq_decode_multi
 * pass (continuous batching: a request leaves the batch when it ends, a
 * new one joins after its prefill). Each sequence's logits are those it
 * would get alone, so a greedy reply does not depend on its neighbours.
 *
 * The generation follows kvchat generate (CONV_GEN_COMPLETION): an
 * end-of-generation id ends a reply unsaid, and a sampled id is run
 * through the model only when another is wanted after it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_int.h"

struct srv_slot {
	struct kvc_seq *seq;
	struct srv_job *job;		/* the request running here, or NULL */
	double last_used;		/* kvc_now() when its last request ended */
};

struct srv_sched {
	struct kvc_server *s;
	pthread_t thr;
	bool running;
	struct srv_slot *slot;
	int n_slot;
	struct conv_mgr *cm;		/* stored conversations' turns, or NULL */
	bool slice;			/* the prefill under way stops after one slice */
	struct srv_job *pre;		/* the job whose prefill runs (the hook reads its cancel) */
	unsigned long n_placed;		/* jobs placed in slots so far (their order) */
	int slice_pos;			/* positions the last cut slice computed (sched_pick.c's unit) */
	struct srv_store_index *ix;	/* the stored conversations' streams (sched_store.c) */
	struct kvc_buf piece;		/* scratch */
};

/* Whether a request waits in the queue while a slot is free for it (the scheduler thread's view). */
static bool
newcomer_waiting(struct srv_sched *sc)
{
	bool free_slot = false, queued;

	for (int i = 0; i < sc->n_slot && !free_slot; i++)
		free_slot = sc->slot[i].job == NULL;
	if (!free_slot)
		return false;
	pthread_mutex_lock(&sc->s->mu);
	queued = sc->s->q_head != NULL;
	pthread_mutex_unlock(&sc->s->mu);
	return queued;
}

/*
 * The prefill hook: stop after a slice when the prefill was to be sliced,
 * or when a newcomer arrived meanwhile (it is placed at the next pass and
 * may go first), or at once when the client went away.
 */
static int
prefill_hook(void *arg, int done, int total)
{
	struct srv_sched *sc = arg;

	/* a prefill outside prefill() (a snapshot's restore, a stored conversation's turn
	 * before its own hook is set) is not the scheduler's to cut */
	if (sc->pre == NULL)
		return 0;
	if (sc->pre->cancel || sc->s->quit)
		return 1;
	if (done <= 0 || done >= total)
		return 0;
	return sc->slice || newcomer_waiting(sc);
}

/* A job taken from the queue has ended: one more may wait. */
static void
active_done(struct kvc_server *s)
{
	pthread_mutex_lock(&s->mu);
	s->n_active--;
	pthread_mutex_unlock(&s->mu);
}

/*
 * --kv-budget: while the caches hold more than the budget, the least
 * recently used idle sequence lets its cache go (a running one never does).
 */
static void
keep_budget(struct srv_sched *sc)
{
	size_t budget = sc->s->p.kv_budget;

	while (budget > 0) {
		struct srv_slot *lru = NULL;
		size_t total = 0;

		for (int i = 0; i < sc->n_slot; i++) {
			struct srv_slot *sl = &sc->slot[i];

			total += eng_seq_kv_bytes(sl->seq);
			if (sl->job == NULL && eng_seq_resident(sl->seq) && eng_seq_n_pos(sl->seq) > 0 &&
			    (lru == NULL || sl->last_used < lru->last_used))
				lru = sl;
		}
		if (total <= budget || lru == NULL)
			return;
		/* the tokens go too: nothing is left to reuse */
		(void)eng_seq_truncate(lru->seq, 0);
		eng_seq_evict(lru->seq);
	}
}

/* The job leaves its slot; the sequence keeps its cache for the next one. */
static void
release(struct srv_sched *sc, struct srv_slot *sl)
{
	struct srv_job *j = sl->job;

	sl->job = NULL;
	sl->last_used = kvc_now();
	active_done(sc->s);
	job_done(j, 499);
	job_unref(j);
	keep_budget(sc);
}

/* j ended ("stop" or "length"); after a stop string (cut) nothing held back is flushed. */
static void
finish(struct srv_sched *sc, struct srv_slot *sl, const char *why, bool cut)
{
	struct srv_job *j = sl->job;

	sc->piece.n = 0;
	if (!cut && tok_detok_flush(&j->dt, &sc->piece) == 0)
		(void)kvc_buf_append(&j->text, sc->piece.p, sc->piece.n);
	j->finish = why;
	j->t_end = kvc_now();
	j->n_gen = (int)j->ids.n;
	/* stored before the body is made, so the response names its conversation */
	save_unnamed(sc->s, &sc->ix, sl->seq, j);
	job_finish_ok(j);
	srv_log(sc->s, "%s: prompt %d (cached %d), %d generated, %s", j->id, j->n_prompt, j->cached,
	    j->n_gen, why);
	release(sc, sl);
}

/* Where in text[0..n) one of j's stop strings begins (searching from `from`), or NULL. */
static const char *
find_stop(const struct srv_job *j, const char *text, size_t n, size_t from)
{
	const char *const *tmpl = j->kind == SRV_CHAT ? chat_stop_strings(j->srv->p.family) : NULL;
	const char *best = NULL;

	for (int i = 0; i < j->n_stop + SRV_MAX_STOP * 4; i++) {
		const char *s = i < j->n_stop ? j->stop[i] : tmpl ? tmpl[i - j->n_stop] : NULL;
		const char *h;

		if (s == NULL)
			break;
		h = n > from ? strstr(text + from, s) : NULL;
		if (h != NULL && (best == NULL || h < best))
			best = h;
	}
	(void)n;
	return best;
}

/*
 * With the slot's logits at hand: sample the next id and see whether it
 * ends the request. 1: it runs on (j->next goes into the next pass), 0: it
 * finished, KVC_ENOMEM.
 */
static int
take(struct srv_sched *sc, struct srv_slot *sl)
{
	struct srv_job *j = sl->job;
	const struct kvc_tokenizer *tok = eng_tokenizer(sc->s->e);
	const char *hit;
	size_t from;
	int32_t id;

	if ((int)j->ids.n >= j->max_tokens) {
		finish(sc, sl, "length", false);
		return 0;
	}
	id = smp_sample(j->sampler, eng_seq_logits(sl->seq), eng_seq_tokens(sl->seq),
	    (size_t)eng_seq_n_pos(sl->seq));
	if (tok_is_eog(tok, id)) {
		j->eog = id;
		finish(sc, sl, "stop", false);
		return 0;
	}
	sc->piece.n = 0;
	if (kvc_tokens_push(&j->ids, id) != KVC_OK ||
	    (tok_detok_push(tok, &j->dt, id, &sc->piece) == 0 &&
	    kvc_buf_append(&j->text, sc->piece.p, sc->piece.n) != KVC_OK))
		return KVC_ENOMEM;
	/* text before what was sent (or scanned) cannot hold a stop string's start */
	from = j->stream ? j->sent : j->scanned;
	if (j->text.n > 0 && (hit = find_stop(j, j->text.p, j->text.n, from)) != NULL) {
		j->text.n = (size_t)(hit - j->text.p);
		j->text.p[j->text.n] = '\0';
		finish(sc, sl, "stop", true);
		return 0;
	}
	/* a stop string (SRV_STOP_LEN at most; the templates' are shorter) may straddle the next piece */
	j->scanned = j->text.n > SRV_STOP_LEN ? j->text.n - SRV_STOP_LEN : 0;
	if ((int)j->ids.n >= j->max_tokens || eng_seq_n_pos(sl->seq) >= eng_n_ctx(sc->s->e)) {
		finish(sc, sl, "length", false);
		return 0;
	}
	if (job_send_text(j, false) != KVC_OK)
		return KVC_ENOMEM;
	j->next = id;
	return 1;
}

/* The tokens of j's prompt: its messages by the template, or its text. 0, or 400/500 with err. */
static int
render(struct srv_sched *sc, struct srv_job *j, char *err, size_t errlen)
{
	const struct srv_params *p = &sc->s->p;
	const struct kvc_tokenizer *tok = eng_tokenizer(sc->s->e);
	int rc;

	/* an unnamed request continuing a stored one: that one's stream, then the new message */
	if ((rc = save_prompt(sc->s, &sc->ix, j, err, errlen)) > 0)
		rc = KVC_OK;
	else if (rc == KVC_OK && j->kind == SRV_CHAT)
		rc = chat_render(tok, p->family, p->jinja, j->msgs, j->n_msgs, true, &j->prompt_ids,
		    err, errlen);
	else if (rc == KVC_OK)
		rc = tok_encode(tok, j->prompt, strlen(j->prompt), tok_add_bos_default(tok) ?
		    TOK_ADD_BOS : 0, &j->prompt_ids, err, errlen);
	if (rc == KVC_ENOMEM)
		return 500;
	if (rc != KVC_OK)
		return 400;
	/* nothing to continue from: BOS alone, as kvchat generate starts */
	if (j->prompt_ids.n == 0 && (tok_bos(tok) < 0 || kvc_tokens_push(&j->prompt_ids,
	    tok_bos(tok)) != KVC_OK)) {
		kvc_err(err, errlen, "an empty prompt, and the model has no BOS token to start from");
		return 400;
	}
	if (j->prompt_ids.n >= (size_t)eng_n_ctx(sc->s->e)) {
		kvc_err(err, errlen, "the prompt has %zu tokens, the context only %d", j->prompt_ids.n,
		    eng_n_ctx(sc->s->e));
		return 400;
	}
	if (smp_new(&j->sampler, &j->smp, eng_n_vocab(sc->s->e)) != KVC_OK) {
		kvc_err(err, errlen, "out of memory");
		return 500;
	}
	tok_detok_init(&j->dt, j->kind == SRV_CHAT ? 0 : TOK_DETOK_KEEP_LEADING_SPACE);
	return 0;
}

/* Tokens seq's cache shares with ids[0..n). */
static int
common_prefix(const struct kvc_seq *seq, const int32_t *ids, int n)
{
	const int32_t *t = eng_seq_tokens(seq);
	int m = eng_seq_resident(seq) ? eng_seq_n_pos(seq) : 0, k = 0;

	while (k < m && k < n && t[k] == ids[k])
		k++;
	return k;
}

/* Give j a free slot: the one sharing the longest prefix (then the least recently used). */
static void
place(struct srv_sched *sc, struct srv_job *j)
{
	struct srv_slot *best = NULL;
	int best_k = -1;
	char err[512] = "";
	int st;

	j->t_start = kvc_now();
	if ((st = render(sc, j, err, sizeof err)) != 0) {
		job_fail(j, st, err);
		active_done(sc->s);
		job_unref(j);
		return;
	}
	for (int i = 0; i < sc->n_slot; i++) {
		struct srv_slot *sl = &sc->slot[i];
		int k;

		if (sl->job != NULL)
			continue;
		k = common_prefix(sl->seq, j->prompt_ids.v, (int)j->prompt_ids.n);
		if (k > best_k || (k == best_k && sl->last_used < best->last_used)) {
			best = sl;
			best_k = k;
		}
	}
	/* a stored conversation may share more (worth a restore past 16 tokens) */
	if (sc->s->p.store != NULL) {
		int64_t from;
		int k = store_prefix(sc->s, &sc->ix, best->seq, j->prompt_ids.v,
		    (int)j->prompt_ids.n, best_k + 16, &from);

		if (k > 0)
			srv_log(sc->s, "%s: %d positions from the snapshot of conversation %lld", j->id, k,
			    (long long)from);
	}
	best->job = j;
	j->n_prompt = (int)j->prompt_ids.n;
	j->order = ++sc->n_placed;
}

/*
 * One slice (or all, when others is false and no newcomer comes) of the
 * prefill of the slot's job; then its first token. 0 or KVC_ENOMEM.
 */
static int
prefill(struct srv_sched *sc, struct srv_slot *sl, bool others)
{
	struct srv_job *j = sl->job;
	struct eng_stats st;
	char err[512] = "";
	int had = common_prefix(sl->seq, j->prompt_ids.v, (int)j->prompt_ids.n), rc;

	sc->slice = others;
	sc->pre = j;
	eng_set_prefill_hook(sc->s->e, prefill_hook, sc);
	rc = eng_seq_sync(sl->seq, j->prompt_ids.v, (int)j->prompt_ids.n, &st, err, sizeof err);
	sc->pre = NULL;
	if (!j->prefilling) {
		j->prefilling = true;
		j->cached = st.n_reused;
	}
	/* a slice done (or cancelled): its size is the unit of the next choice; the loop goes on */
	if (rc == KVC_EINTR) {
		if (eng_seq_n_pos(sl->seq) > had)
			sc->slice_pos = eng_seq_n_pos(sl->seq) - had;
		return KVC_OK;
	}
	if (rc != KVC_OK) {
		srv_log(sc->s, "%s: prefill: %s", j->id, err);
		job_fail(j, rc == KVC_ERANGE ? 400 : 500, err);
		release(sc, sl);
		return rc == KVC_ENOMEM ? rc : KVC_OK;
	}
	j->t_prefilled = kvc_now();
	j->computed = j->n_prompt - j->cached;
	job_start(j, 200);
	rc = take(sc, sl);
	/* said once the request is generating: what a client (or a test) may wait for */
	if (rc > 0)
		srv_log(sc->s, "%s: first token after %.0f ms (prompt %d, cached %d)", j->id,
		    (j->t_prefilled - j->t_start) * 1e3, j->n_prompt, j->cached);
	return rc < 0 ? rc : KVC_OK;
}

/* One pass: every decoding job's next token, together. 0 or KVC_ENOMEM. */
static int
step(struct srv_sched *sc)
{
	struct kvc_seq *seqs[SRV_MAX_PARALLEL];
	int32_t toks[SRV_MAX_PARALLEL];
	int idx[SRV_MAX_PARALLEL];
	char err[512] = "";
	int n = 0, rc;

	for (int i = 0; i < sc->n_slot; i++) {
		struct srv_job *j = sc->slot[i].job;

		if (j != NULL && j->t_prefilled > 0) {
			idx[n] = i;
			seqs[n] = sc->slot[i].seq;
			toks[n++] = j->next;
		}
	}
	if (n == 0)
		return KVC_OK;
	rc = eng_seq_decode_multi(seqs, n, toks, err, sizeof err);
	for (int k = 0; k < n; k++) {
		struct srv_slot *sl = &sc->slot[idx[k]];

		if (rc != KVC_OK) {
			job_fail(sl->job, 500, err);
			release(sc, sl);
		} else if ((rc = take(sc, sl)) < 0) {
			return rc;
		} else {
			rc = KVC_OK;
		}
	}
	if (rc != KVC_OK)
		srv_log(sc->s, "decode: %s", err);
	return KVC_OK;
}

/*
 * Under mu: take out of the queue the jobs that end without running (their
 * client left while they waited, or the server is stopping) into gone, at
 * most max.
 */
static int
take_gone(struct kvc_server *s, struct srv_job **gone, int max)
{
	struct srv_job **at = &s->q_head, *prev = NULL;
	int n = 0;

	while (*at != NULL && n < max) {
		struct srv_job *j = *at;

		if (!j->cancel && !s->stopping) {
			prev = j;
			at = &j->next_q;
			continue;
		}
		*at = j->next_q;
		if (s->q_tail == j)
			s->q_tail = prev;
		s->n_queue--;
		gone[n++] = j;
	}
	return n;
}

/*
 * Under mu: wait for work; move the waiting jobs that have a free slot to
 * `in`, and those that end unrun to `gone`. false: stop now (srv_stop).
 */
static bool
next_work(struct srv_sched *sc, struct srv_job **in, int *n_in, struct srv_job **gone,
    int *n_gone)
{
	struct kvc_server *s = sc->s;
	int n_free, busy;

	for (;;) {
		if (s->quit)
			return false;
		*n_gone = take_gone(s, gone, SRV_MAX_PARALLEL);
		n_free = busy = 0;
		for (int i = 0; i < sc->n_slot; i++) {
			if (sc->slot[i].job == NULL)
				n_free++;
			else
				busy++;	/* running, or cancelled and released by the loop */
		}
		if (busy > 0 || *n_gone > 0 || (n_free > 0 && s->q_head != NULL))
			break;
		pthread_cond_wait(&s->wake, &s->mu);
	}
	*n_in = 0;
	while (s->q_head != NULL && *n_in < n_free) {
		struct srv_job *j = s->q_head;

		s->q_head = j->next_q;
		if (s->q_head == NULL)
			s->q_tail = NULL;
		s->n_queue--;
		s->n_active++;
		in[(*n_in)++] = j;
	}
	return true;
}

/* A job that ends without running: its client left while it waited, or the server stops. */
static void
end_unrun(struct kvc_server *s, struct srv_job *j)
{
	if (j->cancel) {
		srv_log(s, "%s: the client went away after 0 tokens (it was waiting)", j->id);
		job_done(j, 499);
	} else {
		srv_log(s, "%s: 503: the server is stopping", j->id);
		job_fail(j, 503, "the server is stopping");
	}
	job_unref(j);
}

/*
 * The slot whose prefill gets this pass's slice (sched_pick.c), or NULL;
 * *decoding: whether any request is decoding, *n_pending: the prefills
 * waiting. The others' wait grows by one pass.
 */
static struct srv_slot *
pick_prefill(struct srv_sched *sc, bool *decoding, int *n_pending)
{
	struct srv_pending p[SRV_MAX_PARALLEL];
	int at[SRV_MAX_PARALLEL], n = 0, k;

	for (int i = 0; i < sc->n_slot; i++) {
		struct srv_job *j = sc->slot[i].job;

		if (j == NULL)
			continue;
		if (j->t_prefilled > 0) {
			*decoding = true;
			continue;
		}
		p[n] = (struct srv_pending){ j->n_prompt - common_prefix(sc->slot[i].seq,
		    j->prompt_ids.v, j->n_prompt), j->waited, j->order };
		at[n++] = i;
	}
	*n_pending = n;
	if (n == 0)
		return NULL;
	k = sched_pick_prefill(p, n, sc->slice_pos);
	for (int i = 0; i < n; i++)
		if (i != k)
			sc->slot[at[i]].job->waited++;
	return &sc->slot[at[k]];
}

/* A job a connection gave up on leaves its slot (its sequence keeps what it computed). */
static void
drop_cancelled(struct srv_sched *sc)
{
	for (int i = 0; i < sc->n_slot; i++)
		if (sc->slot[i].job != NULL && sc->slot[i].job->cancel) {
			srv_log(sc->s, "%s: the client went away after %zu tokens", sc->slot[i].job->id,
			    sc->slot[i].job->ids.n);
			release(sc, &sc->slot[i]);
		}
}

/*
 * A stored conversation's turn, run here and now. It is s->turn while it
 * runs, so that srv_stop can stop it (through its cancel flag, under mu:
 * a turn is either not begun when quit is set, or stopped by it).
 */
static void
run_turn(struct srv_sched *sc, struct srv_job *j)
{
	struct kvc_server *s = sc->s;
	bool run;

	pthread_mutex_lock(&s->mu);
	run = !s->quit;
	if (run)
		s->turn = j;
	pthread_mutex_unlock(&s->mu);
	if (run) {
		sched_conv_run(s, sc->cm, j);
		pthread_mutex_lock(&s->mu);
		s->turn = NULL;
		pthread_mutex_unlock(&s->mu);
	}
	active_done(s);
	if (run)
		job_unref(j);
	else
		end_unrun(s, j);
}

static void *
sched_main(void *arg)
{
	struct srv_sched *sc = arg;
	struct kvc_server *s = sc->s;
	struct srv_job *in[SRV_MAX_PARALLEL], *gone[SRV_MAX_PARALLEL];
	int n_in, n_gone, rc = KVC_OK;

	for (;;) {
		struct srv_slot *pre;
		bool decoding = false;
		int n_pending = 0;

		pthread_mutex_lock(&s->mu);
		if (!next_work(sc, in, &n_in, gone, &n_gone)) {
			pthread_mutex_unlock(&s->mu);
			break;
		}
		pthread_mutex_unlock(&s->mu);
		for (int k = 0; k < n_gone; k++)
			end_unrun(s, gone[k]);
		drop_cancelled(sc);
		for (int k = 0; k < n_in; k++) {
			if (in[k]->cancel) {
				active_done(s);
				end_unrun(s, in[k]);
			} else if (in[k]->has_conv) {
				run_turn(sc, in[k]);
			} else {
				place(sc, in[k]);
			}
		}
		pre = pick_prefill(sc, &decoding, &n_pending);
		if (pre != NULL)
			rc = prefill(sc, pre, sched_slice_prefill(decoding, n_pending, newcomer_waiting(sc)));
		if (rc == KVC_OK)
			rc = step(sc);
		if (rc != KVC_OK) {
			srv_log(s, "out of memory: stopping the scheduler");
			break;
		}
	}
	/* stopped (or out of memory): whatever runs or waits gets 503 */
	for (int i = 0; i < sc->n_slot; i++)
		if (sc->slot[i].job != NULL) {
			srv_log(s, "%s: stopped by the server after %zu tokens (503)", sc->slot[i].job->id,
			    sc->slot[i].job->ids.n);
			job_fail(sc->slot[i].job, 503, "the server is stopping");
			release(sc, &sc->slot[i]);
		}
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	while (s->q_head != NULL) {
		struct srv_job *j = s->q_head;

		s->q_head = j->next_q;
		s->n_queue--;
		pthread_mutex_unlock(&s->mu);
		end_unrun(s, j);
		pthread_mutex_lock(&s->mu);
	}
	s->q_tail = NULL;
	pthread_mutex_unlock(&s->mu);
	eng_set_prefill_hook(s->e, NULL, NULL);
	return NULL;
}

/*
 * A short prefill and one decode step in the first slot, then its
 * positions dropped, before the server listens. A fresh process's first
 * pass pays for what no later one does: the scratch buffers' and the
 * slot's first KV pages faulted in, the mapped weights' pages mapped, the
 * worker threads' first wake-up. Without it the first request after a
 * restart (a snapshot's turn) is 10-50 ms slower than the one before the
 * restart. Best effort: a failure here is the first request's to report.
 */
static void
warm_up(struct srv_sched *sc)
{
	struct kvc_engine *e = sc->s->e;
	int bos = tok_bos(eng_tokenizer(e)), n = 17;
	int32_t t[17];
	char err[256];

	if (eng_n_ctx(e) <= n)
		return;
	for (int i = 0; i < n; i++)
		t[i] = i == 0 && bos >= 0 ? bos : i % eng_n_vocab(e);
	/* the first n - 1 positions as a prefill, the last as a decode step */
	if (eng_seq_sync(sc->slot[0].seq, t, n - 1, NULL, err, sizeof err) == KVC_OK)
		(void)eng_seq_sync(sc->slot[0].seq, t, n, NULL, err, sizeof err);
	(void)eng_seq_truncate(sc->slot[0].seq, 0);
}

/*
 * The sequences take back the caches of the stored conversations used
 * last, so that the clients that were talking when the server stopped
 * continue from a resident cache, as they would have without the
 * restart: the snapshots' reading is done here, before the server
 * listens, and not in their first request's time to first token.
 */
static void
preload(struct srv_sched *sc)
{
	struct kvc_seq *seqs[SRV_MAX_PARALLEL];
	double t0 = kvc_now();
	int n_pos, k;

	for (int i = 0; i < sc->n_slot; i++)
		seqs[i] = sc->slot[i].seq;
	k = store_preload(sc->s, &sc->ix, seqs, sc->n_slot, sc->s->p.kv_budget, &n_pos);
	if (k > 0)
		srv_log(sc->s, "the caches of %d stored conversation%s taken back (%d positions, "
		    "%.0f ms)", k, k == 1 ? "" : "s", n_pos, (kvc_now() - t0) * 1e3);
}

int
sched_start(struct kvc_server *s, char *err, size_t errlen)
{
	struct srv_sched *sc = calloc(1, sizeof *sc);
	int rc;

	if (sc == NULL)
		return KVC_ENOMEM;
	s->sched = sc;
	sc->s = s;
	sc->n_slot = s->p.parallel;
	sc->slice_pos = 512;	/* the engine's slice without a hook, until one is measured */
	if ((sc->slot = calloc((size_t)sc->n_slot, sizeof *sc->slot)) == NULL)
		return KVC_ENOMEM;
	for (int i = 0; i < sc->n_slot; i++)
		if ((rc = eng_seq_new(s->e, &sc->slot[i].seq, err, errlen)) != KVC_OK)
			return rc;
	if (s->p.store != NULL &&
	    (rc = conv_mgr_new(&sc->cm, s->e, s->p.store, &s->p.conv, err, errlen)) != KVC_OK)
		return rc;
	if (!s->p.no_warmup) {
		warm_up(sc);
		preload(sc);
	}
	if (pthread_create(&sc->thr, NULL, sched_main, sc) != 0) {
		kvc_err(err, errlen, "cannot start the scheduler thread");
		return KVC_ENOMEM;
	}
	sc->running = true;
	return KVC_OK;
}

void
sched_stop(struct kvc_server *s)
{
	struct srv_sched *sc = s->sched;

	if (sc == NULL)
		return;
	if (sc->running) {
		pthread_mutex_lock(&s->mu);
		s->stopping = true;
		s->quit = 1;
		pthread_cond_broadcast(&s->wake);
		pthread_mutex_unlock(&s->mu);
		pthread_join(sc->thr, NULL);
	}
	if (sc->cm != NULL)
		conv_mgr_free(sc->cm);
	store_index_free(sc->ix);
	for (int i = 0; sc->slot != NULL && i < sc->n_slot; i++)
		if (sc->slot[i].seq != NULL)
			eng_seq_free(sc->slot[i].seq);
	free(sc->slot);
	kvc_buf_free(&sc->piece);
	free(sc);
	s->sched = NULL;
}

int
sched_submit(struct kvc_server *s, struct srv_job *j)
{
	int st = 0;

	pthread_mutex_lock(&s->mu);
	if (s->stopping)
		st = 503;
	else if (s->n_queue >= s->p.max_queue + (s->p.parallel > s->n_active ?
	    s->p.parallel - s->n_active : 0))
		st = 429;	/* more would wait than --max-queue beyond the free sequences */
	else {
		j->refs++;
		j->next_q = NULL;
		if (s->q_tail)
			s->q_tail->next_q = j;
		else
			s->q_head = j;
		s->q_tail = j;
		s->n_queue++;
		pthread_cond_broadcast(&s->wake);
	}
	pthread_mutex_unlock(&s->mu);
	return st;
}
