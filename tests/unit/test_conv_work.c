/*
 * test_conv_work.c (issue 13): long work in the conversation layer.
 *  - A prefill reports through conv_params.progress ("prefill", positions,
 *    ending with done = total) and stops between slices when the caller's
 *    interrupt flag is set: conv_turn returns KVC_EINTR and the
 *    conversation is exactly as before (messages in memory and in the
 *    store, the stream, and the next turn computes only its own tokens).
 *  - The first turn of a new conversation stopped that way leaves nothing
 *    in the store (a conversation is stored with its first message).
 *  - A rebuild (a snapshot of another cache type) reports as "rebuilding",
 *    and stops between slices when conv_params.interrupt is set: conv_open
 *    returns KVC_EINTR with the conversation open and its messages whole,
 *    and the next turn rebuilds again (a turn stopped in its rebuild is
 *    in tests/e2e/test_rebuild_interrupt.sh).
 *  - The engine hook alone: slices of an append, and a stop that leaves
 *    the sequence as it was.
 *  - A read-only store: conv refuses a turn and a retry, saying why,
 *    before any text (code review: one answer for every front end).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "conv/conv.h"
#include "conv_testlib.h"

static char tmpdir[256];

/* What the progress callback saw, and when it pulls the interrupt. */
struct watch {
	char last_label[32];
	uint64_t last_done, last_total;
	int n_calls, n_ends;
	bool saw_rebuild;
	volatile sig_atomic_t *pull;	/* set *pull at the first "prefill" call */
	bool pull_rebuild;		/* ... at a "rebuilding" call instead */
};

static void
on_progress(void *arg, const char *label, uint64_t done, uint64_t total)
{
	struct watch *w = arg;

	w->n_calls++;
	if (label == NULL) {
		w->n_ends++;
		return;
	}
	snprintf(w->last_label, sizeof w->last_label, "%s", label);
	w->last_done = done;
	w->last_total = total;
	w->saw_rebuild |= strcmp(label, "rebuilding") == 0;
	if (w->pull && strcmp(label, w->pull_rebuild ? "rebuilding" : "prefill") == 0)
		*w->pull = 1;
}

static struct kvc_engine *
open_engine(const char *path, enum gguf_dtype kv)
{
	struct kvc_engine_params p = kvc_engine_default_params();
	struct kvc_engine *e = NULL;
	char err[256];

	p.n_ctx = 2048;
	p.n_threads = 1;
	p.kv_type = kv;
	if (eng_open(&e, path, &p, err, sizeof err) != 0)
		fprintf(stderr, "eng_open: %s\n", err);
	return e;
}

static struct conv_mgr *
new_mgr(struct kvc_engine *e, struct sess_store *st, struct watch *w,
    volatile sig_atomic_t *intr)
{
	struct conv_params p = {
		.overflow = CONV_OVERFLOW_DROP,
		.progress = on_progress,
		.progress_arg = w,
		.interrupt = intr,
	};

	return conv_test_mgr(e, st, &p);
}

static int
count_convs(struct sess_store *st)
{
	struct sess_conv *v;
	int n = -1;

	if (sess_conv_list(st, &v, &n, NULL, 0) == 0)
		sess_conv_list_free(v, n);
	return n;
}

/* Enough words that the prompt spans several slices (the first is 32 tokens). */
static void
long_text(char *buf, size_t len)
{
	buf[0] = '\0';
	for (int i = 0; strlen(buf) + 16 < len && i < 200; i++)
		strcat(buf, i % 2 ? "harbor light " : "stone wave ");
}

/* The engine's hook on its own. */
static int hook_calls, hook_stop_at, hook_last_done;
static int
hook(void *arg, int done, int total)
{
	(void)arg;
	(void)total;
	hook_calls++;
	hook_last_done = done;
	return hook_stop_at >= 0 && done >= hook_stop_at;
}

static void
check_engine_hook(struct kvc_engine *e)
{
	struct kvc_seq *s = NULL;
	struct eng_stats es;
	int32_t ids[300];
	char err[256];
	int rc;

	for (int i = 0; i < 300; i++)
		ids[i] = 3 + i % 200;
	test_cond(eng_seq_new(e, &s, err, sizeof err) == 0, "seq: %s", err);
	if (s == NULL)
		return;
	test_cond(eng_seq_append(s, ids, 10, &es, err, sizeof err) == 0, "append 10: %s", err);
	hook_calls = 0;
	hook_stop_at = 1;	/* stop before the second slice */
	eng_set_prefill_hook(e, hook, NULL);
	rc = eng_seq_append(s, ids + 10, 290, &es, err, sizeof err);
	test_cond(rc == KVC_EINTR, "a stopped append returns KVC_EINTR, got %d", rc);
	test_cond(hook_calls == 2, "asked before the first and the second slice: %d", hook_calls);
	test_cond(hook_last_done > 0 && hook_last_done < 290,
	    "the first slice is part of the prompt: %d of 290", hook_last_done);
	test_cond(eng_seq_n_pos(s) == 10, "a stopped append leaves the sequence: %d positions",
	    eng_seq_n_pos(s));
	hook_calls = 0;
	hook_stop_at = -1;
	rc = eng_seq_append(s, ids + 10, 290, &es, err, sizeof err);
	test_cond(rc == 0 && es.n_computed == 290 && es.n_reused == 10,
	    "the append after it: rc %d, computed %d, reused %d", rc, es.n_computed, es.n_reused);
	test_cond(hook_calls >= 2 && hook_last_done == 290, "asked, then told the end: %d calls, "
	    "last done %d", hook_calls, hook_last_done);
	eng_set_prefill_hook(e, NULL, NULL);
	eng_seq_free(s);
}

/* What a refused turn must never reach. */
static int
count_text(void *arg, const char *piece, size_t n)
{
	(void)piece;
	*(int *)arg += (int)n + 1;
	return 0;
}

/*
 * A read-only store: conv refuses a turn and a retry itself (for every
 * front end), saying why, before any text comes; the store is unchanged.
 */
static void
test_readonly_refused(struct kvc_engine *e, const char *db, int64_t id)
{
	struct conv_io io = { .on_text = count_text };
	struct watch w = {0};
	struct conv_stats s;
	struct sess_store *st;
	struct conv_mgr *m;
	struct conv *c;
	char err[256];
	int n_text = 0, before, rc;

	io.arg = &n_text;
	rc = sess_open_ex(&st, db, SESS_OPEN_READONLY, err, sizeof err);
	test_cond(rc == 0, "read-only open: %s", err);
	if (rc)
		return;
	m = new_mgr(e, st, &w, NULL);
	rc = conv_open(m, id, &c, err, sizeof err);
	test_cond(rc == 0, "open on a read-only store: %s", err);
	if (rc == 0) {
		before = conv_test_stored_msgs(st, id);
		err[0] = '\0';
		rc = conv_turn(c, "Refused, please.", &io, &s, err, sizeof err);
		test_cond(rc == KVC_EIO && strstr(err, "read-only") && strstr(err, "no turn"),
		    "turn refused: rc %d '%s'", rc, err);
		err[0] = '\0';
		rc = conv_retry(c, &io, &s, err, sizeof err);
		test_cond(rc == KVC_EIO && strstr(err, "read-only"), "retry refused: rc %d '%s'", rc,
		    err);
		test_cond(n_text == 0 && conv_n_msgs(c) == before &&
		    conv_test_stored_msgs(st, id) == before, "nothing generated (%d) or stored (%d, "
		    "%d, was %d)", n_text, conv_n_msgs(c), conv_test_stored_msgs(st, id), before);
	}
	conv_mgr_free(m);
	sess_close(st);
}

int
main(void)
{
	char model[300], db[300], cmd[1024], err[512], big[4096];
	struct kvc_engine *e, *e32 = NULL, *e16;
	struct sess_store *st = NULL;
	struct conv_settings set = conv_default_settings();
	volatile sig_atomic_t flag = 0;
	struct watch w;
	struct conv_mgr *m;
	struct conv_stats s;
	struct conv_io io;
	struct conv *c = NULL;
	int64_t id = 0;
	int n0 = 0, n1 = 0, used = 0, rc;

	snprintf(tmpdir, sizeof tmpdir, "/tmp/kvc-convwork-XXXXXX");
	if (mkdtemp(tmpdir) == NULL)
		return 1;
	snprintf(model, sizeof model, "%s/m.gguf", tmpdir);
	snprintf(db, sizeof db, "%s/s.db", tmpdir);
	test_cond(conv_test_mkmodel(model, "--vocab bpe --seed 3") == 0, "mkmodel");
	e = open_engine(model, GGML_TYPE_F16);
	rc = sess_open(&st, db, err, sizeof err);
	test_cond(e != NULL && rc == 0, "engine and store: %s", err);
	if (e == NULL || rc)
		return test_done();
	check_engine_hook(e);
	set.smp.temp = 0;
	set.max_tokens = 4;
	long_text(big, sizeof big);
	memset(&w, 0, sizeof w);
	memset(&io, 0, sizeof io);
	io.interrupt = &flag;
	m = new_mgr(e, st, &w, NULL);

	/* The first turn of a new conversation, stopped in its prefill: nothing stored. */
	rc = conv_new(m, NULL, NULL, &set, &c, err, sizeof err);
	test_cond(rc == 0 && conv_id(c) == 0, "a new conversation is not stored yet");
	w.pull = &flag;
	rc = conv_turn(c, big, &io, &s, err, sizeof err);
	w.pull = NULL;
	flag = 0;
	test_cond(rc == KVC_EINTR && s.interrupted, "first turn stopped: rc %d (%s)", rc, err);
	test_cond(conv_id(c) == 0 && conv_n_msgs(c) == 0 && count_convs(st) == 0,
	    "a stopped first turn stored nothing: id %lld, %d messages, %d rows",
	    (long long)conv_id(c), conv_n_msgs(c), count_convs(st));
	test_cond(w.n_ends >= 1, "the progress was ended");

	/* A turn, then a stopped one: everything as before it. */
	rc = conv_turn(c, "A short first message.", &io, &s, err, sizeof err);
	test_cond(rc == 0 && conv_id(c) != 0, "first turn: %s", err);
	id = conv_id(c);
	test_cond(strcmp(w.last_label, "prefill") == 0 && w.last_done == w.last_total &&
	    w.last_total == (uint64_t)s.prefill_tokens, "prefill reported to its end: %s %llu/%llu",
	    w.last_label, (unsigned long long)w.last_done, (unsigned long long)w.last_total);
	(void)conv_stream(c, &n0);
	w.pull = &flag;
	rc = conv_turn(c, big, &io, &s, err, sizeof err);
	w.pull = NULL;
	flag = 0;
	test_cond(rc == KVC_EINTR && s.interrupted && s.gen_tokens == 0,
	    "second turn stopped: rc %d", rc);
	test_cond(s.prefill_tokens > 0 && s.prefill_tokens < s.prompt_tokens,
	    "stopped part way: %d of %d", s.prefill_tokens, s.prompt_tokens);
	(void)conv_stream(c, &n1);
	test_cond(n1 == n0 && conv_n_msgs(c) == 2 && conv_test_stored_msgs(st, id) == 2,
	    "as before: stream %d (was %d), %d messages, %d stored", n1, n0, conv_n_msgs(c),
	    conv_test_stored_msgs(st, id));
	rc = conv_turn(c, "And now a short one.", &io, &s, err, sizeof err);
	test_cond(rc == 0 && s.reused_tokens == n0 && s.prefill_tokens == s.prompt_tokens,
	    "the next turn reused %d of %d and computed only its own %d (%d)", s.reused_tokens, n0,
	    s.prompt_tokens, s.prefill_tokens);
	test_cond(conv_test_stored_msgs(st, id) == 4, "4 messages stored: %d",
	    conv_test_stored_msgs(st, id));
	used = s.context_used;
	conv_mgr_free(m);

	/* Another cache type: the snapshot does not fit, the rebuild reports. */
	e32 = open_engine(model, GGML_TYPE_F32);
	if (e32) {
		memset(&w, 0, sizeof w);
		m = new_mgr(e32, st, &w, NULL);
		rc = conv_open(m, id, &c, err, sizeof err);
		test_cond(rc == 0, "open with another cache type: %s", err);
		test_cond(w.saw_rebuild && w.last_done == w.last_total &&
		    w.last_total == (uint64_t)used, "rebuild reported: %d, %llu/%llu (stream %d)",
		    w.saw_rebuild, (unsigned long long)w.last_done,
		    (unsigned long long)w.last_total, used);
		conv_mgr_free(m);
		eng_close(e32);

		/*
		 * Back to f16: the f32 snapshot is refused; the rebuild is
		 * stopped. A fresh engine, whose first slice is a few positions
		 * (a measured one would take the whole stream at once).
		 */
		e16 = open_engine(model, GGML_TYPE_F16);
		memset(&w, 0, sizeof w);
		w.pull = &flag;
		w.pull_rebuild = true;
		m = e16 ? new_mgr(e16, st, &w, &flag) : NULL;
		c = NULL;
		err[0] = '\0';
		rc = m ? conv_open(m, id, &c, err, sizeof err) : KVC_EINVAL;
		flag = 0;
		w.pull = NULL;
		test_cond(rc == KVC_EINTR && c != NULL, "a stopped rebuild: rc %d, open %d", rc,
		    c != NULL);
		test_cond(strstr(err, "was stopped") != NULL, "it says so: %s", err);
		if (rc == KVC_EINTR && c != NULL) {
			test_cond(!conv_resident(c) && conv_n_msgs(c) == 4 && conv_test_stored_msgs(st, id) == 4,
			    "open, not resident, messages whole: %d in memory, %d stored",
			    conv_n_msgs(c), conv_test_stored_msgs(st, id));
			test_cond(w.n_ends >= 1, "the progress line was ended");
			/* The next turn rebuilds, then answers. */
			rc = conv_turn(c, "A third one.", &io, &s, err, sizeof err);
			test_cond(rc == 0 && s.rebuilt && s.reused_tokens == used &&
			    conv_test_stored_msgs(st, id) == 6, "the next turn rebuilt %d positions (%d) and "
			    "stored: rc %d (%s), %d stored", s.reused_tokens, used, rc, err,
			    conv_test_stored_msgs(st, id));
		}
		conv_mgr_free(m);
		eng_close(e16);
	}
	sess_close(st);
	test_readonly_refused(e, db, id);
	eng_close(e);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	(void)system(cmd);
	return test_done();
}
