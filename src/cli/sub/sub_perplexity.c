/*
 * sub_perplexity.c: kvchat perplexity, scored as llama.cpp's
 * llama-perplexity scores (tools/perplexity, its default mode): the whole
 * text is tokenized once (with BOS where the model adds one) and cut into
 * chunks of N tokens; each chunk is evaluated from an empty cache with its
 * first token replaced by BOS (where the model adds one); the first half
 * is context only, and each position from N/2 to N-2 is scored by the
 * log-probability its logits give the next token (a double-precision
 * log-softmax over the whole vocabulary). PPL = exp(mean NLL), and the
 * error is llama.cpp's: PPL * sqrt(var(NLL) / (count - 1)).
 *
 * --kl-divergence-base FILE saves every scored position's log-probabilities
 * too; with --kl-divergence it reads them back instead and compares this
 * model's against them (sub_kld.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sub_common.h"
#include "sub_kld.h"
#include "cli/progress.h"
#include "engine/engine.h"

#define SCORE_BATCH 64	/* positions whose logits are held at once */

static const char ppl_usage[] =
    "usage: kvchat perplexity -m FILE -f TEXT [-c N] [--chunks K] [--threads N]\n"
    "                         [--kv-type f16|f32|q8_0] [--device auto|cpu|cuda] [--gpu N]\n"
    "                         [--kl-divergence-base FILE [--kl-divergence]]\n";

static int
usage(const char *why, const char *arg)
{
	return sub_usage("perplexity", ppl_usage, why, arg);
}

struct ppl_opts {
	struct kvc_engine_params ep;
	const char *model, *file;
	const char *kld_base;	/* --kl-divergence-base FILE, or NULL */
	bool kld;		/* --kl-divergence: compare against it instead of writing it */
	long n_ctx, n_chunks;	/* n_chunks -1: all */
};

/*
 * The command line into o by perplexity's option table (with the engine
 * options; -c here is the chunk length, not the engine's --ctx): -1 to go
 * on, else the exit status.
 */
static int
parse_args(int argc, char **argv, struct ppl_opts *o)
{
	const struct sub_opt opts[] = {
		SUB_STR("--model", "-m", &o->model),
		SUB_STR("--file", "-f", &o->file),
		SUB_STR("--kl-divergence-base", NULL, &o->kld_base),
		SUB_FLAG("--kl-divergence", NULL, &o->kld),
		SUB_LONG("--ctx", "-c", &o->n_ctx, 4, 1L << 20, "bad -c (at least 4)"),
		SUB_LONG("--chunks", NULL, &o->n_chunks, 1, 1L << 30, "bad --chunks"),
		SUB_END,
	};
	const struct sub_opts_spec spec = {
		.name = "perplexity", .usage = ppl_usage, .opts = opts, .ep = &o->ep,
	};

	return sub_parse_opts(&spec, argc, argv);
}

/* The whole file, NUL-terminated; NULL with a message said. */
static char *
read_text(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	struct kvc_buf b = { 0 };
	char tmp[65536];
	size_t n;

	if (f == NULL) {
		fprintf(stderr, "kvchat: perplexity: %s: cannot open\n", path);
		return NULL;
	}
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
		if (kvc_buf_append(&b, tmp, n) != KVC_OK) {
			fclose(f);
			kvc_buf_free(&b);
			fprintf(stderr, "kvchat: perplexity: out of memory\n");
			return NULL;
		}
	fclose(f);
	if (kvc_buf_append(&b, "", 1) != KVC_OK) {
		kvc_buf_free(&b);
		return NULL;
	}
	*len = b.n - 1;
	return b.p;
}

struct ppl_sums {
	double nll, nll2;	/* sums of -log p and its square */
	long count;
};

/* One run's state: the sequence, the logits of a batch, the sums, the base file. */
struct ppl_run {
	struct kvc_seq *s;
	float *lg;		/* (SCORE_BATCH, n_vocab) */
	int n_vocab, n_ctx;
	struct ppl_sums sum;
	struct kld_base *kb;	/* --kl-divergence-base: saved to or compared with, or NULL */
	struct kvc_progress bar;
};

/*
 * Chunk tok[0..n_ctx) from an empty sequence: the first half without
 * logits, then the scored half in batches. 0, or 1 with a message said.
 */
static int
score_chunk(struct ppl_run *r, const int32_t *tok)
{
	int n_ctx = r->n_ctx, first = n_ctx / 2, p, k, nb;
	char err[512] = "";

	if (eng_seq_truncate(r->s, 0) != KVC_OK ||
	    eng_seq_append(r->s, tok, first, NULL, err, sizeof err) != KVC_OK)
		goto fail;
	/* positions first .. n_ctx-2 predict tokens first+1 .. n_ctx-1 */
	for (p = first; p < n_ctx - 1; p += nb) {
		nb = n_ctx - 1 - p < SCORE_BATCH ? n_ctx - 1 - p : SCORE_BATCH;
		if (eng_seq_append_scored(r->s, tok + p, nb, r->lg, NULL, err, sizeof err) != KVC_OK)
			goto fail;
		for (k = 0; k < nb; k++) {
			const float *x = r->lg + (size_t)k * r->n_vocab;
			double lp = sub_log_softmax(x, r->n_vocab, tok[p + k + 1]);

			r->sum.nll -= lp;
			r->sum.nll2 += lp * lp;
			r->sum.count++;
			if (r->kb != NULL && kld_position(r->kb, x, tok[p + k + 1]) != 0)
				return 1;
		}
		progress_set(&r->bar, r->bar.done + (uint64_t)nb, 0);
	}
	return 0;
fail:
	fprintf(stderr, "\nkvchat: perplexity: %s\n", err);
	return 1;
}

/* After chunk c of n: llama-perplexity's running estimate with its error so far, or the KLD line. */
static void
chunk_line(const struct ppl_run *r, int c, int n)
{
	double m = r->sum.nll / r->sum.count, v = r->sum.nll2 / r->sum.count - m * m;
	double sd = v > 0 && r->sum.count > 1 ? sqrt(v / (r->sum.count - 1)) : 0;

	if (kld_comparing(r->kb))
		kld_chunk_line(r->kb, c);
	else
		printf("[%d]%.4f +/- %.4f%s", c + 1, exp(m), sd * exp(m), c + 1 < n ? ", " : "\n");
	fflush(stdout);
}

/* The final line(s); 0, or 1 with a message said. */
static int
final_lines(const struct ppl_run *r)
{
	double m = r->sum.nll / r->sum.count, v = r->sum.nll2 / r->sum.count - m * m, ppl = exp(m);

	if (kld_comparing(r->kb)) {
		printf("\n");
		kld_report(r->kb);
		return 0;
	}
	if (!(v > 0)) {
		fprintf(stderr, "kvchat: perplexity: the log-probabilities have no spread\n");
		return 1;
	}
	printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, sqrt(v / (r->sum.count - 1)) * ppl);
	return 0;
}

/* Tokenize; 0, or 1 with a message said (too short a text too). */
static int
tokenize_text(const struct kvc_tokenizer *tk, const char *text, size_t len, const struct ppl_opts *o,
    bool add_bos, struct kvc_tokens *toks)
{
	char err[512] = "";

	if (tok_encode(tk, text, len, add_bos ? TOK_ADD_BOS : 0, toks, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: perplexity: %s: %s\n", o->file, err);
		return 1;
	}
	if (toks->n < 2 * (size_t)o->n_ctx) {
		fprintf(stderr, "kvchat: perplexity: %s has %zu tokens; a context of %ld needs at least %ld\n",
		    o->file, toks->n, o->n_ctx, 2 * o->n_ctx);
		return 1;
	}
	return 0;
}

/* Tokenize, then score the chunks; prints as it goes. */
static int
run(struct kvc_engine *e, const char *text, size_t len, const struct ppl_opts *o)
{
	const struct kvc_tokenizer *tk = eng_tokenizer(e);
	int n_ctx = (int)o->n_ctx, c, n_chunk, status = 1, ok = 0;
	bool add_bos = tok_add_bos_default(tk) && tok_bos(tk) >= 0;
	struct kvc_tokens toks = { 0 };
	struct ppl_run r;
	char err[512] = "";
	int32_t *chunk = NULL;
	double t0;

	memset(&r, 0, sizeof r);
	r.n_vocab = eng_n_vocab(e);
	r.n_ctx = n_ctx;
	if (tokenize_text(tk, text, len, o, add_bos, &toks))
		goto out;
	n_chunk = (int)(toks.n / (size_t)n_ctx);
	if (o->n_chunks > 0 && o->n_chunks < n_chunk)
		n_chunk = (int)o->n_chunks;
	if (o->kld) {
		/* the base's chunks (all of them unless --chunks says fewer) */
		n_chunk = (int)o->n_chunks;
		if (kld_open(&r.kb, o->kld_base, r.n_vocab, n_ctx, &n_chunk, toks.v, toks.n, add_bos))
			goto out;
	} else if (o->kld_base != NULL &&
	    kld_create(&r.kb, o->kld_base, r.n_vocab, n_ctx, n_chunk, toks.v, add_bos)) {
		goto out;
	}
	r.lg = malloc((size_t)SCORE_BATCH * r.n_vocab * sizeof *r.lg);
	chunk = malloc((size_t)n_ctx * sizeof *chunk);
	if (r.lg == NULL || chunk == NULL || eng_seq_new(e, &r.s, err, sizeof err) != KVC_OK) {
		fprintf(stderr, "kvchat: perplexity: %s\n", *err ? err : "out of memory");
		goto out;
	}
	fprintf(stderr, "kvchat: perplexity: %zu tokens, %d chunks of %d, scoring %d positions each%s\n",
	    toks.n, n_chunk, n_ctx, n_ctx - 1 - n_ctx / 2, add_bos ? " (first token of each chunk: BOS)" : "");
	/* the bar only where it cannot cut into the estimates printed on the same terminal */
	if (!isatty(STDOUT_FILENO))
		progress_start_rate(&r.bar, "perplexity", (uint64_t)n_chunk * (n_ctx - 1 - n_ctx / 2));
	t0 = kvc_now();
	for (c = 0; c < n_chunk; c++) {
		memcpy(chunk, toks.v + (size_t)c * n_ctx, (size_t)n_ctx * sizeof *chunk);
		if (add_bos)
			chunk[0] = tok_bos(tk);
		if (score_chunk(&r, chunk))
			goto out;
		/* Said before the first estimate: on a terminal both streams share,
		 * after it the line would land inside the estimates' line. */
		if (c == 0)
			fprintf(stderr, "kvchat: perplexity: %.2f s per chunk\n", kvc_now() - t0);
		chunk_line(&r, c, n_chunk);
	}
	progress_end(&r.bar);
	if (final_lines(&r))
		goto out;
	fprintf(stderr, "kvchat: perplexity: %ld positions scored in %.1f s\n", r.sum.count, kvc_now() - t0);
	ok = 1;
	status = 0;
out:
	progress_end(&r.bar);
	if (kld_close(r.kb, ok))
		status = 1;
	eng_seq_free(r.s);
	free(r.lg);
	free(chunk);
	kvc_tokens_free(&toks);
	return status;
}

int
sub_perplexity(int argc, char **argv)
{
	struct ppl_opts o;
	struct kvc_engine *e = NULL;
	char err[512] = "", *text;
	size_t len = 0;
	int rc;

	memset(&o, 0, sizeof o);
	o.ep = kvc_engine_default_params();
	o.ep.notice = progress_notice;	/* why --device auto runs on the CPU */
	o.ep.kernels = cli_kernels();
	o.n_ctx = 512;
	o.n_chunks = -1;
	if ((rc = parse_args(argc, argv, &o)) >= 0)
		return rc;
	if (o.model == NULL || o.file == NULL)
		return usage(o.model ? "no text (-f)" : "no model (-m)", NULL);
	if (o.kld && o.kld_base == NULL)
		return usage("--kl-divergence needs --kl-divergence-base FILE", NULL);
	if ((text = read_text(o.file, &len)) == NULL)
		return 1;
	o.ep.n_ctx = (int)o.n_ctx;
	if ((rc = sub_eng_open(&e, o.model, &o.ep, err, sizeof err)) != KVC_OK) {
		fprintf(stderr, "kvchat: perplexity: %s\n", err);
		free(text);
		return rc == KVC_EINTR ? 130 : 1;
	}
	rc = run(e, text, len, &o);
	eng_close(e);
	free(text);
	return rc;
}
