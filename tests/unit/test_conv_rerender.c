/*
 * test_conv_rerender.c: the chat with a template that drops an earlier
 * reply's reasoning (as Qwen3's, DeepSeek-R1's and gpt-oss's do), through
 * the conversation API with scripted replies (conv_params.test_replies)
 * on a fixture model. After every operation the cache must hold exactly
 * the prompt the template renders now: a turn (the cache cut where the
 * render changed, rewritten_tokens and the reason said), an /undo of that
 * turn then a /retry (whose prompt the undo left as the rewritten stream),
 * and a reopen from the store (the stored ids are the stream).
 */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conv_testlib.h"

/*
 * Keeps the reasoning of the last reply only, when the render ends with
 * it; the generation prompt opens the reasoning (as DeepSeek-R1's), so the
 * first prompt is not a prefix of the next render either.
 */
static const char tmpl[] =
    "{% for m in messages %}{% if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>\n"
    "{% else %}<|im_start|>assistant\n{% if loop.last and m.reasoning_content %}<think>"
    "{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>{% endif %}";

static const char replies[] =
    "Greeting.</think>Hello!<|im_end|>\n"
    "Second.</think>Still here.<|im_end|>\n"
    "Retried.</think>Once more.<|im_end|>\n";

/* Whether the cache holds the template's prompt for the last reply: messages before it, rendered. */
static bool
cache_is_prompt(struct conv *c, struct kvc_engine *e, const char *what)
{
	int n = conv_n_msgs(c), ns = 0;
	struct chat_msg *cm = calloc((size_t)n + 1, sizeof *cm);
	struct kvc_tokens want = {0};
	const int32_t *s = conv_stream(c, &ns);
	const struct sess_msg *last = conv_msg(c, n - 1);
	char err[256];
	bool ok;

	for (int i = 0; i < n - 1; i++) {
		const struct sess_msg *x = conv_msg(c, i);

		cm[i].role = x->role == SESS_USER ? CHAT_USER : CHAT_ASSISTANT;
		cm[i].text = x->text;
		cm[i].reasoning = x->reasoning;
	}
	ok = chat_jinja_render(eng_tokenizer(e), tmpl, NULL, cm, 0, (size_t)n - 1, true, &want, err,
	    sizeof err) == 0;
	ok = ok && ns == (int)want.n + last->n_ids && memcmp(s, want.v, want.n * sizeof *s) == 0;
	test_cond(ok, "%s: the cache holds the prompt the template renders (%d positions, render "
	    "%zu + reply %d)", what, ns, want.n, last->n_ids);
	kvc_tokens_free(&want);
	free(cm);
	return ok;
}

int
main(void)
{
	const char *base = getenv("TMPDIR");
	char dir[256], model[300], db[300], err[512];
	struct kvc_engine_params ep = kvc_engine_default_params();
	struct kvc_engine *e = NULL;
	struct sess_store *st = NULL;
	struct conv_mgr *m = NULL;
	struct conv *c = NULL;
	struct conv_stats s;
	struct conv_settings set = conv_default_settings();
	int64_t id;
	int rc;

	snprintf(dir, sizeof dir, "%s/kvchat-rerender.XXXXXX", base ? base : "/tmp");
	if (mkdtemp(dir) == NULL)
		return 1;
	snprintf(model, sizeof model, "%s/m.gguf", dir);
	snprintf(db, sizeof db, "%s/c.db", dir);
	if (conv_test_mkmodel(model, "--vocab bpe --seed 21") != 0) {
		fprintf(stderr, "FAIL: tests/fixtures/mkmodel could not make the fixture\n");
		return 1;
	}
	ep.n_ctx = 512;
	ep.n_threads = 1;
	if (eng_open(&e, model, &ep, err, sizeof err) != 0 || sess_open(&st, db, err, sizeof err) != 0) {
		fprintf(stderr, "FAIL: %s\n", err);
		return 1;
	}
	struct conv_params p = { .family = CHAT_JINJA, .jinja = tmpl, .test_replies = replies };

	rc = conv_mgr_new(&m, e, st, &p, err, sizeof err);
	if (rc == 0)
		rc = conv_new(m, NULL, NULL, &set, &c, err, sizeof err);
	test_cond(rc == 0, "manager, conversation: %s", err);
	if (rc)
		return test_done();

	rc = conv_turn(c, "Hi.", NULL, &s, err, sizeof err);
	test_cond(rc == 0 && strcmp(conv_msg(c, 1)->text, "Hello!") == 0 &&
	    conv_msg(c, 1)->reasoning && strcmp(conv_msg(c, 1)->reasoning, "Greeting.") == 0,
	    "turn 1: answer and reasoning apart: %s", err);
	test_cond(s.reasoning_tokens > 0 && s.rewrite_why == NULL, "turn 1: thinking counted, no cut");
	cache_is_prompt(c, e, "turn 1");
	int first_prompt = s.prompt_tokens;

	rc = conv_turn(c, "And now?", NULL, &s, err, sizeof err);
	test_cond(rc == 0, "turn 2: %s", err);
	test_cond(s.rewritten_tokens > 0 && s.rewrite_why && strstr(s.rewrite_why, "reasoning"),
	    "turn 2: the cut said: %d positions, %s", s.rewritten_tokens, s.rewrite_why ? s.rewrite_why : "-");
	test_cond(s.reused_tokens > 0 && s.reused_tokens < first_prompt && s.reused_tokens +
	    s.prefill_tokens + s.gen_tokens == s.context_used, "turn 2 reuses the first prompt but "
	    "its <think> (%d of %d), computes the rest", s.reused_tokens, first_prompt);
	cache_is_prompt(c, e, "turn 2");

	rc = conv_undo(c, err, sizeof err);
	test_cond(rc == 0 && conv_n_msgs(c) == 2, "undo: %s", err);
	rc = conv_retry(c, NULL, &s, err, sizeof err);
	test_cond(rc == 0 && strcmp(conv_msg(c, 1)->text, "Once more.") == 0, "retry: %s", err);
	cache_is_prompt(c, e, "retry after the undo");

	/* Reopened, the stream comes back from the stored ids (and the snapshot). */
	id = conv_id(c);
	int n0 = 0, n1 = 0;
	const int32_t *s0 = conv_stream(c, &n0);
	int32_t *keep = malloc((size_t)n0 * sizeof *keep);

	memcpy(keep, s0, (size_t)n0 * sizeof *keep);
	conv_close(c);
	rc = conv_open(m, id, &c, err, sizeof err);
	test_cond(rc == 0, "reopen: %s", err);
	if (rc == 0) {
		const int32_t *s1 = conv_stream(c, &n1);

		test_cond(n1 == n0 && memcmp(s1, keep, (size_t)n0 * sizeof *keep) == 0,
		    "reopened: the same stream (%d of %d)", n1, n0);
		cache_is_prompt(c, e, "reopened");
	}
	free(keep);
	conv_mgr_free(m);
	sess_close(st);
	eng_close(e);
	snprintf(err, sizeof err, "rm -rf '%s'", dir);
	if (system(err) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return test_done();
}
