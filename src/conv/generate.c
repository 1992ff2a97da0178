/*
 * generate.c: the one generation loop, for chat replies and for raw
 * completions (kvchat generate): sample, run the id through the model,
 * detokenize, stream, and stop at the end of generation, a stop string,
 * the cap, a full context or an interrupt. With speculative decoding
 * (p->spec), each id goes into the model together with the proposals that
 * follow it, in one forward pass; the ids after it are then sampled from
 * that pass's logits, and a proposal equal to the sampled id is already in
 * the cache (speculate.c says why the output is unchanged).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "conv.h"

/* Longest proper prefix of a stop string that ends text[0..n). */
static size_t
holdback(const char *const *ss, const char *text, size_t n)
{
	size_t best = 0;

	for (; ss && *ss; ss++) {
		size_t len = strlen(*ss);

		for (size_t k = len - 1; k > best; k--)
			if (k <= n && memcmp(text + n - k, *ss, k) == 0) {
				best = k;
				break;
			}
	}
	return best;
}

size_t
conv_stop_holdback(enum chat_family f, const char *text, size_t n)
{
	return holdback(chat_stop_strings(f), text, n);
}

static bool
has_stop_string(const char *const *ss, const struct kvc_buf *text, size_t *cut)
{
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
 * A NUL byte is valid UTF-8 but useless on a terminal and would cut a
 * stored (C string) reply short, so what is shown and what is saved could
 * differ; a reply gets U+FFFD instead.
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

/* What the loop carries besides the result. */
struct run {
	const struct conv_gen_params *p;
	const struct kvc_tokenizer *tok;
	struct tok_detok dt;
	struct kvc_buf piece;
	size_t shown;			/* text passed to on_text */
	bool stopped;			/* by a stop string */
	int pos;			/* positions that count; the sequence may hold proposals past it */
	/* speculative: the logits after positions [base, base + n_rows) */
	float *rows;			/* (1 + CONV_SPEC_MAX, n_vocab) */
	int base, n_rows;
	struct kvc_tokens ctx;		/* the ids a proposal follows */
};

/* Pass text[shown..upto) to the caller; non-zero if it asks to stop. */
static int
show(struct run *r, struct conv_gen *g, size_t upto)
{
	int rc = 0;

	if (upto > r->shown && r->p->on_text)
		rc = r->p->on_text(r->p->arg, g->text.p + r->shown, upto - r->shown);
	if (upto > r->shown)
		r->shown = upto;
	return rc;
}

/* Add the piece to the text (a reply's NULs replaced). */
static void
add_piece(struct run *r, struct conv_gen *g)
{
	if (r->piece.n == 0)
		return;
	if (r->p->mode == CONV_GEN_REPLY && replace_nul(&r->piece) != 0)
		return;
	(void)kvc_buf_append(&g->text, r->piece.p, r->piece.n);
}

/*
 * The text of one more id: cut at a stop string (which ends the run),
 * else shown up to what could still be the start of one. Non-zero when
 * the run ends.
 */
static int
text_step(struct run *r, struct conv_gen *g, int32_t id)
{
	size_t cut;

	r->piece.n = 0;
	if (tok_detok_push(r->tok, &r->dt, id, &r->piece) == 0)
		add_piece(r, g);
	if (has_stop_string(r->p->stop, &g->text, &cut)) {
		g->text.n = cut;
		g->text.p[cut] = '\0';
		(void)show(r, g, cut);
		r->stopped = true;
		return 1;
	}
	if (show(r, g, g->text.n - holdback(r->p->stop, g->text.p, g->text.n)) != 0)
		g->interrupted = true;
	return g->interrupted;
}

/*
 * smp's choice made by the backend where the logits are (eng_seq_sample:
 * only the id comes back), its generator advanced as smp_sample would;
 * KVC_EUNSUPPORTED when the backend does not take it.
 */
static int
sample_in_backend(struct kvc_seq *s, struct kvc_sampler *smp, int32_t *id)
{
	struct kvc_sampler_params sp = smp_params(smp);
	struct eng_sample_req q = { sp.temp, sp.top_k, sp.top_p, sp.min_p, sp.repeat_penalty, sp.repeat_last_n,
		smp_rng_state(smp) };
	uint64_t rng;
	char err[256];
	int rc = eng_seq_sample(s, &q, id, &rng, err, sizeof err);

	if (rc == KVC_OK)
		smp_set_rng_state(smp, rng);
	return rc;
}

/* Sample the next id from the sequence's logits (or first_logits). */
static int
sample(struct run *r, struct kvc_engine *e, struct kvc_seq *s, struct kvc_sampler *smp,
    struct conv_gen *g, int32_t *id, char *err, size_t errlen)
{
	const struct conv_gen_params *p = r->p;
	bool rows = r->n_rows > 0 && r->pos - 1 >= r->base && r->pos - 1 < r->base + r->n_rows;
	const float *logits;

	/* nothing else reads these logits on the host: let the backend pick (sample_in_backend) */
	if (eng_seq_n_pos(s) == r->pos && !rows && p->forced == NULL &&
	    !(g->ids.n == 0 && p->keep_first_logits != NULL) && sample_in_backend(s, smp, id) == KVC_OK)
		return KVC_OK;
	logits = eng_seq_n_pos(s) == r->pos ? eng_seq_logits(s) : NULL;
	if (rows)
		logits = r->rows + (size_t)(r->pos - 1 - r->base) * eng_n_vocab(e);
	if (logits == NULL && g->ids.n == 0)
		logits = p->first_logits;
	if (logits == NULL) {
		kvc_err(err, errlen, "no logits at position %d", r->pos);
		return KVC_EINVAL;
	}
	if (g->ids.n == 0 && p->keep_first_logits != NULL && logits != p->keep_first_logits) {
		memcpy(p->keep_first_logits, logits, (size_t)eng_n_vocab(e) *
		    sizeof *p->keep_first_logits);
		g->first_logits_pos = r->pos;
	}
	*id = p->forced != NULL ? p->forced[g->ids.n] :
	    smp_sample(smp, logits, eng_seq_tokens(s), (size_t)r->pos);
	return KVC_OK;
}

/*
 * Put id at position r->pos of the sequence: one forward pass, or with
 * speculation a proposal already there (nothing to compute), else the id
 * and the next proposals in one pass (the rejected ones are taken back).
 */
static int
put(struct run *r, struct kvc_engine *e, struct kvc_seq *s, int32_t id, struct conv_gen *g,
    char *err, size_t errlen)
{
	struct conv_spec *sp = r->p->spec;
	int32_t batch[1 + CONV_SPEC_MAX];
	int n = 0, k, rc;

	if (sp != NULL && r->pos < eng_seq_n_pos(s) && eng_seq_tokens(s)[r->pos] == id) {
		g->accepted++;
		r->pos++;
		return KVC_OK;
	}
	if (sp == NULL) {
		rc = eng_seq_append(s, &id, 1, NULL, err, errlen);
	} else {
		(void)eng_seq_truncate(s, r->pos);
		k = eng_n_ctx(e) - r->pos - 1 < sp->k ? eng_n_ctx(e) - r->pos - 1 : sp->k;
		r->ctx.n = 0;
		if (kvc_tokens_append(&r->ctx, eng_seq_tokens(s), (size_t)r->pos) ||
		    kvc_tokens_push(&r->ctx, id))
			return KVC_ENOMEM;
		n = conv_spec_propose(sp, r->ctx.v, (int)r->ctx.n, batch + 1, k, err, errlen);
		if (n < 0)
			return n;
		batch[0] = id;
		rc = eng_seq_append_all(s, batch, 1 + n, r->rows, err, errlen);
		r->base = r->pos;
		r->n_rows = rc == 0 ? 1 + n : 0;
		g->proposed += rc == 0 ? n : 0;
	}
	if (rc == 0) {
		r->pos++;
		g->n_decoded++;
		g->n_passes++;
	}
	return rc;
}

/*
 * Room for the next id (g->ctx_full when there is none): a reply's ids are
 * in the cache already, so the context must have a free position for the
 * next one; a completion's last id goes in only now, as its successor needs
 * its logits.
 */
static int
make_room(struct run *r, struct kvc_engine *e, struct kvc_seq *s, struct conv_gen *g,
    char *err, size_t errlen)
{
	bool lazy = r->p->mode == CONV_GEN_COMPLETION;

	if (lazy && g->ids.n == 0)
		return KVC_OK;
	if (r->pos >= eng_n_ctx(e)) {
		g->ctx_full = true;
		return KVC_OK;
	}
	if (!lazy)
		return KVC_OK;
	return put(r, e, s, g->ids.v[g->ids.n - 1], g, err, errlen);
}

/*
 * An interrupt that came during the forward pass just run: the run stops
 * before the id it computed is shown. Ctrl-C lands in a pass nearly always
 * (the pass is most of a step), and the terminal has echoed "^C" by then:
 * nothing may be printed after that mark.
 */
static bool
interrupted_in_pass(struct run *r, struct conv_gen *g)
{
	if (r->p->interrupt == NULL || !*r->p->interrupt)
		return false;
	g->interrupted = true;
	return true;
}

int
conv_generate(struct kvc_engine *e, struct kvc_seq *s, struct kvc_sampler *smp,
    const struct conv_gen_params *p, struct conv_gen *g, char *err, size_t errlen)
{
	struct run r;
	int rc = 0;

	memset(&r, 0, sizeof r);
	r.p = p;
	r.tok = eng_tokenizer(e);
	r.pos = eng_seq_n_pos(s);
	memset(g, 0, sizeof *g);
	if (p->spec != NULL && (p->spec->k < 1 || p->spec->k > CONV_SPEC_MAX ||
	    (r.rows = malloc((size_t)(1 + CONV_SPEC_MAX) * eng_n_vocab(e) * sizeof *r.rows)) == NULL)) {
		kvc_err(err, errlen, "speculative decoding: %s", p->spec->k < 1 ||
		    p->spec->k > CONV_SPEC_MAX ? "bad proposal count" : "out of memory");
		return p->spec->k < 1 || p->spec->k > CONV_SPEC_MAX ? KVC_EINVAL : KVC_ENOMEM;
	}
	g->first_logits_pos = -1;
	tok_detok_init(&r.dt, p->detok_flags);
	for (;;) {
		int32_t id;
		bool eog;

		if (p->interrupt && *p->interrupt) {
			g->interrupted = true;
			break;
		}
		if ((p->max_tokens >= 0 && (int)g->ids.n >= p->max_tokens) ||
		    (p->forced != NULL && (int)g->ids.n >= p->n_forced))
			break;
		if ((rc = make_room(&r, e, s, g, err, errlen)) != 0 || g->ctx_full)
			break;
		if (interrupted_in_pass(&r, g))
			break;
		if ((rc = sample(&r, e, s, smp, g, &id, err, errlen)) != 0)
			break;
		eog = tok_is_eog(r.tok, id);
		if (p->mode == CONV_GEN_REPLY) {
			/* The id goes into the cache before it counts as said. */
			if ((rc = put(&r, e, s, id, g, err, errlen)) != 0)
				break;
			if (interrupted_in_pass(&r, g)) {
				/* computed but never said: the cache is cut back below */
				r.pos--;
				break;
			}
		}
		if (g->t_first == 0)
			g->t_first = kvc_now();
		if (eog && p->mode == CONV_GEN_COMPLETION)
			break;	/* a completion ends before its end-of-generation id */
		if (kvc_tokens_push(&g->ids, id)) {
			rc = KVC_ENOMEM;
			break;
		}
		if (p->on_id && p->on_id(p->arg, id) != 0)
			g->interrupted = true;
		if (text_step(&r, g, id) != 0 || eog)
			break;
	}
	/* proposals past the last id that counts were never said */
	if (eng_seq_n_pos(s) > r.pos)
		(void)eng_seq_truncate(s, r.pos);
	free(r.rows);
	kvc_tokens_free(&r.ctx);
	r.piece.n = 0;
	/* After a stop string the text ends where it began. */
	if (tok_detok_flush(&r.dt, &r.piece) == 0 && !r.stopped)
		add_piece(&r, g);
	/*
	 * The run is over: what was held back is not a stop string. Not after
	 * an interrupt: the terminal has echoed ^C, and nothing may follow it
	 * (the text is kept in g->text all the same).
	 */
	if (!g->interrupted)
		(void)show(&r, g, g->text.n);
	kvc_buf_free(&r.piece);
	if (g->text.p == NULL && kvc_buf_append(&g->text, "", 0))
		return KVC_ENOMEM;
	return rc;
}

void
conv_gen_free(struct conv_gen *g)
{
	kvc_tokens_free(&g->ids);
	kvc_buf_free(&g->text);
}
