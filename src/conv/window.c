/*
 * window.c: the token stream of a conversation's messages and the context
 * window over it. The default overflow policy keeps the system prompt and
 * drops the oldest whole exchanges from the cache (never from the store):
 * a window starting at a later user message renders that message afresh
 * with the system prompt in front, then takes the stored ids that follow.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "conv_int.h"

int
conv_chat_list(const struct conv *c, int from, int to, const char *user, struct chat_msg **v,
    size_t *n)
{
	size_t k = 0;
	struct chat_msg *a = calloc((size_t)(to - from) + 2, sizeof *a);

	if (a == NULL)
		return KVC_ENOMEM;
	if (c->system != NULL && c->system[0] != '\0') {
		a[k].role = CHAT_SYSTEM;
		a[k++].text = c->system;
	}
	for (int i = from; i < to; i++, k++) {
		const struct sess_msg *x = &c->msgs[i];
		a[k].role = x->role == SESS_ASSISTANT ? CHAT_ASSISTANT :
		    x->role == SESS_SYSTEM ? CHAT_SYSTEM : CHAT_USER;
		a[k].text = x->text;
		if (x->role == SESS_ASSISTANT) {
			a[k].reasoning = x->reasoning;
			a[k].ids = x->ids;
			a[k].n_ids = (size_t)x->n_ids;
		}
	}
	if (user != NULL) {
		a[k].role = CHAT_USER;
		a[k++].text = user;
	}
	*v = a;
	*n = k;
	return KVC_OK;
}

int
conv_render_head(const struct conv *c, int k, const char *user, struct kvc_tokens *out,
    char *err, size_t errlen)
{
	struct chat_msg *v;
	size_t n;
	int rc;

	rc = user ? conv_chat_list(c, 0, 0, user, &v, &n) :
	    conv_chat_list(c, k, k + 1, NULL, &v, &n);
	if (rc)
		return rc;
	out->n = 0;
	rc = conv_render(c->m, v, n, true, out,
	    err, errlen);
	free(v);
	return rc;
}

int
conv_retokenize(struct conv *c, char *err, size_t errlen)
{
	struct kvc_tokens t = {0};
	struct chat_msg *v;
	size_t n, sys;
	int rc;

	if (c->n_msgs == 0)
		return KVC_OK;
	rc = conv_chat_list(c, 0, c->n_msgs, NULL, &v, &n);
	if (rc)
		return rc;
	sys = n - (size_t)c->n_msgs;
	/* The replies' ids are the other vocabulary's: their text stands in. */
	for (size_t k = 0; k < n; k++) {
		v[k].ids = NULL;
		v[k].n_ids = 0;
	}
	for (int i = 0; i < c->n_msgs && rc == 0; i++) {
		size_t at = sys + (size_t)i;
		int32_t *ids;

		t.n = 0;
		if (c->m->p.family == CHAT_JINJA && v[at].role == CHAT_ASSISTANT && i > 0) {
			/*
			 * The model's own template renders a delta only after a
			 * reply's ids: a reply's ids are its text's tokens, as
			 * generated ones are, and the template's closing of the
			 * turn comes with the next delta.
			 */
			rc = tok_encode(eng_tokenizer(c->m->e), v[at].text, strlen(v[at].text), 0,
			    &t, err, errlen);
		} else {
			/* The first message's ids hold the system prompt before it. */
			rc = conv_render_delta(c->m, v, i == 0 ? 0 : at, at + 1,
			    v[at].role == CHAT_USER, &t, err, errlen);
		}
		if (rc)
			break;
		ids = malloc((t.n > 0 ? t.n : 1) * sizeof *ids);
		if (ids == NULL) {
			rc = KVC_ENOMEM;
			break;
		}
		if (t.n > 0)
			memcpy(ids, t.v, t.n * sizeof *ids);
		free(c->msgs[i].ids);
		c->msgs[i].ids = ids;
		c->msgs[i].n_ids = (int)t.n;
		if (c->m->p.family == CHAT_JINJA && v[at].role == CHAT_ASSISTANT) {
			v[at].ids = ids;	/* what the next delta follows */
			v[at].n_ids = t.n;
		}
	}
	kvc_tokens_free(&t);
	free(v);
	return rc;
}

/* Window k over msgs[0..to): the head of k (or msgs[0]'s ids), then the later ids. */
int
conv_build_stream(const struct conv *c, int k, int to, struct kvc_tokens *out,
    char *err, size_t errlen)
{
	int rc;

	out->n = 0;
	if (to <= k)
		return KVC_OK;
	if (k > 0) {
		rc = conv_render_head(c, k, NULL, out, err, errlen);
		if (rc)
			return rc;
	} else if (kvc_tokens_append(out, c->msgs[0].ids, (size_t)c->msgs[0].n_ids)) {
		return KVC_ENOMEM;
	}
	for (int i = k + 1; i < to; i++)
		if (kvc_tokens_append(out, c->msgs[i].ids, (size_t)c->msgs[i].n_ids))
			return KVC_ENOMEM;
	return KVC_OK;
}

int
conv_fit_window(const struct conv *c, int from, int limit, int *k_out, char *err,
    size_t errlen)
{
	struct kvc_tokens s = {0};
	int rc = KVC_ERANGE;

	for (int k = from; k < c->n_msgs; k++) {
		if (c->msgs[k].role != SESS_USER)
			continue;
		rc = conv_build_stream(c, k, c->n_msgs, &s, err, errlen);
		if (rc)
			break;
		if ((int)s.n <= limit) {
			*k_out = k;
			break;
		}
		rc = KVC_ERANGE;
	}
	kvc_tokens_free(&s);
	return rc;
}

int
conv_reply_reserve(const struct conv *c)
{
	int n_ctx = eng_n_ctx(c->m->e);
	int r = c->set.max_tokens > 0 ? c->set.max_tokens : 256;

	if (r > n_ctx / 4)
		r = n_ctx / 4;
	return r < 1 ? 1 : r;
}

/*
 * How far a drop goes: the new window, with the turn's prompt, holds at
 * most this many positions. Dropping only what the turn needs would leave
 * the context full, so every later turn would drop again, recompute the
 * whole window and rewrite its whole snapshot; dropping down to about half
 * the context, as llama.cpp's context shift does, pays that once every
 * several turns, and the turns in between only append their own positions.
 */
static int
drop_target(int n_ctx)
{
	return n_ctx / 2;
}

/* out = the stream of window k and the delta; its length, or a negative KVC_E*. */
static int
window_with_delta(const struct conv *c, int k, const struct kvc_tokens *delta,
    struct kvc_tokens *out, char *err, size_t errlen)
{
	int rc = conv_build_stream(c, k, c->n_msgs, out, err, errlen);

	if (rc)
		return rc;
	if (kvc_tokens_append(out, delta->v, delta->n))
		return KVC_ENOMEM;
	return (int)out->n;
}

/*
 * The drop policy (--ctx-overflow drop): the window starts at the first
 * later user message after which the history and the prompt fit in
 * drop_target(); if none does, the new message alone after the system
 * prompt (*win = n_msgs); if that alone is over the target, the least
 * drop that fits with the reserve, keeping what it can.
 */
int
conv_plan_window(const struct conv *c, const char *text, const struct kvc_tokens *delta,
    int reserve, int *win, struct kvc_tokens *out, char *err, size_t errlen)
{
	int n_ctx = eng_n_ctx(c->m->e), target = drop_target(n_ctx), fit = -1, n, rc;

	for (int k = c->win + 1; k < c->n_msgs; k++) {
		if (c->msgs[k].role != SESS_USER)
			continue;
		if ((n = window_with_delta(c, k, delta, out, err, errlen)) < 0)
			return n;
		if (n <= target) {
			*win = k;
			return KVC_OK;
		}
		if (fit < 0 && n + reserve <= n_ctx)
			fit = k;
	}
	rc = conv_render_head(c, 0, text, out, err, errlen);
	if (rc)
		return rc;
	if ((int)out->n > target && fit >= 0) {
		*win = fit;
		n = window_with_delta(c, fit, delta, out, err, errlen);
		return n < 0 ? n : KVC_OK;
	}
	if ((int)out->n >= n_ctx) {
		kvc_err(err, errlen, "input too long: %zu tokens with the template, the context "
		    "holds %d", out->n, n_ctx);
		return KVC_ERANGE;
	}
	*win = c->n_msgs;
	return KVC_OK;
}

/*
 * Refuse text that cannot fit the context by its length alone, before
 * anything tokenizes it: a token stands for at most tok_max_token_bytes()
 * bytes, so more than n_ctx times that many bytes is more than n_ctx
 * tokens. Costs nothing, and a pasted megabyte is refused at once instead
 * of being tokenized first.
 */
int
conv_check_length(const struct conv *c, const char *text, char *err, size_t errlen)
{
	int n_ctx = eng_n_ctx(c->m->e);
	size_t per = tok_max_token_bytes(eng_tokenizer(c->m->e)), len = strlen(text);

	if (len / per < (size_t)n_ctx)
		return KVC_OK;
	kvc_err(err, errlen, "input too long: %zu bytes cannot fit a context of %d positions "
	    "(at most %d tokens of up to %zu bytes each); nothing was sent", len, n_ctx, n_ctx,
	    per);
	return KVC_ERANGE;
}
