/*
 * store.c: conversation rows and their messages; a turn (messages + snapshot
 * chunk) as one transaction; rewinds. Above chunks.c (a turn writes its
 * chunk through it) and lock.c (a conversation another live process holds
 * is not deleted, and sess_conv_claim locks what it finds or creates);
 * below check.c.
 */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

/* Shared by the conversation queries; n_tokens = bytes of ids / 4. */
#define CONV_COLUMNS \
	"c.id, c.title, c.model_fp, c.template, c.system, c.settings, c.created, c.updated, " \
	"(SELECT count(*) FROM messages m WHERE m.conv_id = c.id), " \
	"(SELECT coalesce(sum(length(m.tokens)), 0) / 4 FROM messages m WHERE m.conv_id = c.id), " \
	"c.window, c.model_path, c.vocab_fp"

/* Bumps the recency order: the most recently used conversation comes first. */
#define TOUCH_SQL \
	"UPDATE conversations SET updated = ?2, " \
	"touched = (SELECT coalesce(max(touched), 0) + 1 FROM conversations) WHERE id = ?1"

static char *
dup_col(sqlite3_stmt *s, int i, bool *oom)
{
	const unsigned char *t = sqlite3_column_text(s, i);
	char *r;

	if (t == NULL)
		return NULL;
	r = strdup((const char *)t);
	if (r == NULL)
		*oom = true;
	return r;
}

void
sess_conv_clear(struct sess_conv *c)
{
	if (c == NULL)
		return;
	free(c->title);
	free(c->model_fp);
	free(c->template_name);
	free(c->system);
	free(c->settings);
	free(c->model_path);
	free(c->vocab_fp);
	memset(c, 0, sizeof *c);
}

static int
fill_conv(sqlite3_stmt *s, struct sess_conv *c)
{
	bool oom = false;

	memset(c, 0, sizeof *c);
	c->id = sqlite3_column_int64(s, 0);
	c->title = dup_col(s, 1, &oom);
	c->model_fp = dup_col(s, 2, &oom);
	c->template_name = dup_col(s, 3, &oom);
	c->system = dup_col(s, 4, &oom);
	c->settings = dup_col(s, 5, &oom);
	c->created = sqlite3_column_int64(s, 6);
	c->updated = sqlite3_column_int64(s, 7);
	c->n_msgs = sqlite3_column_int(s, 8);
	c->n_tokens = sqlite3_column_int(s, 9);
	c->window = sqlite3_column_int64(s, 10);
	c->model_path = dup_col(s, 11, &oom);
	c->vocab_fp = dup_col(s, 12, &oom);
	if (oom) {
		sess_conv_clear(c);
		return KVC_ENOMEM;
	}
	return KVC_OK;
}

static int
oom(struct sess_store *st, const char *what, char *err, size_t errlen)
{
	kvc_err(err, errlen, "%s: %s: out of memory", st->path, what);
	return KVC_ENOMEM;
}

/*
 * Room for element [used] of an array of size-byte elements: v itself while
 * used < *cap, else v realloc'ed to twice *cap (16 at first). NULL when out
 * of memory, v and *cap untouched.
 */
static void *
grow(void *v, int used, int *cap, size_t size)
{
	int ncap;

	if (used < *cap)
		return v;
	ncap = *cap ? *cap * 2 : 16;
	v = realloc(v, (size_t)ncap * size);
	if (v != NULL)
		*cap = ncap;
	return v;
}

/* The INSERT of sess_conv_create, inside the caller's transaction. */
static int
insert_conv(struct sess_store *st, const char *title, const char *model_fp,
    const char *template_name, const char *system, const char *settings,
    int64_t *id_out, const char *what, char *err, size_t errlen)
{
	sqlite3_stmt *s = NULL;
	int rc, ret;

	ret = sess_prepare(st, &s,
	    "INSERT INTO conversations (title, model_fp, template, system, settings, "
	    "created, updated, touched) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, "
	    "(SELECT coalesce(max(touched), 0) + 1 FROM conversations))", what, err, errlen);
	if (ret == KVC_OK) {
		sqlite3_bind_text(s, 1, title ? title : "", -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, model_fp ? model_fp : "", -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, template_name ? template_name : "", -1, SQLITE_STATIC);
		if (system)
			sqlite3_bind_text(s, 4, system, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 5, settings ? settings : "", -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 6, sess_time());
		rc = sqlite3_step(s);
		if (rc != SQLITE_DONE)
			ret = sess_db_fail(st, rc, what, err, errlen);
		else if (id_out)
			*id_out = sqlite3_last_insert_rowid(st->db);
	}
	sqlite3_finalize(s);
	return ret;
}

int
sess_conv_create(struct sess_store *st, const char *title, const char *model_fp,
    const char *template_name, const char *system, const char *settings,
    int64_t *id_out, char *err, size_t errlen)
{
	static const char what[] = "cannot create conversation";
	int ret;

	ret = sess_tx_begin(st, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	ret = insert_conv(st, title, model_fp, template_name, system, settings, id_out,
	    what, err, errlen);
	return sess_tx_end(st, ret, what, err, errlen);
}

/* Runs a one-row, one-integer lookup; KVC_ENOTFOUND when no row. */
static int
lookup_id(struct sess_store *st, const char *sql, const char *text, int64_t num,
    int64_t *id_out, const char *what, char *err, size_t errlen)
{
	sqlite3_stmt *s;
	int rc, ret;

	ret = sess_prepare(st, &s, sql, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	if (text)
		sqlite3_bind_text(s, 1, text, -1, SQLITE_STATIC);
	else if (sqlite3_bind_parameter_count(s) > 0)
		sqlite3_bind_int64(s, 1, num);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*id_out = sqlite3_column_int64(s, 0);
	else if (rc == SQLITE_DONE)
		ret = KVC_ENOTFOUND;
	else
		ret = sess_db_fail(st, rc, what, err, errlen);
	sqlite3_finalize(s);
	return ret;
}

int
sess_conv_find(struct sess_store *st, const char *id_or_title, int64_t *id_out,
    char *err, size_t errlen)
{
	static const char what[] = "cannot look up conversation";
	const char *p;
	int ret;

	if (id_or_title == NULL || *id_or_title == '\0') {
		kvc_err(err, errlen, "no conversation name or id given");
		return KVC_EINVAL;
	}
	for (p = id_or_title; *p >= '0' && *p <= '9'; p++)
		;
	/* A numeric id first; a conversation may still be titled "2024". */
	if (*p == '\0' && p - id_or_title <= 18) {
		ret = lookup_id(st, "SELECT id FROM conversations WHERE id = ?1", NULL,
		    strtoll(id_or_title, NULL, 10), id_out, what, err, errlen);
		if (ret != KVC_ENOTFOUND)
			return ret;
	}
	ret = lookup_id(st, "SELECT id FROM conversations WHERE title = ?1 "
	    "ORDER BY touched DESC, id DESC LIMIT 1", id_or_title, 0, id_out, what, err, errlen);
	if (ret == KVC_ENOTFOUND)
		kvc_err(err, errlen, "no conversation with id or title '%s'", id_or_title);
	return ret;
}

int
sess_conv_claim(struct sess_store *st, const char *title, const char *model_fp,
    const char *template_name, const char *system, const char *settings,
    int64_t *id_out, bool *created, char *err, size_t errlen)
{
	static const char what[] = "cannot open or create conversation";
	int64_t id = 0;
	bool made = false;
	int ret;

	if (title == NULL || *title == '\0') {
		kvc_err(err, errlen, "no conversation name given");
		return KVC_EINVAL;
	}
	/*
	 * One write transaction: a second process starting with the same name
	 * waits on BEGIN IMMEDIATE and then finds the row (and our lock) this
	 * one made, where a lookup and a separate insert would both miss.
	 */
	ret = sess_tx_begin(st, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	ret = sess_conv_find(st, title, &id, err, errlen);
	if (ret == KVC_ENOTFOUND) {
		made = true;
		ret = insert_conv(st, title, model_fp, template_name, system, settings, &id,
		    what, err, errlen);
	}
	if (ret == KVC_OK)
		ret = sess_lock_take(st, id, err, errlen);
	ret = sess_tx_end(st, ret, what, err, errlen);
	if (ret == KVC_OK) {
		*id_out = id;
		if (created)
			*created = made;
	}
	return ret;
}

int
sess_conv_latest(struct sess_store *st, int64_t *id_out, char *err, size_t errlen)
{
	/* Empty ones (left by older versions) are nothing to come back to. */
	int ret = lookup_id(st, "SELECT id FROM conversations c WHERE EXISTS (SELECT 1 FROM "
	    "messages m WHERE m.conv_id = c.id) ORDER BY touched DESC, id DESC LIMIT 1", NULL, 0,
	    id_out, "cannot look up conversations", err, errlen);

	if (ret == KVC_ENOTFOUND)
		kvc_err(err, errlen, "no saved conversations with messages yet");
	return ret;
}

int
sess_conv_get(struct sess_store *st, int64_t id, struct sess_conv *out, char *err, size_t errlen)
{
	static const char what[] = "cannot read conversation";
	sqlite3_stmt *s;
	int ret;

	memset(out, 0, sizeof *out);
	ret = sess_prepare(st, &s, "SELECT " CONV_COLUMNS " FROM conversations c WHERE c.id = ?1",
	    what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	sqlite3_bind_int64(s, 1, id);
	ret = sess_step_conv(st, s, id, what, err, errlen);
	if (ret == KVC_OK) {
		ret = fill_conv(s, out);
		if (ret != KVC_OK)
			oom(st, what, err, errlen);
	}
	sqlite3_finalize(s);
	return ret;
}

int
sess_conv_list(struct sess_store *st, struct sess_conv **out, int *n, char *err, size_t errlen)
{
	static const char what[] = "cannot list conversations";
	struct sess_conv *v = NULL, *nv;
	int cap = 0, used = 0, rc, ret;
	sqlite3_stmt *s;

	*out = NULL;
	*n = 0;
	ret = sess_prepare(st, &s, "SELECT " CONV_COLUMNS " FROM conversations c "
	    "ORDER BY c.touched DESC, c.id DESC", what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		nv = grow(v, used, &cap, sizeof *v);
		if (nv == NULL) {
			ret = oom(st, what, err, errlen);
			break;
		}
		v = nv;
		if (fill_conv(s, &v[used]) != KVC_OK) {
			ret = oom(st, what, err, errlen);
			break;
		}
		used++;
	}
	if (ret == KVC_OK && rc != SQLITE_DONE)
		ret = sess_db_fail(st, rc, what, err, errlen);
	sqlite3_finalize(s);
	if (ret != KVC_OK) {
		sess_conv_list_free(v, used);
		return ret;
	}
	*out = v;
	*n = used;
	return KVC_OK;
}

void
sess_conv_list_free(struct sess_conv *v, int n)
{
	int i;

	for (i = 0; i < n; i++)
		sess_conv_clear(&v[i]);
	free(v);
}

/* UPDATE conversations SET <column> = text; KVC_ENOTFOUND if no such id. */
static int
set_conv_text(struct sess_store *st, int64_t id, const char *sql, const char *text,
    const char *what, char *err, size_t errlen)
{
	sqlite3_stmt *s = NULL;
	int rc, ret;

	ret = sess_tx_begin(st, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	ret = sess_prepare(st, &s, sql, what, err, errlen);
	if (ret == KVC_OK) {
		sqlite3_bind_int64(s, 1, id);
		if (text)
			sqlite3_bind_text(s, 2, text, -1, SQLITE_STATIC);
		rc = sqlite3_step(s);
		if (rc != SQLITE_DONE) {
			ret = sess_db_fail(st, rc, what, err, errlen);
		} else if (sqlite3_changes(st->db) == 0) {
			kvc_err(err, errlen, "no conversation with id %lld", (long long)id);
			ret = KVC_ENOTFOUND;
		}
	}
	sqlite3_finalize(s);
	return sess_tx_end(st, ret, what, err, errlen);
}

int
sess_conv_rename(struct sess_store *st, int64_t id, const char *title, char *err, size_t errlen)
{
	return set_conv_text(st, id, "UPDATE conversations SET title = ?2 WHERE id = ?1",
	    title ? title : "", "cannot rename conversation", err, errlen);
}

int
sess_conv_set_system(struct sess_store *st, int64_t id, const char *system, char *err,
    size_t errlen)
{
	return set_conv_text(st, id, "UPDATE conversations SET system = ?2 WHERE id = ?1", system,
	    "cannot set the system prompt", err, errlen);
}

int
sess_conv_set_settings(struct sess_store *st, int64_t id, const char *settings, char *err,
    size_t errlen)
{
	return set_conv_text(st, id, "UPDATE conversations SET settings = ?2 WHERE id = ?1",
	    settings ? settings : "", "cannot save settings", err, errlen);
}

int
sess_conv_set_window(struct sess_store *st, int64_t id, int64_t window, char *err,
    size_t errlen)
{
	static const char what[] = "cannot save the context window";
	int ret;

	if (window < 0) {
		kvc_err(err, errlen, "%s: %s: negative window %lld", st->path, what,
		    (long long)window);
		return KVC_EINVAL;
	}
	ret = sess_tx_begin(st, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	ret = sess_exec_ids(st, "UPDATE conversations SET window = ?2 WHERE id = ?1", id, window,
	    what, err, errlen);
	if (ret == KVC_OK && sqlite3_changes(st->db) == 0) {
		kvc_err(err, errlen, "no conversation with id %lld", (long long)id);
		ret = KVC_ENOTFOUND;
	}
	return sess_tx_end(st, ret, what, err, errlen);
}

static int touch(struct sess_store *st, int64_t conv, const char *what, char *err, size_t errlen);

int
sess_conv_replace_system(struct sess_store *st, int64_t id, const char *system,
    const int32_t *ids, int n, const struct sess_chunk *chunk, int64_t window, char *err,
    size_t errlen)
{
	static const char what[] = "cannot store the new system prompt";
	unsigned char *blob;
	sqlite3_stmt *s = NULL;
	char *title = NULL;
	int ret;

	if (window < 0) {
		kvc_err(err, errlen, "%s: %s: negative window %lld", st->path, what, (long long)window);
		return KVC_EINVAL;
	}
	if (chunk && (ret = sess_chunk_check(st, chunk, err, errlen)) != KVC_OK)
		return ret;
	if ((blob = sess_encode_ids(ids, n)) == NULL) {
		kvc_err(err, errlen, "%s: out of memory", what);
		return KVC_ENOMEM;
	}
	if ((ret = sess_tx_begin(st, what, err, errlen)) != KVC_OK) {
		free(blob);
		return ret;
	}
	ret = sess_conv_title(st, id, &title, what, err, errlen);
	if (ret == KVC_OK)
		ret = sess_prepare(st, &s, "UPDATE conversations SET system = ?2, window = ?3 "
		    "WHERE id = ?1", what, err, errlen);
	if (ret == KVC_OK) {
		sqlite3_bind_int64(s, 1, id);
		if (system)
			sqlite3_bind_text(s, 2, system, -1, SQLITE_STATIC);
		else
			sqlite3_bind_null(s, 2);
		sqlite3_bind_int64(s, 3, window);
		ret = sqlite3_step(s) == SQLITE_DONE ? KVC_OK :
		    sess_db_fail(st, sqlite3_errcode(st->db), what, err, errlen);
		if (ret == KVC_OK && sqlite3_changes(st->db) != 1) {
			kvc_err(err, errlen, "%s: no conversation with id %lld", what, (long long)id);
			ret = KVC_ENOTFOUND;
		}
		sqlite3_finalize(s);
	}
	if (ret == KVC_OK)
		ret = sess_prepare(st, &s, "UPDATE messages SET tokens = ?2 WHERE conv_id = ?1 AND "
		    "seq = (SELECT min(seq) FROM messages WHERE conv_id = ?1)", what, err, errlen);
	if (ret == KVC_OK) {
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_blob(s, 2, blob, n * 4, SQLITE_STATIC);
		ret = sqlite3_step(s) == SQLITE_DONE ? KVC_OK :
		    sess_db_fail(st, sqlite3_errcode(st->db), what, err, errlen);
		if (ret == KVC_OK && sqlite3_changes(st->db) != 1) {
			kvc_err(err, errlen, "%s: conversation %lld has no messages", what, (long long)id);
			ret = KVC_ENOTFOUND;
		}
		sqlite3_finalize(s);
	}
	if (ret == KVC_OK)
		ret = sess_exec_ids(st, "DELETE FROM kv_chunks WHERE conv_id = ?1", id, 0,
		    what, err, errlen);
	/* The new stream's snapshot with it: written later, a kill in between left none. */
	if (ret == KVC_OK && chunk)
		ret = sess_chunk_write(st, id, title, chunk, err, errlen);
	if (ret == KVC_OK)
		ret = touch(st, id, what, err, errlen);
	free(blob);
	free(title);
	return sess_tx_end(st, ret, what, err, errlen);
}

int
sess_conv_delete(struct sess_store *st, int64_t id, char *err, size_t errlen)
{
	static const char what[] = "cannot delete conversation";
	char *title = NULL;
	int ret;

	ret = sess_tx_begin(st, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	ret = sess_conv_title(st, id, &title, what, err, errlen);
	/* Pulling it from under another process would fail its next turn. */
	if (ret == KVC_OK)
		ret = sess_lock_check(st, id, title, err, errlen);
	if (ret == KVC_OK)
		ret = sess_exec_ids(st, "DELETE FROM conversations WHERE id = ?1", id, 0,
		    what, err, errlen);
	free(title);
	ret = sess_tx_end(st, ret, what, err, errlen);
	if (ret == KVC_OK)
		sqlite3_exec(st->db, "PRAGMA incremental_vacuum", NULL, NULL, NULL);
	return ret;
}

static int
touch(struct sess_store *st, int64_t conv, const char *what, char *err, size_t errlen)
{
	return sess_exec_ids(st, TOUCH_SQL, conv, sess_time(), what, err, errlen);
}

unsigned char *
sess_encode_ids(const int32_t *ids, int n)
{
	unsigned char *b = malloc((size_t)n * 4 + 1), *p = b;
	int i;

	if (b == NULL)
		return NULL;
	for (i = 0; i < n; i++, p += 4) {
		uint32_t u = (uint32_t)ids[i];

		p[0] = (unsigned char)u;
		p[1] = (unsigned char)(u >> 8);
		p[2] = (unsigned char)(u >> 16);
		p[3] = (unsigned char)(u >> 24);
	}
	return b;
}

static int
check_msgs(struct sess_store *st, const struct sess_msg *msgs, int n, char *err, size_t errlen)
{
	int i;

	if (n < 0 || (n > 0 && msgs == NULL))
		goto bad;
	for (i = 0; i < n; i++) {
		if ((int)msgs[i].role < SESS_SYSTEM || (int)msgs[i].role > SESS_ASSISTANT ||
		    msgs[i].n_ids < 0 || msgs[i].n_ids > (1 << 28) ||
		    (msgs[i].n_ids > 0 && msgs[i].ids == NULL))
			goto bad;
	}
	return KVC_OK;
bad:
	kvc_err(err, errlen, "%s: cannot save turn: invalid message", st->path);
	return KVC_EINVAL;
}

int
sess_msgs_insert(struct sess_store *st, int64_t conv, const struct sess_msg *msgs, int n,
    const char *what, char *err, size_t errlen)
{
	sqlite3_stmt *s = NULL;
	int64_t seq, now = sess_time();
	int i, rc, ret;

	if (n == 0)
		return KVC_OK;
	ret = lookup_id(st, "SELECT coalesce(max(seq) + 1, 0) FROM messages WHERE conv_id = ?1",
	    NULL, conv, &seq, what, err, errlen);
	if (ret == KVC_OK)
		ret = sess_prepare(st, &s,
		    "INSERT INTO messages (conv_id, seq, role, text, tokens, interrupted, "
		    "ttft_ms, prefill_tokens, reused_tokens, prefill_tps, gen_tokens, decode_tps, "
		    "created, reasoning) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
		    "?13, ?14)",
		    what, err, errlen);
	for (i = 0; ret == KVC_OK && i < n; i++) {
		const struct sess_msg *m = &msgs[i];
		unsigned char *blob = sess_encode_ids(m->ids, m->n_ids);

		if (blob == NULL) {
			ret = oom(st, what, err, errlen);
			break;
		}
		sqlite3_bind_int64(s, 1, conv);
		sqlite3_bind_int64(s, 2, seq + i);
		sqlite3_bind_int(s, 3, (int)m->role);
		sqlite3_bind_text(s, 4, m->text ? m->text : "", -1, SQLITE_STATIC);
		sqlite3_bind_blob(s, 5, blob, m->n_ids * 4, SQLITE_STATIC);
		sqlite3_bind_int(s, 6, m->interrupted ? 1 : 0);
		sqlite3_bind_double(s, 7, m->stats.ttft_ms);
		sqlite3_bind_int(s, 8, m->stats.prefill_tokens);
		sqlite3_bind_int(s, 9, m->stats.reused_tokens);
		sqlite3_bind_double(s, 10, m->stats.prefill_tps);
		sqlite3_bind_int(s, 11, m->stats.gen_tokens);
		sqlite3_bind_double(s, 12, m->stats.decode_tps);
		sqlite3_bind_int64(s, 13, m->created ? m->created : now);
		if (m->reasoning != NULL)
			sqlite3_bind_text(s, 14, m->reasoning, -1, SQLITE_STATIC);
		else
			sqlite3_bind_null(s, 14);
		rc = sqlite3_step(s);
		if (rc != SQLITE_DONE)
			ret = sess_db_fail(st, rc, what, err, errlen);
		sqlite3_reset(s);
		sqlite3_clear_bindings(s);
		free(blob);
	}
	sqlite3_finalize(s);
	return ret;
}

/* The rows a rewind drops; inside the caller's transaction. */
static int
rewind_rows(struct sess_store *st, int64_t conv, int keep_msgs, int n_pos,
    const char *what, char *err, size_t errlen)
{
	static const char *const sql[] = {
		"DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE conv_id = ?1 "
		"ORDER BY seq LIMIT -1 OFFSET ?2)",
		/* A chunk straddling the new end goes whole; the caller re-snapshots. */
		"DELETE FROM kv_chunks WHERE conv_id = ?1 AND pos1 > ?2",
	};
	int i, ret = KVC_OK;

	for (i = 0; ret == KVC_OK && i < 2; i++)
		ret = sess_exec_ids(st, sql[i], conv, i == 0 ? keep_msgs : n_pos, what, err, errlen);
	return ret;
}

int
sess_rewind(struct sess_store *st, int64_t conv, int keep_msgs, int n_pos,
    char *err, size_t errlen)
{
	static const char what[] = "cannot rewind conversation";
	char *title = NULL;
	int ret;

	if (keep_msgs < 0 || n_pos < 0) {
		kvc_err(err, errlen, "%s: %s: negative length", st->path, what);
		return KVC_EINVAL;
	}
	ret = sess_tx_begin(st, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	ret = sess_conv_title(st, conv, &title, what, err, errlen);
	free(title);
	if (ret == KVC_OK)
		ret = rewind_rows(st, conv, keep_msgs, n_pos, what, err, errlen);
	if (ret == KVC_OK)
		ret = touch(st, conv, what, err, errlen);
	return sess_tx_end(st, ret, what, err, errlen);
}

/* What write_turn does to the conversation's window and chunks. */
enum turn_window {
	WINDOW_KEEP,		/* neither changes */
	WINDOW_NEW,		/* the window is set, every chunk goes (another stream's) */
	WINDOW_REKEY		/* the window is set, only chunks of another window go */
};

/*
 * One transaction: with keep_msgs >= 0 first the rewind to keep_msgs
 * messages and n_pos positions, then as wmode says the window, then
 * msgs[0..n) and the chunk.
 */
static int
write_turn(struct sess_store *st, int64_t conv, int keep_msgs, int n_pos,
    const struct sess_msg *msgs, int n, const struct sess_chunk *chunk, enum turn_window wmode,
    int64_t window, const char *what, char *err, size_t errlen)
{
	char *title = NULL;
	int ret;

	ret = check_msgs(st, msgs, n, err, errlen);
	if (ret == KVC_OK && chunk)
		ret = sess_chunk_check(st, chunk, err, errlen);
	if (ret != KVC_OK)
		return ret;
	ret = sess_tx_begin(st, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	ret = sess_conv_title(st, conv, &title, what, err, errlen);
	if (ret == KVC_OK && keep_msgs >= 0)
		ret = rewind_rows(st, conv, keep_msgs, n_pos, what, err, errlen);
	/* A new window: the old chunks hold another stream's cache. */
	if (ret == KVC_OK && wmode == WINDOW_NEW)
		ret = sess_exec_ids(st, "DELETE FROM kv_chunks WHERE conv_id = ?1", conv, 0,
		    what, err, errlen);
	/* The window recorded for chunks made over it: any of another window goes. */
	if (ret == KVC_OK && wmode == WINDOW_REKEY)
		ret = sess_exec_ids(st, "DELETE FROM kv_chunks WHERE conv_id = ?1 AND window <> ?2",
		    conv, window, what, err, errlen);
	if (ret == KVC_OK && wmode != WINDOW_KEEP)
		ret = sess_exec_ids(st, "UPDATE conversations SET window = ?2 WHERE id = ?1", conv,
		    window, what, err, errlen);
	if (ret == KVC_OK)
		ret = sess_msgs_insert(st, conv, msgs, n, what, err, errlen);
	if (ret == KVC_OK && chunk)
		ret = sess_chunk_write(st, conv, title, chunk, err, errlen);
	if (ret == KVC_OK)
		ret = touch(st, conv, what, err, errlen);
	free(title);
	return sess_tx_end(st, ret, what, err, errlen);
}

int
sess_turn_commit(struct sess_store *st, int64_t conv, const struct sess_msg *msgs, int n,
    const struct sess_chunk *chunk, char *err, size_t errlen)
{
	return write_turn(st, conv, -1, 0, msgs, n, chunk, WINDOW_KEEP, 0, "cannot save turn", err,
	    errlen);
}

int
sess_turn_commit_window(struct sess_store *st, int64_t conv, const struct sess_msg *msgs,
    int n, const struct sess_chunk *chunk, int64_t window, char *err, size_t errlen)
{
	if (window < 0) {
		kvc_err(err, errlen, "%s: cannot save turn: negative window %lld", st->path,
		    (long long)window);
		return KVC_EINVAL;
	}
	return write_turn(st, conv, -1, 0, msgs, n, chunk, WINDOW_NEW, window, "cannot save turn",
	    err, errlen);
}

int
sess_rewind_window(struct sess_store *st, int64_t conv, int keep_msgs, int64_t window,
    const struct sess_chunk *chunk, char *err, size_t errlen)
{
	static const char what[] = "cannot rewind";

	if (keep_msgs < 0 || window < 0) {
		kvc_err(err, errlen, "%s: %s: negative length or window", st->path, what);
		return KVC_EINVAL;
	}
	return write_turn(st, conv, keep_msgs, 0, NULL, 0, chunk, WINDOW_NEW, window, what, err,
	    errlen);
}

/*
 * The user's message: synchronous=OFF and no checkpoint of any kind (the
 * automatic one is off too), so the commit makes no fsync at all.
 * synchronous=NORMAL still synced the WAL's header when the commit was the
 * first after a checkpoint had emptied the WAL, which every commit's
 * checkpoint does: one fdatasync in each turn's time to first token
 * (strace, issue 26). Safe: while OFF, frames are only appended to the WAL,
 * never copied into the database file, so a crash can lose the message
 * (until the reply's FULL commit syncs the WAL it shares) but never corrupt
 * the file; a SIGKILL cannot lose it, its frames are in the file when
 * COMMIT returns.
 */
int
sess_user_commit(struct sess_store *st, int64_t conv, const struct sess_msg *msg, char *err,
    size_t errlen)
{
	int rc;

	if (!st->readonly && sqlite3_exec(st->db, "PRAGMA wal_autocheckpoint = 0; "
	    "PRAGMA synchronous = OFF", NULL, NULL, NULL) == SQLITE_OK)
		st->sync_later = true;
	rc = write_turn(st, conv, -1, 0, msg, 1, NULL, WINDOW_KEEP, 0, "cannot save your message",
	    err, errlen);
	if (st->sync_later) {
		st->sync_later = false;
		/* failing, the next commit would not sync: say so rather than risk it
		 * (1000 pages: SQLite's default automatic checkpoint) */
		if (sqlite3_exec(st->db, "PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = 1000",
		    NULL, NULL, NULL) != SQLITE_OK && rc == KVC_OK)
			rc = sess_db_fail(st, sqlite3_errcode(st->db), "cannot restore synchronous=FULL",
			    err, errlen);
	}
	return rc;
}

int
sess_turn_replace(struct sess_store *st, int64_t conv, int keep_msgs, int n_pos,
    const struct sess_msg *msgs, int n, const struct sess_chunk *chunk, char *err, size_t errlen)
{
	static const char what[] = "cannot replace reply";

	if (keep_msgs < 0 || n_pos < 0) {
		kvc_err(err, errlen, "%s: %s: negative length", st->path, what);
		return KVC_EINVAL;
	}
	return write_turn(st, conv, keep_msgs, n_pos, msgs, n, chunk, WINDOW_KEEP, 0, what, err,
	    errlen);
}

int
sess_turn_rekey(struct sess_store *st, int64_t conv, int keep_msgs, int n_pos,
    const struct sess_msg *msgs, int n, const struct sess_chunk *chunk, int64_t window,
    char *err, size_t errlen)
{
	static const char what[] = "cannot save turn";

	if (n_pos < 0 || window < 0) {
		kvc_err(err, errlen, "%s: %s: negative length or window", st->path, what);
		return KVC_EINVAL;
	}
	return write_turn(st, conv, keep_msgs, n_pos, msgs, n, chunk, WINDOW_REKEY, window, what,
	    err, errlen);
}

static int32_t *
decode_ids(const unsigned char *p, int n)
{
	int32_t *v = malloc((size_t)n * sizeof *v + 1);
	int i;

	if (v == NULL)
		return NULL;
	for (i = 0; i < n; i++, p += 4)
		v[i] = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 |
		    (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
	return v;
}

int
sess_msgs_load(struct sess_store *st, int64_t conv, struct sess_msg **out, int *n,
    char *err, size_t errlen)
{
	static const char what[] = "cannot read messages";
	struct sess_msg *v = NULL, *nv, *m;
	int cap = 0, used = 0, rc, ret, nb;
	sqlite3_stmt *s;
	bool no_mem = false;

	*out = NULL;
	*n = 0;
	ret = sess_prepare(st, &s, "SELECT id, role, text, tokens, interrupted, ttft_ms, "
	    "prefill_tokens, reused_tokens, prefill_tps, gen_tokens, decode_tps, created, "
	    "reasoning FROM messages WHERE conv_id = ?1 ORDER BY seq", what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	sqlite3_bind_int64(s, 1, conv);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		nv = grow(v, used, &cap, sizeof *v);
		if (nv == NULL) {
			ret = oom(st, what, err, errlen);
			break;
		}
		v = nv;
		m = &v[used];
		memset(m, 0, sizeof *m);
		m->id = sqlite3_column_int64(s, 0);
		m->role = (enum sess_role)sqlite3_column_int(s, 1);
		m->text = dup_col(s, 2, &no_mem);
		nb = sqlite3_column_bytes(s, 3);
		used++;
		if (nb % 4 != 0) {
			kvc_err(err, errlen, "%s: %s: conversation %lld, message %lld: token "
			    "list of %d bytes is not a multiple of 4", st->path, what,
			    (long long)conv, (long long)m->id, nb);
			ret = KVC_ECORRUPT;
			break;
		}
		m->n_ids = nb / 4;
		m->ids = decode_ids(sqlite3_column_blob(s, 3), m->n_ids);
		m->interrupted = sqlite3_column_int(s, 4) != 0;
		m->stats.ttft_ms = sqlite3_column_double(s, 5);
		m->stats.prefill_tokens = sqlite3_column_int(s, 6);
		m->stats.reused_tokens = sqlite3_column_int(s, 7);
		m->stats.prefill_tps = sqlite3_column_double(s, 8);
		m->stats.gen_tokens = sqlite3_column_int(s, 9);
		m->stats.decode_tps = sqlite3_column_double(s, 10);
		m->created = sqlite3_column_int64(s, 11);
		if (sqlite3_column_type(s, 12) != SQLITE_NULL &&
		    (m->reasoning = dup_col(s, 12, &no_mem)) == NULL)
			no_mem = true;
		if (m->text == NULL)
			no_mem = true;
		if (no_mem || m->ids == NULL) {
			ret = oom(st, what, err, errlen);
			break;
		}
	}
	if (ret == KVC_OK && rc != SQLITE_DONE)
		ret = sess_db_fail(st, rc, what, err, errlen);
	sqlite3_finalize(s);
	if (ret != KVC_OK) {
		sess_msgs_free(v, used);
		return ret;
	}
	*out = v;
	*n = used;
	return KVC_OK;
}

void
sess_msgs_free(struct sess_msg *v, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		free(v[i].text);
		free(v[i].reasoning);
		free(v[i].ids);
	}
	free(v);
}
