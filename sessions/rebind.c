/*
 * rebind.c: which model a conversation belongs to. Its messages keep the
 * exact token ids of one vocabulary; the row names that model's file and
 * vocabulary (schema version 4), so a resume can take the same file, and a
 * conversation continued on a model of another vocabulary is moved to it
 * whole: every message re-tokenised (by the caller, which has the
 * tokenizer) and stored in one transaction with the new model's names, its
 * old snapshot dropped. Above store.c (the ids' byte form).
 */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

int
sess_conv_set_model(struct sess_store *st, int64_t id, const char *model_path,
    const char *vocab_fp, char *err, size_t errlen)
{
	static const char what[] = "cannot record the conversation's model";
	sqlite3_stmt *s = NULL;
	int ret;

	if ((ret = sess_tx_begin(st, what, err, errlen)) != KVC_OK)
		return ret;
	ret = sess_prepare(st, &s, "UPDATE conversations SET model_path = ?2, vocab_fp = ?3 "
	    "WHERE id = ?1", what, err, errlen);
	if (ret == KVC_OK) {
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_text(s, 2, model_path, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, vocab_fp, -1, SQLITE_STATIC);
		if (sqlite3_step(s) != SQLITE_DONE)
			ret = sess_db_fail(st, sqlite3_errcode(st->db), what, err, errlen);
	}
	sqlite3_finalize(s);
	return sess_tx_end(st, ret, what, err, errlen);
}

/* The conversation's row ids of its messages, in order (malloc'ed). */
static int
message_rows(struct sess_store *st, int64_t id, int64_t **rows, int *n, const char *what,
    char *err, size_t errlen)
{
	sqlite3_stmt *s;
	int64_t *v = NULL, *nv;
	int used = 0, cap = 0, rc, ret;

	ret = sess_prepare(st, &s, "SELECT id FROM messages WHERE conv_id = ?1 ORDER BY seq",
	    what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	sqlite3_bind_int64(s, 1, id);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (used == cap) {
			cap = cap ? cap * 2 : 16;
			if ((nv = realloc(v, (size_t)cap * sizeof *v)) == NULL) {
				kvc_err(err, errlen, "%s: %s: out of memory", st->path, what);
				ret = KVC_ENOMEM;
				break;
			}
			v = nv;
		}
		v[used++] = sqlite3_column_int64(s, 0);
	}
	if (ret == KVC_OK && rc != SQLITE_DONE)
		ret = sess_db_fail(st, rc, what, err, errlen);
	sqlite3_finalize(s);
	if (ret != KVC_OK) {
		free(v);
		return ret;
	}
	*rows = v;
	*n = used;
	return KVC_OK;
}

static int
set_tokens(struct sess_store *st, const int64_t *rows, const struct sess_msg *msgs, int n,
    const char *what, char *err, size_t errlen)
{
	sqlite3_stmt *s;
	int ret = sess_prepare(st, &s, "UPDATE messages SET tokens = ?2 WHERE id = ?1", what,
	    err, errlen);

	for (int i = 0; ret == KVC_OK && i < n; i++) {
		unsigned char *blob = sess_encode_ids(msgs[i].ids, msgs[i].n_ids);

		if (blob == NULL) {
			kvc_err(err, errlen, "%s: %s: out of memory", st->path, what);
			ret = KVC_ENOMEM;
			break;
		}
		sqlite3_reset(s);
		sqlite3_bind_int64(s, 1, rows[i]);
		sqlite3_bind_blob(s, 2, blob, msgs[i].n_ids * 4, SQLITE_STATIC);
		if (sqlite3_step(s) != SQLITE_DONE)
			ret = sess_db_fail(st, sqlite3_errcode(st->db), what, err, errlen);
		free(blob);
	}
	if (s != NULL)
		sqlite3_finalize(s);
	return ret;
}

int
sess_conv_retoken(struct sess_store *st, int64_t id, int first, const struct sess_msg *msgs,
    int n, int keep_pos, const struct sess_msg *user, char *err, size_t errlen)
{
	static const char what[] = "cannot store the conversation's new rendering";
	int64_t *rows = NULL;
	int n_rows = 0, ret;

	if (first < 0 || n < 0 || keep_pos < 0) {
		kvc_err(err, errlen, "%s: %s: negative index", st->path, what);
		return KVC_EINVAL;
	}
	if ((ret = sess_tx_begin(st, what, err, errlen)) != KVC_OK)
		return ret;
	ret = message_rows(st, id, &rows, &n_rows, what, err, errlen);
	if (ret == KVC_OK && first + n != n_rows) {
		kvc_err(err, errlen, "%s: %s: it has %d messages, not %d", st->path, what,
		    n_rows, first + n);
		ret = KVC_EINVAL;
	}
	if (ret == KVC_OK)
		ret = set_tokens(st, rows + first, msgs, n, what, err, errlen);
	/* the chunks past the part of the stream that stays describe the old one */
	if (ret == KVC_OK)
		ret = sess_exec_ids(st, "DELETE FROM kv_chunks WHERE conv_id = ?1 AND pos1 > ?2", id,
		    keep_pos, what, err, errlen);
	if (ret == KVC_OK && user != NULL)
		ret = sess_msgs_insert(st, id, user, 1, what, err, errlen);
	free(rows);
	return sess_tx_end(st, ret, what, err, errlen);
}

int
sess_conv_rebind(struct sess_store *st, int64_t id, const struct sess_model *to,
    const struct sess_msg *msgs, int n, char *err, size_t errlen)
{
	static const char what[] = "cannot move the conversation to the new model";
	sqlite3_stmt *s = NULL;
	int64_t *rows = NULL;
	int n_rows = 0, ret;

	if ((ret = sess_tx_begin(st, what, err, errlen)) != KVC_OK)
		return ret;
	ret = message_rows(st, id, &rows, &n_rows, what, err, errlen);
	if (ret == KVC_OK && n_rows != n) {
		/* Another process changed it meanwhile: nothing is written. */
		kvc_err(err, errlen, "%s: %s: it has %d messages, not %d", st->path, what,
		    n_rows, n);
		ret = KVC_EINVAL;
	}
	if (ret == KVC_OK)
		ret = set_tokens(st, rows, msgs, n, what, err, errlen);
	if (ret == KVC_OK)
		ret = sess_prepare(st, &s, "UPDATE conversations SET model_fp = ?2, vocab_fp = ?3, "
		    "model_path = ?4, template = ?5, window = 0 WHERE id = ?1", what, err, errlen);
	if (ret == KVC_OK) {
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_text(s, 2, to->model_fp, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, to->vocab_fp, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 4, to->path, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 5, to->template_name, -1, SQLITE_STATIC);
		if (sqlite3_step(s) != SQLITE_DONE)
			ret = sess_db_fail(st, sqlite3_errcode(st->db), what, err, errlen);
	}
	sqlite3_finalize(s);
	if (ret == KVC_OK)
		ret = sess_exec_ids(st, "DELETE FROM kv_chunks WHERE conv_id = ?1", id, 0, what,
		    err, errlen);
	free(rows);
	return sess_tx_end(st, ret, what, err, errlen);
}
