/*
 * peak: the arithmetic ceilings prefill is compared with. Runs long chains
 * of independent multiply-adds that touch no memory, one per thread, and
 * reports the best of several passes:
 *
 *   fp32 fma256   AVX2 vfmadd on 8 floats: 16 FLOP per instruction
 *   fp32 fma512   AVX-512 vfmadd on 16 floats: 32 FLOP
 *   int8 avx2     vpmaddubsw + vpmaddwd + vpaddd on 32 bytes: 32 multiply-adds
 *                 (64 integer ops), the int8 kernels' AVX2 form
 *   int8 vnni256  vpdpbusd on 32 bytes: 32 multiply-adds (64 ops)
 *   int8 vnni512  vpdpbusd on 64 bytes: 64 multiply-adds (128 ops)
 *
 * A multiply-add counts as 2 operations, as FLOP/s figures usually do.
 * Twelve independent accumulators cover the latency of two pipes (4 or 5
 * cycles each), so the figure is the pipes' throughput, the most any
 * kernel of that instruction mix can reach; the forms the CPU lacks are
 * skipped.
 *
 *   bench/peak [-t MAX_THREADS] [-r REPEATS] [-m MILLISECONDS]
 */
#include "config.h"

#include "core/kvc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* one kernel: runs `iters` rounds of 12 instructions, returns a value that
 * depends on every accumulator (so nothing is optimised away) */
typedef float (*kernel_fn)(long iters);

struct form {
	const char *name;
	const char *unit;	/* what the figure counts */
	double ops_per_round;	/* 12 instructions' worth of operations */
	kernel_fn fn;
	const char *need;	/* __builtin_cpu_supports name(s), "" = always */
};

#if defined(__x86_64__)
/* twelve accumulators, each from its own starting value, and a barrier that
 * makes the compiler keep all twelve (identical chains would be merged) */
#define ACC12(T, mk) T a0 = mk(1), a1 = mk(2), a2 = mk(3), a3 = mk(4), a4 = mk(5), \
	a5 = mk(6), a6 = mk(7), a7 = mk(8), a8 = mk(9), a9 = mk(10), a10 = mk(11), a11 = mk(12)
#define KEEP12(c) __asm__ volatile("" : c(a0), c(a1), c(a2), c(a3), c(a4), c(a5), \
	c(a6), c(a7), c(a8), c(a9), c(a10), c(a11))
#define F256(k) _mm256_set1_ps(1.0f + (float)(k) * 1e-3f)
#define F512(k) _mm512_set1_ps(1.0f + (float)(k) * 1e-3f)
#define I256(k) _mm256_set1_epi32(k)
#define I512(k) _mm512_set1_epi32(k)
#define APPLY12(OP) OP(a0); OP(a1); OP(a2); OP(a3); OP(a4); OP(a5); \
	OP(a6); OP(a7); OP(a8); OP(a9); OP(a10); OP(a11)
/* a0 = the sum of the twelve accumulators, with ADD (keeps them all live) */
#define SUM12(ADD) a0 = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))); \
	a0 = ADD(a0, ADD(ADD(a8, a9), ADD(a10, a11)))

__attribute__((target("avx2,fma"))) static float
k_fma256(long iters)
{
	__m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
	ACC12(__m256, F256);

#define F(a) a = _mm256_fmadd_ps(a, x, y)
	for (long i = 0; i < iters; i++) {
		APPLY12(F);
		KEEP12("+v");
	}
#undef F
	SUM12(_mm256_add_ps);
	return _mm256_cvtss_f32(a0);
}

__attribute__((target("avx512f"))) static float
k_fma512(long iters)
{
	__m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
	ACC12(__m512, F512);

#define F(a) a = _mm512_fmadd_ps(a, x, y)
	for (long i = 0; i < iters; i++) {
		APPLY12(F);
		KEEP12("+v");
	}
#undef F
	SUM12(_mm512_add_ps);
	return _mm512_reduce_add_ps(a0);
}

/* the AVX2 int8 step of src/quant: u8 x s8 pairs to s16, pairs of s16 to
 * s32 against ones, added to the accumulator (three instructions) */
__attribute__((target("avx2"))) static float
k_i8avx2(long iters)
{
	__m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
	ACC12(__m256i, I256);

	/* the barrier on u after each step stops the twelve identical products
	 * being computed once */
#define F(a) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), one)); \
	__asm__ volatile("" : "+x"(u))
	for (long i = 0; i < iters; i++) {
		APPLY12(F);
		KEEP12("+x");
	}
#undef F
	SUM12(_mm256_add_epi32);
	return (float)_mm256_extract_epi32(a0, 0);
}

__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) static float
k_vnni256(long iters)
{
	__m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
	ACC12(__m256i, I256);

#define F(a) a = _mm256_dpbusd_epi32(a, u, s)
	for (long i = 0; i < iters; i++) {
		APPLY12(F);
		KEEP12("+v");
	}
#undef F
	SUM12(_mm256_add_epi32);
	return (float)_mm256_extract_epi32(a0, 0);
}

__attribute__((target("avx512f,avx512vnni"))) static float
k_vnni512(long iters)
{
	__m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
	ACC12(__m512i, I512);

#define F(a) a = _mm512_dpbusd_epi32(a, u, s)
	for (long i = 0; i < iters; i++) {
		APPLY12(F);
		KEEP12("+v");
	}
#undef F
	SUM12(_mm512_add_epi32);
	return (float)_mm512_reduce_add_epi32(a0);
}

static const struct form forms[] = {
	{ "fp32 fma256", "GFLOP/s", 12 * 16.0, k_fma256, "avx2 fma" },
	{ "fp32 fma512", "GFLOP/s", 12 * 32.0, k_fma512, "avx512f" },
	{ "int8 avx2", "GOP/s", 12 * 64.0, k_i8avx2, "avx2" },
	{ "int8 vnni256", "GOP/s", 12 * 64.0, k_vnni256, "avx512vl avx512vnni" },
	{ "int8 vnni512", "GOP/s", 12 * 128.0, k_vnni512, "avx512f avx512vnni" },
};

static bool
cpu_has(const char *need)
{
	char buf[64];
	const char *p = need;

	__builtin_cpu_init();
	while (*p) {
		size_t n = strcspn(p, " ");

		if (n >= sizeof buf)
			return false;
		memcpy(buf, p, n);
		buf[n] = '\0';
		/* __builtin_cpu_supports needs a literal: test the few we use */
		if ((strcmp(buf, "avx2") == 0 && !__builtin_cpu_supports("avx2")) ||
		    (strcmp(buf, "fma") == 0 && !__builtin_cpu_supports("fma")) ||
		    (strcmp(buf, "avx512f") == 0 && !__builtin_cpu_supports("avx512f")) ||
		    (strcmp(buf, "avx512vl") == 0 && !__builtin_cpu_supports("avx512vl")) ||
		    (strcmp(buf, "avx512vnni") == 0 && !__builtin_cpu_supports("avx512vnni")))
			return false;
		p += n;
		while (*p == ' ')
			p++;
	}
	return true;
}
#else
static const struct form forms[1];
static bool
cpu_has(const char *need)
{
	(void)need;
	return false;
}
#endif

struct job {
	kernel_fn fn;
	long iters;
	float out;
};

static void *
run_job(void *arg)
{
	struct job *j = arg;

	j->out = j->fn(j->iters);
	return NULL;
}

/* seconds for n threads each running fn for iters rounds, or < 0 on error */
static double
timed(kernel_fn fn, long iters, int n, float *sink)
{
	pthread_t th[64];
	struct job jobs[64];
	double t0 = kvc_now();

	for (int i = 0; i < n; i++) {
		jobs[i] = (struct job){ fn, iters, 0 };
		if (i > 0 && pthread_create(&th[i], NULL, run_job, &jobs[i]) != 0)
			return -1;
	}
	run_job(&jobs[0]);
	for (int i = 1; i < n; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < n; i++)
		*sink += jobs[i].out;
	return kvc_now() - t0;
}

static void
usage(void)
{
	fprintf(stderr, "usage: peak [-t MAX_THREADS] [-r REPEATS] [-m MILLISECONDS]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	int max_t = kvc_n_cores(), reps = 5, ms = 300, o;
	float sink = 0;

	while ((o = getopt(argc, argv, "t:r:m:")) != -1) {
		int v = atoi(optarg);

		if (v < 1)
			usage();
		if (o == 't')
			max_t = v > 64 ? 64 : v;
		else if (o == 'r')
			reps = v;
		else if (o == 'm')
			ms = v;
		else
			usage();
	}
	if (optind != argc)
		usage();
	printf("%-14s %7s %12s %14s\n", "form", "threads", "best", "per thread");
	for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
		const struct form *fm = &forms[f];
		long iters = 1 << 16;

		if (!fm->fn || !cpu_has(fm->need))
			continue;
		/* grow the count until one pass takes about ms milliseconds */
		for (double t; (t = timed(fm->fn, iters, 1, &sink)) < ms / 1000.0 && t >= 0;)
			iters = (long)(iters * (t > 1e-3 ? (ms / 1000.0) / t * 1.1 : 8));
		for (int n = 1; n <= max_t; n = (n < max_t && n * 2 > max_t) ? max_t : n * 2) {
			double best = 0;

			for (int r = 0; r < reps; r++) {
				double t = timed(fm->fn, iters, n, &sink);
				double g = t > 0 ? fm->ops_per_round * (double)iters * n / t / 1e9 : 0;

				if (g > best)
					best = g;
			}
			printf("%-14s %7d %8.1f %-7s %9.1f\n", fm->name, n, best, fm->unit, best / n);
		}
	}
	return sink == 12345.0f;	/* never true in practice; keeps sink used */
}
