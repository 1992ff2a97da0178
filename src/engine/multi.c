/*
 * multi.c: one decode step of several sequences at once (kvchat batch).
 *
 * Each sequence gets one token at its own next position; with a backend
 * that has forward_multi they all run in one forward pass (the CPU and the
 * GPU read each weight row once for all of them), else one after the
 * other. Either way every sequence ends as eng_seq_append of that one
 * token would leave it: the token in its list, its cache one position
 * longer, its logits at hand, the same bits on the CPU (to float rounding
 * on the GPU, backend.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

/* The sequences' arguments, checked before anything changes. */
static int
check_multi(struct kvc_seq *const *seqs, int n, const int32_t *tokens, char *err, size_t errlen)
{
	struct kvc_engine *e;

	if (n < 1 || seqs == NULL || tokens == NULL || seqs[0] == NULL) {
		kvc_err(err, errlen, "decode_multi: bad sequence count %d", n);
		return KVC_EINVAL;
	}
	e = seqs[0]->e;
	for (int i = 0; i < n; i++) {
		if (seqs[i] == NULL || seqs[i]->e != e) {
			kvc_err(err, errlen, "decode_multi: sequence %d is not of the first one's engine", i);
			return KVC_EINVAL;
		}
		for (int j = 0; j < i; j++)
			if (seqs[j] == seqs[i]) {
				kvc_err(err, errlen, "decode_multi: sequence %d is also sequence %d", i, j);
				return KVC_EINVAL;
			}
		if (seqs[i]->toks.n >= (size_t)e->n_ctx) {
			kvc_err(err, errlen, "context full: sequence %d holds %zu tokens, the context %d",
			    i, seqs[i]->toks.n, e->n_ctx);
			return KVC_ERANGE;
		}
		if (tokens[i] < 0 || tokens[i] >= e->model.hp.n_vocab) {
			kvc_err(err, errlen, "token id %d of sequence %d is outside the vocabulary (0..%d)",
			    (int)tokens[i], i, e->model.hp.n_vocab - 1);
			return KVC_EINVAL;
		}
	}
	return KVC_OK;
}

int
eng_seq_decode_multi(struct kvc_seq *const *seqs, int n, const int32_t *tokens,
    char *err, size_t errlen)
{
	struct kvc_engine *e;
	void **kvs;
	int *pos, i, rc;
	size_t nv;

	if ((rc = check_multi(seqs, n, tokens, err, errlen)) != KVC_OK)
		return rc;
	e = seqs[0]->e;
	nv = (size_t)e->model.hp.n_vocab;
	eng_logits_settle(e);	/* the backend's kept logits are replaced below */
	if (e->be->forward_multi == NULL || n == 1) {
		/* one after the other; a failure takes back the tokens appended before it */
		for (i = 0; i < n; i++)
			if ((rc = eng_seq_append(seqs[i], &tokens[i], 1, NULL, err, errlen)) != KVC_OK) {
				while (i-- > 0)
					(void)eng_seq_truncate(seqs[i], eng_seq_n_pos(seqs[i]) - 1);
				return rc;
			}
		return KVC_OK;
	}
	/* positions not yet computed (an evicted or rewound cache) get their own prefill first */
	for (i = 0; i < n; i++)
		if ((seqs[i]->kv == NULL || seqs[i]->n_cached < (int)seqs[i]->toks.n) &&
		    (rc = eng_seq_append(seqs[i], NULL, 0, NULL, err, errlen)) != KVC_OK)
			return rc;
	if (n > e->multi_cap) {
		float *l = realloc(e->multi_logits, (size_t)n * nv * sizeof *l);
		void **k = l ? realloc(e->multi_kvs, (size_t)n * sizeof *k) : NULL;
		int *p = k ? realloc(e->multi_pos, (size_t)n * sizeof *p) : NULL;

		/* each block that moved is kept: the capacity grows only when all three did */
		if (l != NULL)
			e->multi_logits = l;
		if (k != NULL)
			e->multi_kvs = k;
		if (p == NULL) {
			kvc_err(err, errlen, "out of memory for the logits of %d sequences", n);
			return KVC_ENOMEM;
		}
		e->multi_pos = p;
		e->multi_cap = n;
	}
	kvs = e->multi_kvs;
	pos = e->multi_pos;
	for (i = 0; i < n; i++) {
		kvs[i] = seqs[i]->kv;
		pos[i] = seqs[i]->n_cached;
	}
	rc = e->be->forward_multi(e->bctx, n, kvs, tokens, pos, e->multi_logits, err, errlen);
	for (i = 0; i < n && rc == KVC_OK; i++) {
		struct kvc_seq *s = seqs[i];

		if ((rc = kvc_tokens_push(&s->toks, tokens[i])) != KVC_OK) {
			kvc_err(err, errlen, "out of memory");
			break;
		}
		s->n_cached++;
		memcpy(s->logits, e->multi_logits + (size_t)i * nv, nv * sizeof *s->logits);
		s->have_logits = true;
	}
	if (rc != KVC_OK) {
		/* a failed pass leaves each cache good up to its old length, without the token */
		for (i = 0; i < n; i++) {
			struct kvc_seq *s = seqs[i];

			if (s->toks.n > (size_t)pos[i])
				s->toks.n = (size_t)pos[i];
			if (s->n_cached > pos[i])
				s->n_cached = pos[i];
			s->have_logits = false;
		}
	}
	return rc;
}

/* The arguments of an append of several sequences, checked before anything changes. */
static int
check_append_multi(struct kvc_seq *const *seqs, int n, const int32_t *const *toks,
    const int *n_tok, char *err, size_t errlen)
{
	struct kvc_engine *e;
	int rc;

	if (n < 1 || seqs == NULL || toks == NULL || n_tok == NULL || seqs[0] == NULL) {
		kvc_err(err, errlen, "append_multi: bad sequence count %d", n);
		return KVC_EINVAL;
	}
	e = seqs[0]->e;
	for (int i = 0; i < n; i++) {
		if (seqs[i] == NULL || seqs[i]->e != e || n_tok[i] < 1 || toks[i] == NULL) {
			kvc_err(err, errlen, "append_multi: bad sequence %d", i);
			return KVC_EINVAL;
		}
		for (int j = 0; j < i; j++)
			if (seqs[j] == seqs[i]) {
				kvc_err(err, errlen, "append_multi: sequence %d is also sequence %d", i, j);
				return KVC_EINVAL;
			}
		if ((size_t)n_tok[i] > (size_t)e->n_ctx - seqs[i]->toks.n) {
			kvc_err(err, errlen, "context full: %zu + %d tokens exceed the context of %d",
			    seqs[i]->toks.n, n_tok[i], e->n_ctx);
			return KVC_ERANGE;
		}
		if ((rc = eng_check_ids(e, toks[i], n_tok[i], err, errlen)) != KVC_OK)
			return rc;
	}
	return KVC_OK;
}

int
eng_seq_append_multi(struct kvc_seq *const *seqs, int n, const int32_t *const *toks,
    const int *n_tok, struct eng_stats *st, char *err, size_t errlen)
{
	struct kvc_engine *e;
	int32_t *all = NULL;
	void **kvs = NULL;
	int *pos0 = NULL, i, rc, appended = 0;
	float *logits = NULL;
	size_t nv, total = 0, off = 0;
	double t0;

	if (st)
		memset(st, 0, (size_t)(n > 0 ? n : 0) * sizeof *st);
	if ((rc = check_append_multi(seqs, n, toks, n_tok, err, errlen)) != KVC_OK)
		return rc;
	e = seqs[0]->e;
	nv = (size_t)e->model.hp.n_vocab;
	eng_logits_settle(e);	/* the backend's kept logits are replaced below */
	if (e->be->prefill_multi == NULL || n == 1 || e->hook != NULL) {
		/* one after the other; a failure takes back the tokens appended before it */
		for (i = 0; i < n; i++)
			if ((rc = eng_seq_append(seqs[i], toks[i], n_tok[i], st ? &st[i] : NULL, err,
			    errlen)) != KVC_OK) {
				while (i-- > 0)
					(void)eng_seq_truncate(seqs[i], eng_seq_n_pos(seqs[i]) - n_tok[i]);
				return rc;
			}
		return KVC_OK;
	}
	/* what each has pending by its own prefill, and a cache to write into */
	for (i = 0; i < n; i++) {
		struct kvc_seq *s = seqs[i];

		/* (a bounded window that lost what the next position needs: recomputed too) */
		if ((s->n_cached < (int)s->toks.n || !eng_seq_keeps(s, s->n_cached)) &&
		    (rc = eng_seq_append(s, NULL, 0, NULL, err, errlen)) != KVC_OK)
			return rc;
		if ((rc = eng_ensure_resident(s, err, errlen)) != KVC_OK)
			return rc;
		total += (size_t)n_tok[i];
	}
	all = malloc(total * sizeof *all);
	kvs = malloc((size_t)n * sizeof *kvs);
	pos0 = malloc((size_t)n * sizeof *pos0);
	logits = malloc((size_t)n * nv * sizeof *logits);
	if (all == NULL || kvs == NULL || pos0 == NULL || logits == NULL) {
		kvc_err(err, errlen, "out of memory for the prefill of %d sequences", n);
		rc = KVC_ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++) {
		memcpy(all + off, toks[i], (size_t)n_tok[i] * sizeof *all);
		off += (size_t)n_tok[i];
		kvs[i] = seqs[i]->kv;
		pos0[i] = seqs[i]->n_cached;
	}
	for (appended = 0; appended < n; appended++)
		if (kvc_tokens_append(&seqs[appended]->toks, toks[appended], (size_t)n_tok[appended])) {
			kvc_err(err, errlen, "out of memory");
			rc = KVC_ENOMEM;
			goto out;
		}
	t0 = kvc_now();
	rc = e->be->prefill_multi(e->bctx, n, kvs, all, n_tok, pos0, logits, err, errlen);
	for (i = 0; i < n && rc == KVC_OK; i++) {
		struct kvc_seq *s = seqs[i];

		s->n_cached += n_tok[i];
		memcpy(s->logits, logits + (size_t)i * nv, nv * sizeof *s->logits);
		s->have_logits = true;
		if (st) {
			st[i].n_computed = n_tok[i];
			st[i].t_prefill = kvc_now() - t0;
		}
	}
out:
	if (rc != KVC_OK)
		/* each sequence as it was: its old tokens, its cache good up to them */
		for (i = 0; i < appended; i++) {
			seqs[i]->toks.n = (size_t)pos0[i];
			if (seqs[i]->n_cached > pos0[i])
				seqs[i]->n_cached = pos0[i];
			seqs[i]->have_logits = false;
		}
	free(all);
	free(kvs);
	free(pos0);
	free(logits);
	return rc;
}
