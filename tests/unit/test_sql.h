/*
 * test_sql.h: raw SQL on a database file through a connection of the test's
 * own, behind the store's back, for the sessions module's tests (which link
 * SQLite anyway).
 */
#ifndef KVC_TEST_SQL_H
#define KVC_TEST_SQL_H

#include <sqlite3.h>
#include <stdint.h>

/*
 * The first column of SQL's first row on a connection opened with FLAGS
 * (sqlite3_open_v2's), or -12345 when there is no row or no connection.
 */
static inline int64_t test_sql_int(const char *db_path, int flags, const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *s;
	int64_t v = -12345;

	if (sqlite3_open_v2(db_path, &db, flags, NULL) != SQLITE_OK) {
		sqlite3_close(db);
		return v;
	}
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK) {
		if (sqlite3_step(s) == SQLITE_ROW)
			v = sqlite3_column_int64(s, 0);
		sqlite3_finalize(s);
	}
	sqlite3_close(db);
	return v;
}

/*
 * sqlite3_exec's status for SQL on a read-write connection (the file is
 * created if missing) that waits up to BUSY_MS for a lock (0: fails at
 * once on a busy database); -1 when the file cannot be opened.
 */
static inline int test_sql_exec(const char *db_path, int busy_ms, const char *sql)
{
	sqlite3 *db;
	int rc;

	if (sqlite3_open(db_path, &db) != SQLITE_OK)
		return -1;
	sqlite3_busy_timeout(db, busy_ms);
	rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	sqlite3_close(db);
	return rc;
}

#endif
