/*
 * store_int.h: what the files of the sessions module share and nobody else
 * sees: the store handle and, file by file from the bottom up, the calls
 * one file makes into another. Calls only go down this list:
 *   schema.c    the schema's documentation and migration steps (data only)
 *   proc.c      facts about processes from /proc (start time, program, lock holders)
 *   busy.c      waiting for another process's write, naming it
 *   db.c        open, schema, errors, statements, transactions, titles
 *   checksum.c  XXH64 of chunk data (public: store.h)
 *   lock.c      per-conversation process locks; sess_close
 *   chunks.c    snapshot chunk rows: write, load, verify, clear
 *   store.c     conversation rows, messages, turns, rewinds
 *   rebind.c    a conversation's model: recorded, or moved to another
 *   check.c     sess_check, the integrity check
 *   admin.c     whole-database operations: backup, recover
 */
#ifndef KVC_STORE_INT_H
#define KVC_STORE_INT_H

#include <sqlite3.h>

#include "store.h"

struct sess_store {
	sqlite3 *db;
	char *path;		/* as given to sess_open, prefixes every error */
	size_t part_max;	/* bytes of chunk data per kv_chunks row */
	int64_t *locked;	/* conversations locked through this handle (lock.c) */
	int n_locked, cap_locked;
	unsigned flags;		/* SESS_OPEN_* */
	bool readonly;		/* opened read-only (asked, or fallen back to) */
	bool was_empty;		/* the file was there with 0 bytes (sess_was_empty) */
	bool sync_later;	/* this commit: no sync, no checkpoint (sess_user_commit) */
	char ro_why[200];	/* why, for the message refusing a write */
	void (*wait_fn)(void *arg, const char *msg);	/* sess_set_wait_notice */
	void *wait_arg;
	int wait_limit_ms;
	double wait_t0;		/* monotonic ms when the current wait began */
	bool wait_told;		/* the current wait was announced */
	char busy_who[400];	/* the holder named by the last wait, for the failure */
};

/* --- schema.c --- */

/*
 * Append msgs[0..n) after the conversation's last message, inside the
 * caller's transaction (store.c).
 */
int sess_msgs_insert(struct sess_store *st, int64_t conv, const struct sess_msg *msgs, int n,
    const char *what, char *err, size_t errlen);

/* sess_migrations[v] takes the schema from version v to v + 1. */
extern const char *const sess_migrations[];
extern const int sess_n_migrations;

/* --- proc.c --- */

/* First line of a small file, without its newline; "" if unreadable. */
void sess_proc_read_line(const char *path, char *buf, size_t n);
/* 0 and the start time (clock ticks after boot) / zombie flag of pid; -1 if unknown. */
int sess_proc_stat(int64_t pid, int64_t *start, bool *zombie);
/* The program name of pid (/proc/PID/comm, at most 15 bytes); "" if unknown. */
void sess_proc_program(int64_t pid, char *buf, size_t n);
/*
 * The pid of another process holding a POSIX write lock on byte of file, as
 * /proc/locks lists it; -1 if none or unknown.
 */
int64_t sess_proc_lock_holder(const char *file, int64_t byte);

/* --- busy.c --- */

/* The busy handler db.c installs (arg = the store). */
int sess_busy_handler(void *arg, int count);
/* "pid N (program, conversation ... open since ...)": who holds the write lock. */
void sess_busy_describe(struct sess_store *st, char *buf, size_t n);

/* --- db.c --- */

/*
 * Turn SQLite's state after a failed call (rc) into a KVC_E* code and the
 * line "PATH: WHAT: reason". Call before rolling back: that resets errmsg.
 */
int sess_db_fail(struct sess_store *st, int rc, const char *what, char *err, size_t errlen);

/*
 * BEGIN IMMEDIATE, retried while another process holds the write lock past
 * busy_timeout (a big chunk can take seconds to write). 0 or sess_db_fail's code.
 */
int sess_tx_begin(struct sess_store *st, const char *what, char *err, size_t errlen);
int sess_tx_commit(struct sess_store *st, const char *what, char *err, size_t errlen);
/* Safe to call whether or not SQLite already rolled back on its own. */
void sess_tx_rollback(struct sess_store *st);
/*
 * Ends the transaction sess_tx_begin opened: with ret an error, rolls back
 * and returns ret; with KVC_OK, commits and returns sess_tx_commit's code.
 */
int sess_tx_end(struct sess_store *st, int ret, const char *what, char *err, size_t errlen);

/* sqlite3_prepare_v2 with sess_db_fail on error. */
int sess_prepare(struct sess_store *st, sqlite3_stmt **out, const char *sql,
    const char *what, char *err, size_t errlen);

/*
 * Runs sql, a statement that returns no rows, with ?1 = a1 and, when it has
 * a second parameter, ?2 = a2. 0 or sess_db_fail's code.
 */
int sess_exec_ids(struct sess_store *st, const char *sql, int64_t a1, int64_t a2,
    const char *what, char *err, size_t errlen);

/* Unix seconds. */
int64_t sess_time(void);

/*
 * Steps s, a lookup of conversation id: KVC_OK on its row, KVC_ENOTFOUND
 * with "no conversation with id N" if there is none.
 */
int sess_step_conv(struct sess_store *st, sqlite3_stmt *s, int64_t id, const char *what,
    char *err, size_t errlen);

/* Title of conversation id (malloc'ed); KVC_ENOTFOUND with a message if none. */
int sess_conv_title(struct sess_store *st, int64_t id, char **title, const char *what,
    char *err, size_t errlen);

/*
 * Checkpoints the WAL into the database file; mode SQLITE_CHECKPOINT_*.
 * Best effort and never waits for other processes: a checkpoint that cannot
 * finish now is completed by a later one.
 */
void sess_checkpoint(struct sess_store *st, int mode);

/*
 * Closes the connection (after a TRUNCATE checkpoint) and frees st, locks
 * or not (sess_close gives them back first).
 */
void sess_db_free(struct sess_store *st);

/* --- lock.c --- */

/* Inside a write transaction: KVC_EBUSY with a message if a live other process holds conv. */
int sess_lock_check(struct sess_store *st, int64_t conv, const char *title,
    char *err, size_t errlen);

/*
 * Inside the caller's write transaction: take conv for this process (as
 * sess_conv_lock does), KVC_EBUSY with a message if another holds it.
 */
int sess_lock_take(struct sess_store *st, int64_t conv, char *err, size_t errlen);

/* --- chunks.c --- */

/* Argument checks, and the write inside a turn's transaction. */
int sess_chunk_check(struct sess_store *st, const struct sess_chunk *c, char *err, size_t errlen);
int sess_chunk_write(struct sess_store *st, int64_t conv, const char *title,
    const struct sess_chunk *c, char *err, size_t errlen);
/*
 * Reads back every chunk of conv and checks it as sess_chunks_load does
 * (contiguous from 0, all parts, checksums), inside the caller's read
 * transaction. 0 or KVC_ECORRUPT naming title and the chunk.
 */
int sess_chunks_verify(struct sess_store *st, int64_t conv, const char *title,
    const char *what, char *err, size_t errlen);

/* --- store.c --- */

/* Token ids as little-endian int32, whatever the host order (malloc'ed, at
 * least 1 byte); NULL when out of memory. */
unsigned char *sess_encode_ids(const int32_t *ids, int n);

#endif
