/*
 * chunks.c: KV snapshot chunks. A chunk holds cache positions [pos0, pos1)
 * and is stored as one or more kv_chunks rows ("parts") of bounded size,
 * written and read with incremental BLOB I/O so SQLite never builds a copy
 * of the whole chunk in memory. Every part carries its own checksum
 * (checksum.c), verified on every read.
 *
 * Calls only db.c and checksum.c: the turn that writes a chunk (store.c) and
 * the integrity check that verifies them all (check.c) sit above.
 */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

/* Slices for sqlite3_blob_write/read, whose sizes are ints. */
#define SLICE ((size_t)4 << 20)

int
sess_chunk_check(struct sess_store *st, const struct sess_chunk *c, char *err, size_t errlen)
{
	if (c->pos0 < 0 || c->pos1 <= c->pos0 || c->kv_type == NULL || c->model_fp == NULL ||
	    c->window < 0 || (c->len > 0 && c->blob == NULL)) {
		kvc_err(err, errlen, "%s: cannot save turn: invalid snapshot chunk [%d, %d)",
		    st->path, c->pos0, c->pos1);
		return KVC_EINVAL;
	}
	return KVC_OK;
}

/*
 * End, model, cache type and window of the stored snapshot (end 0, NULLs
 * and window 0 if none).
 */
static int
snapshot_tail(struct sess_store *st, int64_t conv, int *end, char **model_fp, char **kv_type,
    int64_t *window, const char *what, char *err, size_t errlen)
{
	sqlite3_stmt *s;
	int rc, ret;

	*end = 0;
	*model_fp = *kv_type = NULL;
	*window = 0;
	ret = sess_prepare(st, &s, "SELECT pos1, model_fp, kv_type, window FROM kv_chunks "
	    "WHERE conv_id = ?1 ORDER BY pos0 DESC, part DESC LIMIT 1", what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	sqlite3_bind_int64(s, 1, conv);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		const unsigned char *f = sqlite3_column_text(s, 1), *t = sqlite3_column_text(s, 2);

		*end = sqlite3_column_int(s, 0);
		*window = sqlite3_column_int64(s, 3);
		*model_fp = strdup(f ? (const char *)f : "");
		*kv_type = strdup(t ? (const char *)t : "");
		if (*model_fp == NULL || *kv_type == NULL) {
			kvc_err(err, errlen, "%s: %s: out of memory", st->path, what);
			ret = KVC_ENOMEM;
		}
	} else if (rc != SQLITE_DONE) {
		ret = sess_db_fail(st, rc, what, err, errlen);
	}
	sqlite3_finalize(s);
	if (ret != KVC_OK) {
		free(*model_fp);
		free(*kv_type);
		*model_fp = *kv_type = NULL;
	}
	return ret;
}

/* Inside the caller's transaction; on failure the caller rolls back. */
int
sess_chunk_write(struct sess_store *st, int64_t conv, const char *title,
    const struct sess_chunk *c, char *err, size_t errlen)
{
	static const char what[] = "cannot save turn";
	const unsigned char *data = c->blob;
	char *fp = NULL, *type = NULL;
	size_t n_parts, part, off, plen, done, step;
	sqlite3_stmt *s = NULL;
	sqlite3_blob *b;
	int64_t win;
	int end, rc, ret;

	ret = snapshot_tail(st, conv, &end, &fp, &type, &win, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	if (c->pos0 != end) {
		kvc_err(err, errlen, "%s: %s: conversation '%s': snapshot chunk [%d, %d) does not "
		    "continue the stored snapshot, which ends at %d", st->path, what, title,
		    c->pos0, c->pos1, end);
		ret = KVC_EINVAL;
	} else if (fp && (strcmp(fp, c->model_fp) != 0 || strcmp(type, c->kv_type) != 0 ||
	    win != c->window)) {
		kvc_err(err, errlen, "%s: %s: conversation '%s': snapshot chunk made with another "
		    "model, cache type or context window than the stored snapshot; clear it first",
		    st->path, what, title);
		ret = KVC_EINVAL;
	}
	free(fp);
	free(type);
	if (ret != KVC_OK)
		return ret;
	n_parts = c->len == 0 ? 1 : (c->len - 1) / st->part_max + 1;
	ret = sess_prepare(st, &s, "INSERT INTO kv_chunks (conv_id, pos0, pos1, part, n_parts, "
	    "kv_type, model_fp, len, checksum, window, data) "
	    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, zeroblob(?8))", what, err, errlen);
	for (part = 0, off = 0; ret == KVC_OK && part < n_parts; part++, off += plen) {
		plen = c->len - off < st->part_max ? c->len - off : st->part_max;
		sqlite3_bind_int64(s, 1, conv);
		sqlite3_bind_int(s, 2, c->pos0);
		sqlite3_bind_int(s, 3, c->pos1);
		sqlite3_bind_int64(s, 4, (int64_t)part);
		sqlite3_bind_int64(s, 5, (int64_t)n_parts);
		sqlite3_bind_text(s, 6, c->kv_type, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 7, c->model_fp, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 8, (int64_t)plen);
		sqlite3_bind_int64(s, 9, (int64_t)sess_checksum(data + off, plen));
		sqlite3_bind_int64(s, 10, c->window);
		/* zeroblob reserves the pages without materialising the bytes. */
		rc = sqlite3_step(s);
		sqlite3_reset(s);
		if (rc != SQLITE_DONE) {
			ret = sess_db_fail(st, rc, what, err, errlen);
			break;
		}
		if (plen == 0)
			continue;
		rc = sqlite3_blob_open(st->db, "main", "kv_chunks", "data",
		    sqlite3_last_insert_rowid(st->db), 1, &b);
		if (rc != SQLITE_OK) {
			ret = sess_db_fail(st, rc, what, err, errlen);
			break;
		}
		for (done = 0; rc == SQLITE_OK && done < plen; done += step) {
			step = plen - done < SLICE ? plen - done : SLICE;
			rc = sqlite3_blob_write(b, data + off + done, (int)step, (int)done);
		}
		if (rc != SQLITE_OK)
			ret = sess_db_fail(st, rc, what, err, errlen);
		rc = sqlite3_blob_close(b);
		if (rc != SQLITE_OK && ret == KVC_OK)
			ret = sess_db_fail(st, rc, what, err, errlen);
	}
	sqlite3_finalize(s);
	return ret;
}

/* The chunk being reassembled from its parts. */
struct assembly {
	unsigned char *buf;	/* (cap) bytes, reused across chunks */
	size_t cap, n;		/* allocated, filled */
	int pos0, pos1;
	int64_t part, n_parts;	/* next part expected, parts in this chunk */
};

static int
corrupt(struct sess_store *st, const char *title, int64_t conv, int pos0, int pos1,
    const char *why, char *err, size_t errlen)
{
	kvc_err(err, errlen, "%s: conversation '%s' (id %lld): snapshot chunk [%d, %d) %s",
	    st->path, title, (long long)conv, pos0, pos1, why);
	return KVC_ECORRUPT;
}

/* Appends one row's data to the assembly, verifying its size and checksum. */
static int
read_part(struct sess_store *st, struct assembly *a, int64_t rowid, int64_t len,
    uint64_t sum, const char *what, char *err, size_t errlen)
{
	size_t need, done, step;
	sqlite3_blob *b;
	unsigned char *nb;
	int rc, ret = KVC_OK;

	rc = sqlite3_blob_open(st->db, "main", "kv_chunks", "data", rowid, 0, &b);
	if (rc != SQLITE_OK)
		return sess_db_fail(st, rc, what, err, errlen);
	if (len < 0 || sqlite3_blob_bytes(b) != len) {
		sqlite3_blob_close(b);
		return 1;	/* size mismatch: caller reports corruption */
	}
	if (!kvc_add_ok(a->n, (size_t)len, &need) || !kvc_add_ok(need, 1, &need)) {
		sqlite3_blob_close(b);
		return 1;
	}
	if (need > a->cap) {
		nb = realloc(a->buf, need);
		if (nb == NULL) {
			sqlite3_blob_close(b);
			kvc_err(err, errlen, "%s: %s: out of memory (%zu bytes)", st->path, what,
			    need);
			return KVC_ENOMEM;
		}
		a->buf = nb;
		a->cap = need;
	}
	for (done = 0; rc == SQLITE_OK && done < (size_t)len; done += step) {
		step = (size_t)len - done < SLICE ? (size_t)len - done : SLICE;
		rc = sqlite3_blob_read(b, a->buf + a->n + done, (int)step, (int)done);
	}
	if (rc != SQLITE_OK)
		ret = sess_db_fail(st, rc, what, err, errlen);
	sqlite3_blob_close(b);
	if (ret != KVC_OK)
		return ret;
	if (sess_checksum(a->buf + a->n, (size_t)len) != sum)
		return 2;
	a->n += (size_t)len;
	return KVC_OK;
}

/*
 * Refuses a snapshot made with another model or cache type, or over another
 * context window, naming which.
 */
static int
check_origin(struct sess_store *st, int64_t conv, const char *title, const char *model_fp,
    const char *kv_type, int64_t window, const char *what, char *err, size_t errlen)
{
	char *fp, *type;
	int64_t win;
	int end, ret;

	ret = snapshot_tail(st, conv, &end, &fp, &type, &win, what, err, errlen);
	if (ret != KVC_OK || fp == NULL)
		return ret;
	if (strcmp(fp, model_fp) != 0) {
		kvc_err(err, errlen, "conversation '%s': its snapshot was made with another model "
		    "(fingerprint %s, loaded %s)", title, fp, model_fp);
		ret = KVC_ENOTFOUND;
	} else if (strcmp(type, kv_type) != 0) {
		kvc_err(err, errlen, "conversation '%s': its snapshot has cache type %s, the "
		    "loaded cache is %s", title, type, kv_type);
		ret = KVC_ENOTFOUND;
	} else if (win != window) {
		/* Window values are conv's keys (a slid one packs three numbers): not shown. */
		kvc_err(err, errlen, "conversation '%s': its snapshot was made over another "
		    "context window (where the stream starts, or what slid out of it, differs)",
		    title);
		ret = KVC_ENOTFOUND;
	}
	free(fp);
	free(type);
	if (ret != KVC_OK)
		return ret;
	/* The tail matched; a mixed snapshot would be a bug, refuse it too. */
	{
		sqlite3_stmt *s;
		int rc;

		ret = sess_prepare(st, &s, "SELECT count(*) FROM kv_chunks WHERE conv_id = ?1 "
		    "AND (model_fp <> ?2 OR kv_type <> ?3 OR window <> ?4)", what, err, errlen);
		if (ret != KVC_OK)
			return ret;
		sqlite3_bind_int64(s, 1, conv);
		sqlite3_bind_text(s, 2, model_fp, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, kv_type, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 4, window);
		rc = sqlite3_step(s);
		if (rc != SQLITE_ROW)
			ret = sess_db_fail(st, rc, what, err, errlen);
		else if (sqlite3_column_int64(s, 0) > 0) {
			kvc_err(err, errlen, "conversation '%s': its snapshot mixes models, "
			    "cache types or context windows", title);
			ret = KVC_ENOTFOUND;
		}
		sqlite3_finalize(s);
	}
	return ret;
}

/*
 * Walks the rows in position order, reassembling chunks. fn == NULL only
 * verifies (sess_chunks_verify). Runs inside the caller's read transaction.
 */
static int
walk_chunks(struct sess_store *st, int64_t conv, const char *title,
    int (*fn)(void *arg, int pos0, int pos1, const void *blob, size_t len),
    void *arg, int *n_pos_out, const char *what, char *err, size_t errlen)
{
	struct assembly a = {0};
	sqlite3_stmt *s;
	int end = 0, rc = SQLITE_DONE, ret;

	ret = sess_prepare(st, &s, "SELECT id, pos0, pos1, part, n_parts, len, checksum "
	    "FROM kv_chunks WHERE conv_id = ?1 ORDER BY pos0, part", what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	sqlite3_bind_int64(s, 1, conv);
	while (ret == KVC_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		int pos0 = sqlite3_column_int(s, 1), pos1 = sqlite3_column_int(s, 2);
		int64_t part = sqlite3_column_int64(s, 3), n_parts = sqlite3_column_int64(s, 4);

		if (a.part == 0) {
			if (pos0 != end) {
				ret = corrupt(st, title, conv, pos0, pos1, end == 0 ?
				    "does not start at position 0" :
				    "does not follow the previous chunk (gap)", err, errlen);
				break;
			}
			a.pos0 = pos0;
			a.pos1 = pos1;
			a.n_parts = n_parts;
			a.n = 0;
		}
		if (pos1 <= pos0 || pos0 != a.pos0 || pos1 != a.pos1 || part != a.part ||
		    n_parts != a.n_parts || n_parts < 1) {
			ret = corrupt(st, title, conv, a.pos0, a.pos1,
			    "has missing or inconsistent parts", err, errlen);
			break;
		}
		ret = read_part(st, &a, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 5),
		    (uint64_t)sqlite3_column_int64(s, 6), what, err, errlen);
		if (ret == 1)
			ret = corrupt(st, title, conv, pos0, pos1, "has the wrong size", err, errlen);
		else if (ret == 2)
			ret = corrupt(st, title, conv, pos0, pos1, "is corrupted (checksum mismatch)",
			    err, errlen);
		if (ret != KVC_OK)
			break;
		if (++a.part < a.n_parts)
			continue;
		a.part = 0;
		if (fn) {
			ret = fn(arg, a.pos0, a.pos1, a.buf, a.n);
			if (ret != 0)
				break;
		}
		end = a.pos1;
		if (n_pos_out)
			*n_pos_out = end;
	}
	if (ret == KVC_OK && rc != SQLITE_DONE)
		ret = sess_db_fail(st, rc, what, err, errlen);
	else if (ret == KVC_OK && a.part != 0)
		ret = corrupt(st, title, conv, a.pos0, a.pos1, "is missing parts", err, errlen);
	sqlite3_finalize(s);
	free(a.buf);
	return ret;
}

int
sess_chunks_load(struct sess_store *st, int64_t conv, const char *model_fp,
    const char *kv_type, int64_t window,
    int (*fn)(void *arg, int pos0, int pos1, const void *blob, size_t len),
    void *arg, int *n_pos_out, char *err, size_t errlen)
{
	static const char what[] = "cannot read snapshot";
	char *title = NULL;
	int rc, ret;

	if (n_pos_out)
		*n_pos_out = 0;
	if (model_fp == NULL || kv_type == NULL || window < 0 || fn == NULL) {
		kvc_err(err, errlen, "%s: %s: missing argument", st->path, what);
		return KVC_EINVAL;
	}
	/* One read transaction: a consistent view even if another process writes. */
	rc = sqlite3_exec(st->db, "BEGIN", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return sess_db_fail(st, rc, what, err, errlen);
	ret = sess_conv_title(st, conv, &title, what, err, errlen);
	if (ret == KVC_OK)
		ret = check_origin(st, conv, title, model_fp, kv_type, window, what, err, errlen);
	if (ret == KVC_OK)
		ret = walk_chunks(st, conv, title, fn, arg, n_pos_out, what, err, errlen);
	free(title);
	sess_tx_rollback(st);
	return ret;
}

int
sess_chunks_verify(struct sess_store *st, int64_t conv, const char *title, const char *what,
    char *err, size_t errlen)
{
	return walk_chunks(st, conv, title, NULL, NULL, NULL, what, err, errlen);
}

int
sess_chunks_end(struct sess_store *st, int64_t conv, int *end, char *err, size_t errlen)
{
	char *fp, *type;
	int64_t win;
	int ret = snapshot_tail(st, conv, end, &fp, &type, &win, "cannot read the snapshot's end",
	    err, errlen);

	free(fp);
	free(type);
	return ret;
}

int
sess_chunks_clear(struct sess_store *st, int64_t conv, char *err, size_t errlen)
{
	static const char what[] = "cannot clear snapshot";
	int ret;

	ret = sess_tx_begin(st, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	ret = sess_exec_ids(st, "DELETE FROM kv_chunks WHERE conv_id = ?1", conv, 0,
	    what, err, errlen);
	return sess_tx_end(st, ret, what, err, errlen);
}
