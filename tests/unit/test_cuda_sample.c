/*
 * test_cuda_sample.c: the CUDA backend's sampler decisions
 * (cuda/sample_core.cuh, the lines sample.cu's kernels compile) on the CPU
 * against src/sampler's smp_sample, without nvcc. The device's procedure
 * is replayed here step by step: values NaN-free and penalised as
 * kernel_sample_values and kernel_sample_penalty write them, the top-k
 * heap fed stretch by stretch with only the ids that beat the root as it
 * stood before the stretch (kernel_sample_topk; sc_sample_host), then sc_finish; greedy as
 * a reduction in another order than the CPU's scan (kernel_sample_argmax's
 * lanes and warps). For thousands of random logit vectors (ties, NaN,
 * -inf, all impossible) and parameter sets, the same seed must give the
 * same token and leave the generator in the same state, for the kernel's
 * stretches (32 ids doubling to 4096), stretches of 1, 37 and the whole
 * vocabulary.
 *
 * A replay that offers a stretch's ids in the wrong order must disagree
 * somewhere, so the comparison can fail.
 */
#include "test.h"

#include <math.h>
#include <stdint.h>

#include "sampler/sampler.h"

#include "cuda/sample_core.cuh"

static uint64_t rs = 0x853c49e6748fea9bULL;

static uint32_t
r32(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (uint32_t)(rs >> 20);
}

static double
ru(void)
{
	return (double)r32() / 4294967296.0;
}

/* Greedy as kernel_sample_argmax reduces: 1024 strided lanes, then butterflies, then warps. */
static int32_t
argmax_lanes(const float *l, int n)
{
	float bv[1024];
	int32_t bi[1024];

	for (int t = 0; t < 1024; t++) {
		bv[t] = -INFINITY;
		bi[t] = INT32_MAX;
		for (int i = t; i < n; i += 1024)
			if (sc_argmax_better(l[i], i, bv[t], bi[t])) {
				bv[t] = l[i];
				bi[t] = i;
			}
	}
	for (int w = 0; w < 32; w++)
		for (int o = 16; o > 0; o /= 2) {
			float nv[32];
			int32_t ni[32];

			for (int a = 0; a < 32; a++) {
				int t = 32 * w + a, u = 32 * w + (a ^ o);
				nv[a] = bv[t];
				ni[a] = bi[t];
				if (sc_argmax_better(bv[u], bi[u], bv[t], bi[t])) {
					nv[a] = bv[u];
					ni[a] = bi[u];
				}
			}
			for (int a = 0; a < 32; a++) {
				bv[32 * w + a] = nv[a];
				bi[32 * w + a] = ni[a];
			}
		}
	for (int w = 1; w < 32; w++)
		if (sc_argmax_better(bv[32 * w], bi[32 * w], bv[0], bi[0])) {
			bv[0] = bv[32 * w];
			bi[0] = bi[32 * w];
		}
	return sc_argmax_result(bv[0], bi[0]);
}

/*
 * sc_sample_host with the request's history cut as the engine cuts it
 * (the last repeat_last_n ids); reverse: a wrong replay that offers each
 * stretch's ids last first (the test's own check that a wrong order is
 * caught); greedy through the lanes' order (argmax_lanes) as well.
 */
static int32_t
device_replay(const float *l, int n, const struct kvc_sampler_params *p, const int32_t *hist, size_t nh,
    uint64_t *rng, int step, bool reverse, float *vals, struct sc_cand *c, int32_t *ids)
{
	size_t nr = p->repeat_last_n > 0 ? (size_t)p->repeat_last_n : 0, k = (size_t)p->top_k;
	int32_t a;

	nr = nr > nh ? nh : nr;
	if (p->temp <= 0.0f) {
		a = sc_sample_host(l, n, p->temp, p->top_k, p->top_p, p->min_p, p->repeat_penalty, hist + nh - nr,
		    (int)nr, rng, step, vals, c, ids);
		return a == argmax_lanes(l, n) ? a : -2;
	}
	if (!reverse)
		return sc_sample_host(l, n, p->temp, p->top_k, p->top_p, p->min_p, p->repeat_penalty, hist + nh - nr,
		    (int)nr, rng, step, vals, c, ids);
	for (int i = 0; i < n; i++)
		vals[i] = sc_value(l[i], false, 1.f);
	if (sc_pen_on(p->repeat_penalty, (int)nr, (int)nr))
		for (size_t j = nh - nr; j < nh; j++)
			if (hist[j] >= 0 && hist[j] < n)
				vals[hist[j]] = sc_value(l[hist[j]], true, p->repeat_penalty);
	sc_heap_init(c, vals, k);
	for (int base = (int)k; base < n; base += step) {
		float root = c[0].logit;
		int m = 0;

		for (int i = base; i < n && i - base < step; i++)
			if (vals[i] > root)
				ids[m++] = i;
		for (int t = m; t-- > 0;)
			sc_heap_offer(c, k, ids[t], vals[ids[t]]);
	}
	return sc_finish(c, k, p->temp, p->min_p, p->top_p, rng);
}

/* Logits of kind kind: smooth, coarse (many ties), with NaN and -inf, flat, all impossible. */
static void
make_logits(float *l, int n, int kind)
{
	for (int i = 0; i < n; i++) {
		double g = ru() + ru() + ru() - 1.5;	/* roughly normal */

		switch (kind) {
		case 0: l[i] = (float)(g * 6); break;
		case 1: l[i] = (float)floor(g * 8) * 0.5f; break;
		case 2: l[i] = r32() % 50 == 0 ? NAN : r32() % 40 == 0 ? -INFINITY : (float)(g * 4); break;
		case 3: l[i] = r32() % 3 == 0 ? 2.f : 1.f; break;
		case 4: l[i] = r32() % 2 ? -INFINITY : NAN; break;
		default: l[i] = (float)(g * 20) + (i % 7 == 0 ? 5.f : 0.f); break;
		}
	}
}

int
main(void)
{
	static const int vocab[] = { 40, 300, 4096, 5000, 32000 };
	static const float temps[] = { 0.f, 0.2f, 0.8f, 1.f, 1.7f };
	static const int topks[] = { 1, 2, 40, 100, 1024 };
	static const float topps[] = { 1.f, 0.95f, 0.5f, 0.05f };
	static const float minps[] = { 0.f, 0.05f, 0.3f, 1.5f };
	static const float pens[] = { 1.f, 1.1f, 0.7f, 3.f };
	static const int steps[] = { 0, 1, 37, 1 << 30 };	/* 0: the kernel's stretches */
	enum { NMAX = 32000, HMAX = 300 };
	float *l = malloc(NMAX * sizeof *l), *vals = malloc(NMAX * sizeof *vals);
	struct sc_cand *c = malloc(SC_TOPK_MAX * sizeof *c);
	int32_t *ids = malloc(NMAX * sizeof *ids), hist[HMAX];	/* ids: >= SC_STRETCH_MAX */
	int cases = 0, bad_id = 0, bad_rng = 0, untaken = 0, wrong_caught = 0, draws = 0;

	for (int it = 0; it < 2500; it++) {
		struct kvc_sampler_params p = kvc_sampler_default_params();
		struct kvc_sampler *smp = NULL;
		int n = vocab[r32() % 5], kind = (int)(r32() % 6);
		size_t nh = r32() % HMAX;

		p.temp = temps[r32() % 5];
		p.top_k = topks[r32() % 5];
		p.top_p = topps[r32() % 4];
		p.min_p = minps[r32() % 4];
		p.repeat_penalty = pens[r32() % 4];
		p.repeat_last_n = (int)(r32() % 3) * 40;
		p.seed = r32();
		if (!sc_takes(p.temp, p.top_k, n)) {
			/* top-k at or past the vocabulary: the host's, as cu_sample says */
			test_cond(p.top_k >= n, "sc_takes refused top-k %d of %d", p.top_k, n);
			untaken++;
			continue;
		}
		make_logits(l, n, kind);
		for (size_t j = 0; j < nh; j++)	/* repeats, and ids outside the vocabulary */
			hist[j] = r32() % 10 == 0 ? (int32_t)(r32() % 3) - 1 + (r32() % 2 ? n : 0) :
			    (int32_t)(r32() % (unsigned)(n < 64 ? n : 64));
		if (smp_new(&smp, &p, n) != 0) {
			test_cond(0, "smp_new");
			break;
		}
		/* a few tokens in a row from one generator, as a reply draws them */
		for (int t = 0; t < 3; t++, cases++) {
			int step = steps[(it + t) % 4];
			uint64_t rng = smp_rng_state(smp), before = rng, rev = rng;
			int32_t got = device_replay(l, n, &p, hist, nh, &rng, step, false, vals, c, ids);
			int32_t want = smp_sample(smp, l, hist, nh);

			draws += rng != before;
			if (got != want && bad_id++ < 5)
				fprintf(stderr, "case %d: n %d kind %d temp %g top-k %d top-p %g min-p %g pen %g "
				    "last %d step %d: device %d, CPU %d\n", cases, n, kind, p.temp, p.top_k, p.top_p,
				    p.min_p, p.repeat_penalty, p.repeat_last_n, step, got, want);
			bad_rng += rng != smp_rng_state(smp);
			if (p.temp > 0 && step > 4096 &&
			    device_replay(l, n, &p, hist, nh, &rev, step, true, vals, c, ids) != want)
				wrong_caught++;
			l[r32() % (unsigned)n] += 3.f;	/* the next step's logits differ a little */
		}
		smp_free(smp);
	}
	printf("%d draws compared (%d with a random draw), %d requests left to the host; "
	    "%d differ in id, %d in generator state; a reversed replay differs %d times\n",
	    cases, draws, untaken, bad_id, bad_rng, wrong_caught);
	test_cond(bad_id == 0, "%d of %d sampled ids differ from smp_sample", bad_id, cases);
	test_cond(bad_rng == 0, "%d of %d generator states differ from smp_sample's", bad_rng, cases);
	test_cond(draws > cases / 3, "only %d of %d cases drew", draws, cases);
	test_cond(wrong_caught > 0, "a replay in the wrong order was never caught");
	free(l);
	free(vals);
	free(c);
	free(ids);
	return test_done();
}
