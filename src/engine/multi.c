/*
 * multi.c: one decode step of several sequences at once (kvchat batch).
 *
 * Each sequence gets one token at its own next position; with a backend
 * that has forward_multi they all run in one forward pass (the CPU reads
 * each weight row once for all of them), else one after the other. Either
 * way every sequence ends as eng_seq_append of that one token would leave
 * it: the token in its list, its cache one position longer, its logits at
 * hand, the same bits.
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
