/*
 * parse.c: strict number parsers for command-line and /command values:
 * integers, reals, sizes with a multiplier, 64-bit seeds.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kvc.h"

int
kvc_parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (end == s || *end != '\0')
		return KVC_EINVAL;
	if (errno != 0 || v < lo || v > hi)
		return KVC_ERANGE;
	*out = v;
	return KVC_OK;
}

int
kvc_parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0')
		return KVC_EINVAL;
	/* Written so that NaN, which compares false with everything, fails. */
	if (errno != 0 || !(v >= lo && v <= hi))
		return KVC_ERANGE;
	*out = v;
	return KVC_OK;
}

int
kvc_parse_size(const char *s, size_t *out)
{
	char *end;
	double v, mul = 1;

	errno = 0;
	v = strtod(s, &end);
	if (end == s)
		return KVC_EINVAL;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: return KVC_EINVAL;
	}
	/* "Mi", "MB" and "MiB" all mean M. */
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' && end[1] == 'B' ? 2 : 1;
	if (*end != '\0')
		return KVC_EINVAL;
	v *= mul;
	/* 2^64 is exact in a double; anything from there on does not fit a size_t. */
	if (errno != 0 || !(v >= 0 && v < (double)SIZE_MAX))
		return KVC_ERANGE;
	*out = (size_t)v;
	return KVC_OK;
}

int
kvc_parse_seed(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	/* strtoull would quietly turn "-1" into 2^64 - 1. */
	if (strchr(s, '-') != NULL) {
		errno = 0;
		(void)strtoull(s, &end, 10);
		return end != s && *end == '\0' ? KVC_ERANGE : KVC_EINVAL;
	}
	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || *end != '\0')
		return KVC_EINVAL;
	if (errno != 0)
		return KVC_ERANGE;
#if ULLONG_MAX > UINT64_MAX
	if (v > UINT64_MAX)
		return KVC_ERANGE;
#endif
	*out = (uint64_t)v;
	return KVC_OK;
}
