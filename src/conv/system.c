/*
 * system.c: a new system prompt. On a conversation with messages only the
 * first message's ids hold it (every family renders the system text with
 * the first user turn), so those are rendered again, the whole stream is
 * checked against a full rendering, the cache is synced to it (the engine
 * keeps the common prefix, usually just BOS), and the prompt, those ids and
 * the fresh snapshot are stored in one transaction.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "conv_int.h"

/*
 * The first message's ids with the system prompt now in c->system, checked:
 * the stored ids after them must still concatenate to a full rendering.
 */
static int
render_first(struct conv *c, struct kvc_tokens *ids0, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct kvc_tokens full = {0}, ref = {0};
	struct chat_msg *cl = NULL;
	size_t ncl;
	int rc, n = c->n_msgs;

	rc = conv_chat_list(c, 0, 0, c->msgs[0].text, &cl, &ncl);
	if (rc == 0)
		rc = conv_render_delta(m, cl, 0, ncl, true,
		    ids0, err, errlen);
	free(cl);
	cl = NULL;
	if (rc)
		goto out;
	if (kvc_tokens_append(&full, ids0->v, ids0->n)) {
		rc = KVC_ENOMEM;
		goto out;
	}
	for (int i = 1; i < n; i++)
		if (kvc_tokens_append(&full, c->msgs[i].ids, (size_t)c->msgs[i].n_ids)) {
			rc = KVC_ENOMEM;
			goto out;
		}
	rc = conv_chat_list(c, 0, n, NULL, &cl, &ncl);
	if (rc == 0)
		rc = conv_render(m, cl, ncl,
		    c->msgs[n - 1].role == SESS_USER, &ref, err, errlen);
	if (rc == 0 && (ref.n != full.n || memcmp(ref.v, full.v, full.n * sizeof *full.v) != 0)) {
		kvc_err(err, errlen, "the %s template renders this conversation differently with "
		    "another system prompt: use /new with the new system prompt",
		    chat_family_name(m->p.family));
		rc = KVC_EINVAL;
	}
out:
	free(cl);
	kvc_tokens_free(&full);
	kvc_tokens_free(&ref);
	return rc;
}

/*
 * The cache's stream with the new first ids: the whole stream, or the
 * window's (its head rendered anew); KVC_ERANGE if it no longer fits.
 */
static int
new_stream(struct conv *c, const struct kvc_tokens *ids0, struct kvc_tokens *out,
    char *err, size_t errlen)
{
	int n_ctx = eng_n_ctx(c->m->e), rc = KVC_OK;

	if (c->win > 0) {
		rc = conv_build_stream(c, c->win, c->n_msgs, out, err, errlen);
	} else {
		out->n = 0;
		if (kvc_tokens_append(out, ids0->v, ids0->n))
			rc = KVC_ENOMEM;
		for (int i = 1; rc == 0 && i < c->n_msgs; i++)
			if (kvc_tokens_append(out, c->msgs[i].ids, (size_t)c->msgs[i].n_ids))
				rc = KVC_ENOMEM;
	}
	if (rc == 0 && (int)out->n >= n_ctx) {
		kvc_err(err, errlen, "with that system prompt the conversation (%zu tokens) does "
		    "not fit the context of %d: use /new with the new system prompt", out->n, n_ctx);
		rc = KVC_ERANGE;
	}
	return rc;
}

static int
change_system(struct conv *c, char *s, int *n_computed, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct kvc_tokens ids0 = {0}, win = {0};
	struct eng_stats es = {0};
	char *old = c->system;
	int rc;

	if (c->msgs[0].role != SESS_USER) {
		kvc_err(err, errlen, "the conversation does not start with a user message");
		free(s);
		return KVC_EINVAL;
	}
	if (c->slide_keep > 0) {
		/* the kept front of a slid cache is the old prompt; recomputing all is /new's job */
		kvc_err(err, errlen, "the conversation's context has slid: use /new with the new "
		    "system prompt");
		free(s);
		return KVC_EINVAL;
	}
	/* Resident first: a cache rebuilt from the messages must use the old prompt. */
	rc = conv_activate(c, err, errlen);
	if (rc) {
		free(s);
		return rc;
	}
	c->system = s;	/* what the renderings use; put back on failure */
	rc = render_first(c, &ids0, err, errlen);
	if (rc == 0)
		rc = new_stream(c, &ids0, &win, err, errlen);
	if (rc)
		goto fail;
	conv_mgr_fit(m, c, eng_kv_bytes_for(m->e, win.n));
	conv_work_begin(m, "recomputing", NULL);
	rc = eng_seq_sync(c->seq, win.v, (int)win.n, &es, err, errlen);
	conv_work_end(m);
	/*
	 * The prompt, the first ids and the new cache's snapshot in one
	 * transaction: with the snapshot written after, a kill in between
	 * left none, and the next start rebuilt (test_kill_window.sh).
	 */
	if (rc == 0)
		rc = conv_commit_system(c, s, ids0.v, (int)ids0.n, err, errlen);
	if (rc) {
		/* The cache may hold the new stream: it is rebuilt from the messages. */
		conv_drop_seq(c);
		goto fail;
	}
	/* Stored: the in-memory picture follows. */
	free(c->msgs[0].ids);
	c->msgs[0].ids = ids0.v;
	c->msgs[0].n_ids = (int)ids0.n;
	memset(&ids0, 0, sizeof ids0);
	free(old);
	c->reply_logits_pos = -1;
	c->pend_resumed = c->pend_rebuilt = false;
	if (n_computed)
		*n_computed = es.n_computed;
	goto out;
fail:
	c->system = old;
	free(s);
out:
	kvc_tokens_free(&ids0);
	kvc_tokens_free(&win);
	return rc;
}

int
conv_change_system(struct conv *c, const char *system, int *n_computed, char *err,
    size_t errlen)
{
	char *s = NULL;
	int rc;

	if (n_computed)
		*n_computed = 0;
	if (system && system[0] && (s = conv_strdup(system)) == NULL)
		return KVC_ENOMEM;
	if (c->n_msgs > 0 && (s ? c->system && strcmp(s, c->system) == 0 :
	    c->system == NULL || c->system[0] == '\0')) {
		free(s);
		return KVC_OK;	/* the same prompt: nothing to recompute */
	}
	if (c->n_msgs > 0)
		return change_system(c, s, n_computed, err, errlen);
	rc = c->id != 0 ? sess_conv_set_system(c->m->st, c->id, s, err, errlen) : KVC_OK;
	if (rc) {
		free(s);
		return rc;
	}
	free(c->system);
	c->system = s;
	return KVC_OK;
}

int
conv_set_system(struct conv *c, const char *system, char *err, size_t errlen)
{
	return conv_change_system(c, system, NULL, err, errlen);
}
