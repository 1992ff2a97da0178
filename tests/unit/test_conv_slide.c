/*
 * test_conv_slide.c: --ctx-overflow slide through the conversation API.
 * Turns run past a small context several times; each computes only its own
 * prompt and keeps the front of the stream (the system prompt: the sinks);
 * a reopened conversation comes back from its snapshot holding the same
 * tokens; /retry after a slide, and /undo back past the part that slid
 * away (which recomputes a window), leave a conversation that goes on.
 */
#include "conv/conv.h"
#include "conv_testlib.h"
#include "test.h"

#include <unistd.h>

static char notices[CONV_TEST_NOTICES];	/* filled by conv_test_notice */

static struct conv_mgr *
new_mgr(struct kvc_engine *e, struct sess_store *st)
{
	struct conv_params p = {
		.overflow = CONV_OVERFLOW_SLIDE,
		.notice = conv_test_notice,
		.notice_arg = notices,
	};

	return conv_test_mgr(e, st, &p);
}

/* A copy of the conversation's stream (the cache's tokens); caller frees. */
static int32_t *
stream_copy(struct conv *c, int *n)
{
	const int32_t *s = conv_stream(c, n);
	int32_t *v = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *v);

	if (v && *n > 0)
		memcpy(v, s, (size_t)*n * sizeof *v);
	return v;
}

int
main(void)
{
	char dir[256], model[300], db[300], cmd[900], err[256];
	struct kvc_engine_params ep = kvc_engine_default_params();
	struct kvc_engine *e = NULL;
	struct sess_store *st = NULL;
	struct conv_mgr *m;
	struct conv *c = NULL;
	struct conv_stats s;
	struct conv_settings set = conv_default_settings();
	int32_t *front = NULL, *before = NULL, *after;
	int n_front = 0, n_before = 0, n_after, slides = 0, t, rc;
	int64_t id;

	snprintf(dir, sizeof dir, "%s/kvc-slide.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(dir) == NULL)
		test_skip("cannot make a temporary directory");
	snprintf(model, sizeof model, "%s/m.gguf", dir);
	snprintf(db, sizeof db, "%s/s.db", dir);
	if (conv_test_mkmodel(model, "--seed 5") != 0) {
		fprintf(stderr, "FAIL: mkmodel\n");
		return 1;
	}
	ep.device = "cpu";
	ep.n_ctx = 160;
	ep.n_threads = 1;
	if (eng_open(&e, model, &ep, err, sizeof err) != 0 || sess_open(&st, db, err, sizeof err) != 0) {
		fprintf(stderr, "FAIL: %s\n", err);
		return 1;
	}
	m = new_mgr(e, st);
	set.smp.temp = 0;
	set.smp.repeat_penalty = 1;
	set.max_tokens = 12;
	rc = conv_new(m, "slide", "Be brief.", &set, &c, err, sizeof err);
	test_cond(rc == 0, "conv_new: %s", err);
	if (rc)
		return test_done();
	id = conv_id(c);
	for (t = 0; t < 40 && slides < 3; t++) {
		rc = conv_turn(c, "Tell me one more short thing about the sea.", NULL, &s, err, sizeof err);
		test_cond(rc == 0, "turn %d: %s", t, err);
		if (rc)
			break;
		if (t == 0)
			front = stream_copy(c, &n_front);
		test_cond(s.prefill_tokens == s.prompt_tokens && s.dropped_tokens == 0,
		    "turn %d: %d computed for a prompt of %d, %d dropped", t, s.prefill_tokens,
		    s.prompt_tokens, s.dropped_tokens);
		slides += s.slid_tokens > 0;
	}
	test_cond(slides >= 3, "%d slides in %d turns", slides, t);
	/* the front (the system prompt) is kept through every slide */
	free(before);
	before = stream_copy(c, &n_before);
	test_cond(n_before <= 160 && n_front > 4 && memcmp(before, front, 4 * sizeof *front) == 0,
	    "the kept front changed");
	/* reopened: the same tokens, from the snapshot (stored since its first message) */
	id = conv_id(c);
	conv_close(c);
	conv_mgr_free(m);
	m = new_mgr(e, st);
	rc = conv_open(m, id, &c, err, sizeof err);
	test_cond(rc == 0, "conv_open: %s", err);
	if (rc)
		return test_done();
	after = stream_copy(c, &n_after);
	test_cond(n_after == n_before && memcmp(after, before, (size_t)n_before * sizeof *after) == 0,
	    "reopened stream differs (%d vs %d tokens)", n_after, n_before);
	free(after);
	rc = conv_turn(c, "And one more.", NULL, &s, err, sizeof err);
	test_cond(rc == 0 && s.resumed_from_snapshot && !s.rebuilt &&
	    s.prefill_tokens == s.prompt_tokens, "turn after reopening: %s (resumed %d rebuilt %d)",
	    err, s.resumed_from_snapshot, s.rebuilt);
	/* /retry after a slide, then /undo back past what slid away */
	notices[0] = '\0';
	rc = conv_retry(c, NULL, &s, err, sizeof err);
	test_cond(rc == 0, "retry: %s", err);
	for (int u = 0; u < 6 && rc == 0; u++) {
		rc = conv_undo(c, err, sizeof err);
		test_cond(rc == 0, "undo %d: %s", u, err);
	}
	/*
	 * Back past the cut: the window was chosen again (an unslid key, bit 62
	 * clear) and its cache computed from the messages, stored with the
	 * rewind (no rebuild said: the snapshot was there all along).
	 */
	{
		struct sess_conv row;

		test_cond(sess_conv_get(st, id, &row, err, sizeof err) == 0 &&
		    row.window < ((int64_t)1 << 62), "undo past the slid part kept the slid "
		    "window (%lld)", (long long)row.window);
		sess_conv_clear(&row);
	}
	test_cond(strstr(notices, "rebuilding") == NULL, "undo past the slid part: '%s'", notices);
	rc = conv_turn(c, "Start again, please.", NULL, &s, err, sizeof err);
	test_cond(rc == 0 && s.prefill_tokens == s.prompt_tokens, "turn after the undos: %s", err);
	after = stream_copy(c, &n_after);
	test_cond(n_after > 0 && n_after <= 160, "stream of %d after the undos", n_after);
	free(after);
	conv_close(c);
	conv_mgr_free(m);
	/* and once more from the store: what the cache holds is what the messages say */
	m = new_mgr(e, st);
	rc = conv_open(m, id, &c, err, sizeof err);
	test_cond(rc == 0, "conv_open after the undos: %s", err);
	if (rc == 0) {
		rc = conv_turn(c, "Last one.", NULL, &s, err, sizeof err);
		test_cond(rc == 0 && !s.rebuilt, "last turn: %s (rebuilt %d)", err, s.rebuilt);
		conv_close(c);
	}
	conv_mgr_free(m);
	free(front);
	free(before);
	sess_close(st);
	eng_close(e);
	remove(model);
	remove(db);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	(void)system(cmd);
	if (test_failed)
		fprintf(stderr, "notices:\n%s", notices);
	return test_done();
}
