/*
 * test.h: a tiny harness for kvchat's C tests. Each check prints on failure
 * and counts; test_done() prints "N passed, N failed" and returns the exit
 * status (77 = skipped, for automake, when test_skip() was called first).
 */
#ifndef KVC_TEST_H
#define KVC_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

static int test_passed, test_failed;

#define test_cond(cond, ...) do {					\
	if (cond) {							\
		test_passed++;						\
	} else {							\
		test_failed++;						\
		fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
		fprintf(stderr, __VA_ARGS__);				\
		fputc('\n', stderr);					\
	}								\
} while (0)

/* Relative/absolute closeness for floats. */
static inline int test_close(double a, double b, double rel, double abs_tol)
{
	double d = fabs(a - b);
	return d <= abs_tol || d <= rel * fmax(fabs(a), fabs(b));
}

static inline int test_done(void)
{
	printf("%d passed, %d failed\n", test_passed, test_failed);
	return test_failed ? 1 : 0;
}

/* Print why and exit with automake's SKIP status. */
#define test_skip(...) do {						\
	printf("SKIP: ");						\
	printf(__VA_ARGS__);						\
	putchar('\n');							\
	exit(77);							\
} while (0)

/*
 * DIR/NAME in one of 8 buffers used in turn, so that one call (a rename,
 * a copy) may take several paths made this way.
 */
static inline const char *test_path(const char *dir, const char *name)
{
	static char buf[8][512];
	static int k;

	k = (k + 1) % 8;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
	return buf[k];
}

/*
 * Uniform in [0, 1) from the xorshift64 generator whose state is *rng: the
 * same seed gives the same sequence on every machine.
 */
static inline double test_urand(uint64_t *rng)
{
	*rng ^= *rng << 13;
	*rng ^= *rng >> 7;
	*rng ^= *rng << 17;
	return (double)(*rng >> 11) * (1.0 / 9007199254740992.0);
}

/* Directory of ../shared/data, or NULL when absent. */
static inline const char *test_shared_data(void)
{
	const char *d = getenv("SHARED_DATA");
	static char buf[4096];
	FILE *f;

	if (d == NULL)
		return NULL;
	snprintf(buf, sizeof buf, "%s/SOURCES.md", d);
	f = fopen(buf, "r");
	if (f == NULL)
		return NULL;
	fclose(f);
	return d;
}

#endif
