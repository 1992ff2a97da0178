/*
 * check.c: sess_check, the store's integrity check: SQLite's own page and
 * foreign-key checks, then every conversation's snapshot read back in full
 * (contiguous from position 0, no part missing, every checksum right). The
 * top of the module: it walks conversations (store.c) and their chunks
 * (chunks.c), and nothing in the module calls it.
 */
#include "store_int.h"

#include <string.h>

/* First row of a PRAGMA that answers "ok" or a list of problems. */
static int
pragma_ok(struct sess_store *st, const char *sql, bool want_ok, char *err, size_t errlen)
{
	static const char what[] = "integrity check";
	sqlite3_stmt *s;
	int rc, ret;

	ret = sess_prepare(st, &s, sql, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(s, 0);

		if (!want_ok || t == NULL || strcmp(t, "ok") != 0) {
			kvc_err(err, errlen, "%s: %s: %s: %s", st->path, what, sql,
			    t ? t : "(null)");
			ret = KVC_ECORRUPT;
		}
	} else if (rc != SQLITE_DONE) {
		ret = sess_db_fail(st, rc, what, err, errlen);
	} else if (want_ok) {
		kvc_err(err, errlen, "%s: %s: %s gave no answer", st->path, what, sql);
		ret = KVC_ECORRUPT;
	}
	sqlite3_finalize(s);
	return ret;
}

int
sess_check(struct sess_store *st, char *err, size_t errlen)
{
	struct sess_conv *v;
	int n, i, rc, ret;

	ret = pragma_ok(st, "PRAGMA integrity_check", true, err, errlen);
	if (ret == KVC_OK)
		ret = pragma_ok(st, "PRAGMA foreign_key_check", false, err, errlen);
	if (ret != KVC_OK)
		return ret;
	rc = sqlite3_exec(st->db, "BEGIN", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return sess_db_fail(st, rc, "integrity check", err, errlen);
	ret = sess_conv_list(st, &v, &n, err, errlen);
	for (i = 0; ret == KVC_OK && i < n; i++)
		ret = sess_chunks_verify(st, v[i].id, v[i].title, "integrity check", err, errlen);
	sess_conv_list_free(v, n);
	sess_tx_rollback(st);
	return ret;
}
