/*
 * chat_jinja.c: the model's own template (tokenizer.chat_template) as a
 * chat family, rendered by src/jinja and turned into tokens so that only
 * the template's own text can make special tokens.
 *
 * Each message's content enters the render as a marker (U+E000, its index,
 * U+E001: private-use characters no template touches); the marked text is
 * checked against a render with the real contents (markers replaced by the
 * contents, or by the contents stripped, for templates that trim) and then
 * tokenised piece by piece: template text with special tokens parsed,
 * an assistant reply as the exact ids the model generated, other contents
 * as plain text. When no content holds special-token text (the usual
 * case), the template text and the contents between two replies are
 * tokenised as one text with special tokens parsed, which is exactly what
 * llama.cpp does with the whole rendered prompt.
 *
 * The delta after a reply is what the full render puts after that reply's
 * marker (minus the end-of-turn token the reply's ids already end with, and
 * the spaces or newlines the template writes before it).
 * What a template renders before it may differ from the stream when the
 * template rewrites earlier turns (Qwen3 drops old reasoning, a date
 * string changes at midnight): the whole render (chat_jinja_render_spans)
 * says so, with the tokens each message counts for, and the chat recomputes
 * from the first that differs. strftime_now shows the time of the render.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "chat/chat.h"
#include "jinja/jinja.h"

#define MARK_OPEN "\xee\x80\x80"	/* U+E000 */
#define MARK_CLOSE "\xee\x80\x81"	/* U+E001 */

/* One render's inputs and outputs. */
struct jr {
	const struct kvc_tokenizer *t;
	const struct chat_msg *msgs;
	size_t n;
	struct kvc_buf marked, real;	/* the render with markers, with contents */
	/*
	 * [2n]: each message's content (assistant: text or decoded ids), then
	 * each reply's reasoning (NULL for none); marker k stands for texts[k]
	 */
	char **texts;
	/*
	 * A whole render (not a delta): a reply with reasoning is rendered as
	 * its texts, since its ids hold the reasoning the template may drop
	 */
	bool full;
	bool as_text;			/* every reply rendered as its texts (its ids not used) */
	size_t *reply_at;		/* [n] or NULL: where each reply's ids went in out */
};

/* The text marker k stands for, or NULL. */
static const char *
text_of(const struct jr *r, long k)
{
	return k >= 0 && (size_t)k < 2 * r->n ? r->texts[k] : NULL;
}

static const char *
role_name(enum chat_role r)
{
	return r == CHAT_SYSTEM ? "system" : r == CHAT_USER ? "user" : "assistant";
}

/* An assistant message's content: its text, or its ids decoded without special tokens. */
static int
msg_texts(struct jr *r, char *err, size_t errlen)
{
	r->texts = calloc(r->n ? 2 * r->n : 1, sizeof(*r->texts));
	if (!r->texts)
		return KVC_ENOMEM;
	for (size_t j = 0; j < 2 * r->n; j++) {
		size_t i = j % r->n;
		const struct chat_msg *m = &r->msgs[i];
		struct kvc_buf b = {0};
		int rc = 0;

		if (j >= r->n && !(m->role == CHAT_ASSISTANT && m->reasoning))
			continue;
		if (j >= r->n)
			rc = kvc_buf_append(&b, m->reasoning, strlen(m->reasoning));
		else if (m->text)
			rc = kvc_buf_append(&b, m->text, strlen(m->text));
		else if (m->ids)
			rc = tok_decode(r->t, m->ids, m->n_ids, 0, &b);
		if (rc == 0)
			rc = kvc_buf_append(&b, "", 1);
		if (rc != 0) {
			kvc_buf_free(&b);
			return rc;
		}
		if (strstr(b.p, MARK_OPEN) || strstr(b.p, MARK_CLOSE)) {
			kvc_buf_free(&b);
			kvc_err(err, errlen, "chat: message %zu holds U+E000/U+E001, which the template "
				"renderer reserves", i);
			return KVC_EINVAL;
		}
		r->texts[j] = b.p;
	}
	return 0;
}

/* o[key] = s[0..n) as a JSON string: KVC_OK, KVC_EFORMAT (said) when it is not UTF-8, KVC_ENOMEM. */
static int
put_text(json_t *o, const char *key, const char *s, size_t n, char *err, size_t errlen)
{
	if (kvc_utf8_valid_prefix(s, n) != n) {
		kvc_err(err, errlen, "chat: a %s given to the template is not valid UTF-8", key);
		return KVC_EFORMAT;
	}
	return json_object_set_new(o, key, json_stringn(s, n)) == 0 ? KVC_OK : KVC_ENOMEM;
}

/* The messages (contents or markers) as the template's "messages" list. */
static int
put_messages(struct jr *r, json_t *root, bool marked, char *err, size_t errlen)
{
	json_t *list = json_array();
	int rc = json_object_set_new(root, "messages", list) == 0 ? KVC_OK : KVC_ENOMEM;

	for (size_t i = 0; rc == 0 && i < r->n; i++) {
		json_t *m = json_object();
		char mark[32];
		/* replies as text: the template may cut them (r->as_text), so no marker */
		bool mk = marked && !(r->as_text && r->msgs[i].role == CHAT_ASSISTANT);

		if (json_array_append_new(list, m) != 0 ||
		    json_object_set_new(m, "role", json_string(role_name(r->msgs[i].role))) != 0) {
			rc = KVC_ENOMEM;
			break;
		}
		snprintf(mark, sizeof mark, MARK_OPEN "%zu" MARK_CLOSE, i);
		rc = mk ? put_text(m, "content", mark, strlen(mark), err, errlen) :
		     put_text(m, "content", r->texts[i], strlen(r->texts[i]), err, errlen);
		/* the reasoning under both names the templates read it by */
		for (int f = 0; rc == 0 && r->texts[r->n + i] && f < 2; f++) {
			const char *c = r->texts[r->n + i], *key = f ? "thinking" : "reasoning_content";

			snprintf(mark, sizeof mark, MARK_OPEN "%zu" MARK_CLOSE, r->n + i);
			rc = mk ? put_text(m, key, mark, strlen(mark), err, errlen) :
			     put_text(m, key, c, strlen(c), err, errlen);
		}
	}
	return rc;
}

/* vars_json (an object's members without its braces) read into *out. */
static int
parse_vars(const char *vars_json, json_t **out, char *err, size_t errlen)
{
	struct kvc_buf b = {0};
	json_error_t je;
	int rc = kvc_buf_printf(&b, "{%s}", vars_json);

	if (rc != KVC_OK)
		return rc;
	*out = json_loadb(b.p, b.n, JSON_REJECT_DUPLICATES, &je);
	kvc_buf_free(&b);
	if (*out == NULL) {
		kvc_err(err, errlen, "chat: template variables: %s", je.text);
		return KVC_EFORMAT;
	}
	return KVC_OK;
}

/* One render: the messages (contents or markers) and the variables, as JSON values. */
static int
render_one(struct jr *r, const struct jinja_tmpl *tp, bool marked, bool add_gen,
	   const char *vars_json, struct kvc_buf *out, char *err, size_t errlen)
{
	json_t *root = json_object(), *extra = NULL, *v;
	struct jinja_var vars[32];
	size_t nv = 0;
	const char *key;
	int32_t bos = tok_bos(r->t), eos = tok_eos(r->t);
	size_t bl = 0, el = 0;
	const char *bp = bos >= 0 ? tok_piece(r->t, bos, &bl) : "";
	const char *ep = eos >= 0 ? tok_piece(r->t, eos, &el) : "";
	int rc = root ? put_messages(r, root, marked, err, errlen) : KVC_ENOMEM;

	if (rc == 0 && json_object_set_new(root, "add_generation_prompt", json_boolean(add_gen)) != 0)
		rc = KVC_ENOMEM;
	if (rc == 0)
		rc = put_text(root, "bos_token", bp ? bp : "", bp ? bl : 0, err, errlen);
	if (rc == 0)
		rc = put_text(root, "eos_token", ep ? ep : "", ep ? el : 0, err, errlen);
	if (rc == 0 && vars_json && vars_json[0])
		rc = parse_vars(vars_json, &extra, err, errlen);
	/* the variables in order, the caller's after the standard ones (a later name wins) */
	if (rc == 0) {
		json_object_foreach(root, key, v)
			vars[nv++] = (struct jinja_var){ key, v };
		if (extra != NULL)
			json_object_foreach(extra, key, v)
				if (nv < 32)
					vars[nv++] = (struct jinja_var){ key, v };
		rc = jinja_render(tp, vars, nv, (int64_t)time(NULL), out, err, errlen);
	}
	json_decref(extra);
	json_decref(root);
	return rc;
}

/* The marker at s (n bytes left): its message index, and its length in *len; -1 if none. */
static long
marker_at(const char *s, size_t n, size_t *len)
{
	size_t k = 3;
	long idx = 0;

	if (n < 7 || memcmp(s, MARK_OPEN, 3) != 0)
		return -1;
	while (k < n && s[k] >= '0' && s[k] <= '9' && k < 12)
		idx = idx * 10 + (s[k++] - '0');
	if (k == 3 || n - k < 3 || memcmp(s + k, MARK_CLOSE, 3) != 0)
		return -1;
	*len = k + 3;
	return idx;
}

/* s[0..n) with each marker replaced by its content (stripped of white space when strip). */
static int
substitute(const struct jr *r, const char *s, size_t n, bool strip, struct kvc_buf *out)
{
	for (size_t i = 0; i < n;) {
		size_t len;
		long k = marker_at(s + i, n - i, &len);

		const char *c = text_of(r, k);

		if (c == NULL) {
			if (kvc_buf_append(out, s + i, 1))
				return KVC_ENOMEM;
			i++;
			continue;
		}
		size_t a = 0, b = strlen(c);

		while (strip && a < b && strchr(" \t\n\r\f\v", c[a]))
			a++;
		while (strip && b > a && strchr(" \t\n\r\f\v", c[b - 1]))
			b--;
		if (kvc_buf_append(out, c + a, b - a))
			return KVC_ENOMEM;
		i += len;
	}
	return 0;
}

/*
 * Whether marked[from..) with contents substituted is the end of the real
 * render (the whole of it when from is 0); *strip says which substitution held.
 */
static bool
consistent(const struct jr *r, size_t from, bool *strip)
{
	for (int s = 0; s < 2; s++) {
		struct kvc_buf b = {0};
		bool ok = substitute(r, r->marked.p + from, r->marked.n - from, s == 1, &b) == 0 &&
			  (from > 0 ? b.n <= r->real.n : b.n == r->real.n) &&
			  (b.n == 0 || memcmp(b.p, r->real.p + r->real.n - b.n, b.n) == 0);

		kvc_buf_free(&b);
		if (ok) {
			*strip = s == 1;
			return true;
		}
	}
	return false;
}

/* Whether text would make a control token if its special tokens were parsed. */
static bool
has_special(const struct kvc_tokenizer *t, const char *text, size_t n)
{
	struct kvc_tokens ids = {0};
	bool found = false;

	if (tok_encode(t, text, n, TOK_PARSE_SPECIAL | TOK_NO_SPACE_PREFIX, &ids, NULL, 0) != 0)
		return true;
	for (size_t i = 0; i < ids.n && !found; i++) {
		enum tok_attr a = tok_type(t, ids.v[i]);

		found = a == TOK_TYPE_CONTROL || a == TOK_TYPE_UNKNOWN;
	}
	kvc_tokens_free(&ids);
	return found;
}

/* Appends the tokens of text: special tokens parsed (template text) or not (a content). */
static int
encode(const struct kvc_tokenizer *t, const char *s, size_t n, bool special, struct kvc_tokens *out,
       char *err, size_t errlen)
{
	if (n == 0)
		return 0;
	return tok_encode(t, s, n, special ? TOK_PARSE_SPECIAL : 0, out, err, errlen);
}

/* Whether marker k stands for a reply given as ids (appended as they are). */
static bool
is_reply(const struct jr *r, long k)
{
	return k >= 0 && (size_t)k < r->n && r->msgs[k].role == CHAT_ASSISTANT && r->msgs[k].ids &&
	    !(r->full && r->msgs[k].reasoning) && !r->as_text;
}

/*
 * One piece of marked text (no reply marker inside) as tokens: one text
 * with special tokens parsed when no content in it holds special-token
 * text, else template text and contents apart.
 */
static int
tokenize_piece(const struct jr *r, const char *s, size_t n, bool strip, struct kvc_tokens *out,
	       char *err, size_t errlen)
{
	struct kvc_buf b = {0};
	bool guard = false;
	int rc = 0;

	for (size_t i = 0, len; i < n && !guard; i++) {
		long k = marker_at(s + i, n - i, &len);

		if (text_of(r, k) != NULL)
			guard = has_special(r->t, text_of(r, k), strlen(text_of(r, k)));
	}
	if (!guard) {
		rc = substitute(r, s, n, strip, &b);
		if (rc == 0)
			rc = encode(r->t, b.p, b.n, true, out, err, errlen);
		kvc_buf_free(&b);
		return rc;
	}
	for (size_t i = 0; i < n && rc == 0;) {
		size_t len, j = i;
		long k = marker_at(s + i, n - i, &len);

		if (text_of(r, k) != NULL) {
			b.n = 0;
			rc = substitute(r, s + i, len, strip, &b);
			if (rc == 0)
				rc = encode(r->t, b.p, b.n, false, out, err, errlen);
			i += len;
			continue;
		}
		while (j < n && marker_at(s + j, n - j, &len) < 0)
			j++;
		rc = encode(r->t, s + i, j - i, true, out, err, errlen);
		i = j;
	}
	kvc_buf_free(&b);
	return rc;
}

/*
 * Whether the template's space before reply k (text s[0..n) ends with one)
 * is the one the reply's first token carries ("[/INST] " + content, the
 * model having written "▁Reply" after "[/INST]"): it goes with the reply's
 * ids, as in the stream, not into a token of its own.
 */
static bool
space_goes_with(const struct jr *r, long k, const char *s, size_t n)
{
	struct kvc_buf b = {0};
	bool yes = false;

	if (n == 0 || s[n - 1] != ' ' || r->msgs[k].n_ids == 0)
		return false;
	if (tok_decode(r->t, r->msgs[k].ids, 1, TOK_DETOK_KEEP_LEADING_SPACE, &b) == 0 && b.n > 0)
		yes = b.p[0] == ' ';
	kvc_buf_free(&b);
	return yes;
}

/*
 * marked[from..) as tokens: pieces between reply markers, each reply as its
 * ids. after: the reply the text follows (its end-of-turn token, when its
 * ids end with one, stands for the template's text of it), or NULL.
 */
static int
tokenize_marked(const struct jr *r, size_t from, bool strip, const struct chat_msg *after,
		struct kvc_tokens *out, char *err, size_t errlen)
{
	const char *s = r->marked.p;
	size_t n = r->marked.n, i = from;
	int rc = 0;

	while (i < n && rc == 0) {
		if (after && after->n_ids > 0 && tok_is_eog(r->t, after->ids[after->n_ids - 1])) {
			size_t pl = 0, w = i;
			const char *piece = tok_piece(r->t, after->ids[after->n_ids - 1], &pl);

			/* "reply </s>": the space before the token goes with it */
			while (w < n && (s[w] == ' ' || s[w] == '\n'))
				w++;
			if (piece && pl > 0 && n - w >= pl && memcmp(s + w, piece, pl) == 0)
				i = w + pl;
		}
		after = NULL;
		size_t j = i, len = 0;
		long k = -1;

		while (j < n && !is_reply(r, k = marker_at(s + j, n - j, &len)))
			j++;
		rc = tokenize_piece(r, s + i, j - i - (j < n && space_goes_with(r, k, s + i, j - i)),
		    strip, out, err, errlen);
		if (rc == 0 && j < n) {
			if (r->reply_at)
				r->reply_at[k] = out->n;
			rc = kvc_tokens_append(out, r->msgs[k].ids, r->msgs[k].n_ids);
			after = &r->msgs[k];
			j += len;
		}
		i = j;
	}
	return rc;
}

/* Where marker k ends in the marked text, when it is there exactly once; else 0. */
static size_t
marker_end(const struct jr *r, size_t k)
{
	char mark[32];
	const char *hit, *p = r->marked.p;
	size_t ml = (size_t)snprintf(mark, sizeof mark, MARK_OPEN "%zu" MARK_CLOSE, k);

	hit = p ? strstr(p, mark) : NULL;
	if (!hit || strstr(hit + ml, mark))
		return 0;
	return (size_t)(hit - p) + ml;
}

static void
jr_free(struct jr *r)
{
	for (size_t i = 0; r->texts && i < 2 * r->n; i++)
		free(r->texts[i]);
	free(r->texts);
	kvc_buf_free(&r->marked);
	kvc_buf_free(&r->real);
}

/* chat_jinja_render, and where each reply's ids went (reply_at, may be NULL). */
static int
render_tokens(const struct kvc_tokenizer *t, const char *jinja, const char *vars_json,
    const struct chat_msg *msgs, size_t n_prev, size_t n, bool add_gen, struct kvc_tokens *out,
    size_t *reply_at, bool as_text, char *err, size_t errlen)
{
	struct jr r = { .t = t, .msgs = msgs, .n = n, .full = n_prev == 0, .reply_at = reply_at,
	    .as_text = as_text };
	struct jinja_tmpl *tp = NULL;
	size_t from = 0, n0 = out->n;
	bool strip = false;
	int rc;

	if (!jinja) {
		kvc_err(err, errlen, "chat: the model has no chat template");
		return KVC_EINVAL;
	}
	if (n_prev > 0 && (msgs[n_prev - 1].role != CHAT_ASSISTANT || !msgs[n_prev - 1].ids)) {
		kvc_err(err, errlen, "chat: a delta of the model's template follows a reply's ids");
		return KVC_EINVAL;
	}
	rc = jinja_parse(jinja, strlen(jinja), NULL, &tp, err, errlen);
	if (rc == 0)
		rc = msg_texts(&r, err, errlen);
	/* a reply's text is then template text: it must not hold special-token text */
	for (size_t i = 0; rc == 0 && as_text && i < 2 * n; i++)
		if (r.texts[i] && msgs[i % n].role == CHAT_ASSISTANT &&
		    has_special(t, r.texts[i], strlen(r.texts[i]))) {
			kvc_err(err, errlen, "chat: reply %zu holds special-token text", i % n);
			rc = KVC_EUNSUPPORTED;
		}
	if (rc == 0)
		rc = render_one(&r, tp, true, add_gen, vars_json, &r.marked, err, errlen);
	if (rc == 0)
		rc = render_one(&r, tp, false, add_gen, vars_json, &r.real, err, errlen);
	if (rc == 0 && n_prev > 0 && (from = marker_end(&r, n_prev - 1)) == 0) {
		kvc_err(err, errlen, "chat: the template does not render reply %zu exactly once", n_prev - 1);
		rc = KVC_EUNSUPPORTED;
	}
	if (rc == 0 && !consistent(&r, from, &strip)) {
		kvc_err(err, errlen, "chat: the template changes message text in ways kvchat cannot "
			"follow (it must render each content as it is, or stripped)");
		rc = KVC_EUNSUPPORTED;
	}
	/* A stream ending with a reply ends with its ids: the template's closing
	 * of that turn comes with the next delta, as the families do it. */
	if (rc == 0 && n > 0 && !add_gen && msgs[n - 1].role == CHAT_ASSISTANT && msgs[n - 1].ids) {
		size_t until = marker_end(&r, n - 1);

		if (until == 0 || until < from) {
			kvc_err(err, errlen, "chat: the template does not render reply %zu exactly once", n - 1);
			rc = KVC_EUNSUPPORTED;
		} else {
			r.marked.n = until;
		}
	}
	if (rc == 0)
		rc = tokenize_marked(&r, from, strip, n_prev ? &msgs[n_prev - 1] : NULL, out, err, errlen);
	/* BOS as llama.cpp adds it when the vocabulary asks, unless the template wrote it. */
	if (rc == 0 && n_prev == 0 && tok_add_bos_default(t) && tok_bos(t) >= 0 &&
	    (out->n == n0 || out->v[n0] != tok_bos(t))) {
		rc = kvc_tokens_push(out, 0);
		if (rc == 0) {
			memmove(out->v + n0 + 1, out->v + n0, (out->n - n0 - 1) * sizeof(*out->v));
			out->v[n0] = tok_bos(t);
			for (size_t i = 0; reply_at && i < n; i++)
				reply_at[i] += reply_at[i] != SIZE_MAX;
		}
	}
	if (rc == KVC_ENOMEM)
		kvc_err(err, errlen, "chat: out of memory");
	jr_free(&r);
	jinja_free(tp);
	return rc;
}

int
chat_jinja_render(const struct kvc_tokenizer *t, const char *jinja, const char *vars_json,
    const struct chat_msg *msgs, size_t n_prev, size_t n, bool add_gen, struct kvc_tokens *out,
    char *err, size_t errlen)
{
	return render_tokens(t, jinja, vars_json, msgs, n_prev, n, add_gen, out, NULL, false, err,
	    errlen);
}

/* Which message a run of template text and contents between two replies' ids counts under. */
static size_t
run_owner(const struct chat_msg *msgs, size_t from, size_t to)
{
	size_t owner = from;

	for (size_t i = from; i < to; i++)
		if (msgs[i].role == CHAT_USER)
			owner = i;
	return owner;
}

int
chat_jinja_render_spans(const struct kvc_tokenizer *t, const char *jinja, const char *vars_json,
    const struct chat_msg *msgs, size_t n, bool add_gen, struct kvc_tokens *out, size_t *spans,
    char *err, size_t errlen)
{
	size_t *at = malloc((n ? n : 1) * sizeof *at), n0 = out->n, end = 0, first = 0;
	int rc;

	if (at == NULL)
		return KVC_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		at[i] = SIZE_MAX;
		spans[i] = 0;
	}
	rc = render_tokens(t, jinja, vars_json, msgs, 0, n, add_gen, out, at, false, err, errlen);
	/*
	 * A template that rewrites a reply's text (DeepSeek-R1 keeps what
	 * follows its "</think>") cannot take the reply as its ids: every reply
	 * is then its text, as the template renders it.
	 */
	if (rc == KVC_EUNSUPPORTED) {
		out->n = n0;
		for (size_t i = 0; i < n; i++)
			at[i] = SIZE_MAX;
		rc = render_tokens(t, jinja, vars_json, msgs, 0, n, add_gen, out, at, true, err,
		    errlen);
	}
	for (size_t k = 0; rc == 0 && k <= n; k++) {
		size_t to = k < n ? at[k] : out->n;

		if (k < n && to == SIZE_MAX)
			continue;
		to -= n0;
		if (to > end && first == k) {
			/* text with no message of its own to count under (two replies in a row) */
			kvc_err(err, errlen, "chat: template text between replies %zu and %zu", k - 1, k);
			rc = KVC_EUNSUPPORTED;
			break;
		}
		if (to > end)
			spans[run_owner(msgs, first, k)] += to - end;
		if (k < n) {
			spans[k] = msgs[k].n_ids;
			end = to + msgs[k].n_ids;
			first = k + 1;
		}
	}
	free(at);
	return rc;
}

int
chat_jinja_text(const struct kvc_tokenizer *t, const char *jinja, const char *vars_json,
    const struct chat_msg *msgs, size_t n, bool add_gen, struct kvc_buf *out, char *err, size_t errlen)
{
	struct jr r = { .t = t, .msgs = msgs, .n = n };
	struct jinja_tmpl *tp = NULL;
	int rc = jinja ? jinja_parse(jinja, strlen(jinja), NULL, &tp, err, errlen) : KVC_EINVAL;

	if (rc == 0)
		rc = msg_texts(&r, err, errlen);
	if (rc == 0)
		rc = render_one(&r, tp, false, add_gen, vars_json, out, err, errlen);
	jr_free(&r);
	jinja_free(tp);
	return rc;
}

int
chat_jinja_check(const struct kvc_tokenizer *t, const char *jinja, const char *vars_json,
    char *err, size_t errlen)
{
	static const int32_t no_ids[1];
	struct chat_msg m[4] = {
		{ .role = CHAT_SYSTEM, .text = "You are a helpful assistant." },
		{ .role = CHAT_USER, .text = " Hello <b>there</b>! " },
		{ .role = CHAT_ASSISTANT, .text = "Hi.", .ids = no_ids, .n_ids = 0 },
		{ .role = CHAT_USER, .text = "Thanks\n" },
	};
	struct kvc_tokens ids = {0};
	int rc = chat_jinja_render(t, jinja, vars_json, m, 0, 2, true, &ids, err, errlen);

	/* A template may refuse a system message (Gemma 2 raises): the chat
	 * still runs without one, and says the template's words if one is set. */
	if (rc == KVC_EINVAL)
		rc = chat_jinja_render(t, jinja, vars_json, m + 1, 0, 1, true, &ids, err, errlen);
	if (rc == 0)
		rc = chat_jinja_render(t, jinja, vars_json, m + 1, 0, 3, true, &ids, err, errlen);
	if (rc == 0)
		rc = chat_jinja_render(t, jinja, vars_json, m + 1, 2, 3, true, &ids, err, errlen);
	kvc_tokens_free(&ids);
	return rc;
}
