/*
 * db.c: the bottom of the sessions module. Opening the database, its schema
 * and migrations, freeing the handle, and what every other file of the
 * module shares: error reporting, prepared statements, write transactions
 * and the lookup of a conversation's title (each layer above names the
 * conversation in its messages and must first know that it exists).
 * Nothing here calls another file of the module.
 *
 * Durability: WAL with synchronous=FULL. WAL alone already makes a commit
 * survive a SIGKILL of the process (the frames are in the WAL file before
 * COMMIT returns); FULL adds one fsync per commit so it also survives an OS
 * crash or power loss. A turn takes seconds to generate, an fsync
 * milliseconds, so the user's words are worth it.
 *
 * The schema (version SESS_SCHEMA_VERSION, in PRAGMA user_version; PRAGMA
 * application_id is "kvc1"; migrations[] below builds it). Times are unix
 * seconds. Deleting a conversation deletes its rows in every other table
 * (ON DELETE CASCADE).
 *
 * conversations: one row per saved conversation.
 *   id             its number; sess_conv_find takes it or the title
 *   title          its name; not unique, a lookup by title takes the most
 *                  recently touched
 *   model_fp       fingerprint of the engine (model) it was created with
 *   template       name of the chat template family its messages were
 *                  rendered with
 *   system         the system prompt, NULL if none
 *   settings       sampler settings as "name=value;..." text
 *   window         index (seq) of the first message the cached stream holds:
 *                  0, or the user message the context window starts at after
 *                  older exchanges were dropped from the cache (never from
 *                  this table); added in version 2, 0 before
 *   created        when it was created
 *   updated        when it was created or last changed by a turn, a rewind
 *                  or sess_conv_replace_system (renames and settings do not
 *                  count)
 *   touched        recency counter, set with updated to one more than the
 *                  highest so far: orders listings and title lookups, where
 *                  seconds would tie
 *
 * messages: what was said, in order, with the exact tokens.
 *   id             row number
 *   conv_id        the conversation it belongs to
 *   seq            its place in the conversation, from 0 (unique per conversation)
 *   role           0 system, 1 user, 2 assistant (enum sess_role)
 *   text           the text as shown
 *   tokens         the token ids this message added to the stream, each a
 *                  little-endian int32, so the stream is rebuilt without
 *                  re-tokenizing; the first message's also hold the
 *                  rendered system prompt
 *   interrupted    1 if the reply was cut short (stopped or failed mid-way)
 *   ttft_ms, prefill_tokens, reused_tokens, prefill_tps, gen_tokens,
 *   decode_tps     the turn's figures (struct sess_stats) on an assistant
 *                  reply: time to first token, positions computed and reused
 *                  from the cache, prompt speed, tokens generated, generation
 *                  speed; 0 on other messages
 *   created        when it was said
 *
 * kv_chunks: the KV-cache snapshot, in chunks. A chunk holds the cache
 * positions [pos0, pos1) that the turn added, as eng_seq_kv_save serialised
 * them; a chunk is stored as n_parts rows of at most part_max bytes, so no
 * row needs a giant BLOB. A conversation's chunks run from position 0
 * without gaps.
 *   id             row number (opened with incremental BLOB I/O by it)
 *   conv_id        the conversation it belongs to
 *   pos0, pos1     the chunk's cache positions [pos0, pos1), on every part
 *   part, n_parts  this row's index in the chunk (0..n_parts-1), and the
 *                  chunk's number of rows
 *   kv_type        the cache's element type, "f16" or "f32"
 *   model_fp       fingerprint of the engine that computed it; a snapshot is
 *                  only loaded into the same engine and cache type
 *   window         the conversation's window (above) when the chunk was
 *                  computed: a snapshot is only loaded over the stream of the
 *                  same window. Added in version 2, so it sits after data: for
 *                  a row written since, reading it follows data's overflow
 *                  chain, which the auto_vacuum pointer map makes cheap
 *   len            bytes of data in this row
 *   checksum       XXH64 (seed 0) of this row's data, as a signed 64-bit integer
 *   data           this row's slice of the chunk; the last column of version
 *                  1, so reading those never touches its pages
 *
 * locks: which process has a conversation open (lock.c).
 *   conv_id        the conversation (one holder at most)
 *   pid, host      the holding process and the machine it runs on
 *   boot_id        the kernel's boot id then ("" if unknown): a lock from
 *                  before a reboot is stale
 *   start_time     the process's start in clock ticks after boot (0 if
 *                  unknown): a reused pid is not the holder
 *   acquired       when it was taken
 */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* "kvc1": marks the file as ours (PRAGMA application_id). */
#define SESS_APPLICATION_ID 0x6b766331

#define SESS_BUSY_MS 5000
#define SESS_BEGIN_TRIES 6	/* x SESS_BUSY_MS before giving up */
#define SESS_PART_MAX_DEFAULT ((size_t)64 << 20)
#define SESS_PART_MAX_LIMIT ((size_t)256 << 20)

/*
 * migrations[v] takes the schema from version v to v + 1. Append only:
 * never edit a step once released; databases in the wild went through it.
 */
static const char *const migrations[] = {
	/* 0 -> 1: the initial schema. */
	"CREATE TABLE conversations (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  title TEXT NOT NULL,\n"
	"  model_fp TEXT NOT NULL,\n"
	"  template TEXT NOT NULL,\n"
	"  system TEXT,\n"
	"  settings TEXT NOT NULL,\n"
	"  created INTEGER NOT NULL,\n"	/* unix seconds */
	"  updated INTEGER NOT NULL,\n"
	/* Recency counter: seconds tie when turns come fast; this never does. */
	"  touched INTEGER NOT NULL\n"
	");\n"
	"CREATE INDEX conversations_title ON conversations(title, touched);\n"
	"CREATE INDEX conversations_touched ON conversations(touched);\n"
	"CREATE TABLE messages (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  conv_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,\n"
	"  seq INTEGER NOT NULL,\n"
	"  role INTEGER NOT NULL CHECK (role BETWEEN 0 AND 2),\n"
	"  text TEXT NOT NULL,\n"
	"  tokens BLOB NOT NULL,\n"	/* little-endian int32 token ids */
	"  interrupted INTEGER NOT NULL DEFAULT 0,\n"
	"  ttft_ms REAL NOT NULL DEFAULT 0,\n"
	"  prefill_tokens INTEGER NOT NULL DEFAULT 0,\n"
	"  reused_tokens INTEGER NOT NULL DEFAULT 0,\n"
	"  prefill_tps REAL NOT NULL DEFAULT 0,\n"
	"  gen_tokens INTEGER NOT NULL DEFAULT 0,\n"
	"  decode_tps REAL NOT NULL DEFAULT 0,\n"
	"  created INTEGER NOT NULL,\n"
	"  UNIQUE (conv_id, seq)\n"
	");\n"
	/*
	 * One snapshot chunk = positions [pos0, pos1) = n_parts rows of at most
	 * part_max bytes each, each with the XXH64 of its own data. data stays
	 * the last column so reading the others never touches its pages.
	 */
	"CREATE TABLE kv_chunks (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  conv_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,\n"
	"  pos0 INTEGER NOT NULL,\n"
	"  pos1 INTEGER NOT NULL,\n"
	"  part INTEGER NOT NULL,\n"
	"  n_parts INTEGER NOT NULL,\n"
	"  kv_type TEXT NOT NULL,\n"
	"  model_fp TEXT NOT NULL,\n"
	"  len INTEGER NOT NULL,\n"
	"  checksum INTEGER NOT NULL,\n"
	"  data BLOB NOT NULL,\n"
	"  UNIQUE (conv_id, pos0, part)\n"
	");\n"
	"CREATE TABLE locks (\n"
	"  conv_id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,\n"
	"  pid INTEGER NOT NULL,\n"
	"  host TEXT NOT NULL,\n"
	"  boot_id TEXT NOT NULL,\n"
	"  start_time INTEGER NOT NULL,\n"	/* clock ticks after boot, guards pid reuse */
	"  acquired INTEGER NOT NULL\n"
	");\n",
	/*
	 * 1 -> 2: the context window gets columns of its own. Version 1 kept it
	 * in band: ";window=N" at the end of the settings text, and ":wN" after
	 * the fingerprint in a windowed stream's chunks. ADD COLUMN rewrites no
	 * row; the UPDATEs touch only the rows that carried a window.
	 */
	"ALTER TABLE conversations ADD COLUMN window INTEGER NOT NULL DEFAULT 0;\n"
	"ALTER TABLE kv_chunks ADD COLUMN window INTEGER NOT NULL DEFAULT 0;\n"
	"UPDATE conversations SET\n"
	"  window = CAST(substr(settings, instr(settings, ';window=') + 8) AS INTEGER),\n"
	"  settings = substr(settings, 1, instr(settings, ';window=') - 1)\n"
	"  WHERE instr(settings, ';window=') > 0;\n"
	"UPDATE kv_chunks SET\n"
	"  window = CAST(substr(model_fp, instr(model_fp, ':w') + 2) AS INTEGER),\n"
	"  model_fp = substr(model_fp, 1, instr(model_fp, ':w') - 1)\n"
	"  WHERE instr(model_fp, ':w') > 0;\n",
};

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
	char sys[160] = "";

	switch (rc & 0xff) {
	case SQLITE_BUSY:
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
		why = "database file is corrupted (database disk image is malformed)";
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
	int rc = SQLITE_BUSY, i;

	for (i = 0; i < SESS_BEGIN_TRIES; i++) {
		rc = sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
		if ((rc & 0xff) != SQLITE_BUSY)
			break;
	}
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
	return KVC_OK;
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
	const int n_steps = (int)(sizeof migrations / sizeof migrations[0]);
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
		rc = sqlite3_exec(st->db, migrations[version], NULL, NULL, NULL);
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

static int
schema_setup(struct sess_store *st, char *err, size_t errlen)
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
	if (ret != KVC_OK)
		return ret;
	if (version == 0 && n_objects == 0) {
		/* Only possible before the first table: lets deletes give space back. */
		sqlite3_exec(st->db, "PRAGMA auto_vacuum = INCREMENTAL", NULL, NULL, NULL);
	}
	ret = enable_wal(st, err, errlen);
	if (ret == KVC_OK && version != SESS_SCHEMA_VERSION)
		ret = migrate(st, err, errlen);
	for (i = 0; ret == KVC_OK && i < sizeof pragmas / sizeof pragmas[0]; i++) {
		rc = sqlite3_exec(st->db, pragmas[i], NULL, NULL, NULL);
		if (rc != SQLITE_OK)
			ret = sess_db_fail(st, rc, "cannot open", err, errlen);
	}
	return ret;
}

/*
 * The folder of path (created 0700 as needed, and refused unless it is the
 * user's own: kvc_dir_check), then the database file itself, created 0600
 * before SQLite opens it: SQLite gives -wal and -shm the database file's
 * mode, whatever the umask.
 */
static int
make_private(const char *path, char *err, size_t errlen)
{
	char dir[4096], why[512];
	int rc;

	if (kvc_dir_of(path, dir, sizeof dir) != KVC_OK) {
		kvc_err(err, errlen, "%s: cannot open: path too long", path);
		return KVC_ERANGE;
	}
	rc = kvc_mkdirs_private(dir, why, sizeof why);
	if (rc >= 0)
		rc = kvc_file_create_private(path, why, sizeof why);
	if (rc < 0) {
		kvc_err(err, errlen, "%s: cannot open: %s", path, why);
		return rc;
	}
	return KVC_OK;
}

int
sess_open(struct sess_store **out, const char *path, char *err, size_t errlen)
{
	struct sess_store *st;
	int rc, ret;

	*out = NULL;
	if (path == NULL || *path == '\0') {
		kvc_err(err, errlen, "sessions database: cannot open: empty path");
		return KVC_EINVAL;
	}
	ret = make_private(path, err, errlen);
	if (ret != KVC_OK)
		return ret;
	st = calloc(1, sizeof *st);
	if (st == NULL || (st->path = strdup(path)) == NULL) {
		free(st);
		kvc_err(err, errlen, "%s: cannot open: out of memory", path);
		return KVC_ENOMEM;
	}
	st->part_max = SESS_PART_MAX_DEFAULT;
	rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (rc != SQLITE_OK) {
		ret = sess_db_fail(st, rc, "cannot open", err, errlen);
		sess_db_free(st);
		return ret;
	}
	ret = schema_setup(st, err, errlen);
	if (ret != KVC_OK) {
		sess_db_free(st);
		return ret;
	}
	*out = st;
	return KVC_OK;
}

void
sess_db_free(struct sess_store *st)
{
	if (st == NULL)
		return;
	free(st->locked);
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
