/*
 * rerender.c: a turn's prompt with the model's own template, by rendering
 * the whole conversation. The cache holds what the model saw; the template
 * may render earlier turns otherwise now (Qwen3, DeepSeek-R1 and gpt-oss
 * drop an earlier reply's reasoning, Llama 3.2 writes today's date), and a
 * cache that is not a prefix of the render would be stale. So each turn
 * renders msgs + the user's text + the generation prompt, keeps the cached
 * positions the render starts with, and recomputes the rest: usually only
 * the user's delta; where the template rewrote earlier turns, from the
 * first position that differs (conv_stats.rewritten_tokens says how many
 * and why). The store follows: messages whose tokens in the render differ
 * get them (sess_conv_retoken), so the stored stream is the cache again.
 *
 * Only for the whole conversation in the cache (window 0, not slid); a
 * windowed or slid stream keeps the delta after the last reply
 * (chat_jinja_render), as it did.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "conv_int.h"

void
conv_rerender_free(struct conv_rerender *rr)
{
	kvc_tokens_free(&rr->target);
	free(rr->spans);
	memset(rr, 0, sizeof *rr);
}

bool
conv_rerender_applies(const struct conv *c)
{
	return c->m->p.family == CHAT_JINJA && c->m->jinja != NULL && c->win == 0 &&
	    c->slide_keep == 0 && c->seq != NULL;
}

/* Why the render differs from the stream at message k (the first that changed). */
static const char *
why_at(const struct conv *c, int k)
{
	for (int i = k; i < c->n_msgs; i++)
		if (c->msgs[i].role == SESS_ASSISTANT && c->msgs[i].reasoning != NULL)
			return "the template drops an earlier reply's reasoning";
	return "the template renders earlier turns otherwise (a date, a reply cut, a system prompt moved)";
}

int
conv_rerender(struct conv *c, const char *user, bool add_gen, int n_msgs,
    struct conv_rerender *rr, char *err, size_t errlen)
{
	struct chat_msg *cl = NULL;
	size_t ncl = 0, *spans = NULL, off = 0;
	const int32_t *s = eng_seq_tokens(c->seq);
	int n_old = eng_seq_n_pos(c->seq), sys, rc;

	memset(rr, 0, sizeof *rr);
	rc = conv_chat_list(c, 0, n_msgs, user, &cl, &ncl);
	if (rc == 0 && (spans = calloc(ncl ? ncl : 1, sizeof *spans)) == NULL)
		rc = KVC_ENOMEM;
	if (rc == 0)
		rc = chat_jinja_render_spans(eng_tokenizer(c->m->e), c->m->jinja, c->m->vars, cl, ncl,
		    add_gen, &rr->target, spans, err, errlen);
	sys = ncl > (size_t)n_msgs + (user != NULL) ? 1 : 0;
	/* the system prompt counts under the first message, as the stream keeps it */
	if (rc == 0 && sys && ncl > 1) {
		spans[1] += spans[0];
		spans[0] = 0;
	}
	if (rc == 0 && (rr->spans = malloc((size_t)(n_msgs + 1) * sizeof *rr->spans)) == NULL)
		rc = KVC_ENOMEM;
	if (rc == KVC_ENOMEM)
		kvc_err(err, errlen, "out of memory");
	/*
	 * Messages the render starts with as stored keep their tokens (so a
	 * rewind to one of them cuts the stream where its turn ended); from
	 * the first that differs, chat's spans say where each ends, and a
	 * message chat's count puts before what is already kept gets none.
	 */
	rr->first = n_msgs;
	for (int i = 0; rc == 0 && i <= n_msgs; i++) {
		size_t end = 0, len;

		for (int k = 0; k <= i && (size_t)(sys + k) < ncl; k++)
			end += spans[sys + k];
		if (i < n_msgs && rr->first == n_msgs && c->msgs[i].n_ids > 0 &&
		    off + (size_t)c->msgs[i].n_ids <= rr->target.n &&
		    memcmp(c->msgs[i].ids, rr->target.v + off, (size_t)c->msgs[i].n_ids * sizeof *s) == 0)
			len = (size_t)c->msgs[i].n_ids;
		else
			len = end > off ? end - off : 0;
		if (i < n_msgs && rr->first == n_msgs && len != (size_t)c->msgs[i].n_ids)
			rr->first = i;
		rr->spans[i] = (int)len;
		off += len;
	}
	/* without a user's text nothing counts past the last message */
	if (rc == 0 && user == NULL && n_msgs > 0 && rr->spans[n_msgs] > 0) {
		rr->spans[n_msgs - 1] += rr->spans[n_msgs];
		rr->spans[n_msgs] = 0;
		if (rr->first == n_msgs)
			rr->first = n_msgs - 1;
	}
	/* What of the cache the render starts with. */
	while (rc == 0 && rr->keep < n_old && (size_t)rr->keep < rr->target.n &&
	    s[rr->keep] == rr->target.v[rr->keep])
		rr->keep++;
	if (rc == 0)
		rr->why = rr->keep < n_old ? why_at(c, rr->first) : NULL;
	free(cl);
	free(spans);
	if (rc)
		conv_rerender_free(rr);
	return rc;
}

/* Where message i's tokens start in the render. */
static int
span_start(const struct conv_rerender *rr, int i)
{
	int off = 0;

	for (int k = 0; k < i; k++)
		off += rr->spans[k];
	return off;
}

int
conv_rerender_store(struct conv *c, const struct conv_rerender *rr, int n_msgs,
    const struct sess_msg *user, char *err, size_t errlen)
{
	int n = c->n_msgs - rr->first, rc = KVC_OK;
	struct sess_msg *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
	int32_t **ids = calloc((size_t)(n > 0 ? n : 1), sizeof *ids);

	if (v == NULL || ids == NULL) {
		free(v);
		free(ids);
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		int k = rr->first + i, len = k < n_msgs ? rr->spans[k] : c->msgs[k].n_ids;

		v[i] = c->msgs[k];
		v[i].n_ids = len;
		if (k >= n_msgs)
			continue;	/* past the render: as it is */
		ids[i] = malloc((size_t)(len > 0 ? len : 1) * sizeof **ids);
		if (ids[i] == NULL) {
			rc = KVC_ENOMEM;
			kvc_err(err, errlen, "out of memory");
			break;
		}
		memcpy(ids[i], rr->target.v + span_start(rr, k), (size_t)len * sizeof **ids);
		v[i].ids = ids[i];
	}
	if (rc == 0)
		rc = sess_conv_retoken(c->m->st, c->id, rr->first, v, n, rr->keep, user, err, errlen);
	/* Stored: the picture follows (each message takes its new ids). */
	for (int i = 0; i < n; i++) {
		if (ids[i] == NULL)
			continue;
		if (rc == 0) {
			free(c->msgs[rr->first + i].ids);
			c->msgs[rr->first + i].ids = ids[i];
			c->msgs[rr->first + i].n_ids = v[i].n_ids;
		} else {
			free(ids[i]);
		}
	}
	if (rc == 0)
		conv_chunks_trim(c, rr->keep);
	free(ids);
	free(v);
	return rc;
}

int
conv_rerender_prompt(struct conv *c, int u, int *n_pos, struct eng_stats *es, bool *done,
    char *err, size_t errlen)
{
	struct conv_rerender rr;
	int rc = conv_rerender(c, NULL, true, u + 1, &rr, err, errlen);

	*done = false;
	if (rc == KVC_ENOMEM)
		return rc;
	if (rc != 0)
		return KVC_OK;	/* no whole render: the stored prompt, as it is */
	if (rr.first > u && rr.keep >= (int)rr.target.n && (int)rr.target.n == *n_pos) {
		conv_rerender_free(&rr);
		return KVC_OK;	/* the cache holds the prompt: its logits may be at hand */
	}
	rc = conv_rerender_store(c, &rr, u + 1, NULL, err, errlen);
	if (rc == 0) {
		conv_work_begin(c->m, "prefill", NULL);
		rc = eng_seq_sync(c->seq, rr.target.v, (int)rr.target.n, es, err, errlen);
		conv_work_end(c->m);
		if (rc != 0)
			conv_drop_seq(c);	/* half synced: rebuilt from the messages */
		*n_pos = (int)rr.target.n;
		*done = rc == 0;
	}
	conv_rerender_free(&rr);
	return rc;
}
