/*
 * sched_store.c: a prompt's prefix from the stored conversations.
 *
 * A client that resends a conversation the chat or the API stored (without
 * naming it) shares a token prefix with that conversation's stream. When
 * that prefix is longer than any resident cache's, the scheduler restores
 * the conversation's snapshot chunks into the request's sequence up to it,
 * and only the rest is prefilled: after a restart too, since the chunks are
 * in the database. Nothing is written and no lock is taken: the chunks are
 * read in one transaction, and each chunk's bind word (a hash of the model
 * and of the tokens it was computed from, checked by eng_seq_kv_load)
 * refuses a chunk that does not belong to the tokens given, so a stale
 * index costs a prefill, never a wrong cache.
 *
 * The index keeps each usable conversation's stream (this model's
 * fingerprint, the whole conversation in its window) and is refreshed
 * from the conversation list before each match, reloading only the
 * conversations whose counts or time changed.
 */
#include <stdlib.h>
#include <string.h>

#include "srv_int.h"

#define INDEX_MAX 4096		/* conversations looked at, the most recent first */

struct store_entry {
	int64_t id;
	int64_t updated;		/* what it was loaded at: updated, n_msgs, n_tokens */
	int n_msgs, n_tokens;
	struct kvc_tokens toks;		/* its stream: the messages' ids */
	bool seen;			/* still listed (refresh) */
	bool api;			/* titled "api: ", an unnamed request's (sched_save.c), of this template */
	uint64_t hist;			/* store_hist_hash of its system prompt and messages */
};

struct srv_store_index {
	struct store_entry *v;
	int n, cap;
};

void
store_index_free(struct srv_store_index *ix)
{
	if (ix == NULL)
		return;
	for (int i = 0; i < ix->n; i++)
		kvc_tokens_free(&ix->v[i].toks);
	free(ix->v);
	free(ix);
}

uint64_t
store_hist_hash(const char *text, int role, const uint64_t *h0)
{
	/* FNV-1a 64, each text preceded by its role and followed by a 0 byte */
	uint64_t h = h0 != NULL ? *h0 : 0xcbf29ce484222325ULL;
	const unsigned char *p = (const unsigned char *)(text ? text : "");

	h = (h ^ (unsigned char)('0' + role)) * 0x100000001b3ULL;
	for (; *p; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	return (h ^ 0) * 0x100000001b3ULL;
}

/* Load c's stream into e. 0, or a KVC_E* code. */
static int
load_stream(struct sess_store *st, const struct sess_conv *c, struct store_entry *e)
{
	struct sess_msg *m = NULL;
	char err[256];
	int n = 0, rc;

	e->toks.n = 0;
	rc = sess_msgs_load(st, c->id, &m, &n, err, sizeof err);
	e->hist = store_hist_hash(c->system, 0, NULL);
	for (int i = 0; rc == KVC_OK && i < n; i++) {
		e->hist = store_hist_hash(m[i].text, (int)m[i].role, &e->hist);
		rc = kvc_tokens_append(&e->toks, m[i].ids, (size_t)m[i].n_ids);
	}
	sess_msgs_free(m, n);
	e->id = c->id;
	e->updated = c->updated;
	e->n_msgs = c->n_msgs;
	e->n_tokens = c->n_tokens;
	return rc;
}

/* The entry of conversation id, or NULL. */
static struct store_entry *
find(struct srv_store_index *ix, int64_t id)
{
	for (int i = 0; i < ix->n; i++)
		if (ix->v[i].id == id)
			return &ix->v[i];
	return NULL;
}

/* Bring the index up to the store's conversation list. 0 or a KVC_E* code. */
static int
refresh(struct kvc_server *s, struct srv_store_index *ix)
{
	struct sess_conv *list = NULL;
	const char *fp = eng_fingerprint(s->e);
	char err[256];
	int n = 0, rc, k = 0;

	if ((rc = sess_conv_list(s->p.store, &list, &n, err, sizeof err)) != KVC_OK)
		return rc;
	for (int i = 0; i < ix->n; i++)
		ix->v[i].seen = false;
	for (int i = 0; i < n && i < INDEX_MAX && rc == KVC_OK; i++) {
		const struct sess_conv *c = &list[i];
		struct store_entry *e;

		if (c->window != 0 || c->n_msgs == 0 || c->model_fp == NULL ||
		    strcmp(c->model_fp, fp) != 0)
			continue;
		if ((e = find(ix, c->id)) == NULL) {
			if (ix->n == ix->cap) {
				int cap = ix->cap ? ix->cap * 2 : 16;
				struct store_entry *nv = realloc(ix->v, (size_t)cap * sizeof *nv);

				if (nv == NULL) {
					rc = KVC_ENOMEM;
					break;
				}
				ix->v = nv;
				ix->cap = cap;
			}
			e = &ix->v[ix->n++];
			memset(e, 0, sizeof *e);
			e->id = c->id;
			e->n_msgs = -1;
		}
		e->seen = true;
		/* continued only under the template its stream was rendered with */
		e->api = c->title != NULL && strncmp(c->title, "api: ", 5) == 0 &&
		    c->template_name != NULL &&
		    strcmp(c->template_name, chat_family_name(s->p.family)) == 0;
		if (e->updated != c->updated || e->n_msgs != c->n_msgs || e->n_tokens != c->n_tokens)
			rc = load_stream(s->p.store, c, e);
	}
	sess_conv_list_free(list, n);
	/* conversations no longer listed (deleted, or another model's now) leave */
	for (int i = 0; i < ix->n; i++) {
		if (ix->v[i].seen)
			ix->v[k++] = ix->v[i];
		else
			kvc_tokens_free(&ix->v[i].toks);
	}
	ix->n = k;
	return rc;
}

struct restore_ctx {
	struct kvc_seq *seq;
	const int32_t *toks;
	int n, want, done;
	char *err;
	size_t errlen;
};

/* One chunk into the sequence; 1 once the wanted positions are in. */
static int
load_chunk(void *arg, int pos0, int pos1, const void *blob, size_t len)
{
	struct restore_ctx *R = arg;
	int rc;

	if (pos0 != R->done || pos1 > R->n)
		return KVC_ECORRUPT;
	if ((rc = eng_seq_kv_load(R->seq, R->toks, blob, len, R->err, R->errlen)) != KVC_OK)
		return rc;
	R->done = pos1;
	return pos1 >= R->want ? 1 : 0;
}

/*
 * seq's cache replaced by entry e's snapshot chunks up to want positions:
 * the positions restored (0: none, seq emptied). The chunks before a
 * refused one were checked (bind word) and stay; whatever a refused one
 * left beyond them, and the positions past want, are dropped.
 */
static int
restore_entry(struct kvc_server *s, const struct store_entry *e, struct kvc_seq *seq, int want)
{
	struct restore_ctx R;
	char err[256] = "";

	(void)eng_seq_truncate(seq, 0);
	memset(&R, 0, sizeof R);
	R.seq = seq;
	R.toks = e->toks.v;
	R.n = (int)e->toks.n;
	R.want = want;
	R.err = err;
	R.errlen = sizeof err;
	(void)sess_chunks_load(s->p.store, e->id, eng_fingerprint(s->e),
	    eng_kv_type_name(eng_kv_type(s->e)), 0, load_chunk, &R, NULL, err, sizeof err);
	R.done = R.done < want ? R.done : want;
	(void)eng_seq_truncate(seq, R.done);
	return R.done;
}

int
store_prefix(struct kvc_server *s, struct srv_store_index **ixp, struct kvc_seq *seq,
    const int32_t *prompt, int n, int better_than, int64_t *from)
{
	struct srv_store_index *ix = *ixp;
	struct store_entry *best = NULL;
	int best_k = better_than, got;

	*from = 0;
	if (s->p.store == NULL)
		return 0;
	if (ix == NULL && (ix = *ixp = calloc(1, sizeof *ix)) == NULL)
		return 0;
	if (refresh(s, ix) != KVC_OK)
		return 0;	/* the resident caches still serve */
	for (int i = 0; i < ix->n; i++) {
		const int32_t *t = ix->v[i].toks.v;
		int m = (int)ix->v[i].toks.n, k = 0;

		while (k < m && k < n && t[k] == prompt[k])
			k++;
		if (k > best_k) {
			best = &ix->v[i];
			best_k = k;
		}
	}
	if (best == NULL)
		return 0;
	if ((got = restore_entry(s, best, seq, best_k)) == 0)
		return 0;
	*from = best->id;
	return got;
}

int
store_preload(struct kvc_server *s, struct srv_store_index **ixp, struct kvc_seq **seqs, int n,
    size_t budget, int *n_pos)
{
	struct srv_store_index *ix = *ixp;
	size_t used = 0;
	int k = 0, got;

	*n_pos = 0;
	if (s->p.store == NULL || n <= 0)
		return 0;
	if (ix == NULL && (ix = *ixp = calloc(1, sizeof *ix)) == NULL)
		return 0;
	if (refresh(s, ix) != KVC_OK)
		return 0;
	/* the index is in the store's order: the most recently touched first */
	for (int i = 0; i < ix->n && k < n; i++) {
		struct store_entry *e = &ix->v[i];
		size_t need = eng_kv_bytes_for(s->e, e->toks.n);

		if (e->toks.n == 0 || (budget > 0 && used + need > budget))
			continue;
		if ((got = restore_entry(s, e, seqs[k], (int)e->toks.n)) == 0)
			continue;
		used += eng_seq_kv_bytes(seqs[k]);
		*n_pos += got;
		k++;
	}
	return k;
}

/* Whether conversation id's system prompt and stored messages are j's but its last. */
static bool
same_history(struct kvc_server *s, int64_t id, const struct srv_job *j, size_t first,
    struct kvc_tokens *reply)
{
	struct sess_conv c;
	struct sess_msg *m = NULL;
	char err[256];
	int n = 0;
	bool same;

	memset(&c, 0, sizeof c);
	if (sess_conv_get(s->p.store, id, &c, err, sizeof err) != KVC_OK)
		return false;
	same = strcmp(c.system ? c.system : "", first ? j->msgs[0].text : "") == 0 &&
	    sess_msgs_load(s->p.store, id, &m, &n, err, sizeof err) == KVC_OK &&
	    (size_t)n + first + 1 == j->n_msgs && n > 0 && m[n - 1].role == SESS_ASSISTANT;
	for (int i = 0; same && i < n; i++) {
		const struct chat_msg *q = &j->msgs[first + (size_t)i];

		same = (int)q->role == (int)m[i].role && strcmp(q->text ? q->text : "",
		    m[i].text ? m[i].text : "") == 0;
	}
	reply->n = 0;
	if (same && kvc_tokens_append(reply, m[n - 1].ids, (size_t)m[n - 1].n_ids) != KVC_OK)
		same = false;
	sess_msgs_free(m, n);
	sess_conv_clear(&c);
	return same;
}

int
store_history(struct kvc_server *s, struct srv_store_index **ixp, const struct srv_job *j,
    int64_t *id, struct kvc_tokens *stream, struct kvc_tokens *reply)
{
	struct srv_store_index *ix = *ixp;
	size_t first = j->n_msgs > 0 && j->msgs[0].role == CHAT_SYSTEM ? 1 : 0;
	uint64_t h;

	*id = 0;
	if (j->n_msgs < first + 3)
		return 0;
	if (ix == NULL && (ix = *ixp = calloc(1, sizeof *ix)) == NULL)
		return KVC_ENOMEM;
	if (refresh(s, ix) != KVC_OK)
		return 0;
	h = store_hist_hash(first ? j->msgs[0].text : NULL, 0, NULL);
	for (size_t i = first; i + 1 < j->n_msgs; i++)
		h = store_hist_hash(j->msgs[i].text, (int)j->msgs[i].role, &h);
	/* the most recent first, as the list is */
	for (int i = 0; i < ix->n; i++) {
		const struct store_entry *e = &ix->v[i];

		if (!e->api || e->hist != h || (size_t)e->n_msgs + first + 1 != j->n_msgs ||
		    !same_history(s, e->id, j, first, reply))
			continue;
		stream->n = 0;
		if (kvc_tokens_append(stream, e->toks.v, e->toks.n) != KVC_OK)
			return KVC_ENOMEM;
		*id = e->id;
		return 0;
	}
	return 0;
}
