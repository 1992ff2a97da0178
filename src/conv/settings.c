/*
 * settings.c: the per-conversation settings: the one table of them
 * (conv_setting_table) and their text form, the one the store keeps
 * ("temp=0.8;top_p=0.95;...").
 */
#include "config.h"

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
 * The ranges take every value that /set or the command line took before
 * this table joined them (the wider of the two); narrowing them is a change
 * of its own. So a real is any number but NaN (stored as a float: beyond
 * FLT_MAX it is infinite), top_k any int, max_tokens any int >= 0.
 */
const struct conv_setting conv_setting_table[] = {
	{ "temperature", "temp", "temp", "temp", 0, "T", CONV_SET_REAL, -HUGE_VAL, HUGE_VAL,
	    AT(smp.temp), true, "temperature; 0 = greedy (default 0.8)" },
	{ "top_p", NULL, "top_p", "top-p", 0, "P", CONV_SET_REAL, -HUGE_VAL, HUGE_VAL,
	    AT(smp.top_p), true, "(default 0.95; 1 = off)" },
	{ "top_k", NULL, "top_k", "top-k", 0, "K", CONV_SET_INT, INT_MIN, INT_MAX,
	    AT(smp.top_k), true, "(default 40; 0 = off)" },
	{ "min_p", NULL, "min_p", "min-p", 0, "P", CONV_SET_REAL, -HUGE_VAL, HUGE_VAL,
	    AT(smp.min_p), true, "(default 0.05; 0 = off)" },
	{ "repeat_penalty", NULL, "repeat_penalty", "repeat-penalty", 0, "R", CONV_SET_REAL,
	    -HUGE_VAL, HUGE_VAL, AT(smp.repeat_penalty), true, "(default 1.1; 1 = off)" },
	{ "seed", NULL, "seed", "seed", 0, "S", CONV_SET_SEED, 0, 0,
	    AT(smp.seed), true, "random seed (same seed, same text)" },
	{ "max_tokens", NULL, "max_tokens", "max-tokens", 'n', "N", CONV_SET_INT, 0, INT_MAX,
	    AT(max_tokens), false, "cap each reply at N tokens (default: no cap)" },
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
		if ((rc = kvc_parse_double(value, row->lo, row->hi, &d)) == KVC_OK)
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

int
conv_setting_apply(struct conv_settings *s, const struct conv_setting *row,
    const char *label, const char *value, char *err, size_t errlen)
{
	const char *random = row->kind == CONV_SET_SEED ? " (or 'random')" : "";
	int rc;

	if (value == NULL)
		value = "";
	rc = parse_value(s, row, value);
	if (rc == KVC_EINVAL)
		kvc_err(err, errlen, "%s: not %s%s: '%s'", label,
		    row->kind == CONV_SET_INT ? "an integer" : "a number", random, value);
	else if (rc == KVC_ERANGE && row->kind == CONV_SET_INT)
		kvc_err(err, errlen, "%s: not in [%ld, %ld]: '%s'", label, (long)row->lo,
		    (long)row->hi, value);
	else if (rc == KVC_ERANGE)
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

void
conv_settings_parse(const char *text, struct conv_settings *s)
{
	char name[32], value[64];
	const char *p = text, *eq, *semi;
	size_t nl, vl;

	while (p != NULL && *p != '\0') {
		semi = strchr(p, ';');
		eq = strchr(p, '=');
		if (eq == NULL || (semi != NULL && eq > semi))
			goto next;
		nl = (size_t)(eq - p);
		vl = semi ? (size_t)(semi - eq - 1) : strlen(eq + 1);
		if (nl >= sizeof name || vl >= sizeof value)
			goto next;
		memcpy(name, p, nl);
		name[nl] = '\0';
		memcpy(value, eq + 1, vl);
		value[vl] = '\0';
		(void)conv_settings_set(s, name, value, NULL, 0);
next:
		p = semi ? semi + 1 : NULL;
	}
}
