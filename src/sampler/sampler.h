/*
 * sampler.h: pick the next token from logits. Greedy when temp <= 0;
 * otherwise repetition penalty, then top-k, temperature, top-p, min-p, and a
 * draw from a seeded xorshift generator (the same seed gives the same text).
 *
 * Greedy is a plain argmax (ties go to the lowest id) that ignores every
 * other parameter, the repetition penalty included, so a greedy run is
 * comparable with reference implementations (llama2.c).
 * Repetition penalty (llama.cpp's convention): each distinct id among the
 * last repeat_last_n history tokens has its logit divided by the penalty
 * when positive, multiplied when negative (once, however often it occurs).
 * top-p keeps the smallest prefix of the candidates sorted by probability
 * whose mass reaches top_p; min-p keeps those with p >= min_p * p_max.
 */
#ifndef KVC_SAMPLER_H
#define KVC_SAMPLER_H

#include "core/kvc.h"

struct kvc_sampler_params {
	float temp;		/* default 0.8; <= 0 means greedy */
	int top_k;		/* default 40; <= 0 disables */
	float top_p;		/* default 0.95; >= 1 disables */
	float min_p;		/* default 0.05; <= 0 disables */
	float repeat_penalty;	/* default 1.1; 1 disables */
	int repeat_last_n;	/* default 64 */
	uint64_t seed;		/* default KVC_SEED_RANDOM: smp_new/smp_set_params pick one
				   from the clock; any other value (0 included) is used as is */
};
/* Seed value that asks for a seed taken from the clock (see smp_seed). */
#define KVC_SEED_RANDOM UINT64_MAX
struct kvc_sampler_params kvc_sampler_default_params(void);

struct kvc_sampler;
/* 0, KVC_ENOMEM, or KVC_EINVAL (n_vocab <= 0). Allocates all it needs here: sampling never allocates. */
int smp_new(struct kvc_sampler **out, const struct kvc_sampler_params *p, int n_vocab);
void smp_free(struct kvc_sampler *s);
void smp_set_params(struct kvc_sampler *s, const struct kvc_sampler_params *p);	/* reseeds */
/* history: the tokens of the sequence so far (for the repetition penalty). */
/* Index of the largest of logits[0..n) (ties: the lowest id): greedy. */
int32_t smp_argmax(const float *logits, int n);
int32_t smp_sample(struct kvc_sampler *s, const float *logits,
    const int32_t *history, size_t n_history);
/* The seed in use (the one picked from the clock for KVC_SEED_RANDOM), to report or store. */
uint64_t smp_seed(const struct kvc_sampler *s);
/* The parameters in use (seed resolved). */
struct kvc_sampler_params smp_params(const struct kvc_sampler *s);
/*
 * The generator's xorshift64* state between draws, for a backend that
 * samples where the logits are (the CUDA backend's cuda/sample_core.cuh
 * draws as smp_sample does) and hands the advanced state back: a run then
 * continues exactly as if smp_sample had drawn. A state of 0 is ignored.
 */
uint64_t smp_rng_state(const struct kvc_sampler *s);
void smp_set_rng_state(struct kvc_sampler *s, uint64_t state);

#endif
