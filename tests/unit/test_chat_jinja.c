/*
 * test_chat_jinja.c: the model's own template as the chat renders it
 * (src/chat/chat_jinja.c), on the Qwen2 vocabulary and the 20 real
 * templates of $SHARED_DATA/chat-templates/llama.cpp: every template passes
 * the chat's trial render; the first turn, a reply's ids and the delta after
 * it make a stream whose last part is exactly the full render's; where the
 * template does not rewrite earlier turns (Qwen2.5, Llama 3.x, Phi-3.5, ...)
 * the stream is the full render token for token; typed special-token text
 * never becomes a control token; a reply's closing end-of-turn id is not
 * doubled. SKIPs without the shared data.
 */
#include "test.h"

#include <dirent.h>

#include "chat/chat.h"
#include "gguf/gguf.h"
#include "tok_testlib.h"

static bool
tokens_eq(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
	return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* One template: trial render, first turn + reply + delta against the full render. */
static void
check_template(const struct kvc_tokenizer *t, const char *name, const char *jinja,
	       const struct kvc_tokens *reply, int *stable)
{
	struct chat_msg m[3] = {
		{ CHAT_USER, "What is 6*7?", NULL, 0, NULL },
		{ CHAT_ASSISTANT, "Sure, 42.", reply->v, reply->n, NULL },
		{ CHAT_USER, "Thanks", NULL, 0, NULL },
	};
	struct kvc_tokens a = {0}, b = {0}, f = {0}, s = {0};
	char err[512] = "";
	int rc = chat_jinja_check(t, jinja, NULL, err, sizeof err);

	test_cond(rc == 0, "%s: trial render: %s", name, err);
	rc = chat_jinja_render(t, jinja, NULL, m, 0, 1, true, &a, err, sizeof err);
	if (rc == 0)
		rc = chat_jinja_render(t, jinja, NULL, m, 2, 3, true, &b, err, sizeof err);
	if (rc == 0)
		rc = chat_jinja_render(t, jinja, NULL, m, 0, 3, true, &f, err, sizeof err);
	test_cond(rc == 0, "%s: render: %s", name, err);
	kvc_tokens_append(&s, a.v, a.n);
	kvc_tokens_append(&s, reply->v, reply->n);
	kvc_tokens_append(&s, b.v, b.n);
	/* the delta is what the full render puts after the reply */
	test_cond(b.n > 0 && b.n <= f.n && tokens_eq(b.v, b.n, f.v + f.n - b.n, b.n),
		  "%s: delta (%zu tokens) is not the end of the full render (%zu)", name, b.n, f.n);
	if (tokens_eq(s.v, s.n, f.v, f.n))
		(*stable)++;
	kvc_tokens_free(&a);
	kvc_tokens_free(&b);
	kvc_tokens_free(&f);
	kvc_tokens_free(&s);
}

/* Typed "<|im_end|>" stays text; the reply's own <|im_end|> is not doubled. */
static void
check_tokens(const struct kvc_tokenizer *t, const char *jinja, const struct kvc_tokens *reply)
{
	int32_t im_end = tok_lookup(t, "<|im_end|>");
	struct chat_msg m[3] = {
		{ CHAT_USER, "say <|im_end|> please", NULL, 0, NULL },
		{ CHAT_ASSISTANT, "Sure, 42.", reply->v, reply->n, NULL },
		{ CHAT_USER, "ok", NULL, 0, NULL },
	};
	struct kvc_tokens a = {0}, b = {0};
	char err[512] = "";
	size_t n = 0;

	test_cond(chat_jinja_render(t, jinja, NULL, m, 0, 1, true, &a, err, sizeof err) == 0, "%s", err);
	for (size_t i = 0; i < a.n; i++)
		n += a.v[i] == im_end;
	test_cond(n == 2, "system + user turns close with 2 <|im_end|>, typed one is text: %zu", n);
	test_cond(chat_jinja_render(t, jinja, NULL, m, 2, 3, true, &b, err, sizeof err) == 0, "%s", err);
	test_cond(b.n > 0 && b.v[0] != im_end, "the delta after a reply ending in <|im_end|> repeats it");
	kvc_tokens_free(&a);
	kvc_tokens_free(&b);
}

int
main(void)
{
	const char *shared = test_shared_data();
	char dir[3072], path[4096], err[256];
	struct gguf_file *g;
	struct kvc_tokenizer *t = NULL;
	struct kvc_tokens reply = {0};
	int n = 0, stable = 0;
	DIR *d;

	if (!shared)
		test_skip("no shared data");
	snprintf(path, sizeof path, "%s/llama.cpp-vocab/ggml-vocab-qwen2.gguf", shared);
	if (gguf_open(&g, path, err, sizeof err) != 0 || tok_load(&t, g, err, sizeof err) != 0)
		test_skip("%s: %s", path, err);
	gguf_close(g);
	tok_encode(t, "Sure, 42.", 9, 0, &reply, NULL, 0);
	kvc_tokens_push(&reply, tok_lookup(t, "<|im_end|>"));
	snprintf(dir, sizeof dir, "%s/chat-templates/llama.cpp", shared);
	d = opendir(dir);
	test_cond(d != NULL, "%s", dir);
	for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
		size_t len;

		if (!strstr(e->d_name, ".jinja"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		char *j = tok_test_slurp(path, &len);

		check_template(t, e->d_name, j, &reply, &stable);
		if (strstr(e->d_name, "Qwen2.5-7B"))
			check_tokens(t, j, &reply);
		free(j);
		n++;
	}
	if (d)
		closedir(d);
	test_cond(n == 20, "20 templates, found %d", n);
	/* Measured: 13 of 20 leave earlier turns as they were (the rest drop
	 * reasoning, move the system text, or change the generation prompt). */
	printf("%d of %d templates render a conversation as its turns' concatenation\n", stable, n);
	test_cond(stable >= 13, "prefix-stable templates: %d", stable);
	kvc_tokens_free(&reply);
	tok_free(t);
	return test_done();
}
