/*
 * residency.c: which conversations' caches are in memory. Several may be
 * open; their caches stay resident within kv_budget and the least recently
 * used one is evicted (the engine keeps its tokens, the snapshot on disk
 * keeps its cache). Making a cache resident again restores the snapshot
 * chunks that match this engine, and computes what they do not cover.
 */
#include "config.h"

#include <inttypes.h>

#include "conv_int.h"

static void
progress(struct conv_mgr *m, const char *label, uint64_t done, uint64_t total)
{
	if (m->p.progress != NULL)
		m->p.progress(m->p.progress_arg, label, done, total);
}

bool
conv_resident(const struct conv *c)
{
	return c->seq != NULL && eng_seq_resident(c->seq);
}

struct kvc_seq *
conv_seq(const struct conv *c)
{
	return conv_resident(c) ? c->seq : NULL;
}

static size_t
resident_bytes(const struct conv_mgr *m)
{
	size_t t = 0;

	for (const struct conv *c = m->open; c; c = c->next)
		if (conv_resident(c))
			t += eng_seq_kv_bytes(c->seq);
	return t;
}

size_t
conv_mgr_kv_bytes(const struct conv_mgr *m, int *n_open, int *n_resident)
{
	int no = 0, nr = 0;

	for (const struct conv *c = m->open; c; c = c->next) {
		no++;
		nr += conv_resident(c);
	}
	if (n_open)
		*n_open = no;
	if (n_resident)
		*n_resident = nr;
	return resident_bytes(m);
}

void
conv_evict(struct conv *c)
{
	if (conv_resident(c))
		eng_seq_evict(c->seq);
}

void
conv_drop_seq(struct conv *c)
{
	eng_seq_free(c->seq);
	c->seq = NULL;
}

void
conv_mgr_fit(struct conv_mgr *m, const struct conv *keep, size_t extra)
{
	if (m->p.kv_budget == 0)
		return;
	while (resident_bytes(m) + extra > m->p.kv_budget) {
		struct conv *lru = NULL;

		for (struct conv *c = m->open; c; c = c->next)
			if (c != keep && conv_resident(c) &&
			    (lru == NULL || c->last_used < lru->last_used))
				lru = c;
		if (lru == NULL)
			return;
		conv_notice(m, "conversation %" PRId64 " (%s) left memory (--kv-budget); its "
		    "snapshot stays on disk", lru->id, lru->title);
		conv_evict(lru);
	}
}

struct load_ctx {
	struct conv *c;
	const int32_t *toks;		/* the stream the chunks belong to */
	int n;
	int done;			/* positions restored */
	char *err;
	size_t errlen;
};

static int
load_chunk(void *arg, int pos0, int pos1, const void *blob, size_t len)
{
	struct load_ctx *L = arg;
	int rc;

	if (pos1 > L->n || pos0 != L->done) {
		kvc_err(L->err, L->errlen, "chunk [%d, %d) does not continue the stream of %d "
		    "tokens", pos0, pos1, L->n);
		return KVC_ECORRUPT;
	}
	rc = eng_seq_kv_load(L->c->seq, L->toks, blob, len, L->err, L->errlen);
	if (rc)
		return rc;
	L->done = pos1;
	if (conv_chunks_push(L->c, pos1))
		return KVC_ENOMEM;
	progress(L->c->m, "restoring snapshot", (uint64_t)pos1, (uint64_t)L->n);
	return KVC_OK;
}

/* Why the snapshot is not used: said once, before the rebuild. */
static void
notice_rebuild(struct conv *c, int rc, const char *why)
{
	struct conv_mgr *m = c->m;

	if (rc == KVC_ENOTFOUND && why[0] != '\0')
		/* the engine's word: another stream's chunk, another model's, or version 1 */
		conv_notice(m, "conversation %" PRId64 ": snapshot not used (%s); rebuilding "
		    "from the stored tokens", c->id, why);
	else if (rc == KVC_ENOTFOUND)
		conv_notice(m, "conversation %" PRId64 ": snapshot was saved with another model "
		    "or cache type; rebuilding from the stored tokens", c->id);
	else if (rc == KVC_ECORRUPT)
		conv_notice(m, "conversation %" PRId64 ": snapshot is corrupt (%s); rebuilding "
		    "from the stored tokens", c->id, why);
	else if (rc != 0)
		conv_notice(m, "conversation %" PRId64 ": snapshot unusable (%s); rebuilding "
		    "from the stored tokens", c->id, why[0] ? why : kvc_strerror(rc));
	else
		conv_notice(m, "conversation %" PRId64 ": no snapshot; rebuilding from the "
		    "stored tokens", c->id);
}

/*
 * Fill the (empty) cache of c->seq with toks[0..n): the chunks on disk as
 * far as they match, then the rest computed. A snapshot that does not
 * cover everything leaves a notice; a rebuilt one is written anew.
 */
static int
restore(struct conv *c, const int32_t *toks, int n, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct load_ctx L = {c, toks, n, 0, NULL, 0};
	char why[256] = "";
	int rc;

	L.err = why;
	L.errlen = sizeof why;
	progress(m, "restoring snapshot", 0, (uint64_t)n);
	rc = sess_chunks_load(m->st, c->id, eng_fingerprint(m->e),
	    conv_kv_type_name(eng_kv_type(m->e)), conv_window_key(c, c->win), load_chunk, &L, NULL, why, sizeof why);
	progress(m, NULL, 0, 0);
	if (rc == 0 && L.done == n) {
		c->pend_resumed = true;
		return KVC_OK;
	}
	if (rc == 0 && L.done > 0) {
		/* The chunks on disk are a valid prefix: compute only the rest. */
		conv_notice(m, "snapshot of conversation %" PRId64 " covers %d of %d positions; "
		    "computing the rest", c->id, L.done, n);
	} else {
		notice_rebuild(c, rc, why);
		/* A partly loaded cache may hold a bad chunk: start clean. */
		eng_seq_evict(c->seq);
		if (sess_chunks_clear(m->st, c->id, why, sizeof why) != 0)
			conv_store_failed(c, "snapshot", why);
		c->n_chunk_ends = 0;
		c->snap_end = 0;
		L.done = 0;
	}
	/* Stoppable: the caller (make_resident) then drops the half-built cache. */
	conv_work_begin(m, "rebuilding", m->p.interrupt);
	rc = eng_seq_sync(c->seq, toks, n, NULL, err, errlen);
	conv_work_end(m);
	if (rc == KVC_EINTR)
		kvc_err(err, errlen, "rebuilding the cache of conversation %" PRId64 " (%d "
		    "positions) was stopped; it is rebuilt when next used", c->id, n);
	if (rc)
		return rc;
	c->pend_rebuilt = true;
	if (L.done == 0)
		conv_save_snapshot(c);
	return KVC_OK;
}

/*
 * Bring the cache back. An evicted sequence still has its tokens; without
 * a sequence the stream is rendered from the messages.
 */
static int
make_resident(struct conv *c, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct kvc_tokens built = {0};
	const int32_t *toks;
	int n, rc;

	if (conv_resident(c))
		return KVC_OK;
	if (c->seq == NULL) {
		rc = conv_build_cached(c, c->n_msgs, &built, err, errlen);
		if (rc)
			goto out;
		toks = built.v;
		n = (int)built.n;
	} else {
		toks = eng_seq_tokens(c->seq);
		n = eng_seq_n_pos(c->seq);
	}
	conv_mgr_fit(m, c, eng_kv_bytes_for(m->e, (size_t)n));
	if (n == 0)
		conv_drop_seq(c);	/* nothing to keep: a fresh sequence has its cache */
	if (c->seq == NULL && (rc = eng_seq_new(m->e, &c->seq, err, errlen)) != 0)
		goto out;
	c->pend_resumed = c->pend_rebuilt = false;
	c->n_chunk_ends = 0;
	c->snap_end = 0;
	rc = n > 0 ? restore(c, toks, n, err, errlen) : KVC_OK;
	if (rc)
		conv_drop_seq(c);
out:
	kvc_tokens_free(&built);
	return rc;
}

int
conv_activate(struct conv *c, char *err, size_t errlen)
{
	c->last_used = ++c->m->tick;
	return make_resident(c, err, errlen);
}
