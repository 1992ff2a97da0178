/*
 * sub_score.c: kvchat generate's scoring mode (--logprobs K, --json,
 * --force IDS), as llama.cpp's n_probs and the OpenAI API's logprobs give
 * it. Each step reports the top K of a double-precision log-softmax over
 * the whole vocabulary of the final logits; the step's id is sampled as
 * generate samples, or, teacher-forced, taken from --force, so a
 * continuation can be scored against another program's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sub_common.h"
#include "sampler/sampler.h"


/* top[0..k) = the k largest logits' ids, largest first (ties: lower id). */
static void
top_k(const float *x, int n, int k, int32_t *top)
{
	int i, j, have = 0;

	for (i = 0; i < n; i++) {
		if (have == k && x[i] <= x[top[k - 1]])
			continue;
		j = have < k ? have++ : k - 1;
		while (j > 0 && x[top[j - 1]] < x[i]) {
			top[j] = top[j - 1];
			j--;
		}
		top[j] = i;
	}
}

/* One step's report: a JSON line, or a text line kept for after the text. */
static int
report(const struct sub_score_opts *o, int step, int32_t id, const float *lg, int n_vocab,
    int32_t *top, struct kvc_buf *out)
{
	double lse = sub_log_sum_exp(lg, n_vocab);
	int i, k = o->top_k < n_vocab ? o->top_k : n_vocab;
	int rc;

	if (k > 0)
		top_k(lg, n_vocab, k, top);
	if (o->json)
		rc = kvc_buf_printf(out, "{\"step\":%d,\"id\":%d,\"logprob\":%.6f,\"top\":[",
		    step, (int)id, lg[id] - lse);
	else
		rc = kvc_buf_printf(out, "[%d] %d %.6f |", step, (int)id, lg[id] - lse);
	for (i = 0; i < k && rc == 0; i++)
		rc = kvc_buf_printf(out, o->json ? "%s[%d,%.6f]" : "%s %d %.6f",
		    o->json && i > 0 ? "," : "", (int)top[i], lg[top[i]] - lse);
	if (rc == 0)
		rc = kvc_buf_printf(out, o->json ? "]}\n" : "\n");
	return rc;
}

/* b's bytes to stdout (an empty buffer may have no storage at all). */
static void
put(const struct kvc_buf *b)
{
	if (b->n > 0)
		fwrite(b->p, 1, b->n, stdout);
}

int
sub_score_run(struct kvc_engine *e, const struct kvc_tokens *prompt, const struct sub_score_opts *o)
{
	const struct kvc_tokenizer *tk = eng_tokenizer(e);
	int n_vocab = eng_n_vocab(e), step, n_steps = o->n_predict, status = 1;
	struct kvc_sampler *smp = NULL;
	struct kvc_seq *s = NULL;
	struct kvc_buf lines = { 0 }, after = { 0 };
	struct tok_detok dt;
	int32_t *top = malloc((size_t)(o->top_k > 0 ? o->top_k : 1) * sizeof *top);
	char err[512] = "";

	if (o->force != NULL && (n_steps < 0 || (size_t)n_steps > o->force->n))
		n_steps = (int)o->force->n;
	if (n_steps < 0)
		n_steps = 256;
	tok_detok_init(&dt, o->keep_space ? TOK_DETOK_KEEP_LEADING_SPACE : 0);
	if (top == NULL || smp_new(&smp, o->smp, n_vocab) != 0 ||
	    eng_seq_new(e, &s, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: generate: %s\n", *err ? err : "out of memory");
		goto out;
	}
	if (eng_seq_append(s, prompt->v, (int)prompt->n, NULL, err, sizeof err) != 0) {
		fprintf(stderr, "kvchat: generate: prefill: %s\n", err);
		goto out;
	}
	for (step = 0; step < n_steps; step++) {
		const float *lg = eng_seq_logits(s);
		int32_t id;

		if (lg == NULL)
			break;
		if (o->force != NULL)
			id = o->force->v[step];
		else
			id = smp_sample(smp, lg, eng_seq_tokens(s), (size_t)eng_seq_n_pos(s));
		if (id < 0 || id >= n_vocab) {
			fprintf(stderr, "kvchat: generate: --force id %d is outside the vocabulary (0..%d)\n",
			    (int)id, n_vocab - 1);
			goto out;
		}
		lines.n = 0;
		if (report(o, step, id, lg, n_vocab, top, &lines) != 0)
			goto nomem;
		if (o->json) {
			put(&lines);
			fflush(stdout);
		} else if (kvc_buf_append(&after, lines.p, lines.n) != 0) {
			goto nomem;
		}
		if (!o->json) {
			struct kvc_buf piece = { 0 };

			if (tok_detok_push(tk, &dt, id, &piece) != 0)
				goto nomem;
			put(&piece);
			fflush(stdout);
			kvc_buf_free(&piece);
		}
		/* unforced, an end-of-generation id ends it; the last id needs no position */
		if ((o->force == NULL && tok_is_eog(tk, id)) || step + 1 == n_steps)
			break;
		if (eng_seq_append(s, &id, 1, NULL, err, sizeof err) != 0) {
			fprintf(stderr, "kvchat: generate: decode: %s\n", err);
			goto out;
		}
	}
	if (!o->json) {
		struct kvc_buf tail = { 0 };

		if (tok_detok_flush(&dt, &tail) != 0)
			goto nomem;
		put(&tail);
		kvc_buf_free(&tail);
		/* after the text: one line per step, "[step] id logprob | top ids and log-probs" */
		printf("\n");
		put(&after);
	}
	fflush(stdout);
	status = 0;
	goto out;
nomem:
	fprintf(stderr, "kvchat: generate: out of memory\n");
out:
	kvc_buf_free(&lines);
	kvc_buf_free(&after);
	eng_seq_free(s);
	if (smp)
		smp_free(smp);
	free(top);
	return status;
}
