/*
 * test_conv.c: the turn logic on a fixture model (tests/fixtures/mkmodel).
 *
 *  - every turn of a 10-turn conversation computes exactly the tokens its
 *    user delta added, reuses everything before, and the stream equals the
 *    full rendering of the messages (chat_render, computed independently);
 *  - the incremental cache gives the same logits as one full prefill;
 *  - /undo rewinds store and cache consistently; /retry takes back only the
 *    reply and regenerates the same greedy reply computing nothing (same
 *    process: the first reply's logits are kept) or one position (after a
 *    reopen);
 *  - /system on a conversation with messages: the stream equals the full
 *    rendering with the new prompt, the cache a fresh prefill, the stored
 *    ids concatenate to the stream, and it resumes from the new snapshot;
 *  - DeepSeek stop strings: the held-back tail, and streamed == stored text;
 *  - resume from the snapshot: no prefill, next-token logits equal a fresh
 *    prefill's, and the greedy reply equals the one of a run that never
 *    stopped; a corrupt chunk or another model leads to a rebuild with a
 *    notice, and the same reply;
 *  - context overflow: drop keeps the conversation going and the store
 *    complete; stop refuses; an input longer than the context is refused
 *    with nothing lost;
 *  - a snapshot or settings write the store refuses is noticed and counted
 *    in the next turn's store_errors, and the conversation goes on;
 *  - deleting a conversation that is not the one in use never brings its
 *    cache back into memory;
 *  - the settings table: every row round-trips through the settings text,
 *    /set takes every name and alias, and refuses an unknown name or a
 *    value that is not a number with a message.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "test.h"
#include "conv/conv.h"
#include "conv_testlib.h"

static char tmpdir[256];
static char notices[CONV_TEST_NOTICES];	/* filled by conv_test_notice */

static struct kvc_engine *
open_engine(const char *path, int n_ctx)
{
	struct kvc_engine_params p = kvc_engine_default_params();
	struct kvc_engine *e = NULL;
	char err[256];

	p.n_ctx = n_ctx;
	p.n_threads = 1;
	p.kv_type = GGML_TYPE_F32;	/* exact comparisons */
	if (eng_open(&e, path, &p, err, sizeof err) != 0) {
		fprintf(stderr, "eng_open: %s\n", err);
		return NULL;
	}
	return e;
}

static struct conv_mgr *
new_mgr(struct kvc_engine *e, struct sess_store *st, enum conv_overflow ov)
{
	struct conv_params p = { .overflow = ov, .notice = conv_test_notice, .notice_arg = notices };

	return conv_test_mgr(e, st, &p);
}

static struct conv_settings
greedy(int max_tokens)
{
	struct conv_settings s = conv_default_settings();

	s.smp.temp = 0;
	s.smp.repeat_penalty = 1;
	s.max_tokens = max_tokens;
	return s;
}

static const char *const inputs[10] = {
	"Hello there.", "What is the capital of France?", "你好，请介绍一下你自己。",
	"A longer message with more words in it to make the delta bigger than before.",
	"line one\nline two", "Short.", "再来一句：今天天气怎么样？", "12345 67890 !@#",
	"ok", "The last turn of ten.",
};

/* Largest relative difference between two logit vectors. */
static double
max_rel_diff(const float *a, const float *b, int n)
{
	double worst = 0, scale = 1e-6;

	for (int i = 0; i < n; i++)
		scale = fmax(scale, fabs(a[i]));
	for (int i = 0; i < n; i++)
		worst = fmax(worst, fabs((double)a[i] - b[i]) / scale);
	return worst;
}

/* Logits of a fresh sequence fed tokens[0..n) in one prefill; caller frees. */
static float *
fresh_logits(struct kvc_engine *e, const int32_t *tokens, int n)
{
	struct kvc_seq *s;
	struct eng_stats es;
	float *out = NULL;
	char err[256];

	if (eng_seq_new(e, &s, err, sizeof err) != 0)
		return NULL;
	if (eng_seq_append(s, tokens, n, &es, err, sizeof err) == 0 && eng_seq_logits(s)) {
		out = malloc((size_t)eng_n_vocab(e) * sizeof *out);
		memcpy(out, eng_seq_logits(s), (size_t)eng_n_vocab(e) * sizeof *out);
	}
	eng_seq_free(s);
	return out;
}

/* The stream must equal chat_render of all messages (the invariant of chat.h). */
static bool
stream_is_full_render(struct conv *c, struct kvc_engine *e)
{
	struct chat_msg *v = calloc((size_t)conv_n_msgs(c) + 2, sizeof *v);
	struct kvc_tokens full = {0};
	const int32_t *s;
	int n, k = 0;
	bool ok;

	if (conv_system(c) && conv_system(c)[0]) {
		v[k].role = CHAT_SYSTEM;
		v[k++].text = conv_system(c);
	}
	for (int i = 0; i < conv_n_msgs(c); i++, k++) {
		const struct sess_msg *x = conv_msg(c, i);
		v[k].role = x->role == SESS_ASSISTANT ? CHAT_ASSISTANT : CHAT_USER;
		v[k].text = x->text;
		if (x->role == SESS_ASSISTANT) {
			v[k].ids = x->ids;
			v[k].n_ids = (size_t)x->n_ids;
		}
	}
	s = conv_stream(c, &n);
	ok = chat_render(eng_tokenizer(e), CHAT_CHATML, NULL, v, (size_t)k, false, &full,
	    NULL, 0) == 0 && (int)full.n == n && memcmp(full.v, s, (size_t)n * sizeof *s) == 0;
	kvc_tokens_free(&full);
	free(v);
	return ok;
}

/* Flip one byte in the middle of the conversation's first chunk. */
static int
corrupt_chunk(const char *db, int64_t conv)
{
	sqlite3 *h;
	sqlite3_stmt *s;
	int rc = -1;

	if (sqlite3_open(db, &h) != SQLITE_OK)
		return -1;
	if (sqlite3_prepare_v2(h, "SELECT id, data FROM kv_chunks WHERE conv_id = ?1 "
	    "ORDER BY pos0 LIMIT 1", -1, &s, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(s, 1, conv);
		if (sqlite3_step(s) == SQLITE_ROW) {
			int64_t id = sqlite3_column_int64(s, 0);
			int len = sqlite3_column_bytes(s, 1);
			unsigned char *d = malloc((size_t)len);
			sqlite3_stmt *u;

			memcpy(d, sqlite3_column_blob(s, 1), (size_t)len);
			d[len / 2] ^= 0x5a;
			if (sqlite3_prepare_v2(h, "UPDATE kv_chunks SET data = ?1 WHERE id = ?2", -1,
			    &u, NULL) == SQLITE_OK) {
				sqlite3_bind_blob(u, 1, d, len, SQLITE_TRANSIENT);
				sqlite3_bind_int64(u, 2, id);
				rc = sqlite3_step(u) == SQLITE_DONE ? 0 : -1;
				sqlite3_finalize(u);
			}
			free(d);
		}
		sqlite3_finalize(s);
	}
	sqlite3_close(h);
	return rc;
}

/*
 * Make the store refuse one kind of write, as a full disk would, until
 * refuse_off: a trigger that aborts it (sql names the event).
 */
static void
refuse_on(struct sess_store *st, const char *event)
{
	char sql[256];

	snprintf(sql, sizeof sql, "CREATE TRIGGER test_refuse BEFORE %s BEGIN "
	    "SELECT RAISE(ABORT, 'test: write refused'); END", event);
	test_cond(sqlite3_exec(sess_sqlite(st), sql, NULL, NULL, NULL) == SQLITE_OK,
	    "trigger: %s", sqlite3_errmsg(sess_sqlite(st)));
}

static void
refuse_off(struct sess_store *st)
{
	test_cond(sqlite3_exec(sess_sqlite(st), "DROP TRIGGER test_refuse", NULL, NULL, NULL) ==
	    SQLITE_OK, "drop trigger: %s", sqlite3_errmsg(sess_sqlite(st)));
}

static int
collect_text(void *arg, const char *s, size_t n)
{
	return kvc_buf_append(arg, s, n) ? 1 : 0;
}

struct reply {
	int32_t ids[64];
	int n;
};

static void
last_reply(struct conv *c, struct reply *r)
{
	const struct sess_msg *x = conv_msg(c, conv_n_msgs(c) - 1);

	r->n = x && x->n_ids <= 64 ? x->n_ids : 0;
	if (r->n)
		memcpy(r->ids, x->ids, (size_t)r->n * sizeof *r->ids);
}

static bool
same_reply(const struct reply *a, const struct reply *b)
{
	return a->n == b->n && a->n > 0 && memcmp(a->ids, b->ids, (size_t)a->n * sizeof *a->ids) == 0;
}

/* Reopen conversation id in a new manager and check the turn after it. */
static void
check_resume(struct kvc_engine *e, struct sess_store *st, const char *db, int64_t id,
    const char *text, const struct reply *want, bool expect_snapshot, const char *what)
{
	struct conv_mgr *m = new_mgr(e, st, CONV_OVERFLOW_DROP);
	struct conv_stats s;
	struct reply got;
	struct conv *c;
	char err[256];
	int n, rc;

	(void)db;
	notices[0] = '\0';
	rc = conv_open(m, id, &c, err, sizeof err);
	test_cond(rc == 0, "%s: conv_open: %s", what, err);
	if (rc) {
		conv_mgr_free(m);
		return;
	}
	if (expect_snapshot) {
		/* Cache contents equal a full prefill: append one token, compare logits. */
		const int32_t *toks = conv_stream(c, &n);
		int32_t *ext = malloc(((size_t)n + 1) * sizeof *ext);
		struct eng_stats es;
		float *ref;

		memcpy(ext, toks, (size_t)n * sizeof *ext);
		ext[n] = toks[n - 1];
		ref = fresh_logits(e, ext, n + 1);
		test_cond(eng_seq_n_pos(conv_seq(c)) == n, "%s: restored %d of %d positions", what,
		    eng_seq_n_pos(conv_seq(c)), n);
		rc = eng_seq_append(conv_seq(c), &ext[n], 1, &es, err, sizeof err);
		test_cond(rc == 0 && es.n_computed == 1, "%s: append after restore computed %d",
		    what, es.n_computed);
		test_cond(ref && eng_seq_logits(conv_seq(c)) &&
		    max_rel_diff(ref, eng_seq_logits(conv_seq(c)), eng_n_vocab(e)) < 1e-5,
		    "%s: logits after restore differ from a fresh prefill", what);
		(void)eng_seq_truncate(conv_seq(c), n);
		free(ref);
		free(ext);
	}
	rc = conv_turn(c, text, NULL, &s, err, sizeof err);
	test_cond(rc == 0, "%s: turn: %s", what, err);
	test_cond(s.resumed_from_snapshot == expect_snapshot && s.rebuilt == !expect_snapshot,
	    "%s: resumed %d rebuilt %d", what, s.resumed_from_snapshot, s.rebuilt);
	test_cond(s.prefill_tokens == s.prompt_tokens, "%s: computed %d for a delta of %d", what,
	    s.prefill_tokens, s.prompt_tokens);
	if (!expect_snapshot)
		test_cond(notices[0] != '\0', "%s: no notice for the rebuild", what);
	last_reply(c, &got);
	test_cond(same_reply(&got, want), "%s: reply differs from the uninterrupted run", what);
	/* Put the conversation back as it was for the next check. */
	test_cond(conv_undo(c, err, sizeof err) == 0, "%s: undo: %s", what, err);
	conv_mgr_free(m);
}

/* row's value in s as the settings text writes it, in buf. */
static const char *
setting_text(const struct conv_settings *s, const struct conv_setting *row, char *buf,
    size_t len)
{
	struct kvc_buf b = {0};

	snprintf(buf, len, "%s", conv_setting_text(s, row, &b) == 0 && b.p ? b.p : "?");
	kvc_buf_free(&b);
	return buf;
}

/* Whether every row of a and b reads the same. */
static int
same_settings(const struct conv_settings *a, const struct conv_settings *b)
{
	char ta[64], tb[64];
	int same = 1;

	for (int i = 0; i < CONV_N_SETTINGS; i++)
		same &= strcmp(setting_text(a, &conv_setting_table[i], ta, sizeof ta),
		    setting_text(b, &conv_setting_table[i], tb, sizeof tb)) == 0;
	return same;
}

/* Every row alone, then all at once, through conv_settings_format and _parse. */
static void
test_settings_roundtrip(void)
{
	/* A value of each kind unlike every default (the seed needs all 64 bits). */
	static const char *const other[] = { [CONV_SET_REAL] = "0.25", [CONV_SET_INT] = "7",
	    [CONV_SET_SEED] = "12345678901234567890" };
	struct conv_settings dflt = conv_default_settings(), all = dflt, s, back;
	const struct conv_setting *row;
	struct kvc_buf text = {0};
	char want[64], got[64], pair[96], err[256];

	for (int i = 0; i < CONV_N_SETTINGS; i++) {
		row = &conv_setting_table[i];
		s = dflt;
		test_cond(conv_setting_apply(&s, row, row->name, other[row->kind], err, sizeof err) ==
		    KVC_OK && conv_setting_apply(&all, row, row->name, other[row->kind], err,
		    sizeof err) == KVC_OK, "%s %s: %s", row->name, other[row->kind], err);
		test_cond(strcmp(setting_text(&s, row, want, sizeof want), other[row->kind]) == 0 &&
		    strcmp(want, setting_text(&dflt, row, got, sizeof got)) != 0,
		    "%s: set to %s, reads %s (default %s)", row->name, other[row->kind], want, got);
		test_cond(conv_settings_format(&s, &text) == 0, "%s: format", row->name);
		snprintf(pair, sizeof pair, "%s=%s", row->key, want);
		test_cond(strstr(text.p, pair), "%s: '%s' not in '%s'", row->name, pair, text.p);
		back = dflt;
		conv_settings_parse(text.p, &back);
		test_cond(same_settings(&s, &back), "%s: '%s' reads back as %s",
		    row->name, text.p, setting_text(&back, row, got, sizeof got));
	}
	test_cond(conv_settings_format(&all, &text) == 0, "format all");
	back = dflt;
	conv_settings_parse(text.p, &back);
	test_cond(same_settings(&all, &back) && strstr(text.p, "window") == NULL, "all rows: '%s' does not read back",
	    text.p);
	/* The random seed is a word of its own. */
	back.smp.seed = KVC_SEED_RANDOM;
	test_cond(conv_settings_format(&back, &text) == 0 && strstr(text.p, "seed=random"),
	    "random seed: '%s'", text.p);
	conv_settings_parse(text.p, &all);
	test_cond(all.smp.seed == KVC_SEED_RANDOM, "random seed read back");
	kvc_buf_free(&text);
}

/* A stored settings text read whole, or what is wrong with it (/list's damaged rows). */
static void
test_settings_check(void)
{
	struct conv_settings s = conv_default_settings();
	struct kvc_buf text = {0};
	char err[256];

	test_cond(conv_settings_format(&s, &text) == 0 &&
	    conv_settings_check(text.p, err, sizeof err) == KVC_OK, "the default text reads whole");
	test_cond(conv_settings_check("", err, sizeof err) == KVC_OK, "an empty text reads");
	err[0] = '\0';
	test_cond(conv_settings_check("top_k=40;temp=hot", err, sizeof err) == KVC_EFORMAT &&
	    strstr(err, "temp") && strstr(err, "hot"), "a bad value is named: '%s'", err);
	test_cond(conv_settings_check("temp=0.5;top_p", err, sizeof err) == KVC_EFORMAT &&
	    strstr(err, "top_p"), "a pair without '=' is named: '%s'", err);
	test_cond(conv_settings_check("top_p=7", err, sizeof err) == KVC_EFORMAT &&
	    strstr(err, "in (0, 1]"), "a value out of range: '%s'", err);
	test_cond(conv_settings_check("temp=\xff", err, sizeof err) == KVC_EFORMAT,
	    "not UTF-8: '%s'", err);
	test_cond(conv_settings_check(NULL, err, sizeof err) == KVC_EFORMAT, "no text");
	kvc_buf_free(&text);
}

/* /set's names, and what it refuses. */
static void
test_settings_set(void)
{
	struct conv_settings s = conv_default_settings(), before;
	const struct conv_setting *row;
	char got[64], err[256], value[16];
	int rc;

	for (int i = 0; i < CONV_N_SETTINGS; i++) {
		row = &conv_setting_table[i];
		test_cond(conv_setting_find(row->name) == row && conv_setting_by_opt(row->opt) == row,
		    "find %s, --%s", row->name, row->opt);
		/* Name, key and alias each set it. */
		for (int k = 0; k < 3; k++) {
			const char *name = k == 0 ? row->name : k == 1 ? row->key : row->alias;

			/* Distinct values inside every row's range (top_p, min_p <= 1). */
			if (row->kind == CONV_SET_REAL)
				snprintf(value, sizeof value, "%g", 1.0 / (k + 1));
			else
				snprintf(value, sizeof value, "%d", k + 1);
			rc = name ? conv_settings_set(&s, name, value, err, sizeof err) : KVC_OK;
			test_cond(name == NULL || (rc == KVC_OK && strcmp(setting_text(&s, row, got,
			    sizeof got), value) == 0), "/set %s %s: rc %d, reads %s", name, value, rc,
			    got);
		}
		/* Not a number: refused, named, nothing changed. */
		before = s;
		for (int k = 0; k < 4; k++) {
			const char *bad = k == 0 ? "abc" : k == 1 ? "" : k == 2 ? "1x" : NULL;

			err[0] = '\0';
			rc = conv_settings_set(&s, row->name, bad, err, sizeof err);
			test_cond(rc == KVC_EINVAL && strstr(err, row->name) && (strstr(err,
			    "not a number") || strstr(err, "not an integer")) &&
			    same_settings(&s, &before), "/set %s '%s': rc %d '%s'", row->name,
			    bad ? bad : "(null)", rc, err);
		}
	}
	/* An unknown name: refused with the names there are. */
	err[0] = '\0';
	rc = conv_settings_set(&s, "temprature", "1", err, sizeof err);
	test_cond(rc == KVC_EINVAL && strstr(err, "temprature") && same_settings(&s, &before),
	    "unknown name: rc %d '%s'", rc, err);
	for (int i = 0; i < CONV_N_SETTINGS; i++)
		test_cond(strstr(err, conv_setting_table[i].name) != NULL,
		    "unknown name: '%s' does not list %s", err, conv_setting_table[i].name);
	test_cond(conv_settings_set(&s, "window", "3", err, sizeof err) == KVC_EINVAL,
	    "window is not a /set name");
	/* Beyond plain numbers: what each kind takes and refuses. */
	test_cond(conv_settings_set(&s, "seed", "-1", err, sizeof err) == KVC_OK &&
	    s.smp.seed == KVC_SEED_RANDOM, "seed -1 is random");
	test_cond(conv_settings_set(&s, "top_k", "1.5", err, sizeof err) == KVC_EINVAL,
	    "top_k 1.5");
	test_cond(conv_settings_set(&s, "max_tokens", "-1", err, sizeof err) == KVC_ERANGE &&
	    strstr(err, "max_tokens"), "max_tokens -1: '%s'", err);
	test_cond(conv_settings_set(&s, "temp", "nan", err, sizeof err) == KVC_ERANGE,
	    "temp nan");
}

int
main(void)
{
	char model[300], model2[300], db[300], err[256];
	struct kvc_engine *e, *e2;
	struct sess_store *st;
	struct conv_mgr *m;
	struct conv_settings set = greedy(6);
	struct conv_stats s;
	struct conv *c;
	struct reply r4, again;
	int prev_used = 0, n, rc;
	int64_t id;

	test_settings_roundtrip();
	test_settings_set();
	test_settings_check();
	snprintf(tmpdir, sizeof tmpdir, "%s/kvc-conv.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(tmpdir) == NULL)
		test_skip("cannot make a temporary directory");
	snprintf(model, sizeof model, "%s/m.gguf", tmpdir);
	snprintf(model2, sizeof model2, "%s/m2.gguf", tmpdir);
	snprintf(db, sizeof db, "%s/s.db", tmpdir);
	if (conv_test_mkmodel(model, "--vocab bpe --seed 11") != 0 ||
	    conv_test_mkmodel(model2, "--vocab bpe --seed 12") != 0) {
		fprintf(stderr, "FAIL: tests/fixtures/mkmodel could not make the fixtures\n");
		return 1;
	}
	e = open_engine(model, 1024);
	test_cond(e != NULL, "engine");
	rc = sess_open(&st, db, err, sizeof err);
	test_cond(rc == 0, "sess_open: %s", err);
	if (e == NULL || rc)
		return test_done();
	m = new_mgr(e, st, CONV_OVERFLOW_DROP);

	/* Ten turns: each computes exactly its delta. */
	rc = conv_new(m, "ten", NULL, &set, &c, err, sizeof err);
	test_cond(rc == 0, "conv_new: %s", err);
	if (rc)
		return test_done();
	test_cond(conv_id(c) == 0, "a conversation without messages is not stored yet");
	for (int t = 0; t < 10; t++) {
		rc = conv_turn(c, inputs[t], NULL, &s, err, sizeof err);
		test_cond(rc == 0, "turn %d: %s", t + 1, err);
		test_cond(s.prompt_tokens > 0 && s.prefill_tokens == s.prompt_tokens,
		    "turn %d computed %d positions for %d new tokens", t + 1, s.prefill_tokens,
		    s.prompt_tokens);
		test_cond(s.reused_tokens == prev_used, "turn %d reused %d, history was %d", t + 1,
		    s.reused_tokens, prev_used);
		test_cond(s.gen_tokens > 0 && s.gen_tokens <= 6, "turn %d: %d tokens", t + 1,
		    s.gen_tokens);
		(void)conv_stream(c, &n);
		test_cond(s.context_used == n && eng_seq_n_pos(conv_seq(c)) == n,
		    "turn %d: context %d, stream %d, cache %d", t + 1, s.context_used, n,
		    eng_seq_n_pos(conv_seq(c)));
		test_cond(stream_is_full_render(c, e), "turn %d: stream != full rendering", t + 1);
		prev_used = s.context_used;
		id = conv_id(c);
	}
	test_cond(conv_test_stored_msgs(st, id) == 20, "20 messages stored, got %d",
	    conv_test_stored_msgs(st, id));
	{
		const int32_t *toks = conv_stream(c, &n);
		float *ref = fresh_logits(e, toks, n);

		test_cond(ref && eng_seq_logits(conv_seq(c)) &&
		    max_rel_diff(ref, eng_seq_logits(conv_seq(c)), eng_n_vocab(e)) < 1e-5,
		    "incremental cache logits differ from one full prefill");
		free(ref);
	}

	/* /undo then /retry: same greedy reply, only the delta computed. */
	last_reply(c, &r4);
	(void)conv_stream(c, &n);
	{
		int before = n, drop = conv_msg(c, 19)->n_ids + conv_msg(c, 18)->n_ids;

		rc = conv_undo(c, err, sizeof err);
		test_cond(rc == 0, "undo: %s", err);
		(void)conv_stream(c, &n);
		test_cond(n == before - drop && eng_seq_n_pos(conv_seq(c)) == n,
		    "undo: stream %d cache %d, want %d", n, eng_seq_n_pos(conv_seq(c)), before - drop);
		test_cond(conv_n_msgs(c) == 18 && conv_test_stored_msgs(st, id) == 18, "undo: messages %d/%d",
		    conv_n_msgs(c), conv_test_stored_msgs(st, id));
		rc = conv_turn(c, inputs[9], NULL, &s, err, sizeof err);
		test_cond(rc == 0 && s.reused_tokens == n && s.prefill_tokens == s.prompt_tokens,
		    "redo after undo: reused %d computed %d", s.reused_tokens, s.prefill_tokens);
		last_reply(c, &again);
		test_cond(same_reply(&again, &r4), "greedy reply after undo differs");
		/* /retry takes back only the reply: the prompt is all reused. */
		n += conv_msg(c, 18)->n_ids;
		rc = conv_retry(c, NULL, &s, err, sizeof err);
		test_cond(rc == 0 && s.prefill_tokens == 0 && s.reused_tokens == n &&
		    s.prompt_tokens == 0, "retry: reused %d (want %d) computed %d (%s)",
		    s.reused_tokens, n, s.prefill_tokens, rc ? err : "");
		last_reply(c, &again);
		test_cond(same_reply(&again, &r4), "greedy retry differs");
		test_cond(conv_test_stored_msgs(st, id) == 20, "retry: %d messages stored",
		    conv_test_stored_msgs(st, id));
		test_cond(stream_is_full_render(c, e), "retry: stream != full rendering");
		(void)conv_stream(c, &n);
		test_cond(eng_seq_n_pos(conv_seq(c)) == n, "retry: cache %d, stream %d",
		    eng_seq_n_pos(conv_seq(c)), n);
	}

	/* /retry in a new process: the logits are not at hand, one position is recomputed. */
	conv_mgr_free(m);
	m = new_mgr(e, st, CONV_OVERFLOW_DROP);
	rc = conv_open(m, id, &c, err, sizeof err);
	test_cond(rc == 0, "reopen for retry: %s", err);
	if (rc)
		return test_done();
	{
		int want = 0;

		(void)conv_stream(c, &n);
		want = n - conv_msg(c, 19)->n_ids;
		rc = conv_retry(c, NULL, &s, err, sizeof err);
		test_cond(rc == 0 && s.prefill_tokens == 1 && s.reused_tokens == want - 1 &&
		    s.resumed_from_snapshot, "retry after reopen: reused %d (want %d) computed %d "
		    "resumed %d (%s)", s.reused_tokens, want - 1, s.prefill_tokens,
		    s.resumed_from_snapshot, rc ? err : "");
		last_reply(c, &again);
		test_cond(same_reply(&again, &r4), "greedy retry after reopen differs");
		test_cond(conv_test_stored_msgs(st, id) == 20, "retry after reopen: %d messages stored",
		    conv_test_stored_msgs(st, id));
		conv_mgr_free(m);
		m = new_mgr(e, st, CONV_OVERFLOW_DROP);
		rc = conv_open(m, id, &c, err, sizeof err);
		test_cond(rc == 0, "reopen after retry: %s", err);
		if (rc)
			return test_done();
		rc = conv_turn(c, "One more.", NULL, &s, err, sizeof err);
		test_cond(rc == 0 && s.resumed_from_snapshot && s.prefill_tokens == s.prompt_tokens,
		    "turn after retry+reopen: resumed %d computed %d of %d (%s)",
		    s.resumed_from_snapshot, s.prefill_tokens, s.prompt_tokens, rc ? err : "");
		test_cond(conv_undo(c, err, sizeof err) == 0, "undo one more: %s", err);
	}

	/* Resume: 9 turns on disk, the 10th must be r4 whichever way the cache comes back. */
	test_cond(conv_undo(c, err, sizeof err) == 0, "undo before resume: %s", err);
	conv_mgr_free(m);	/* closes c, releases its lock */
	check_resume(e, st, db, id, inputs[9], &r4, true, "snapshot");
	test_cond(corrupt_chunk(db, id) == 0, "could not corrupt a chunk");
	check_resume(e, st, db, id, inputs[9], &r4, false, "corrupt chunk");
	test_cond(strstr(notices, "corrupt") != NULL, "corrupt chunk: notice '%s'", notices);
	check_resume(e, st, db, id, inputs[9], &r4, true, "snapshot rewritten after rebuild");
	e2 = open_engine(model2, 1024);
	test_cond(e2 != NULL && strcmp(eng_fingerprint(e), eng_fingerprint(e2)) != 0,
	    "second fixture has another fingerprint");
	if (e2) {
		struct conv_mgr *m2 = new_mgr(e2, st, CONV_OVERFLOW_DROP);

		notices[0] = '\0';
		rc = conv_open(m2, id, &c, err, sizeof err);
		test_cond(rc == 0 && strstr(notices, "another model") != NULL,
		    "other model: open %d, notice '%s'", rc, notices);
		if (rc == 0) {
			rc = conv_turn(c, inputs[9], NULL, &s, err, sizeof err);
			test_cond(rc == 0 && s.rebuilt && !s.resumed_from_snapshot &&
			    s.prefill_tokens == s.prompt_tokens, "other model turn: rebuilt %d",
			    s.rebuilt);
			(void)conv_undo(c, NULL, 0);
		}
		conv_mgr_free(m2);
		eng_close(e2);
	}
	check_resume(e, st, db, id, inputs[9], &r4, false, "back to the first model");

	/* Context overflow on a small context. */
	{
		struct kvc_engine *es = open_engine(model, 160);
		struct conv_mgr *ms = es ? new_mgr(es, st, CONV_OVERFLOW_DROP) : NULL;
		struct conv_settings s8 = greedy(8);
		bool dropped = false;
		char big[2000];

		test_cond(es && ms, "small engine");
		if (ms && conv_new(ms, "small", NULL, &s8, &c, err, sizeof err) == 0) {
			int64_t sid = 0;

			for (int t = 0; t < 10; t++) {
				rc = conv_turn(c, inputs[t], NULL, &s, err, sizeof err);
				test_cond(rc == 0, "small turn %d: %s", t + 1, err);
				sid = conv_id(c);
				dropped |= s.dropped_tokens > 0;
				test_cond(s.context_used <= 160, "small: context %d", s.context_used);
				if (s.dropped_tokens > 0)
					test_cond(s.prefill_tokens + s.reused_tokens ==
					    s.context_used - s.gen_tokens, "small: drop recompute");
			}
			test_cond(dropped, "a 160-position context never dropped history");
			test_cond(conv_test_stored_msgs(st, sid) == 20, "drop lost stored messages: %d",
			    conv_test_stored_msgs(st, sid));
			/* A single input longer than the context: refused, nothing lost. */
			memset(big, 0, sizeof big);
			for (int i = 0; i < 300; i++)
				strcat(big, "word ");
			rc = conv_turn(c, big, NULL, &s, err, sizeof err);
			test_cond(rc == KVC_ERANGE && strstr(err, "too long"), "long input: %d %s", rc,
			    err);
			test_cond(conv_test_stored_msgs(st, sid) == 20 && conv_n_msgs(c) == 20,
			    "long input changed the conversation");
			/* Resume of a windowed conversation continues where it was. */
			conv_close(c);
			rc = conv_open(ms, sid, &c, err, sizeof err);
			test_cond(rc == 0, "reopen windowed: %s", err);
			if (rc == 0) {
				rc = conv_turn(c, "and one more", NULL, &s, err, sizeof err);
				test_cond(rc == 0 && s.context_used <= 160, "windowed turn after reopen");
				test_cond(s.store_errors == 0, "windowed turn: %d store errors",
				    s.store_errors);
			}
			/*
			 * /clear of a windowed conversation rewrites its window in the
			 * same transaction as the rewind (issue 26): a refused window
			 * write refuses the whole /clear, and nothing changes.
			 */
			if (rc == 0) {
				int before = conv_n_msgs(c);

				refuse_on(st, "UPDATE OF window ON conversations");
				notices[0] = '\0';
				rc = conv_clear(c, err, sizeof err);
				refuse_off(st);
				test_cond(rc != 0 && strstr(err, "write refused"),
				    "clear with the window write refused: rc %d %s", rc, err);
				test_cond(conv_n_msgs(c) == before &&
				    conv_test_stored_msgs(st, sid) == before,
				    "a refused clear changed nothing: %d in memory, %d stored of %d",
				    conv_n_msgs(c), conv_test_stored_msgs(st, sid), before);
				rc = conv_clear(c, err, sizeof err);
				test_cond(rc == 0 && conv_n_msgs(c) == 0 &&
				    conv_test_stored_msgs(st, sid) == 0, "clear: %s", err);
				rc = conv_turn(c, inputs[0], NULL, &s, err, sizeof err);
				test_cond(rc == 0 && s.store_errors == 0,
				    "turn after clear: rc %d, %d store errors", rc, s.store_errors);
			}
		}
		conv_mgr_free(ms);
		ms = es ? new_mgr(es, st, CONV_OVERFLOW_STOP) : NULL;
		if (ms && conv_new(ms, "stop", NULL, &s8, &c, err, sizeof err) == 0) {
			int t;

			for (t = 0; t < 20; t++) {
				rc = conv_turn(c, inputs[t % 10], NULL, &s, err, sizeof err);
				if (rc)
					break;
			}
			test_cond(rc == KVC_ERANGE && strstr(err, "context full"),
			    "stop policy: rc %d '%s'", rc, err);
			test_cond(conv_n_msgs(c) == 2 * t && conv_test_stored_msgs(st, conv_id(c)) == 2 * t,
			    "stop policy changed the conversation");
		}
		conv_mgr_free(ms);
		eng_close(es);
	}

	/* LRU residency: a budget of one cache evicts the other conversation. */
	{
		struct conv_params p;
		struct conv_mgr *mb;
		struct conv *a, *b;

		memset(&p, 0, sizeof p);
		p.family = CHAT_CHATML;
		p.notice = conv_test_notice;
		p.notice_arg = notices;
		p.kv_budget = 1;	/* anything but the active one leaves memory */
		rc = conv_mgr_new(&mb, e, st, &p, err, sizeof err);
		test_cond(rc == 0, "budget mgr");
		if (rc == 0 && conv_new(mb, "a", NULL, &set, &a, err, sizeof err) == 0 &&
		    conv_new(mb, "b", NULL, &set, &b, err, sizeof err) == 0) {
			(void)conv_turn(a, "first", NULL, &s, err, sizeof err);
			(void)conv_turn(b, "second", NULL, &s, err, sizeof err);
			test_cond(!conv_resident(a) && conv_resident(b), "LRU did not evict a");
			rc = conv_turn(a, "again", NULL, &s, err, sizeof err);
			test_cond(rc == 0 && s.resumed_from_snapshot && s.prefill_tokens == s.prompt_tokens,
			    "switch back restores from snapshot: %d %d", s.resumed_from_snapshot,
			    s.prefill_tokens);
			test_cond(!conv_resident(b), "b still resident");
		}
		/* Deleting b (evicted) or a closed conversation restores nothing. */
		if (rc == 0) {
			struct sess_conv row = {0};
			struct conv *x;
			int64_t bid = conv_id(b), xid = 0;
			int n_open = 0, n_res = 0;

			if (conv_new(mb, "x", NULL, &set, &x, err, sizeof err) == 0) {
				(void)conv_turn(x, "third", NULL, &s, err, sizeof err);
				xid = conv_id(x);
				conv_close(x);
			}
			(void)conv_turn(a, "once more", NULL, &s, err, sizeof err);
			notices[0] = '\0';
			rc = conv_mgr_delete(mb, bid, err, sizeof err);
			test_cond(rc == 0, "delete evicted b: %s", err);
			rc = xid ? conv_mgr_delete(mb, xid, err, sizeof err) : -1;
			test_cond(rc == 0, "delete closed x: %s", err);
			(void)conv_mgr_kv_bytes(mb, &n_open, &n_res);
			test_cond(n_open == 1 && n_res == 1 && conv_resident(a),
			    "after the deletes: %d open, %d resident, a resident %d", n_open, n_res,
			    conv_resident(a));
			test_cond(notices[0] == '\0', "a delete moved caches: '%s'", notices);
			test_cond(sess_conv_get(st, bid, &row, NULL, 0) == KVC_ENOTFOUND &&
			    sess_conv_get(st, xid, &row, NULL, 0) == KVC_ENOTFOUND,
			    "deleted conversations still stored");
			rc = conv_turn(a, "after the deletes", NULL, &s, err, sizeof err);
			test_cond(rc == 0 && !s.resumed_from_snapshot && !s.rebuilt &&
			    s.prefill_tokens == s.prompt_tokens, "a after the deletes: %s", err);
		}
		conv_mgr_free(mb);
	}

	/* /system on a conversation with messages: re-rendered, recomputed, stored. */
	{
		struct conv_mgr *ms = new_mgr(e, st, CONV_OVERFLOW_DROP);
		struct sess_msg *v = NULL;
		struct sess_conv row = {0};
		struct kvc_tokens cat = {0};
		const int32_t *toks;
		int nv = 0, nc = -1;
		int64_t sid = 0;

		rc = conv_new(ms, "sys", "You are terse.", &set, &c, err, sizeof err);
		test_cond(rc == 0, "conv_new sys: %s", err);
		for (int t = 0; rc == 0 && t < 3; t++)
			rc = conv_turn(c, inputs[t], NULL, &s, err, sizeof err);
		test_cond(rc == 0, "sys turns: %s", err);
		if (rc == 0) {
			sid = conv_id(c);
			rc = conv_change_system(c, "You are a pirate. Answer in rhymes.", &nc, err,
			    sizeof err);
			test_cond(rc == 0, "change system: %s", err);
			toks = conv_stream(c, &n);
			test_cond(nc > n / 2 && nc <= n, "change system computed %d of %d", nc, n);
			test_cond(strcmp(conv_system(c), "You are a pirate. Answer in rhymes.") == 0,
			    "system in memory");
			test_cond(stream_is_full_render(c, e), "after /system: stream != full rendering");
			test_cond(eng_seq_n_pos(conv_seq(c)) == n, "after /system: cache %d stream %d",
			    eng_seq_n_pos(conv_seq(c)), n);
			{
				float *ref = fresh_logits(e, toks, n);
				test_cond(ref && eng_seq_logits(conv_seq(c)) &&
				    max_rel_diff(ref, eng_seq_logits(conv_seq(c)), eng_n_vocab(e)) < 1e-5,
				    "after /system: cache logits differ from a fresh prefill");
				free(ref);
			}
			/* The store: new system, ids that concatenate to the stream, a valid snapshot. */
			test_cond(sess_conv_get(st, sid, &row, err, sizeof err) == 0 && row.system &&
			    strcmp(row.system, "You are a pirate. Answer in rhymes.") == 0,
			    "stored system '%s'", row.system ? row.system : "(null)");
			sess_conv_clear(&row);
			test_cond(sess_msgs_load(st, sid, &v, &nv, err, sizeof err) == 0 && nv == 6,
			    "stored messages %d", nv);
			for (int i = 0; i < nv; i++)
				(void)kvc_tokens_append(&cat, v[i].ids, (size_t)v[i].n_ids);
			test_cond((int)cat.n == n && memcmp(cat.v, toks, (size_t)n * sizeof *toks) == 0,
			    "stored ids (%zu) do not concatenate to the stream (%d)", cat.n, n);
			sess_msgs_free(v, nv);
			kvc_tokens_free(&cat);
			test_cond(sess_check(st, err, sizeof err) == 0, "sess_check: %s", err);
			/* The same prompt again changes nothing. */
			rc = conv_change_system(c, "You are a pirate. Answer in rhymes.", &nc, err,
			    sizeof err);
			test_cond(rc == 0 && nc == 0, "same system: rc %d computed %d", rc, nc);
		}
		/* The fresh snapshot refused: noticed, counted once, the next turn writes it. */
		if (rc == 0) {
			const char *sys2 = "You are a parrot.";

			refuse_on(st, "INSERT ON kv_chunks");
			notices[0] = '\0';
			rc = conv_change_system(c, sys2, &nc, err, sizeof err);
			refuse_off(st);
			test_cond(rc == 0 && strcmp(conv_system(c), sys2) == 0,
			    "system with the snapshot refused: %s", err);
			test_cond(strstr(notices, "snapshot") && strstr(notices, "write refused"),
			    "refused snapshot: notice '%s'", notices);
			rc = conv_turn(c, inputs[4], NULL, &s, err, sizeof err);
			test_cond(rc == 0 && s.store_errors == 1,
			    "turn after a refused snapshot: rc %d, %d store errors (%s)", rc,
			    s.store_errors, err);
			test_cond(sess_check(st, err, sizeof err) == 0, "sess_check: %s", err);
			test_cond(conv_undo(c, err, sizeof err) == 0 &&
			    conv_change_system(c, "You are a pirate. Answer in rhymes.", NULL, err,
			    sizeof err) == 0, "system back: %s", err);
		}
		conv_mgr_free(ms);
		/* It resumes from the fresh snapshot. */
		ms = new_mgr(e, st, CONV_OVERFLOW_DROP);
		rc = sid ? conv_open(ms, sid, &c, err, sizeof err) : -1;
		test_cond(rc == 0, "reopen sys: %s", err);
		if (rc == 0) {
			rc = conv_turn(c, inputs[3], NULL, &s, err, sizeof err);
			test_cond(rc == 0 && s.resumed_from_snapshot && !s.rebuilt &&
			    s.prefill_tokens == s.prompt_tokens, "turn after /system + reopen: "
			    "resumed %d rebuilt %d computed %d of %d", s.resumed_from_snapshot,
			    s.rebuilt, s.prefill_tokens, s.prompt_tokens);
			test_cond(stream_is_full_render(c, e), "after reopen: stream != full rendering");
		}
		conv_mgr_free(ms);
	}

	/* Stop strings: what could start one is held back, so the screen equals the text. */
	{
		struct conv_params p;
		struct conv_mgr *md;
		struct conv_io io;
		struct kvc_buf shown = {0};

		test_cond(conv_stop_holdback(CHAT_DEEPSEEK, "Hello Us", 8) == 2, "holdback 'Us'");
		test_cond(conv_stop_holdback(CHAT_DEEPSEEK, "Hello\nUser", 10) == 4, "holdback 'User'");
		test_cond(conv_stop_holdback(CHAT_DEEPSEEK, "Hello U", 7) == 1, "holdback 'U'");
		test_cond(conv_stop_holdback(CHAT_DEEPSEEK, "Hello", 5) == 0, "holdback none");
		test_cond(conv_stop_holdback(CHAT_DEEPSEEK, "Use", 3) == 3, "holdback 'Use'");
		test_cond(conv_stop_holdback(CHAT_DEEPSEEK, "Usa", 3) == 0, "holdback 'Usa'");
		test_cond(conv_stop_holdback(CHAT_DEEPSEEK, "", 0) == 0, "holdback empty");
		test_cond(conv_stop_holdback(CHAT_CHATML, "Hello Us", 8) == 0, "holdback chatml");
		memset(&p, 0, sizeof p);
		p.family = CHAT_DEEPSEEK;
		p.notice = conv_test_notice;
		p.notice_arg = notices;
		rc = conv_mgr_new(&md, e, st, &p, err, sizeof err);
		test_cond(rc == 0, "deepseek mgr: %s", err);
		if (rc == 0 && conv_new(md, "ds", NULL, &set, &c, err, sizeof err) == 0) {
			memset(&io, 0, sizeof io);
			io.on_text = collect_text;
			io.arg = &shown;
			for (int t = 0; t < 3; t++) {
				shown.n = 0;
				rc = conv_turn(c, inputs[t], &io, &s, err, sizeof err);
				test_cond(rc == 0, "deepseek turn: %s", err);
				if (rc)
					break;
				const struct sess_msg *x = conv_msg(c, conv_n_msgs(c) - 1);
				test_cond(shown.n == strlen(x->text) &&
				    memcmp(shown.p, x->text, shown.n) == 0,
				    "deepseek turn %d: shown text differs from the stored one", t + 1);
			}
		}
		kvc_buf_free(&shown);
		conv_mgr_free(md);
	}

	sess_close(st);
	eng_close(e);
	{
		char cmd[400];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
		(void)system(cmd);
	}
	return test_done();
}
