/*
 * test_conv_budget.c (issue 26): --kv-budget counts what a cache holds.
 * On a gemma3 fixture (window 8: its windowed layers keep at most
 * 2 * 8 - 1 + 128 = 143 positions, 5 of 6 layers), two conversations of
 * about 300 positions each fit a budget of 2.5 times one's resident cache,
 * so the second turn leaves the first conversation in memory. Counting
 * every layer's full per-position size (what --kv-budget did) takes the
 * second cache for nearly twice its size and evicts the first. The
 * estimate of a cache's memory is checked against the backend's own count
 * of what it holds (its allocations, which grow by doubling).
 */
#include "conv/conv.h"
#include "conv_testlib.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char notices[CONV_TEST_NOTICES];	/* filled by conv_test_notice */

/* A user message of about 300 tokens. */
static void
long_message(char *buf, size_t len, const char *word)
{
	buf[0] = '\0';
	for (int i = 0; i < 150 && strlen(buf) + 32 < len; i++)
		snprintf(buf + strlen(buf), len - strlen(buf), "%s %d ", word, i % 10);
}

int
main(void)
{
	char dir[256], model[300], db[300], cmd[900], err[256], msg[4096];
	struct kvc_engine_params ep = kvc_engine_default_params();
	struct kvc_engine *e = NULL;
	struct sess_store *st = NULL;
	struct conv_params p = { .notice = conv_test_notice, .notice_arg = notices };
	struct conv_settings set = conv_default_settings();
	struct conv_mgr *m = NULL;
	struct conv *a = NULL, *b = NULL;
	struct conv_stats s;
	size_t held, est;
	int n, rc;

	snprintf(dir, sizeof dir, "%s/kvc-budget.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(dir) == NULL)
		test_skip("cannot make a temporary directory");
	snprintf(model, sizeof model, "%s/g.gguf", dir);
	snprintf(db, sizeof db, "%s/s.db", dir);
	if (conv_test_mkmodel(model, "--arch gemma3 --swa 8 --seed 9") != 0) {
		fprintf(stderr, "FAIL: mkmodel\n");
		return 1;
	}
	ep.device = "cpu";
	ep.n_ctx = 1024;
	ep.n_threads = 1;
	ep.kv_type = GGML_TYPE_F32;
	if (eng_open(&e, model, &ep, err, sizeof err) != 0 || sess_open(&st, db, err, sizeof err) != 0) {
		fprintf(stderr, "FAIL: %s\n", err);
		return 1;
	}
	test_cond(eng_kv_window_bytes(e) > 0, "the fixture's windowed layers are bounded");
	set.smp.temp = 0;
	set.max_tokens = 4;

	/* One conversation alone: what it holds, and the estimate of it. */
	p.kv_budget = 0;
	m = conv_test_mgr(e, st, &p);
	long_message(msg, sizeof msg, "alpha");
	rc = m ? conv_new(m, "a", NULL, &set, &a, err, sizeof err) : -1;
	rc = rc ? rc : conv_turn(a, msg, NULL, &s, err, sizeof err);
	test_cond(rc == 0, "first conversation: %s", err);
	if (rc)
		return test_done();
	(void)conv_stream(a, &n);
	held = eng_seq_kv_bytes(conv_seq(a));
	est = eng_kv_bytes_for(e, (size_t)n);
	printf("%d positions: %zu bytes held, %zu estimated, %zu at the full size per position\n",
	    n, held, est, (size_t)n * eng_kv_bytes_per_pos(e));
	test_cond(n > 250, "a long first turn (%d positions)", n);
	/* the backend holds whole allocations, which grow by doubling */
	test_cond(est <= held && held <= 2 * est, "estimate %zu bytes for %zu held", est, held);
	test_cond(2 * est < (size_t)n * eng_kv_bytes_per_pos(e) * 3 / 2,
	    "two bounded caches (%zu) are well under the full size of 1.5 (%zu)", 2 * est,
	    (size_t)n * eng_kv_bytes_per_pos(e) * 3 / 2);
	conv_mgr_free(m);

	/* Within 2.5 caches: both stay resident. */
	p.kv_budget = held * 5 / 2;
	m = conv_test_mgr(e, st, &p);
	rc = m ? conv_new(m, "a2", NULL, &set, &a, err, sizeof err) : -1;
	rc = rc ? rc : conv_turn(a, msg, NULL, &s, err, sizeof err);
	long_message(msg, sizeof msg, "beta");
	rc = rc ? rc : conv_new(m, "b2", NULL, &set, &b, err, sizeof err);
	rc = rc ? rc : conv_turn(b, msg, NULL, &s, err, sizeof err);
	test_cond(rc == 0, "two conversations: %s", err);
	test_cond(rc == 0 && conv_resident(a) && conv_resident(b),
	    "both resident within %zu bytes: a %d, b %d (%s)", p.kv_budget,
	    a ? conv_resident(a) : -1, b ? conv_resident(b) : -1, notices);
	conv_mgr_free(m);
	sess_close(st);
	eng_close(e);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	(void)system(cmd);
	return test_done();
}
