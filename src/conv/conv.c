/* conv.c: conversations over the engine and the store; the turn logic. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include "conv.h"

struct conv_mgr {
	struct kvc_engine *e;		/* not owned */
	struct sess_store *st;		/* not owned */
	struct conv_params p;
	char *jinja;			/* copy of p.jinja */
	struct conv *open;		/* open conversations, a list */
	uint64_t tick;			/* LRU clock */
};

struct conv {
	struct conv_mgr *m;
	struct conv *next;
	int64_t id;
	char *title;
	char *system;			/* NULL: none (the family's default applies) */
	bool auto_title;		/* title is provisional until the first turn */
	struct conv_settings set;
	struct kvc_sampler *smp;
	struct sess_msg *msgs;		/* [n_msgs] deep copies of what is stored */
	int n_msgs, cap_msgs;
	/*
	 * The window: msgs[win..n_msgs) are in the cache. When win > 0 the
	 * first of them (a user message) contributes head (the system prompt
	 * plus that message rendered afresh) instead of its stored ids.
	 */
	int win;
	struct kvc_tokens head;
	struct kvc_tokens stream;	/* tokens the cache holds (or will once restored) */
	struct kvc_seq *seq;		/* NULL while evicted */
	int snap_end;			/* stream positions covered by chunks on disk */
	int *chunk_ends;		/* pos1 of each chunk on disk, ascending */
	int n_chunk_ends, cap_chunk_ends;
	uint64_t last_used;		/* m->tick at last use */
	bool pend_resumed, pend_rebuilt;	/* reported by the next turn */
	/*
	 * The logits the last reply was sampled from first, so /retry needs
	 * no forward pass: [n_vocab] floats, valid when reply_logits_pos is
	 * the stream length they follow (-1: none).
	 */
	float *reply_logits;
	int reply_logits_pos;
};

/* ---- settings ---- */

struct conv_settings
conv_default_settings(void)
{
	struct conv_settings s;

	s.smp = kvc_sampler_default_params();
	s.max_tokens = 0;
	return s;
}

int
conv_settings_format(const struct conv_settings *s, struct kvc_buf *out)
{
	int rc;

	out->n = 0;
	rc = kvc_buf_printf(out, "temp=%g;top_k=%d;top_p=%g;min_p=%g;repeat_penalty=%g;"
	    "max_tokens=%d;seed=", (double)s->smp.temp, s->smp.top_k,
	    (double)s->smp.top_p, (double)s->smp.min_p, (double)s->smp.repeat_penalty,
	    s->max_tokens);
	if (rc == 0)
		rc = s->smp.seed == KVC_SEED_RANDOM ? kvc_buf_printf(out, "random") :
		    kvc_buf_printf(out, "%" PRIu64, s->smp.seed);
	return rc;
}

static int
parse_num(const char *v, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(v, &end);
	if (end == v || *end != '\0' || errno != 0)
		return -1;
	return 0;
}

int
conv_settings_set(struct conv_settings *s, const char *name, const char *value,
    char *err, size_t errlen)
{
	double v;

	if (strcmp(name, "seed") == 0) {
		char *end;

		/* Seeds are 64-bit: a double would round them. */
		if (value && (strcmp(value, "random") == 0 || strcmp(value, "-1") == 0)) {
			s->smp.seed = KVC_SEED_RANDOM;
			return KVC_OK;
		}
		errno = 0;
		if (value != NULL && value[0] != '-')
			s->smp.seed = strtoull(value, &end, 10);
		if (value == NULL || value[0] == '-' || end == value || *end != '\0' || errno) {
			kvc_err(err, errlen, "seed: not a number (or 'random'): '%s'",
			    value ? value : "");
			return KVC_EINVAL;
		}
		return KVC_OK;
	}
	if (value == NULL || parse_num(value, &v) != 0) {
		kvc_err(err, errlen, "%s: not a number: '%s'", name, value ? value : "");
		return KVC_EINVAL;
	}
	if (strcmp(name, "temperature") == 0 || strcmp(name, "temp") == 0)
		s->smp.temp = (float)v;
	else if (strcmp(name, "top_p") == 0)
		s->smp.top_p = (float)v;
	else if (strcmp(name, "top_k") == 0)
		s->smp.top_k = (int)v;
	else if (strcmp(name, "min_p") == 0)
		s->smp.min_p = (float)v;
	else if (strcmp(name, "repeat_penalty") == 0)
		s->smp.repeat_penalty = (float)v;
	else if (strcmp(name, "max_tokens") == 0) {
		if (v < 0) {
			kvc_err(err, errlen, "max_tokens: must be >= 0 (0 = no limit)");
			return KVC_EINVAL;
		}
		s->max_tokens = (int)v;
	} else {
		kvc_err(err, errlen, "unknown setting '%s' (temperature, top_p, top_k, min_p, "
		    "repeat_penalty, seed, max_tokens)", name);
		return KVC_EINVAL;
	}
	return KVC_OK;
}

void
conv_settings_parse(const char *text, struct conv_settings *s)
{
	char name[32], value[64];
	const char *p = text, *eq, *semi;
	size_t nl, vl;

	while (p != NULL && *p != '\0') {
		semi = strchr(p, ';');
		eq = strchr(p, '=');
		if (eq == NULL || (semi != NULL && eq > semi))
			goto next;
		nl = (size_t)(eq - p);
		vl = semi ? (size_t)(semi - eq - 1) : strlen(eq + 1);
		if (nl >= sizeof name || vl >= sizeof value)
			goto next;
		memcpy(name, p, nl);
		name[nl] = '\0';
		memcpy(value, eq + 1, vl);
		value[vl] = '\0';
		(void)conv_settings_set(s, name, value, NULL, 0);
next:
		p = semi ? semi + 1 : NULL;
	}
}

/* ---- small helpers ---- */

static void
progress(struct conv_mgr *m, const char *label, uint64_t done, uint64_t total)
{
	if (m->p.progress != NULL)
		m->p.progress(m->p.progress_arg, label, done, total);
}

static void
notice(struct conv_mgr *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#include <stdarg.h>
static void
notice(struct conv_mgr *m, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (m->p.notice == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	m->p.notice(m->p.notice_arg, line);
}

static char *
xstrdup(const char *s)
{
	char *d;
	size_t n;

	if (s == NULL)
		return NULL;
	n = strlen(s) + 1;
	d = malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

static const char *
kv_type_name(enum gguf_dtype t)
{
	return t == GGML_TYPE_F32 ? "f32" : "f16";
}

/* Snapshot key: the fingerprint (the window is the chunk's own column). */
static void
cache_key(const struct conv *c, char *buf, size_t len)
{
	snprintf(buf, len, "%s", eng_fingerprint(c->m->e));
}

static void
msg_clear(struct sess_msg *x)
{
	free(x->text);
	free(x->ids);
	memset(x, 0, sizeof *x);
}

static int
msg_push(struct conv *c, const struct sess_msg *x)
{
	struct sess_msg *d;

	if (c->n_msgs == c->cap_msgs) {
		int cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
		struct sess_msg *v = realloc(c->msgs, (size_t)cap * sizeof *v);
		if (v == NULL)
			return KVC_ENOMEM;
		c->msgs = v;
		c->cap_msgs = cap;
	}
	d = &c->msgs[c->n_msgs];
	*d = *x;
	d->text = xstrdup(x->text ? x->text : "");
	d->ids = malloc((size_t)(x->n_ids > 0 ? x->n_ids : 1) * sizeof *d->ids);
	if (d->text == NULL || d->ids == NULL) {
		msg_clear(d);
		return KVC_ENOMEM;
	}
	if (x->n_ids > 0)
		memcpy(d->ids, x->ids, (size_t)x->n_ids * sizeof *d->ids);
	c->n_msgs++;
	return KVC_OK;
}

static void
chunk_ends_trim(struct conv *c, int n_pos)
{
	while (c->n_chunk_ends > 0 && c->chunk_ends[c->n_chunk_ends - 1] > n_pos)
		c->n_chunk_ends--;
	c->snap_end = c->n_chunk_ends ? c->chunk_ends[c->n_chunk_ends - 1] : 0;
}

static int
chunk_ends_push(struct conv *c, int pos1)
{
	if (c->n_chunk_ends == c->cap_chunk_ends) {
		int cap = c->cap_chunk_ends ? 2 * c->cap_chunk_ends : 16;
		int *v = realloc(c->chunk_ends, (size_t)cap * sizeof *v);
		if (v == NULL)
			return KVC_ENOMEM;
		c->chunk_ends = v;
		c->cap_chunk_ends = cap;
	}
	c->chunk_ends[c->n_chunk_ends++] = pos1;
	c->snap_end = pos1;
	return KVC_OK;
}

/*
 * The chat messages [system] + msgs[from..to) (+ a new user message) in
 * chat.h's form. *v is malloc'ed.
 */
static int
chat_list(const struct conv *c, int from, int to, const char *user, struct chat_msg **v,
    size_t *n)
{
	size_t k = 0;
	struct chat_msg *a = calloc((size_t)(to - from) + 2, sizeof *a);

	if (a == NULL)
		return KVC_ENOMEM;
	if (c->system != NULL && c->system[0] != '\0') {
		a[k].role = CHAT_SYSTEM;
		a[k++].text = c->system;
	}
	for (int i = from; i < to; i++, k++) {
		const struct sess_msg *x = &c->msgs[i];
		a[k].role = x->role == SESS_ASSISTANT ? CHAT_ASSISTANT :
		    x->role == SESS_SYSTEM ? CHAT_SYSTEM : CHAT_USER;
		a[k].text = x->text;
		if (x->role == SESS_ASSISTANT) {
			a[k].ids = x->ids;
			a[k].n_ids = (size_t)x->n_ids;
		}
	}
	if (user != NULL) {
		a[k].role = CHAT_USER;
		a[k++].text = user;
	}
	*v = a;
	*n = k;
	return KVC_OK;
}

/* The system prompt plus one user message (msgs[k] or user) with the generation prompt. */
static int
render_head(const struct conv *c, int k, const char *user, struct kvc_tokens *out,
    char *err, size_t errlen)
{
	struct chat_msg *v;
	size_t n;
	int rc;

	rc = user ? chat_list(c, 0, 0, user, &v, &n) : chat_list(c, k, k + 1, NULL, &v, &n);
	if (rc)
		return rc;
	out->n = 0;
	rc = chat_render(eng_tokenizer(c->m->e), c->m->p.family, c->m->jinja, v, n, true, out,
	    err, errlen);
	free(v);
	return rc;
}

/* Stream of window k over msgs[0..to): head(k) or msgs[0].ids, then later ids. */
static int
build_stream(const struct conv *c, int k, int to, struct kvc_tokens *head,
    struct kvc_tokens *out, char *err, size_t errlen)
{
	int rc;

	out->n = 0;
	if (to <= k)
		return KVC_OK;
	if (k > 0) {
		rc = render_head(c, k, NULL, head, err, errlen);
		if (rc)
			return rc;
		if (kvc_tokens_append(out, head->v, head->n))
			return KVC_ENOMEM;
	} else if (kvc_tokens_append(out, c->msgs[0].ids, (size_t)c->msgs[0].n_ids)) {
		return KVC_ENOMEM;
	}
	for (int i = k + 1; i < to; i++)
		if (kvc_tokens_append(out, c->msgs[i].ids, (size_t)c->msgs[i].n_ids))
			return KVC_ENOMEM;
	return KVC_OK;
}

/* Positions kept free for a reply when deciding whether a prompt fits. */
static int
reply_reserve(const struct conv *c)
{
	int n_ctx = eng_n_ctx(c->m->e);
	int r = c->set.max_tokens > 0 ? c->set.max_tokens : 256;

	if (r > n_ctx / 4)
		r = n_ctx / 4;
	return r < 1 ? 1 : r;
}

/* ---- residency ---- */

static size_t
resident_bytes(const struct conv_mgr *m)
{
	size_t t = 0;

	for (const struct conv *c = m->open; c; c = c->next)
		if (c->seq)
			t += eng_seq_kv_bytes(c->seq);
	return t;
}

size_t
conv_mgr_kv_bytes(const struct conv_mgr *m, int *n_open, int *n_resident)
{
	int no = 0, nr = 0;

	for (const struct conv *c = m->open; c; c = c->next) {
		no++;
		nr += c->seq != NULL;
	}
	if (n_open)
		*n_open = no;
	if (n_resident)
		*n_resident = nr;
	return resident_bytes(m);
}

static void
conv_evict(struct conv *c)
{
	if (c->seq == NULL)
		return;
	eng_seq_evict(c->seq);
	eng_seq_free(c->seq);
	c->seq = NULL;
}

/* Evict least recently used caches (never keep's) until extra more bytes fit. */
static void
mgr_fit(struct conv_mgr *m, const struct conv *keep, size_t extra)
{
	if (m->p.kv_budget == 0)
		return;
	while (resident_bytes(m) + extra > m->p.kv_budget) {
		struct conv *lru = NULL;

		for (struct conv *c = m->open; c; c = c->next)
			if (c != keep && c->seq && (lru == NULL || c->last_used < lru->last_used))
				lru = c;
		if (lru == NULL)
			return;
		notice(m, "conversation %" PRId64 " (%s) left memory (--kv-budget); its snapshot "
		    "stays on disk", lru->id, lru->title);
		conv_evict(lru);
	}
}

struct load_ctx {
	struct kvc_seq *seq;
	const struct kvc_tokens *stream;
	struct conv *c;
	char *err;
	size_t errlen;
};

static int
load_chunk(void *arg, int pos0, int pos1, const void *blob, size_t len)
{
	struct load_ctx *L = arg;
	int rc;

	if (pos1 > (int)L->stream->n || pos0 != eng_seq_n_pos(L->seq)) {
		kvc_err(L->err, L->errlen, "chunk [%d, %d) does not continue the stream of %zu "
		    "tokens", pos0, pos1, L->stream->n);
		return KVC_ECORRUPT;
	}
	rc = eng_seq_kv_load(L->seq, L->stream->v, blob, len, L->err, L->errlen);
	if (rc)
		return rc;
	if (chunk_ends_push(L->c, pos1))
		return KVC_ENOMEM;
	progress(L->c->m, "restoring snapshot", (uint64_t)pos1, L->stream->n);
	return KVC_OK;
}

/* Write the whole cache as one chunk (after a rebuild); best effort. */
static void
write_full_snapshot(struct conv *c)
{
	struct kvc_buf blob = {0};
	struct sess_chunk ch;
	char key[256], err[256];
	int n = (int)c->stream.n;

	c->n_chunk_ends = 0;
	c->snap_end = 0;
	if (n == 0 || eng_seq_kv_save(c->seq, 0, n, &blob, err, sizeof err) != 0)
		goto out;
	cache_key(c, key, sizeof key);
	ch.pos0 = 0;
	ch.pos1 = n;
	ch.kv_type = kv_type_name(eng_kv_type(c->m->e));
	ch.model_fp = key;
	ch.blob = blob.p;
	ch.len = blob.n;
	ch.window = c->win;
	/* If the store refuses a chunk without messages, the next turn writes it. */
	if (sess_turn_commit(c->m->st, c->id, NULL, 0, &ch, err, sizeof err) == 0)
		(void)chunk_ends_push(c, n);
out:
	kvc_buf_free(&blob);
}

/*
 * Bring the cache back: from the snapshot chunks when they match this
 * engine and cover the stream, else by recomputing the stored tokens.
 */
static int
make_resident(struct conv *c, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct load_ctx L;
	struct eng_stats es;
	char key[256], why[256] = "";
	int rc, p = 0, n = (int)c->stream.n;

	if (c->seq != NULL)
		return KVC_OK;
	mgr_fit(m, c, (size_t)n * eng_kv_bytes_per_pos(m->e));
	rc = eng_seq_new(m->e, &c->seq, err, errlen);
	if (rc)
		return rc;
	c->pend_resumed = c->pend_rebuilt = false;
	c->n_chunk_ends = 0;
	c->snap_end = 0;
	if (n == 0)
		return KVC_OK;
	cache_key(c, key, sizeof key);
	L.seq = c->seq;
	L.stream = &c->stream;
	L.c = c;
	L.err = why;
	L.errlen = sizeof why;
	progress(m, "restoring snapshot", 0, (uint64_t)n);
	rc = sess_chunks_load(m->st, c->id, key, kv_type_name(eng_kv_type(m->e)), c->win,
	    load_chunk, &L, &p, why, sizeof why);
	progress(m, NULL, 0, 0);
	p = eng_seq_n_pos(c->seq);
	if (rc == 0 && p == n) {
		c->pend_resumed = true;
		return KVC_OK;
	}
	if (rc == 0 && p > 0) {
		/* The chunks on disk are a valid prefix: compute only the rest. */
		notice(m, "snapshot of conversation %" PRId64 " covers %d of %d positions; "
		    "computing the rest", c->id, p, n);
	} else {
		if (rc == KVC_ENOTFOUND)
			notice(m, "conversation %" PRId64 ": snapshot was saved with another model "
			    "or cache type; rebuilding from the stored tokens", c->id);
		else if (rc == KVC_ECORRUPT)
			notice(m, "conversation %" PRId64 ": snapshot is corrupt (%s); rebuilding "
			    "from the stored tokens", c->id, why);
		else if (rc != 0)
			notice(m, "conversation %" PRId64 ": snapshot unusable (%s); rebuilding "
			    "from the stored tokens", c->id, why[0] ? why : kvc_strerror(rc));
		else
			notice(m, "conversation %" PRId64 ": no snapshot; rebuilding from the "
			    "stored tokens", c->id);
		/* A partly loaded cache may hold a bad chunk: start clean. */
		eng_seq_free(c->seq);
		c->seq = NULL;
		rc = eng_seq_new(m->e, &c->seq, err, errlen);
		if (rc)
			return rc;
		(void)sess_chunks_clear(m->st, c->id, NULL, 0);
		c->n_chunk_ends = 0;
		c->snap_end = 0;
		p = 0;
	}
	rc = eng_seq_sync(c->seq, c->stream.v, n, &es, err, errlen);
	if (rc) {
		eng_seq_free(c->seq);
		c->seq = NULL;
		return rc;
	}
	c->pend_rebuilt = true;
	if (p == 0)
		write_full_snapshot(c);
	return KVC_OK;
}

int
conv_activate(struct conv *c, char *err, size_t errlen)
{
	c->last_used = ++c->m->tick;
	return make_resident(c, err, errlen);
}

/* ---- manager ---- */

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
		m->jinja = xstrdup(p->jinja);
		if (m->jinja == NULL) {
			free(m);
			return KVC_ENOMEM;
		}
	}
	m->p.jinja = m->jinja;
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
	free(m->jinja);
	free(m);
}

struct kvc_engine *conv_mgr_engine(const struct conv_mgr *m) { return m->e; }
struct sess_store *conv_mgr_store(const struct conv_mgr *m) { return m->st; }
enum chat_family conv_mgr_family(const struct conv_mgr *m) { return m->p.family; }

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
	conv_evict(c);
	for (int i = 0; i < c->n_msgs; i++)
		msg_clear(&c->msgs[i]);
	free(c->msgs);
	free(c->title);
	free(c->system);
	free(c->chunk_ends);
	free(c->reply_logits);
	kvc_tokens_free(&c->head);
	kvc_tokens_free(&c->stream);
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
	sess_conv_unlock(c->m->st, c->id);
	conv_free(c);
}

static int
persist_settings(struct conv *c, char *err, size_t errlen)
{
	struct kvc_buf b = {0};
	int rc = conv_settings_format(&c->set, &b);

	if (rc == 0)
		rc = sess_conv_set_settings(c->m->st, c->id, b.p, err, errlen);
	if (rc == 0)
		rc = sess_conv_set_window(c->m->st, c->id, c->win, err, errlen);
	kvc_buf_free(&b);
	return rc;
}

int
conv_new(struct conv_mgr *m, const char *title, const char *system,
    const struct conv_settings *s, struct conv **out, char *err, size_t errlen)
{
	struct kvc_buf sb = {0};
	char prov[64];
	struct conv *c;
	int64_t id;
	int rc;

	if (title == NULL) {
		time_t now = time(NULL);
		struct tm tm;
		localtime_r(&now, &tm);
		strftime(prov, sizeof prov, "chat %Y-%m-%d %H:%M:%S", &tm);
	}
	if (conv_settings_format(s, &sb))
		return KVC_ENOMEM;
	rc = sess_conv_create(m->st, title ? title : prov, eng_fingerprint(m->e),
	    chat_family_name(m->p.family), system, sb.p, &id, err, errlen);
	kvc_buf_free(&sb);
	if (rc)
		return rc;
	rc = sess_conv_lock(m->st, id, err, errlen);
	if (rc)
		return rc;
	c = conv_alloc(m, id);
	if (c == NULL || (c->title = xstrdup(title ? title : prov)) == NULL ||
	    (system != NULL && (c->system = xstrdup(system)) == NULL)) {
		if (c)
			conv_free(c);
		sess_conv_unlock(m->st, id);
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	c->auto_title = title == NULL;
	c->set = *s;
	rc = smp_new(&c->smp, &c->set.smp, eng_n_vocab(m->e));
	if (rc) {
		conv_free(c);
		sess_conv_unlock(m->st, id);
		kvc_err(err, errlen, "sampler: %s", kvc_strerror(rc));
		return rc;
	}
	conv_link(c);
	c->last_used = ++m->tick;
	rc = make_resident(c, err, errlen);
	if (rc) {
		conv_close(c);
		return rc;
	}
	*out = c;
	return KVC_OK;
}

/* Smallest window start >= from (a user message index) whose stream fits in limit. */
static int
fit_window(struct conv *c, int from, int limit, int *k_out, char *err, size_t errlen)
{
	struct kvc_tokens head = {0}, s = {0};
	int rc = KVC_ERANGE;

	for (int k = from; k < c->n_msgs; k++) {
		if (c->msgs[k].role != SESS_USER)
			continue;
		rc = build_stream(c, k, c->n_msgs, &head, &s, err, errlen);
		if (rc)
			break;
		if ((int)s.n <= limit) {
			*k_out = k;
			break;
		}
		rc = KVC_ERANGE;
	}
	kvc_tokens_free(&head);
	kvc_tokens_free(&s);
	return rc;
}

int
conv_open(struct conv_mgr *m, int64_t id, struct conv **out, char *err, size_t errlen)
{
	struct sess_conv row = {0};
	struct sess_msg *v = NULL;
	struct conv *c;
	int64_t window = 0;
	int n = 0, rc, n_ctx = eng_n_ctx(m->e);

	for (c = m->open; c; c = c->next)
		if (c->id == id) {
			rc = conv_activate(c, err, errlen);
			if (rc == 0)
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
	if (c == NULL) {
		rc = KVC_ENOMEM;
		goto fail;
	}
	c->title = xstrdup(row.title ? row.title : "");
	c->system = row.system ? xstrdup(row.system) : NULL;
	if (c->title == NULL || (row.system && c->system == NULL)) {
		rc = KVC_ENOMEM;
		goto fail;
	}
	if (row.template_name && chat_family_from_name(row.template_name) >= 0 &&
	    chat_family_from_name(row.template_name) != (int)m->p.family)
		notice(m, "conversation %" PRId64 " was made with the %s template; continuing "
		    "with %s", id, row.template_name, chat_family_name(m->p.family));
	conv_settings_parse(row.settings ? row.settings : "", &c->set);
	window = row.window;
	rc = sess_msgs_load(m->st, id, &v, &n, err, errlen);
	if (rc)
		goto fail;
	for (int i = 0; i < n; i++)
		if ((rc = msg_push(c, &v[i])) != 0)
			goto fail;
	sess_msgs_free(v, n);
	v = NULL;
	/* The remembered window, if it still names a user message and fits. */
	if (window > 0 && window < c->n_msgs && c->msgs[window].role == SESS_USER)
		c->win = (int)window;
	rc = build_stream(c, c->win, c->n_msgs, &c->head, &c->stream, err, errlen);
	if (rc)
		goto fail;
	if ((int)c->stream.n >= n_ctx) {
		int k = c->win;

		rc = fit_window(c, c->win + 1, n_ctx - reply_reserve(c), &k, err, errlen);
		if (rc == KVC_ERANGE)
			rc = fit_window(c, c->win + 1, n_ctx - 1, &k, err, errlen);
		if (rc) {
			kvc_err(err, errlen, "conversation %" PRId64 " does not fit a context of %d "
			    "positions", id, n_ctx);
			goto fail;
		}
		notice(m, "conversation %" PRId64 ": the context holds %d positions; keeping "
		    "messages from #%d", id, n_ctx, k + 1);
		c->win = k;
		if ((rc = build_stream(c, c->win, c->n_msgs, &c->head, &c->stream, err, errlen)))
			goto fail;
	}
	rc = smp_new(&c->smp, &c->set.smp, eng_n_vocab(m->e));
	if (rc) {
		kvc_err(err, errlen, "sampler: %s", kvc_strerror(rc));
		goto fail;
	}
	sess_conv_clear(&row);
	conv_link(c);
	rc = conv_activate(c, err, errlen);
	if (rc) {
		conv_close(c);
		return rc;
	}
	*out = c;
	return KVC_OK;
fail:
	if (rc == KVC_ENOMEM)
		kvc_err(err, errlen, "out of memory");
	if (v)
		sess_msgs_free(v, n);
	if (c)
		conv_free(c);
	sess_conv_unlock(m->st, id);
	sess_conv_clear(&row);
	return rc;
}

int
conv_delete(struct conv *c, char *err, size_t errlen)
{
	int64_t id = c->id;
	struct sess_store *st = c->m->st;

	conv_close(c);
	return sess_conv_delete(st, id, err, errlen);
}

/* ---- turns ---- */

struct gen_state {
	struct kvc_tokens ids;		/* generated ids */
	struct kvc_buf text;		/* their text */
};

static bool
has_stop_string(enum chat_family f, const struct kvc_buf *text, size_t *cut)
{
	const char *const *ss = chat_stop_strings(f);

	if (ss == NULL || text->n == 0)
		return false;
	for (; *ss; ss++) {
		const char *hit = strstr(text->p, *ss);
		if (hit) {
			*cut = (size_t)(hit - text->p);
			return true;
		}
	}
	return false;
}

/*
 * After a turn's prompt is in the cache: its prefill figures, and the
 * buffer that keeps the first reply position's logits for /retry (optional:
 * without it /retry recomputes one position).
 */
static void
prompt_done(struct conv *c, const struct eng_stats *es, struct conv_stats *st)
{
	st->reused_tokens = es->n_reused;
	st->prefill_tokens = es->n_computed;
	st->prefill_tps = es->t_prefill > 0 ? es->n_computed / es->t_prefill : 0;
	if (c->reply_logits == NULL)
		c->reply_logits = malloc((size_t)eng_n_vocab(c->m->e) * sizeof *c->reply_logits);
}

/*
 * A NUL byte is valid UTF-8 but useless on a terminal and would cut the
 * stored (C string) text short, so what is shown and what is saved could
 * differ; both get U+FFFD instead.
 */
static int
replace_nul(struct kvc_buf *piece)
{
	struct kvc_buf out = {0};

	if (memchr(piece->p, '\0', piece->n) == NULL)
		return 0;
	for (size_t i = 0; i < piece->n; i++) {
		int rc = piece->p[i] == '\0' ? kvc_buf_append(&out, "\xef\xbf\xbd", 3) :
		    kvc_buf_append(&out, &piece->p[i], 1);
		if (rc) {
			kvc_buf_free(&out);
			return rc;
		}
	}
	kvc_buf_free(piece);
	*piece = out;
	return 0;
}

size_t
conv_stop_holdback(enum chat_family f, const char *text, size_t n)
{
	const char *const *ss = chat_stop_strings(f);
	size_t best = 0;

	for (; ss && *ss; ss++) {
		size_t len = strlen(*ss);

		/* Longest proper prefix of the stop string that ends the text. */
		for (size_t k = len - 1; k > best; k--)
			if (k <= n && memcmp(text + n - k, *ss, k) == 0) {
				best = k;
				break;
			}
	}
	return best;
}

/* Pass g->text[*shown..upto) to the caller; non-zero if it asks to stop. */
static int
show_text(const struct conv_io *io, const struct gen_state *g, size_t *shown, size_t upto)
{
	int rc = 0;

	if (upto > *shown && io && io->on_text)
		rc = io->on_text(io->arg, g->text.p + *shown, upto - *shown);
	if (upto > *shown)
		*shown = upto;
	return rc;
}

/*
 * Sample and stream until an end of turn, the cap, a full context or an
 * interrupt. first_logits (or NULL): what to sample the first id from when
 * the sequence has none at hand (/retry). Text that could be the start of a
 * stop string is held back until it is known not to be, so what is shown is
 * what is stored.
 */
static int
generate(struct conv *c, const struct conv_io *io, const float *first_logits,
    struct gen_state *g, struct conv_stats *st, double t0, char *err, size_t errlen)
{
	const struct kvc_tokenizer *tok = eng_tokenizer(c->m->e);
	enum chat_family fam = c->m->p.family;
	int n_ctx = eng_n_ctx(c->m->e);
	struct kvc_buf piece = {0};
	struct tok_detok dt;
	struct eng_stats es;
	double t_first = 0;
	size_t shown = 0;
	bool stopped = false;
	int rc = 0;

	tok_detok_init(&dt, 0);
	for (;;) {
		const float *logits;
		int32_t id;
		size_t cut;

		if (io && io->interrupt && *io->interrupt) {
			st->interrupted = true;
			break;
		}
		if (c->set.max_tokens > 0 && (int)g->ids.n >= c->set.max_tokens)
			break;
		if (eng_seq_n_pos(c->seq) >= n_ctx) {
			st->ctx_full = true;
			break;
		}
		logits = eng_seq_logits(c->seq);
		if (logits == NULL && g->ids.n == 0)
			logits = first_logits;
		if (logits == NULL) {
			kvc_err(err, errlen, "no logits at position %d", eng_seq_n_pos(c->seq));
			rc = KVC_EINVAL;
			break;
		}
		if (g->ids.n == 0 && c->reply_logits != NULL && logits != c->reply_logits) {
			memcpy(c->reply_logits, logits, (size_t)eng_n_vocab(c->m->e) *
			    sizeof *c->reply_logits);
			c->reply_logits_pos = eng_seq_n_pos(c->seq);
		}
		id = smp_sample(c->smp, logits, eng_seq_tokens(c->seq),
		    (size_t)eng_seq_n_pos(c->seq));
		/* The id goes into the cache before it counts as said. */
		rc = eng_seq_append(c->seq, &id, 1, &es, err, errlen);
		if (rc)
			break;
		if (kvc_tokens_push(&g->ids, id)) {
			rc = KVC_ENOMEM;
			break;
		}
		piece.n = 0;
		if (tok_detok_push(tok, &dt, id, &piece) == 0 && piece.n > 0 &&
		    replace_nul(&piece) == 0)
			(void)kvc_buf_append(&g->text, piece.p, piece.n);
		if (t_first == 0) {
			t_first = kvc_now();
			st->ttft_ms = (t_first - t0) * 1e3;
		}
		if (has_stop_string(fam, &g->text, &cut)) {
			g->text.n = cut;
			g->text.p[cut] = '\0';
			(void)show_text(io, g, &shown, cut);
			stopped = true;
			break;
		}
		if (show_text(io, g, &shown, g->text.n - conv_stop_holdback(fam, g->text.p,
		    g->text.n)) != 0)
			st->interrupted = true;
		if (tok_is_eog(tok, id) || st->interrupted)
			break;
	}
	piece.n = 0;
	/* After a stop string the text ends where it began. */
	if (tok_detok_flush(&dt, &piece) == 0 && piece.n > 0 && !stopped &&
	    replace_nul(&piece) == 0)
		(void)kvc_buf_append(&g->text, piece.p, piece.n);
	/* The reply is over: what was held back is not a stop string. */
	(void)show_text(io, g, &shown, g->text.n);
	kvc_buf_free(&piece);
	if (g->text.p == NULL && kvc_buf_append(&g->text, "", 0))
		return KVC_ENOMEM;
	st->gen_tokens = (int)g->ids.n;
	if (t_first > 0 && g->ids.n > 0) {
		double dt_dec = kvc_now() - t_first;
		st->decode_tps = dt_dec > 0 ? (double)g->ids.n / dt_dec : 0;
	}
	return rc;
}

static void
auto_title(struct conv *c, const char *text)
{
	char t[64];
	size_t n = 0;

	while (*text == ' ' || *text == '\n' || *text == '\t')
		text++;
	while (text[n] && text[n] != '\n' && n < 48)
		n++;
	n = kvc_utf8_valid_prefix(text, n);
	if (n == 0)
		return;
	memcpy(t, text, n);
	t[n] = '\0';
	if (conv_rename(c, t, NULL, 0) == 0)
		c->auto_title = false;
}

static int drop_tail(struct conv *c, int k, char *err, size_t errlen);

int
conv_turn(struct conv *c, const char *text, const struct conv_io *io,
    struct conv_stats *st, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct kvc_tokens delta = {0}, news = {0}, head = {0}, s_k = {0};
	struct gen_state g = {{0}, {0}};
	struct chat_msg *cl = NULL;
	struct eng_stats es = {0};
	struct kvc_buf blob = {0};
	struct sess_msg rec[2];
	struct sess_chunk ch, *chp = NULL;
	size_t ncl;
	char key[256];
	double t0 = io && io->t_enter > 0 ? io->t_enter : kvc_now();
	int n_ctx = eng_n_ctx(m->e), reserve = reply_reserve(c), rc;
	int new_win, old_n;
	bool windowed = false;

	memset(st, 0, sizeof *st);
	/* A user message left without its reply (an older kvchat's /retry cut short): drop it. */
	if (c->n_msgs > 0 && c->msgs[c->n_msgs - 1].role == SESS_USER &&
	    (rc = drop_tail(c, c->n_msgs - 1, err, errlen)) != 0)
		return rc;
	rc = conv_activate(c, err, errlen);
	if (rc)
		return rc;
	new_win = c->win;
	old_n = (int)c->stream.n;
	st->resumed_from_snapshot = c->pend_resumed;
	st->rebuilt = c->pend_rebuilt;

	/* The user's delta: closes the last reply, adds the turn and the generation prompt. */
	rc = chat_list(c, c->win, c->n_msgs, text, &cl, &ncl);
	if (rc)
		goto out;
	rc = chat_render_delta(eng_tokenizer(m->e), m->p.family, m->jinja, cl, old_n ? ncl - 1 : 0,
	    ncl, true, &delta, err, errlen);
	if (rc)
		goto out;
	st->prompt_tokens = (int)delta.n;

	if (old_n == 0 && (int)delta.n >= n_ctx) {
		kvc_err(err, errlen, "input too long: %zu tokens with the template, the context "
		    "holds %d", delta.n, n_ctx);
		rc = KVC_ERANGE;
		goto out;
	}
	if (old_n > 0 && old_n + (int)delta.n + reserve > n_ctx) {
		int k;

		if (m->p.overflow == CONV_OVERFLOW_STOP) {
			kvc_err(err, errlen, "context full: %d of %d positions used, this turn needs "
			    "%zu more plus room for the reply (/clear, /new, or --ctx-overflow drop)",
			    old_n, n_ctx, delta.n);
			rc = KVC_ERANGE;
			goto out;
		}
		/* Drop whole exchanges from the front until prompt + reserve fits. */
		for (k = c->win + 1; k <= c->n_msgs; k++) {
			if (k < c->n_msgs && c->msgs[k].role != SESS_USER)
				continue;
			if (k < c->n_msgs) {
				rc = build_stream(c, k, c->n_msgs, &head, &s_k, err, errlen);
				if (rc)
					goto out;
				if ((int)(s_k.n + delta.n) + reserve > n_ctx)
					continue;
				news.n = 0;
				if (kvc_tokens_append(&news, s_k.v, s_k.n) ||
				    kvc_tokens_append(&news, delta.v, delta.n)) {
					rc = KVC_ENOMEM;
					goto out;
				}
			} else {
				rc = render_head(c, 0, text, &head, err, errlen);
				if (rc)
					goto out;
				if ((int)head.n >= n_ctx) {
					kvc_err(err, errlen, "input too long: %zu tokens with the "
					    "template, the context holds %d", head.n, n_ctx);
					rc = KVC_ERANGE;
					goto out;
				}
				news.n = 0;
				if (kvc_tokens_append(&news, head.v, head.n)) {
					rc = KVC_ENOMEM;
					goto out;
				}
			}
			break;
		}
		new_win = k;
		windowed = true;
		mgr_fit(m, c, (size_t)(reserve + (int)news.n) * eng_kv_bytes_per_pos(m->e));
		rc = eng_seq_sync(c->seq, news.v, (int)news.n, &es, err, errlen);
		if (rc)
			goto out;
		st->dropped_tokens = old_n + (int)delta.n - (int)news.n;
		if (st->dropped_tokens < 0)
			st->dropped_tokens = 0;
	} else {
		/* An empty conversation may start with less room for the reply. */
		mgr_fit(m, c, (size_t)(reserve + (int)delta.n) * eng_kv_bytes_per_pos(m->e));
		rc = eng_seq_append(c->seq, delta.v, (int)delta.n, &es, err, errlen);
		if (rc)
			goto out;
		news.n = 0;
		if (kvc_tokens_append(&news, c->stream.v, c->stream.n) ||
		    kvc_tokens_append(&news, delta.v, delta.n)) {
			rc = KVC_ENOMEM;
			goto rollback;
		}
	}
	prompt_done(c, &es, st);
	c->reply_logits_pos = -1;
	rc = generate(c, io, NULL, &g, st, t0, err, errlen);
	if (rc && g.ids.n == 0)
		goto rollback;
	if (rc) {
		/* Keep what was said before the failure, as an interrupted reply. */
		st->interrupted = true;
		rc = 0;
	}
	st->context_used = eng_seq_n_pos(c->seq);
	st->context_total = n_ctx;

	/* One transaction: user message, reply, the new cache positions. */
	memset(rec, 0, sizeof rec);
	rec[0].role = SESS_USER;
	rec[0].text = (char *)text;
	rec[0].ids = delta.v;
	rec[0].n_ids = (int)delta.n;
	rec[1].role = SESS_ASSISTANT;
	rec[1].text = g.text.p;
	rec[1].ids = g.ids.v;
	rec[1].n_ids = (int)g.ids.n;
	rec[1].interrupted = st->interrupted;
	rec[1].stats.ttft_ms = st->ttft_ms;
	rec[1].stats.prefill_tokens = st->prefill_tokens;
	rec[1].stats.reused_tokens = st->reused_tokens;
	rec[1].stats.prefill_tps = st->prefill_tps;
	rec[1].stats.gen_tokens = st->gen_tokens;
	rec[1].stats.decode_tps = st->decode_tps;
	if (windowed) {
		/* Chunks of the old stream no longer describe the cache. */
		rc = sess_chunks_clear(m->st, c->id, err, errlen);
		if (rc)
			goto rollback;
		c->n_chunk_ends = 0;
		c->snap_end = 0;
	}
	cache_key(c, key, sizeof key);
	if (eng_seq_kv_save(c->seq, c->snap_end, st->context_used, &blob, NULL, 0) == 0) {
		ch.pos0 = c->snap_end;
		ch.pos1 = st->context_used;
		ch.kv_type = kv_type_name(eng_kv_type(m->e));
		ch.model_fp = key;
		ch.blob = blob.p;
		ch.len = blob.n;
		ch.window = new_win;
		chp = &ch;
	}
	rc = sess_turn_commit(m->st, c->id, rec, 2, chp, err, errlen);
	if (rc)
		goto rollback;

	/* Committed: the in-memory picture follows. */
	if (msg_push(c, &rec[0]) || msg_push(c, &rec[1])) {
		rc = KVC_ENOMEM;
		kvc_err(err, errlen, "out of memory");
		goto out;
	}
	if (windowed) {
		c->win = new_win;
		kvc_tokens_free(&c->head);
		c->head = head;
		memset(&head, 0, sizeof head);
		if (new_win == c->n_msgs - 2) {
			/* Everything before was dropped: head is the new message itself. */
			c->head.n = 0;
			(void)kvc_tokens_append(&c->head, news.v, news.n);
		}
		(void)persist_settings(c, NULL, 0);
	}
	c->stream.n = 0;
	if (kvc_tokens_append(&c->stream, news.v, news.n) ||
	    kvc_tokens_append(&c->stream, g.ids.v, g.ids.n)) {
		rc = KVC_ENOMEM;
		goto out;
	}
	if (chp)
		(void)chunk_ends_push(c, ch.pos1);
	c->pend_resumed = c->pend_rebuilt = false;
	if (c->auto_title)
		auto_title(c, text);
	rc = 0;
	goto out;

rollback:
	/* Nothing was stored: the cache goes back to the stored stream. */
	c->reply_logits_pos = -1;
	if (!windowed)
		(void)eng_seq_truncate(c->seq, old_n);
	else
		conv_evict(c);
out:
	free(cl);
	kvc_tokens_free(&delta);
	kvc_tokens_free(&news);
	kvc_tokens_free(&head);
	kvc_tokens_free(&s_k);
	kvc_tokens_free(&g.ids);
	kvc_buf_free(&g.text);
	kvc_buf_free(&blob);
	return rc;
}

/*
 * Drop msgs[k..n_msgs) (msgs[k] a user message) from the store and the
 * cache: one rewind of the store, then the in-memory picture follows.
 */
static int
drop_tail(struct conv *c, int k, char *err, size_t errlen)
{
	int n = c->n_msgs, n_pos, rc;

	c->reply_logits_pos = -1;
	if (c->win > 0 && c->win >= k) {
		/* The window began at a message being dropped: choose it again. */
		int w = 0;

		rc = sess_rewind(c->m->st, c->id, k, 0, err, errlen);
		if (rc)
			return rc;
		for (int i = k; i < n; i++)
			msg_clear(&c->msgs[i]);
		c->n_msgs = k;
		if (fit_window(c, 0, eng_n_ctx(c->m->e) - reply_reserve(c), &w, NULL, 0) != 0)
			w = c->n_msgs > 0 ? c->n_msgs - 2 : 0;
		c->win = w;
		conv_evict(c);
		c->n_chunk_ends = 0;
		c->snap_end = 0;
		rc = build_stream(c, c->win, c->n_msgs, &c->head, &c->stream, err, errlen);
		(void)persist_settings(c, NULL, 0);
		if (rc == 0)
			rc = conv_activate(c, err, errlen);
		return rc;
	}
	n_pos = (int)c->stream.n;
	for (int i = k; i < n; i++)
		n_pos -= c->msgs[i].n_ids;
	if (n_pos < 0) {
		kvc_err(err, errlen, "stream shorter than its messages");
		return KVC_ECORRUPT;
	}
	rc = sess_rewind(c->m->st, c->id, k, n_pos, err, errlen);
	if (rc)
		return rc;
	for (int i = k; i < n; i++)
		msg_clear(&c->msgs[i]);
	c->n_msgs = k;
	c->stream.n = (size_t)n_pos;
	chunk_ends_trim(c, n_pos);
	if (c->seq)
		(void)eng_seq_truncate(c->seq, n_pos);
	return KVC_OK;
}

int
conv_undo(struct conv *c, char *err, size_t errlen)
{
	int n = c->n_msgs;

	if (n >= 1 && c->msgs[n - 1].role == SESS_USER)
		return drop_tail(c, n - 1, err, errlen);	/* a reply that never came */
	if (n < 2 || c->msgs[n - 1].role != SESS_ASSISTANT || c->msgs[n - 2].role != SESS_USER) {
		kvc_err(err, errlen, "nothing to undo");
		return KVC_ENOTFOUND;
	}
	return drop_tail(c, n - 2, err, errlen);
}

/*
 * Only the reply is taken back: the cache is cut to the end of the user's
 * delta (its logits are kept from the first answer, or the last position
 * is recomputed), a new reply is generated, and then the store drops the
 * old reply and the chunks past that point and takes the new one in one
 * transaction: a crash or a failed write leaves the old reply in place.
 */
int
conv_retry(struct conv *c, const struct conv_io *io, struct conv_stats *st,
    char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct gen_state g = {{0}, {0}};
	struct eng_stats es = {0};
	struct kvc_buf blob = {0};
	struct sess_msg rec;
	struct sess_chunk ch, *chp = NULL;
	const float *first = NULL;
	char key[256];
	double t0 = io && io->t_enter > 0 ? io->t_enter : kvc_now();
	int n = c->n_msgs, u, n_pos, snap_end, rc;

	memset(st, 0, sizeof *st);
	if (n >= 1 && c->msgs[n - 1].role == SESS_USER)
		u = n - 1;
	else if (n >= 2 && c->msgs[n - 1].role == SESS_ASSISTANT && c->msgs[n - 2].role == SESS_USER)
		u = n - 2;
	else {
		kvc_err(err, errlen, "nothing to retry");
		return KVC_ENOTFOUND;
	}
	n_pos = (int)c->stream.n - (u == n - 2 ? c->msgs[n - 1].n_ids : 0);
	if (n_pos <= 0) {
		kvc_err(err, errlen, "stream shorter than its messages");
		return KVC_ECORRUPT;
	}
	rc = conv_activate(c, err, errlen);
	if (rc)
		return rc;
	st->resumed_from_snapshot = c->pend_resumed;
	st->rebuilt = c->pend_rebuilt;
	if (c->reply_logits != NULL && c->reply_logits_pos == n_pos &&
	    eng_seq_n_pos(c->seq) >= n_pos) {
		rc = eng_seq_truncate(c->seq, n_pos);
		first = c->reply_logits;
		es.n_reused = n_pos;
	} else {
		rc = eng_seq_sync(c->seq, c->stream.v, n_pos, &es, err, errlen);
	}
	if (rc)
		goto fail;
	prompt_done(c, &es, st);
	rc = generate(c, io, first, &g, st, t0, err, errlen);
	if (rc && g.ids.n == 0)
		goto fail;
	if (rc) {
		st->interrupted = true;
		rc = 0;
	}
	st->context_used = eng_seq_n_pos(c->seq);
	st->context_total = eng_n_ctx(m->e);

	memset(&rec, 0, sizeof rec);
	rec.role = SESS_ASSISTANT;
	rec.text = g.text.p;
	rec.ids = g.ids.v;
	rec.n_ids = (int)g.ids.n;
	rec.interrupted = st->interrupted;
	rec.stats.ttft_ms = st->ttft_ms;
	rec.stats.prefill_tokens = st->prefill_tokens;
	rec.stats.reused_tokens = st->reused_tokens;
	rec.stats.prefill_tps = st->prefill_tps;
	rec.stats.gen_tokens = st->gen_tokens;
	rec.stats.decode_tps = st->decode_tps;
	/* The rewind keeps the chunks that end at or before n_pos. */
	snap_end = 0;
	for (int i = 0; i < c->n_chunk_ends && c->chunk_ends[i] <= n_pos; i++)
		snap_end = c->chunk_ends[i];
	cache_key(c, key, sizeof key);
	if (eng_seq_kv_save(c->seq, snap_end, st->context_used, &blob, NULL, 0) == 0) {
		ch.pos0 = snap_end;
		ch.pos1 = st->context_used;
		ch.kv_type = kv_type_name(eng_kv_type(m->e));
		ch.model_fp = key;
		ch.blob = blob.p;
		ch.len = blob.n;
		ch.window = c->win;
		chp = &ch;
	}
	rc = sess_turn_replace(m->st, c->id, u + 1, n_pos, &rec, 1, chp, err, errlen);
	if (rc)
		goto fail;
	/* The store holds the new reply in place of the old one: the picture follows. */
	for (int i = u + 1; i < n; i++)
		msg_clear(&c->msgs[i]);
	c->n_msgs = u + 1;
	c->stream.n = (size_t)n_pos;
	chunk_ends_trim(c, n_pos);
	if (msg_push(c, &rec) || kvc_tokens_append(&c->stream, g.ids.v, g.ids.n)) {
		rc = KVC_ENOMEM;
		kvc_err(err, errlen, "out of memory");
		conv_evict(c);
		goto out;
	}
	if (chp)
		(void)chunk_ends_push(c, ch.pos1);
	c->pend_resumed = c->pend_rebuilt = false;
	goto out;
fail:
	/* Nothing changed on disk: the cache goes back to the stored stream. */
	c->reply_logits_pos = -1;
	if (eng_seq_sync(c->seq, c->stream.v, (int)c->stream.n, &es, NULL, 0) != 0)
		conv_evict(c);
out:
	kvc_tokens_free(&g.ids);
	kvc_buf_free(&g.text);
	kvc_buf_free(&blob);
	return rc;
}

int
conv_clear(struct conv *c, char *err, size_t errlen)
{
	int rc = sess_rewind(c->m->st, c->id, 0, 0, err, errlen);

	if (rc)
		return rc;
	(void)sess_chunks_clear(c->m->st, c->id, NULL, 0);
	for (int i = 0; i < c->n_msgs; i++)
		msg_clear(&c->msgs[i]);
	c->n_msgs = 0;
	c->stream.n = 0;
	c->n_chunk_ends = 0;
	c->snap_end = 0;
	if (c->win) {
		c->win = 0;
		(void)persist_settings(c, NULL, 0);
	}
	if (c->seq)
		(void)eng_seq_truncate(c->seq, 0);
	return KVC_OK;
}

int
conv_rename(struct conv *c, const char *title, char *err, size_t errlen)
{
	char *t = xstrdup(title);
	int rc;

	if (t == NULL)
		return KVC_ENOMEM;
	rc = sess_conv_rename(c->m->st, c->id, title, err, errlen);
	if (rc) {
		free(t);
		return rc;
	}
	free(c->title);
	c->title = t;
	c->auto_title = false;
	return KVC_OK;
}

/*
 * A new system prompt for a conversation with messages: only the first
 * message's ids hold it (every family renders the system text with the
 * first user turn), so those are rendered again, the whole stream is
 * checked against a full rendering, the cache is synced to it (the engine
 * keeps the common prefix, usually just BOS) and a fresh snapshot written.
 */
static int
change_system(struct conv *c, char *s, int *n_computed, char *err, size_t errlen)
{
	struct conv_mgr *m = c->m;
	struct kvc_tokens ids0 = {0}, full = {0}, ref = {0}, head = {0}, win = {0};
	struct chat_msg *cl = NULL;
	struct eng_stats es = {0};
	char *old = c->system;
	size_t ncl;
	int rc, n = c->n_msgs;

	if (c->msgs[0].role != SESS_USER) {
		kvc_err(err, errlen, "the conversation does not start with a user message");
		return KVC_EINVAL;
	}
	c->system = s;	/* what chat_list renders from; put back on failure */
	rc = chat_list(c, 0, 0, c->msgs[0].text, &cl, &ncl);
	if (rc == 0)
		rc = chat_render_delta(eng_tokenizer(m->e), m->p.family, m->jinja, cl, 0, ncl, true,
		    &ids0, err, errlen);
	free(cl);
	cl = NULL;
	if (rc)
		goto fail;
	/* The stored ids must still concatenate to the full rendering. */
	if (kvc_tokens_append(&full, ids0.v, ids0.n)) {
		rc = KVC_ENOMEM;
		goto fail;
	}
	for (int i = 1; i < n; i++)
		if (kvc_tokens_append(&full, c->msgs[i].ids, (size_t)c->msgs[i].n_ids)) {
			rc = KVC_ENOMEM;
			goto fail;
		}
	rc = chat_list(c, 0, n, NULL, &cl, &ncl);
	if (rc == 0)
		rc = chat_render(eng_tokenizer(m->e), m->p.family, m->jinja, cl, ncl,
		    c->msgs[n - 1].role == SESS_USER, &ref, err, errlen);
	if (rc)
		goto fail;
	if (ref.n != full.n || memcmp(ref.v, full.v, full.n * sizeof *full.v) != 0) {
		kvc_err(err, errlen, "the %s template renders this conversation differently with "
		    "another system prompt: use /new with the new system prompt",
		    chat_family_name(m->p.family));
		rc = KVC_EINVAL;
		goto fail;
	}
	/* The cache's stream: the whole one, or the window's head rendered anew. */
	if (c->win > 0) {
		rc = build_stream(c, c->win, n, &head, &win, err, errlen);
		if (rc)
			goto fail;
	} else if (kvc_tokens_append(&win, full.v, full.n)) {
		rc = KVC_ENOMEM;
		goto fail;
	}
	if ((int)win.n >= eng_n_ctx(m->e)) {
		kvc_err(err, errlen, "with that system prompt the conversation (%zu tokens) does not "
		    "fit the context of %d: use /new with the new system prompt", win.n,
		    eng_n_ctx(m->e));
		rc = KVC_ERANGE;
		goto fail;
	}
	rc = conv_activate(c, err, errlen);
	if (rc == 0) {
		mgr_fit(m, c, win.n * eng_kv_bytes_per_pos(m->e));
		rc = eng_seq_sync(c->seq, win.v, (int)win.n, &es, err, errlen);
	}
	if (rc == 0)
		rc = sess_conv_replace_system(c->m->st, c->id, s, ids0.v, (int)ids0.n, err, errlen);
	if (rc) {
		/* The cache may hold the new stream: let it come back from the snapshot. */
		conv_evict(c);
		goto fail;
	}
	/* Stored: the in-memory picture follows. */
	free(c->msgs[0].ids);
	c->msgs[0].ids = ids0.v;
	c->msgs[0].n_ids = (int)ids0.n;
	memset(&ids0, 0, sizeof ids0);
	kvc_tokens_free(&c->stream);
	c->stream = win;
	memset(&win, 0, sizeof win);
	if (c->win > 0) {
		kvc_tokens_free(&c->head);
		c->head = head;
		memset(&head, 0, sizeof head);
	}
	free(old);
	c->reply_logits_pos = -1;
	c->pend_resumed = c->pend_rebuilt = false;
	write_full_snapshot(c);
	if (n_computed)
		*n_computed = es.n_computed;
	rc = KVC_OK;
	goto out;
fail:
	c->system = old;
	free(s);
out:
	free(cl);
	kvc_tokens_free(&ids0);
	kvc_tokens_free(&full);
	kvc_tokens_free(&ref);
	kvc_tokens_free(&head);
	kvc_tokens_free(&win);
	return rc;
}

int
conv_change_system(struct conv *c, const char *system, int *n_computed, char *err,
    size_t errlen)
{
	char *s = NULL;
	int rc;

	if (n_computed)
		*n_computed = 0;
	if (system && system[0] && (s = xstrdup(system)) == NULL)
		return KVC_ENOMEM;
	if (c->n_msgs > 0 && (s ? c->system && strcmp(s, c->system) == 0 :
	    c->system == NULL || c->system[0] == '\0')) {
		free(s);
		return KVC_OK;	/* the same prompt: nothing to recompute */
	}
	if (c->n_msgs > 0)
		return change_system(c, s, n_computed, err, errlen);
	rc = sess_conv_set_system(c->m->st, c->id, s, err, errlen);
	if (rc) {
		free(s);
		return rc;
	}
	free(c->system);
	c->system = s;
	return KVC_OK;
}

int
conv_set_system(struct conv *c, const char *system, char *err, size_t errlen)
{
	return conv_change_system(c, system, NULL, err, errlen);
}

int
conv_set_settings(struct conv *c, const struct conv_settings *s, char *err, size_t errlen)
{
	struct conv_settings old = c->set;
	int rc;

	c->set = *s;
	rc = persist_settings(c, err, errlen);
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
bool conv_resident(const struct conv *c) { return c->seq != NULL; }
struct kvc_seq *conv_seq(const struct conv *c) { return c->seq; }

const struct sess_msg *
conv_msg(const struct conv *c, int i)
{
	return i >= 0 && i < c->n_msgs ? &c->msgs[i] : NULL;
}

const int32_t *
conv_stream(const struct conv *c, int *n)
{
	*n = (int)c->stream.n;
	return c->stream.v;
}
