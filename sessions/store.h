/*
 * store.h: conversations, their messages (with exact token ids and per-turn
 * stats) and incremental KV-cache snapshots in one SQLite database.
 *
 * A conversation on disk is always a consistent prefix of what was said:
 * every turn (messages, tokens, stats, snapshot chunk) is one transaction.
 * Snapshot chunks hold only the cache positions added since the previous
 * chunk, with a checksum, the position range, the cache type, the model
 * fingerprint and the context window; a rewind drops the chunks past the
 * new end.
 */
#ifndef KVC_STORE_H
#define KVC_STORE_H

#include "core/kvc.h"

struct sess_store;
struct sess_chunk;	/* a snapshot chunk, below */

/*
 * Open (creating and migrating as needed) the database at path. WAL, foreign keys on.
 * Missing parent directories are created (mode 0700), and a folder that is not
 * the user's own or that others can write is refused (KVC_EINVAL, see
 * kvc_dir_check); a new database file is created 0600, and so are its -wal and
 * -shm, whatever the umask. Every commit is fsynced
 * (synchronous=FULL): a turn acknowledged survives a SIGKILL and a power loss.
 * Returns KVC_EUNSUPPORTED for a schema newer than SESS_SCHEMA_VERSION,
 * KVC_EFORMAT for a file that is not a (kvchat) SQLite database, KVC_EBUSY when
 * another process keeps it locked, KVC_EIO otherwise.
 */
int sess_open(struct sess_store **out, const char *path, char *err, size_t errlen);
/*
 * Releases the conversation locks taken through st and checkpoints the WAL
 * into the database file (TRUNCATE: the file alone then holds everything);
 * NULL is a no-op.
 */
void sess_close(struct sess_store *st);

/* sess_open_ex flags. */
enum {
	/* Open an existing database read-only: no schema change, no locks taken. */
	SESS_OPEN_READONLY = 1u << 0,
	/*
	 * If the database cannot be written (read-only file or mount, full disk,
	 * another user's file), open it read-only instead of failing; see
	 * sess_readonly.
	 */
	SESS_OPEN_FALLBACK_RO = 1u << 1,
	/*
	 * Conversation locks whose holder cannot be checked (another host) are
	 * taken over; a holder known to run on this machine never is.
	 */
	SESS_OPEN_FORCE_UNLOCK = 1u << 2,
	/* Never create the file: KVC_ENOTFOUND if it does not exist. */
	SESS_OPEN_EXISTING = 1u << 3,
};
/* sess_open with flags (sess_open is sess_open_ex with 0). */
int sess_open_ex(struct sess_store **out, const char *path, unsigned flags, char *err,
    size_t errlen);
/*
 * Whether the file was there but empty (0 bytes) and was made a new
 * database by this open: kvchat never leaves one, so a database truncated
 * to nothing is the likely cause, and the caller says so.
 */
bool sess_was_empty(const struct sess_store *st);
/*
 * Whether st is read-only; *why (if not NULL) receives the reason, e.g.
 * "the disk is full", for a message that refuses a write.
 */
bool sess_readonly(const struct sess_store *st, const char **why);

/*
 * While a write waits for another process's transaction, fn is called once
 * (after about a second) with a line naming the holder: pid, program, the
 * conversation it has open and since when. Without fn nothing is said; the
 * failure after the wait names the holder either way.
 */
void sess_set_wait_notice(struct sess_store *st, void (*fn)(void *arg, const char *msg),
    void *arg);
/* How long a write waits for another process's transaction (default 30000 ms). */
void sess_set_wait_limit(struct sess_store *st, int ms);

/*
 * Consistent copy of the whole database into a new single file dest (mode
 * 0600, no -wal beside it), with SQLite's online backup API: other
 * processes may keep writing meanwhile. An existing dest is refused
 * (KVC_EINVAL) unless force; it is then replaced atomically (rename).
 */
int sess_backup(struct sess_store *st, const char *dest, bool force, char *err, size_t errlen);

/* What sess_recover salvaged and lost. */
struct sess_recover_stats {
	int convs, msgs, chunks, locks;	/* rows copied */
	int bad_rows;			/* rows that could not be read */
	int bad_tables;			/* tables that could not be read at all */
	int placeholders;		/* of convs: made for messages whose conversation row was lost */
};
/*
 * Salvage a damaged database: every conversation, message and snapshot-chunk
 * row that can still be read from in is copied into out, a new kvchat
 * database (refused if it exists). Rows are read one by one by rowid, so a
 * damaged page costs only its own rows. Messages whose conversation row is
 * lost go under a placeholder conversation with that id, titled "recovered
 * conversation ID". Chunks of a conversation with a
 * missing or damaged part are dropped (the next start recomputes them).
 * 0 if out was written, even with losses (see *stats).
 */
int sess_recover(const char *in, const char *out, struct sess_recover_stats *stats,
    char *err, size_t errlen);

struct sess_conv {
	int64_t id;
	char *title;
	char *model_fp;		/* engine fingerprint it was created with */
	char *template_name;	/* chat family name */
	char *system;		/* system prompt, or NULL */
	char *settings;		/* sampler settings as "name=value;..." text */
	int64_t created, updated;	/* unix seconds */
	int n_msgs;
	int n_tokens;		/* tokens in the stored stream */
	int64_t window;		/* first message the cache holds; 0 = all */
	char *model_path;	/* the model file it was made with, or NULL (older rows) */
	char *vocab_fp;		/* that model's vocabulary fingerprint, or NULL */
};
void sess_conv_clear(struct sess_conv *c);	/* frees the strings */

int sess_conv_create(struct sess_store *st, const char *title, const char *model_fp,
    const char *template_name, const char *system, const char *settings,
    int64_t *id_out, char *err, size_t errlen);
/* By numeric id or exact title (most recent if several). KVC_ENOTFOUND if none. */
int sess_conv_find(struct sess_store *st, const char *id_or_title, int64_t *id_out,
    char *err, size_t errlen);
/* The most recently used conversation that has messages. KVC_ENOTFOUND if none. */
int sess_conv_latest(struct sess_store *st, int64_t *id_out, char *err, size_t errlen);
int sess_conv_get(struct sess_store *st, int64_t id, struct sess_conv *out, char *err, size_t errlen);
/* Most recently updated first; caller frees with sess_conv_list_free. */
int sess_conv_list(struct sess_store *st, struct sess_conv **out, int *n, char *err, size_t errlen);
void sess_conv_list_free(struct sess_conv *v, int n);
int sess_conv_rename(struct sess_store *st, int64_t id, const char *title, char *err, size_t errlen);
int sess_conv_set_system(struct sess_store *st, int64_t id, const char *system, char *err, size_t errlen);
/*
 * A new system prompt for a conversation that already has messages, in one
 * transaction: set the prompt and the window (conv's key), replace the
 * token ids of the first message (the one whose rendering holds the system
 * text) with ids[0..n), drop every snapshot chunk (they describe the old
 * stream) and, if chunk != NULL, store it (the new stream's cache, from
 * position 0). KVC_ENOTFOUND if the conversation or its first message does
 * not exist; on any failure nothing changes.
 */
int sess_conv_replace_system(struct sess_store *st, int64_t id, const char *system,
    const int32_t *ids, int n, const struct sess_chunk *chunk, int64_t window, char *err,
    size_t errlen);
int sess_conv_set_settings(struct sess_store *st, int64_t id, const char *settings, char *err, size_t errlen);
/*
 * The context window: the index of the first message of the stream the cache
 * holds (older ones were dropped from the cache, not from the store); 0 for
 * the whole conversation. KVC_EINVAL if negative, KVC_ENOTFOUND if no such id.
 */
int sess_conv_set_window(struct sess_store *st, int64_t id, int64_t window, char *err,
    size_t errlen);
int sess_conv_delete(struct sess_store *st, int64_t id, char *err, size_t errlen);
/*
 * --session NAME: the most recent conversation titled title, or a new one
 * with these fields if there is none, locked for this process; lookup,
 * creation and lock in one write transaction, so processes starting
 * together agree on one conversation. *created (if not NULL) says which.
 */
int sess_conv_claim(struct sess_store *st, const char *title, const char *model_fp,
    const char *template_name, const char *system, const char *settings,
    int64_t *id_out, bool *created, char *err, size_t errlen);

/* Per-turn figures kept with an assistant message. */
struct sess_stats {
	double ttft_ms;
	int prefill_tokens;	/* computed */
	int reused_tokens;
	double prefill_tps;
	int gen_tokens;
	double decode_tps;
};

enum sess_role { SESS_SYSTEM = 0, SESS_USER = 1, SESS_ASSISTANT = 2 };

struct sess_msg {
	int64_t id;
	enum sess_role role;
	char *text;		/* a reply: its answer (the reasoning apart, below) */
	char *reasoning;	/* a reply's reasoning without its markup, or NULL */
	int32_t *ids;		/* exact tokens this message added to the stream */
	int n_ids;
	bool interrupted;
	struct sess_stats stats;
	int64_t created;
};
/* Messages of a conversation in order; free with sess_msgs_free. */
int sess_msgs_load(struct sess_store *st, int64_t conv, struct sess_msg **out, int *n,
    char *err, size_t errlen);
void sess_msgs_free(struct sess_msg *v, int n);

/* A snapshot chunk: cache positions [pos0, pos1) serialised by eng_seq_kv_save. */
struct sess_chunk {
	int pos0, pos1;
	const char *kv_type;	/* "f16" / "f32" */
	const char *model_fp;
	const void *blob;
	size_t len;
	int64_t window;		/* the conversation's window it was computed over */
};

/*
 * One turn, one transaction: append msgs[0..n) to conversation conv and,
 * if chunk != NULL, its snapshot chunk. On any failure nothing is written.
 */
int sess_turn_commit(struct sess_store *st, int64_t conv, const struct sess_msg *msgs, int n,
    const struct sess_chunk *chunk, char *err, size_t errlen);

/*
 * sess_turn_commit of a turn that starts a new window (its cache dropped
 * or slid old positions): the conversation's chunks (another stream's
 * cache) are deleted, msgs and chunk appended and its window set to window
 * (conv's key), in one transaction, so a kill never leaves the window of
 * one turn with the chunks or messages of another.
 */
int sess_turn_commit_window(struct sess_store *st, int64_t conv, const struct sess_msg *msgs,
    int n, const struct sess_chunk *chunk, int64_t window, char *err, size_t errlen);

/*
 * sess_rewind to keep_msgs messages and no chunks, the window set to window
 * and, if chunk != NULL, chunk stored (the new window's cache, from
 * position 0), in one transaction (an /undo that chooses the window again;
 * /clear).
 */
int sess_rewind_window(struct sess_store *st, int64_t conv, int keep_msgs, int64_t window,
    const struct sess_chunk *chunk, char *err, size_t errlen);

/*
 * sess_turn_commit of one message whose durability can wait for the next
 * commit (the user's message, stored before its prompt is computed): the
 * WAL is not synced and not checkpointed, so no fsync delays the prefill.
 * It survives a killed process when this returns; an OS crash or power
 * loss once the next sess_turn_commit (the reply) syncs the WAL.
 */
int sess_user_commit(struct sess_store *st, int64_t conv, const struct sess_msg *msg, char *err,
    size_t errlen);

/*
 * Rewind: keep the first keep_msgs messages; drop chunks with pos1 > n_pos
 * (the stream's new length). One transaction.
 */
int sess_rewind(struct sess_store *st, int64_t conv, int keep_msgs, int n_pos,
    char *err, size_t errlen);

/*
 * Rewind as sess_rewind, then append msgs[0..n) and chunk as
 * sess_turn_commit, in one transaction (/retry: the old reply and the new
 * one are never both missing or both present). On any failure nothing
 * changes.
 */
int sess_turn_replace(struct sess_store *st, int64_t conv, int keep_msgs, int n_pos,
    const struct sess_msg *msgs, int n, const struct sess_chunk *chunk, char *err, size_t errlen);

/*
 * sess_turn_replace (keep_msgs >= 0) or sess_turn_commit (keep_msgs < 0)
 * that also sets the conversation's window to window (conv's key) in the
 * same transaction, deleting any chunk made over another window; chunk and
 * the chunks kept must be of that window. For a conversation whose window
 * changed in memory without a turn of its own (at open, when the stored
 * one no longer fits its messages): written apart, a kill between the two
 * left the window of one stream with the chunks of another, and the next
 * start rebuilt the cache. On any failure nothing changes.
 */
int sess_turn_rekey(struct sess_store *st, int64_t conv, int keep_msgs, int n_pos,
    const struct sess_msg *msgs, int n, const struct sess_chunk *chunk, int64_t window,
    char *err, size_t errlen);

/*
 * Read the conversation's chunks in position order, verifying each checksum;
 * fn is called once per chunk (blob valid only during the call). Stops and
 * returns fn's value if non-zero; KVC_ECORRUPT on a checksum mismatch or a
 * gap; KVC_ENOTFOUND if the chunks were saved with another model_fp, kv_type
 * or window. *n_pos_out (if not NULL) receives the end of the last chunk read.
 */
int sess_chunks_load(struct sess_store *st, int64_t conv, const char *model_fp,
    const char *kv_type, int64_t window,
    int (*fn)(void *arg, int pos0, int pos1, const void *blob, size_t len),
    void *arg, int *n_pos_out, char *err, size_t errlen);
/*
 * Also: no chunks at all returns 0 with *n_pos_out = 0. On KVC_ECORRUPT or an
 * fn error, *n_pos_out is the end of the last chunk fn accepted, so the caller
 * can keep those positions and recompute only the rest. fn must not call back
 * into the store. sess_turn_commit refuses (KVC_EINVAL) a chunk whose pos0 is
 * not the end of the stored snapshot or whose model_fp/kv_type/window differ
 * from it.
 */

/*
 * Where the conversation's stored snapshot ends (the position the next
 * chunk must start at), 0 without chunks; nothing is read but that.
 */
int sess_chunks_end(struct sess_store *st, int64_t conv, int *end, char *err, size_t errlen);

/* Drop all chunks of a conversation (after a rebuild with another model). */
int sess_chunks_clear(struct sess_store *st, int64_t conv, char *err, size_t errlen);

/*
 * Claim the conversation for this process (a row naming our pid, checked for
 * liveness). KVC_EBUSY with a message if another live process holds it.
 */
int sess_conv_lock(struct sess_store *st, int64_t conv, char *err, size_t errlen);
void sess_conv_unlock(struct sess_store *st, int64_t conv);

/* --- rebind.c: which model a conversation belongs to --- */

/* Record the model file and vocabulary fingerprint of a conversation. */
int sess_conv_set_model(struct sess_store *st, int64_t id, const char *model_path,
    const char *vocab_fp, char *err, size_t errlen);

/* A conversation moved to another model: what it is recorded as from now on. */
struct sess_model {
	const char *model_fp;	/* engine fingerprint */
	const char *vocab_fp;	/* vocabulary fingerprint */
	const char *path;	/* the model file */
	const char *template_name;	/* chat family name */
};
/*
 * In one transaction: the conversation's model becomes to, each of its
 * messages (msgs[i] is the message of seq i, n of them, all it has) gets
 * msgs[i].ids as its tokens, and its snapshot chunks (another model's
 * cache) are deleted. Text, roles and figures are left as they are.
 * KVC_EINVAL when n is not the number of stored messages.
 */
int sess_conv_rebind(struct sess_store *st, int64_t id, const struct sess_model *to,
    const struct sess_msg *msgs, int n, char *err, size_t errlen);

/*
 * The conversation's messages from seq first on (n of them, all it has
 * after first) get msgs[i].ids, its snapshot chunks past position keep_pos
 * go, and user (if not NULL) is appended, in one transaction: a chat
 * template that renders earlier turns otherwise than the stream holds
 * them (a dropped reasoning, a date) gives the stream a new tail from
 * keep_pos on. Text, reasoning and figures stay. KVC_EINVAL when first + n
 * is not the number of stored messages.
 */
int sess_conv_retoken(struct sess_store *st, int64_t id, int first, const struct sess_msg *msgs,
    int n, int keep_pos, const struct sess_msg *user, char *err, size_t errlen);

/* --- Additions (store engineer) --- */

/* Schema version this build writes (PRAGMA user_version). */
#define SESS_SCHEMA_VERSION 5

/* The 64-bit checksum kept with each snapshot chunk: XXH64 with seed 0. */
uint64_t sess_checksum(const void *p, size_t n);

/*
 * PRAGMA integrity_check and foreign_key_check, plus: every conversation's
 * chunks are contiguous from 0 and complete. 0 or KVC_ECORRUPT with the first
 * problem found.
 */
int sess_check(struct sess_store *st, char *err, size_t errlen);

/* The underlying connection, for tests and diagnostics (sqlite3 *). */
struct sqlite3;
struct sqlite3 *sess_sqlite(struct sess_store *st);

/*
 * Largest data BLOB per kv_chunks row (default 64 MiB, clamped to
 * [1, 256 MiB]); a bigger chunk is stored as several rows. For tests.
 */
void sess_set_part_max(struct sess_store *st, size_t bytes);

#endif
