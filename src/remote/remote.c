/*
 * remote.c: kvchat --endpoint's client, on libcurl and jansson.
 *
 * A reply is one POST of the whole conversation with "stream": true and
 * stream_options.include_usage (servers that ignore it simply send no
 * usage). The body comes back as server-sent events: lines "data: {json}"
 * separated by blank lines, ending with "data: [DONE]". Bytes arrive in
 * pieces of any size, so they are gathered into lines first. A response
 * that is not 200 is read whole and its OpenAI-shaped error message, when
 * there is one, becomes err. Ctrl-C: libcurl's progress callback sees the
 * caller's flag and aborts the transfer, which closes the connection, and
 * a server that notices (kvchat serve, vLLM, llama-server do) stops
 * generating.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "remote.h"

int
rmt_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? KVC_OK : KVC_EIO;
}

void
rmt_global_cleanup(void)
{
	curl_global_cleanup();
}

/* One transfer's state, shared with libcurl's callbacks. */
struct xfer {
	struct kvc_buf line;		/* the event line being gathered */
	struct kvc_buf body;		/* a non-streamed (or error) body */
	int (*on_text)(void *arg, const char *s, size_t len);
	void *arg;
	volatile sig_atomic_t *interrupt;
	struct kvc_buf *reply;
	struct rmt_stats *st;
	double t0, t_first;
	bool streaming;			/* a 200 with events: lines are parsed */
	bool stopped;			/* the caller asked to stop */
	bool done;			/* [DONE] seen */
	int rc;				/* an error seen inside the stream */
	char *err;
	size_t errlen;
};

/* One "data: ..." event's JSON. */
static void
on_event(struct xfer *x, const char *data, size_t n)
{
	json_error_t je;
	json_t *ev = json_loadb(data, n, 0, &je), *usage, *ch, *e;

	if (ev == NULL) {
		kvc_err(x->err, x->errlen, "an event that is not JSON: %s", je.text);
		x->rc = KVC_EFORMAT;
		return;
	}
	if ((e = json_object_get(ev, "error")) != NULL) {
		const char *m = json_string_value(json_object_get(e, "message"));

		kvc_err(x->err, x->errlen, "the server: %s", m ? m : "an error");
		x->rc = KVC_EIO;
	}
	usage = json_object_get(ev, "usage");
	if (json_is_object(usage)) {
		json_t *c = json_object_get(json_object_get(usage, "prompt_tokens_details"),
		    "cached_tokens");

		x->st->prompt_tokens = (int)json_integer_value(json_object_get(usage, "prompt_tokens"));
		x->st->completion_tokens = (int)json_integer_value(json_object_get(usage,
		    "completion_tokens"));
		if (json_is_integer(c))
			x->st->cached_tokens = (int)json_integer_value(c);
	}
	ch = json_array_get(json_object_get(ev, "choices"), 0);
	if (ch != NULL) {
		json_t *content = json_object_get(json_object_get(ch, "delta"), "content");
		const char *fin = json_string_value(json_object_get(ch, "finish_reason"));

		if (fin != NULL)
			snprintf(x->st->finish, sizeof x->st->finish, "%s", fin);
		if (json_is_string(content) && json_string_length(content) > 0) {
			const char *s = json_string_value(content);
			size_t len = json_string_length(content);

			if (x->t_first == 0)
				x->t_first = kvc_now();
			if (kvc_buf_append(x->reply, s, len) != KVC_OK)
				x->rc = KVC_ENOMEM;
			else if (x->on_text != NULL && x->on_text(x->arg, s, len) != 0)
				x->stopped = true;
		}
	}
	json_decref(ev);
}

/* A whole line of the stream: an event, a comment, or a blank separator. */
static void
on_line(struct xfer *x, const char *s, size_t n)
{
	if (n > 0 && s[n - 1] == '\r')
		n--;
	if (n < 5 || strncmp(s, "data:", 5) != 0)
		return;		/* blank lines, ": comments", event: and id: fields */
	s += 5;
	n -= 5;
	if (n > 0 && *s == ' ')
		s++, n--;
	if (n == 6 && memcmp(s, "[DONE]", 6) == 0)
		x->done = true;
	else
		on_event(x, s, n);
}

static size_t
on_bytes(char *p, size_t size, size_t nmemb, void *arg)
{
	struct xfer *x = arg;
	size_t n = size * nmemb;

	if (!x->streaming) {
		/* the status is known once the body begins */
		return kvc_buf_append(&x->body, p, n) == KVC_OK ? n : 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '\n') {
			if (kvc_buf_append(&x->line, p + i, 1) != KVC_OK)
				return 0;
			continue;
		}
		on_line(x, x->line.p ? x->line.p : "", x->line.n);
		x->line.n = 0;
		if (x->stopped || x->rc != KVC_OK)
			return 0;	/* aborts the transfer */
	}
	return n;
}

/* libcurl's progress callback: the caller's interrupt stops the transfer. */
static int
on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct xfer *x = arg;

	(void)dt, (void)dn, (void)ut, (void)un;
	if (x->interrupt != NULL && *x->interrupt) {
		x->stopped = true;
		return 1;
	}
	return 0;
}

/* The message of an error body ({"error": {"message": ...}} or {"error": "..."}), into err. */
static void
error_of(const struct kvc_buf *body, long code, char *err, size_t errlen)
{
	json_t *j = body->n ? json_loadb(body->p, body->n, 0, NULL) : NULL;
	json_t *e = json_object_get(j, "error");
	const char *m = json_is_string(e) ? json_string_value(e) :
	    json_string_value(json_object_get(e, "message"));

	if (m != NULL)
		kvc_err(err, errlen, "HTTP %ld: %s", code, m);
	else
		kvc_err(err, errlen, "HTTP %ld%s%.*s", code, body->n ? ": " : "",
		    (int)(body->n > 200 ? 200 : body->n), body->p ? body->p : "");
	json_decref(j);
}

/* A curl handle for url with the key and the common options; NULL on failure. */
static CURL *
handle(const struct rmt_params *p, const char *path, struct curl_slist **hdrs)
{
	CURL *c = curl_easy_init();
	struct kvc_buf url = {0}, auth = {0};

	if (c == NULL)
		return NULL;
	if (kvc_buf_printf(&url, "%s%s%s", p->base_url, p->base_url[0] &&
	    p->base_url[strlen(p->base_url) - 1] == '/' ? "" : "/", path) != KVC_OK) {
		curl_easy_cleanup(c);
		return NULL;
	}
	curl_easy_setopt(c, CURLOPT_URL, url.p);
	kvc_buf_free(&url);
	*hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	if (p->api_key != NULL && kvc_buf_printf(&auth, "Authorization: Bearer %s", p->api_key) ==
	    KVC_OK) {
		*hdrs = curl_slist_append(*hdrs, auth.p);
		memset(auth.p, 0, auth.n);
	}
	kvc_buf_free(&auth);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, p->timeout_s > 0 ? p->timeout_s : 30L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	/* only http and https, also after a redirect: a URL never opens a file */
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	return c;
}

int
rmt_first_model(const struct rmt_params *p, char *out, size_t len, char *err, size_t errlen)
{
	struct curl_slist *hdrs = NULL;
	struct xfer x;
	CURL *c = handle(p, "models", &hdrs);
	CURLcode cc;
	long code = 0;
	json_t *j, *id;
	int rc = KVC_OK;

	if (c == NULL) {
		kvc_err(err, errlen, "cannot set up the connection");
		return KVC_ENOMEM;
	}
	memset(&x, 0, sizeof x);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_bytes);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
	cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (cc != CURLE_OK) {
		kvc_err(err, errlen, "%s: %s", p->base_url, curl_easy_strerror(cc));
		rc = KVC_EIO;
	} else if (code != 200) {
		error_of(&x.body, code, err, errlen);
		rc = KVC_EIO;
	} else {
		j = json_loadb(x.body.p ? x.body.p : "", x.body.n, 0, NULL);
		id = json_object_get(json_array_get(json_object_get(j, "data"), 0), "id");
		if (json_is_string(id))
			snprintf(out, len, "%s", json_string_value(id));
		else {
			kvc_err(err, errlen, "%s/models lists no model (--remote-model names one)",
			    p->base_url);
			rc = KVC_EFORMAT;
		}
		json_decref(j);
	}
	kvc_buf_free(&x.body);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(c);
	return rc;
}

/* The request body: model, messages, stream with usage, and what the caller set. */
static char *
request_body(const struct rmt_params *p, const struct rmt_msg *msgs, size_t n)
{
	json_t *arr = json_array(), *o;
	char *s;

	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, json_pack("{s:s, s:s}", "role", msgs[i].role, "content",
		    msgs[i].text));
	o = json_pack("{s:s, s:o, s:b, s:{s:b}}", "model", p->model, "messages", arr, "stream", 1,
	    "stream_options", "include_usage", 1);
	if (o == NULL)
		return NULL;
	if (p->temperature >= 0)
		json_object_set_new(o, "temperature", json_real(p->temperature));
	if (p->top_p >= 0)
		json_object_set_new(o, "top_p", json_real(p->top_p));
	if (p->min_p >= 0)
		json_object_set_new(o, "min_p", json_real(p->min_p));
	if (p->top_k >= 0)
		json_object_set_new(o, "top_k", json_integer(p->top_k));
	if (p->repeat_penalty >= 0) {
		json_object_set_new(o, "repeat_penalty", json_real(p->repeat_penalty));
		json_object_set_new(o, "repetition_penalty", json_real(p->repeat_penalty));
	}
	/* JSON integers are signed 64-bit here: a larger seed goes as its low 63 bits */
	if (p->has_seed)
		json_object_set_new(o, "seed", json_integer((json_int_t)(p->seed & INT64_MAX)));
	if (p->max_tokens > 0)
		json_object_set_new(o, "max_tokens", json_integer(p->max_tokens));
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

/* Where the status is known: a 200 streams events, anything else is an error body. */
static size_t
on_header(char *p, size_t size, size_t nmemb, void *arg)
{
	struct xfer *x = arg;
	size_t n = size * nmemb;

	if (n >= 12 && strncmp(p, "HTTP/", 5) == 0) {
		const char *sp = memchr(p, ' ', n);

		x->streaming = sp != NULL && (size_t)(sp - p) + 4 <= n && strncmp(sp + 1, "200", 3) == 0;
	}
	return n;
}

int
rmt_chat(const struct rmt_params *p, const struct rmt_msg *msgs, size_t n,
    int (*on_text)(void *arg, const char *s, size_t len), void *arg,
    volatile sig_atomic_t *interrupt, struct kvc_buf *reply, struct rmt_stats *st,
    char *err, size_t errlen)
{
	struct curl_slist *hdrs = NULL;
	struct xfer x;
	char *body = request_body(p, msgs, n);
	CURL *c = body ? handle(p, "chat/completions", &hdrs) : NULL;
	CURLcode cc;
	long code = 0;
	double t_end;
	int rc = KVC_OK;

	memset(st, 0, sizeof *st);
	st->prompt_tokens = st->completion_tokens = st->cached_tokens = -1;
	if (c == NULL) {
		free(body);
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	memset(&x, 0, sizeof x);
	x.on_text = on_text;
	x.arg = arg;
	x.interrupt = interrupt;
	x.reply = reply;
	x.st = st;
	x.err = err;
	x.errlen = errlen;
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_bytes);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	x.t0 = kvc_now();
	cc = curl_easy_perform(c);
	t_end = kvc_now();
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (x.line.n > 0 && x.rc == KVC_OK && !x.stopped)
		on_line(&x, x.line.p, x.line.n);	/* a last line without its newline */
	if (x.stopped) {
		st->interrupted = true;
	} else if (x.rc != KVC_OK) {
		rc = x.rc;
	} else if (cc != CURLE_OK) {
		kvc_err(err, errlen, "%s: %s", p->base_url, curl_easy_strerror(cc));
		rc = KVC_EIO;
	} else if (code != 200) {
		error_of(&x.body, code, err, errlen);
		rc = KVC_EIO;
	}
	if (x.t_first > 0) {
		st->ttft_ms = (x.t_first - x.t0) * 1e3;
		if (st->completion_tokens > 1 && t_end > x.t_first)
			st->decode_tps = (st->completion_tokens - 1) / (t_end - x.t_first);
	}
	kvc_buf_free(&x.line);
	kvc_buf_free(&x.body);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(c);
	free(body);
	return rc;
}
