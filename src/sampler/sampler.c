/*
 * sampler.c: next-token choice. Every buffer is allocated in smp_new, so a
 * call to smp_sample does O(n_vocab) work and no allocation; the sort is
 * limited to the candidates that survive top-k or min-p when either is on.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sampler.h"

struct smp_cand {
	int32_t id;	/* token id */
	float logit;	/* penalised, then divided by temp */
	double p;	/* exp(logit - max), unnormalised */
};

struct kvc_sampler {
	struct kvc_sampler_params p;	/* seed resolved (never KVC_SEED_RANDOM) */
	int n_vocab;
	struct smp_cand *cand;		/* (n_vocab) working candidates */
	uint8_t *seen;			/* (n_vocab) 0/1: id already penalised in this call */
	uint64_t rng;			/* xorshift64* state, never 0 */
};

struct kvc_sampler_params
kvc_sampler_default_params(void)
{
	struct kvc_sampler_params p = {
		.temp = 0.8f,
		.top_k = 40,
		.top_p = 0.95f,
		.min_p = 0.05f,
		.repeat_penalty = 1.1f,
		.repeat_last_n = 64,
		.seed = KVC_SEED_RANDOM,
	};
	return p;
}

/* splitmix64: spreads any seed (0 and small integers included) over the state. */
static uint64_t
smp_splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* xorshift64* (Vigna): the draw behind every sampled token. */
static uint64_t
smp_next(struct kvc_sampler *s)
{
	s->rng ^= s->rng >> 12;
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	return s->rng * 0x2545f4914f6cdd1dULL;
}

/* Uniform in [0, 1) with 53 random bits. */
static double
smp_uniform(struct kvc_sampler *s)
{
	return (double)(smp_next(s) >> 11) * 0x1p-53;
}

static uint64_t
smp_clock_seed(const void *salt)
{
	struct timespec ts;
	uint64_t x;

	clock_gettime(CLOCK_REALTIME, &ts);
	x = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	x ^= (uint64_t)(uintptr_t)salt;
	x = smp_splitmix(x);
	return x == KVC_SEED_RANDOM ? 0 : x;
}

void
smp_set_params(struct kvc_sampler *s, const struct kvc_sampler_params *p)
{
	s->p = *p;
	if (s->p.seed == KVC_SEED_RANDOM)
		s->p.seed = smp_clock_seed(s);
	s->rng = smp_splitmix(s->p.seed);
	if (s->rng == 0)
		s->rng = 0x9e3779b97f4a7c15ULL;
}

int
smp_new(struct kvc_sampler **out, const struct kvc_sampler_params *p, int n_vocab)
{
	struct kvc_sampler *s;

	*out = NULL;
	if (n_vocab <= 0)
		return KVC_EINVAL;
	s = calloc(1, sizeof *s);
	if (s == NULL)
		return KVC_ENOMEM;
	s->n_vocab = n_vocab;
	s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
	s->seen = calloc((size_t)n_vocab, 1);
	if (s->cand == NULL || s->seen == NULL) {
		smp_free(s);
		return KVC_ENOMEM;
	}
	smp_set_params(s, p);
	*out = s;
	return 0;
}

void
smp_free(struct kvc_sampler *s)
{
	if (s == NULL)
		return;
	free(s->cand);
	free(s->seen);
	free(s);
}

uint64_t
smp_seed(const struct kvc_sampler *s)
{
	return s->p.seed;
}

struct kvc_sampler_params
smp_params(const struct kvc_sampler *s)
{
	return s->p;
}

uint64_t
smp_rng_state(const struct kvc_sampler *s)
{
	return s->rng;
}

void
smp_set_rng_state(struct kvc_sampler *s, uint64_t state)
{
	if (state != 0)		/* xorshift never leaves 0: a 0 here is a caller's slip */
		s->rng = state;
}

/* Candidate order: higher logit first, then lower id, so ties are reproducible. */
static int
smp_before(const struct smp_cand *a, const struct smp_cand *b)
{
	if (a->logit != b->logit)
		return a->logit > b->logit;
	return a->id < b->id;
}

static void
smp_swap(struct smp_cand *a, struct smp_cand *b)
{
	struct smp_cand t = *a;

	*a = *b;
	*b = t;
}

/* Sift down in a heap whose root is its worst candidate. */
static void
smp_sift(struct smp_cand *c, size_t root, size_t n)
{
	for (;;) {
		size_t child = 2 * root + 1;

		if (child >= n)
			return;
		/* a min-heap under "before": the worst candidate at the root */
		if (child + 1 < n && smp_before(&c[child], &c[child + 1]))
			child++;
		if (!smp_before(&c[root], &c[child]))
			return;
		smp_swap(&c[root], &c[child]);
		root = child;
	}
}

/*
 * Partition c[lo..hi) (hi - lo >= 2) around a median-of-three pivot: the
 * better candidates first; returns the pivot's final index.
 */
static size_t
smp_partition(struct smp_cand *c, size_t lo, size_t hi)
{
	size_t mid = lo + (hi - lo) / 2, i, store = lo;
	struct smp_cand *a = &c[lo], *b = &c[mid], *z = &c[hi - 1];

	/* put the median of a, b, z at hi-1 */
	if (smp_before(b, a))
		smp_swap(a, b);
	if (smp_before(z, a))
		smp_swap(a, z);
	if (smp_before(b, z))
		smp_swap(b, z);
	for (i = lo; i < hi - 1; i++)
		if (smp_before(&c[i], &c[hi - 1]))
			smp_swap(&c[i], &c[store++]);
	smp_swap(&c[store], &c[hi - 1]);
	return store;
}

/*
 * Afterwards c[0..k) are the k best (in any order): a heap for small k,
 * quickselect otherwise (the comparison is a total order, so it ends).
 */
static void
smp_select_top(struct smp_cand *c, size_t n, size_t k)
{
	size_t lo = 0, hi = n;	/* the k-th best lies in c[lo..hi) */

	if (k == 0 || k >= n)
		return;
	if (k <= 1024) {
		/*
		 * Small k (top-k 40): a heap of the k best
		 * so far, worst at the root; most candidates cost one compare.
		 */
		size_t i;

		for (i = k / 2; i-- > 0;)
			smp_sift(c, i, k);
		for (i = k; i < n; i++)
			if (smp_before(&c[i], &c[0])) {
				smp_swap(&c[0], &c[i]);
				smp_sift(c, 0, k);
			}
		return;
	}
	while (hi - lo > 1) {
		size_t store = smp_partition(c, lo, hi);

		if (store == k || store + 1 == k)
			return;
		if (store > k)
			hi = store;
		else
			lo = store + 1;
	}
}

/*
 * top-p: the length of the shortest best-first prefix of c[0..n) whose
 * mass reaches target. Quickselect on mass instead of a sort: afterwards
 * c[0..result) are those candidates (in no particular order).
 */
static size_t
smp_top_p(struct smp_cand *c, size_t n, double target)
{
	size_t lo = 0, hi = n, i;	/* c[0..lo) are the lo best, their mass cum < target */
	double cum = 0;

	while (hi > lo) {
		size_t store;
		double better = 0;

		if (hi - lo == 1)
			return lo + 1;
		store = smp_partition(c, lo, hi);
		for (i = lo; i < store; i++)
			better += c[i].p;
		if (cum + better >= target) {
			hi = store;
		} else if (cum + better + c[store].p >= target) {
			return store + 1;
		} else {
			cum += better + c[store].p;
			lo = store + 1;
		}
	}
	return n;	/* rounding: everything */
}

int32_t
smp_argmax(const float *logits, int n)
{
	int32_t best = 0;
	float bv = -INFINITY;
	int i;

	for (i = 0; i < n; i++)
		if (logits[i] > bv) {
			bv = logits[i];
			best = i;
		}
	return best;
}

static void
smp_penalise(struct kvc_sampler *s, const int32_t *history, size_t n_history)
{
	float pen = s->p.repeat_penalty;
	size_t n = s->p.repeat_last_n > 0 ? (size_t)s->p.repeat_last_n : 0, i;
	const int32_t *h;

	if (pen == 1.0f || pen <= 0.0f || n == 0 || history == NULL)
		return;
	if (n > n_history)
		n = n_history;
	h = history + (n_history - n);
	for (i = 0; i < n; i++) {
		int32_t id = h[i];

		if (id < 0 || id >= s->n_vocab || s->seen[id])
			continue;
		s->seen[id] = 1;
		/* cand is still indexed by id here */
		if (s->cand[id].logit > 0)
			s->cand[id].logit /= pen;
		else
			s->cand[id].logit *= pen;
	}
	for (i = 0; i < n; i++)
		if (h[i] >= 0 && h[i] < s->n_vocab)
			s->seen[h[i]] = 0;
}

/*
 * top-k straight from the logits: the same heap operations smp_select_top
 * runs on a full candidate array (heapify the first k, then each later id
 * that beats the root replaces it), so c[0..k) ends in the same order and
 * the draws are the same; but only candidates that enter the heap are
 * written, instead of all n_vocab (152k on Qwen) every token. The
 * repetition penalty is applied on the way, to the ids marked in seen[].
 */
static void
smp_top_k_direct(struct kvc_sampler *s, const float *logits, size_t n, size_t k,
    const int32_t *history, size_t n_history)
{
	struct smp_cand *c = s->cand;
	float pen = s->p.repeat_penalty;
	size_t nh = s->p.repeat_last_n > 0 ? (size_t)s->p.repeat_last_n : 0, i;
	const int32_t *h = NULL;
	bool penalise = !(pen == 1.0f || pen <= 0.0f || nh == 0 || history == NULL);

	if (penalise) {
		nh = nh > n_history ? n_history : nh;
		h = history + (n_history - nh);
		for (i = 0; i < nh; i++)
			if (h[i] >= 0 && h[i] < s->n_vocab)
				s->seen[h[i]] = 1;
	}
#define SMP_VALUE(id, v) do {								v = isnan(logits[id]) ? -INFINITY : logits[id];					if (penalise && s->seen[id])								v = v > 0 ? v / pen : v * pen;					} while (0)
	for (i = 0; i < k; i++) {
		c[i].id = (int32_t)i;
		SMP_VALUE(i, c[i].logit);
	}
	for (i = k / 2; i-- > 0;)
		smp_sift(c, i, k);
	for (i = k; i < n; i++) {
		float v = logits[i];

		/*
		 * A later id never wins a tie (smp_before), so only a larger value
		 * enters. A penalty >= 1 only lowers a value, and NaN (-inf) never
		 * enters: most ids are rejected on their raw logit alone.
		 */
		if (pen >= 1.0f && !(v > c[0].logit))
			continue;
		SMP_VALUE(i, v);
		if (v > c[0].logit) {
			c[0].id = (int32_t)i;
			c[0].logit = v;
			smp_sift(c, 0, k);
		}
	}
#undef SMP_VALUE
	if (penalise)
		for (i = 0; i < nh; i++)
			if (h[i] >= 0 && h[i] < s->n_vocab)
				s->seen[h[i]] = 0;
}

int32_t
smp_sample(struct kvc_sampler *s, const float *logits,
    const int32_t *history, size_t n_history)
{
	struct smp_cand *c = s->cand;
	size_t n = (size_t)s->n_vocab, i, keep;
	float max, temp = s->p.temp;
	double sum, cum, u;

	if (temp <= 0.0f)
		return smp_argmax(logits, s->n_vocab);

	if (s->p.top_k > 0 && (size_t)s->p.top_k < n && (size_t)s->p.top_k <= 1024) {
		smp_top_k_direct(s, logits, n, (size_t)s->p.top_k, history, n_history);
		n = (size_t)s->p.top_k;
	} else {
		for (i = 0; i < n; i++) {
			c[i].id = (int32_t)i;
			/* NaN would poison the sums and the sort: treat it as impossible */
			c[i].logit = isnan(logits[i]) ? -INFINITY : logits[i];
		}
		smp_penalise(s, history, n_history);
		if (s->p.top_k > 0 && (size_t)s->p.top_k < n) {
			smp_select_top(c, n, (size_t)s->p.top_k);
			n = (size_t)s->p.top_k;
		}
	}

	max = -INFINITY;
	for (i = 0; i < n; i++) {
		c[i].logit /= temp;
		if (c[i].logit > max)
			max = c[i].logit;
	}
	if (max == -INFINITY)
		return c[0].id;	/* nothing is possible: avoid exp(-inf + inf) */
	sum = 0;
	for (i = 0; i < n; i++) {
		c[i].p = exp((double)c[i].logit - (double)max);
		sum += c[i].p;
	}

	/*
	 * min-p keeps a prefix of the sorted order (p >= min_p * p_max, and
	 * p_max is exp(0) = 1 here); so does top-p. Their intersection is the
	 * shorter prefix, so min-p may be applied first: top-p then searches
	 * only its survivors, while still measuring mass against the full sum.
	 */
	keep = n;
	if (s->p.min_p > 0.0f) {
		double thr = (double)s->p.min_p;
		size_t m = 0;

		for (i = 0; i < n; i++)
			if (c[i].p >= thr)
				smp_swap(&c[i], &c[m++]);
		keep = m;	/* >= 1: the maximum has p = 1 >= min_p when min_p <= 1 */
		if (keep == 0)
			keep = 1, smp_select_top(c, n, 1);
	}
	if (s->p.top_p < 1.0f)
		keep = smp_top_p(c, keep, (double)s->p.top_p * sum);

	sum = 0;
	for (i = 0; i < keep; i++)
		sum += c[i].p;
	u = smp_uniform(s) * sum;
	cum = 0;
	for (i = 0; i < keep; i++) {
		cum += c[i].p;
		if (u < cum)
			return c[i].id;
	}
	return c[keep - 1].id;	/* rounding at the very top */
}
