/* util.c: error strings, clock, growable buffers, UTF-8 validation. */
#include "kvc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

const char *
kvc_strerror(int code)
{
	switch (code) {
	case KVC_OK: return "ok";
	case KVC_ENOMEM: return "out of memory";
	case KVC_EIO: return "input/output error";
	case KVC_EFORMAT: return "format error";
	case KVC_EUNSUPPORTED: return "not supported";
	case KVC_EINVAL: return "invalid argument";
	case KVC_ERANGE: return "out of range";
	case KVC_EBUSY: return "busy";
	case KVC_EINTR: return "interrupted";
	case KVC_ECORRUPT: return "corrupt data";
	case KVC_ENOTFOUND: return "not found";
	}
	return "unknown error";
}

void
kvc_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

double
kvc_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int
kvc_buf_reserve(struct kvc_buf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	/* +1 keeps room for a terminating NUL. */
	if (!kvc_add_ok(b->n, extra, &need) || !kvc_add_ok(need, 1, &need))
		return KVC_ENOMEM;
	if (need <= b->cap)
		return KVC_OK;
	cap = b->cap ? b->cap : 64;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			return KVC_ENOMEM;
		cap *= 2;
	}
	p = realloc(b->p, cap);
	if (p == NULL)
		return KVC_ENOMEM;
	b->p = p;
	b->cap = cap;
	return KVC_OK;
}

int
kvc_buf_append(struct kvc_buf *b, const void *data, size_t len)
{
	if (kvc_buf_reserve(b, len) != KVC_OK)
		return KVC_ENOMEM;
	if (len)
		memcpy(b->p + b->n, data, len);
	b->n += len;
	b->p[b->n] = '\0';
	return KVC_OK;
}

int
kvc_buf_printf(struct kvc_buf *b, const char *fmt, ...)
{
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (len < 0)
		return KVC_EINVAL;
	if (kvc_buf_reserve(b, (size_t)len) != KVC_OK)
		return KVC_ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->p + b->n, (size_t)len + 1, fmt, ap);
	va_end(ap);
	b->n += (size_t)len;
	return KVC_OK;
}

void
kvc_buf_free(struct kvc_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
}

int
kvc_tokens_push(struct kvc_tokens *t, int32_t id)
{
	return kvc_tokens_append(t, &id, 1);
}

int
kvc_tokens_append(struct kvc_tokens *t, const int32_t *ids, size_t n)
{
	size_t need, cap, bytes;
	int32_t *v;

	if (!kvc_add_ok(t->n, n, &need))
		return KVC_ENOMEM;
	if (need > t->cap) {
		cap = t->cap ? t->cap : 64;
		while (cap < need) {
			if (cap > SIZE_MAX / 2)
				return KVC_ENOMEM;
			cap *= 2;
		}
		if (!kvc_mul_ok(cap, sizeof *v, &bytes))
			return KVC_ENOMEM;
		v = realloc(t->v, bytes);
		if (v == NULL)
			return KVC_ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	if (n)
		memcpy(t->v + t->n, ids, n * sizeof *ids);
	t->n += n;
	return KVC_OK;
}

void
kvc_tokens_free(struct kvc_tokens *t)
{
	free(t->v);
	t->v = NULL;
	t->n = t->cap = 0;
}

size_t
kvc_utf8_valid_prefix(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	while (i < n) {
		unsigned c = s[i];
		size_t len;
		uint32_t cp;

		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xc2 && c <= 0xdf) {
			len = 2; cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			len = 3; cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			len = 4; cp = c & 0x07;
		} else
			return i;
		if (n - i < len)
			return i;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		/* Reject overlongs, surrogates and values past U+10FFFF. */
		if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
		    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
			return i;
		i += len;
	}
	return i;
}

/*
 * The one probe of the CPU's instruction sets (docs/ARCHITECTURE.md: the
 * kernel tables of src/kern are chosen from it once, at backend init):
 * CPUID on x86, the kernel's HWCAP bits on aarch64.
 * clang 14 rejects __builtin_cpu_supports("f16c"), so F16C is read from
 * CPUID leaf 1 (ECX bit 29) directly; the others through the builtin both
 * compilers accept (it also checks that the OS saves the YMM/ZMM registers).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static unsigned
probe_cpu(void)
{
	unsigned a, b, c, d, f = 0;

	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		return 0;
	if (!__get_cpuid(1, &a, &b, &c, &d) || (c & (1u << 29)) == 0)
		return 0;
	f |= KVC_CPU_AVX2;
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni"))
		f |= KVC_CPU_AVX512;
	/* AVX-VNNI: CPUID leaf 7, sub-leaf 1, EAX bit 4 */
	if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0)
		f |= KVC_CPU_AVXVNNI;
	return f;
}
#elif defined(__aarch64__)
/*
 * The kernel reports what it lets user space run in AT_HWCAP (the bit
 * numbers are the Linux ABI's; spelled out where an old libc lacks them).
 */
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif
static unsigned
probe_cpu(void)
{
	unsigned long hw = getauxval(AT_HWCAP);
	unsigned f = 0;

	if ((hw & HWCAP_ASIMD) == 0)
		return 0;
	f |= KVC_CPU_NEON;
	if ((hw & HWCAP_ASIMDDP) != 0)
		f |= KVC_CPU_DOTPROD;
	return f;
}
#else
static unsigned
probe_cpu(void)
{
	return 0;
}
#endif

/*
 * CPUID is slow (a VM exit under a hypervisor), so the answer is probed
 * once and kept: a fact of the machine, the same for every thread; a race
 * only stores it twice.
 */
unsigned
kvc_cpu_features(void)
{
	static int known = -1;	/* -1 not probed yet, else the bits */
	int v = __atomic_load_n(&known, __ATOMIC_RELAXED);

	if (v < 0) {
		v = (int)probe_cpu();
		__atomic_store_n(&known, v, __ATOMIC_RELAXED);
	}
	return (unsigned)v;
}

/* The CPUs this process may run on (its affinity mask), else those online. */
int
kvc_n_cores(void)
{
	cpu_set_t set;
	long n;

	if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}
