/*
 * save.c: every write of a conversation to the store that carries the
 * cache: a reply with the snapshot chunk of the positions it added, a
 * snapshot alone, the settings text and the window. Every snapshot chunk
 * records the window (first message) of the stream it was computed over,
 * so a snapshot is only ever restored over the tokens it was made from.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_int.h"

const char *
conv_kv_type_name(enum gguf_dtype t)
{
	return eng_kv_type_name(t);
}

void
conv_chunks_trim(struct conv *c, int n_pos)
{
	while (c->n_chunk_ends > 0 && c->chunk_ends[c->n_chunk_ends - 1] > n_pos)
		c->n_chunk_ends--;
	c->snap_end = c->n_chunk_ends ? c->chunk_ends[c->n_chunk_ends - 1] : 0;
}

int
conv_chunks_push(struct conv *c, int pos1)
{
	if (c->n_chunk_ends == c->cap_chunk_ends) {
		int cap = c->cap_chunk_ends ? 2 * c->cap_chunk_ends : 16;
		int *v = realloc(c->chunk_ends, (size_t)cap * sizeof *v);
		if (v == NULL)
			return KVC_ENOMEM;
		c->chunk_ends = v;
		c->cap_chunk_ends = cap;
	}
	c->chunk_ends[c->n_chunk_ends++] = pos1;
	c->snap_end = pos1;
	return KVC_OK;
}

/* Where the next chunk starts: the end of the chunks that stay on disk. */
static int
chunk_start(const struct conv *c, int keep, int n_keep)
{
	int pos0 = 0;

	if (keep < 0)
		return c->snap_end;
	for (int i = 0; i < c->n_chunk_ends && c->chunk_ends[i] <= n_keep; i++)
		pos0 = c->chunk_ends[i];
	return pos0;
}

/*
 * The snapshot chunk of the cache's positions [pos0, end) over window win
 * (its bytes in blob): ch, or NULL when there are none or the engine could
 * not save them (what is written without it is still stored; the next
 * chunk covers these positions).
 */
static struct sess_chunk *
make_chunk(struct conv *c, int pos0, int64_t win, struct kvc_buf *blob, struct sess_chunk *ch)
{
	struct conv_mgr *m = c->m;
	char why[256] = "";
	int pos1 = eng_seq_n_pos(c->seq);

	if (pos1 <= pos0)
		return NULL;
	if (eng_seq_kv_save(c->seq, pos0, pos1, blob, why, sizeof why) != 0) {
		conv_store_failed(c, "snapshot", why);
		return NULL;
	}
	ch->pos0 = pos0;
	ch->pos1 = pos1;
	ch->kv_type = conv_kv_type_name(eng_kv_type(m->e));
	ch->model_fp = eng_fingerprint(m->e);
	ch->window = win;
	ch->blob = blob->p;
	ch->len = blob->n;
	return ch;
}

/*
 * conv_commit_reply, or with rewindow a turn on a new window (keep < 0)
 * or a rewind to keep messages that chooses the window again: the chunk
 * then covers the cache from 0, and the old chunks go and the window is
 * set in the same transaction.
 */
static int
commit(struct conv *c, const struct sess_msg *msgs, int n, int keep, int n_keep, int64_t win,
    bool rewindow, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct kvc_buf blob = {0};
	struct sess_chunk ch, *chp;
	int pos0 = rewindow ? 0 : chunk_start(c, keep, n_keep), pos1 = eng_seq_n_pos(c->seq), rc;

	chp = make_chunk(c, pos0, win, &blob, &ch);
	if (n == 0 && chp == NULL && keep < 0 && !rewindow && win == c->win_stored) {
		kvc_buf_free(&blob);
		return KVC_OK;	/* nothing to write */
	}
	if (rewindow && keep >= 0) {
		rc = sess_rewind_window(m->st, c->id, keep, win, chp, err, errlen);
		if (rc && chp != NULL) {
			/*
			 * Refused with its snapshot: the rewind without it, said
			 * and counted, as when the snapshot was written apart.
			 */
			char why[256];

			snprintf(why, sizeof why, "%s", err ? err : "");
			rc = sess_rewind_window(m->st, c->id, keep, win, NULL, err, errlen);
			if (rc == 0)
				conv_store_failed(c, "snapshot", why);
			chp = NULL;
		}
	} else if (rewindow)
		rc = sess_turn_commit_window(m->st, c->id, msgs, n, chp, win, err, errlen);
	else if (win != c->win_stored)
		/*
		 * The window moved in memory only (open_window): the store takes it
		 * with the chunk made over it. A chunk under the new key beside the
		 * old window value made the next start refuse the snapshot (another
		 * context window) and rebuild (test_crash_slide.sh found it).
		 */
		rc = sess_turn_rekey(m->st, c->id, keep, n_keep, msgs, n, chp, win, err, errlen);
	else if (keep >= 0)
		rc = sess_turn_replace(m->st, c->id, keep, n_keep, msgs, n, chp, err, errlen);
	else
		rc = sess_turn_commit(m->st, c->id, msgs, n, chp, err, errlen);
	kvc_buf_free(&blob);
	if (rc)
		return rc;
	c->win_stored = win;
	/* Stored: the picture of the chunks on disk follows. */
	if (keep >= 0)
		conv_chunks_trim(c, n_keep);
	if (rewindow)
		conv_chunks_trim(c, 0);
	if (chp != NULL && conv_chunks_push(c, pos1) != 0)
		c->snap_end = pos1;	/* out of memory: at least the next chunk starts right */
	return KVC_OK;
}

int
conv_commit_reply(struct conv *c, const struct sess_msg *msgs, int n, int keep,
    int n_keep, int64_t win, char *err, size_t errlen)
{
	return commit(c, msgs, n, keep, n_keep, win, false, err, errlen);
}

int
conv_commit_window(struct conv *c, const struct sess_msg *msg, int64_t key, char *err,
    size_t errlen)
{
	return commit(c, msg, 1, -1, 0, key, true, err, errlen);
}

int
conv_commit_rewind(struct conv *c, int keep, int64_t key, char *err, size_t errlen)
{
	return commit(c, NULL, 0, keep, 0, key, true, err, errlen);
}

int
conv_commit_system(struct conv *c, const char *system, const int32_t *ids0, int n0,
    char *err, size_t errlen)
{
	struct kvc_buf blob = {0};
	struct sess_chunk ch, *chp;
	int64_t key = conv_window_key(c, c->win);
	int pos1 = eng_seq_n_pos(c->seq), rc;

	chp = make_chunk(c, 0, key, &blob, &ch);
	rc = sess_conv_replace_system(c->m->st, c->id, system, ids0, n0, chp, key, err, errlen);
	if (rc && chp != NULL) {
		/* Refused with its snapshot: the prompt without it, said and counted. */
		char why[256];

		snprintf(why, sizeof why, "%s", err ? err : "");
		rc = sess_conv_replace_system(c->m->st, c->id, system, ids0, n0, NULL, key, err,
		    errlen);
		if (rc == 0)
			conv_store_failed(c, "snapshot", why);
		chp = NULL;
	}
	kvc_buf_free(&blob);
	if (rc)
		return rc;
	c->win_stored = key;
	conv_chunks_trim(c, 0);
	if (chp != NULL && conv_chunks_push(c, pos1) != 0)
		c->snap_end = pos1;	/* out of memory: at least the next chunk starts right */
	return KVC_OK;
}

size_t
conv_title_from(const char *text, char *t, size_t len)
{
	size_t n = 0, sp;

	while (*text == ' ' || *text == '\n' || *text == '\t')
		text++;
	while (text[n] && text[n] != '\n' && n < 48 && n + 1 < len)
		n++;
	if (text[n] != '\0' && text[n] != '\n' && text[n] != ' ' && text[n] != '\t') {
		for (sp = n; sp > 0 && text[sp - 1] != ' ' && text[sp - 1] != '\t'; sp--)
			;
		if (sp > n / 2)
			n = sp;
	}
	while (n > 0 && (text[n - 1] == ' ' || text[n - 1] == '\t'))
		n--;
	n = kvc_utf8_valid_prefix(text, n);
	memcpy(t, text, n);
	t[n] = '\0';
	return n;
}

int
conv_store_new(struct conv *c, const char *first, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct kvc_buf sb = {0};
	char t[64];
	char *title = NULL;
	int64_t id = 0;
	int rc;

	if (c->id != 0)
		return KVC_OK;
	if (c->auto_title && first != NULL && conv_title_from(first, t, sizeof t) > 0 &&
	    (title = conv_strdup(t)) == NULL)
		return KVC_ENOMEM;
	if (conv_settings_format(&c->set, &sb)) {
		free(title);
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	rc = sess_conv_create(m->st, title ? title : c->title, eng_fingerprint(m->e),
	    chat_family_name(m->p.family), c->system, sb.p, &id, err, errlen);
	kvc_buf_free(&sb);
	if (rc == 0 && (rc = sess_conv_lock(m->st, id, err, errlen)) == 0)
		rc = sess_conv_set_model(m->st, id, m->model_path, eng_vocab_fingerprint(m->e),
		    err, errlen);
	if (rc != 0 && id != 0)
		(void)sess_conv_delete(m->st, id, NULL, 0);
	if (rc) {
		free(title);
		return rc;
	}
	c->id = id;
	if (title != NULL) {
		free(c->title);
		c->title = title;
	}
	c->auto_title = false;
	return KVC_OK;
}

void
conv_unstore(struct conv *c, bool auto_title)
{
	int64_t id = c->id;

	if (id == 0)
		return;
	sess_conv_unlock(c->m->st, id);
	/* Left behind, it is an empty row; --resume skips those. */
	(void)sess_conv_delete(c->m->st, id, NULL, 0);
	c->id = 0;
	c->auto_title = auto_title;
	c->n_chunk_ends = 0;
	c->snap_end = 0;
}

void
conv_save_snapshot(struct conv *c)
{
	char err[256] = "";

	c->n_chunk_ends = 0;
	c->snap_end = 0;
	if (c->id == 0 || c->seq == NULL || eng_seq_n_pos(c->seq) == 0)
		return;
	/* Left unwritten, the next turn's chunk starts at 0 and covers it all. */
	if (conv_commit_reply(c, NULL, 0, -1, 0, conv_window_key(c, c->win), err, sizeof err) != 0)
		conv_store_failed(c, "snapshot", err);
}

int
conv_save_settings(struct conv *c, char *err, size_t errlen)
{
	struct kvc_buf b = {0};
	int rc;

	if (c->id == 0)
		return KVC_OK;	/* stored with the first message */
	rc = conv_settings_format(&c->set, &b);
	if (rc == 0)
		rc = sess_conv_set_settings(c->m->st, c->id, b.p, err, errlen);
	else
		kvc_err(err, errlen, "out of memory");
	kvc_buf_free(&b);
	return rc;
}
