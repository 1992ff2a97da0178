/*
 * sampler.h: pick the next token from logits. Greedy when temp <= 0;
 * otherwise repetition penalty, then top-k, temperature, top-p, min-p, and a
 * draw from a seeded xorshift generator (the same seed gives the same text).
 */
#ifndef KVC_SAMPLER_H
#define KVC_SAMPLER_H

#include "kvc.h"

struct kvc_sampler_params {
	float temp;		/* default 0.8; <= 0 means greedy */
	int top_k;		/* default 40; <= 0 disables */
	float top_p;		/* default 0.95; >= 1 disables */
	float min_p;		/* default 0.05; <= 0 disables */
	float repeat_penalty;	/* default 1.1; 1 disables */
	int repeat_last_n;	/* default 64 */
	uint64_t seed;		/* default: from time at sampler creation when 0 is not requested explicitly */
};
struct kvc_sampler_params kvc_sampler_default_params(void);

struct kvc_sampler;
int smp_new(struct kvc_sampler **out, const struct kvc_sampler_params *p, int n_vocab);
void smp_free(struct kvc_sampler *s);
void smp_set_params(struct kvc_sampler *s, const struct kvc_sampler_params *p);	/* reseeds */
/* history: the tokens of the sequence so far (for the repetition penalty). */
int32_t smp_sample(struct kvc_sampler *s, const float *logits,
    const int32_t *history, size_t n_history);

#endif
