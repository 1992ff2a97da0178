/*
 * test_core: the core module's strict number parsers (whole string,
 * range, overflow, the size multipliers, seeds), also over the widest
 * ranges the settings table (conv/settings.c) gives them.
 */
#include "gguf/gguf.h"
#include "config.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/kvc.h"
#include "test.h"

static void
test_long(void)
{
	long v;

	test_cond(kvc_parse_long("42", 0, 100, &v) == KVC_OK && v == 42, "42");
	test_cond(kvc_parse_long("-7", -10, 10, &v) == KVC_OK && v == -7, "-7");
	test_cond(kvc_parse_long("+3", 0, 10, &v) == KVC_OK && v == 3, "+3");
	test_cond(kvc_parse_long(" 5", 0, 10, &v) == KVC_OK && v == 5, "leading space as strtol");
	test_cond(kvc_parse_long("0", 0, 0, &v) == KVC_OK && v == 0, "lo == hi");
	test_cond(kvc_parse_long("16", 16, 32, &v) == KVC_OK && v == 16, "lo is in range");
	test_cond(kvc_parse_long("32", 16, 32, &v) == KVC_OK && v == 32, "hi is in range");
	v = 1234;
	test_cond(kvc_parse_long("15", 16, 32, &v) == KVC_ERANGE && v == 1234, "below lo");
	test_cond(kvc_parse_long("33", 16, 32, &v) == KVC_ERANGE && v == 1234, "above hi");
	test_cond(kvc_parse_long("99999999999999999999999", 0, 10, &v) == KVC_ERANGE,
	    "overflow");
	test_cond(kvc_parse_long("-99999999999999999999999", -10, 0, &v) == KVC_ERANGE,
	    "negative overflow");
	test_cond(kvc_parse_long("", 0, 10, &v) == KVC_EINVAL, "empty");
	test_cond(kvc_parse_long("abc", 0, 10, &v) == KVC_EINVAL, "letters");
	test_cond(kvc_parse_long("12x", 0, 100, &v) == KVC_EINVAL, "trailing letter");
	test_cond(kvc_parse_long("5 ", 0, 10, &v) == KVC_EINVAL, "trailing space");
	test_cond(kvc_parse_long("1.5", 0, 10, &v) == KVC_EINVAL, "a fraction");
	test_cond(kvc_parse_long("-", -10, 10, &v) == KVC_EINVAL, "a sign alone");
	test_cond(v == 1234, "untouched on failure");
}

static void
test_double(void)
{
	double d;

	test_cond(kvc_parse_double("0.8", 0, 2, &d) == KVC_OK && d == 0.8, "0.8");
	test_cond(kvc_parse_double("1e3", 0, 1e4, &d) == KVC_OK && d == 1000, "1e3");
	test_cond(kvc_parse_double("-2.5", -FLT_MAX, FLT_MAX, &d) == KVC_OK && d == -2.5, "-2.5");
	test_cond(kvc_parse_double("0", 0, 1, &d) == KVC_OK && d == 0, "lo");
	test_cond(kvc_parse_double("1", 0, 1, &d) == KVC_OK && d == 1, "hi");
	d = 7;
	test_cond(kvc_parse_double("1.01", 0, 1, &d) == KVC_ERANGE && d == 7, "above hi");
	test_cond(kvc_parse_double("nan", -FLT_MAX, FLT_MAX, &d) == KVC_ERANGE, "NaN");
	test_cond(kvc_parse_double("inf", -FLT_MAX, FLT_MAX, &d) == KVC_ERANGE, "inf");
	test_cond(kvc_parse_double("1e999", -DBL_MAX, DBL_MAX, &d) == KVC_ERANGE, "overflow");
	test_cond(kvc_parse_double("1e-999", -1, 1, &d) == KVC_ERANGE, "underflow");
	test_cond(kvc_parse_double("", 0, 1, &d) == KVC_EINVAL, "empty");
	test_cond(kvc_parse_double(".", 0, 1, &d) == KVC_EINVAL, "a dot");
	test_cond(kvc_parse_double("0.5x", 0, 1, &d) == KVC_EINVAL, "trailing letter");
	test_cond(kvc_parse_double("0.5 ", 0, 1, &d) == KVC_EINVAL, "trailing space");
	test_cond(d == 7, "untouched on failure");
}

static void
test_size(void)
{
	static const struct {
		const char *s;
		size_t want;
	} ok[] = {
		{ "0", 0 }, { "4096", 4096 }, { "1k", 1024 },
		{ "64kB", 65536 }, { "1K", 1024 }, { "512M", 512ull << 20 },
		{ "1Mi", 1ull << 20 }, { "2G", 2ull << 30 }, { "2GiB", 2ull << 30 },
		{ "1.5G", 3ull << 29 }, { "1T", 1ull << 40 }, { "0.5k", 512 },
		{ "1000.9", 1000 },
	};
	static const struct {
		const char *s;
		int rc;
	} bad[] = {
		{ "", KVC_EINVAL }, { "M", KVC_EINVAL }, { "1X", KVC_EINVAL },
		{ "1MiBx", KVC_EINVAL }, { "1 M", KVC_EINVAL }, { "1Bi", KVC_EINVAL },
		{ "1MM", KVC_EINVAL }, { "4096B", KVC_EINVAL }, { "-1", KVC_ERANGE }, { "-1G", KVC_ERANGE },
		{ "nan", KVC_ERANGE }, { "inf", KVC_ERANGE }, { "1e30", KVC_ERANGE },
		{ "16777216T", KVC_ERANGE }, { "1e999", KVC_ERANGE },
	};
	size_t z;

	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		z = 1;
		test_cond(kvc_parse_size(ok[i].s, &z) == KVC_OK && z == ok[i].want,
		    "'%s': %zu", ok[i].s, z);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		z = 1;
		test_cond(kvc_parse_size(bad[i].s, &z) == bad[i].rc && z == 1, "'%s'", bad[i].s);
	}
}

static void
test_seed(void)
{
	uint64_t s;

	test_cond(kvc_parse_seed("0", &s) == KVC_OK && s == 0, "0");
	test_cond(kvc_parse_seed("42", &s) == KVC_OK && s == 42, "42");
	test_cond(kvc_parse_seed("18446744073709551615", &s) == KVC_OK && s == UINT64_MAX,
	    "2^64 - 1");
	test_cond(kvc_parse_seed("9007199254740993", &s) == KVC_OK && s == 9007199254740993ull,
	    "past a double's precision");
	s = 5;
	test_cond(kvc_parse_seed("18446744073709551616", &s) == KVC_ERANGE, "2^64");
	test_cond(kvc_parse_seed("-1", &s) == KVC_ERANGE, "-1");
	test_cond(kvc_parse_seed(" -1", &s) == KVC_ERANGE, "' -1'");
	test_cond(kvc_parse_seed("-", &s) == KVC_EINVAL, "a minus alone");
	test_cond(kvc_parse_seed("", &s) == KVC_EINVAL, "empty");
	test_cond(kvc_parse_seed("random", &s) == KVC_EINVAL, "a word");
	test_cond(kvc_parse_seed("12 ", &s) == KVC_EINVAL, "trailing space");
	test_cond(kvc_parse_seed("1.0", &s) == KVC_EINVAL, "a fraction");
	test_cond(s == 5, "untouched on failure");
}

/*
 * The ranges of conv_setting_table: a real takes any number but NaN
 * (infinities included), an int any int; a seed a leading '+' or blank as
 * strtoull does.
 */
static void
test_setting_ranges(void)
{
	double d;
	long v;
	uint64_t s;

	test_cond(kvc_parse_double("inf", -HUGE_VAL, HUGE_VAL, &d) == KVC_OK && d == HUGE_VAL,
	    "inf in the widest range");
	test_cond(kvc_parse_double("-inf", -HUGE_VAL, HUGE_VAL, &d) == KVC_OK && d == -HUGE_VAL,
	    "-inf in the widest range");
	test_cond(kvc_parse_double("1e300", -HUGE_VAL, HUGE_VAL, &d) == KVC_OK && d == 1e300,
	    "past a float's range");
	test_cond(kvc_parse_double("0x1p-2", -HUGE_VAL, HUGE_VAL, &d) == KVC_OK && d == 0.25,
	    "hexadecimal, as strtod");
	d = 7;
	test_cond(kvc_parse_double("nan", -HUGE_VAL, HUGE_VAL, &d) == KVC_ERANGE && d == 7,
	    "NaN is out of even the widest range");
	test_cond(kvc_parse_double("1e999", -HUGE_VAL, HUGE_VAL, &d) == KVC_ERANGE && d == 7,
	    "overflow is an error, not infinity");
	test_cond(kvc_parse_long("2147483647", INT_MIN, INT_MAX, &v) == KVC_OK && v == INT_MAX,
	    "INT_MAX");
	test_cond(kvc_parse_long("-2147483648", INT_MIN, INT_MAX, &v) == KVC_OK && v == INT_MIN,
	    "INT_MIN");
	test_cond(kvc_parse_long("2147483648", INT_MIN, INT_MAX, &v) == KVC_ERANGE, "INT_MAX + 1");
	test_cond(kvc_parse_long("-1", 0, INT_MAX, &v) == KVC_ERANGE, "-1 below 0");
	test_cond(kvc_parse_long("1e3", INT_MIN, INT_MAX, &v) == KVC_EINVAL, "1e3 is no integer");
	test_cond(kvc_parse_seed("+7", &s) == KVC_OK && s == 7, "+7");
	test_cond(kvc_parse_seed(" 7", &s) == KVC_OK && s == 7, "' 7'");
	test_cond(kvc_parse_seed("--1", &s) == KVC_EINVAL, "--1");
}

int
main(void)
{
	test_long();
	test_double();
	test_size();
	test_seed();
	test_setting_ranges();
	return test_done();
}
