/*
 * schema.c: the database's schema, documented here and built by the
 * migration steps below (db.c runs them, in one transaction, on a database
 * older than SESS_SCHEMA_VERSION).
 *
 * The schema (version SESS_SCHEMA_VERSION, in PRAGMA user_version; PRAGMA
 * application_id is "kvc1"; sess_migrations[] below builds it). Times are unix
 * seconds. Deleting a conversation deletes its rows in every other table
 * (ON DELETE CASCADE).
 *
 * conversations: one row per saved conversation.
 *   id             its number; sess_conv_find takes it or the title; never
 *                  reused after a delete (AUTOINCREMENT, since version 3)
 *   title          its name; not unique, a lookup by title takes the most
 *                  recently touched
 *   model_fp       fingerprint of the engine (model) it was created with,
 *                  or last moved to (sess_conv_rebind)
 *   model_path     the model file's path then (absolute as the program gave
 *                  it); NULL before version 4
 *   vocab_fp       fingerprint of that model's vocabulary: the message ids
 *                  are its token ids; NULL before version 4
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
 *   reasoning      an assistant reply's reasoning (what a reasoning model
 *                  wrote inside <think>...</think> or on harmony's analysis
 *                  channel), without its markup; text then holds the answer
 *                  alone. NULL when the reply had none; added in version 5
 *                  (older replies keep any reasoning inline in text)
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
 *   program        the holder's program name (/proc/PID/comm; added in
 *                  version 3, "" before): a live pid running another
 *                  program is not the holder
 */
#include "store_int.h"

/*
 * sess_migrations[v] takes the schema from version v to v + 1. Append only:
 * never edit a step once released; databases in the wild went through it.
 */
const char *const sess_migrations[] = {
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
	/*
	 * 2 -> 3: conversation ids are never given out twice (AUTOINCREMENT:
	 * an id deleted and reused would make a stale "--resume 7" or a line of
	 * --stats-json point at another conversation), and a lock names the
	 * program that took it. SQLite cannot add AUTOINCREMENT to a table, so
	 * the table is rebuilt: copy, drop, rename (its foreign keys are off
	 * while migrating, so the drop cascades nowhere; the other tables'
	 * REFERENCES conversations then name the new table).
	 */
	"CREATE TABLE conversations_v3 (\n"
	"  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
	"  title TEXT NOT NULL,\n"
	"  model_fp TEXT NOT NULL,\n"
	"  template TEXT NOT NULL,\n"
	"  system TEXT,\n"
	"  settings TEXT NOT NULL,\n"
	"  created INTEGER NOT NULL,\n"
	"  updated INTEGER NOT NULL,\n"
	"  touched INTEGER NOT NULL,\n"
	"  window INTEGER NOT NULL DEFAULT 0\n"
	");\n"
	"INSERT INTO conversations_v3 (id, title, model_fp, template, system, settings,\n"
	"  created, updated, touched, window) SELECT id, title, model_fp, template, system,\n"
	"  settings, created, updated, touched, window FROM conversations;\n"
	"DROP TABLE conversations;\n"
	"ALTER TABLE conversations_v3 RENAME TO conversations;\n"
	"CREATE INDEX conversations_title ON conversations(title, touched);\n"
	"CREATE INDEX conversations_touched ON conversations(touched);\n"
	"ALTER TABLE locks ADD COLUMN program TEXT NOT NULL DEFAULT '';\n",
	/*
	 * 3 -> 4: a conversation names its model's file and vocabulary, so a
	 * resume runs it on that file, and never feeds its token ids to a
	 * model of another vocabulary (rebind.c). NULL on older rows.
	 */
	"ALTER TABLE conversations ADD COLUMN model_path TEXT;\n"
	"ALTER TABLE conversations ADD COLUMN vocab_fp TEXT;\n",
	/*
	 * 4 -> 5: a reply's reasoning in a column of its own, so the answer is
	 * what text holds and the chat template gets the reasoning as the
	 * message's reasoning_content. NULL on older rows.
	 */
	"ALTER TABLE messages ADD COLUMN reasoning TEXT;\n",
};

const int sess_n_migrations = (int)(sizeof sess_migrations / sizeof sess_migrations[0]);
