/*
 * conv.c: the conversation manager: the open conversations of one engine
 * and store; creating, opening (resume), closing, deleting, renaming and
 * the settings of a conversation; what it shows to the caller.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conv_int.h"

int
conv_mgr_new(struct conv_mgr **out, struct kvc_engine *e, struct sess_store *st,
    const struct conv_params *p, char *err, size_t errlen)
{
	struct conv_mgr *m = calloc(1, sizeof *m);

	if (m == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	m->e = e;
	m->st = st;
	m->p = *p;
	if (p->jinja) {
		m->jinja = conv_strdup(p->jinja);
		if (m->jinja == NULL) {
			free(m);
			return KVC_ENOMEM;
		}
	}
	m->p.jinja = m->jinja;
	if (p->model_path && (m->model_path = conv_strdup(p->model_path)) == NULL) {
		free(m->jinja);
		free(m);
		return KVC_ENOMEM;
	}
	m->p.model_path = m->model_path;
	*out = m;
	return KVC_OK;
}

void
conv_mgr_free(struct conv_mgr *m)
{
	if (m == NULL)
		return;
	while (m->open)
		conv_close(m->open);
	free(m->model_path);
	free(m->jinja);
	free(m->vars);
	free(m);
}

struct kvc_engine *conv_mgr_engine(const struct conv_mgr *m) { return m->e; }
struct sess_store *conv_mgr_store(const struct conv_mgr *m) { return m->st; }
enum chat_family conv_mgr_family(const struct conv_mgr *m) { return m->p.family; }

int
conv_mgr_set_template_vars(struct conv_mgr *m, const char *vars)
{
	char *v = NULL;

	if (vars && vars[0] && (v = conv_strdup(vars)) == NULL)
		return KVC_ENOMEM;
	free(m->vars);
	m->vars = v;
	return KVC_OK;
}

static struct conv *
conv_alloc(struct conv_mgr *m, int64_t id)
{
	struct conv *c = calloc(1, sizeof *c);

	if (c == NULL)
		return NULL;
	c->m = m;
	c->id = id;
	c->set = conv_default_settings();
	c->reply_logits_pos = -1;
	return c;
}

static void
conv_free(struct conv *c)
{
	conv_drop_seq(c);
	conv_msgs_drop(c, 0);
	free(c->msgs);
	free(c->title);
	free(c->system);
	free(c->chunk_ends);
	free(c->reply_logits);
	eng_seq_free(c->draft);
	smp_free(c->smp);
	free(c);
}

static void
conv_link(struct conv *c)
{
	c->next = c->m->open;
	c->m->open = c;
}

void
conv_close(struct conv *c)
{
	struct conv **pp;

	if (c == NULL)
		return;
	for (pp = &c->m->open; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	if (c->id != 0)
		sess_conv_unlock(c->m->st, c->id);
	conv_free(c);
}

/* The last step of conv_new and conv_open: c joins the open list and is made current. */
static int
link_and_activate(struct conv *c, struct conv **out, char *err, size_t errlen)
{
	int rc;

	conv_link(c);
	rc = conv_activate(c, err, errlen);
	if (rc == KVC_EINTR) {
		*out = c;	/* open; its cache is rebuilt when next used */
		return rc;
	}
	if (rc) {
		conv_close(c);
		return rc;
	}
	*out = c;
	return KVC_OK;
}

int
conv_new(struct conv_mgr *m, const char *title, const char *system,
    const struct conv_settings *s, struct conv **out, char *err, size_t errlen)
{
	char prov[64];
	struct conv *c;
	int rc;

	if (title == NULL) {
		time_t now = time(NULL);
		struct tm tm;
		localtime_r(&now, &tm);
		strftime(prov, sizeof prov, "chat %Y-%m-%d %H:%M:%S", &tm);
	}
	/* Not stored yet: conv_store_new does it with the first message. */
	c = conv_alloc(m, 0);
	if (c == NULL || (c->title = conv_strdup(title ? title : prov)) == NULL ||
	    (system != NULL && (c->system = conv_strdup(system)) == NULL)) {
		if (c)
			conv_free(c);
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	c->auto_title = title == NULL;
	c->set = *s;
	rc = smp_new(&c->smp, &c->set.smp, eng_n_vocab(m->e));
	if (rc) {
		conv_free(c);
		kvc_err(err, errlen, "sampler: %s", kvc_strerror(rc));
		return rc;
	}
	return link_and_activate(c, out, err, errlen);
}

/*
 * The window of a conversation being opened: the remembered one if it
 * still names a user message, moved on when the stream does not fit the
 * context (with a notice).
 */
static int
open_window(struct conv *c, int64_t window, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct kvc_tokens s = {0};
	int n_ctx = eng_n_ctx(m->e), k, rc;

	if (conv_window_open(c, window) != KVC_OK && window != 0)
		conv_notice(m, "conversation %" PRId64 ": the stored context window does not fit its "
		    "messages; recomputing", c->id);
	rc = conv_build_cached(c, c->n_msgs, &s, err, errlen);
	/* a cache exactly full (a reply stopped by the context) still fits: the
	 * next turn drops, slides or stops as --ctx-overflow says */
	if (rc || (int)s.n <= n_ctx)
		goto out;
	k = c->win;
	conv_slide_reset(c);
	rc = conv_fit_window(c, c->win + 1, n_ctx - conv_reply_reserve(c), &k, err, errlen);
	if (rc == KVC_ERANGE)
		rc = conv_fit_window(c, c->win + 1, n_ctx - 1, &k, err, errlen);
	if (rc) {
		kvc_err(err, errlen, "conversation %" PRId64 " does not fit a context of %d "
		    "positions", c->id, n_ctx);
		goto out;
	}
	conv_notice(m, "conversation %" PRId64 ": the context holds %d positions; keeping "
	    "messages from #%d", c->id, n_ctx, k + 1);
	c->win = k;
out:
	kvc_tokens_free(&s);
	return rc;
}

/*
 * Whether the stored ids are this model's: the same vocabulary, or for a
 * conversation stored before vocabularies were recorded, the same model.
 */
static bool
same_vocab(const struct conv_mgr *m, const struct sess_conv *row)
{
	if (row->vocab_fp != NULL)
		return strcmp(row->vocab_fp, eng_vocab_fingerprint(m->e)) == 0;
	return row->model_fp != NULL && strcmp(row->model_fp, eng_fingerprint(m->e)) == 0;
}

/*
 * A conversation made with a model of another vocabulary: its ids would be
 * other words to this one. Its messages are tokenised afresh from their
 * text, and (when the store can be written) it moves to this model in one
 * transaction, so what is stored stays in one vocabulary; a failed move
 * refuses the conversation rather than mix two.
 */
static int
move_to_model(struct conv *c, const struct sess_conv *row, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct sess_model to = {
		.model_fp = eng_fingerprint(m->e),
		.vocab_fp = eng_vocab_fingerprint(m->e),
		.path = m->model_path,
		.template_name = chat_family_name(m->p.family),
	};
	int rc = conv_retokenize(c, err, errlen);

	if (rc)
		return rc;
	if (!sess_readonly(m->st, NULL)) {
		rc = sess_conv_rebind(m->st, c->id, &to, c->msgs, c->n_msgs, err, errlen);
		if (rc)
			return rc;
	}
	conv_notice(m, "conversation %" PRId64 " was made with %s, whose vocabulary differs: "
	    "its messages were tokenized afresh for this model%s", c->id,
	    row->model_path ? row->model_path : "another model",
	    sess_readonly(m->st, NULL) ? "" : ", which it uses from now on");
	return KVC_OK;
}

/* Title, system prompt, settings and messages of a stored conversation. */
static int
load_conv(struct conv *c, const struct sess_conv *row, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct sess_msg *v = NULL;
	int64_t window = row->window;
	int n = 0, rc;

	c->title = conv_strdup(row->title ? row->title : "");
	c->system = row->system ? conv_strdup(row->system) : NULL;
	if (c->title == NULL || (row->system && c->system == NULL))
		return KVC_ENOMEM;
	if (row->template_name && chat_family_from_name(row->template_name) >= 0 &&
	    chat_family_from_name(row->template_name) != (int)m->p.family)
		conv_notice(m, "conversation %" PRId64 " was made with the %s template; "
		    "continuing with %s", c->id, row->template_name, chat_family_name(m->p.family));
	conv_settings_parse(row->settings ? row->settings : "", &c->set);
	rc = sess_msgs_load(m->st, c->id, &v, &n, err, errlen);
	if (rc)
		return rc;
	for (int i = 0; i < n && rc == 0; i++)
		rc = conv_msgs_push(c, &v[i]);
	sess_msgs_free(v, n);
	if (rc == 0 && n > 0 && !same_vocab(m, row)) {
		rc = move_to_model(c, row, err, errlen);
		/* the window's positions were counted in the other tokens */
		window = 0;
	}
	/* what the store holds (rebind wrote 0 for another model's tokens) */
	c->win_stored = window;
	if (rc == 0)
		rc = open_window(c, window, err, errlen);
	if (rc == 0 && n > 0 && c->msgs[n - 1].role == SESS_USER)
		conv_notice(m, "conversation %" PRId64 ": the reply to the last message was cut "
		    "off (kvchat stopped while answering); /retry answers it", c->id);
	if (rc == 0 && (rc = smp_new(&c->smp, &c->set.smp, eng_n_vocab(m->e))) != 0)
		kvc_err(err, errlen, "sampler: %s", kvc_strerror(rc));
	return rc;
}

int
conv_open(struct conv_mgr *m, int64_t id, struct conv **out, char *err, size_t errlen)
{
	struct sess_conv row = {0};
	struct conv *c;
	int rc;

	for (c = m->open; c; c = c->next)
		if (c->id == id) {
			rc = conv_activate(c, err, errlen);
			if (rc == 0 || rc == KVC_EINTR)
				*out = c;
			return rc;
		}
	rc = sess_conv_get(m->st, id, &row, err, errlen);
	if (rc)
		return rc;
	rc = sess_conv_lock(m->st, id, err, errlen);
	if (rc) {
		sess_conv_clear(&row);
		return rc;
	}
	c = conv_alloc(m, id);
	rc = c ? load_conv(c, &row, err, errlen) : KVC_ENOMEM;
	sess_conv_clear(&row);
	if (rc) {
		if (rc == KVC_ENOMEM)
			kvc_err(err, errlen, "out of memory");
		if (c)
			conv_free(c);
		sess_conv_unlock(m->st, id);
		return rc;
	}
	return link_and_activate(c, out, err, errlen);
}

int
conv_delete(struct conv *c, char *err, size_t errlen)
{
	int rc = c->id != 0 ? sess_conv_delete(c->m->st, c->id, err, errlen) : KVC_OK;

	/* Refused, it stays open as it was (still the caller's to use). */
	if (rc == 0)
		conv_close(c);
	return rc;
}

int
conv_mgr_delete(struct conv_mgr *m, int64_t id, char *err, size_t errlen)
{
	for (struct conv *c = m->open; c; c = c->next)
		if (c->id == id)
			return conv_delete(c, err, errlen);
	/* Not open here: the store refuses it if another process holds it. */
	return sess_conv_delete(m->st, id, err, errlen);
}

int
conv_rename(struct conv *c, const char *title, char *err, size_t errlen)
{
	char *t = conv_strdup(title);
	int rc;

	if (t == NULL)
		return KVC_ENOMEM;
	rc = c->id != 0 ? sess_conv_rename(c->m->st, c->id, title, err, errlen) : KVC_OK;
	if (rc) {
		free(t);
		return rc;
	}
	free(c->title);
	c->title = t;
	c->auto_title = false;
	return KVC_OK;
}

int
conv_set_settings(struct conv *c, const struct conv_settings *s, char *err, size_t errlen)
{
	struct conv_settings old = c->set;
	int rc;

	c->set = *s;
	rc = conv_save_settings(c, err, errlen);
	if (rc) {
		c->set = old;
		return rc;
	}
	smp_set_params(c->smp, &c->set.smp);
	return KVC_OK;
}

int64_t conv_id(const struct conv *c) { return c->id; }
const char *conv_title(const struct conv *c) { return c->title; }
const char *conv_system(const struct conv *c) { return c->system; }
const struct conv_settings *conv_get_settings(const struct conv *c) { return &c->set; }
int conv_n_msgs(const struct conv *c) { return c->n_msgs; }

const struct sess_msg *
conv_msg(const struct conv *c, int i)
{
	return i >= 0 && i < c->n_msgs ? &c->msgs[i] : NULL;
}

const int32_t *
conv_stream(const struct conv *c, int *n)
{
	*n = c->seq ? eng_seq_n_pos(c->seq) : 0;
	return c->seq ? eng_seq_tokens(c->seq) : NULL;
}
