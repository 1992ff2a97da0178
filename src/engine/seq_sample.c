/*
 * seq_sample.c: a sequence's next token picked where its logits are. With
 * a backend that keeps the last forward's logits (backend.h's
 * forward_keep, the CUDA backend's device memory), compute_pending leaves
 * them there and eng_seq_sample asks the backend to sample, so a decode
 * step moves one id instead of n_vocab floats; eng_seq_logits copies them
 * out only for a caller that reads them. The backend holds one such row
 * for all sequences: before any other forward the engine copies it into
 * its sequence (eng_logits_settle), so no sequence's logits are lost.
 */
#include "config.h"

#include "engine_int.h"

#include <string.h>

void
eng_logits_settle(struct kvc_engine *e)
{
	struct kvc_seq *s = e->dev_logits;
	char err[256];

	if (s == NULL)
		return;
	e->dev_logits = NULL;
	/* a failed copy forgets them: eng_seq_sync recomputes the last position */
	if (s->have_logits && s->logits_dev && e->be->logits_get(e->bctx, s->logits, err, sizeof err) != KVC_OK)
		s->have_logits = false;
	s->logits_dev = false;
}

void
eng_logits_kept(struct kvc_seq *s)
{
	s->logits_dev = true;
	s->e->dev_logits = s;
}

int
eng_seq_sample(struct kvc_seq *s, const struct eng_sample_req *q, int32_t *id, uint64_t *rng,
    char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	size_t nr = q->repeat_last_n > 0 ? (size_t)q->repeat_last_n : 0;
	struct kvc_sample_req r;

	if (e->be->sample == NULL || !s->have_logits || !s->logits_dev || e->dev_logits != s) {
		kvc_err(err, errlen, "no logits at hand in the backend");
		return KVC_EUNSUPPORTED;
	}
	if (nr > s->toks.n)
		nr = s->toks.n;
	memset(&r, 0, sizeof r);
	r.temp = q->temp;
	r.top_k = q->top_k;
	r.top_p = q->top_p;
	r.min_p = q->min_p;
	r.repeat_penalty = q->repeat_penalty;
	r.recent = nr > 0 ? s->toks.v + (s->toks.n - nr) : NULL;
	r.n_recent = (int)nr;
	r.rng = q->rng;
	return e->be->sample(e->bctx, &r, id, rng, err, errlen);
}
