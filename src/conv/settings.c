/*
 * settings.c: the per-conversation settings: the one table of them
 * (conv_setting_table) and their text form, the one the store keeps
 * ("temp=0.8;top_p=0.95;...").
 */
#include "config.h"

#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"

#define AT(member) offsetof(struct conv_settings, member)

/*
 * The ranges are the values the sampler gives a meaning to; everything that
 * reads a setting (the command line, /set, kvchat generate, the stored
 * text) refuses the rest by this table. A real's upper end is FLT_MAX since
 * it is stored as a float ("inf" is refused too).
 */
const struct conv_setting conv_setting_table[] = {
	{ "temperature", "temp", "temp", "temp", 0, "T", CONV_SET_REAL, 0, FLT_MAX, false,
	    AT(smp.temp), true, "temperature >= 0; 0 = greedy (default 0.8)" },
	{ "top_p", NULL, "top_p", "top-p", 0, "P", CONV_SET_REAL, 0, 1, true,
	    AT(smp.top_p), true, "in (0, 1] (default 0.95; 1 = off)" },
	{ "top_k", NULL, "top_k", "top-k", 0, "K", CONV_SET_INT, 0, INT_MAX, false,
	    AT(smp.top_k), true, ">= 0 (default 40; 0 = off)" },
	{ "min_p", NULL, "min_p", "min-p", 0, "P", CONV_SET_REAL, 0, 1, false,
	    AT(smp.min_p), true, "in [0, 1] (default 0.05; 0 = off)" },
	{ "repeat_penalty", NULL, "repeat_penalty", "repeat-penalty", 0, "R", CONV_SET_REAL,
	    0, FLT_MAX, true, AT(smp.repeat_penalty), true, "> 0 (default 1.1; 1 = off)" },
	{ "seed", NULL, "seed", "seed", 0, "S", CONV_SET_SEED, 0, 0, false,
	    AT(smp.seed), true, "random seed (same seed, same text)" },
	/* num_predict: ollama's name for it, so "/set parameter num_predict 64" works. */
	{ "max_tokens", "num_predict", "max_tokens", "max-tokens", 'n', "N", CONV_SET_INT, 0,
	    INT_MAX, false, AT(max_tokens), false, "cap each reply at N tokens (default: no cap)" },
};
_Static_assert(sizeof conv_setting_table / sizeof conv_setting_table[0] == CONV_N_SETTINGS,
    "CONV_N_SETTINGS counts the rows of conv_setting_table");

struct conv_settings
conv_default_settings(void)
{
	struct conv_settings s;

	s.smp = kvc_sampler_default_params();
	s.max_tokens = 0;
	return s;
}

const struct conv_setting *
conv_setting_find(const char *name)
{
	const struct conv_setting *row;

	for (row = conv_setting_table; row < conv_setting_table + CONV_N_SETTINGS; row++)
		if (strcmp(name, row->name) == 0 ||
		    (row->alias != NULL && strcmp(name, row->alias) == 0))
			return row;
	return NULL;
}

const struct conv_setting *
conv_setting_by_opt(const char *opt)
{
	const struct conv_setting *row;

	for (row = conv_setting_table; row < conv_setting_table + CONV_N_SETTINGS; row++)
		if (strcmp(opt, row->opt) == 0)
			return row;
	return NULL;
}

/* Where row's value lives in s: a float, an int or a uint64_t, by row->kind. */
static void *
field(struct conv_settings *s, const struct conv_setting *row)
{
	return (char *)s + row->off;
}

static const void *
field_of(const struct conv_settings *s, const struct conv_setting *row)
{
	return (const char *)s + row->off;
}

static size_t
field_size(const struct conv_setting *row)
{
	switch (row->kind) {
	case CONV_SET_REAL: return sizeof(float);
	case CONV_SET_INT: return sizeof(int);
	case CONV_SET_SEED: return sizeof(uint64_t);
	}
	return 0;
}

/* value as row's kind: KVC_OK (stored in s), KVC_EINVAL or KVC_ERANGE (s untouched). */
static int
parse_value(struct conv_settings *s, const struct conv_setting *row, const char *value)
{
	double d;
	long l;
	uint64_t u;
	int rc;

	switch (row->kind) {
	case CONV_SET_REAL:
		rc = kvc_parse_double(value, row->lo, row->hi, &d);
		/* Compared as stored: 1e-50 is above 0 but rounds to a float 0. */
		if (rc == KVC_OK && row->lo_open && (float)d <= (float)row->lo)
			rc = KVC_ERANGE;
		if (rc == KVC_OK)
			*(float *)field(s, row) = (float)d;
		return rc;
	case CONV_SET_INT:
		if ((rc = kvc_parse_long(value, (long)row->lo, (long)row->hi, &l)) == KVC_OK)
			*(int *)field(s, row) = (int)l;
		return rc;
	case CONV_SET_SEED:
		/* "-1" too: the way other tools ask for a random seed. */
		if (strcmp(value, "random") == 0 || strcmp(value, "-1") == 0)
			u = KVC_SEED_RANDOM;
		else if ((rc = kvc_parse_seed(value, &u)) != KVC_OK)
			return rc;
		*(uint64_t *)field(s, row) = u;
		return KVC_OK;
	}
	return KVC_EINVAL;
}

/* Whether hi is the type's own end, so only the lower bound is worth saying. */
static bool
open_above(const struct conv_setting *row)
{
	return row->kind == CONV_SET_INT ? row->hi >= INT_MAX : row->hi >= FLT_MAX;
}

void
conv_setting_range(const struct conv_setting *row, char *buf, size_t len)
{
	if (len == 0)
		return;
	if (row->kind == CONV_SET_SEED)
		buf[0] = '\0';
	else if (open_above(row))
		snprintf(buf, len, "%s %g", row->lo_open ? ">" : ">=", row->lo);
	else
		snprintf(buf, len, "in %c%g, %g]", row->lo_open ? '(' : '[', row->lo, row->hi);
}

int
conv_setting_apply(struct conv_settings *s, const struct conv_setting *row,
    const char *label, const char *value, char *err, size_t errlen)
{
	const char *random = row->kind == CONV_SET_SEED ? " (or 'random')" : "";
	char range[48];
	int rc;

	if (value == NULL)
		value = "";
	rc = parse_value(s, row, value);
	if (rc == KVC_EINVAL)
		kvc_err(err, errlen, "%s: not %s%s: '%s'", label,
		    row->kind == CONV_SET_INT ? "an integer" : "a number", random, value);
	else if (rc == KVC_ERANGE && row->kind != CONV_SET_SEED) {
		conv_setting_range(row, range, sizeof range);
		kvc_err(err, errlen, "%s: must be %s, not '%s'", label, range, value);
	} else if (rc == KVC_ERANGE)
		kvc_err(err, errlen, "%s: out of range%s: '%s'", label, random, value);
	return rc;
}

void
conv_setting_copy(struct conv_settings *dst, const struct conv_settings *src,
    const struct conv_setting *row)
{
	memcpy(field(dst, row), field_of(src, row), field_size(row));
}

int
conv_setting_text(const struct conv_settings *s, const struct conv_setting *row,
    struct kvc_buf *out)
{
	const void *v = field_of(s, row);

	switch (row->kind) {
	case CONV_SET_REAL:
		return kvc_buf_printf(out, "%g", (double)*(const float *)v);
	case CONV_SET_INT:
		return kvc_buf_printf(out, "%d", *(const int *)v);
	case CONV_SET_SEED:
		if (*(const uint64_t *)v == KVC_SEED_RANDOM)
			return kvc_buf_printf(out, "random");
		return kvc_buf_printf(out, "%" PRIu64, *(const uint64_t *)v);
	}
	return KVC_EINVAL;
}

void
conv_setting_names(char *buf, size_t len)
{
	size_t n = 0;
	int k;

	if (len == 0)
		return;
	buf[0] = '\0';
	for (int i = 0; i < CONV_N_SETTINGS && n < len; i++) {
		k = snprintf(buf + n, len - n, "%s%s", i ? ", " : "", conv_setting_table[i].name);
		if (k < 0)
			break;
		n += (size_t)k;
	}
}

int
conv_settings_format(const struct conv_settings *s, struct kvc_buf *out)
{
	int rc = 0;

	out->n = 0;
	for (int i = 0; i < CONV_N_SETTINGS && rc == 0; i++) {
		rc = kvc_buf_printf(out, "%s%s=", i ? ";" : "", conv_setting_table[i].key);
		if (rc == 0)
			rc = conv_setting_text(s, &conv_setting_table[i], out);
	}
	return rc;
}

int
conv_settings_set(struct conv_settings *s, const char *name, const char *value,
    char *err, size_t errlen)
{
	const struct conv_setting *row = conv_setting_find(name);
	char names[160];

	if (row == NULL) {
		conv_setting_names(names, sizeof names);
		kvc_err(err, errlen, "unknown setting '%s' (%s)", name, names);
		return KVC_EINVAL;
	}
	return conv_setting_apply(s, row, name, value, err, errlen);
}

/*
 * Walk text's "name=value" pairs: each is set in s (unknown names and
 * values out of range left as they were). With err, stops at the first pair
 * that cannot be read and says which: KVC_EFORMAT.
 */
static int
settings_walk(const char *text, struct conv_settings *s, char *err, size_t errlen)
{
	char name[32], value[64], why[160];
	const char *p = text, *eq, *semi;
	size_t nl, vl;

	while (p != NULL && *p != '\0') {
		semi = strchr(p, ';');
		eq = strchr(p, '=');
		vl = semi ? (size_t)(semi - p) : strlen(p);
		if (eq == NULL || (semi != NULL && eq > semi)) {
			if (err != NULL) {
				kvc_err(err, errlen, "'%.*s' is not name=value", (int)(vl > 40 ? 40 : vl), p);
				return KVC_EFORMAT;
			}
			goto next;
		}
		nl = (size_t)(eq - p);
		vl = semi ? (size_t)(semi - eq - 1) : strlen(eq + 1);
		if (nl >= sizeof name || vl >= sizeof value) {
			if (err != NULL) {
				kvc_err(err, errlen, "a setting of %zu bytes", nl + vl + 1);
				return KVC_EFORMAT;
			}
			goto next;
		}
		memcpy(name, p, nl);
		name[nl] = '\0';
		memcpy(value, eq + 1, vl);
		value[vl] = '\0';
		if (conv_settings_set(s, name, value, why, sizeof why) != KVC_OK && err != NULL) {
			kvc_err(err, errlen, "%s", why);
			return KVC_EFORMAT;
		}
next:
		p = semi ? semi + 1 : NULL;
	}
	return KVC_OK;
}

void
conv_settings_parse(const char *text, struct conv_settings *s)
{
	(void)settings_walk(text, s, NULL, 0);
}

int
conv_settings_check(const char *text, char *err, size_t errlen)
{
	struct conv_settings s = conv_default_settings();

	if (text == NULL) {
		kvc_err(err, errlen, "no settings text");
		return KVC_EFORMAT;
	}
	if (kvc_utf8_valid_prefix(text, strlen(text)) != strlen(text)) {
		kvc_err(err, errlen, "the settings text is not valid UTF-8");
		return KVC_EFORMAT;
	}
	return settings_walk(text, &s, err, errlen);
}
