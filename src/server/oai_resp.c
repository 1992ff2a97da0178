/*
 * oai_resp.c: what the server sends, in OpenAI's shapes, built with
 * jansson: error bodies, the model list, stream events (chat.completion.chunk
 * or text_completion), the usage and timings objects, non-streamed bodies.
 *
 * timings follows llama-server's object (prompt_n, prompt_ms,
 * prompt_per_token_ms, prompt_per_second, predicted_*, and cache_n the
 * positions reused), so tools written for it read ours.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "srv_int.h"

const char *
oai_error_type(int status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 404: return "not_found_error";
	case 409: return "conflict_error";
	case 413: return "request_too_large";
	case 429: return "rate_limit_error";
	case 503: return "unavailable_error";
	default: return status >= 500 ? "server_error" : "invalid_request_error";
	}
}

/* Append j (consumed) dumped compactly, or KVC_ENOMEM. */
static int
dump(struct kvc_buf *out, json_t *j)
{
	char *s;
	int rc;

	if (j == NULL)
		return KVC_ENOMEM;
	s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (s == NULL)
		return KVC_ENOMEM;
	rc = kvc_buf_append(out, s, strlen(s));
	free(s);
	return rc;
}

int
oai_error(struct kvc_buf *out, int status, const char *msg)
{
	return dump(out, json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", msg,
	    "type", oai_error_type(status), "param", "code", status));
}

int
oai_models(struct kvc_buf *out, const char *model_id, long created)
{
	return dump(out, json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data",
	    "id", model_id, "object", "model", "created", (json_int_t)created, "owned_by", "kvchat"));
}

static json_t *
usage(const struct srv_job *j)
{
	int prompt = j->n_prompt, gen = j->n_gen;

	return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", prompt, "completion_tokens",
	    gen, "total_tokens", prompt + gen, "prompt_tokens_details", "cached_tokens", j->cached);
}

static json_t *
timings(const struct srv_job *j)
{
	double tp = (j->t_prefilled - j->t_start) * 1e3, td = (j->t_end - j->t_prefilled) * 1e3;
	int np = j->computed, nd = j->n_gen;

	return json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}", "cache_n", j->cached,
	    "prompt_n", np, "prompt_ms", tp, "prompt_per_token_ms", np > 0 ? tp / np : 0.0,
	    "prompt_per_second", tp > 0 ? np * 1e3 / tp : 0.0, "predicted_n", nd,
	    "predicted_ms", td, "predicted_per_token_ms", nd > 0 ? td / nd : 0.0,
	    "predicted_per_second", td > 0 ? nd * 1e3 / td : 0.0);
}

/* The object every response and event starts with. */
static json_t *
head(const struct srv_job *j, const char *object)
{
	json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", j->id, "object", object, "created",
	    (json_int_t)j->created, "model", j->srv->p.model_id);

	if (o != NULL && j->conv_out > 0)
		json_object_set_new(o, "conversation", json_integer(j->conv_out));
	if (o != NULL && j->conv_cache != NULL)
		json_object_set_new(o, "conversation_cache", json_string(j->conv_cache));
	return o;
}

/* "data: " + j (consumed) + "\n\n" */
static int
event(struct kvc_buf *out, json_t *j)
{
	int rc = kvc_buf_append(out, "data: ", 6);

	rc |= dump(out, j);
	rc |= kvc_buf_append(out, "\n\n", 2);
	return rc ? KVC_ENOMEM : KVC_OK;
}

int
oai_event(struct kvc_buf *out, const struct srv_job *j, const char *text, size_t n,
    bool first, const char *finish)
{
	bool chat = j->kind == SRV_CHAT;
	json_t *o = head(j, chat ? "chat.completion.chunk" : "text_completion");
	json_t *choice = json_pack("{s:i, s:n}", "index", 0, "logprobs");
	json_t *s = json_stringn(text ? text : "", text ? n : 0);

	if (o == NULL || choice == NULL || s == NULL) {
		json_decref(o);
		json_decref(choice);
		json_decref(s);
		return KVC_ENOMEM;
	}
	if (chat) {
		json_t *delta = json_object();

		if (first)
			json_object_set_new(delta, "role", json_string("assistant"));
		if (text != NULL)
			json_object_set_new(delta, "content", s);
		else
			json_decref(s);
		json_object_set_new(choice, "delta", delta);
	} else {
		json_object_set_new(choice, "text", s);
	}
	json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
	json_object_set_new(o, "choices", json_pack("[o]", choice));
	return event(out, o);
}

int
oai_stream_end(struct kvc_buf *out, const struct srv_job *j)
{
	int rc = KVC_OK;

	if (j->include_usage) {
		json_t *o = head(j, j->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");

		if (o == NULL)
			return KVC_ENOMEM;
		json_object_set_new(o, "choices", json_array());
		json_object_set_new(o, "usage", usage(j));
		json_object_set_new(o, "timings", timings(j));
		rc = event(out, o);
	}
	if (rc == KVC_OK)
		rc = kvc_buf_append(out, "data: [DONE]\n\n", 14);
	return rc;
}

int
oai_body(struct kvc_buf *out, const struct srv_job *j)
{
	bool chat = j->kind == SRV_CHAT;
	json_t *o = head(j, chat ? "chat.completion" : "text_completion");
	json_t *text = json_stringn(j->text.p ? j->text.p : "", j->text.n);
	json_t *choice = json_pack("{s:i, s:n, s:s}", "index", 0, "logprobs", "finish_reason",
	    j->finish ? j->finish : "stop");

	if (o == NULL || text == NULL || choice == NULL) {
		json_decref(o);
		json_decref(text);
		json_decref(choice);
		return KVC_ENOMEM;
	}
	if (chat)
		json_object_set_new(choice, "message", json_pack("{s:s, s:o}", "role", "assistant",
		    "content", text));
	else
		json_object_set_new(choice, "text", text);
	json_object_set_new(o, "choices", json_pack("[o]", choice));
	json_object_set_new(o, "usage", usage(j));
	json_object_set_new(o, "timings", timings(j));
	return dump(out, o);
}
