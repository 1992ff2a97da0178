/*
 * test_store.c: the SQLite session store. Conversations and messages,
 * snapshot chunks (round trip, corruption, mismatch, rewind), the context
 * window's columns, schema versions, the migration from version 1 and
 * foreign files, atomic turns (invalid chunk, disk full,
 * locked database), conversation locks across processes, two writer
 * processes, and SIGKILL at random moments while turns are committed.
 * Everything happens in a fresh temporary directory.
 */
#include "gguf/gguf.h"
#include "core/kvc.h"
#include "sessions/store.h"
#include "test.h"
#include "test_sql.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];
static char errbuf[1024];
#define ERR errbuf, sizeof errbuf

static const char *
path_in(const char *name)
{
	return test_path(tmpdir, name);
}

/* ---- deterministic content, independent of the store ---- */

static uint64_t
mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static void
gen_bytes(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t w = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (i % 8 == 0)
			w = mix(seed * 1000003u + i / 8);
		p[i] = (unsigned char)(w >> (i % 8 * 8));
	}
}

/* Turn t of a scripted conversation: token counts and chunk size. */
struct shape {
	int n_user, n_asst;
	size_t len;
};

static struct shape
turn_shape(int t, size_t unit, int spread)
{
	struct shape s;

	s.n_user = 3 + t % 5;
	s.n_asst = 2 + (t * 3) % 7;
	s.len = unit * (size_t)(1 + (t * 7919) % spread);
	return s;
}

/* Cache position where turn t starts. */
static int
turn_pos(int t)
{
	int p = 0, j;

	for (j = 0; j < t; j++) {
		struct shape s = turn_shape(j, 1, 1);

		p += s.n_user + s.n_asst;
	}
	return p;
}

static void
fill_ids(int32_t *ids, int n, int t, int role)
{
	int i;

	/* Negative and large ids check the little-endian encoding both ways. */
	for (i = 0; i < n; i++)
		ids[i] = role == SESS_USER ? t * 1000 + i : -(t * 1000 + i) - 70000000;
}

/* Commits scripted turn t of conversation conv (chunk content from seed). */
static int
commit_turn(struct sess_store *st, int64_t conv, int t, size_t unit, int spread,
    uint64_t seed, char *err, size_t errlen)
{
	struct shape s = turn_shape(t, unit, spread);
	int32_t uids[16], aids[16];
	char utext[64], atext[64];
	struct sess_msg m[2];
	struct sess_chunk c;
	unsigned char *blob = malloc(s.len + 1);
	int ret;

	if (blob == NULL)
		return KVC_ENOMEM;
	fill_ids(uids, s.n_user, t, SESS_USER);
	fill_ids(aids, s.n_asst, t, SESS_ASSISTANT);
	snprintf(utext, sizeof utext, "question %d", t);
	snprintf(atext, sizeof atext, "answer %d", t);
	memset(m, 0, sizeof m);
	m[0].role = SESS_USER;
	m[0].text = utext;
	m[0].ids = uids;
	m[0].n_ids = s.n_user;
	m[1].role = SESS_ASSISTANT;
	m[1].text = atext;
	m[1].ids = aids;
	m[1].n_ids = s.n_asst;
	m[1].stats.gen_tokens = s.n_asst;
	m[1].stats.ttft_ms = t + 0.5;
	gen_bytes(blob, s.len, seed + (uint64_t)t);
	c.pos0 = turn_pos(t);
	c.pos1 = turn_pos(t + 1);
	c.kv_type = "f16";
	c.model_fp = "model-A";
	c.blob = blob;
	c.len = s.len;
	c.window = 0;
	ret = sess_turn_commit(st, conv, m, 2, &c, err, errlen);
	free(blob);
	return ret;
}

/* Chunk callback checking a scripted conversation turn by turn. */
struct expect {
	int t;			/* next turn expected */
	size_t unit;
	int spread;
	uint64_t seed;
	int bad;
};

static int
expect_chunk(void *arg, int pos0, int pos1, const void *blob, size_t len)
{
	struct expect *e = arg;
	struct shape s = turn_shape(e->t, e->unit, e->spread);
	unsigned char *want = malloc(s.len + 1);

	if (pos0 != turn_pos(e->t) || pos1 != turn_pos(e->t + 1) || len != s.len) {
		e->bad++;
	} else {
		gen_bytes(want, s.len, e->seed + (uint64_t)e->t);
		if (memcmp(want, blob, len) != 0)
			e->bad++;
	}
	free(want);
	e->t++;
	return 0;
}

/*
 * Checks that conv holds scripted turns 0..T-1, messages and snapshot in
 * agreement; returns T or -1.
 */
static int
verify_script(struct sess_store *st, int64_t conv, size_t unit, int spread, uint64_t seed)
{
	struct expect e = {0, unit, spread, seed, 0};
	struct sess_msg *m;
	int n, i, t, n_pos = -1, ret, bad = 0;

	ret = sess_msgs_load(st, conv, &m, &n, ERR);
	test_cond(ret == 0, "%s", errbuf);
	if (ret != 0)
		return -1;
	test_cond(n % 2 == 0, "%d messages: half a turn stored", n);
	for (i = 0; i < n; i++) {
		struct shape s;
		char want[64];
		int32_t ids[16];

		t = i / 2;
		s = turn_shape(t, unit, spread);
		snprintf(want, sizeof want, i % 2 ? "answer %d" : "question %d", t);
		fill_ids(ids, i % 2 ? s.n_asst : s.n_user, t, i % 2 ? SESS_ASSISTANT : SESS_USER);
		if (strcmp(m[i].text, want) != 0 || m[i].n_ids != (i % 2 ? s.n_asst : s.n_user) ||
		    memcmp(m[i].ids, ids, (size_t)m[i].n_ids * 4) != 0 ||
		    m[i].role != (i % 2 ? SESS_ASSISTANT : SESS_USER))
			bad++;
	}
	test_cond(bad == 0, "%d messages differ from the script", bad);
	sess_msgs_free(m, n);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, expect_chunk, &e, &n_pos, ERR);
	test_cond(ret == 0, "%s", errbuf);
	test_cond(e.bad == 0, "%d chunks differ from the script", e.bad);
	test_cond(e.t == n / 2, "snapshot has %d turns, messages %d", e.t, n / 2);
	test_cond(n_pos == turn_pos(n / 2), "snapshot ends at %d, want %d", n_pos,
	    turn_pos(n / 2));
	return ret == 0 && bad == 0 && e.bad == 0 && e.t == n / 2 ? n / 2 : -1;
}

/* ---- raw SQL through a second connection ---- */

/* Read-write (sqlite3_open's flags), and no wait for a lock. */
static int64_t
sql_int(const char *db_path, const char *sql)
{
	return test_sql_int(db_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, sql);
}

static int
sql_exec(const char *db_path, const char *sql)
{
	return test_sql_exec(db_path, 0, sql);
}

static int64_t
st_int(struct sess_store *st, const char *sql)
{
	sqlite3_stmt *s;
	int64_t v = -12345;

	if (sqlite3_prepare_v2(sess_sqlite(st), sql, -1, &s, NULL) == SQLITE_OK) {
		if (sqlite3_step(s) == SQLITE_ROW)
			v = sqlite3_column_int64(s, 0);
		sqlite3_finalize(s);
	}
	return v;
}

static const char *
st_text(struct sess_store *st, const char *sql)
{
	static char buf[256];
	sqlite3_stmt *s;

	buf[0] = '\0';
	if (sqlite3_prepare_v2(sess_sqlite(st), sql, -1, &s, NULL) == SQLITE_OK) {
		if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
			snprintf(buf, sizeof buf, "%s", (const char *)sqlite3_column_text(s, 0));
		sqlite3_finalize(s);
	}
	return buf;
}

static void
write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");

	if (f) {
		fwrite(data, 1, n, f);
		fclose(f);
	}
}

/* ---- checksum ---- */

static void
test_checksum(void)
{
	/*
	 * XXH64, seed 0, computed with the system libxxhash (XXH64 via Python
	 * ctypes); pattern byte i = (i * 31 + 7) & 255.
	 */
	static const struct { size_t n; uint64_t h; } v[] = {
		{1, 0xa96c7f0ce858bbb7ULL}, {4, 0xc60d15b1e3ff8f04ULL},
		{7, 0xafbefc3d6c6f9a8eULL}, {8, 0x3da5c7aa269683e0ULL},
		{12, 0x8fe8ab1c1fd0666eULL}, {15, 0xae2a37eb9357caa7ULL},
		{31, 0x4a74f3a1a39ad4a1ULL}, {32, 0x8d57d6a4671cc43dULL},
		{33, 0x62c9fd21ed857664ULL}, {63, 0x5c320a0d2707057fULL},
		{64, 0x7bbabbc45729d17eULL}, {100, 0xefa0ad2d3e70c151ULL},
		{1000, 0x99594f4828043d35ULL},
	};
	unsigned char pat[1000];
	size_t i;

	for (i = 0; i < sizeof pat; i++)
		pat[i] = (unsigned char)((i * 31 + 7) & 255);
	test_cond(sess_checksum("", 0) == 0xef46db3751d8e999ULL, "empty");
	test_cond(sess_checksum("a", 1) == 0xd24ec4f1a98c6e5bULL, "a");
	test_cond(sess_checksum("abc", 3) == 0x44bc2cf5ad770999ULL, "abc");
	for (i = 0; i < sizeof v / sizeof v[0]; i++)
		test_cond(sess_checksum(pat, v[i].n) == v[i].h, "length %zu: %016llx", v[i].n,
		    (unsigned long long)sess_checksum(pat, v[i].n));
}

/* ---- conversations and messages ---- */

static void
test_crud(void)
{
	const char *db = path_in("a/b/c/sessions.db");
	struct sess_store *st;
	struct sess_conv c, *v;
	struct sess_msg m[3], *got;
	int32_t ids1[] = {1, -2, 0x7fffffff, (int32_t)0x80000000};
	int32_t ids2[] = {151643, 42};
	int64_t a1, b, a2, y, id, cnt;
	int n, ret;
	char num[32];

	ret = sess_open(&st, db, ERR);
	test_cond(ret == 0, "open with missing parents: %s", errbuf);
	if (ret != 0)
		return;
	test_cond(st_int(st, "PRAGMA user_version") == SESS_SCHEMA_VERSION, "user_version");
	test_cond(strcmp(st_text(st, "PRAGMA journal_mode"), "wal") == 0, "WAL: %s",
	    st_text(st, "PRAGMA journal_mode"));
	test_cond(st_int(st, "PRAGMA foreign_keys") == 1, "foreign keys on");
	test_cond(st_int(st, "PRAGMA synchronous") == 2, "synchronous FULL");
	test_cond(st_int(st, "PRAGMA auto_vacuum") == 2, "incremental auto_vacuum");

	test_cond(sess_conv_latest(st, &id, ERR) == KVC_ENOTFOUND, "latest of none");
	test_cond(sess_conv_create(st, "alpha", "fp1", "chatml", "be brief", "temperature=0.7",
	    &a1, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_create(st, "beta", "fp1", "chatml", NULL, NULL, &b, ERR) == 0,
	    "%s", errbuf);
	test_cond(sess_conv_create(st, "alpha", "fp2", "llama3", NULL, "", &a2, ERR) == 0,
	    "%s", errbuf);
	test_cond(sess_conv_create(st, "2024", "fp1", "chatml", NULL, NULL, &y, ERR) == 0,
	    "%s", errbuf);
	test_cond(a1 != b && b != a2 && a1 != a2, "distinct ids");

	/* Most recent first. */
	test_cond(sess_conv_list(st, &v, &n, ERR) == 0, "%s", errbuf);
	test_cond(n == 4 && v[0].id == y && v[1].id == a2 && v[2].id == b && v[3].id == a1,
	    "list order");
	if (n == 4) {
		test_cond(strcmp(v[3].title, "alpha") == 0 && strcmp(v[3].system, "be brief") == 0 &&
		    strcmp(v[3].settings, "temperature=0.7") == 0 &&
		    strcmp(v[3].model_fp, "fp1") == 0 && strcmp(v[3].template_name, "chatml") == 0,
		    "fields of alpha");
		test_cond(v[2].system == NULL && strcmp(v[2].settings, "") == 0, "NULLs of beta");
		test_cond(v[3].n_msgs == 0 && v[3].n_tokens == 0, "empty counts");
		test_cond(v[3].created > 1600000000 && v[3].updated >= v[3].created, "timestamps");
	}
	sess_conv_list_free(v, n);

	test_cond(sess_conv_find(st, "alpha", &id, ERR) == 0 && id == a2, "title: most recent");
	snprintf(num, sizeof num, "%lld", (long long)a1);
	test_cond(sess_conv_find(st, num, &id, ERR) == 0 && id == a1, "by id");
	test_cond(sess_conv_find(st, "2024", &id, ERR) == 0 && id == y, "numeric title");
	ret = sess_conv_find(st, "nope", &id, ERR);
	test_cond(ret == KVC_ENOTFOUND && strstr(errbuf, "nope"), "missing: %d %s", ret, errbuf);
	/* None has a message yet: nothing to resume (issue 13: empty ones never win). */
	test_cond(sess_conv_latest(st, &id, ERR) == KVC_ENOTFOUND, "latest of empty ones");

	/* A turn makes alpha #1 the most recent. */
	memset(m, 0, sizeof m);
	m[0].role = SESS_SYSTEM;
	m[0].text = "be brief";
	m[1].role = SESS_USER;
	m[1].text = "你好，世界！\nsecond line";
	m[1].ids = ids1;
	m[1].n_ids = 4;
	m[2].role = SESS_ASSISTANT;
	m[2].text = "Hello 👋";
	m[2].ids = ids2;
	m[2].n_ids = 2;
	m[2].interrupted = true;
	m[2].stats = (struct sess_stats){12.5, 7, 3, 1234.5, 2, 56.25};
	m[2].created = 1700000000;
	test_cond(sess_turn_commit(st, a1, m, 3, NULL, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_latest(st, &id, ERR) == 0 && id == a1, "latest after a turn");
	test_cond(sess_conv_find(st, "alpha", &id, ERR) == 0 && id == a1, "title after a turn");

	test_cond(sess_conv_get(st, a1, &c, ERR) == 0, "%s", errbuf);
	test_cond(c.n_msgs == 3 && c.n_tokens == 6, "counts %d %d", c.n_msgs, c.n_tokens);
	sess_conv_clear(&c);
	test_cond(sess_msgs_load(st, a1, &got, &n, ERR) == 0 && n == 3, "%s", errbuf);
	if (n == 3) {
		test_cond(got[0].role == SESS_SYSTEM && got[0].n_ids == 0 &&
		    strcmp(got[0].text, "be brief") == 0, "system message");
		test_cond(got[1].role == SESS_USER && strcmp(got[1].text, m[1].text) == 0 &&
		    got[1].n_ids == 4 && memcmp(got[1].ids, ids1, sizeof ids1) == 0 &&
		    !got[1].interrupted, "user message");
		test_cond(got[2].role == SESS_ASSISTANT && strcmp(got[2].text, m[2].text) == 0 &&
		    got[2].n_ids == 2 && memcmp(got[2].ids, ids2, sizeof ids2) == 0 &&
		    got[2].interrupted && got[2].created == 1700000000, "assistant message");
		test_cond(got[2].stats.ttft_ms == 12.5 && got[2].stats.prefill_tokens == 7 &&
		    got[2].stats.reused_tokens == 3 && got[2].stats.prefill_tps == 1234.5 &&
		    got[2].stats.gen_tokens == 2 && got[2].stats.decode_tps == 56.25, "stats");
		test_cond(got[1].created > 1600000000, "created defaults to now");
	}
	sess_msgs_free(got, n);
	/* Little-endian int32 on disk, whatever the host. */
	test_cond(strcmp(st_text(st, "SELECT hex(tokens) FROM messages WHERE seq = 1"),
	    "01000000FEFFFFFFFFFFFF7F00000080") == 0, "token blob %s",
	    st_text(st, "SELECT hex(tokens) FROM messages WHERE seq = 1"));

	test_cond(sess_conv_rename(st, b, "gamma", ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_set_system(st, b, "you are a poet", ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_set_settings(st, b, "seed=1;top_k=40", ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_get(st, b, &c, ERR) == 0 && strcmp(c.title, "gamma") == 0 &&
	    strcmp(c.system, "you are a poet") == 0 && strcmp(c.settings, "seed=1;top_k=40") == 0,
	    "after rename/system/settings");
	sess_conv_clear(&c);
	test_cond(sess_conv_set_system(st, b, NULL, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_get(st, b, &c, ERR) == 0 && c.system == NULL, "system cleared");
	sess_conv_clear(&c);
	test_cond(sess_conv_find(st, "beta", &id, ERR) == KVC_ENOTFOUND, "old title gone");
	test_cond(sess_conv_rename(st, 99999, "x", ERR) == KVC_ENOTFOUND, "rename missing");
	test_cond(sess_conv_get(st, 99999, &c, ERR) == KVC_ENOTFOUND, "get missing");
	test_cond(sess_turn_commit(st, 99999, m, 3, NULL, ERR) == KVC_ENOTFOUND,
	    "turn on a missing conversation");

	/* Delete cascades to messages, chunks and locks. */
	test_cond(commit_turn(st, a1, 1, 100, 3, 5, ERR) == KVC_EINVAL,
	    "chunk must start at 0: %s", errbuf);
	test_cond(sess_conv_lock(st, a1, ERR) == 0, "%s", errbuf);
	{
		struct sess_chunk ch = {0, 6, "f16", "fp1", "0123456789", 10, 0};

		test_cond(sess_turn_commit(st, a1, NULL, 0, &ch, ERR) == 0, "%s", errbuf);
	}
	test_cond(st_int(st, "SELECT count(*) FROM kv_chunks") == 1, "one chunk row");
	test_cond(sess_conv_delete(st, a1, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_get(st, a1, &c, ERR) == KVC_ENOTFOUND, "deleted");
	cnt = st_int(st, "SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM kv_chunks)"
	    " + (SELECT count(*) FROM locks)");
	test_cond(cnt == 0, "cascade left %lld rows", (long long)cnt);
	test_cond(sess_conv_delete(st, a1, ERR) == KVC_ENOTFOUND, "delete twice");
	test_cond(sess_check(st, ERR) == 0, "%s", errbuf);
	sess_close(st);

	/* Reopen: everything persisted. */
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_list(st, &v, &n, ERR) == 0 && n == 3, "reopened list");
	sess_conv_list_free(v, n);
	sess_close(st);
}

/* ---- snapshot chunks ---- */

struct collect {
	struct kvc_buf data;
	int ranges[64][2];
	int n;
	int stop_after;		/* return 99 after this many chunks; 0 = never */
};

static int
collect_chunk(void *arg, int pos0, int pos1, const void *blob, size_t len)
{
	struct collect *c = arg;

	if (c->n < 64) {
		c->ranges[c->n][0] = pos0;
		c->ranges[c->n][1] = pos1;
	}
	c->n++;
	kvc_buf_append(&c->data, blob, len);
	if (c->stop_after && c->n == c->stop_after)
		return 99;
	return 0;
}

static void
flip_byte(const char *db, int64_t conv, int pos0, int part, int offset)
{
	sqlite3 *h;
	sqlite3_blob *b;
	sqlite3_stmt *s;
	unsigned char x;
	int64_t row = -1;

	test_cond(sqlite3_open(db, &h) == SQLITE_OK, "raw open");
	sqlite3_prepare_v2(h, "SELECT id FROM kv_chunks WHERE conv_id = ?1 AND pos0 = ?2 "
	    "AND part = ?3", -1, &s, NULL);
	sqlite3_bind_int64(s, 1, conv);
	sqlite3_bind_int(s, 2, pos0);
	sqlite3_bind_int(s, 3, part);
	if (sqlite3_step(s) == SQLITE_ROW)
		row = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	test_cond(row >= 0, "chunk row at %d part %d", pos0, part);
	if (sqlite3_blob_open(h, "main", "kv_chunks", "data", row, 1, &b) == SQLITE_OK) {
		sqlite3_blob_read(b, &x, 1, offset);
		x ^= 0x10;
		sqlite3_blob_write(b, &x, 1, offset);
		sqlite3_blob_close(b);
	}
	sqlite3_close(h);
}

static void
test_chunks(void)
{
	const char *db = path_in("chunks.db");
	/* Chunk sizes around the 1000-byte part limit: one, several, exact, tiny. */
	static const size_t lens[] = {2500, 1000, 1, 999, 1001, 4321};
	static const int ends[] = {10, 17, 18, 30, 31, 50};
	struct sess_store *st;
	struct collect col = {0};
	struct kvc_buf want = {0};
	struct sess_msg m[2];
	int32_t ids[1] = {7};
	unsigned char *blob;
	int64_t conv, other;
	int i, n_pos, ret, prev = 0, n;
	struct sess_msg *got;

	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	sess_set_part_max(st, 1000);
	test_cond(sess_conv_create(st, "chunky", "model-A", "chatml", NULL, NULL, &conv, ERR) == 0,
	    "%s", errbuf);
	test_cond(sess_conv_create(st, "other", "model-A", "chatml", NULL, NULL, &other, ERR) == 0,
	    "%s", errbuf);
	memset(m, 0, sizeof m);
	m[0].role = SESS_USER;
	m[0].text = "q";
	m[0].ids = ids;
	m[0].n_ids = 1;
	m[1].role = SESS_ASSISTANT;
	m[1].text = "a";
	m[1].ids = ids;
	m[1].n_ids = 1;
	for (i = 0; i < 6; i++) {
		struct sess_chunk c = {prev, ends[i], "f16", "model-A", NULL, lens[i], 0};

		blob = malloc(lens[i]);
		gen_bytes(blob, lens[i], 100 + (uint64_t)i);
		c.blob = blob;
		kvc_buf_append(&want, blob, lens[i]);
		ret = sess_turn_commit(st, conv, m, 2, &c, ERR);
		test_cond(ret == 0, "turn %d: %s", i, errbuf);
		free(blob);
		prev = ends[i];
	}
	test_cond(st_int(st, "SELECT count(*) FROM kv_chunks") == 3 + 1 + 1 + 1 + 2 + 5,
	    "rows per part: %lld", (long long)st_int(st, "SELECT count(*) FROM kv_chunks"));

	/* Round trip: byte-identical, contiguous, in order. */
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 0, "%s", errbuf);
	test_cond(col.n == 6 && n_pos == 50, "%d chunks to %d", col.n, n_pos);
	for (i = 0, prev = 0; i < col.n && i < 6; prev = ends[i], i++)
		test_cond(col.ranges[i][0] == prev && col.ranges[i][1] == ends[i], "range %d", i);
	test_cond(col.data.n == want.n && memcmp(col.data.p, want.p, want.n) == 0, "bytes");
	kvc_buf_free(&col.data);
	memset(&col, 0, sizeof col);

	/* A callback error stops the walk and is returned. */
	col.stop_after = 2;
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 99 && col.n == 2 && n_pos == 10, "stop: %d %d %d", ret, col.n, n_pos);
	kvc_buf_free(&col.data);
	memset(&col, 0, sizeof col);

	/* Another model or cache type: not found, nothing delivered. */
	ret = sess_chunks_load(st, conv, "model-B", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_ENOTFOUND && col.n == 0 && strstr(errbuf, "another model"),
	    "model mismatch: %d %s", ret, errbuf);
	ret = sess_chunks_load(st, conv, "model-A", "f32", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_ENOTFOUND && col.n == 0 && strstr(errbuf, "f32"),
	    "type mismatch: %d %s", ret, errbuf);
	/* No snapshot: nothing to restore, not an error. */
	ret = sess_chunks_load(st, other, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 0 && col.n == 0 && n_pos == 0, "empty snapshot");

	/* Refused commits leave nothing behind, not even the messages. */
	{
		struct sess_chunk gap = {51, 60, "f16", "model-A", "xx", 2, 0};
		struct sess_chunk back = {40, 60, "f16", "model-A", "xx", 2, 0};
		struct sess_chunk mixed = {50, 60, "f32", "model-A", "xx", 2, 0};
		struct sess_chunk empty = {50, 50, "f16", "model-A", "xx", 2, 0};

		test_cond(sess_turn_commit(st, conv, m, 2, &gap, ERR) == KVC_EINVAL &&
		    strstr(errbuf, "[51, 60)") && strstr(errbuf, "ends at 50"), "gap: %s", errbuf);
		test_cond(sess_turn_commit(st, conv, m, 2, &back, ERR) == KVC_EINVAL, "overlap");
		test_cond(sess_turn_commit(st, conv, m, 2, &mixed, ERR) == KVC_EINVAL, "mixed");
		test_cond(sess_turn_commit(st, conv, m, 2, &empty, ERR) == KVC_EINVAL, "empty");
		test_cond(st_int(st, "SELECT count(*) FROM messages") == 12, "no partial turn");
		test_cond(st_int(st, "SELECT count(*) FROM kv_chunks") == 13, "no partial chunk");
	}

	/* Rewind to 3 turns and position 25: chunk [18, 30) straddles and goes whole. */
	test_cond(sess_rewind(st, conv, 6, 25, ERR) == 0, "%s", errbuf);
	test_cond(sess_msgs_load(st, conv, &got, &n, ERR) == 0 && n == 6, "kept 6 messages");
	sess_msgs_free(got, n);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 0 && col.n == 3 && n_pos == 18, "after rewind: %d chunks to %d",
	    col.n, n_pos);
	test_cond(col.data.n == 2500 + 1000 + 1 && memcmp(col.data.p, want.p, col.data.n) == 0,
	    "kept bytes");
	kvc_buf_free(&col.data);
	memset(&col, 0, sizeof col);
	/* Re-snapshot from the last kept chunk's end, then continue. */
	{
		struct sess_chunk c1 = {18, 25, "f16", "model-A", "seven b", 7, 0};
		struct sess_chunk c2 = {25, 40, "f16", "model-A", "fifteen bytes!!", 15, 0};

		test_cond(sess_turn_commit(st, conv, NULL, 0, &c1, ERR) == 0, "%s", errbuf);
		test_cond(sess_turn_commit(st, conv, m, 2, &c2, ERR) == 0, "%s", errbuf);
	}
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 0 && col.n == 5 && n_pos == 40, "re-snapshot: %d %d", col.n, n_pos);
	test_cond(col.data.n == 3501 + 22 && memcmp(col.data.p + 3501, "seven bfifteen bytes!!",
	    22) == 0, "re-snapshot bytes");
	kvc_buf_free(&col.data);
	memset(&col, 0, sizeof col);
	test_cond(sess_check(st, ERR) == 0, "%s", errbuf);
	sess_close(st);

	/* One flipped byte in the second part of chunk [0, 10): detected, named. */
	flip_byte(db, conv, 0, 1, 500);
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_ECORRUPT && strstr(errbuf, "[0, 10)") && strstr(errbuf, "chunky") &&
	    strstr(errbuf, "checksum"), "flip: %d %s", ret, errbuf);
	test_cond(col.n == 0 && n_pos == 0, "nothing before the bad chunk");
	test_cond(sess_check(st, ERR) == KVC_ECORRUPT, "check sees it");
	sess_close(st);
	flip_byte(db, conv, 0, 1, 500);		/* undo */
	flip_byte(db, conv, 25, 0, 3);
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_ECORRUPT && strstr(errbuf, "[25, 40)"), "late flip: %s", errbuf);
	test_cond(col.n == 4 && n_pos == 25, "good prefix kept: %d chunks to %d", col.n, n_pos);
	kvc_buf_free(&col.data);
	memset(&col, 0, sizeof col);
	sess_close(st);
	flip_byte(db, conv, 25, 0, 3);		/* undo */

	/* A lost part and a gap are corruption too. */
	sql_exec(db, "DELETE FROM kv_chunks WHERE pos0 = 0 AND part = 2");
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_ECORRUPT && strstr(errbuf, "[0, 10)"), "lost part: %s", errbuf);
	sess_close(st);
	sql_exec(db, "DELETE FROM kv_chunks WHERE pos0 = 0");
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_ECORRUPT && strstr(errbuf, "position 0"), "gap: %s", errbuf);
	test_cond(sess_chunks_clear(st, conv, ERR) == 0, "%s", errbuf);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 0 && col.n == 0 && n_pos == 0, "cleared");
	test_cond(st_int(st, "SELECT count(*) FROM messages") == 8, "messages survive a clear");
	/* After a clear, another model may start a fresh snapshot. */
	{
		struct sess_chunk c = {0, 5, "f32", "model-B", "abcde", 5, 0};

		struct sess_chunk nothing = {5, 6, "f32", "model-B", NULL, 0, 0};

		test_cond(sess_turn_commit(st, conv, NULL, 0, &c, ERR) == 0, "%s", errbuf);
		test_cond(sess_turn_commit(st, conv, NULL, 0, &nothing, ERR) == 0, "%s", errbuf);
	}
	kvc_buf_free(&col.data);
	memset(&col, 0, sizeof col);
	ret = sess_chunks_load(st, conv, "model-B", "f32", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 0 && col.n == 2 && n_pos == 6 && col.data.n == 5 &&
	    memcmp(col.data.p, "abcde", 5) == 0, "zero-length chunk: %d %d %d", ret, col.n, n_pos);
	test_cond(sess_rewind(st, 99999, 0, 0, ERR) == KVC_ENOTFOUND, "rewind missing");
	test_cond(sess_rewind(st, conv, -1, 0, ERR) == KVC_EINVAL, "rewind negative");

	/*
	 * Replace the last reply (/retry): the snapshot is [0, 5) [5, 6) and 8
	 * messages. Keep 7 and position 5: one transaction drops the reply and
	 * the chunk past 5 and adds the new reply and its chunk [5, 9). A
	 * refused chunk first (it does not continue at 5): nothing changes.
	 */
	{
		struct sess_msg r = m[1];
		struct sess_chunk bad = {6, 9, "f32", "model-B", "wxyz", 4, 0};
		struct sess_chunk good = {5, 9, "f32", "model-B", "wxyz", 4, 0};

		r.text = "new reply";
		ret = sess_turn_replace(st, conv, 7, 5, &r, 1, &bad, ERR);
		test_cond(ret == KVC_EINVAL && strstr(errbuf, "ends at 5"), "replace, bad chunk: %d %s",
		    ret, errbuf);
		test_cond(sess_msgs_load(st, conv, &got, &n, ERR) == 0 && n == 8 &&
		    strcmp(got[7].text, "a") == 0, "refused replace keeps the old reply (%d)", n);
		sess_msgs_free(got, n);
		test_cond(st_int(st, "SELECT max(pos1) FROM kv_chunks") == 6 &&
		    st_int(st, "SELECT count(*) FROM kv_chunks") == 2, "refused replace keeps the chunks");
		ret = sess_turn_replace(st, conv, 7, 5, &r, 1, &good, ERR);
		test_cond(ret == 0, "replace: %s", errbuf);
		test_cond(sess_msgs_load(st, conv, &got, &n, ERR) == 0 && n == 8 &&
		    strcmp(got[7].text, "new reply") == 0 && strcmp(got[6].text, "q") == 0,
		    "replaced reply (%d)", n);
		sess_msgs_free(got, n);
		kvc_buf_free(&col.data);
		memset(&col, 0, sizeof col);
		ret = sess_chunks_load(st, conv, "model-B", "f32", 0, collect_chunk, &col, &n_pos,
		    ERR);
		test_cond(ret == 0 && col.n == 2 && n_pos == 9 && col.data.n == 9 &&
		    memcmp(col.data.p, "abcdewxyz", 9) == 0, "replaced chunks: %d %d %d", ret, col.n, n_pos);
		test_cond(sess_turn_replace(st, conv, -1, 0, &r, 1, NULL, ERR) == KVC_EINVAL,
		    "replace negative");
		test_cond(sess_turn_replace(st, 99999, 0, 0, &r, 1, NULL, ERR) == KVC_ENOTFOUND,
		    "replace missing");
	}
	test_cond(sess_check(st, ERR) == 0, "%s", errbuf);
	sess_close(st);
	kvc_buf_free(&want);
	kvc_buf_free(&col.data);
}

/* ---- schema, foreign and broken files ---- */

static void
test_schema(void)
{
	const char *db = path_in("schema.db");
	struct sess_store *st;
	char junk[8192];
	int64_t conv;
	int ret, i;

	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	sess_close(st);
	test_cond(sql_int(db, "PRAGMA user_version") == SESS_SCHEMA_VERSION, "version on disk");
	test_cond(sql_int(db, "PRAGMA application_id") == 0x6b766331, "application id");

	/* A newer schema is refused, not damaged. */
	sql_exec(db, "PRAGMA user_version = 99");
	st = (struct sess_store *)1;
	ret = sess_open(&st, db, ERR);
	test_cond(ret == KVC_EUNSUPPORTED && st == NULL && strstr(errbuf, "newer") &&
	    strstr(errbuf, "99"), "newer: %d %s", ret, errbuf);
	test_cond(sql_int(db, "PRAGMA user_version") == 99, "left alone");

	/* Plain text. */
	for (i = 0; i < (int)sizeof junk; i++)
		junk[i] = "this is not a database\n"[i % 23];
	write_file(path_in("text.db"), junk, sizeof junk);
	ret = sess_open(&st, path_in("text.db"), ERR);
	test_cond(ret == KVC_EFORMAT && strstr(errbuf, "not a SQLite database"), "text: %d %s",
	    ret, errbuf);

	/* Somebody else's SQLite database. */
	sql_exec(path_in("foreign.db"), "CREATE TABLE customers (name TEXT)");
	ret = sess_open(&st, path_in("foreign.db"), ERR);
	test_cond(ret == KVC_EFORMAT && strstr(errbuf, "not a kvchat database"), "foreign: %d %s",
	    ret, errbuf);
	sql_exec(path_in("appid.db"), "PRAGMA application_id = 1234");
	ret = sess_open(&st, path_in("appid.db"), ERR);
	test_cond(ret == KVC_EFORMAT && strstr(errbuf, "not a kvchat database"), "app id: %s",
	    errbuf);

	/* An empty file is a new database. */
	write_file(path_in("empty.db"), "", 0);
	ret = sess_open(&st, path_in("empty.db"), ERR);
	test_cond(ret == 0, "empty file: %s", errbuf);
	if (ret == 0)
		sess_close(st);

	/* A damaged schema page: an error, never a crash. */
	ret = sess_open(&st, path_in("broken.db"), ERR);
	test_cond(ret == 0, "%s", errbuf);
	if (ret == 0) {
		sess_conv_create(st, "x", "", "", NULL, NULL, &conv, ERR);
		sess_close(st);
	}
	{
		int fd = open(path_in("broken.db"), O_WRONLY);

		memset(junk, 0xA5, sizeof junk);
		test_cond(fd >= 0 && pwrite(fd, junk, 3000, 100) == 3000, "damage");
		if (fd >= 0)
			close(fd);
	}
	ret = sess_open(&st, path_in("broken.db"), ERR);
	test_cond(ret == KVC_ECORRUPT || ret == KVC_EFORMAT, "damaged: %d %s", ret, errbuf);
	if (ret == 0)
		sess_close(st);

	/* A parent that cannot be a directory. */
	write_file(path_in("plainfile"), "x", 1);
	ret = sess_open(&st, path_in("plainfile/sub/sessions.db"), ERR);
	test_cond(ret == KVC_EIO && strstr(errbuf, "cannot create directory"), "mkdir: %s",
	    errbuf);
	ret = sess_open(&st, "", ERR);
	test_cond(ret == KVC_EINVAL, "empty path");
}

/* ---- the context window: its own column on conversations and chunks ---- */

static void
test_window(void)
{
	const char *db = path_in("window.db");
	struct sess_store *st;
	struct collect col = {0};
	struct sess_conv c;
	int64_t conv;
	int n_pos, ret;

	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_create(st, "windowed", "model-A", "chatml", NULL, "temp=0.5", &conv,
	    ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_get(st, conv, &c, ERR) == 0 && c.window == 0, "new: window 0");
	sess_conv_clear(&c);
	test_cond(sess_conv_set_window(st, conv, 4, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_get(st, conv, &c, ERR) == 0 && c.window == 4 &&
	    strcmp(c.settings, "temp=0.5") == 0, "window 4, settings untouched");
	sess_conv_clear(&c);
	test_cond(sess_conv_set_window(st, conv, -1, ERR) == KVC_EINVAL, "negative window");
	test_cond(sess_conv_set_window(st, 99999, 1, ERR) == KVC_ENOTFOUND, "window of nobody");

	/* A snapshot over window 2 is not one over window 3, as with another model. */
	{
		struct sess_chunk c1 = {0, 5, "f16", "model-A", "abcde", 5, 2};
		struct sess_chunk c2 = {5, 7, "f16", "model-A", "fg", 2, 3};
		struct sess_chunk c3 = {5, 7, "f16", "model-A", "fg", 2, 2};
		struct sess_chunk neg = {5, 7, "f16", "model-A", "fg", 2, -1};

		test_cond(sess_turn_commit(st, conv, NULL, 0, &c1, ERR) == 0, "%s", errbuf);
		test_cond(sess_turn_commit(st, conv, NULL, 0, &c2, ERR) == KVC_EINVAL &&
		    strstr(errbuf, "window"), "continuation over another window: %s", errbuf);
		test_cond(sess_turn_commit(st, conv, NULL, 0, &neg, ERR) == KVC_EINVAL,
		    "negative chunk window");
		test_cond(sess_turn_commit(st, conv, NULL, 0, &c3, ERR) == 0, "%s", errbuf);
	}
	test_cond(st_int(st, "SELECT count(*) FROM kv_chunks WHERE window = 2") == 2,
	    "window on disk");
	ret = sess_chunks_load(st, conv, "model-A", "f16", 3, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_ENOTFOUND && col.n == 0 && n_pos == 0 && strstr(errbuf, "window"),
	    "window mismatch: %d %s", ret, errbuf);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_ENOTFOUND && col.n == 0, "window 0 asked, 2 stored: %d", ret);
	ret = sess_chunks_load(st, conv, "model-A", "f16", -1, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_EINVAL, "negative window asked: %d", ret);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 2, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 0 && col.n == 2 && n_pos == 7 && col.data.n == 7 &&
	    memcmp(col.data.p, "abcdefg", 7) == 0, "same window: %d %d %d %s", ret, col.n, n_pos,
	    errbuf);
	kvc_buf_free(&col.data);
	memset(&col, 0, sizeof col);
	/*
	 * A window moved in memory is stored with the chunk made over it, in
	 * one transaction: chunks of other windows go, those of this one stay.
	 */
	{
		struct sess_chunk w5 = {0, 3, "f16", "model-A", "xyz", 3, 5};
		struct sess_chunk w5b = {3, 4, "f16", "model-A", "w", 1, 5};
		struct sess_chunk w5c = {3, 5, "f16", "model-A", "uv", 2, 5};
		struct sess_chunk neg = {3, 4, "f16", "model-A", "w", 1, -1};

		test_cond(sess_turn_rekey(st, conv, -1, 0, NULL, 0, &w5, 5, ERR) == 0, "%s", errbuf);
		test_cond(sess_conv_get(st, conv, &c, ERR) == 0 && c.window == 5, "rekeyed: window %lld",
		    (long long)c.window);
		sess_conv_clear(&c);
		test_cond(st_int(st, "SELECT count(*) FROM kv_chunks WHERE window <> 5") == 0 &&
		    st_int(st, "SELECT count(*) FROM kv_chunks") == 1, "other windows' chunks gone");
		test_cond(sess_turn_rekey(st, conv, -1, 0, NULL, 0, &w5b, 5, ERR) == 0, "%s", errbuf);
		test_cond(st_int(st, "SELECT count(*) FROM kv_chunks WHERE window = 5") == 2,
		    "the window's own chunks stay");
		/* with a rewind (/retry): the chunk past n_pos 3 replaced */
		test_cond(sess_turn_rekey(st, conv, 0, 3, NULL, 0, &w5c, 5, ERR) == 0, "%s", errbuf);
		ret = sess_chunks_load(st, conv, "model-A", "f16", 5, collect_chunk, &col, &n_pos, ERR);
		test_cond(ret == 0 && col.n == 2 && n_pos == 5 && col.data.n == 5 &&
		    memcmp(col.data.p, "xyzuv", 5) == 0, "rekeyed snapshot: %d %d %d %s", ret, col.n,
		    n_pos, errbuf);
		kvc_buf_free(&col.data);
		memset(&col, 0, sizeof col);
		test_cond(sess_turn_rekey(st, conv, -1, 0, NULL, 0, &w5b, -1, ERR) == KVC_EINVAL,
		    "negative window");
		test_cond(sess_turn_rekey(st, conv, -1, 0, NULL, 0, &neg, 6, ERR) == KVC_EINVAL &&
		    sess_conv_get(st, conv, &c, ERR) == 0 && c.window == 5,
		    "a refused chunk: the window unchanged");
		sess_conv_clear(&c);
		/* the older tests below expect window 2's two chunks */
		test_cond(sess_turn_rekey(st, conv, 0, 0, NULL, 0, NULL, 2, ERR) == 0, "%s", errbuf);
		{
			struct sess_chunk c1 = {0, 5, "f16", "model-A", "abcde", 5, 2};
			struct sess_chunk c3 = {5, 7, "f16", "model-A", "fg", 2, 2};

			test_cond(sess_turn_commit(st, conv, NULL, 0, &c1, ERR) == 0 &&
			    sess_turn_commit(st, conv, NULL, 0, &c3, ERR) == 0, "%s", errbuf);
		}
	}
	/* A snapshot mixing windows (never written so) is refused whole. */
	sqlite3_exec(sess_sqlite(st), "UPDATE kv_chunks SET window = 3 WHERE pos0 = 0", NULL, NULL,
	    NULL);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 2, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_ENOTFOUND && col.n == 0 && strstr(errbuf, "mixes"), "mixed: %d %s",
	    ret, errbuf);
	test_cond(sess_check(st, ERR) == 0, "%s", errbuf);
	sess_close(st);
	kvc_buf_free(&col.data);
}

/*
 * An /undo that chooses the window again and a new system prompt: the
 * change, the window and the new cache's chunk in one transaction, and a
 * refused chunk leaves everything as it was.
 */
static void
test_rewindow(void)
{
	const char *db = path_in("rewindow.db");
	struct sess_store *st;
	struct collect col = {0};
	struct sess_conv c;
	struct sess_msg m[4];
	int32_t ids[4][2] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}}, sys_ids[3] = {9, 1, 2};
	struct sess_chunk all = {0, 8, "f16", "model-A", "abcdefgh", 8, 0};
	struct sess_chunk w3 = {0, 2, "f16", "model-A", "xy", 2, 3};
	struct sess_chunk bad = {1, 2, "f16", "model-A", "y", 1, 3};
	struct sess_chunk w3s = {0, 3, "f16", "model-A", "pqr", 3, 3};
	int64_t conv;
	int n_pos, ret;

	memset(m, 0, sizeof m);
	for (int i = 0; i < 4; i++) {
		m[i].role = i % 2 ? SESS_ASSISTANT : SESS_USER;
		m[i].text = i % 2 ? "answer" : "question";
		m[i].ids = ids[i];
		m[i].n_ids = 2;
	}
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_create(st, "rewindow", "model-A", "chatml", "old", "", &conv,
	    ERR) == 0, "%s", errbuf);
	test_cond(sess_turn_commit(st, conv, m, 4, &all, ERR) == 0, "%s", errbuf);
	/* a chunk that does not start at 0 is refused: messages, window, chunks unchanged */
	test_cond(sess_rewind_window(st, conv, 2, 3, &bad, ERR) == KVC_EINVAL, "refused chunk");
	test_cond(st_int(st, "SELECT count(*) FROM messages") == 4 &&
	    st_int(st, "SELECT window FROM conversations") == 0 &&
	    st_int(st, "SELECT sum(pos1) FROM kv_chunks WHERE window = 0") == 8,
	    "after a refused rewind nothing changed");
	test_cond(sess_rewind_window(st, conv, 2, 3, &w3, ERR) == 0, "%s", errbuf);
	test_cond(st_int(st, "SELECT count(*) FROM messages") == 2 &&
	    st_int(st, "SELECT window FROM conversations") == 3, "rewound, window 3");
	ret = sess_chunks_load(st, conv, "model-A", "f16", 3, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 0 && col.n == 1 && n_pos == 2 && col.data.n == 2 &&
	    memcmp(col.data.p, "xy", 2) == 0, "the new window's chunk: %d %d %d %s", ret, col.n,
	    n_pos, errbuf);
	kvc_buf_free(&col.data);
	memset(&col, 0, sizeof col);
	/* a new system prompt: refused with a bad chunk, then stored with its chunk */
	test_cond(sess_conv_replace_system(st, conv, "new", sys_ids, 3, &bad, 3, ERR) ==
	    KVC_EINVAL, "refused system chunk");
	test_cond(sess_conv_get(st, conv, &c, ERR) == 0 && strcmp(c.system, "old") == 0 &&
	    st_int(st, "SELECT sum(pos1) FROM kv_chunks") == 2, "after a refused one: unchanged");
	sess_conv_clear(&c);
	test_cond(sess_conv_replace_system(st, conv, "new", sys_ids, 3, &w3s, 3, ERR) == 0, "%s",
	    errbuf);
	test_cond(sess_conv_get(st, conv, &c, ERR) == 0 && strcmp(c.system, "new") == 0 &&
	    c.window == 3, "the new prompt, window 3");
	sess_conv_clear(&c);
	ret = sess_chunks_load(st, conv, "model-A", "f16", 3, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 0 && col.n == 1 && n_pos == 3 && memcmp(col.data.p, "pqr", 3) == 0,
	    "the new stream's chunk alone: %d %d %d %s", ret, col.n, n_pos, errbuf);
	test_cond(st_int(st, "SELECT length(tokens) FROM messages ORDER BY seq LIMIT 1") == 12,
	    "the first message's new ids");
	/* without a chunk (the engine could not save one): the old chunks still go */
	test_cond(sess_rewind_window(st, conv, 0, 0, NULL, ERR) == 0 &&
	    st_int(st, "SELECT count(*) FROM kv_chunks") == 0 &&
	    st_int(st, "SELECT count(*) FROM messages") == 0, "/clear: %s", errbuf);
	test_cond(sess_check(st, ERR) == 0, "%s", errbuf);
	sess_close(st);
	kvc_buf_free(&col.data);
}

/* The initial schema as version 1 shipped it (migrations[0] of db.c). */
static const char schema_v1[] =
	"CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, "
	"model_fp TEXT NOT NULL, template TEXT NOT NULL, system TEXT, settings TEXT NOT NULL, "
	"created INTEGER NOT NULL, updated INTEGER NOT NULL, touched INTEGER NOT NULL);"
	"CREATE INDEX conversations_title ON conversations(title, touched);"
	"CREATE INDEX conversations_touched ON conversations(touched);"
	"CREATE TABLE messages (id INTEGER PRIMARY KEY, "
	"conv_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE, "
	"seq INTEGER NOT NULL, role INTEGER NOT NULL CHECK (role BETWEEN 0 AND 2), "
	"text TEXT NOT NULL, tokens BLOB NOT NULL, interrupted INTEGER NOT NULL DEFAULT 0, "
	"ttft_ms REAL NOT NULL DEFAULT 0, prefill_tokens INTEGER NOT NULL DEFAULT 0, "
	"reused_tokens INTEGER NOT NULL DEFAULT 0, prefill_tps REAL NOT NULL DEFAULT 0, "
	"gen_tokens INTEGER NOT NULL DEFAULT 0, decode_tps REAL NOT NULL DEFAULT 0, "
	"created INTEGER NOT NULL, UNIQUE (conv_id, seq));"
	"CREATE TABLE kv_chunks (id INTEGER PRIMARY KEY, "
	"conv_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE, "
	"pos0 INTEGER NOT NULL, pos1 INTEGER NOT NULL, part INTEGER NOT NULL, "
	"n_parts INTEGER NOT NULL, kv_type TEXT NOT NULL, model_fp TEXT NOT NULL, "
	"len INTEGER NOT NULL, checksum INTEGER NOT NULL, data BLOB NOT NULL, "
	"UNIQUE (conv_id, pos0, part));"
	"CREATE TABLE locks (conv_id INTEGER PRIMARY KEY REFERENCES conversations(id) "
	"ON DELETE CASCADE, pid INTEGER NOT NULL, host TEXT NOT NULL, boot_id TEXT NOT NULL, "
	"start_time INTEGER NOT NULL, acquired INTEGER NOT NULL);"
	"PRAGMA user_version = 1;"
	"PRAGMA application_id = 1802920753;";	/* "kvc1" */

/* A version 1 chunk row, checksummed as the store does. */
static void
v1_chunk(sqlite3 *h, int64_t conv, int pos0, int pos1, const char *fp, const char *data)
{
	sqlite3_stmt *s;
	size_t n = strlen(data);

	sqlite3_prepare_v2(h, "INSERT INTO kv_chunks (conv_id, pos0, pos1, part, n_parts, kv_type, "
	    "model_fp, len, checksum, data) VALUES (?1, ?2, ?3, 0, 1, 'f16', ?4, ?5, ?6, ?7)", -1,
	    &s, NULL);
	sqlite3_bind_int64(s, 1, conv);
	sqlite3_bind_int(s, 2, pos0);
	sqlite3_bind_int(s, 3, pos1);
	sqlite3_bind_text(s, 4, fp, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 5, (int64_t)n);
	sqlite3_bind_int64(s, 6, (int64_t)sess_checksum(data, n));
	sqlite3_bind_blob(s, 7, data, (int)n, SQLITE_STATIC);
	test_cond(sqlite3_step(s) == SQLITE_DONE, "v1 chunk: %s", sqlite3_errmsg(h));
	sqlite3_finalize(s);
}

/* Version 1 kept the window in band; opening moves it into the columns. */
static void
test_migrate_v1(void)
{
	const char *db = path_in("v1.db");
	struct sess_store *st;
	struct collect col = {0};
	struct sess_conv c;
	sqlite3 *h;
	int n_pos, ret;

	test_cond(sqlite3_open(db, &h) == SQLITE_OK, "raw open");
	test_cond(sqlite3_exec(h, schema_v1, NULL, NULL, NULL) == SQLITE_OK, "v1 schema: %s",
	    sqlite3_errmsg(h));
	test_cond(sqlite3_exec(h, "INSERT INTO conversations VALUES "
	    "(1, 'windowed', 'abc', 'chatml', NULL, 'temp=0.7;top_k=40;seed=7;window=3', 1, 1, 1),"
	    "(2, 'whole', 'abc', 'chatml', NULL, 'temp=0.7;seed=1', 1, 1, 2)",
	    NULL, NULL, NULL) == SQLITE_OK, "v1 rows: %s", sqlite3_errmsg(h));
	v1_chunk(h, 1, 0, 3, "abc:w3", "hel");
	v1_chunk(h, 1, 3, 5, "abc:w3", "lo");
	v1_chunk(h, 2, 0, 2, "abc", "hi");
	sqlite3_close(h);

	ret = sess_open(&st, db, ERR);
	test_cond(ret == 0, "open v1: %s", errbuf);
	if (ret != 0)
		return;
	test_cond(st_int(st, "PRAGMA user_version") == SESS_SCHEMA_VERSION, "migrated: %lld",
	    (long long)st_int(st, "PRAGMA user_version"));
	test_cond(sess_conv_get(st, 1, &c, ERR) == 0 && c.window == 3 &&
	    strcmp(c.settings, "temp=0.7;top_k=40;seed=7") == 0, "window out of the settings");
	sess_conv_clear(&c);
	test_cond(sess_conv_get(st, 2, &c, ERR) == 0 && c.window == 0 &&
	    strcmp(c.settings, "temp=0.7;seed=1") == 0, "no window: settings as they were");
	sess_conv_clear(&c);
	test_cond(st_int(st, "SELECT count(*) FROM kv_chunks WHERE model_fp = 'abc' AND "
	    "window = 3") == 2, "window out of the chunks' fingerprint");
	test_cond(st_int(st, "SELECT count(*) FROM kv_chunks WHERE conv_id = 2 AND "
	    "model_fp = 'abc' AND window = 0") == 1, "unwindowed chunk as it was");
	ret = sess_chunks_load(st, 1, "abc", "f16", 3, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == 0 && col.n == 2 && n_pos == 5 && col.data.n == 5 &&
	    memcmp(col.data.p, "hello", 5) == 0, "migrated snapshot loads: %d %s", ret, errbuf);
	kvc_buf_free(&col.data);
	memset(&col, 0, sizeof col);
	ret = sess_chunks_load(st, 1, "abc:w3", "f16", 0, collect_chunk, &col, &n_pos, ERR);
	test_cond(ret == KVC_ENOTFOUND && col.n == 0, "the old key is gone: %d", ret);
	test_cond(sess_check(st, ERR) == 0, "%s", errbuf);
	sess_close(st);
	/* Once migrated, opening again changes nothing. */
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_get(st, 1, &c, ERR) == 0 && c.window == 3, "reopened");
	sess_conv_clear(&c);
	sess_close(st);
	kvc_buf_free(&col.data);
}

/* ---- failures inside a transaction ---- */

static void
test_failures(void)
{
	const char *db = path_in("full.db");
	struct sess_store *st;
	sqlite3 *h;
	int64_t conv, pages;
	int ret, t, n;
	struct sess_msg *got;
	double t0;

	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_create(st, "full", "model-A", "", NULL, NULL, &conv, ERR) == 0,
	    "%s", errbuf);
	for (t = 0; t < 3; t++)
		test_cond(commit_turn(st, conv, t, 300, 5, 7, ERR) == 0, "%s", errbuf);

	/* Disk full in the middle of the chunk: the whole turn goes, the rest stays. */
	pages = st_int(st, "PRAGMA page_count");
	{
		char sql[64];

		snprintf(sql, sizeof sql, "PRAGMA max_page_count = %lld", (long long)pages + 3);
		sqlite3_exec(sess_sqlite(st), sql, NULL, NULL, NULL);
	}
	ret = commit_turn(st, conv, 3, 100000, 1, 7, ERR);
	test_cond(ret != 0 && strstr(errbuf, "full") && strstr(errbuf, "nothing"),
	    "disk full: %d %s", ret, errbuf);
	sqlite3_exec(sess_sqlite(st), "PRAGMA max_page_count = 1073741823", NULL, NULL, NULL);
	test_cond(verify_script(st, conv, 300, 5, 7) == 3, "earlier turns intact");
	test_cond(sess_check(st, ERR) == 0, "%s", errbuf);
	/* And the store keeps working. */
	test_cond(commit_turn(st, conv, 3, 300, 5, 7, ERR) == 0, "%s", errbuf);
	test_cond(verify_script(st, conv, 300, 5, 7) == 4, "turn after disk full");

	/* Another connection holds the write lock: a clear EBUSY, nothing written. */
	test_cond(sqlite3_open(db, &h) == SQLITE_OK, "second connection");
	test_cond(sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK, "lock");
	sqlite3_busy_timeout(sess_sqlite(st), 20);
	t0 = kvc_now();
	ret = commit_turn(st, conv, 4, 300, 5, 7, ERR);
	test_cond(ret == KVC_EBUSY && strstr(errbuf, "locked by another process"),
	    "busy: %d %s", ret, errbuf);
	test_cond(kvc_now() - t0 < 5, "busy gives up");
	sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(h);
	test_cond(sess_msgs_load(st, conv, &got, &n, ERR) == 0 && n == 8, "still 4 turns");
	sess_msgs_free(got, n);
	sess_close(st);
}

/* ---- processes ---- */

static void
wait_child(pid_t pid, const char *what)
{
	int status = 0;

	test_cond(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	    WEXITSTATUS(status) == 0, "%s: child status %d", what, status);
}

static void
test_locks(void)
{
	const char *db = path_in("locks.db");
	struct sess_store *st;
	int64_t conv, other;
	int to_child[2], to_parent[2], ret;
	char c = 0, want[64];
	pid_t pid;
	siginfo_t si;

	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	sess_conv_create(st, "shared", "", "", NULL, NULL, &conv, ERR);
	sess_conv_create(st, "free", "", "", NULL, NULL, &other, ERR);
	sess_close(st);	/* a connection must not cross fork() */

	if (pipe(to_child) != 0 || pipe(to_parent) != 0) {
		test_cond(0, "pipe");
		return;
	}
	pid = fork();
	if (pid == 0) {
		close(to_child[1]);
		close(to_parent[0]);
		if (sess_open(&st, db, ERR) != 0 || sess_conv_lock(st, conv, ERR) != 0)
			_exit(1);
		c = 'L';
		if (write(to_parent[1], &c, 1) != 1 || read(to_child[0], &c, 1) != 1)
			_exit(2);
		/* Exit holding the lock, as a crash would. */
		_exit(0);
	}
	close(to_child[0]);
	close(to_parent[1]);
	test_cond(read(to_parent[0], &c, 1) == 1 && c == 'L', "child locked");
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	ret = sess_conv_lock(st, conv, ERR);
	snprintf(want, sizeof want, "(pid %d)", (int)pid);
	test_cond(ret == KVC_EBUSY && strstr(errbuf, want) && strstr(errbuf, "'shared'") &&
	    strstr(errbuf, "another kvchat process"), "busy: %d %s", ret, errbuf);
	test_cond(sess_conv_delete(st, conv, ERR) == KVC_EBUSY, "no delete under a lock");
	test_cond(sess_conv_lock(st, other, ERR) == 0, "other conversation: %s", errbuf);
	test_cond(sess_conv_lock(st, other, ERR) == 0, "re-lock is fine: %s", errbuf);
	/* Let the child die; a zombie holds nothing. */
	test_cond(write(to_child[1], &c, 1) == 1, "release");
	memset(&si, 0, sizeof si);
	test_cond(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) == 0, "child exited");
	ret = sess_conv_lock(st, conv, ERR);
	test_cond(ret == 0, "stale lock taken over: %d %s", ret, errbuf);
	wait_child(pid, "lock holder");
	test_cond(conv == 1, "first conversation is id 1");
	test_cond(st_int(st, "SELECT pid FROM locks WHERE conv_id = 1") == (int64_t)getpid(),
	    "lock row names us");
	sess_conv_unlock(st, conv);
	test_cond(st_int(st, "SELECT count(*) FROM locks WHERE conv_id = 1") == 0, "unlocked");
	sess_close(st);
	test_cond(sql_int(db, "SELECT count(*) FROM locks") == 0, "close releases locks");
	close(to_child[1]);
	close(to_parent[0]);

	/* A lock row of a pid that does not exist is stale at once. */
	sql_exec(db, "INSERT INTO locks (conv_id, pid, host, boot_id, start_time, acquired) "
	    "VALUES (1, 999999999, 'ghost', '', 0, 0)");
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	ret = sess_conv_lock(st, conv, ERR);
	test_cond(ret == KVC_EBUSY && strstr(errbuf, "host ghost"), "other host: %s", errbuf);
	sess_close(st);
	sql_exec(db, "DELETE FROM locks");
	{
		char sql[400], host[256] = "";

		gethostname(host, sizeof host - 1);
		snprintf(sql, sizeof sql,
		    "INSERT INTO locks (conv_id, pid, host, boot_id, start_time, acquired) "
		    "VALUES (1, 999999999, '%s', '', 0, 0)", host);
		sql_exec(db, sql);
	}
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_lock(st, conv, ERR) == 0, "dead pid: %s", errbuf);
	sess_close(st);
}

/* Child body: creates conversation title, then n turns; exit status = failures. */
static void
writer(const char *db, const char *title, int n, uint64_t seed)
{
	struct sess_store *st;
	char err[512];
	int64_t conv;
	int t, bad = 0;

	if (sess_open(&st, db, err, sizeof err) != 0 ||
	    sess_conv_create(st, title, "model-A", "", NULL, NULL, &conv, err, sizeof err) != 0 ||
	    sess_conv_lock(st, conv, err, sizeof err) != 0) {
		fprintf(stderr, "writer: %s\n", err);
		_exit(100);
	}
	for (t = 0; t < n; t++) {
		if (commit_turn(st, conv, t, 16, 20, seed, err, sizeof err) != 0) {
			fprintf(stderr, "writer turn %d: %s\n", t, err);
			bad++;
		}
	}
	sess_close(st);
	_exit(bad > 99 ? 99 : bad);
}

static void
test_two_writers(void)
{
	const char *db = path_in("two.db");
	struct sess_store *st;
	int64_t a, b;
	pid_t pa, pb;
	double t0 = kvc_now();

	/* Both create the database at once: migration must not race either. */
	pa = fork();
	if (pa == 0)
		writer(db, "left", 200, 1000);
	pb = fork();
	if (pb == 0)
		writer(db, "right", 200, 2000);
	wait_child(pa, "writer a");
	wait_child(pb, "writer b");
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	test_cond(sess_check(st, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_find(st, "left", &a, ERR) == 0, "%s", errbuf);
	test_cond(sess_conv_find(st, "right", &b, ERR) == 0, "%s", errbuf);
	test_cond(verify_script(st, a, 16, 20, 1000) == 200, "all of a");
	test_cond(verify_script(st, b, 16, 20, 2000) == 200, "all of b");
	sess_close(st);
	printf("two writers x 200 turns: %.2f s\n", kvc_now() - t0);
}

/*
 * SIGKILL a committing child at random moments. Each child continues the
 * conversation where the database says it stands and reports every
 * acknowledged turn on a pipe; after each kill the database must hold every
 * acknowledged turn (and at most one more), messages and snapshot agreeing.
 */
static void
test_crash(unsigned seed)
{
	const char *db = path_in("crash.db");
	struct sess_store *st;
	int64_t conv;
	int iter, n_turns = 0, max_turns = 0, kills_mid = 0;

	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	sess_conv_create(st, "crash", "model-A", "", NULL, NULL, &conv, ERR);
	sess_close(st);
	srand(seed);
	for (iter = 0; iter < 30; iter++) {
		int fds[2], last = -1, t, got, n_acks = 0;
		pid_t pid;

		if (pipe(fds) != 0)
			break;
		pid = fork();
		if (pid == 0) {
			char err[512];
			struct sess_msg *m;
			int n;

			close(fds[0]);
			if (sess_open(&st, db, err, sizeof err) != 0 ||
			    sess_conv_lock(st, conv, err, sizeof err) != 0 ||
			    sess_msgs_load(st, conv, &m, &n, err, sizeof err) != 0)
				_exit(1);
			sess_msgs_free(m, n);
			/* Parts of 16 KiB, chunks up to 80 KiB: kills land mid-chunk. */
			sess_set_part_max(st, 16384);
			for (t = n / 2;; t++) {
				if (commit_turn(st, conv, t, 2048, 40, 77, err, sizeof err) != 0)
					_exit(2);
				if (write(fds[1], &t, sizeof t) != sizeof t)
					_exit(3);
			}
		}
		close(fds[1]);
		/*
		 * Odd iterations wait for the first acknowledged turn, so that the
		 * kill lands in the commit loop however slow the machine; even ones
		 * may also hit opening, recovery or lock takeover.
		 */
		if (iter % 2 == 1 && read(fds[0], &got, sizeof got) == sizeof got) {
			last = got;
			n_acks++;
		}
		usleep((useconds_t)(rand() % 30000));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		while (read(fds[0], &got, sizeof got) == sizeof got) {
			last = got;
			n_acks++;
		}
		close(fds[0]);
		test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
		test_cond(sess_check(st, ERR) == 0, "iteration %d: %s", iter, errbuf);
		t = verify_script(st, conv, 2048, 40, 77);
		sess_close(st);
		/* Acknowledged turns are all there; one more may have committed unacknowledged. */
		test_cond(t >= 0 && t >= last + 1 && t >= n_turns && t <= (last >= 0 ? last + 2 :
		    n_turns + 1), "iteration %d: %d turns stored, last acknowledged %d, before %d",
		    iter, t, last, n_turns);
		if (t > max_turns)
			max_turns = t;
		if (n_acks > 0)
			kills_mid++;
		n_turns = t > 0 ? t : n_turns;
	}
	printf("crash: 30 kills (seed %u), %d while committing, %d turns survived\n", seed,
	    kills_mid, max_turns);
	test_cond(kills_mid >= 15, "too few kills landed during commits (%d)", kills_mid);
}

/*
 * sess_user_commit: the message is in the file when it returns (a child
 * killed right after it, with no close, leaves it readable to the next
 * process), its commit is not checkpointed, and synchronous is FULL again
 * for the commits that follow.
 */
static void
test_user_commit(void)
{
	const char *db = path_in("user/sessions.db");
	struct sess_store *st;
	struct sess_msg m, *got = NULL;
	int32_t ids[] = {7, 8, 9};
	int64_t conv = 0;
	int n = 0, status = 0;
	pid_t pid;

	if (sess_open(&st, db, ERR) != 0 ||
	    sess_conv_create(st, "u", "fp1", "chatml", NULL, NULL, &conv, ERR) != 0) {
		test_cond(0, "set-up: %s", errbuf);
		return;
	}
	sess_close(st);
	pid = fork();
	if (pid == 0) {
		memset(&m, 0, sizeof m);
		m.role = SESS_USER;
		m.text = "typed before the kill";
		m.ids = ids;
		m.n_ids = 3;
		if (sess_open(&st, db, ERR) != 0 || sess_user_commit(st, conv, &m, ERR) != 0 ||
		    st_int(st, "PRAGMA synchronous") != 2)
			_exit(1);
		kill(getpid(), SIGKILL);
		_exit(2);
	}
	test_cond(pid > 0 && waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) &&
	    WTERMSIG(status) == SIGKILL, "child killed after sess_user_commit (status %d)", status);
	test_cond(sess_open(&st, db, ERR) == 0, "%s", errbuf);
	test_cond(sess_msgs_load(st, conv, &got, &n, ERR) == 0 && n == 1 && got[0].n_ids == 3 &&
	    strcmp(got[0].text, "typed before the kill") == 0 && got[0].ids[2] == 9,
	    "the killed process's message is there: %d messages", n);
	sess_msgs_free(got, n);
	sess_close(st);
}

int
main(void)
{
	const char *base = getenv("TMPDIR");
	unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
	char cmd[600];
	double t0;

	if (getenv("TEST_STORE_SEED"))
		seed = (unsigned)strtoul(getenv("TEST_STORE_SEED"), NULL, 10);
	snprintf(tmpdir, sizeof tmpdir, "%s/kvchat-store.XXXXXX", base ? base : "/tmp");
	if (mkdtemp(tmpdir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	t0 = kvc_now();
	test_checksum();
	test_crud();
	test_chunks();
	test_schema();
	test_window();
	test_rewindow();
	test_migrate_v1();
	test_failures();
	test_locks();
	test_user_commit();
	printf("single-process tests: %.2f s\n", kvc_now() - t0);
	test_two_writers();
	t0 = kvc_now();
	test_crash(seed);
	printf("crash test: %.2f s\n", kvc_now() - t0);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return test_done();
}
