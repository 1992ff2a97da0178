/*
 * json_out.c: the tojson filter as transformers defines it, json.dumps with
 * ensure_ascii=False by default: Python's separators (", " and ": " on one
 * line, "," and ": " with an indent), float repr, NaN/Infinity, insertion
 * order unless sort_keys.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

static void
add_str(struct jj_rt *rt, struct jj_sb *b, const char *s)
{
	jj_sb_add(rt, b, s, strlen(s));
}

static void
dump_string(struct jj_rt *rt, struct jj_sb *b, const char *s, size_t n, bool ascii)
{
	jj_sb_add(rt, b, "\"", 1);
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		char esc[16];
		const char *e = NULL;

		switch (c) {
		case '"': e = "\\\""; break;
		case '\\': e = "\\\\"; break;
		case '\n': e = "\\n"; break;
		case '\r': e = "\\r"; break;
		case '\t': e = "\\t"; break;
		case '\b': e = "\\b"; break;
		case '\f': e = "\\f"; break;
		default: break;
		}
		if (e) {
			add_str(rt, b, e);
			i++;
		} else if (c < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			add_str(rt, b, esc);
			i++;
		} else if (c >= 0x80 && ascii) {
			size_t len;
			uint32_t cp = jj_u8_decode(s + i, n - i, &len);

			if (cp >= 0x10000) {
				cp -= 0x10000;
				snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", 0xd800 + (cp >> 10),
					 0xdc00 + (cp & 0x3ff));
			} else {
				snprintf(esc, sizeof(esc), "\\u%04x", cp);
			}
			add_str(rt, b, esc);
			i += len;
		} else {
			jj_sb_add(rt, b, s + i, 1);
			i++;
		}
	}
	jj_sb_add(rt, b, "\"", 1);
}

static void
newline(struct jj_rt *rt, struct jj_sb *b, const struct jj_json_opts *o, int level)
{
	jj_sb_add(rt, b, "\n", 1);
	for (int i = 0; i < level * o->indent; i++)
		jj_sb_add(rt, b, " ", 1);
}

static void dump(struct jj_rt *rt, struct jj_sb *b, struct jj_val v,
		 const struct jj_json_opts *o, int level);

static int
key_cmp(const void *x, const void *y)
{
	const struct jj_str *a = *(struct jj_str *const *)x, *c = *(struct jj_str *const *)y;
	size_t n = a->n < c->n ? a->n : c->n;
	int r = n ? memcmp(a->p, c->p, n) : 0;

	return r ? r : (a->n > c->n) - (a->n < c->n);
}

static void
dump_dict(struct jj_rt *rt, struct jj_sb *b, const struct jj_dict *d,
	  const struct jj_json_opts *o, int level)
{
	if (d->n == 0) {
		jj_sb_add(rt, b, "{}", 2);
		return;
	}
	struct jj_str **keys = jj_rt_alloc(rt, d->n * sizeof(*keys));

	memcpy(keys, d->k, d->n * sizeof(*keys));
	if (o->sort_keys)
		qsort(keys, d->n, sizeof(*keys), key_cmp);
	jj_sb_add(rt, b, "{", 1);
	for (size_t i = 0; i < d->n; i++) {
		if (i)
			add_str(rt, b, o->item_sep);
		if (o->indent >= 0)
			newline(rt, b, o, level + 1);
		dump_string(rt, b, keys[i]->p, keys[i]->n, o->ensure_ascii);
		add_str(rt, b, o->key_sep);
		dump(rt, b, *jj_dict_get(d, keys[i]->p, keys[i]->n), o, level + 1);
	}
	if (o->indent >= 0)
		newline(rt, b, o, level);
	jj_sb_add(rt, b, "}", 1);
}

/* tojson's bound on a value's nesting: deeper is refused rather than recursed into */
#define TOJSON_DEPTH 256

static void
dump(struct jj_rt *rt, struct jj_sb *b, struct jj_val v, const struct jj_json_opts *o, int level)
{
	char num[64];

	if (level > TOJSON_DEPTH)
		jj_rt_fail(rt, KVC_ERANGE, "tojson: value nested too deeply");
	switch (v.t) {
	case JV_NONE: add_str(rt, b, "null"); return;
	case JV_BOOL: add_str(rt, b, v.u.b ? "true" : "false"); return;
	case JV_INT:
		snprintf(num, sizeof(num), "%lld", (long long)v.u.i);
		add_str(rt, b, num);
		return;
	case JV_FLOAT:
		if (isnan(v.u.f))
			snprintf(num, sizeof(num), "NaN");
		else if (isinf(v.u.f))
			snprintf(num, sizeof(num), v.u.f < 0 ? "-Infinity" : "Infinity");
		else
			jj_float_repr(num, sizeof(num), v.u.f);
		add_str(rt, b, num);
		return;
	case JV_STR: dump_string(rt, b, v.u.s->p, v.u.s->n, o->ensure_ascii); return;
	case JV_LIST:
		if (v.u.l->n == 0) {
			jj_sb_add(rt, b, "[]", 2);
			return;
		}
		jj_sb_add(rt, b, "[", 1);
		for (size_t i = 0; i < v.u.l->n; i++) {
			if (i)
				add_str(rt, b, o->item_sep);
			if (o->indent >= 0)
				newline(rt, b, o, level + 1);
			dump(rt, b, v.u.l->v[i], o, level + 1);
		}
		if (o->indent >= 0)
			newline(rt, b, o, level);
		jj_sb_add(rt, b, "]", 1);
		return;
	case JV_DICT: dump_dict(rt, b, v.u.d, o, level); return;
	default:
		jj_rt_fail(rt, KVC_EFORMAT, "tojson: Object of type %s is not JSON serializable",
			   jv_type_name(v));
	}
}

void
jj_json_dump(struct jj_rt *rt, struct jj_sb *b, struct jj_val v, const struct jj_json_opts *o)
{
	struct jj_json_opts w = *o;

	if (!w.item_sep)
		w.item_sep = w.indent >= 0 ? "," : ", ";
	if (!w.key_sep)
		w.key_sep = ": ";
	dump(rt, b, v, &w, 0);
}
