/*
 * test_sampler.c: the sampler against independent computations: argmax by
 * hand, softmax in double for the empirical distributions, truncation sets
 * worked out from the probabilities, penalty arithmetic by hand.
 */
#include "gguf/gguf.h"
#include "test.h"
#include "sampler/sampler.h"

#define N_DRAWS 20000

static struct kvc_sampler_params
plain_params(float temp, uint64_t seed)
{
	struct kvc_sampler_params p = kvc_sampler_default_params();

	p.temp = temp;
	p.top_k = 0;
	p.top_p = 1.0f;
	p.min_p = 0.0f;
	p.repeat_penalty = 1.0f;
	p.seed = seed;
	return p;
}

/* Reference: softmax(l / temp) in double. */
static void
softmax_ref(const float *l, int n, double temp, double *p)
{
	double m = -INFINITY, s = 0;
	int i;

	for (i = 0; i < n; i++)
		m = fmax(m, l[i] / temp);
	for (i = 0; i < n; i++)
		s += p[i] = exp(l[i] / temp - m);
	for (i = 0; i < n; i++)
		p[i] /= s;
}

/* Draw N_DRAWS times; every frequency within 4.5 standard errors of want[]. */
static void
check_distribution(const char *what, struct kvc_sampler_params *prm, const float *l,
    int n, const int32_t *hist, size_t n_hist, const double *want)
{
	struct kvc_sampler *s;
	int count[16] = {0}, i, bad = 0;

	test_cond(smp_new(&s, prm, n) == 0, "%s: smp_new", what);
	for (i = 0; i < N_DRAWS; i++) {
		int32_t id = smp_sample(s, l, hist, n_hist);

		if (id >= 0 && id < n)
			count[id]++;
		else
			bad++;
	}
	test_cond(bad == 0, "%s: %d ids out of range", what, bad);
	for (i = 0; i < n; i++) {
		double f = (double)count[i] / N_DRAWS;
		double se = sqrt(want[i] * (1 - want[i]) / N_DRAWS);

		if (want[i] == 0)
			test_cond(count[i] == 0, "%s: id %d excluded but drawn %d times", what, i, count[i]);
		else
			test_cond(fabs(f - want[i]) <= 4.5 * se + 1e-12,
			    "%s: id %d freq %.4f want %.4f (se %.4f)", what, i, f, want[i], se);
	}
	smp_free(s);
}

static uint64_t lcg_state = 12345;
static float
rnd(void)
{
	lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (float)((lcg_state >> 40) * 0x1p-24) * 8.0f - 4.0f;
}

static void
test_greedy(void)
{
	float l[1000];
	struct kvc_sampler *s;
	struct kvc_sampler_params p = kvc_sampler_default_params();
	int trial, i;

	p.temp = 0;
	test_cond(smp_new(&s, &p, 1000) == 0, "smp_new");
	for (trial = 0; trial < 50; trial++) {
		int best = 0;

		for (i = 0; i < 1000; i++)
			l[i] = rnd();
		for (i = 0; i < 1000; i++)
			if (l[i] > l[best])
				best = i;
		/* history full of the argmax: greedy ignores the penalty */
		test_cond(smp_sample(s, l, (int32_t[]){best, best}, 2) == best, "greedy trial %d", trial);
	}
	/* ties go to the lowest id */
	for (i = 0; i < 1000; i++)
		l[i] = 0;
	l[700] = l[300] = l[900] = 1.5f;
	test_cond(smp_sample(s, l, NULL, 0) == 300, "greedy tie -> lowest id");
	/* a NaN logit (a broken backend) is never chosen */
	l[0] = NAN;
	test_cond(smp_sample(s, l, NULL, 0) == 300, "greedy skips NaN");
	smp_free(s);
}

static void
test_seed(void)
{
	float l[64];
	struct kvc_sampler_params p = kvc_sampler_default_params();
	struct kvc_sampler *a, *b, *c;
	int32_t sa[200], sb[200];
	int i, same_c = 0, same_a2 = 1;

	for (i = 0; i < 64; i++)
		l[i] = rnd() * 0.5f;
	p.temp = 1.0f;
	p.seed = 42;
	test_cond(smp_new(&a, &p, 64) == 0 && smp_new(&b, &p, 64) == 0, "smp_new");
	p.seed = 43;
	test_cond(smp_new(&c, &p, 64) == 0, "smp_new");
	for (i = 0; i < 200; i++) {
		sa[i] = smp_sample(a, l, sa, (size_t)i);
		sb[i] = smp_sample(b, l, sb, (size_t)i);
		same_c += smp_sample(c, l, sa, (size_t)i) == sa[i];
	}
	test_cond(memcmp(sa, sb, sizeof sa) == 0, "same seed, same draws");
	test_cond(same_c < 150, "another seed gives other draws (%d/200 equal)", same_c);
	/* smp_set_params reseeds: the sequence starts over */
	p.seed = 42;
	smp_set_params(a, &p);
	for (i = 0; i < 200; i++)
		same_a2 &= smp_sample(a, l, sa, (size_t)i) == sa[i];
	test_cond(same_a2, "reseeding replays the sequence");
	test_cond(smp_seed(a) == 42, "smp_seed");
	smp_free(a);
	smp_free(b);
	smp_free(c);

	/* seed 0 is a seed like any other */
	p.seed = 0;
	test_cond(smp_new(&a, &p, 64) == 0 && smp_new(&b, &p, 64) == 0, "smp_new seed 0");
	same_a2 = 1;
	for (i = 0; i < 100; i++)
		same_a2 &= smp_sample(a, l, NULL, 0) == smp_sample(b, l, NULL, 0);
	test_cond(same_a2 && smp_seed(a) == 0, "seed 0 reproducible");
	smp_free(a);
	smp_free(b);
	/* KVC_SEED_RANDOM resolves to a concrete seed that is reported */
	p.seed = KVC_SEED_RANDOM;
	test_cond(smp_new(&a, &p, 64) == 0, "smp_new random");
	test_cond(smp_seed(a) != KVC_SEED_RANDOM, "random seed resolved");
	smp_free(a);
}

static void
test_top_k1(void)
{
	float l[5000];
	struct kvc_sampler_params p = plain_params(1.5f, 7);
	struct kvc_sampler *s;
	int trial, i, ok = 1;

	p.top_k = 1;
	p.top_p = 0.9f;
	p.min_p = 0.01f;
	test_cond(smp_new(&s, &p, 5000) == 0, "smp_new");
	for (trial = 0; trial < 30; trial++) {
		int best = 0;

		for (i = 0; i < 5000; i++)
			l[i] = rnd();
		for (i = 0; i < 5000; i++)
			if (l[i] > l[best])
				best = i;
		ok &= smp_sample(s, l, NULL, 0) == best;
	}
	test_cond(ok, "top-k 1 equals greedy");
	smp_free(s);
}

static void
test_distributions(void)
{
	const float l5[5] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
	struct kvc_sampler_params p;
	double want[5], sum;
	int i;

	p = plain_params(1.0f, 1);
	softmax_ref(l5, 5, 1.0, want);
	check_distribution("temp 1", &p, l5, 5, NULL, 0, want);

	p = plain_params(0.5f, 2);
	softmax_ref(l5, 5, 0.5, want);
	check_distribution("temp 0.5", &p, l5, 5, NULL, 0, want);

	/* top-k 3 keeps ids 1, 4, 0 (logits 2, 1.5, 1), renormalised */
	p = plain_params(1.0f, 3);
	p.top_k = 3;
	softmax_ref(l5, 5, 1.0, want);
	want[2] = want[3] = 0;
	sum = want[0] + want[1] + want[4];
	for (i = 0; i < 5; i++)
		want[i] /= sum;
	check_distribution("top-k 3", &p, l5, 5, NULL, 0, want);
}

/* Logits whose softmax is exactly the probabilities given (temp 1). */
static void
logits_of(const double *prob, int n, float *l)
{
	int i;

	for (i = 0; i < n; i++)
		l[i] = (float)log(prob[i]);
}

static void
test_truncation(void)
{
	const double pr[5] = {0.05, 0.5, 0.15, 0.2999, 0.0001};	/* sums to 1 */
	double want[5];
	float l[5];
	struct kvc_sampler_params p;
	int i;

	logits_of(pr, 5, l);

	/* top-p 0.75: sorted 0.5 (id 1), 0.2999 (id 3) reach 0.7999 >= 0.75: keep {1, 3} */
	p = plain_params(1.0f, 11);
	p.top_p = 0.75f;
	memset(want, 0, sizeof want);
	want[1] = pr[1] / (pr[1] + pr[3]);
	want[3] = pr[3] / (pr[1] + pr[3]);
	check_distribution("top-p 0.75", &p, l, 5, NULL, 0, want);

	/* top-p 0.5: the first alone reaches it */
	p.top_p = 0.5f;
	memset(want, 0, sizeof want);
	want[1] = 1;
	check_distribution("top-p 0.5", &p, l, 5, NULL, 0, want);

	/* top-p 0.9: 0.5 + 0.2999 + 0.15 = 0.9499: keep {1, 3, 2} */
	p.top_p = 0.9f;
	memset(want, 0, sizeof want);
	for (i = 1; i < 4; i++)
		want[i] = pr[i] / (pr[1] + pr[2] + pr[3]);
	check_distribution("top-p 0.9", &p, l, 5, NULL, 0, want);

	/* min-p 0.2: threshold 0.2 * 0.5 = 0.1 keeps 0.5, 0.2999, 0.15 */
	p = plain_params(1.0f, 12);
	p.min_p = 0.2f;
	check_distribution("min-p 0.2", &p, l, 5, NULL, 0, want);

	/* min-p 0.05: threshold 0.025 also keeps id 0 (0.05), never id 4 (0.0001) */
	p.min_p = 0.05f;
	memset(want, 0, sizeof want);
	for (i = 0; i < 4; i++)
		want[i] = pr[i] / (1 - pr[4]);
	check_distribution("min-p 0.05", &p, l, 5, NULL, 0, want);

	/* both: top-p 0.9 keeps {1,3,2}, min-p 0.5 (p >= 0.25) keeps {1,3}: the intersection */
	p.top_p = 0.9f;
	p.min_p = 0.5f;
	memset(want, 0, sizeof want);
	want[1] = pr[1] / (pr[1] + pr[3]);
	want[3] = pr[3] / (pr[1] + pr[3]);
	check_distribution("top-p + min-p", &p, l, 5, NULL, 0, want);
}

static void
test_penalty(void)
{
	struct kvc_sampler_params p = plain_params(1.0f, 5);
	struct kvc_sampler *s;
	const int32_t h000[3] = {0, 0, 0}, h055[3] = {0, 5, 5};
	float l[6] = {2.0f, 1.5f, 0.4f, -3, -3, -3};
	float neg[6] = {-1.0f, -1.5f, -3, -3, -3, -3};
	float pl[5];
	double want[5];
	int i;

	p.top_k = 1;	/* picks the argmax after the penalty */
	p.repeat_penalty = 2.0f;
	test_cond(smp_new(&s, &p, 6) == 0, "smp_new");
	test_cond(smp_sample(s, l, NULL, 0) == 0, "no history: argmax");
	/* positive logit divided: 2 / 2 = 1 < 1.5 */
	test_cond(smp_sample(s, l, h000, 1) == 1, "positive logit divided");
	/* once per distinct id: 2 / 2 = 1 > 0.9 (2 / 8 would lose) */
	l[1] = 0.9f;
	test_cond(smp_sample(s, l, h000, 3) == 0, "penalised once, not per occurrence");
	/* negative logit multiplied: -1 * 2 = -2 < -1.5 */
	test_cond(smp_sample(s, neg, h000, 1) == 1, "negative logit multiplied");
	p.repeat_penalty = 1.4f;	/* -1.4 > -1.5 */
	smp_set_params(s, &p);
	test_cond(smp_sample(s, neg, h000, 1) == 0, "negative logit multiplied by 1.4");
	/* the window: only the last repeat_last_n tokens count */
	p.repeat_penalty = 4.0f;
	p.repeat_last_n = 2;
	smp_set_params(s, &p);
	l[1] = 1.5f;
	test_cond(smp_sample(s, l, h055, 3) == 0, "id 0 outside the window");
	p.repeat_last_n = 3;
	smp_set_params(s, &p);
	test_cond(smp_sample(s, l, h055, 3) == 1, "id 0 inside the window");
	/* repeated calls leave no state behind */
	p.repeat_last_n = 3;
	test_cond(smp_sample(s, l, NULL, 0) == 0, "no leftover penalty");
	smp_free(s);

	/* the distribution after the penalty, against softmax of hand-penalised logits */
	{
		const float l5[5] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
		const int32_t hist[4] = {3, 1, 3, 2};

		p = plain_params(1.0f, 9);
		p.repeat_penalty = 1.3f;
		p.repeat_last_n = 64;
		for (i = 0; i < 5; i++)
			pl[i] = l5[i];
		pl[1] = 2.0f / 1.3f;
		pl[2] = 0.5f / 1.3f;
		pl[3] = -1.0f * 1.3f;
		softmax_ref(pl, 5, 1.0, want);
		check_distribution("penalty 1.3", &p, l5, 5, hist, 4, want);
	}
}

static const float *sort_keys;
static int
by_logit_desc(const void *a, const void *b)
{
	float x = sort_keys[*(const int *)a], y = sort_keys[*(const int *)b];

	return x > y ? -1 : x < y ? 1 : *(const int *)a - *(const int *)b;
}

/*
 * Larger vocabularies (several top-p rounds, both top-k selection paths):
 * every draw lies in the set computed here by a full sort in double, and the
 * best token's frequency matches its renormalised probability.
 */
static void
test_truncation_large(void)
{
	enum { NV = 3000, DRAWS = 4000 };
	static float l[NV];
	static int order[NV];
	static double p[NV];
	static unsigned char in_set[NV];
	const struct { int top_k; float top_p; } cfg[] = { { 0, 0.9f }, { 300, 1.0f }, { 1500, 1.0f }, { 1500, 0.5f } };
	size_t c;
	int i;

	for (i = 0; i < NV; i++)
		l[i] = rnd() * 0.75f;
	softmax_ref(l, NV, 1.0, p);
	for (i = 0; i < NV; i++)
		order[i] = i;
	sort_keys = l;
	qsort(order, NV, sizeof order[0], by_logit_desc);
	for (c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
		struct kvc_sampler_params prm = plain_params(1.0f, 100 + c);
		struct kvc_sampler *s;
		double mass = 0, cum = 0, f0, want0, se;
		int n_set = 0, outside = 0, hits0 = 0;

		prm.top_k = cfg[c].top_k;
		prm.top_p = cfg[c].top_p;
		memset(in_set, 0, sizeof in_set);
		/* reference: top-k first, then top-p over the renormalised top-k */
		{
			int lim = cfg[c].top_k > 0 ? cfg[c].top_k : NV;
			double tot = 0;

			for (i = 0; i < lim; i++)
				tot += p[order[i]];
			for (i = 0; i < lim; i++) {
				in_set[order[i]] = 1;
				n_set++;
				mass += p[order[i]];
				cum += p[order[i]] / tot;
				if (cfg[c].top_p < 1.0f && cum >= cfg[c].top_p)
					break;
			}
		}
		test_cond(n_set > 64, "config %zu: the set (%d) spans several rounds", c, n_set);
		test_cond(smp_new(&s, &prm, NV) == 0, "smp_new");
		for (i = 0; i < DRAWS; i++) {
			int32_t id = smp_sample(s, l, NULL, 0);

			outside += !in_set[id];
			hits0 += id == order[0];
		}
		smp_free(s);
		want0 = p[order[0]] / mass;
		f0 = (double)hits0 / DRAWS;
		se = sqrt(want0 * (1 - want0) / DRAWS);
		test_cond(outside == 0, "config %zu: %d draws outside the set", c, outside);
		test_cond(fabs(f0 - want0) <= 4.5 * se, "config %zu: best token freq %.4f want %.4f", c, f0, want0);
	}
}

static void
test_large_vocab(void)
{
	/* a vocabulary-sized call with default parameters: ids in range, defaults as documented */
	enum { NV = 151936 };
	static float l[NV];
	struct kvc_sampler_params p = kvc_sampler_default_params();
	struct kvc_sampler *s;
	int i, ok = 1, ok_minp = 1;
	float lmax = -INFINITY;

	test_cond(p.temp == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f &&
	    p.repeat_penalty == 1.1f && p.repeat_last_n == 64 && p.seed == KVC_SEED_RANDOM,
	    "default parameters");
	for (i = 0; i < NV; i++) {
		l[i] = rnd();
		lmax = fmaxf(lmax, l[i]);
	}
	p.top_k = 0;	/* exercise the min-p + sort path over the whole vocabulary */
	p.seed = 3;
	test_cond(smp_new(&s, &p, NV) == 0, "smp_new");
	for (i = 0; i < 50; i++) {
		int32_t id = smp_sample(s, l, NULL, 0);

		/* min-p 0.05 at temp 0.8: nothing below max + 0.8 * ln 0.05 */
		ok &= id >= 0 && id < NV;
		if (id >= 0 && id < NV)
			ok_minp &= l[id] >= lmax + 0.8 * log(0.05) - 1e-4;
	}
	test_cond(ok, "ids in range");
	test_cond(ok_minp, "min-p bound respected");
	smp_free(s);
	test_cond(smp_new(&s, &p, 0) == KVC_EINVAL && s == NULL, "n_vocab 0 refused");
}

/*
 * Top-k taken straight from the logits (issue 11) draws what the sampler
 * drew when it first copied all 152k logits into candidates: the ids below
 * were produced by that implementation (commit 2f897aa) on these logits
 * (an LCG over 400 or 4000 levels: with 400 the whole top 40 ties, so the
 * heap's tie order decides which ids survive), this history (holding the
 * argmax) and seed 7, at the default settings, with a penalty below 1 and
 * NaNs, with top-k 1000 and with top-k 3.
 */
static void
test_topk_pinned(void)
{
	static const int32_t want[4][12] = {
		{ 2600, 1950, 5627, 5357, 11085, 12645, 7118, 9056, 9181, 7284, 5525, 1506 },
		{ 79211, 136083, 135739, 31602, 26954, 54805, 137694, 30839, 50359, 100102, 86004, 28636 },
		{ 131405, 121706, 29796, 15079, 31539, 78680, 118992, 60405, 69841, 88066, 6222, 93564 },
		{ 662, 1426, 461, 1417, 244, 1216, 237, 391, 2253, 1485, 476, 985 },
	};
	enum { V = 151936 };
	float *l = malloc(V * sizeof *l);

	for (int cfg = 0; cfg < 4; cfg++) {
		unsigned st = 1 + (unsigned)cfg;
		struct kvc_sampler *sm;
		struct kvc_sampler_params p = kvc_sampler_default_params();
		int32_t hist[64];
		int bad = 0;

		p.seed = 7;
		if (cfg == 1)
			p.repeat_penalty = 0.8f;
		if (cfg == 2)
			p.top_k = 1000;
		if (cfg == 3)	/* 3 of ~380 tied ids: which 3 shows in almost every draw */
			p.top_k = 3;
		test_cond(smp_new(&sm, &p, V) == 0, "smp_new");
		for (int r = 0; r < 12; r++) {
			int b = 0;
			for (int i = 0; i < V; i++) {
				st = st * 1103515245u + 12345u;
				l[i] = cfg == 0 || cfg == 3 ? (float)((st >> 8) % 400) / 20.0f - 10 :
				    (float)((st >> 8) % 4000) / 200.0f - 10;
			}
			if (cfg == 1)
				for (int i = 0; i < V; i += 1000)
					l[i] = NAN;
			for (int i = 0; i < 64; i++)
				hist[i] = (int32_t)(((st >> 4) % 1000u + (unsigned)i * 2371u) % V);
			for (int i = 1; i < V; i++)
				if (l[i] > l[b])
					b = i;
			hist[0] = hist[63] = b;
			bad += smp_sample(sm, l, hist, 64) != want[cfg][r];
		}
		test_cond(bad == 0, "configuration %d: %d of 12 draws differ from the pinned ones", cfg, bad);
		smp_free(sm);
	}
	free(l);
}

int
main(void)
{
	test_greedy();
	test_seed();
	test_top_k1();
	test_distributions();
	test_truncation();
	test_truncation_large();
	test_penalty();
	test_large_vocab();
	test_topk_pinned();
	return test_done();
}
