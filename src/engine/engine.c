/*
 * engine.c: a model on a backend, and sequences that own their KV caches;
 * saving and restoring those caches as snapshots (laid out by snapshot.c).
 */
#include "config.h"

#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine_int.h"
#include "snapshot.h"

/* Prefill runs at most this many tokens per backend call (bounds scratch memory). */
#define ENG_PREFILL_CHUNK 512
/*
 * With a prefill hook set, slices are sized by the measured rate (of the
 * last slice run, in this call or an earlier one) to take about this long,
 * so an interrupt is seen within it; before any rate is known a slice is
 * ENG_SLICE_FIRST tokens (small: a big model on a CPU may take 0.1 s each).
 */
#define ENG_SLICE_S 0.2
#define ENG_SLICE_FIRST 8
#define ENG_SLICE_MIN 2

struct kvc_engine_params
kvc_engine_default_params(void)
{
	struct kvc_engine_params p;

	memset(&p, 0, sizeof p);
	p.device = "auto";
	p.gpu = 0;
	p.n_threads = 0;
	p.n_ctx = 0;
	p.kv_type = GGML_TYPE_F16;
	return p;
}

/* ---- fingerprint: FNV-1a 64 ---- */

static void
fnv(uint64_t *h, const void *data, size_t n)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < n; i++) {
		*h ^= p[i];
		*h *= 0x100000001b3ULL;
	}
}

static void
fnv_i64(uint64_t *h, int64_t v)
{
	unsigned char b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)v >> (8 * i));
	fnv(h, b, sizeof b);
}

static void
fnv_str(uint64_t *h, const char *s)
{
	fnv(h, s, strlen(s) + 1);
}

static void
fnv_f32(uint64_t *h, float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	fnv_i64(h, (int64_t)u);
}

/*
 * Hashing every byte of a multi-GB file would cost seconds at each start:
 * the head, the tail and 16 strided 256-byte windows of each tensor tell
 * different weights apart in practice.
 */
static void
fnv_tensor_sample(uint64_t *h, const struct gguf_tensor *t)
{
	const unsigned char *d = t->data;
	size_t n = t->nbytes, k = 4096;

	if (d == NULL || n == 0)
		return;
	if (n <= 3 * k) {
		fnv(h, d, n);
		return;
	}
	fnv(h, d, k);
	fnv(h, d + n - k, k);
	for (int i = 1; i <= 16; i++) {
		size_t off = (size_t)((double)(n - 256) * i / 17.0);
		fnv(h, d + off, 256);
	}
}

static void
make_fingerprint(struct kvc_engine *e)
{
	const struct kvc_hparams *hp = &e->model.hp;
	uint64_t h = 0xcbf29ce484222325ULL;

	fnv_str(&h, "kvchat-fingerprint-1");
	fnv_str(&h, model_arch_name(hp->arch));
	fnv_i64(&h, hp->n_vocab);
	fnv_i64(&h, hp->n_embd);
	fnv_i64(&h, hp->n_layer);
	fnv_i64(&h, hp->n_head);
	fnv_i64(&h, hp->n_head_kv);
	fnv_i64(&h, hp->head_dim);
	fnv_i64(&h, hp->n_ff);
	fnv_f32(&h, hp->rms_eps);
	fnv_f32(&h, hp->rope_theta);
	fnv_i64(&h, hp->rope_dim);
	fnv_i64(&h, hp->rope_neox);
	for (int64_t i = 0; i < gguf_n_tensors(e->gf); i++) {
		const struct gguf_tensor *t = gguf_tensor(e->gf, i);

		fnv_str(&h, t->name);
		fnv_i64(&h, t->type);
		for (int d = 0; d < 4; d++)
			fnv_i64(&h, t->ne[d]);
		fnv_tensor_sample(&h, t);
	}
	snprintf(e->fingerprint, sizeof e->fingerprint, "%016llx", (unsigned long long)h);
}

/* ---- engine ---- */

int
eng_open(struct kvc_engine **out, const char *model_path,
    const struct kvc_engine_params *pp, char *err, size_t errlen)
{
	struct kvc_engine_params p = pp ? *pp : kvc_engine_default_params();
	struct kvc_backend_params bp;
	struct kvc_engine *e;
	const struct kvc_hparams *hp;
	int rc;

	*out = NULL;
	if (p.kv_type != GGML_TYPE_F16 && p.kv_type != GGML_TYPE_F32 && p.kv_type != GGML_TYPE_Q8_0) {
		kvc_err(err, errlen, "KV cache type %s not supported (use f16, f32 or q8_0)",
		    gguf_dtype_name(p.kv_type));
		return KVC_EUNSUPPORTED;
	}
	if (p.n_ctx < 0) {
		kvc_err(err, errlen, "context size %d is negative", p.n_ctx);
		return KVC_EINVAL;
	}
	e = calloc(1, sizeof *e);
	if (e == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	rc = kvc_backend_pick(&e->be, p.device, err, errlen);
	if (rc)
		goto fail;
	rc = gguf_open(&e->gf, model_path, err, errlen);
	if (rc)
		goto fail;
	rc = tok_load(&e->tok, e->gf, err, errlen);
	if (rc)
		goto fail;
	rc = model_load(&e->model, e->gf, err, errlen);
	if (rc)
		goto fail;
	hp = &e->model.hp;
	if (tok_n_vocab(e->tok) > hp->n_vocab) {
		kvc_err(err, errlen, "%s: the vocabulary has %d tokens but the model only %d rows",
		    model_path, (int)tok_n_vocab(e->tok), hp->n_vocab);
		rc = KVC_EFORMAT;
		goto fail;
	}
	e->kv_type = p.kv_type;
	e->kv_dim = hp->n_head_kv * hp->head_dim;
	e->kv_row = kvc_kv_row_bytes(p.kv_type, e->kv_dim);
	if (e->kv_row == 0) {
		kvc_err(err, errlen, "%s: KV cache type %s needs K/V rows of whole blocks of 32 "
		    "elements, this model's are %d wide (use f16)", model_path,
		    gguf_dtype_name(p.kv_type), e->kv_dim);
		rc = KVC_EUNSUPPORTED;
		goto fail;
	}
	e->n_ctx = p.n_ctx;
	if (e->n_ctx == 0) {
		e->n_ctx = hp->n_ctx_train > 0 ? hp->n_ctx_train : 8192;
		if (e->n_ctx > 8192)
			e->n_ctx = 8192;
	}
	memset(&bp, 0, sizeof bp);
	bp.n_threads = p.n_threads;
	bp.gpu = p.gpu;
	bp.progress = p.progress;
	bp.progress_arg = p.progress_arg;
	rc = e->be->init(&e->bctx, &e->model, &bp, err, errlen);
	if (rc)
		goto fail;
	make_fingerprint(e);
	*out = e;
	return KVC_OK;

fail:
	/* model_free is safe on a zeroed or failed model */
	model_free(&e->model);
	if (e->tok)
		tok_free(e->tok);
	if (e->gf)
		gguf_close(e->gf);
	free(e);
	return rc;
}

void
eng_close(struct kvc_engine *e)
{
	if (e == NULL)
		return;
	e->be->free(e->bctx);
	free(e->multi_logits);
	model_free(&e->model);
	tok_free(e->tok);
	gguf_close(e->gf);
	free(e);
}

const struct kvc_tokenizer *eng_tokenizer(const struct kvc_engine *e) { return e->tok; }
const struct kvc_model *eng_model(const struct kvc_engine *e) { return &e->model; }
const struct gguf_file *eng_gguf(const struct kvc_engine *e) { return e->gf; }
const char *eng_backend_name(const struct kvc_engine *e) { return e->be->name; }
int eng_n_ctx(const struct kvc_engine *e) { return e->n_ctx; }
int eng_n_vocab(const struct kvc_engine *e) { return e->model.hp.n_vocab; }
enum gguf_dtype eng_kv_type(const struct kvc_engine *e) { return e->kv_type; }
const char *eng_fingerprint(const struct kvc_engine *e) { return e->fingerprint; }

/* The cache types and how --kv-type, the store and /show spell them. */
static const struct {
	enum gguf_dtype t;
	const char *name;
} kv_types[] = {
	{ GGML_TYPE_F16, "f16" }, { GGML_TYPE_F32, "f32" }, { GGML_TYPE_Q8_0, "q8_0" },
};

const char *
eng_kv_type_name(enum gguf_dtype t)
{
	for (size_t i = 0; i < sizeof kv_types / sizeof kv_types[0]; i++)
		if (kv_types[i].t == t)
			return kv_types[i].name;
	return "?";
}

int
eng_kv_type_parse(const char *s, enum gguf_dtype *t)
{
	for (size_t i = 0; i < sizeof kv_types / sizeof kv_types[0]; i++)
		if (strcmp(s, kv_types[i].name) == 0) {
			*t = kv_types[i].t;
			return KVC_OK;
		}
	return KVC_EINVAL;
}

size_t
eng_kv_bytes_per_pos(const struct kvc_engine *e)
{
	return 2 * (size_t)e->model.hp.n_layer * e->kv_row;
}

void
eng_describe(const struct kvc_engine *e, struct kvc_buf *out)
{
	const struct kvc_hparams *hp = &e->model.hp;

	kvc_buf_printf(out, "model: %s, %s, %d layers, width %d, %d heads (%d kv, head %d), ffn %d, vocab %d\n",
	    gguf_path(e->gf), model_arch_name(hp->arch), hp->n_layer, hp->n_embd, hp->n_head,
	    hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_vocab);
	kvc_buf_printf(out, "weights: %.1f M parameters, %.1f MiB\n", (double)e->model.n_params / 1e6,
	    (double)e->model.weight_bytes / (1024.0 * 1024.0));
	kvc_buf_printf(out, "backend: %s; context %d; KV cache %s, %zu bytes per position\n",
	    e->be->name, e->n_ctx, gguf_dtype_name(e->kv_type), eng_kv_bytes_per_pos(e));
	kvc_buf_printf(out, "fingerprint: %s\n", e->fingerprint);
	if (e->be->describe)
		e->be->describe(e->bctx, out);
}

/* ---- sequences ---- */

int
eng_seq_new(struct kvc_engine *e, struct kvc_seq **out, char *err, size_t errlen)
{
	struct kvc_seq *s;
	int rc;

	*out = NULL;
	s = calloc(1, sizeof *s);
	if (s == NULL)
		goto nomem;
	s->e = e;
	s->logits = malloc((size_t)e->model.hp.n_vocab * sizeof *s->logits);
	if (s->logits == NULL) {
		free(s);
		goto nomem;
	}
	rc = e->be->kv_create(e->bctx, e->n_ctx, e->kv_type, &s->kv, err, errlen);
	if (rc) {
		free(s->logits);
		free(s);
		return rc;
	}
	*out = s;
	return KVC_OK;
nomem:
	kvc_err(err, errlen, "out of memory creating a sequence");
	return KVC_ENOMEM;
}

void
eng_seq_free(struct kvc_seq *s)
{
	if (s == NULL)
		return;
	if (s->kv)
		s->e->be->kv_destroy(s->e->bctx, s->kv);
	kvc_tokens_free(&s->toks);
	free(s->logits);
	free(s);
}

int eng_seq_n_pos(const struct kvc_seq *s) { return (int)s->toks.n; }
struct kvc_engine *eng_seq_engine(const struct kvc_seq *s) { return s->e; }
const int32_t *eng_seq_tokens(const struct kvc_seq *s) { return s->toks.v; }
bool eng_seq_resident(const struct kvc_seq *s) { return s->kv != NULL; }

size_t
eng_seq_kv_bytes(const struct kvc_seq *s)
{
	if (s->kv == NULL)
		return 0;
	if (s->e->be->kv_bytes)
		return s->e->be->kv_bytes(s->e->bctx, s->kv);
	return (size_t)s->n_cached * eng_kv_bytes_per_pos(s->e);
}

const float *
eng_seq_logits(const struct kvc_seq *s)
{
	return s->have_logits ? s->logits : NULL;
}

/* Make the cache exist again after an eviction. */
static int
ensure_resident(struct kvc_seq *s, char *err, size_t errlen)
{
	if (s->kv)
		return KVC_OK;
	s->n_cached = 0;
	return s->e->be->kv_create(s->e->bctx, s->e->n_ctx, s->e->kv_type, &s->kv, err, errlen);
}

static int
check_ids(const struct kvc_engine *e, const int32_t *t, int n, char *err, size_t errlen)
{
	for (int i = 0; i < n; i++)
		if (t[i] < 0 || t[i] >= e->model.hp.n_vocab) {
			kvc_err(err, errlen, "token id %d at index %d is outside the vocabulary (0..%d)",
			    (int)t[i], i, e->model.hp.n_vocab - 1);
			return KVC_EINVAL;
		}
	return KVC_OK;
}

/* The next slice's size: ENG_SLICE_S at the rate of the last one, within the bounds. */
static int
next_slice(double tps)
{
	double want;

	if (tps <= 0)
		return ENG_SLICE_FIRST;
	want = tps * ENG_SLICE_S;
	if (want < ENG_SLICE_MIN)
		return ENG_SLICE_MIN;
	return want > ENG_PREFILL_CHUNK ? ENG_PREFILL_CHUNK : (int)want;
}

/*
 * Run s->toks[s->n_cached .. toks.n) through the model, in chunks; on success
 * the cache covers all tokens and the logits of the last one are at hand.
 * On failure n_cached stays where the last successful chunk ended. With a
 * prefill hook, it is asked before each slice (and told the end); when it
 * says stop the result is KVC_EINTR.
 */
static int
compute_pending(struct kvc_seq *s, struct eng_stats *st, char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	int n_total = (int)s->toks.n, first = s->n_cached;
	double t0 = kvc_now();
	int rc;

	if (s->n_cached >= n_total)
		return KVC_OK;
	rc = ensure_resident(s, err, errlen);
	if (rc)
		return rc;
	s->have_logits = false;
	while (s->n_cached < n_total) {
		int n = n_total - s->n_cached, lim = ENG_PREFILL_CHUNK;
		double t1 = kvc_now();
		bool last;

		if (e->hook) {
			if (e->hook(e->hook_arg, s->n_cached - first, n_total - first) != 0) {
				kvc_err(err, errlen, "interrupted");
				rc = KVC_EINTR;
				break;
			}
			lim = next_slice(e->slice_tps);
		}
		if (n > lim)
			n = lim;
		last = s->n_cached + n == n_total;
		rc = e->be->forward(e->bctx, s->kv, s->toks.v + s->n_cached, n, s->n_cached,
		    last ? s->logits : NULL, false, err, errlen);
		if (rc)
			break;
		s->n_cached += n;
		if (e->hook && kvc_now() > t1)
			e->slice_tps = n / (kvc_now() - t1);
		if (st)
			st->n_computed += n;
	}
	if (rc == 0) {
		s->have_logits = true;
		if (e->hook)
			(void)e->hook(e->hook_arg, n_total - first, n_total - first);
	}
	if (st)
		st->t_prefill += kvc_now() - t0;
	return rc;
}

void
eng_set_prefill_hook(struct kvc_engine *e, int (*fn)(void *arg, int done, int total), void *arg)
{
	e->hook = fn;
	e->hook_arg = arg;
}

static void
stats_begin(struct eng_stats *st)
{
	if (st)
		memset(st, 0, sizeof *st);
}

int
eng_seq_append(struct kvc_seq *s, const int32_t *tokens, int n,
    struct eng_stats *st, char *err, size_t errlen)
{
	int rc;

	stats_begin(st);
	if (n < 0 || (n > 0 && tokens == NULL)) {
		kvc_err(err, errlen, "append: bad token count %d", n);
		return KVC_EINVAL;
	}
	if ((size_t)n > (size_t)s->e->n_ctx - s->toks.n) {
		kvc_err(err, errlen, "context full: %zu + %d tokens exceed the context of %d",
		    s->toks.n, n, s->e->n_ctx);
		return KVC_ERANGE;
	}
	rc = check_ids(s->e, tokens, n, err, errlen);
	if (rc)
		return rc;
	if (st)
		st->n_reused = s->kv ? s->n_cached : 0;
	if (n > 0) {
		rc = kvc_tokens_append(&s->toks, tokens, (size_t)n);
		if (rc) {
			kvc_err(err, errlen, "out of memory");
			return rc;
		}
		s->have_logits = false;
	}
	rc = compute_pending(s, st, err, errlen);
	if (rc) {
		/* the new tokens are not part of the sequence after a failure */
		s->toks.n -= (size_t)n;
		if (s->n_cached > (int)s->toks.n)
			s->n_cached = (int)s->toks.n;
		s->have_logits = false;
	}
	return rc;
}

int
eng_seq_append_scored(struct kvc_seq *s, const int32_t *tokens, int n, float *all_logits,
    struct eng_stats *st, char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	double t0;
	int rc;

	stats_begin(st);
	if (n <= 0 || tokens == NULL || all_logits == NULL) {
		kvc_err(err, errlen, "append: bad token count %d", n);
		return KVC_EINVAL;
	}
	/* what is pending first, so that the new tokens start right after the cache */
	if ((rc = compute_pending(s, st, err, errlen)))
		return rc;
	if ((size_t)n > (size_t)e->n_ctx - s->toks.n) {
		kvc_err(err, errlen, "context full: %zu + %d tokens exceed the context of %d",
		    s->toks.n, n, e->n_ctx);
		return KVC_ERANGE;
	}
	if ((rc = check_ids(e, tokens, n, err, errlen)) || (rc = ensure_resident(s, err, errlen)))
		return rc;
	if (st)
		st->n_reused = s->n_cached;
	if (kvc_tokens_append(&s->toks, tokens, (size_t)n) != KVC_OK) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	s->have_logits = false;
	t0 = kvc_now();
	rc = e->be->forward(e->bctx, s->kv, tokens, n, s->n_cached, all_logits, true, err, errlen);
	if (rc) {
		s->toks.n -= (size_t)n;
		return rc;
	}
	s->n_cached += n;
	memcpy(s->logits, all_logits + (size_t)(n - 1) * e->model.hp.n_vocab,
	    (size_t)e->model.hp.n_vocab * sizeof *s->logits);
	s->have_logits = true;
	if (st) {
		st->n_computed += n;
		st->t_prefill += kvc_now() - t0;
	}
	return KVC_OK;
}

int
eng_seq_append_all(struct kvc_seq *s, const int32_t *tokens, int n, float *logits,
    char *err, size_t errlen)
{
	/* a verification pass: a few tokens, so the caller's n x n_vocab stays small */
	if (n < 1 || n > 64) {
		kvc_err(err, errlen, "append_all: bad token count %d", n);
		return KVC_EINVAL;
	}
	return eng_seq_append_scored(s, tokens, n, logits, NULL, err, errlen);
}

bool
eng_same_vocab(const struct kvc_engine *a, const struct kvc_engine *b)
{
	int32_t n = tok_n_vocab(a->tok);

	if (n != tok_n_vocab(b->tok) || a->model.hp.n_vocab != b->model.hp.n_vocab)
		return false;
	for (int32_t i = 0; i < n; i++) {
		size_t la, lb;
		const char *pa = tok_piece(a->tok, i, &la), *pb = tok_piece(b->tok, i, &lb);

		if (la != lb || (la > 0 && memcmp(pa, pb, la) != 0))
			return false;
	}
	return true;
}

int
eng_seq_sync(struct kvc_seq *s, const int32_t *tokens, int n,
    struct eng_stats *st, char *err, size_t errlen)
{
	int lcp = 0, rc;

	stats_begin(st);
	if (n < 0 || (n > 0 && tokens == NULL)) {
		kvc_err(err, errlen, "sync: bad token count %d", n);
		return KVC_EINVAL;
	}
	if (n > s->e->n_ctx) {
		kvc_err(err, errlen, "context full: %d tokens exceed the context of %d", n, s->e->n_ctx);
		return KVC_ERANGE;
	}
	rc = check_ids(s->e, tokens, n, err, errlen);
	if (rc)
		return rc;
	if (s->kv)
		while (lcp < s->n_cached && lcp < n && s->toks.v[lcp] == tokens[lcp])
			lcp++;
	if (lcp == n && n > 0 && !(s->have_logits && (int)s->toks.n == n && s->n_cached == n))
		lcp = n - 1;	/* logits of the last position are needed again */
	if (lcp == n && (int)s->toks.n == n) {
		if (st)
			st->n_reused = n;
		return KVC_OK;
	}
	if (tokens >= s->toks.v && tokens < s->toks.v + s->toks.cap) {
		/* the caller passed (part of) our own token list: copy it out first */
		int32_t *copy = malloc((size_t)n * sizeof *copy);

		if (copy == NULL) {
			kvc_err(err, errlen, "out of memory");
			return KVC_ENOMEM;
		}
		memcpy(copy, tokens, (size_t)n * sizeof *copy);
		rc = eng_seq_sync(s, copy, n, st, err, errlen);
		free(copy);
		return rc;
	}
	s->toks.n = (size_t)lcp;
	if (s->n_cached > lcp)
		s->n_cached = lcp;
	s->have_logits = false;
	rc = kvc_tokens_append(&s->toks, tokens + lcp, (size_t)(n - lcp));
	if (rc) {
		kvc_err(err, errlen, "out of memory");
		return rc;
	}
	if (st)
		st->n_reused = lcp;
	rc = compute_pending(s, st, err, errlen);
	if (rc)
		s->toks.n = (size_t)s->n_cached;
	return rc;
}

int
eng_seq_truncate(struct kvc_seq *s, int n_pos)
{
	if (n_pos < 0 || (size_t)n_pos > s->toks.n)
		return KVC_EINVAL;
	if ((size_t)n_pos == s->toks.n)
		return KVC_OK;
	s->toks.n = (size_t)n_pos;
	if (s->n_cached > n_pos)
		s->n_cached = n_pos;
	s->have_logits = false;
	return KVC_OK;
}

bool
eng_can_slide(const struct kvc_engine *e)
{
	return e->be->kv_shift != NULL;
}

int
eng_seq_slide(struct kvc_seq *s, int keep, int n_drop, char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	int n = (int)s->toks.n, rc;

	if (keep < 0 || n_drop < 1 || keep > n - n_drop) {
		kvc_err(err, errlen, "slide: cannot drop %d positions after %d of %d", n_drop, keep, n);
		return KVC_EINVAL;
	}
	if (e->be->kv_shift == NULL) {
		kvc_err(err, errlen, "slide: the %s backend cannot shift a cache", e->be->name);
		return KVC_EUNSUPPORTED;
	}
	s->have_logits = false;
	if (s->kv != NULL && s->n_cached > keep) {
		int in_cache = s->n_cached - keep < n_drop ? s->n_cached - keep : n_drop;

		rc = e->be->kv_shift(e->bctx, s->kv, keep, in_cache, err, errlen);
		if (rc) {
			eng_seq_evict(s);
			return rc;
		}
		s->n_cached -= in_cache;
		if (in_cache < n_drop)	/* the dropped range ran past the cache */
			s->n_cached = keep;
	}
	memmove(s->toks.v + keep, s->toks.v + keep + n_drop, (size_t)(n - keep - n_drop) * sizeof *s->toks.v);
	s->toks.n -= (size_t)n_drop;
	return KVC_OK;
}

void
eng_seq_evict(struct kvc_seq *s)
{
	if (s->kv)
		s->e->be->kv_destroy(s->e->bctx, s->kv);
	s->kv = NULL;
	s->n_cached = 0;
	s->have_logits = false;
}

/* ---- snapshots (the byte layout is snapshot.c's) ---- */

int
eng_seq_kv_save(struct kvc_seq *s, int pos0, int pos1, struct kvc_buf *out,
    char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	struct eng_snap h;
	unsigned char hdr[ENG_SNAP_HEADER];
	size_t rows, total;
	int n = pos1 - pos0, rc;

	if (s->kv == NULL) {
		kvc_err(err, errlen, "snapshot: the sequence is evicted");
		return KVC_EINVAL;
	}
	if (pos0 < 0 || pos1 < pos0 || pos1 > s->n_cached) {
		kvc_err(err, errlen, "snapshot: range [%d, %d) is not inside the %d cached positions",
		    pos0, pos1, s->n_cached);
		return KVC_EINVAL;
	}
	h = (struct eng_snap){ (uint32_t)e->kv_type, (uint32_t)e->model.hp.n_layer,
	    (uint32_t)e->kv_dim, (uint32_t)pos0, (uint32_t)n,
	    eng_snap_bind(e->fingerprint, s->toks.v, (size_t)pos1) };
	rows = eng_snap_part_bytes(&h, e->kv_row);
	total = eng_snap_bytes(&h, e->kv_row);
	if (kvc_buf_reserve(out, total) != KVC_OK) {
		kvc_err(err, errlen, "snapshot: out of memory (%zu bytes)", total);
		return KVC_ENOMEM;
	}
	eng_snap_put_header(hdr, &h);
	kvc_buf_append(out, hdr, sizeof hdr);
	for (int l = 0; l < e->model.hp.n_layer; l++) {
		for (int part = KVC_KV_K; part <= KVC_KV_V; part++) {
			if (n > 0) {
				rc = e->be->kv_read(e->bctx, s->kv, l, (enum kvc_kv_part)part, pos0, n,
				    out->p + out->n, err, errlen);
				if (rc) {
					out->n -= eng_snap_part_offset(&h, e->kv_row, l, (enum kvc_kv_part)part);
					return rc;
				}
			}
			out->n += rows;
		}
	}
	if (out->n < out->cap)
		out->p[out->n] = '\0';
	return KVC_OK;
}

/*
 * Write the rows of blob (header h, rows of src_row bytes in h's cache type)
 * into s's cache of another type, through float: a snapshot taken with
 * --kv-type f16 restores into a q8_0 cache as if its rows had been computed
 * there and rounded (and q8_0 into f16 exactly up to the fp16 rounding).
 */
static int
load_converted(struct kvc_seq *s, const struct eng_snap *h, const void *blob, size_t src_row,
    char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	float *f = malloc((size_t)e->kv_dim * sizeof *f);
	unsigned char *rows = malloc((size_t)h->n * e->kv_row);
	int rc = KVC_OK;

	if (f == NULL || rows == NULL) {
		free(f);
		free(rows);
		kvc_err(err, errlen, "KV snapshot: out of memory converting %u positions", h->n);
		return KVC_ENOMEM;
	}
	for (uint32_t l = 0; l < h->n_layer && rc == KVC_OK; l++) {
		for (int part = KVC_KV_K; part <= KVC_KV_V && rc == KVC_OK; part++) {
			const unsigned char *src = (const unsigned char *)blob +
			    eng_snap_part_offset(h, src_row, (int)l, (enum kvc_kv_part)part);

			for (uint32_t i = 0; i < h->n && rc == KVC_OK; i++) {
				rc = kvc_kv_row_to_f32((enum gguf_dtype)h->kv_type, src + i * src_row, f, e->kv_dim);
				if (rc == KVC_OK)
					rc = kvc_kv_row_from_f32(e->kv_type, f, rows + i * e->kv_row, e->kv_dim);
			}
			if (rc != KVC_OK)
				kvc_err(err, errlen, "KV snapshot: cannot convert %s rows to %s",
				    gguf_dtype_name((enum gguf_dtype)h->kv_type), gguf_dtype_name(e->kv_type));
			else
				rc = e->be->kv_write(e->bctx, s->kv, (int)l, (enum kvc_kv_part)part,
				    (int)h->pos0, (int)h->n, rows, err, errlen);
		}
	}
	free(f);
	free(rows);
	return rc;
}

int
eng_seq_kv_load(struct kvc_seq *s, const int32_t *tokens, const void *blob,
    size_t len, char *err, size_t errlen)
{
	struct kvc_engine *e = s->e;
	struct eng_snap h;
	size_t total, src_row;
	int rc;

	if ((rc = eng_snap_get_header(blob, len, &h, err, errlen)) != KVC_OK)
		return rc;
	/* a blob of another cache type is converted row by row below */
	src_row = h.kv_type <= GGML_TYPE_Q8_0 ? kvc_kv_row_bytes((enum gguf_dtype)h.kv_type, e->kv_dim) : 0;
	if (src_row == 0 || h.n_layer != (uint32_t)e->model.hp.n_layer ||
	    h.kv_dim != (uint32_t)e->kv_dim) {
		kvc_err(err, errlen, "KV snapshot: made for a %s cache with %u layers x %u, this engine has "
		    "%s with %d layers x %d", gguf_dtype_name((enum gguf_dtype)h.kv_type), h.n_layer,
		    h.kv_dim, gguf_dtype_name(e->kv_type), e->model.hp.n_layer, e->kv_dim);
		return KVC_ECORRUPT;
	}
	if (s->kv == NULL)
		s->n_cached = 0;
	if (h.pos0 != (uint32_t)s->n_cached) {
		kvc_err(err, errlen, "KV snapshot: starts at position %u but %d positions are restored",
		    h.pos0, s->n_cached);
		return KVC_ECORRUPT;
	}
	if (h.n > (uint32_t)e->n_ctx || h.pos0 + h.n > (uint32_t)e->n_ctx) {
		kvc_err(err, errlen, "KV snapshot: positions [%u, %u) exceed the context of %d",
		    h.pos0, h.pos0 + h.n, e->n_ctx);
		return KVC_ECORRUPT;
	}
	total = eng_snap_bytes(&h, src_row);
	if (len != total) {
		kvc_err(err, errlen, "KV snapshot: %zu bytes, %u positions need %zu", len, h.n, total);
		return KVC_ECORRUPT;
	}
	if (h.n > 0 && tokens == NULL) {
		kvc_err(err, errlen, "KV snapshot: no tokens given for %u positions", h.n);
		return KVC_EINVAL;
	}
	rc = check_ids(e, tokens, (int)(h.pos0 + h.n), err, errlen);
	if (rc)
		return rc;
	if (h.bind != eng_snap_bind(e->fingerprint, tokens, (size_t)(h.pos0 + h.n))) {
		kvc_err(err, errlen, "KV snapshot: positions [%u, %u) were computed from other "
		    "tokens or by another model", h.pos0, h.pos0 + h.n);
		return KVC_ENOTFOUND;
	}
	rc = ensure_resident(s, err, errlen);
	if (rc)
		return rc;
	if (h.kv_type == (uint32_t)e->kv_type) {
		for (uint32_t l = 0; l < h.n_layer && h.n > 0 && rc == KVC_OK; l++)
			for (int part = KVC_KV_K; part <= KVC_KV_V && rc == KVC_OK; part++)
				rc = e->be->kv_write(e->bctx, s->kv, (int)l, (enum kvc_kv_part)part,
				    (int)h.pos0, (int)h.n, (const unsigned char *)blob +
				    eng_snap_part_offset(&h, src_row, (int)l, (enum kvc_kv_part)part),
				    err, errlen);
	} else {
		rc = load_converted(s, &h, blob, src_row, err, errlen);
	}
	if (rc)
		return rc;
	s->n_cached = (int)(h.pos0 + h.n);
	s->have_logits = false;
	/* Keep the sequence's later tokens only if they extend what was restored. */
	if (s->toks.n < (size_t)s->n_cached || (s->n_cached > 0 &&
	    memcmp(s->toks.v, tokens, (size_t)s->n_cached * sizeof *tokens) != 0)) {
		s->toks.n = 0;
		if (kvc_tokens_append(&s->toks, tokens, (size_t)s->n_cached) != KVC_OK) {
			s->n_cached = 0;
			kvc_err(err, errlen, "out of memory");
			return KVC_ENOMEM;
		}
	}
	return KVC_OK;
}
