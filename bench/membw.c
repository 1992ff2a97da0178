/*
 * membw: memory read bandwidth, the speed limit of decoding (each token
 * reads every weight once). Streams a buffer much larger than the caches
 * with 1..N threads, each summing its own slice with 256-bit loads, and
 * reports the best of several passes in GB/s (1e9 bytes/s). Also memcpy
 * bandwidth (bytes read + bytes written) for comparison.
 *
 *   bench/membw [-s MiB] [-t MAX_THREADS] [-r REPEATS]
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

struct slice {
	const uint8_t *p;
	uint8_t *dst;		/* memcpy target, or NULL for the read test */
	size_t n;		/* bytes, multiple of 128 */
	uint64_t sum;		/* keeps the loads alive */
};

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t
read_avx2(const uint8_t *p, size_t n)
{
	__m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;

	for (size_t i = 0; i < n; i += 128) {
		a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(p + i)));
		b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
		c = _mm256_add_epi64(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
		d = _mm256_add_epi64(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
	}
	a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
	return (uint64_t)_mm256_extract_epi64(a, 0) + (uint64_t)_mm256_extract_epi64(a, 3);
}
#endif

static uint64_t
read_plain(const uint8_t *p, size_t n)
{
	const uint64_t *q = (const uint64_t *)(const void *)p;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;

	for (size_t i = 0; i < n / 8; i += 4) {
		s0 += q[i];
		s1 += q[i + 1];
		s2 += q[i + 2];
		s3 += q[i + 3];
	}
	return s0 + s1 + s2 + s3;
}

static void *
run(void *arg)
{
	struct slice *s = arg;

	if (s->dst != NULL) {
		memcpy(s->dst, s->p, s->n);
		return NULL;
	}
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2")) {
		s->sum += read_avx2(s->p, s->n);
		return NULL;
	}
#endif
	s->sum += read_plain(s->p, s->n);
	return NULL;
}

/* One pass over size bytes on nt threads; returns seconds. */
static double
pass(const uint8_t *buf, uint8_t *dst, size_t size, int nt, uint64_t *sum)
{
	pthread_t th[64];
	struct slice sl[64];
	size_t per = size / (size_t)nt / 128 * 128;
	double t0 = kvc_now();

	for (int i = 0; i < nt; i++) {
		sl[i] = (struct slice){buf + (size_t)i * per, dst ? dst + (size_t)i * per : NULL, per, 0};
		if (i > 0 && pthread_create(&th[i], NULL, run, &sl[i]) != 0)
			run(&sl[i]), sl[i].n = 0;
	}
	run(&sl[0]);
	for (int i = 1; i < nt; i++)
		if (sl[i].n)
			pthread_join(th[i], NULL);
	double t = kvc_now() - t0;
	for (int i = 0; i < nt; i++)
		*sum += sl[i].sum;
	return t;
}

int
main(int argc, char **argv)
{
	size_t mib = 512;
	int max_t = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 5, o;
	uint64_t sum = 0;

	while ((o = getopt(argc, argv, "s:t:r:")) != -1) {
		switch (o) {
		case 's': mib = (size_t)atol(optarg); break;
		case 't': max_t = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: membw [-s MiB] [-t MAX_THREADS] [-r REPEATS]\n");
			return 2;
		}
	}
	if (max_t < 1)
		max_t = 1;
	if (max_t > 64)
		max_t = 64;
	size_t size = mib << 20;
	uint8_t *buf = aligned_alloc(64, size), *dst = aligned_alloc(64, size / 2);
	if (buf == NULL || dst == NULL) {
		fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib * 3 / 2);
		return 1;
	}
	memset(buf, 1, size);	/* fault the pages in before timing */
	memset(dst, 0, size / 2);
	printf("buffer %zu MiB, best of %d passes\n", mib, reps);
	for (int nt = 1; nt <= max_t; nt = nt < max_t && nt * 2 > max_t ? max_t : nt * 2) {
		double best = 1e30, bestc = 1e30;
		for (int r = 0; r < reps; r++) {
			double t = pass(buf, NULL, size, nt, &sum);
			best = t < best ? t : best;
			t = pass(buf, dst, size / 2, nt, &sum);
			bestc = t < bestc ? t : bestc;
		}
		printf("threads %2d: read %6.1f GB/s   memcpy %6.1f GB/s (read+write)\n", nt,
		    (double)size / best / 1e9, (double)size / bestc / 1e9);
		if (nt == max_t)
			break;
	}
	free(buf);
	free(dst);
	return sum == 42;	/* never: keeps the sums observable */
}
