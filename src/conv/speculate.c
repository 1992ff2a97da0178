/*
 * speculate.c: the proposals of speculative decoding (--draft MODEL,
 * --lookup N). generate.c runs the pending id and the proposals through the
 * main model in one forward pass and samples every position from the main
 * model's logits as plain decoding would; a proposal stands only while it
 * equals what was sampled, and the first sample that differs replaces it.
 * The proposals here are deterministic (the draft model's greedy choice,
 * or the continuation of an earlier n-gram), and for a deterministic
 * proposal that is exactly the standard rejection rule: proposal d is kept
 * with probability p(d), and when it is not, the id comes from p with d
 * excluded, renormalised. So the output has the main model's distribution
 * at every temperature, and at temperature 0 it is plain greedy decoding
 * token for token (as far as a batched forward pass gives the logits of a
 * single-token one: the CPU backend's do, tests/e2e/test_speculative.sh).
 */
#include "config.h"

#include <string.h>

#include "conv.h"
#include "sampler/sampler.h"

/* Prompt lookup: the continuation of the latest earlier match of the last ng ids, longest ng first. */
static int
lookup(int max_ng, const int32_t *ctx, int n, int32_t *out, int max)
{
	for (int ng = max_ng; ng >= 1; ng--) {
		const int32_t *pat = ctx + n - ng;

		if (ng >= n)
			continue;
		for (int j = n - ng - 1; j >= 0; j--) {
			int m = 0;

			if (memcmp(ctx + j, pat, (size_t)ng * sizeof *ctx) != 0)
				continue;
			while (m < max && j + ng + m < n)
				out[m] = ctx[j + ng + m], m++;
			if (m > 0)
				return m;
		}
	}
	return 0;
}

/* The draft model's greedy continuation of ctx; its cache keeps what it shares with ctx. */
static int
draft(struct kvc_seq *d, const int32_t *ctx, int n, int32_t *out, int max, char *err,
    size_t errlen)
{
	struct kvc_engine *e = eng_seq_engine(d);
	int room = eng_n_ctx(e) - n, rc, k;

	if (room < 2)
		return 0;
	if (max > room - 1)
		max = room - 1;
	if ((rc = eng_seq_sync(d, ctx, n, NULL, err, errlen)) != KVC_OK)
		return rc;
	for (k = 0; k < max; k++) {
		out[k] = smp_argmax(eng_seq_logits(d), eng_n_vocab(e));
		if (k + 1 < max && (rc = eng_seq_append(d, &out[k], 1, NULL, err, errlen)) != KVC_OK)
			return rc;
	}
	return k;
}

int
conv_spec_propose(struct conv_spec *sp, const int32_t *ctx, int n, int32_t *out, int max,
    char *err, size_t errlen)
{
	if (max < 1 || n < 1)
		return 0;
	if (sp->draft != NULL)
		return draft(sp->draft, ctx, n, out, max, err, errlen);
	if (sp->lookup > 0)
		return lookup(sp->lookup, ctx, n, out, max);
	return 0;
}
