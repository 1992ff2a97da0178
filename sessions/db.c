/*
 * db.c: the bottom of the sessions module. Opening the database, its schema
 * and migrations, freeing the handle, and what every other file of the
 * module shares: error reporting, prepared statements, write transactions
 * and the lookup of a conversation's title (each layer above names the
 * conversation in its messages and must first know that it exists).
 * It calls only schema.c (the migration steps) and busy.c (the busy
 * handler that names who holds the write lock).
 *
 * Durability: WAL with synchronous=FULL. WAL alone already makes a commit
 * survive a SIGKILL of the process (the frames are in the WAL file before
 * COMMIT returns); FULL adds one fsync per commit so it also survives an OS
 * crash or power loss. A turn takes seconds to generate, an fsync
 * milliseconds, so the user's words are worth it; but the user's message,
 * written before its prompt is computed, would put those milliseconds
 * (four syncs with the checkpoint) into the time to first token, so it is
 * committed with synchronous=OFF and no checkpoint (sess_user_commit): it
 * survives a SIGKILL at once, and an OS crash once the reply's commit,
 * seconds later, syncs the WAL it shares. Every commit is then
 * checkpointed (PASSIVE) into the database file, and the WAL truncated at
 * close: sessions.db copied alone, or a lost -wal, still holds every
 * acknowledged turn. A write waiting for another process's transaction
 * names the holder (busy.c). A database we cannot write (read-only file or
 * mount, full disk) may be opened read-only (SESS_OPEN_FALLBACK_RO).
 *
 * The schema is documented, and built by its migration steps, in schema.c.
 */
#include "store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* "kvc1": marks the file as ours (PRAGMA application_id). */
#define SESS_APPLICATION_ID 0x6b766331

#define SESS_BUSY_MS 5000	/* switching to WAL (enable_wal) */
#define SESS_WAIT_LIMIT_MS 30000	/* a write waiting for another process's */
#define SESS_PART_MAX_DEFAULT ((size_t)64 << 20)
#define SESS_PART_MAX_LIMIT ((size_t)256 << 20)

int64_t
sess_time(void)
{
	return (int64_t)time(NULL);
}

int
sess_db_fail(struct sess_store *st, int rc, const char *what, char *err, size_t errlen)
{
	const char *why = st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc);
	const char *extra = "";
	int code = KVC_EIO;
	char sys[160] = "", busy[600];

	switch (rc & 0xff) {
	case SQLITE_BUSY:
		sess_busy_describe(st, st->busy_who, sizeof st->busy_who);
		snprintf(busy, sizeof busy, "database is locked by %s; gave up after %d s "
		    "(if that process is stopped, resume it with kill -CONT or end it)",
		    st->busy_who, (st->wait_limit_ms + 999) / 1000);
		why = busy;
		code = KVC_EBUSY;
		break;
	case SQLITE_LOCKED:
		why = "database is locked by another process";
		code = KVC_EBUSY;
		break;
	case SQLITE_FULL:
		why = "database or disk is full";
		extra = "; nothing of this operation was saved, earlier data is intact";
		break;
	case SQLITE_NOTADB:
		why = "not a SQLite database (file is not a database)";
		code = KVC_EFORMAT;
		break;
	case SQLITE_CORRUPT:
		why = "database file is corrupted (database disk image is malformed); "
		    "'kvchat recover' copies what can still be read into a new database";
		code = KVC_ECORRUPT;
		break;
	case SQLITE_READONLY:
		why = "database is read-only";
		break;
	case SQLITE_NOMEM:
		why = "out of memory";
		code = KVC_ENOMEM;
		break;
	case SQLITE_CONSTRAINT:
		code = KVC_EINVAL;
		break;
	case SQLITE_IOERR:
	case SQLITE_CANTOPEN:
	case SQLITE_PERM:
		if (st->db && sqlite3_system_errno(st->db) != 0)
			snprintf(sys, sizeof sys, " (%s)", strerror(sqlite3_system_errno(st->db)));
		break;
	}
	kvc_err(err, errlen, "%s: %s: %s%s%s", st->path, what, why, sys, extra);
	return code;
}

int
sess_prepare(struct sess_store *st, sqlite3_stmt **out, const char *sql,
    const char *what, char *err, size_t errlen)
{
	int rc = sqlite3_prepare_v2(st->db, sql, -1, out, NULL);

	if (rc != SQLITE_OK) {
		*out = NULL;
		return sess_db_fail(st, rc, what, err, errlen);
	}
	return KVC_OK;
}

int
sess_exec_ids(struct sess_store *st, const char *sql, int64_t a1, int64_t a2,
    const char *what, char *err, size_t errlen)
{
	sqlite3_stmt *s;
	int rc, ret;

	ret = sess_prepare(st, &s, sql, what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	sqlite3_bind_int64(s, 1, a1);
	if (sqlite3_bind_parameter_count(s) > 1)
		sqlite3_bind_int64(s, 2, a2);
	rc = sqlite3_step(s);
	if (rc != SQLITE_DONE)
		ret = sess_db_fail(st, rc, what, err, errlen);
	sqlite3_finalize(s);
	return ret;
}

int
sess_tx_begin(struct sess_store *st, const char *what, char *err, size_t errlen)
{
	int rc;

	if (st->readonly) {
		kvc_err(err, errlen, "%s: %s: the database is open read-only (%s); nothing "
		    "can be saved", st->path, what, st->ro_why);
		return KVC_EIO;
	}
	/* sess_busy_handler waits up to wait_limit_ms, naming the holder. */
	rc = sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return sess_db_fail(st, rc, what, err, errlen);
	return KVC_OK;
}

int
sess_tx_commit(struct sess_store *st, const char *what, char *err, size_t errlen)
{
	int rc = sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);

	if (rc != SQLITE_OK) {
		int ret = sess_db_fail(st, rc, what, err, errlen);

		sess_tx_rollback(st);
		return ret;
	}
	/*
	 * Copy the commit into the database file now, not at some later
	 * checkpoint: a user who copies or backs up sessions.db alone, or loses
	 * its -wal, still has every acknowledged turn. Not for a commit whose
	 * sync waits for the next one (sess_user_commit): that one does it.
	 */
	if (!st->sync_later)
		sess_checkpoint(st, SQLITE_CHECKPOINT_PASSIVE);
	return KVC_OK;
}

void
sess_checkpoint(struct sess_store *st, int mode)
{
	if (st->db == NULL || st->readonly)
		return;
	/* Never wait here: another process's readers or writer finish it later. */
	sqlite3_busy_handler(st->db, NULL, NULL);
	(void)sqlite3_wal_checkpoint_v2(st->db, NULL, mode, NULL, NULL);
	sqlite3_busy_handler(st->db, sess_busy_handler, st);
}

void
sess_tx_rollback(struct sess_store *st)
{
	/* SQLITE_FULL and friends may already have rolled back. */
	if (!sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

int
sess_tx_end(struct sess_store *st, int ret, const char *what, char *err, size_t errlen)
{
	if (ret != KVC_OK) {
		sess_tx_rollback(st);
		return ret;
	}
	return sess_tx_commit(st, what, err, errlen);
}

int
sess_step_conv(struct sess_store *st, sqlite3_stmt *s, int64_t id, const char *what,
    char *err, size_t errlen)
{
	int rc = sqlite3_step(s);

	if (rc == SQLITE_ROW)
		return KVC_OK;
	if (rc == SQLITE_DONE) {
		kvc_err(err, errlen, "no conversation with id %lld", (long long)id);
		return KVC_ENOTFOUND;
	}
	return sess_db_fail(st, rc, what, err, errlen);
}

int
sess_conv_title(struct sess_store *st, int64_t id, char **title, const char *what,
    char *err, size_t errlen)
{
	sqlite3_stmt *s;
	int ret;

	*title = NULL;
	ret = sess_prepare(st, &s, "SELECT title FROM conversations WHERE id = ?1",
	    what, err, errlen);
	if (ret != KVC_OK)
		return ret;
	sqlite3_bind_int64(s, 1, id);
	ret = sess_step_conv(st, s, id, what, err, errlen);
	if (ret == KVC_OK) {
		const unsigned char *t = sqlite3_column_text(s, 0);

		*title = strdup(t ? (const char *)t : "");
		if (*title == NULL) {
			kvc_err(err, errlen, "%s: %s: out of memory", st->path, what);
			ret = KVC_ENOMEM;
		}
	}
	sqlite3_finalize(s);
	return ret;
}

/* The next migration step runs only on a schema we know to be ours. */
static int
check_identity(struct sess_store *st, int64_t version, int64_t app_id, int64_t n_objects,
    char *err, size_t errlen)
{
	if (app_id != 0 && app_id != SESS_APPLICATION_ID) {
		kvc_err(err, errlen, "%s: not a kvchat database (application_id 0x%08llx)",
		    st->path, (unsigned long long)app_id);
		return KVC_EFORMAT;
	}
	if (version > SESS_SCHEMA_VERSION) {
		kvc_err(err, errlen,
		    "%s: database schema version %lld is newer than this kvchat knows (%d); "
		    "upgrade kvchat or choose another file with --db",
		    st->path, (long long)version, SESS_SCHEMA_VERSION);
		return KVC_EUNSUPPORTED;
	}
	if ((version == 0 && n_objects > 0) || (version > 0 && app_id == 0)) {
		kvc_err(err, errlen, "%s: not a kvchat database (it holds other tables)", st->path);
		return KVC_EFORMAT;
	}
	return KVC_OK;
}

/* One statement, so one snapshot: another process may be migrating right now. */
static int
read_identity(struct sess_store *st, int64_t *version, int64_t *app_id, int64_t *n_objects,
    const char *what, char *err, size_t errlen)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(st->db, "SELECT "
	    "(SELECT user_version FROM pragma_user_version), "
	    "(SELECT application_id FROM pragma_application_id), "
	    "(SELECT count(*) FROM sqlite_master)", -1, &s, NULL);

	if (rc != SQLITE_OK)
		return sess_db_fail(st, rc, what, err, errlen);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*version = sqlite3_column_int64(s, 0);
		*app_id = sqlite3_column_int64(s, 1);
		*n_objects = sqlite3_column_int64(s, 2);
		rc = SQLITE_OK;
	}
	if (rc != SQLITE_OK)
		rc = sess_db_fail(st, rc, what, err, errlen);
	sqlite3_finalize(s);
	return rc;
}

static int
migrate(struct sess_store *st, char *err, size_t errlen)
{
	const int n_steps = sess_n_migrations;
	int64_t version, app_id, n_objects;
	char sql[64];
	int ret, rc;

	ret = sess_tx_begin(st, "cannot upgrade the schema", err, errlen);
	if (ret != KVC_OK)
		return ret;
	/* Another process may have migrated while we waited for the lock. */
	ret = read_identity(st, &version, &app_id, &n_objects, "cannot upgrade the schema",
	    err, errlen);
	if (ret == KVC_OK)
		ret = check_identity(st, version, app_id, n_objects, err, errlen);
	for (; ret == KVC_OK && version < n_steps; version++) {
		rc = sqlite3_exec(st->db, sess_migrations[version], NULL, NULL, NULL);
		if (rc == SQLITE_OK) {
			snprintf(sql, sizeof sql, "PRAGMA user_version = %lld", (long long)version + 1);
			rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
		}
		if (rc == SQLITE_OK && version == 0) {
			snprintf(sql, sizeof sql, "PRAGMA application_id = %d", SESS_APPLICATION_ID);
			rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
		}
		if (rc != SQLITE_OK) {
			char what[64];

			snprintf(what, sizeof what, "cannot upgrade the schema to version %lld",
			    (long long)version + 1);
			ret = sess_db_fail(st, rc, what, err, errlen);
		}
	}
	return sess_tx_end(st, ret, "cannot upgrade the schema", err, errlen);
}

/*
 * Switching to WAL needs a moment alone with the file, and SQLite answers
 * SQLITE_BUSY at once (no busy handler) when another connection is opening
 * it too: retry for up to SESS_BUSY_MS.
 */
static int
enable_wal(struct sess_store *st, char *err, size_t errlen)
{
	sqlite3_stmt *s;
	int rc = SQLITE_BUSY, i;

	for (i = 0; i < SESS_BUSY_MS / 10 && (rc & 0xff) == SQLITE_BUSY; i++) {
		if (i > 0)
			sqlite3_sleep(10);
		rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1, &s, NULL);
		if (rc != SQLITE_OK)
			break;
		rc = sqlite3_step(s);
		/* A filesystem without shared memory keeps its mode; still correct. */
		if (rc == SQLITE_ROW)
			rc = SQLITE_OK;
		sqlite3_finalize(s);
	}
	if (rc != SQLITE_OK)
		return sess_db_fail(st, rc, "cannot enable WAL", err, errlen);
	return KVC_OK;
}

/* What sess_open saw of the file before SQLite touched it. */
struct pre_open {
	bool exists;
	off_t size;
	bool wal;		/* PATH-wal exists */
};

/*
 * A file that already held bytes yet has none of our tables, with no -wal
 * beside it, is most likely a copy of sessions.db made without its -wal
 * (a WAL database keeps its first transactions, the schema included, in
 * the -wal until a checkpoint). Initialising it would hide the loss; say so.
 * kvchat itself never leaves one (create_atomic); a kvchat from before that,
 * still creating the file in place, holds the write lock, so we look again
 * after it.
 */
static int
refuse_schemaless(struct sess_store *st, const struct pre_open *pre, char *err, size_t errlen)
{
	kvc_err(err, errlen, "%s: cannot open: the file is a SQLite database of %lld bytes "
	    "without kvchat's tables, and has no -wal file beside it. If it is a copy of "
	    "sessions.db made without its -wal file, the conversations are in that -wal "
	    "file ('kvchat backup FILE' makes a copy that needs none). kvchat will not "
	    "overwrite it: choose another file with --db, or delete it to start afresh",
	    st->path, (long long)pre->size);
	return KVC_EFORMAT;
}

static int
schema_check_ro(struct sess_store *st, int64_t version, int64_t n_objects, char *err,
    size_t errlen)
{
	if (version == 0 && n_objects == 0) {
		kvc_err(err, errlen, "%s: cannot open read-only: no kvchat database there", st->path);
		return KVC_ENOTFOUND;
	}
	if (version < 2) {
		kvc_err(err, errlen, "%s: cannot open read-only: schema version %lld needs an "
		    "upgrade, which a read-only database cannot have", st->path, (long long)version);
		return KVC_EUNSUPPORTED;
	}
	return KVC_OK;
}

static int
schema_setup(struct sess_store *st, const struct pre_open *pre, char *err, size_t errlen)
{
	static const char *const pragmas[] = {
		"PRAGMA foreign_keys = ON",
		"PRAGMA synchronous = FULL",
		/* Big chunks grow the WAL; give the space back after checkpoints. */
		"PRAGMA journal_size_limit = 67108864",
	};
	int64_t version, app_id, n_objects;
	size_t i;
	int rc, ret;

	sqlite3_busy_timeout(st->db, SESS_BUSY_MS);
	/* The first read of the header: a foreign file fails here, untouched. */
	ret = read_identity(st, &version, &app_id, &n_objects, "cannot open", err, errlen);
	if (ret == KVC_OK)
		ret = check_identity(st, version, app_id, n_objects, err, errlen);
	if (ret == KVC_OK && st->readonly)
		ret = schema_check_ro(st, version, n_objects, err, errlen);
	if (ret != KVC_OK || st->readonly)
		goto out;
	if (version == 0 && n_objects == 0 && pre->size > 0 && !pre->wal) {
		/* Perhaps another kvchat creating it right now: let it finish. */
		sqlite3_sleep(200);
		ret = read_identity(st, &version, &app_id, &n_objects, "cannot open", err, errlen);
		if (ret == KVC_OK && version == 0 && n_objects == 0)
			ret = refuse_schemaless(st, pre, err, errlen);
		if (ret != KVC_OK)
			goto out;
	}
	if (version == 0 && n_objects == 0) {
		/* Only possible before the first table: lets deletes give space back. */
		sqlite3_exec(st->db, "PRAGMA auto_vacuum = INCREMENTAL", NULL, NULL, NULL);
	}
	ret = enable_wal(st, err, errlen);
	sqlite3_busy_handler(st->db, sess_busy_handler, st);
	/* Migrations rebuild tables: no ON DELETE CASCADE may fire meanwhile. */
	sqlite3_exec(st->db, "PRAGMA foreign_keys = OFF", NULL, NULL, NULL);
	if (ret == KVC_OK && version != SESS_SCHEMA_VERSION)
		ret = migrate(st, err, errlen);
	for (i = 0; ret == KVC_OK && i < sizeof pragmas / sizeof pragmas[0]; i++) {
		rc = sqlite3_exec(st->db, pragmas[i], NULL, NULL, NULL);
		if (rc != SQLITE_OK)
			ret = sess_db_fail(st, rc, "cannot open", err, errlen);
	}
out:
	sqlite3_busy_handler(st->db, sess_busy_handler, st);
	return ret;
}

/*
 * The folder of path, created 0700 as needed, and refused unless it is the
 * user's own (kvc_dir_check). The file itself is made by create_atomic.
 */
static int
make_private_dir(const char *path, char *err, size_t errlen)
{
	char dir[4096], why[512];
	int rc;

	if (kvc_dir_of(path, dir, sizeof dir) != KVC_OK) {
		kvc_err(err, errlen, "%s: cannot open: path too long", path);
		return KVC_ERANGE;
	}
	rc = kvc_mkdirs_private(dir, why, sizeof why);
	if (rc < 0) {
		kvc_err(err, errlen, "%s: cannot open: %s", path, why);
		return rc;
	}
	return KVC_OK;
}

/* fsync of a file or folder by name; 0 or -1 (errno). */
static int
sync_path(const char *path, bool dir)
{
	int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDWR) | O_CLOEXEC), rc;

	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

static void
unlink_db_files(const char *name)
{
	char side[4200];

	(void)unlink(name);
	snprintf(side, sizeof side, "%s-wal", name);
	(void)unlink(side);
	snprintf(side, sizeof side, "%s-shm", name);
	(void)unlink(side);
}

static int open_conn(struct sess_store *st, const char *name, int oflags,
    const struct pre_open *pre, char *err, size_t errlen);

/*
 * A new database appears at path whole or not at all. Created in place, a
 * kill between the file's creation and the schema's commit left a file with
 * SQLite's header and no tables, which every later start must refuse (it is
 * also what a copy made without its -wal looks like: refuse_schemaless). So
 * it is built under a fresh name beside path (mkostemp: 0600, O_EXCL) with
 * its schema, closed (SQLite folds the -wal into the file and removes it),
 * fsynced, and given its name by link(2), which never replaces a file that
 * another kvchat created there meanwhile (that one is used), then the
 * folder is fsynced. A kill leaves nothing at path, or a complete empty
 * database; at most a stray PATH.XXXXXX beside it.
 */
static int
create_atomic(const char *path, char *err, size_t errlen)
{
	struct sess_store tmp = {0};
	struct pre_open pre = {0};
	char *name = NULL, dir[4096];
	int fd, ret;

	fd = kvc_file_tmp_beside(path, KVC_FILE_MODE, &name, err, errlen);
	if (fd < 0)
		return fd;
	close(fd);
	tmp.path = name;
	tmp.part_max = SESS_PART_MAX_DEFAULT;
	tmp.wait_limit_ms = SESS_WAIT_LIMIT_MS;
	ret = open_conn(&tmp, name, SQLITE_OPEN_READWRITE, &pre, err, errlen);
	if (ret == KVC_OK) {
		/* The last connection's close checkpoints and removes the -wal. */
		if (sqlite3_close(tmp.db) != SQLITE_OK || sync_path(name, false) != 0) {
			kvc_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
			ret = KVC_EIO;
		}
		tmp.db = NULL;
	}
	if (ret == KVC_OK && link(name, path) != 0 && errno != EEXIST) {
		/* A filesystem without hard links: a rename, over nothing if we can. */
		if (access(path, F_OK) == 0 || rename(name, path) != 0) {
			kvc_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
			ret = KVC_EIO;
		}
	}
	unlink_db_files(name);
	if (ret == KVC_OK && kvc_dir_of(path, dir, sizeof dir) == KVC_OK)
		(void)sync_path(dir, true);
	free(name);
	return ret;
}

/*
 * A link at the database path. SQLite follows links, so a dangling one
 * (planted, or left over) would have it create the database wherever the
 * link points, in a folder nothing checked, with the umask's mode. A link
 * is therefore followed only to an existing regular file of the user's
 * own, in a folder kvc_dir_check accepts (the user made such a link);
 * anything else is refused, naming the link. *real is what to open: the
 * link's target, or path itself when it is no link (the caller frees it).
 */
static int
resolve_link(const char *path, char **real, char *err, size_t errlen)
{
	struct stat lsb, sb;
	char dir[4096], why[512];
	char *target;

	if (lstat(path, &lsb) != 0 || !S_ISLNK(lsb.st_mode)) {
		*real = strdup(path);
		goto out;
	}
	*real = NULL;
	target = realpath(path, NULL);
	if (target == NULL) {
		kvc_err(err, errlen, "%s: cannot open: it is a link to nothing (%s); kvchat "
		    "does not create its database through a link, which someone else may "
		    "have placed there: remove the link, or name the real file with --db",
		    path, strerror(errno));
		return KVC_EINVAL;
	}
	if (stat(target, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) {
		kvc_err(err, errlen, "%s: cannot open: it is a link to %s, which is not a "
		    "file of yours; remove the link, or name the real file with --db",
		    path, target);
		free(target);
		return KVC_EINVAL;
	}
	if (kvc_dir_of(target, dir, sizeof dir) != KVC_OK ||
	    kvc_dir_check(dir, why, sizeof why) != KVC_OK) {
		kvc_err(err, errlen, "%s: cannot open: it is a link to %s, in a folder kvchat "
		    "refuses: %s", path, target, why);
		free(target);
		return KVC_EINVAL;
	}
	*real = target;
out:
	if (*real == NULL) {
		kvc_err(err, errlen, "%s: cannot open: out of memory", path);
		return KVC_ENOMEM;
	}
	return KVC_OK;
}

/*
 * Why a database that failed to open for writing cannot be written: its
 * file or folder is not writable by us, the filesystem is read-only, or
 * the disk is full. NULL when none of these holds (a real error).
 */
static const char *
unwritable_reason(const char *path, char *buf, size_t n)
{
	char dir[4096];
	struct statvfs vfs;
	const char *r = NULL;

	if (kvc_dir_of(path, dir, sizeof dir) != KVC_OK)
		return NULL;
	if (statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_RDONLY))
		r = "the filesystem is mounted read-only";
	else if (access(path, W_OK) != 0)
		snprintf(buf, n, "the file is not writable: %s", strerror(errno)), r = buf;
	else if (access(dir, W_OK) != 0)
		snprintf(buf, n, "its folder is not writable, so no -wal file can be made: %s",
		    strerror(errno)), r = buf;
	else if (statvfs(path, &vfs) == 0 && vfs.f_bavail == 0)
		r = "the disk is full";
	return r;
}

/* One attempt: connection, then schema; on failure st->db is closed again. */
static int
open_conn(struct sess_store *st, const char *name, int oflags, const struct pre_open *pre,
    char *err, size_t errlen)
{
	int rc, ret;

	rc = sqlite3_open_v2(name, &st->db, oflags, NULL);
	if (rc != SQLITE_OK) {
		ret = sess_db_fail(st, rc, "cannot open", err, errlen);
	} else if (!st->readonly && sqlite3_db_readonly(st->db, "main") == 1) {
		/* SQLite quietly opens read-only what it may not write. */
		kvc_err(err, errlen, "%s: cannot open for writing (read-only file or mount)",
		    st->path);
		ret = KVC_EIO;
	} else {
		ret = schema_setup(st, pre, err, errlen);
	}
	if (ret != KVC_OK) {
		sqlite3_close(st->db);
		st->db = NULL;
	}
	return ret;
}

/*
 * Read-only: through the -wal and -shm when we may use them; otherwise
 * (a read-only folder without them, a full disk where -shm cannot be made)
 * the file alone as an immutable image. kvchat checkpoints after every turn
 * and at close, so the file alone lacks at most a write in progress.
 */
static int
open_ro(struct sess_store *st, const struct pre_open *pre, char *err, size_t errlen)
{
	char *uri;
	int ret;

	st->readonly = true;
	ret = open_conn(st, st->path, SQLITE_OPEN_READONLY, pre, err, errlen);
	if (ret == KVC_OK || ret == KVC_EFORMAT || ret == KVC_EUNSUPPORTED ||
	    ret == KVC_ENOTFOUND)
		return ret;
	uri = sqlite3_mprintf("file:%s?immutable=1", st->path);
	if (uri == NULL)
		return KVC_ENOMEM;
	ret = open_conn(st, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, pre, err, errlen);
	sqlite3_free(uri);
	return ret;
}

int
sess_open(struct sess_store **out, const char *path, char *err, size_t errlen)
{
	return sess_open_ex(out, path, 0, err, errlen);
}

/* sess_open_ex once path is known to be no link. */
static int
open_real(struct sess_store **out, const char *path, unsigned flags, char *err,
    size_t errlen)
{
	struct pre_open pre = {0};
	struct sess_store *st;
	struct stat sb;
	char walpath[4200], buf[200];
	const char *why;
	int ret;

	snprintf(walpath, sizeof walpath, "%s-wal", path);
	pre.exists = stat(path, &sb) == 0;
	pre.size = pre.exists ? sb.st_size : 0;
	pre.wal = access(walpath, F_OK) == 0;
	if (!pre.exists && (flags & (SESS_OPEN_READONLY | SESS_OPEN_EXISTING))) {
		kvc_err(err, errlen, "%s: cannot open: no such file", path);
		return KVC_ENOTFOUND;
	}
	if (!(flags & SESS_OPEN_READONLY)) {
		ret = make_private_dir(path, err, errlen);
		if (ret == KVC_OK && !pre.exists)
			ret = create_atomic(path, err, errlen);
		if (ret != KVC_OK)
			return ret;
	}
	st = calloc(1, sizeof *st);
	if (st == NULL || (st->path = strdup(path)) == NULL) {
		free(st);
		kvc_err(err, errlen, "%s: cannot open: out of memory", path);
		return KVC_ENOMEM;
	}
	st->part_max = SESS_PART_MAX_DEFAULT;
	st->flags = flags;
	/* kvchat never leaves an empty file (create_atomic): someone's truncation */
	st->was_empty = pre.exists && pre.size == 0 && !pre.wal;
	st->wait_limit_ms = SESS_WAIT_LIMIT_MS;
	if (flags & SESS_OPEN_READONLY) {
		snprintf(st->ro_why, sizeof st->ro_why, "as asked");
		ret = open_ro(st, &pre, err, errlen);
	} else {
		ret = open_conn(st, path, SQLITE_OPEN_READWRITE |
		    (flags & SESS_OPEN_EXISTING ? 0 : SQLITE_OPEN_CREATE), &pre, err, errlen);
		if (ret != KVC_OK && ret != KVC_EFORMAT && ret != KVC_EUNSUPPORTED &&
		    pre.exists && (flags & SESS_OPEN_FALLBACK_RO) &&
		    (why = unwritable_reason(path, buf, sizeof buf)) != NULL) {
			snprintf(st->ro_why, sizeof st->ro_why, "%s", why);
			ret = open_ro(st, &pre, err, errlen);
		}
	}
	if (ret != KVC_OK) {
		sess_db_free(st);
		return ret;
	}
	*out = st;
	return KVC_OK;
}

int
sess_open_ex(struct sess_store **out, const char *path, unsigned flags, char *err,
    size_t errlen)
{
	char *real;
	int ret;

	*out = NULL;
	if (path == NULL || *path == '\0') {
		kvc_err(err, errlen, "sessions database: cannot open: empty path");
		return KVC_EINVAL;
	}
	/* From here the path opened is no link. Its folder is private
	 * (kvc_dir_check), so no one else can put one there meanwhile. */
	ret = resolve_link(path, &real, err, errlen);
	if (ret != KVC_OK)
		return ret;
	ret = open_real(out, real, flags, err, errlen);
	free(real);
	return ret;
}

bool
sess_was_empty(const struct sess_store *st)
{
	return st->was_empty && !st->readonly;
}

bool
sess_readonly(const struct sess_store *st, const char **why)
{
	if (why)
		*why = st->ro_why;
	return st->readonly;
}

void
sess_set_wait_notice(struct sess_store *st, void (*fn)(void *arg, const char *msg), void *arg)
{
	st->wait_fn = fn;
	st->wait_arg = arg;
}

void
sess_set_wait_limit(struct sess_store *st, int ms)
{
	st->wait_limit_ms = ms < 0 ? 0 : ms;
}

void
sess_db_free(struct sess_store *st)
{
	if (st == NULL)
		return;
	free(st->locked);
	/* The file alone then holds everything, and the -wal is emptied. */
	sess_checkpoint(st, SQLITE_CHECKPOINT_TRUNCATE);
	if (st->db)
		sqlite3_close(st->db);
	free(st->path);
	free(st);
}

struct sqlite3 *
sess_sqlite(struct sess_store *st)
{
	return st->db;
}

void
sess_set_part_max(struct sess_store *st, size_t bytes)
{
	if (bytes < 1)
		bytes = 1;
	if (bytes > SESS_PART_MAX_LIMIT)
		bytes = SESS_PART_MAX_LIMIT;
	st->part_max = bytes;
}
