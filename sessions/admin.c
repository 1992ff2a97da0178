/*
 * admin.c: operations on a whole database: a consistent backup copy
 * (sess_backup) and the salvage of a damaged one (sess_recover). The top
 * of the module: it uses db.c and chunks.c, and nothing calls it.
 *
 * Recovery: this system's libsqlite3 (3.40) has no recovery extension API,
 * so we walk kvchat's three data tables ourselves. A scan in rowid order
 * copies rows until SQLite reports damage; from there each rowid is looked
 * up on its own (a lookup descends the b-tree afresh, so a broken leaf
 * costs only the rows on it), and the scan resumes after the next row that
 * reads. The copy goes into a fresh kvchat database made by sess_open, so
 * it has the current schema whatever the damaged one had.
 */
#include "store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* After this many rowids in a row that hold nothing, the table is taken to end. */
#define RECOVER_MAX_GAP 4096

static void
fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY);

	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

/* The folder of path, for fsyncing a rename into it. */
static void
fsync_parent(const char *path)
{
	char dir[4096];

	if (kvc_dir_of(path, dir, sizeof dir) == KVC_OK)
		fsync_path(dir);
}

/* Copies st's database into the new file tmp with the backup API; standalone afterwards. */
static int
backup_into(struct sess_store *st, const char *tmp, const char *dest, char *err,
    size_t errlen)
{
	sqlite3 *d = NULL;
	sqlite3_backup *b;
	int rc;

	rc = sqlite3_open_v2(tmp, &d, SQLITE_OPEN_READWRITE, NULL);
	if (rc == SQLITE_OK) {
		b = sqlite3_backup_init(d, "main", st->db, "main");
		if (b == NULL) {
			rc = sqlite3_errcode(d);
		} else {
			/* All pages in one step: one read transaction, so one snapshot. */
			while ((rc = sqlite3_backup_step(b, -1)) == SQLITE_OK)
				;
			if (rc == SQLITE_DONE)
				rc = SQLITE_OK;
			if (sqlite3_backup_finish(b) != SQLITE_OK && rc == SQLITE_OK)
				rc = sqlite3_errcode(d);
		}
	}
	/* The copy says WAL like its source: make it one file that needs no -wal. */
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(d, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		kvc_err(err, errlen, "%s: cannot back up to %s: %s", st->path, dest,
		    d ? sqlite3_errmsg(d) : sqlite3_errstr(rc));
	if (sqlite3_close(d) != SQLITE_OK && rc == SQLITE_OK) {
		kvc_err(err, errlen, "%s: cannot back up to %s: closing the copy failed",
		    st->path, dest);
		rc = SQLITE_ERROR;
	}
	return rc == SQLITE_OK ? KVC_OK : KVC_EIO;
}

int
sess_backup(struct sess_store *st, const char *dest, bool force, char *err, size_t errlen)
{
	struct stat sb;
	char *tmp;
	int fd, ret = KVC_OK;

	if (dest == NULL || *dest == '\0') {
		kvc_err(err, errlen, "no backup file given");
		return KVC_EINVAL;
	}
	if (!force && lstat(dest, &sb) == 0) {
		kvc_err(err, errlen, "%s already exists; --force replaces it", dest);
		return KVC_EINVAL;
	}
	tmp = malloc(strlen(dest) + 8);
	if (tmp == NULL)
		return KVC_ENOMEM;
	/* mkstemp makes it 0600 whatever the umask: conversations are private. */
	sprintf(tmp, "%s.XXXXXX", dest);
	fd = mkstemp(tmp);
	if (fd < 0) {
		kvc_err(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
		free(tmp);
		return KVC_EIO;
	}
	close(fd);
	ret = backup_into(st, tmp, dest, err, errlen);
	if (ret == KVC_OK) {
		fsync_path(tmp);
		/* link() fails if dest appeared meanwhile: never overwrite without force. */
		if (force ? rename(tmp, dest) != 0 : link(tmp, dest) != 0) {
			kvc_err(err, errlen, "cannot create %s: %s%s", dest, strerror(errno),
			    errno == EEXIST ? " (--force replaces it)" : "");
			ret = errno == EEXIST ? KVC_EINVAL : KVC_EIO;
		}
		fsync_parent(dest);
	}
	if (ret != KVC_OK || !force)
		unlink(tmp);
	free(tmp);
	return ret;
}

/* ---- recover ---- */

struct table_copy {
	const char *table;
	const char *columns;	/* read from the damaged file, written as they are */
	int n_cols;
	int *count;		/* in the stats */
};

/* Binds column i of row s (from the damaged file) as parameter i + 1 of ins. */
static void
bind_row(sqlite3_stmt *ins, sqlite3_stmt *s, int n)
{
	for (int i = 0; i < n; i++)
		sqlite3_bind_value(ins, i + 1, sqlite3_column_value(s, i));
}

/* A table being copied: its range scan, its lookup by rowid, and the insert. */
struct walker {
	sqlite3_stmt *scan, *one, *ins;
	const struct table_copy *t;
	struct sess_recover_stats *stats;
	sqlite3_stmt *placeholder;	/* messages: makes the row of a lost conversation */
};

/*
 * A message whose conversation's row is lost (its page destroyed) is still
 * what was said: it goes under a conversation made for it, with that id,
 * titled "recovered conversation ID" (the man page's promise). Its model,
 * template and settings are unknown: empty, as a resume then takes the
 * model it is given and re-tokenizes when it is another (conv.c).
 */
static bool
make_placeholder(struct walker *w, int64_t conv)
{
	int rc;

	sqlite3_bind_int64(w->placeholder, 1, conv);
	sqlite3_bind_int64(w->placeholder, 2, sess_time());
	rc = sqlite3_step(w->placeholder);
	sqlite3_reset(w->placeholder);
	if (rc != SQLITE_DONE || sqlite3_changes(sqlite3_db_handle(w->placeholder)) != 1)
		return false;
	w->stats->placeholders++;
	w->stats->convs++;
	return true;
}

/*
 * One row to the output. A message the output refuses for want of its
 * conversation gets a placeholder conversation and is inserted again; any
 * other refused row is lost.
 */
static void
put_row(struct walker *w, sqlite3_stmt *s)
{
	int rc;

	bind_row(w->ins, s, w->t->n_cols);
	rc = sqlite3_step(w->ins);
	if (rc == SQLITE_CONSTRAINT && w->placeholder != NULL &&
	    sqlite3_column_type(s, 1) == SQLITE_INTEGER &&
	    make_placeholder(w, sqlite3_column_int64(s, 1))) {
		sqlite3_reset(w->ins);
		rc = sqlite3_step(w->ins);
	}
	if (rc == SQLITE_DONE)
		(*w->t->count)++;
	else
		w->stats->bad_rows++;
	sqlite3_reset(w->ins);
	sqlite3_clear_bindings(w->ins);
}

/*
 * Scans from rowid `from` while rows read; returns the last rowid read and
 * sets *damaged if the scan stopped on damage rather than at the end.
 */
static int64_t
scan_from(struct walker *w, int64_t from, bool *damaged)
{
	int64_t last = from - 1;
	int rc;

	sqlite3_bind_int64(w->scan, 1, from);
	while ((rc = sqlite3_step(w->scan)) == SQLITE_ROW) {
		last = sqlite3_column_int64(w->scan, w->t->n_cols);
		put_row(w, w->scan);
	}
	*damaged = rc != SQLITE_DONE;
	sqlite3_reset(w->scan);
	return last;
}

/*
 * The largest rowid, when the b-tree's right edge still reads (SQLite finds
 * it by descending that edge only); INT64_MAX when not.
 */
static int64_t
max_rowid(sqlite3 *in, const char *table)
{
	char sql[128];
	sqlite3_stmt *s;
	int64_t m = INT64_MAX;

	snprintf(sql, sizeof sql, "SELECT max(rowid) FROM %s", table);
	if (sqlite3_prepare_v2(in, sql, -1, &s, NULL) != SQLITE_OK)
		return m;
	if (sqlite3_step(s) == SQLITE_ROW)
		m = sqlite3_column_type(s, 0) == SQLITE_NULL ? 0 : sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return m;
}

static void
walk_table(struct walker *w, int64_t last)
{
	bool damaged;
	int64_t r = scan_from(w, INT64_MIN + 1, &damaged), gap = 0, errs = 0;

	/*
	 * r: the last good rowid; look at the following ones one by one, up to
	 * the last rowid, or RECOVER_MAX_GAP rowids past the last that read
	 * when the last is unknown. A lookup that fails may be a lost row or
	 * no row at all: they count as lost only when a later row reads.
	 */
	while (damaged && r < last && gap < RECOVER_MAX_GAP) {
		int rc;

		r++;
		sqlite3_bind_int64(w->one, 1, r);
		rc = sqlite3_step(w->one);
		if (rc == SQLITE_ROW) {
			put_row(w, w->one);
			sqlite3_reset(w->one);
			w->stats->bad_rows += (int)errs;
			gap = errs = 0;
			r = scan_from(w, r + 1, &damaged);
			continue;
		}
		sqlite3_reset(w->one);
		gap++;
		errs += rc != SQLITE_DONE;
	}
}

static int
copy_table(sqlite3 *in, struct sess_store *out, const struct table_copy *t,
    struct sess_recover_stats *stats)
{
	struct walker w = { NULL, NULL, NULL, t, stats, NULL };
	char sql[1024], params[128] = "";
	int ok;

	for (int i = 0; i < t->n_cols; i++)
		strcat(params, i ? ",?" : "?");
	snprintf(sql, sizeof sql, "SELECT %s, rowid FROM %s WHERE rowid >= ?1 ORDER BY rowid",
	    t->columns, t->table);
	ok = sqlite3_prepare_v2(in, sql, -1, &w.scan, NULL) == SQLITE_OK;
	snprintf(sql, sizeof sql, "SELECT %s, rowid FROM %s WHERE rowid = ?1", t->columns,
	    t->table);
	ok = ok && sqlite3_prepare_v2(in, sql, -1, &w.one, NULL) == SQLITE_OK;
	snprintf(sql, sizeof sql, "INSERT OR IGNORE INTO %s (%s) VALUES (%s)", t->table,
	    t->columns, params);
	ok = ok && sqlite3_prepare_v2(out->db, sql, -1, &w.ins, NULL) == SQLITE_OK;
	/* conv_id is the second column of messages (recover_into's list) */
	if (ok && strcmp(t->table, "messages") == 0)
		ok = sqlite3_prepare_v2(out->db, "INSERT OR IGNORE INTO conversations (id, title, "
		    "model_fp, template, settings, created, updated, touched) VALUES (?1, "
		    "'recovered conversation ' || ?1, '', '', '', ?2, ?2, "
		    "(SELECT coalesce(max(touched), 0) + 1 FROM conversations))", -1,
		    &w.placeholder, NULL) == SQLITE_OK;
	if (ok)
		walk_table(&w, max_rowid(in, t->table));
	else
		stats->bad_tables++;
	sqlite3_finalize(w.scan);
	sqlite3_finalize(w.one);
	sqlite3_finalize(w.ins);
	sqlite3_finalize(w.placeholder);
	return KVC_OK;
}

/*
 * Chunks are kept only where they still describe the stored stream: every
 * message from seq 0 on is there, and the chunks read back whole.
 */
static int
drop_bad_chunks(struct sess_store *out, struct sess_recover_stats *stats, char *err,
    size_t errlen)
{
	static const char what[] = "cannot check the recovered snapshots";
	sqlite3_stmt *s;
	char e2[256];
	int ret;

	ret = sess_prepare(out, &s, "SELECT c.id, c.title, (SELECT count(*) FROM messages m "
	    "WHERE m.conv_id = c.id), (SELECT coalesce(max(seq), -1) FROM messages m "
	    "WHERE m.conv_id = c.id) FROM conversations c", what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	while (sqlite3_step(s) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(s, 0);
		const char *title = (const char *)sqlite3_column_text(s, 1);
		int64_t n = sqlite3_column_int64(s, 2);
		bool whole = n > 0 && n == sqlite3_column_int64(s, 3) + 1;

		if (!whole || sess_chunks_verify(out, id, title ? title : "", what, e2,
		    sizeof e2) != KVC_OK) {
			int before = sqlite3_total_changes(out->db);

			(void)sess_exec_ids(out, "DELETE FROM kv_chunks WHERE conv_id = ?1", id, 0,
			    what, e2, sizeof e2);
			stats->chunks -= sqlite3_total_changes(out->db) - before;
		}
	}
	sqlite3_finalize(s);
	return KVC_OK;
}

static int
recover_into(sqlite3 *in, struct sess_store *out, struct sess_recover_stats *stats,
    char *err, size_t errlen)
{
	sqlite3_stmt *probe = NULL;
	/* a reply's reasoning column, when the damaged file is of version 5 or later */
	bool reasoning = sqlite3_prepare_v2(in, "SELECT reasoning FROM messages LIMIT 0", -1, &probe,
	    NULL) == SQLITE_OK;

	sqlite3_finalize(probe);
	const struct table_copy tables[] = {
		{ "conversations", "id, title, model_fp, template, system, settings, created, "
		    "updated, touched, window", 10, &stats->convs },
		{ "messages", reasoning ? "id, conv_id, seq, role, text, tokens, interrupted, ttft_ms, "
		    "prefill_tokens, reused_tokens, prefill_tps, gen_tokens, decode_tps, created, "
		    "reasoning" : "id, conv_id, seq, role, text, tokens, interrupted, ttft_ms, "
		    "prefill_tokens, reused_tokens, prefill_tps, gen_tokens, decode_tps, created",
		    reasoning ? 15 : 14, &stats->msgs },
		{ "kv_chunks", "id, conv_id, pos0, pos1, part, n_parts, kv_type, model_fp, len, "
		    "checksum, data, window", 12, &stats->chunks },
	};
	static const char what[] = "cannot write the recovered database";
	int ret;

	/* One read transaction on the damaged file: one snapshot, one lock. */
	sqlite3_exec(in, "BEGIN", NULL, NULL, NULL);
	ret = sess_tx_begin(out, what, err, errlen);
	for (size_t i = 0; ret == KVC_OK && i < sizeof tables / sizeof tables[0]; i++)
		ret = copy_table(in, out, &tables[i], stats);
	sqlite3_exec(in, "COMMIT", NULL, NULL, NULL);
	if (ret == KVC_OK)
		ret = drop_bad_chunks(out, stats, err, errlen);
	return sess_tx_end(out, ret, what, err, errlen);
}

int
sess_recover(const char *in, const char *out, struct sess_recover_stats *stats,
    char *err, size_t errlen)
{
	struct sess_store *o = NULL;
	struct stat sb;
	sqlite3 *db = NULL;
	int ret;

	memset(stats, 0, sizeof *stats);
	if (stat(in, &sb) != 0) {
		kvc_err(err, errlen, "%s: %s", in, strerror(errno));
		return KVC_ENOTFOUND;
	}
	if (lstat(out, &sb) == 0) {
		kvc_err(err, errlen, "%s already exists; recover writes a new database", out);
		return KVC_EINVAL;
	}
	/* Read-only: the damaged file is never written. */
	if (sqlite3_open_v2(in, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		kvc_err(err, errlen, "%s: cannot open: %s", in, sqlite3_errmsg(db));
		sqlite3_close(db);
		return KVC_EIO;
	}
	/*
	 * A damaged file often fails SQLite's checks of the schema as a whole
	 * (a root page past the end of a truncated file): with writable_schema
	 * those are not errors, and each table stands or falls alone.
	 */
	sqlite3_exec(db, "PRAGMA writable_schema = ON", NULL, NULL, NULL);
	ret = sess_open(&o, out, err, errlen);
	if (ret == KVC_OK)
		ret = recover_into(db, o, stats, err, errlen);
	if (ret == KVC_OK && stats->convs == 0 && stats->bad_tables > 0) {
		kvc_err(err, errlen, "%s: nothing could be read (not a kvchat database, or its "
		    "first page is lost)", in);
		ret = KVC_ECORRUPT;
	}
	sess_close(o);
	sqlite3_close(db);
	if (ret != KVC_OK && o != NULL)
		unlink(out);
	return ret;
}
