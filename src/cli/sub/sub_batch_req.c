/*
 * sub_batch_req.c: one line of kvchat batch's input read into a request.
 *
 * A line is one JSON object (read by jansson, strictly: one value, no
 * duplicate keys, valid UTF-8): {"prompt": TEXT}, a
 * raw completion tokenized as kvchat generate tokenizes -p, or
 * {"messages": [{"role": "system"|"user"|"assistant", "content": TEXT},
 * ...]}, rendered by the model's chat template with the generation prompt,
 * as the chat renders a conversation; beside either, "max_tokens" and the
 * sampler settings by their /set names, parsed and ranged by the settings
 * table as the command line's. Unknown keys are refused, so a misspelt
 * setting is not silently ignored. jansson's integers are 64-bit signed:
 * a seed above 2^63 - 1 (the sampler takes 64 bits) is refused by name.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

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
text_of(const json_t *v)
{
	if (!json_is_string(v) || memchr(json_string_value(v), '\0', json_string_length(v)) != NULL)
		return NULL;
	return json_string_value(v);
}

/* What a value is, in the words of JSON's grammar. */
static const char *
type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "object";
	case JSON_ARRAY: return "array";
	case JSON_STRING: return "string";
	case JSON_INTEGER: case JSON_REAL: return "number";
	case JSON_TRUE: case JSON_FALSE: return "boolean";
	case JSON_NULL: break;
	}
	return "null";
}

/*
 * A number as the text the settings table parses, the way it was written
 * as far as the value goes: an integer in digits, any other number as the
 * shortest text strtod reads back to the same double, with ".0" where
 * that would look like an integer, so 1e3 is still refused where an
 * integer is wanted, as the command line refuses it.
 */
static void
number_text(const json_t *v, char *buf, size_t len)
{
	double d = json_real_value(v);

	if (json_is_integer(v)) {
		snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, len, "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	if (strpbrk(buf, ".eEni") == NULL && strlen(buf) + 2 < len)
		strcat(buf, ".0");
}

static int
parse_messages(struct batch_req *r, const json_t *m, struct kvc_engine *e,
    const struct batch_defaults *d)
{
	struct chat_msg *msgs;
	char err[512] = "";
	int rc;

	if (!json_is_array(m) || json_array_size(m) == 0)
		return fail(r, "\"messages\" must be a non-empty array");
	msgs = calloc(json_array_size(m), sizeof *msgs);
	if (msgs == NULL)
		return KVC_ENOMEM;
	for (size_t i = 0; i < json_array_size(m); i++) {
		const json_t *o = json_array_get(m, i);
		const char *rs = text_of(json_object_get(o, "role"));
		const char *content = text_of(json_object_get(o, "content"));

		if (!json_is_object(o) || rs == NULL || content == NULL || json_object_size(o) != 2) {
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
	rc = chat_render(eng_tokenizer(e), d->family, d->jinja, msgs, json_array_size(m), true, &r->prompt,
	    err, sizeof err);
	free(msgs);
	if (rc == KVC_ENOMEM)
		return rc;
	if (rc != KVC_OK)
		return fail(r, "messages: %s", err[0] ? err : kvc_strerror(rc));
	return KVC_OK;
}

static int
parse_prompt(struct batch_req *r, const json_t *p, struct kvc_engine *e)
{
	const struct kvc_tokenizer *tok;
	const char *s = text_of(p);
	char err[512] = "";
	int rc;

	if (s == NULL)
		return fail(r, "\"prompt\" must be a string (without NUL characters)");
	tok = eng_tokenizer(e);
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
parse_options(struct batch_req *r, json_t *o)
{
	struct conv_settings set = conv_default_settings();
	char err[256], num[40] = "";
	const char *key;
	json_t *v;

	set.smp = r->smp;
	json_object_foreach(o, key, v) {
		const struct conv_setting *row;
		long mt;

		if (strcmp(key, "prompt") == 0 || strcmp(key, "messages") == 0)
			continue;
		if (json_is_number(v))
			number_text(v, num, sizeof num);
		if (strcmp(key, "max_tokens") == 0) {
			if (!json_is_integer(v) || kvc_parse_long(num, 0, 1L << 30, &mt) != KVC_OK)
				return fail(r, "\"max_tokens\" must be an integer from 0 to %ld", 1L << 30);
			r->max_tokens = (int)mt;
			continue;
		}
		row = conv_setting_find(key);
		if (row == NULL || !row->smp || strcmp(row->name, key) != 0)
			return fail(r, "unknown key \"%s\" (prompt, messages, max_tokens, temperature, "
			    "top_k, top_p, min_p, repeat_penalty, seed)", key);
		if (!json_is_number(v))
			return fail(r, "\"%s\" must be a number, not a %s", key, type_name(v));
		if (conv_setting_apply(&set, row, key, num, err, sizeof err) != KVC_OK)
			return fail(r, "%s", err);
	}
	r->smp = set.smp;
	return KVC_OK;
}

/*
 * A line jansson refused as a number too big for its 64-bit integers: the
 * member that holds it, found by reading the line again with integers as
 * doubles, named in r->error. KVC_OK (r->error set) or KVC_ENOMEM.
 */
static int
fail_big_integer(struct batch_req *r, const char *text, size_t n, const json_error_t *je)
{
	json_t *j = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, NULL);
	const char *key, *big = NULL;
	json_t *v;
	int rc;

	if (json_is_object(j))
		json_object_foreach(j, key, v)
			if (big == NULL && json_is_real(v) && fabs(json_real_value(v)) >= 0x1p63)
				big = key;
	if (big != NULL && strcmp(big, "seed") == 0)
		rc = fail(r, "\"seed\" is out of range: from 0 to %" JSON_INTEGER_FORMAT " (JSON integers "
		    "are read as 64-bit signed numbers), or -1 for a random one", (json_int_t)INT64_MAX);
	else if (big != NULL)
		rc = fail(r, "\"%s\": the number is too big", big);
	else
		rc = fail(r, "JSON: %s at byte %d", je->text, je->position);
	json_decref(j);
	return rc;
}

int
batch_req_parse(struct batch_req *r, const char *text, size_t n, int line, int index,
    struct kvc_engine *e, const struct batch_defaults *d)
{
	json_t *j;
	const json_t *p, *m;
	json_error_t je;
	int rc = KVC_OK;

	memset(r, 0, sizeof *r);
	r->line = line;
	r->index = index;
	r->max_tokens = d->max_tokens;
	r->smp = d->smp;
	/* any value (a non-object is refused below by name), NULs kept for text_of to refuse */
	j = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &je);
	if (j == NULL)
		return json_error_code(&je) == json_error_out_of_memory ? KVC_ENOMEM :
		    json_error_code(&je) == json_error_numeric_overflow ?
		    fail_big_integer(r, text, n, &je) : fail(r, "JSON: %s at byte %d", je.text, je.position);
	p = json_object_get(j, "prompt");
	m = json_object_get(j, "messages");
	if (!json_is_object(j))
		rc = fail(r, "expected an object, not a%s %s", json_is_array(j) ? "n" : "", type_name(j));
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
	json_decref(j);
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
