/*
 * generate.c: the one generation loop, for chat replies and for raw
 * completions (kvchat generate): sample, run the id through the model,
 * detokenize, stream, and stop at the end of generation, a stop string,
 * the cap, a full context or an interrupt.
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

/* Sample the next id from the sequence's logits (or first_logits). */
static int
sample(struct kvc_engine *e, struct kvc_seq *s, struct kvc_sampler *smp,
    const struct conv_gen_params *p, struct conv_gen *g, int32_t *id, char *err, size_t errlen)
{
	const float *logits = eng_seq_logits(s);

	if (logits == NULL && g->ids.n == 0)
		logits = p->first_logits;
	if (logits == NULL) {
		kvc_err(err, errlen, "no logits at position %d", eng_seq_n_pos(s));
		return KVC_EINVAL;
	}
	if (g->ids.n == 0 && p->keep_first_logits != NULL && logits != p->keep_first_logits) {
		memcpy(p->keep_first_logits, logits, (size_t)eng_n_vocab(e) *
		    sizeof *p->keep_first_logits);
		g->first_logits_pos = eng_seq_n_pos(s);
	}
	*id = smp_sample(smp, logits, eng_seq_tokens(s), (size_t)eng_seq_n_pos(s));
	return KVC_OK;
}

/*
 * Room for the next id (g->ctx_full when there is none): a reply's ids are
 * in the cache already, so the context must have a free position for the
 * next one; a completion's last id goes in only now, as its successor needs
 * its logits.
 */
static int
make_room(struct kvc_seq *s, int n_ctx, const struct conv_gen_params *p, struct conv_gen *g,
    char *err, size_t errlen)
{
	bool lazy = p->mode == CONV_GEN_COMPLETION;
	int rc;

	if (lazy && g->ids.n == 0)
		return KVC_OK;
	if (eng_seq_n_pos(s) >= n_ctx) {
		g->ctx_full = true;
		return KVC_OK;
	}
	if (!lazy)
		return KVC_OK;
	rc = eng_seq_append(s, &g->ids.v[g->ids.n - 1], 1, NULL, err, errlen);
	if (rc == 0)
		g->n_decoded++;
	return rc;
}

int
conv_generate(struct kvc_engine *e, struct kvc_seq *s, struct kvc_sampler *smp,
    const struct conv_gen_params *p, struct conv_gen *g, char *err, size_t errlen)
{
	struct run r;
	int n_ctx = eng_n_ctx(e), rc = 0;

	memset(&r, 0, sizeof r);
	r.p = p;
	r.tok = eng_tokenizer(e);
	memset(g, 0, sizeof *g);
	g->first_logits_pos = -1;
	tok_detok_init(&r.dt, p->detok_flags);
	for (;;) {
		int32_t id;
		bool eog;

		if (p->interrupt && *p->interrupt) {
			g->interrupted = true;
			break;
		}
		if (p->max_tokens >= 0 && (int)g->ids.n >= p->max_tokens)
			break;
		if ((rc = make_room(s, n_ctx, p, g, err, errlen)) != 0 || g->ctx_full ||
		    (rc = sample(e, s, smp, p, g, &id, err, errlen)) != 0)
			break;
		eog = tok_is_eog(r.tok, id);
		if (p->mode == CONV_GEN_REPLY) {
			/* The id goes into the cache before it counts as said. */
			if ((rc = eng_seq_append(s, &id, 1, NULL, err, errlen)) != 0)
				break;
			g->n_decoded++;
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
	r.piece.n = 0;
	/* After a stop string the text ends where it began. */
	if (tok_detok_flush(&r.dt, &r.piece) == 0 && !r.stopped)
		add_piece(&r, g);
	/* The run is over: what was held back is not a stop string. */
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
