/*
 * value.c: the renderer's values and the Python semantics templates rely on:
 * truthiness, == (1 == 1.0 == True), ordering, str() and repr() (what
 * {{ value }} prints, lists and dicts included), and UTF-8 code points
 * (Python strings count characters, not bytes).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

struct jj_str *
jj_str_new(struct jj_arena *a, struct jj_fail *f, const char *p, size_t n)
{
	if (n > a->limit)
		jj_failf(f, KVC_ERANGE, 0, 0, "template needs more than %zu bytes of memory", a->limit);
	struct jj_str *s = jj_alloc(a, f, sizeof(*s) + n + 1);

	s->n = n;
	if (n)
		memcpy(s->p, p, n);
	s->p[n] = '\0';
	return s;
}

struct jj_val
jv_str(struct jj_rt *rt, const char *p, size_t n)
{
	struct jj_val v = { .t = JV_STR };

	v.u.s = jj_str_new(&rt->arena, rt->fail, p, n);
	return v;
}

struct jj_val
jv_cstr(struct jj_rt *rt, const char *p)
{
	return jv_str(rt, p, strlen(p));
}

struct jj_val
jv_list(struct jj_rt *rt, size_t cap)
{
	struct jj_val v = { .t = JV_LIST };

	v.u.l = jj_rt_alloc(rt, sizeof(*v.u.l));
	if (cap) {
		v.u.l->v = jj_rt_alloc(rt, cap * sizeof(struct jj_val));
		v.u.l->cap = cap;
	}
	return v;
}

struct jj_val
jv_dict(struct jj_rt *rt, enum jj_type t)
{
	struct jj_val v = { .t = t };

	v.u.d = jj_rt_alloc(rt, sizeof(*v.u.d));
	return v;
}

void
jj_list_push(struct jj_rt *rt, struct jj_list *l, struct jj_val v)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		struct jj_val *nv = jj_rt_alloc(rt, cap * sizeof(*nv));

		if (l->n)
			memcpy(nv, l->v, l->n * sizeof(*nv));
		l->v = nv;	/* the old array stays in the arena until the render ends */
		l->cap = cap;
	}
	l->v[l->n++] = v;
}

struct jj_val *
jj_dict_get(const struct jj_dict *d, const char *k, size_t kn)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i]->n == kn && memcmp(d->k[i]->p, k, kn) == 0)
			return &d->v[i];
	return NULL;
}

void
jj_dict_set(struct jj_rt *rt, struct jj_dict *d, const char *k, size_t kn, struct jj_val v)
{
	struct jj_val *old = jj_dict_get(d, k, kn);

	if (old) {
		*old = v;
		return;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 8;
		struct jj_str **nk = jj_rt_alloc(rt, cap * sizeof(*nk));
		struct jj_val *nv = jj_rt_alloc(rt, cap * sizeof(*nv));

		if (d->n) {
			memcpy(nk, d->k, d->n * sizeof(*nk));
			memcpy(nv, d->v, d->n * sizeof(*nv));
		}
		d->k = nk;
		d->v = nv;
		d->cap = cap;
	}
	/* A dict emptied for reuse (a loop's frame) keeps its key strings:
	 * the same names in the same order cost nothing the next time. */
	if (!d->k[d->n] || d->k[d->n]->n != kn || memcmp(d->k[d->n]->p, k, kn) != 0)
		d->k[d->n] = jj_str_new(&rt->arena, rt->fail, k, kn);
	d->v[d->n++] = v;
}

/*
 * A JSON tree as Python's json.loads makes it: a number written as an
 * integer stays an int (jansson keeps the two apart as json.loads does),
 * any other a float; object members in their order.
 */
struct jj_val
jv_from_json(struct jj_rt *rt, const json_t *j)
{
	struct jj_val v;
	const char *key;
	size_t i;
	json_t *kid;

	switch (json_typeof(j)) {
	case JSON_NULL: return jv_none();
	case JSON_TRUE: return jv_bool(true);
	case JSON_FALSE: return jv_bool(false);
	case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
	case JSON_REAL: return jv_float(json_real_value(j));
	case JSON_STRING: return jv_str(rt, json_string_value(j), json_string_length(j));
	case JSON_ARRAY:
		v = jv_list(rt, json_array_size(j));
		json_array_foreach(j, i, kid)
			jj_list_push(rt, v.u.l, jv_from_json(rt, kid));
		return v;
	case JSON_OBJECT:
		v = jv_dict(rt, JV_DICT);
		/* jansson's foreach takes a non-const object (it does not change it);
		 * its keys hold no NUL (a document with one is refused) */
		json_object_foreach((json_t *)j, key, kid)
			jj_dict_set(rt, v.u.d, key, strlen(key), jv_from_json(rt, kid));
		return v;
	}
	return jv_none();
}

bool
jv_truthy(struct jj_val v)
{
	switch (v.t) {
	case JV_UNDEF: case JV_NONE: return false;
	case JV_BOOL: return v.u.b;
	case JV_INT: return v.u.i != 0;
	case JV_FLOAT: return v.u.f != 0.0;
	case JV_STR: return v.u.s->n > 0;
	case JV_LIST: return v.u.l->n > 0;
	case JV_DICT: return v.u.d->n > 0;
	default: return true;
	}
}

bool
jv_is_num(struct jj_val v)
{
	return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

double
jv_num(struct jj_val v)
{
	return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b ? 1.0 : 0.0;
}

static bool
dict_equal(const struct jj_dict *a, const struct jj_dict *b)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++) {
		struct jj_val *o = jj_dict_get(b, a->k[i]->p, a->k[i]->n);

		if (!o || !jv_equal(a->v[i], *o))
			return false;
	}
	return true;
}

bool
jv_equal(struct jj_val a, struct jj_val b)
{
	if (jv_is_num(a) && jv_is_num(b)) {
		if (a.t != JV_FLOAT && b.t != JV_FLOAT)
			return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
		return jv_num(a) == jv_num(b);
	}
	if (a.t != b.t)
		return false;
	switch (a.t) {
	case JV_UNDEF: case JV_NONE: return true;
	case JV_STR: return a.u.s->n == b.u.s->n && memcmp(a.u.s->p, b.u.s->p, a.u.s->n) == 0;
	case JV_LIST:
		if (a.u.l->n != b.u.l->n)
			return false;
		for (size_t i = 0; i < a.u.l->n; i++)
			if (!jv_equal(a.u.l->v[i], b.u.l->v[i]))
				return false;
		return true;
	case JV_DICT: return dict_equal(a.u.d, b.u.d);
	case JV_NS: return a.u.d == b.u.d;
	case JV_MACRO: return a.u.m == b.u.m;
	case JV_LOOP: return a.u.loop == b.u.loop;
	case JV_FUNC: return a.u.fn == b.u.fn;
	default: return false;
	}
}

int
jv_compare(struct jj_rt *rt, struct jj_val a, struct jj_val b)
{
	if (jv_is_num(a) && jv_is_num(b)) {
		if (a.t == JV_INT && b.t == JV_INT)
			return (a.u.i > b.u.i) - (a.u.i < b.u.i);
		double x = jv_num(a), y = jv_num(b);

		return (x > y) - (x < y);
	}
	if (a.t == JV_STR && b.t == JV_STR) {
		/* UTF-8 byte order is code point order, Python's. */
		size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
		int c = n ? memcmp(a.u.s->p, b.u.s->p, n) : 0;

		if (c)
			return c;
		return (a.u.s->n > b.u.s->n) - (a.u.s->n < b.u.s->n);
	}
	if (a.t == JV_LIST && b.t == JV_LIST) {
		for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
			if (jv_equal(a.u.l->v[i], b.u.l->v[i]))
				continue;
			return jv_compare(rt, a.u.l->v[i], b.u.l->v[i]);
		}
		return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
	}
	jj_rt_fail(rt, KVC_EFORMAT, "'<' not supported between instances of '%s' and '%s'",
		   jv_type_name(a), jv_type_name(b));
}

const char *
jv_type_name(struct jj_val v)
{
	static const char *const names[] = {
		[JV_UNDEF] = "Undefined", [JV_NONE] = "NoneType", [JV_BOOL] = "bool",
		[JV_INT] = "int", [JV_FLOAT] = "float", [JV_STR] = "str", [JV_LIST] = "list",
		[JV_DICT] = "dict", [JV_NS] = "Namespace", [JV_MACRO] = "Macro",
		[JV_LOOP] = "LoopContext", [JV_FUNC] = "function",
	};
	return names[v.t];
}

void
jj_sb_add(struct jj_rt *rt, struct jj_sb *b, const void *p, size_t n)
{
	size_t max = b->max ? b->max : rt->arena.limit;

	if (n > max || b->n > max - n)
		jj_rt_fail(rt, KVC_ERANGE, "template output is over %zu bytes", max);
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;

		while (cap < b->n + n + 1)
			cap *= 2;
		char *np = jj_rt_alloc(rt, cap);

		if (b->n)
			memcpy(np, b->p, b->n);
		b->p = np;	/* the old one stays in the arena until the render ends */
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
	b->p[b->n] = '\0';
}

struct jj_val
jj_sb_val(struct jj_rt *rt, const struct jj_sb *b)
{
	return jv_str(rt, b->p ? b->p : "", b->n);
}

/*
 * Python's repr(float): the shortest of %.1g .. %.17g that reads back as the
 * same double, in exponent form below 1e-4 and from 1e16 up, with ".0" added
 * to a whole number.
 */
void
jj_float_repr(char *buf, size_t len, double f)
{
	if (isnan(f)) {
		snprintf(buf, len, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(buf, len, f < 0 ? "-inf" : "inf");
		return;
	}
	char tmp[40];
	int prec;

	for (prec = 1; prec < 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
		if (strtod(tmp, NULL) == f)
			break;
	}
	snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
	/* tmp = [-]d[.ddd]e[+-]XX: digits and exponent, then Python's layout. */
	char digits[24];
	size_t nd = 0;
	const char *p = tmp;
	bool neg = *p == '-';

	if (neg)
		p++;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			digits[nd++] = *p;
	digits[nd] = '\0';
	int exp = atoi(p + 1);
	char out[64];
	size_t o = 0;

	if (neg)
		out[o++] = '-';
	if (exp < -4 || exp >= 16) {
		out[o++] = digits[0];
		if (nd > 1) {
			out[o++] = '.';
			memcpy(out + o, digits + 1, nd - 1);
			o += nd - 1;
		}
		o += (size_t)snprintf(out + o, sizeof(out) - o, "e%c%02d", exp < 0 ? '-' : '+',
				      exp < 0 ? -exp : exp);
	} else if (exp < 0) {
		out[o++] = '0';
		out[o++] = '.';
		for (int k = 0; k < -exp - 1; k++)
			out[o++] = '0';
		memcpy(out + o, digits, nd);
		o += nd;
	} else {
		for (int k = 0; k <= exp; k++)
			out[o++] = (size_t)k < nd ? digits[k] : '0';
		out[o++] = '.';
		if ((size_t)exp + 1 < nd) {
			memcpy(out + o, digits + exp + 1, nd - (size_t)exp - 1);
			o += nd - (size_t)exp - 1;
		} else {
			out[o++] = '0';
		}
	}
	out[o] = '\0';
	snprintf(buf, len, "%s", out);
}

/* Python's repr of a string: single quotes unless it holds ' and no ". */
static void
str_repr(struct jj_rt *rt, struct jj_sb *b, const struct jj_str *s)
{
	char q = memchr(s->p, '\'', s->n) && !memchr(s->p, '"', s->n) ? '"' : '\'';

	jj_sb_add(rt, b, &q, 1);
	for (size_t i = 0; i < s->n; i++) {
		unsigned char c = (unsigned char)s->p[i];
		char esc[8];

		if (c == (unsigned char)q || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			jj_sb_add(rt, b, esc, 2);
		} else if (c == '\n' || c == '\r' || c == '\t') {
			esc[0] = '\\';
			esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
			jj_sb_add(rt, b, esc, 2);
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(esc, sizeof(esc), "\\x%02x", c);
			jj_sb_add(rt, b, esc, 4);
		} else {
			jj_sb_add(rt, b, &s->p[i], 1);
		}
	}
	jj_sb_add(rt, b, &q, 1);
}

static void
scalar_to(struct jj_rt *rt, struct jj_sb *b, struct jj_val v)
{
	char num[64];

	switch (v.t) {
	case JV_NONE: jj_sb_add(rt, b, "None", 4); return;
	case JV_BOOL: jj_sb_add(rt, b, v.u.b ? "True" : "False", v.u.b ? 4 : 5); return;
	case JV_INT:
		snprintf(num, sizeof(num), "%lld", (long long)v.u.i);
		jj_sb_add(rt, b, num, strlen(num));
		return;
	case JV_FLOAT:
		jj_float_repr(num, sizeof(num), v.u.f);
		jj_sb_add(rt, b, num, strlen(num));
		return;
	default:
		snprintf(num, sizeof(num), "<%s object>", jv_type_name(v));
		jj_sb_add(rt, b, num, strlen(num));
	}
}

void
jv_repr_to(struct jj_rt *rt, struct jj_sb *b, struct jj_val v)
{
	switch (v.t) {
	case JV_STR:
		str_repr(rt, b, v.u.s);
		return;
	case JV_LIST:
		jj_sb_add(rt, b, "[", 1);
		for (size_t i = 0; i < v.u.l->n; i++) {
			if (i)
				jj_sb_add(rt, b, ", ", 2);
			jv_repr_to(rt, b, v.u.l->v[i]);
		}
		jj_sb_add(rt, b, "]", 1);
		return;
	case JV_DICT:
	case JV_NS:
		if (v.t == JV_NS)
			jj_sb_add(rt, b, "<Namespace ", 11);
		jj_sb_add(rt, b, "{", 1);
		for (size_t i = 0; i < v.u.d->n; i++) {
			struct jj_val k = { .t = JV_STR };

			k.u.s = v.u.d->k[i];
			if (i)
				jj_sb_add(rt, b, ", ", 2);
			str_repr(rt, b, k.u.s);
			jj_sb_add(rt, b, ": ", 2);
			jv_repr_to(rt, b, v.u.d->v[i]);
		}
		jj_sb_add(rt, b, v.t == JV_NS ? "}>" : "}", v.t == JV_NS ? 2 : 1);
		return;
	case JV_UNDEF:
		return;
	default:
		scalar_to(rt, b, v);
	}
}

void
jv_str_to(struct jj_rt *rt, struct jj_sb *b, struct jj_val v)
{
	if (v.t == JV_STR)
		jj_sb_add(rt, b, v.u.s->p, v.u.s->n);
	else
		jv_repr_to(rt, b, v);
}

struct jj_val
jv_to_str(struct jj_rt *rt, struct jj_val v)
{
	if (v.t == JV_STR)
		return v;
	struct jj_sb b = {0};

	jv_str_to(rt, &b, v);
	return jj_sb_val(rt, &b);
}

size_t
jj_u8_count(const char *s, size_t n)
{
	size_t c = 0;

	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

size_t
jj_u8_offset(const char *s, size_t n, size_t k)
{
	size_t i = 0;

	while (i < n && k > 0) {
		i++;
		while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80)
			i++;
		k--;
	}
	return i;
}

uint32_t
jj_u8_decode(const char *s, size_t n, size_t *len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t l = u[0] < 0x80 ? 1 : u[0] < 0xe0 ? 2 : u[0] < 0xf0 ? 3 : 4;
	uint32_t cp;

	if (l > n)
		l = n;
	cp = l == 1 ? u[0] : l == 2 ? u[0] & 0x1fu : l == 3 ? u[0] & 0x0fu : u[0] & 0x07u;
	for (size_t i = 1; i < l; i++)
		cp = (cp << 6) | (u[i] & 0x3fu);
	*len = l;
	return cp;
}

bool
jj_is_space(uint32_t cp)
{
	return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 ||
	       cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
	       cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}
