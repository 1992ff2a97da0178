/*
 * sched_save.c: an unnamed chat request kept as a stored conversation.
 *
 * A client that names no conversation still resends its history with
 * every request; storing each finished request lets the next one, or the
 * same client after the server restarted, restore the history's cache
 * from the snapshot (sched_store.c matches prompts against the stored
 * streams) instead of prefilling it again.
 *
 * A request whose system prompt and messages but its last are exactly
 * those of such a stored conversation (the previous request of the same
 * client, in practice: found by a hash of the texts, then compared) is
 * that conversation's next turn: its prompt is the stored stream, the ids
 * the model saw and produced, with the new user message rendered after it
 * (save_prompt), as the chat renders a turn, so the whole history comes
 * from the cache even when a reply's text would tokenize otherwise than
 * its ids; the user message and the reply are appended with a snapshot
 * chunk of the positions computed since its last chunk. (A conversation of
 * the chat's, or one a request named, is only ever written by its owner:
 * an unnamed request resending it gets one of its own.) Otherwise a new
 * conversation is made of the request's messages, each with the ids its
 * rendering adds (chat_render_delta, as the chat stores them), when those
 * ids make up the prompt exactly (a template whose rendering is not
 * incremental is not stored). The reply's ids end with the
 * end-of-generation id that ended it, as the chat's replies do, so
 * `kvchat --resume` continues it.
 *
 * Such conversations are titled "api: " and the start of their first user
 * message; beyond the --keep-unnamed most recent ones, the oldest are
 * deleted (one renamed to another title is kept; one another process
 * holds is left alone). Nothing here stops the request: a failed write is
 * logged and the reply goes out all the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_int.h"

#define API_TITLE "api: "

/* "api: " and the first user message's start, on one line, cut at a character. */
static void
title_of(const struct srv_job *j, char *t, size_t len)
{
	const char *u = "";
	size_t n, k;

	for (size_t i = 0; i < j->n_msgs; i++)
		if (j->msgs[i].role == CHAT_USER) {
			u = j->msgs[i].text ? j->msgs[i].text : "";
			break;
		}
	n = strlen(u);
	if (n > 40)
		n = 40;
	n = kvc_utf8_valid_prefix(u, n);
	k = strlen(API_TITLE);
	memcpy(t, API_TITLE, k);
	for (size_t i = 0; i < n && k + 1 < len; i++)
		t[k++] = u[i] == '\n' || u[i] == '\r' || u[i] == '\t' ? ' ' : u[i];
	t[k] = '\0';
}

/*
 * The rendering of the request's messages split by message: v[i].ids for
 * each user or assistant message, system ones folded into the next. 0 when
 * they make up prompt[0..n) exactly, KVC_EINVAL when not, or a KVC_E* code.
 */
static int
split(struct kvc_server *s, const struct srv_job *j, struct sess_msg *v, int *n_v,
    char *err, size_t errlen)
{
	const struct kvc_tokenizer *tok = eng_tokenizer(s->e);
	struct chat_msg *c = calloc(j->n_msgs + 1, sizeof *c);
	struct kvc_tokens t = {0};
	size_t prev = 0, pos = 0;
	int rc = KVC_OK;

	if (c == NULL)
		return KVC_ENOMEM;
	memcpy(c, j->msgs, j->n_msgs * sizeof *c);
	*n_v = 0;
	for (size_t at = 0; at < j->n_msgs && rc == KVC_OK; at++) {
		bool user = c[at].role == CHAT_USER;

		if (c[at].role == CHAT_SYSTEM)
			continue;
		t.n = 0;
		if (s->p.family == CHAT_JINJA && !user && prev > 0) {
			/* the model's template follows a reply's ids: its text's tokens (conv_retokenize) */
			rc = tok_encode(tok, c[at].text, strlen(c[at].text), 0, &t, err, errlen);
		} else {
			rc = chat_render_delta(tok, s->p.family, s->p.jinja, c, prev, at + 1, user, &t,
			    err, errlen);
		}
		if (rc != KVC_OK)
			break;
		if (pos + t.n > j->prompt_ids.n ||
		    memcmp(t.v, j->prompt_ids.v + pos, t.n * sizeof *t.v) != 0) {
			rc = KVC_EINVAL;
			break;
		}
		v[*n_v].role = user ? SESS_USER : SESS_ASSISTANT;
		v[*n_v].text = (char *)c[at].text;
		v[*n_v].ids = j->prompt_ids.v + pos;
		v[*n_v].n_ids = (int)t.n;
		if (s->p.family == CHAT_JINJA && !user) {
			c[at].ids = j->prompt_ids.v + pos;	/* what the next delta follows */
			c[at].n_ids = t.n;
		}
		(*n_v)++;
		pos += t.n;
		prev = at + 1;
	}
	if (rc == KVC_OK && pos != j->prompt_ids.n)
		rc = KVC_EINVAL;
	if (rc == KVC_EINVAL)
		kvc_err(err, errlen, "the template's rendering of the messages is not the prompt "
		    "message by message");
	kvc_tokens_free(&t);
	free(c);
	return rc;
}

/*
 * --keep-unnamed: the "api: " conversations beyond the keep most recent go,
 * oldest first; one held by another process (a chat resumed it) stays.
 */
static void
retain(struct kvc_server *s)
{
	struct sess_conv *list = NULL;
	char err[256];
	int n = 0, seen = 0;

	if (sess_conv_list(s->p.store, &list, &n, err, sizeof err) != KVC_OK)
		return;
	for (int i = 0; i < n; i++) {
		if (list[i].title == NULL || strncmp(list[i].title, API_TITLE, strlen(API_TITLE)) != 0)
			continue;
		if (++seen > s->p.keep_unnamed)
			(void)sess_conv_delete(s->p.store, list[i].id, err, sizeof err);
	}
	sess_conv_list_free(list, n);
}

/* A new conversation of j's messages and reply. 0 or a KVC_E* code with err. */
static int
save_new(struct kvc_server *s, struct srv_job *j, struct sess_msg *reply,
    const struct sess_chunk *ck, char *err, size_t errlen)
{
	struct sess_msg *v = calloc(j->n_msgs + 1, sizeof *v);
	struct kvc_buf set = {0};
	struct conv_settings cs = s->p.defaults;
	const char *sys = j->n_msgs > 0 && j->msgs[0].role == CHAT_SYSTEM ? j->msgs[0].text : NULL;
	struct sess_chunk c = *ck;
	char title[64];
	int64_t id = 0;
	int n_v = 0, rc;

	if (v == NULL)
		return KVC_ENOMEM;
	cs.smp = j->smp;
	cs.max_tokens = j->max_tokens;
	title_of(j, title, sizeof title);
	if ((rc = split(s, j, v, &n_v, err, errlen)) == KVC_OK &&
	    (rc = conv_settings_format(&cs, &set)) == KVC_OK &&
	    (rc = sess_conv_create(s->p.store, title, eng_fingerprint(s->e),
	    chat_family_name(s->p.family), sys, set.p, &id, err, errlen)) == KVC_OK) {
		v[n_v++] = *reply;
		c.pos0 = 0;
		rc = sess_conv_set_model(s->p.store, id, s->p.conv.model_path,
		    eng_vocab_fingerprint(s->e), err, errlen);
		if (rc == KVC_OK)
			rc = sess_turn_commit(s->p.store, id, v, n_v, c.pos1 > 0 ? &c : NULL, err,
			    errlen);
		if (rc != KVC_OK)
			(void)sess_conv_delete(s->p.store, id, NULL, 0);
		else
			j->conv_out = id;
	}
	kvc_buf_free(&set);
	free(v);
	if (rc == KVC_OK)
		retain(s);
	return rc;
}

/*
 * Continue conversation id, whose stream is prompt[0..m) and whose snapshot
 * ends at *end. 0, KVC_EBUSY (another process holds it) or a KVC_E* code.
 */
static int
save_more(struct kvc_server *s, struct srv_job *j, int64_t id, int m, struct sess_msg *reply,
    const struct sess_chunk *ck, char *err, size_t errlen)
{
	struct sess_msg v[2];
	struct sess_chunk c = *ck;
	int end = 0, rc;

	/* the lock: a chat that resumed it meanwhile writes it alone */
	if ((rc = sess_conv_lock(s->p.store, id, err, errlen)) != KVC_OK)
		return rc;
	memset(v, 0, sizeof v);
	v[0].role = SESS_USER;
	v[0].text = (char *)j->msgs[j->n_msgs - 1].text;
	v[0].ids = j->prompt_ids.v + m;
	v[0].n_ids = (int)j->prompt_ids.n - m;
	v[1] = *reply;
	if ((rc = sess_chunks_end(s->p.store, id, &end, err, errlen)) == KVC_OK) {
		c.pos0 = end;
		rc = sess_turn_commit(s->p.store, id, v, 2, c.pos1 > end ? &c : NULL, err, errlen);
	}
	sess_conv_unlock(s->p.store, id);
	if (rc == KVC_OK)
		j->conv_out = id;
	return rc;
}

int
save_prompt(struct kvc_server *s, struct srv_store_index **ix, struct srv_job *j, char *err,
    size_t errlen)
{
	struct kvc_tokens reply = {0};
	struct chat_msg *c;
	size_t n = j->n_msgs, m;
	int64_t id = 0;
	int rc;

	if (j->kind != SRV_CHAT || s->p.store == NULL || s->p.keep_unnamed <= 0 || n < 3 ||
	    j->msgs[n - 1].role != CHAT_USER || j->msgs[n - 2].role != CHAT_ASSISTANT)
		return 0;
	j->prompt_ids.n = 0;
	if ((rc = store_history(s, ix, j, &id, &j->prompt_ids, &reply)) != KVC_OK || id == 0) {
		kvc_tokens_free(&reply);
		j->prompt_ids.n = 0;
		return rc;
	}
	if ((c = calloc(n, sizeof *c)) == NULL) {
		kvc_tokens_free(&reply);
		return KVC_ENOMEM;
	}
	/* the stored reply's ids stand for its text: the stream ends with them */
	memcpy(c, j->msgs, n * sizeof *c);
	c[n - 2].ids = reply.v;
	c[n - 2].n_ids = reply.n;
	m = j->prompt_ids.n;
	rc = chat_render_delta(eng_tokenizer(s->e), s->p.family, s->p.jinja, c, n - 1, n, true,
	    &j->prompt_ids, err, errlen);
	free(c);
	kvc_tokens_free(&reply);
	if (rc != KVC_OK) {
		/* not incremental after it: the messages are rendered whole, as any request's */
		j->prompt_ids.n = 0;
		return rc == KVC_ENOMEM ? rc : 0;
	}
	j->cont_id = id;
	j->cont_len = (int)m;
	return 1;
}

void
save_unnamed(struct kvc_server *s, struct srv_store_index **ix, struct kvc_seq *seq,
    struct srv_job *j)
{
	struct sess_msg reply;
	struct sess_chunk ck;
	struct kvc_tokens ids = {0};
	struct kvc_buf blob = {0};
	char err[512] = "";
	int64_t id = 0;
	int rc, n_pos = eng_seq_n_pos(seq), end = 0;

	if (j->kind != SRV_CHAT || s->p.store == NULL || s->p.keep_unnamed <= 0 || j->n_msgs == 0 ||
	    j->msgs[j->n_msgs - 1].role != CHAT_USER || sess_readonly(s->p.store, NULL))
		return;
	/* the reply's ids, with the end-of-generation id that ended it, as the chat keeps them */
	if (kvc_tokens_append(&ids, j->ids.v, j->ids.n) != KVC_OK ||
	    (j->eog >= 0 && kvc_tokens_push(&ids, j->eog) != KVC_OK))
		goto out;
	memset(&reply, 0, sizeof reply);
	reply.role = SESS_ASSISTANT;
	reply.text = j->text.p ? j->text.p : (char *)"";
	reply.ids = ids.v;
	reply.n_ids = (int)ids.n;
	reply.stats.ttft_ms = (j->t_prefilled - j->t_start) * 1e3;
	reply.stats.prefill_tokens = j->computed;
	reply.stats.reused_tokens = j->cached;
	reply.stats.gen_tokens = j->n_gen;
	if (j->t_end > j->t_prefilled)
		reply.stats.decode_tps = j->n_gen / (j->t_end - j->t_prefilled);
	id = j->cont_id;
	if (id != 0 && sess_chunks_end(s->p.store, id, &end, err, sizeof err) != KVC_OK)
		goto out;
	/* the chunk: what the cache holds past the stored snapshot (computed for this prompt) */
	memset(&ck, 0, sizeof ck);
	ck.kv_type = eng_kv_type_name(eng_kv_type(s->e));
	ck.model_fp = eng_fingerprint(s->e);
	ck.pos0 = id != 0 ? end : 0;
	ck.pos1 = n_pos;
	if (ck.pos1 > ck.pos0) {
		if (eng_seq_kv_save(seq, ck.pos0, ck.pos1, &blob, err, sizeof err) != KVC_OK)
			goto out;
		ck.blob = blob.p;
		ck.len = blob.n;
	} else {
		ck.pos1 = 0;
	}
	rc = id != 0 ? save_more(s, j, id, j->cont_len, &reply, &ck, err, sizeof err) : KVC_EBUSY;
	if (rc == KVC_EBUSY) {
		/* nothing to continue, or a chat holds it: a conversation of its own */
		if (id != 0 && ck.pos0 > 0) {
			blob.n = 0;
			ck.pos0 = 0;
			if (eng_seq_kv_save(seq, 0, n_pos, &blob, err, sizeof err) != KVC_OK)
				goto out;
			ck.blob = blob.p;
			ck.len = blob.n;
			ck.pos1 = n_pos;
		}
		rc = save_new(s, j, &reply, &ck, err, sizeof err);
	}
out:
	if (j->conv_out == 0 && s->p.log != NULL) {
		char line[700];

		snprintf(line, sizeof line, "%s: not stored: %s", j->id, err[0] ? err : "out of memory");
		s->p.log(s->p.log_arg, line);
	}
	kvc_tokens_free(&ids);
	kvc_buf_free(&blob);
}
