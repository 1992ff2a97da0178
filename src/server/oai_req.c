/*
 * oai_req.c: a request body read into a job, with jansson: every field the
 * server uses is checked for its type and range (a wrong one is a 400 that
 * names it), a model other than the one served is a 404, and fields it does
 * not use (user, logit_bias, tools...) are ignored as OpenAI-compatible
 * servers ignore them. Nothing here names or opens a file.
 *
 * The sampler settings are ranged by the settings table, as /set and the
 * command line range them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "srv_int.h"

/* A copy of a JSON string without NUL bytes (the templates and tokenizer take C strings). */
static char *
text_dup(const json_t *v)
{
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	char *c;

	if (s == NULL || memchr(s, '\0', n) != NULL)
		return NULL;
	if ((c = malloc(n + 1)) != NULL)
		memcpy(c, s, n + 1);
	return c;
}

/*
 * A message's content: a string, or an array of {"type": "text", "text":
 * ...} parts joined (OpenAI's content parts; other part types refused).
 * NULL with err on a bad one.
 */
static char *
content_of(const json_t *c, size_t i, char *err, size_t errlen)
{
	struct kvc_buf b = {0};
	size_t k;
	json_t *part;

	if (json_is_string(c)) {
		char *t = text_dup(c);

		if (t == NULL)
			kvc_err(err, errlen, "messages[%zu].content must not contain NUL characters", i);
		return t;
	}
	if (json_is_null(c) && kvc_buf_append(&b, "", 0) == KVC_OK)
		return b.p;	/* an assistant turn without text */
	if (!json_is_array(c)) {
		kvc_err(err, errlen, "messages[%zu].content must be a string or an array of text parts", i);
		return NULL;
	}
	json_array_foreach(c, k, part) {
		const char *type = json_string_value(json_object_get(part, "type"));
		const json_t *t = json_object_get(part, "text");

		if (type == NULL || strcmp(type, "text") != 0 || !json_is_string(t) ||
		    memchr(json_string_value(t), '\0', json_string_length(t)) != NULL) {
			kvc_err(err, errlen, "messages[%zu].content[%zu] must be {\"type\": \"text\", "
			    "\"text\": STRING} (only text is supported)", i, k);
			kvc_buf_free(&b);
			return NULL;
		}
		if (kvc_buf_append(&b, json_string_value(t), json_string_length(t)) != KVC_OK) {
			kvc_err(err, errlen, "out of memory");
			kvc_buf_free(&b);
			return NULL;
		}
	}
	if (kvc_buf_append(&b, "", 0) != KVC_OK) {
		kvc_err(err, errlen, "out of memory");
		return NULL;
	}
	return b.p;
}

static int
parse_messages(struct srv_job *j, const json_t *m, char *err, size_t errlen)
{
	size_t i;
	json_t *o;

	if (!json_is_array(m) || json_array_size(m) == 0) {
		kvc_err(err, errlen, "\"messages\" must be a non-empty array");
		return 400;
	}
	if ((j->msgs = calloc(json_array_size(m), sizeof *j->msgs)) == NULL) {
		kvc_err(err, errlen, "out of memory");
		return 500;
	}
	json_array_foreach(m, i, o) {
		const char *role = json_string_value(json_object_get(o, "role"));
		struct chat_msg *cm = &j->msgs[i];

		if (!json_is_object(o) || role == NULL) {
			kvc_err(err, errlen, "messages[%zu] must be an object with a string \"role\"", i);
			return 400;
		}
		if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0)
			cm->role = CHAT_SYSTEM;
		else if (strcmp(role, "user") == 0)
			cm->role = CHAT_USER;
		else if (strcmp(role, "assistant") == 0)
			cm->role = CHAT_ASSISTANT;
		else {
			kvc_err(err, errlen, "messages[%zu].role \"%s\" is not system, developer, user "
			    "or assistant", i, role);
			return 400;
		}
		if ((cm->text = content_of(json_object_get(o, "content"), i, err, errlen)) == NULL)
			return 400;
		j->n_msgs++;
	}
	return 0;
}

/* A number field as the settings table ranges it; 0 or 400. */
static int
setting(struct conv_settings *set, const json_t *root, const char *key, const char *name,
    char *err, size_t errlen)
{
	const struct conv_setting *row = conv_setting_find(name);
	const json_t *v = json_object_get(root, key);
	char num[64];

	if (v == NULL || json_is_null(v))
		return 0;
	if (row->kind == CONV_SET_REAL && json_is_number(v))
		snprintf(num, sizeof num, "%.17g", json_number_value(v));
	else if (row->kind != CONV_SET_REAL && json_is_integer(v))
		snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
	else {
		kvc_err(err, errlen, "\"%s\" must be %s", key, row->kind == CONV_SET_REAL ? "a number" :
		    "an integer");
		return 400;
	}
	if (row->kind == CONV_SET_SEED && json_integer_value(v) < 0) {
		set->smp.seed = KVC_SEED_RANDOM;	/* -1: a seed from the clock, as /set takes it */
		return 0;
	}
	if (conv_setting_apply(set, row, key, num, err, errlen) != KVC_OK)
		return 400;
	return 0;
}

static int
parse_stop(struct srv_job *j, const json_t *v, char *err, size_t errlen)
{
	size_t i;
	json_t *s;

	if (v == NULL || json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		if (json_string_length(v) == 0 || json_string_length(v) > SRV_STOP_LEN ||
		    (j->stop[0] = text_dup(v)) == NULL)
			goto bad;
		j->n_stop = 1;
		return 0;
	}
	if (!json_is_array(v) || json_array_size(v) > SRV_MAX_STOP)
		goto bad;
	json_array_foreach(v, i, s) {
		if (!json_is_string(s) || json_string_length(s) == 0 ||
		    json_string_length(s) > SRV_STOP_LEN || (j->stop[j->n_stop] = text_dup(s)) == NULL)
			goto bad;
		j->n_stop++;
	}
	return 0;
bad:
	kvc_err(err, errlen, "\"stop\" must be a string of 1 to %d bytes or an array of up to %d "
	    "of them", SRV_STOP_LEN, SRV_MAX_STOP);
	return 400;
}

/* "conversation": an id, or "new"; the header gives the same. 0 or 400. */
static int
parse_conv(struct srv_job *j, const json_t *v, const char *header, char *err, size_t errlen)
{
	long id;

	if ((v == NULL || json_is_null(v)) && header == NULL)
		return 0;
	if (j->kind != SRV_CHAT) {
		kvc_err(err, errlen, "\"conversation\" is for /v1/chat/completions");
		return 400;
	}
	if (j->srv->p.store == NULL) {
		kvc_err(err, errlen, "this server keeps no conversations");
		return 400;
	}
	j->has_conv = true;
	if (v != NULL && json_is_integer(v) && json_integer_value(v) > 0) {
		j->conv_id = (int64_t)json_integer_value(v);
		return 0;
	}
	if (v != NULL && json_is_string(v) && strcmp(json_string_value(v), "new") == 0)
		return 0;
	if (v == NULL && strcmp(header, "new") == 0)
		return 0;
	if (v == NULL && kvc_parse_long(header, 1, 1L << 62, &id) == KVC_OK) {
		j->conv_id = id;
		return 0;
	}
	kvc_err(err, errlen, "\"conversation\" (or X-Kvchat-Conversation) must be a conversation "
	    "id or \"new\"");
	return 400;
}

/* stream, stream_options, n, max_tokens and the sampler settings. 0 or 400. */
static int
parse_options(struct srv_job *j, const json_t *root, char *err, size_t errlen)
{
	const struct srv_params *p = &j->srv->p;
	struct conv_settings set = p->defaults;
	const json_t *v, *mt = json_object_get(root, "max_completion_tokens");
	static const char *const keys[][2] = {
		{ "temperature", "temperature" }, { "top_p", "top_p" }, { "top_k", "top_k" },
		{ "min_p", "min_p" }, { "seed", "seed" }, { "repeat_penalty", "repeat_penalty" },
	};

	if ((v = json_object_get(root, "stream")) != NULL && !json_is_null(v)) {
		if (!json_is_boolean(v)) {
			kvc_err(err, errlen, "\"stream\" must be true or false");
			return 400;
		}
		j->stream = json_is_true(v);
	}
	if ((v = json_object_get(root, "stream_options")) != NULL && !json_is_null(v)) {
		const json_t *u = json_object_get(v, "include_usage");

		if (!json_is_object(v) || (u != NULL && !json_is_boolean(u))) {
			kvc_err(err, errlen, "\"stream_options\" must be {\"include_usage\": BOOL}");
			return 400;
		}
		j->include_usage = json_is_true(u);
	}
	if ((v = json_object_get(root, "n")) != NULL && !json_is_null(v) &&
	    (!json_is_integer(v) || json_integer_value(v) != 1)) {
		kvc_err(err, errlen, "\"n\" must be 1: one choice per request");
		return 400;
	}
	if (mt == NULL || json_is_null(mt))
		mt = json_object_get(root, "max_tokens");
	j->max_tokens = p->max_tokens;
	if (mt != NULL && !json_is_null(mt)) {
		if (!json_is_integer(mt) || json_integer_value(mt) < 0 ||
		    json_integer_value(mt) > p->max_tokens) {
			kvc_err(err, errlen, "\"max_tokens\" must be an integer from 0 to %d (this "
			    "server's --max-tokens)", p->max_tokens);
			return 400;
		}
		j->max_tokens = (int)json_integer_value(mt);
	}
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (setting(&set, root, keys[i][0], keys[i][1], err, errlen) != 0)
			return 400;
	j->smp = set.smp;
	return parse_stop(j, json_object_get(root, "stop"), err, errlen);
}

int
oai_parse(struct srv_job *j, const char *body, size_t n, const char *conv_header,
    char *err, size_t errlen)
{
	json_error_t je;
	json_t *root = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
	const json_t *model, *prompt;
	int st = 400;

	if (root == NULL) {
		kvc_err(err, errlen, "invalid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
		return 400;
	}
	model = json_object_get(root, "model");
	if (!json_is_object(root))
		kvc_err(err, errlen, "the body must be a JSON object");
	else if (model != NULL && !json_is_string(model))
		kvc_err(err, errlen, "\"model\" must be a string");
	else if (model != NULL && strcmp(json_string_value(model), j->srv->p.model_id) != 0) {
		kvc_err(err, errlen, "the model '%s' does not exist: this server serves '%s'",
		    json_string_value(model), j->srv->p.model_id);
		st = 404;
	} else if ((st = parse_options(j, root, err, errlen)) != 0)
		;
	else if ((st = parse_conv(j, json_object_get(root, "conversation"), conv_header, err,
	    errlen)) != 0)
		;
	else if (j->kind == SRV_CHAT)
		st = parse_messages(j, json_object_get(root, "messages"), err, errlen);
	else {
		prompt = json_object_get(root, "prompt");
		if (json_is_array(prompt) && json_array_size(prompt) == 1)
			prompt = json_array_get(prompt, 0);
		if ((j->prompt = text_dup(prompt)) == NULL) {
			kvc_err(err, errlen, "\"prompt\" must be a string (one, without NUL characters)");
			st = 400;
		}
	}
	json_decref(root);
	return st;
}
