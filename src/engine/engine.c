/*
 * engine.c: a model on a backend, and sequences that own their KV caches
 * (saved and restored as snapshots by seq_kv.c, laid out by snapshot.c).
 */
#include "config.h"

#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine_int.h"

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
 * different weights apart in practice. The samples are read with
 * gguf_pread, not through the mapping: a byte read there maps up to 2 MiB
 * around it, pages the CPU backend's packed matrices would then leave
 * resident beside their copies (a sample that cannot be read is hashed as
 * zeros: the fingerprint only tells files apart).
 */
static void
fnv_sample(uint64_t *h, const struct gguf_file *f, const unsigned char *d, size_t n)
{
	unsigned char b[4096];

	if (gguf_pread(f, d, n, b, NULL, 0) != KVC_OK)
		memset(b, 0, n);
	fnv(h, b, n);
}

static void
fnv_tensor_sample(uint64_t *h, const struct gguf_file *f, const struct gguf_tensor *t)
{
	const unsigned char *d = t->data;
	size_t n = t->nbytes, k = 4096;

	if (d == NULL || n == 0)
		return;
	if (n <= 3 * k) {
		for (size_t o = 0; o < n; o += k)
			fnv_sample(h, f, d + o, n - o < k ? n - o : k);
		return;
	}
	fnv_sample(h, f, d, k);
	fnv_sample(h, f, d + n - k, k);
	for (int i = 1; i <= 16; i++) {
		size_t off = (size_t)((double)(n - 256) * i / 17.0);
		fnv_sample(h, f, d + off, 256);
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
		fnv_tensor_sample(&h, e->gf, t);
	}
	snprintf(e->fingerprint, sizeof e->fingerprint, "%016llx", (unsigned long long)h);
}

/*
 * The vocabulary alone: a conversation's stored ids mean the same text
 * under any model whose vocabulary hashes the same (another quantisation
 * of it, say), and nothing under another.
 */
static void
make_vocab_fingerprint(struct kvc_engine *e)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	int32_t n = tok_n_vocab(e->tok);

	fnv_str(&h, "kvchat-vocab-1");
	fnv_str(&h, tok_model_name(e->tok));
	fnv_str(&h, tok_pre_name(e->tok));
	fnv_i64(&h, n);
	for (int32_t i = 0; i < n; i++) {
		size_t len;
		const char *p = tok_piece(e->tok, i, &len);

		fnv_i64(&h, (int64_t)len);
		fnv(&h, p, len);
		fnv_i64(&h, (int64_t)tok_type(e->tok, i));
	}
	snprintf(e->vocab_fp, sizeof e->vocab_fp, "%016llx", (unsigned long long)h);
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
	char why[512] = "";
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
	bp.kernels = p.kernels;
	bp.progress = p.progress;
	bp.progress_arg = p.progress_arg;
	bp.interrupt = p.interrupt;
	bp.kv_type = p.kv_type;
	bp.pack_ahead = p.pack_ahead;
	bp.pack_experts_now = p.pack_experts_now;
	rc = e->be->init(&e->bctx, &e->model, &bp, why, sizeof why);
	if (rc && e->be != &kvc_backend_cpu && kvc_backend_is_auto(p.device)) {
		/* "auto" never refuses what the CPU can run: say why, then run there */
		if (p.notice != NULL) {
			char msg[sizeof why + 32];

			snprintf(msg, sizeof msg, "%s; running on the CPU", why);
			p.notice(p.notice_arg, msg);
		}
		e->be = &kvc_backend_cpu;
		rc = e->be->init(&e->bctx, &e->model, &bp, why, sizeof why);
	}
	if (rc) {
		kvc_err(err, errlen, "%s", why);
		goto fail;
	}
	/* a backend that loads without checking the flag (CUDA's upload) stops here */
	if (p.interrupt != NULL && *p.interrupt) {
		e->be->free(e->bctx);
		kvc_err(err, errlen, "interrupted while loading the weights");
		rc = KVC_EINTR;
		goto fail;
	}
	make_fingerprint(e);
	make_vocab_fingerprint(e);
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
	free(e->multi_kvs);
	free(e->multi_pos);
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
const char *eng_vocab_fingerprint(const struct kvc_engine *e) { return e->vocab_fp; }

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

size_t
eng_kv_mem_bytes_per_pos(const struct kvc_engine *e)
{
	const struct kvc_hparams *hp = &e->model.hp;
	int n_full = 0;

	if (kvc_kv_window_cap(hp, e->n_ctx) >= e->n_ctx)
		return eng_kv_bytes_per_pos(e);
	for (int il = 0; il < hp->n_layer; il++)
		n_full += !model_layer_swa(hp, il);
	return 2 * (size_t)n_full * e->kv_row;
}

size_t
eng_kv_window_bytes(const struct kvc_engine *e)
{
	int cap = kvc_kv_window_cap(&e->model.hp, e->n_ctx);

	if (cap >= e->n_ctx)
		return 0;
	return (size_t)cap * (eng_kv_bytes_per_pos(e) - eng_kv_mem_bytes_per_pos(e));
}

size_t
eng_kv_bytes_for(const struct kvc_engine *e, size_t n)
{
	size_t cap = (size_t)kvc_kv_window_cap(&e->model.hp, e->n_ctx);
	size_t all = eng_kv_bytes_per_pos(e), mem = eng_kv_mem_bytes_per_pos(e);

	if (eng_kv_window_bytes(e) == 0)
		return n * all;
	return n * mem + (n < cap ? n : cap) * (all - mem);
}

void
eng_describe(const struct kvc_engine *e, struct kvc_buf *out)
{
	const struct kvc_hparams *hp = &e->model.hp;
	char ffn[128];

	model_ffn_desc(hp, ffn, sizeof ffn);
	kvc_buf_printf(out, "model: %s, %s, %d layers, width %d, %d heads (%d kv, head %d), %s, vocab %d\n",
	    gguf_path(e->gf), model_arch_name(hp->arch), hp->n_layer, hp->n_embd, hp->n_head,
	    hp->n_head_kv, hp->head_dim, ffn, hp->n_vocab);
	kvc_buf_printf(out, "weights: %.1f M parameters, %.1f MiB\n", (double)e->model.n_params / 1e6,
	    (double)e->model.weight_bytes / (1024.0 * 1024.0));
	kvc_buf_printf(out, "backend: %s; context %d; KV cache %s, %zu bytes per position\n",
	    e->be->name, e->n_ctx, gguf_dtype_name(e->kv_type), eng_kv_bytes_per_pos(e));
	if (eng_kv_window_bytes(e) > 0)
		kvc_buf_printf(out, "KV memory: %zu bytes per position, plus at most %zu for the "
		    "windowed layers\n", eng_kv_mem_bytes_per_pos(e), eng_kv_window_bytes(e));
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
	if (s->e->dev_logits == s)
		s->e->dev_logits = NULL;
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
	if (s->have_logits && s->logits_dev)
		eng_logits_settle(s->e);	/* copied out now that a caller reads them */
	return s->have_logits ? s->logits : NULL;
}

/* Make the cache exist again after an eviction. */
int
eng_ensure_resident(struct kvc_seq *s, char *err, size_t errlen)
{
	if (s->kv)
		return KVC_OK;
	s->n_cached = 0;
	return s->e->be->kv_create(s->e->bctx, s->e->n_ctx, s->e->kv_type, &s->kv, err, errlen);
}

int
eng_check_ids(const struct kvc_engine *e, const int32_t *t, int n, char *err, size_t errlen)
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
 * The windowed layers of a bounded cache keep only their last positions
 * (backend.h, kv_lowest): when a rewind (/undo, /retry, a truncation, a
 * slide) left the next position without the n_swa - 1 before it, the
 * sequence is recomputed from position 0, never attended to other rows.
 */
bool
eng_seq_keeps(const struct kvc_seq *s, int n_pos)
{
	const struct kvc_engine *e = s->e;
	int need = n_pos - e->model.hp.n_swa + 1;

	if (n_pos == 0)
		return true;
	if (s->kv == NULL || n_pos > s->n_cached)
		return false;
	return e->be->kv_lowest == NULL || e->be->kv_lowest(e->bctx, s->kv) <= (need > 0 ? need : 0);
}

static void
window_check(struct kvc_seq *s, struct eng_stats *st)
{
	if (eng_seq_keeps(s, s->n_cached))
		return;
	s->n_cached = 0;
	s->have_logits = false;
	if (st)
		st->n_reused = 0;
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

	window_check(s, st);
	first = s->n_cached;
	if (s->n_cached >= n_total)
		return KVC_OK;
	rc = eng_ensure_resident(s, err, errlen);
	if (rc)
		return rc;
	s->have_logits = false;
	eng_logits_settle(e);
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
		if (last && e->be->forward_keep != NULL)	/* the logits stay in the backend */
			rc = e->be->forward_keep(e->bctx, s->kv, s->toks.v + s->n_cached, n, s->n_cached,
			    err, errlen);
		else
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
		if (e->be->forward_keep != NULL)
			eng_logits_kept(s);
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
	rc = eng_check_ids(s->e, tokens, n, err, errlen);
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
	if ((rc = eng_check_ids(e, tokens, n, err, errlen)) || (rc = eng_ensure_resident(s, err, errlen)))
		return rc;
	if (st)
		st->n_reused = s->n_cached;
	if (kvc_tokens_append(&s->toks, tokens, (size_t)n) != KVC_OK) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	s->have_logits = false;
	eng_logits_settle(e);
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
	rc = eng_check_ids(s->e, tokens, n, err, errlen);
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
