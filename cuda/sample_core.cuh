/*
 * sample_core.cuh: the decisions of the CUDA backend's sampler (sample.cu),
 * written so that the same lines compile for the device, for the host and
 * as plain C: tests/unit/test_cuda_sample.c runs them on the CPU against
 * src/sampler's smp_sample on thousands of random logit vectors (ties,
 * NaN, -inf included) and requires the same token and the same generator
 * state after every draw.
 *
 * The same seed picks the same token only if every step is the CPU's in
 * the same order: the candidates' order decides which token a draw lands
 * on. So this is src/sampler's algorithm step for step (its heap for
 * top-k, its min-p sweep, its top-p quickselect, its xorshift64* draw),
 * not another one; the backend module may not call src/sampler (backend
 * sits below it), and the test keeps the two in step.
 *
 * Top-k on the device: smp_sample's heap sees ids in increasing order and
 * an id changes it only when its value beats the heap's root (the k-th
 * best so far), and the root only rises. So a block that tests a stretch
 * of ids against the root as it stood before the stretch, and hands only
 * those that beat it, in id order, to one thread that offers them to the
 * heap (sc_heap_offer re-tests each against the live root), builds
 * exactly the CPU's heap, however the stretch is cut.
 *
 * A header with function bodies on purpose, as dev_util.cuh (device
 * functions are defined in every file that calls them).
 */
#ifndef KVC_CUDA_SAMPLE_CORE_CUH
#define KVC_CUDA_SAMPLE_CORE_CUH

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define SC_HD __host__ __device__
#else
#define SC_HD
#endif

#define SC_TOPK_MAX 1024	/* the largest top-k smp_sample runs as a heap over the logits */
/*
 * The stretches top-k tests at once: 32 ids first, doubling up to 4096.
 * Right after the heap of the first k ids its root is their worst, which
 * most ids beat; short stretches while it rises keep the ids offered one
 * at a time near the k (1 + ln(n / k)) a sequential pass offers, instead
 * of most of the first 4096.
 */
#define SC_STRETCH_FIRST 32
#define SC_STRETCH_MAX 4096

SC_HD static inline int
sc_next_stretch(int len)
{
	return len >= SC_STRETCH_MAX / 2 ? SC_STRETCH_MAX : 2 * len;
}

struct sc_cand {
	int32_t id;	/* token id */
	float logit;	/* penalised, then divided by temp */
	double p;	/* exp(logit - max), unnormalised */
};

/* xorshift64* (smp_next) and a uniform in [0, 1) of 53 bits (smp_uniform). */
SC_HD static inline double
sc_uniform(uint64_t *rng)
{
	uint64_t x = *rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*rng = x;
	return (double)((x * 0x2545f4914f6cdd1dULL) >> 11) * 0x1p-53;
}

/* A raw logit as smp_sample sees it: NaN as impossible, then the repetition penalty when pen. */
SC_HD static inline float
sc_value(float l, bool pen, float penalty)
{
	float v = l != l ? -INFINITY : l;

	if (pen)
		v = v > 0 ? v / penalty : v * penalty;
	return v;
}

/* Whether the penalty is on at all (smp_penalise's test). */
SC_HD static inline bool
sc_pen_on(float penalty, int last_n, int n_history)
{
	return !(penalty == 1.0f || penalty <= 0.0f || last_n <= 0 || n_history <= 0);
}

/* Candidate order: higher logit first, then lower id (smp_before). */
SC_HD static inline bool
sc_before(const struct sc_cand *a, const struct sc_cand *b)
{
	if (a->logit != b->logit)
		return a->logit > b->logit;
	return a->id < b->id;
}

SC_HD static inline void
sc_swap(struct sc_cand *a, struct sc_cand *b)
{
	struct sc_cand t = *a;

	*a = *b;
	*b = t;
}

/* Sift down in a heap whose root is its worst candidate (smp_sift). */
SC_HD static inline void
sc_sift(struct sc_cand *c, size_t root, size_t n)
{
	for (;;) {
		size_t child = 2 * root + 1;

		if (child >= n)
			return;
		if (child + 1 < n && sc_before(&c[child], &c[child + 1]))
			child++;
		if (!sc_before(&c[root], &c[child]))
			return;
		sc_swap(&c[root], &c[child]);
		root = child;
	}
}

/* c[0..k) made a heap of ids 0..k-1 with values v (smp_top_k_direct's start). */
SC_HD static inline void
sc_heap_init(struct sc_cand *c, const float *v, size_t k)
{
	for (size_t i = 0; i < k; i++) {
		c[i].id = (int32_t)i;
		c[i].logit = v[i];
	}
	for (size_t i = k / 2; i-- > 0;)
		sc_sift(c, i, k);
}

/* Id with value v offered to the heap: it replaces the root when it beats it (a later id never wins a tie). */
SC_HD static inline void
sc_heap_offer(struct sc_cand *c, size_t k, int32_t id, float v)
{
	if (v > c[0].logit) {
		c[0].id = id;
		c[0].logit = v;
		sc_sift(c, 0, k);
	}
}

/* Partition c[lo..hi) around a median-of-three pivot, the better first (smp_partition). */
SC_HD static inline size_t
sc_partition(struct sc_cand *c, size_t lo, size_t hi)
{
	size_t mid = lo + (hi - lo) / 2, i, store = lo;
	struct sc_cand *a = &c[lo], *b = &c[mid], *z = &c[hi - 1];

	if (sc_before(b, a))
		sc_swap(a, b);
	if (sc_before(z, a))
		sc_swap(a, z);
	if (sc_before(b, z))
		sc_swap(b, z);
	for (i = lo; i < hi - 1; i++)
		if (sc_before(&c[i], &c[hi - 1]))
			sc_swap(&c[i], &c[store++]);
	sc_swap(&c[store], &c[hi - 1]);
	return store;
}

/* The best candidate to c[0] by smp_select_top's heap of one. */
SC_HD static inline void
sc_select_best(struct sc_cand *c, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (sc_before(&c[i], &c[0])) {
			sc_swap(&c[0], &c[i]);
			sc_sift(c, 0, 1);
		}
}

/* top-p's prefix length by quickselect on mass (smp_top_p). */
SC_HD static inline size_t
sc_top_p(struct sc_cand *c, size_t n, double target)
{
	size_t lo = 0, hi = n, i;
	double cum = 0;

	while (hi > lo) {
		size_t store;
		double better = 0;

		if (hi - lo == 1)
			return lo + 1;
		store = sc_partition(c, lo, hi);
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
	return n;
}

/*
 * After top-k (c[0..n) the heap's candidates, penalised): temperature,
 * min-p, top-p and the draw, as the rest of smp_sample. *rng advances
 * only when a draw is made (not when every candidate is impossible).
 */
SC_HD static inline int32_t
sc_finish(struct sc_cand *c, size_t n, float temp, float min_p, float top_p, uint64_t *rng)
{
	size_t i, keep;
	float max = -INFINITY;
	double sum = 0, cum = 0, u;

	for (i = 0; i < n; i++) {
		c[i].logit /= temp;
		if (c[i].logit > max)
			max = c[i].logit;
	}
	if (max == -INFINITY)
		return c[0].id;
	for (i = 0; i < n; i++) {
		c[i].p = exp((double)c[i].logit - (double)max);
		sum += c[i].p;
	}
	keep = n;
	if (min_p > 0.0f) {
		double thr = (double)min_p;
		size_t m = 0;

		for (i = 0; i < n; i++)
			if (c[i].p >= thr)
				sc_swap(&c[i], &c[m++]);
		keep = m;
		if (keep == 0) {
			keep = 1;
			sc_select_best(c, n);
		}
	}
	if (top_p < 1.0f)
		keep = sc_top_p(c, keep, (double)top_p * sum);
	sum = 0;
	for (i = 0; i < keep; i++)
		sum += c[i].p;
	u = sc_uniform(rng) * sum;
	for (i = 0; i < keep; i++) {
		cum += c[i].p;
		if (u < cum)
			return c[i].id;
	}
	return c[keep - 1].id;
}

/* Whether a request runs on the device: greedy, or top-k within the heap's range. */
SC_HD static inline bool
sc_takes(float temp, int top_k, int n_vocab)
{
	return temp <= 0.0f || (top_k > 0 && top_k < n_vocab && top_k <= SC_TOPK_MAX);
}

/*
 * Greedy's order for a reduction in any order: a larger value, or an equal
 * one at a lower id; NaN never wins. smp_argmax's answer is the winner
 * when its value is above -inf, else id 0 (sc_argmax_result).
 */
SC_HD static inline bool
sc_argmax_better(float v, int32_t id, float bv, int32_t bid)
{
	return v > bv || (v == bv && id < bid);
}

SC_HD static inline int32_t
sc_argmax_result(float bv, int32_t bid)
{
	return bv > -INFINITY ? bid : 0;
}

/*
 * A request sc_takes, whole, on the host, in the kernels' steps: greedy
 * as a reduction; else the values (NaN as -inf, the recent ids
 * penalised), the heap fed stretch by stretch (step ids each, or for step
 * 0 the kernel's stretches, SC_STRETCH_FIRST doubling to SC_STRETCH_MAX)
 * with the ids that beat the root as it stood before the stretch, then
 * sc_finish. The CPU tests' and the stand-in module's
 * (tests/unit/fake_cuda.c) replay of cu_sample. Scratch: vals (n floats),
 * c (top_k candidates), ids (step ids, SC_STRETCH_MAX for step 0).
 */
static inline int32_t
sc_sample_host(const float *l, int n, float temp, int top_k, float top_p, float min_p, float penalty,
    const int32_t *recent, int n_recent, uint64_t *rng, int step, float *vals, struct sc_cand *c,
    int32_t *ids)
{
	size_t k = (size_t)top_k;

	if (temp <= 0.0f) {
		float bv = -INFINITY;
		int32_t bi = INT32_MAX;

		for (int i = n; i-- > 0;)	/* backwards: the order must not matter */
			if (sc_argmax_better(l[i], i, bv, bi)) {
				bv = l[i];
				bi = i;
			}
		return sc_argmax_result(bv, bi);
	}
	for (int i = 0; i < n; i++)
		vals[i] = sc_value(l[i], false, 1.f);
	if (sc_pen_on(penalty, n_recent, n_recent))
		for (int j = 0; j < n_recent; j++)
			if (recent[j] >= 0 && recent[j] < n)
				vals[recent[j]] = sc_value(l[recent[j]], true, penalty);
	sc_heap_init(c, vals, k);
	for (int base = (int)k, len = step > 0 ? step : SC_STRETCH_FIRST; base < n;
	    base += len, len = step > 0 ? step : sc_next_stretch(len)) {
		float root = c[0].logit;
		int m = 0;

		for (int i = base; i < n && i - base < len; i++)
			if (vals[i] > root)
				ids[m++] = i;
		for (int t = 0; t < m; t++)
			sc_heap_offer(c, k, ids[t], vals[ids[t]]);
	}
	return sc_finish(c, k, temp, min_p, top_p, rng);
}

#endif
