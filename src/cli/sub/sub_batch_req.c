/*
 * sub_batch_req.c: one line of kvchat batch's input read into a request.
 *
 * A line is one JSON object (core's strict reader): {"prompt": TEXT}, a
 * raw completion tokenized as kvchat generate tokenizes -p, or
 * {"messages": [{"role": "system"|"user"|"assistant", "content": TEXT},
 * ...]}, rendered by the model's chat template with the generation prompt,
 * as the chat renders a conversation; beside either, "max_tokens" and the
 * sampler settings by their /set names, parsed and ranged by the settings
 * table as the command line's. Unknown keys are refused, so a misspelt
 * setting is not silently ignored.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv/conv.h"
#include "sub_batch.h"

/* r->error = "line L: " + message; KVC_OK, or KVC_ENOMEM. */
static int
fail(struct batch_req *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int
fail(struct batch_req *r, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	struct kvc_buf b = {0};

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (kvc_buf_printf(&b, "line %d: %s", r->line, msg) != KVC_OK)
		return KVC_ENOMEM;
	r->error = b.p;
	return KVC_OK;
}

/* A string value without NUL bytes (text the tokenizer and templates take as C strings). */
static const char *
text_of(const struct kvc_json *v)
{
	if (v == NULL || v->type != KVC_JSON_STR || memchr(v->str, '\0', v->len) != NULL)
		return NULL;
	return v->str;
}

static int
parse_messages(struct batch_req *r, const struct kvc_json *m, struct kvc_engine *e,
    const struct batch_defaults *d)
{
	struct chat_msg *msgs;
	char err[512] = "";
	int rc;

	if (m->type != KVC_JSON_ARR || m->n == 0)
		return fail(r, "\"messages\" must be a non-empty array");
	msgs = calloc(m->n, sizeof *msgs);
	if (msgs == NULL)
		return KVC_ENOMEM;
	for (size_t i = 0; i < m->n; i++) {
		const struct kvc_json *o = &m->kids[i], *role = kvc_json_get(o, "role");
		const char *rs = text_of(role), *content = text_of(kvc_json_get(o, "content"));

		if (o->type != KVC_JSON_OBJ || rs == NULL || content == NULL ||
		    o->n != 2) {
			free(msgs);
			return fail(r, "message %zu must be {\"role\": ..., \"content\": TEXT} (strings, "
			    "no other keys)", i + 1);
		}
		if (strcmp(rs, "system") == 0)
			msgs[i].role = CHAT_SYSTEM;
		else if (strcmp(rs, "user") == 0)
			msgs[i].role = CHAT_USER;
		else if (strcmp(rs, "assistant") == 0)
			msgs[i].role = CHAT_ASSISTANT;
		else {
			free(msgs);
			return fail(r, "message %zu: role \"%s\" is not system, user or assistant",
			    i + 1, rs);
		}
		msgs[i].text = content;
	}
	r->chat = true;
	rc = chat_render(eng_tokenizer(e), d->family, d->jinja, msgs, m->n, true, &r->prompt,
	    err, sizeof err);
	free(msgs);
	if (rc == KVC_ENOMEM)
		return rc;
	if (rc != KVC_OK)
		return fail(r, "messages: %s", err[0] ? err : kvc_strerror(rc));
	return KVC_OK;
}

static int
parse_prompt(struct batch_req *r, const struct kvc_json *p, struct kvc_engine *e)
{
	const struct kvc_tokenizer *tok = eng_tokenizer(e);
	const char *s = text_of(p);
	char err[512] = "";
	int rc;

	if (s == NULL)
		return fail(r, "\"prompt\" must be a string (without NUL characters)");
	rc = tok_encode(tok, s, strlen(s), tok_add_bos_default(tok) ? TOK_ADD_BOS : 0, &r->prompt,
	    err, sizeof err);
	if (rc == KVC_ENOMEM)
		return rc;
	if (rc != KVC_OK)
		return fail(r, "prompt: %s", err);
	/* nothing to continue from: BOS alone, as kvchat generate starts */
	if (r->prompt.n == 0) {
		if (tok_bos(tok) < 0)
			return fail(r, "empty prompt and the model has no BOS token to start from");
		if (kvc_tokens_push(&r->prompt, tok_bos(tok)) != KVC_OK)
			return KVC_ENOMEM;
	}
	return KVC_OK;
}

/* max_tokens and the sampler settings; the other keys are refused. */
static int
parse_options(struct batch_req *r, const struct kvc_json *o)
{
	struct conv_settings set = conv_default_settings();
	char err[256];

	set.smp = r->smp;
	for (size_t i = 0; i < o->n; i++) {
		const struct kvc_json *v = &o->kids[i];
		const struct conv_setting *row;
		long mt;

		if (strcmp(v->key, "prompt") == 0 || strcmp(v->key, "messages") == 0)
			continue;
		if (strcmp(v->key, "max_tokens") == 0) {
			if (v->type != KVC_JSON_NUM || kvc_parse_long(v->str, 0, 1L << 30, &mt) != KVC_OK)
				return fail(r, "\"max_tokens\" must be an integer from 0 to %ld", 1L << 30);
			r->max_tokens = (int)mt;
			continue;
		}
		row = conv_setting_find(v->key);
		if (row == NULL || !row->smp || strcmp(row->name, v->key) != 0)
			return fail(r, "unknown key \"%s\" (prompt, messages, max_tokens, temperature, "
			    "top_k, top_p, min_p, repeat_penalty, seed)", v->key);
		if (v->type != KVC_JSON_NUM)
			return fail(r, "\"%s\" must be a number, not a %s", v->key,
			    kvc_json_type_name(v->type));
		if (conv_setting_apply(&set, row, v->key, v->str, err, sizeof err) != KVC_OK)
			return fail(r, "%s", err);
	}
	r->smp = set.smp;
	return KVC_OK;
}

int
batch_req_parse(struct batch_req *r, const char *text, size_t n, int line, int index,
    struct kvc_engine *e, const struct batch_defaults *d)
{
	struct kvc_json *j = NULL;
	const struct kvc_json *p, *m;
	char err[256] = "";
	int rc;

	memset(r, 0, sizeof *r);
	r->line = line;
	r->index = index;
	r->max_tokens = d->max_tokens;
	r->smp = d->smp;
	rc = kvc_json_parse(text, n, &j, err, sizeof err);
	if (rc == KVC_ENOMEM)
		return rc;
	if (rc != KVC_OK)
		return fail(r, "%s", err);
	p = kvc_json_get(j, "prompt");
	m = kvc_json_get(j, "messages");
	if (j->type != KVC_JSON_OBJ)
		rc = fail(r, "expected an object, not a%s %s", j->type == KVC_JSON_ARR ? "n" : "",
		    kvc_json_type_name(j->type));
	else if ((p == NULL) == (m == NULL))
		rc = fail(r, "give either \"prompt\" or \"messages\"%s", p ? ", not both" : "");
	else if ((rc = parse_options(r, j)) != KVC_OK || r->error != NULL)
		;
	else if (p != NULL)
		rc = parse_prompt(r, p, e);
	else
		rc = parse_messages(r, m, e, d);
	if (rc == KVC_OK && r->error == NULL && r->prompt.n > (size_t)eng_n_ctx(e))
		rc = fail(r, "the prompt has %zu tokens, the context only %d (--ctx)", r->prompt.n,
		    eng_n_ctx(e));
	kvc_json_free(j);
	return rc;
}

void
batch_req_free(struct batch_req *r)
{
	free(r->error);
	kvc_tokens_free(&r->prompt);
	kvc_tokens_free(&r->ids);
	kvc_buf_free(&r->text);
	if (r->sampler)
		smp_free(r->sampler);
	r->error = NULL;
	r->sampler = NULL;
}
