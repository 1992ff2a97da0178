/*
 * methods.c: the Python methods templates call on strings and dicts
 * (s.split(), s.strip(), d.get(), d.items(), ...), slicing, and the globals
 * Hugging Face's environment provides (range, namespace, dict,
 * raise_exception, strftime_now). Lists have no methods here: transformers
 * renders in jinja2's immutable sandbox, where append and the like fail.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "jinja/jinja_int.h"

static const char *const func_names[] = {
	[FN_RANGE] = "range", [FN_NAMESPACE] = "namespace", [FN_RAISE] = "raise_exception",
	[FN_STRFTIME] = "strftime_now", [FN_DICT] = "dict",
};

int
jj_func_find(const char *name)
{
	for (size_t i = 0; i < sizeof(func_names) / sizeof(func_names[0]); i++)
		if (strcmp(name, func_names[i]) == 0)
			return (int)i;
	return -1;
}

static int64_t
int_arg(struct jj_rt *rt, struct jj_val v, const char *what)
{
	if (v.t == JV_INT)
		return v.u.i;
	if (v.t == JV_BOOL)
		return v.u.b;
	jj_rt_fail(rt, KVC_EFORMAT, "%s: expected an integer, got %s", what, jv_type_name(v));
}

static struct jj_val
fn_range(struct jj_rt *rt, struct jj_val *args, size_t n)
{
	int64_t start = 0, stop, step = 1;

	if (n < 1 || n > 3)
		jj_rt_fail(rt, KVC_EFORMAT, "range expected 1 to 3 arguments, got %zu", n);
	if (n == 1) {
		stop = int_arg(rt, args[0], "range");
	} else {
		start = int_arg(rt, args[0], "range");
		stop = int_arg(rt, args[1], "range");
		if (n == 3)
			step = int_arg(rt, args[2], "range");
	}
	if (step == 0)
		jj_rt_fail(rt, KVC_EFORMAT, "range() arg 3 must not be zero");
	/* jinja2's sandbox refuses ranges over 100000 items (MAX_RANGE). */
	double count = step > 0 ? ((double)stop - (double)start) / (double)step :
		       ((double)start - (double)stop) / (double)-step;

	if (count > 100000)
		jj_rt_fail(rt, KVC_ERANGE, "range too big (over 100000 items)");
	struct jj_val l = jv_list(rt, count > 0 ? (size_t)count + 1 : 0);

	for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
		jj_list_push(rt, l.u.l, jv_int(i));
	return l;
}

static struct jj_val
fn_strftime(struct jj_rt *rt, int64_t now, struct jj_val *args, size_t n)
{
	if (n != 1 || args[0].t != JV_STR)
		jj_rt_fail(rt, KVC_EFORMAT, "strftime_now expects one format string");
	time_t t = (time_t)now;
	struct tm tm;
	char buf[512];

	if (!localtime_r(&t, &tm))
		jj_rt_fail(rt, KVC_EFORMAT, "strftime_now: time out of range");
	size_t len = strftime(buf, sizeof(buf), args[0].u.s->p, &tm);

	if (len == 0 && args[0].u.s->n > 0)
		jj_rt_fail(rt, KVC_EFORMAT, "strftime_now: format too long or empty result");
	return jv_str(rt, buf, len);
}

struct jj_val
jj_func_call(struct jj_rt *rt, int fn, int64_t now, struct jj_val *args, const char **kw, size_t n)
{
	size_t npos = 0;

	while (npos < n && !kw[npos])
		npos++;
	switch (fn) {
	case FN_RANGE:
		if (npos != n)
			jj_rt_fail(rt, KVC_EFORMAT, "range takes no keyword arguments");
		return fn_range(rt, args, n);
	case FN_NAMESPACE:
	case FN_DICT: {
		struct jj_val d = jv_dict(rt, fn == FN_NAMESPACE ? JV_NS : JV_DICT);

		for (size_t i = 0; i < n; i++) {
			if (!kw[i] && args[i].t == JV_DICT) {
				for (size_t k = 0; k < args[i].u.d->n; k++)
					jj_dict_set(rt, d.u.d, args[i].u.d->k[k]->p, args[i].u.d->k[k]->n,
						    args[i].u.d->v[k]);
			} else if (!kw[i]) {
				jj_rt_fail(rt, KVC_EFORMAT, "%s: positional argument is not a dict",
					   func_names[fn]);
			} else {
				jj_dict_set(rt, d.u.d, kw[i], strlen(kw[i]), args[i]);
			}
		}
		return d;
	}
	case FN_RAISE: {
		struct jj_val msg = n ? jv_to_str(rt, args[0]) : jv_cstr(rt, "");

		jj_failf(rt->fail, KVC_EINVAL, 0, 0, "template raised an error: %s", msg.u.s->p);
	}
	case FN_STRFTIME:
		return fn_strftime(rt, now, args, n);
	default:
		jj_rt_fail(rt, KVC_EFORMAT, "unknown function");
	}
}

/* ---- strings ---- */

/* Whether the code point at s is one of chars (NULL: white space). */
static bool
strip_member(const char *s, size_t n, size_t *len, const struct jj_str *chars)
{
	uint32_t cp = jj_u8_decode(s, n, len);

	if (!chars)
		return jj_is_space(cp);
	for (size_t i = 0; i < chars->n;) {
		size_t l;

		if (jj_u8_decode(chars->p + i, chars->n - i, &l) == cp)
			return true;
		i += l;
	}
	return false;
}

struct jj_val
jj_strip(struct jj_rt *rt, struct jj_val s, const struct jj_val *chars, int which)
{
	if (s.t != JV_STR)
		jj_rt_fail(rt, KVC_EFORMAT, "strip: expected a string, got %s", jv_type_name(s));
	const struct jj_str *set = chars && chars->t == JV_STR ? chars->u.s : NULL;

	if (chars && chars->t != JV_STR && chars->t != JV_NONE)
		jj_rt_fail(rt, KVC_EFORMAT, "strip arg must be None or str");
	const char *p = s.u.s->p;
	size_t a = 0, b = s.u.s->n, len;

	if (which & 1)
		while (a < b && strip_member(p + a, b - a, &len, set))
			a += len;
	if (which & 2)
		while (b > a) {
			size_t st = b - 1;

			while (st > a && ((unsigned char)p[st] & 0xc0) == 0x80)
				st--;
			if (!strip_member(p + st, b - st, &len, set))
				break;
			b = st;
		}
	if (a == 0 && b == s.u.s->n)
		return s;
	return jv_str(rt, p + a, b - a);
}

/* Python's str.split(sep=None, maxsplit=-1). */
static struct jj_val
str_split(struct jj_rt *rt, const struct jj_str *s, struct jj_val *args, size_t n)
{
	struct jj_val out = jv_list(rt, 0);
	int64_t max = n > 1 ? int_arg(rt, args[1], "split") : -1;
	size_t i = 0, len;

	if (n > 0 && args[0].t == JV_STR) {
		const struct jj_str *sep = args[0].u.s;

		if (sep->n == 0)
			jj_rt_fail(rt, KVC_EFORMAT, "split: empty separator");
		for (;;) {
			const char *hit = max != 0 ? memmem(s->p + i, s->n - i, sep->p, sep->n) : NULL;

			if (!hit)
				break;
			jj_list_push(rt, out.u.l, jv_str(rt, s->p + i, (size_t)(hit - s->p) - i));
			i = (size_t)(hit - s->p) + sep->n;
			if (max > 0)
				max--;
		}
		jj_list_push(rt, out.u.l, jv_str(rt, s->p + i, s->n - i));
		return out;
	}
	if (n > 0 && args[0].t != JV_NONE)
		jj_rt_fail(rt, KVC_EFORMAT, "split: separator must be a string or None");
	/* No separator: runs of white space, none at the ends. */
	for (;;) {
		while (i < s->n && strip_member(s->p + i, s->n - i, &len, NULL))
			i += len;
		if (i >= s->n)
			break;
		size_t st = i;

		if (max == 0) {
			size_t e = s->n;

			while (e > st) {
				size_t k = e - 1;

				while (k > st && ((unsigned char)s->p[k] & 0xc0) == 0x80)
					k--;
				if (!strip_member(s->p + k, e - k, &len, NULL))
					break;
				e = k;
			}
			jj_list_push(rt, out.u.l, jv_str(rt, s->p + st, e - st));
			break;
		}
		while (i < s->n && !strip_member(s->p + i, s->n - i, &len, NULL))
			i += len;
		jj_list_push(rt, out.u.l, jv_str(rt, s->p + st, i - st));
		if (max > 0)
			max--;
	}
	return out;
}

static struct jj_val
str_replace(struct jj_rt *rt, const struct jj_str *s, struct jj_val *args, size_t n)
{
	if (n < 2 || args[0].t != JV_STR || args[1].t != JV_STR)
		jj_rt_fail(rt, KVC_EFORMAT, "replace expects two strings");
	int64_t count = n > 2 ? int_arg(rt, args[2], "replace") : -1;
	const struct jj_str *old = args[0].u.s, *new = args[1].u.s;
	struct jj_sb b = {0};
	size_t i = 0;

	if (old->n == 0) {
		/* Python puts new between every character (and at both ends). */
		for (size_t k = 0; k <= s->n && count != 0;) {
			jj_sb_add(rt, &b, new->p, new->n);
			if (count > 0)
				count--;
			if (k == s->n)
				break;
			size_t l;

			jj_u8_decode(s->p + k, s->n - k, &l);
			jj_sb_add(rt, &b, s->p + k, l);
			k += l;
			i = k;
		}
		jj_sb_add(rt, &b, s->p + i, s->n - i);
		return jj_sb_val(rt, &b);
	}
	while (count != 0) {
		const char *hit = memmem(s->p + i, s->n - i, old->p, old->n);

		if (!hit)
			break;
		jj_sb_add(rt, &b, s->p + i, (size_t)(hit - s->p) - i);
		jj_sb_add(rt, &b, new->p, new->n);
		i = (size_t)(hit - s->p) + old->n;
		if (count > 0)
			count--;
	}
	jj_sb_add(rt, &b, s->p + i, s->n - i);
	return jj_sb_val(rt, &b);
}

/* startswith/endswith: a string or a tuple of them. */
static bool
str_affix(struct jj_rt *rt, const struct jj_str *s, struct jj_val a, bool end)
{
	if (a.t == JV_LIST) {
		for (size_t i = 0; i < a.u.l->n; i++)
			if (str_affix(rt, s, a.u.l->v[i], end))
				return true;
		return false;
	}
	if (a.t != JV_STR)
		jj_rt_fail(rt, KVC_EFORMAT, "%s: expected a string", end ? "endswith" : "startswith");
	if (a.u.s->n > s->n)
		return false;
	return memcmp(s->p + (end ? s->n - a.u.s->n : 0), a.u.s->p, a.u.s->n) == 0;
}

/* upper, lower, capitalize, title: ASCII letters (the templates case only ASCII). */
static struct jj_val
str_case(struct jj_rt *rt, const struct jj_str *s, char how)
{
	struct jj_val v = jv_str(rt, s->p, s->n);
	char *p = v.u.s->p;
	bool word = false;

	for (size_t i = 0; i < s->n; i++) {
		char c = p[i];
		bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
		bool up = how == 'u' || ((how == 'c') && i == 0) || (how == 't' && !word);

		if (up && c >= 'a' && c <= 'z')
			p[i] = (char)(c - 32);
		else if (!up && c >= 'A' && c <= 'Z')
			p[i] = (char)(c + 32);
		word = alpha || (((unsigned char)c & 0x80) != 0);
	}
	return v;
}

struct jj_val
jj_method_call(struct jj_rt *rt, struct jj_val obj, const char *name, struct jj_val *args, size_t n,
	       bool *found)
{
	*found = true;
	if (obj.t == JV_STR) {
		const struct jj_str *s = obj.u.s;

		if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip"))
			return jj_strip(rt, obj, n ? &args[0] : NULL, name[0] == 'l' ? 1 : name[0] == 'r' ? 2 : 3);
		if (!strcmp(name, "split"))
			return str_split(rt, s, args, n);
		if (!strcmp(name, "replace"))
			return str_replace(rt, s, args, n);
		if ((!strcmp(name, "startswith") || !strcmp(name, "endswith")) && n >= 1)
			return jv_bool(str_affix(rt, s, args[0], name[0] == 'e'));
		if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
		    !strcmp(name, "title"))
			return str_case(rt, s, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0]);
		if (!strcmp(name, "find") && n >= 1 && args[0].t == JV_STR) {
			const char *hit = memmem(s->p, s->n, args[0].u.s->p, args[0].u.s->n);

			return jv_int(hit ? (int64_t)jj_u8_count(s->p, (size_t)(hit - s->p)) : -1);
		}
	} else if (obj.t == JV_DICT) {
		const struct jj_dict *d = obj.u.d;

		if (!strcmp(name, "get") && n >= 1) {
			struct jj_val *v = args[0].t == JV_STR ? jj_dict_get(d, args[0].u.s->p, args[0].u.s->n) : NULL;

			return v ? *v : n > 1 ? args[1] : jv_none();
		}
		if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
			struct jj_val l = jv_list(rt, d->n);

			for (size_t i = 0; i < d->n; i++) {
				struct jj_val k = { .t = JV_STR };

				k.u.s = d->k[i];
				if (name[0] == 'i') {
					struct jj_val pair = jv_list(rt, 2);

					jj_list_push(rt, pair.u.l, k);
					jj_list_push(rt, pair.u.l, d->v[i]);
					jj_list_push(rt, l.u.l, pair);
				} else {
					jj_list_push(rt, l.u.l, name[0] == 'k' ? k : d->v[i]);
				}
			}
			return l;
		}
	}
	*found = false;
	return jv_undef(NULL);
}

/* Python's slice.indices(len): clamp start and stop for the step's direction. */
static int64_t
slice_bound(struct jj_rt *rt, const struct jj_val *v, int64_t len, int64_t dflt, bool neg_step)
{
	if (!v || v->t == JV_NONE)
		return dflt;
	int64_t i = int_arg(rt, *v, "slice");

	if (i < 0) {
		i += len;
		if (i < 0)
			i = neg_step ? -1 : 0;
	} else if (i >= len) {
		i = neg_step ? len - 1 : len;
	}
	return i;
}

struct jj_val
jj_slice(struct jj_rt *rt, struct jj_val obj, const struct jj_val *start, const struct jj_val *stop,
	 const struct jj_val *step)
{
	int64_t st = step && step->t != JV_NONE ? int_arg(rt, *step, "slice") : 1;
	bool str = obj.t == JV_STR;

	if (!str && obj.t != JV_LIST)
		jj_rt_fail(rt, KVC_EFORMAT, "cannot slice a %s", jv_type_name(obj));
	if (st == 0)
		jj_rt_fail(rt, KVC_EFORMAT, "slice step cannot be zero");
	int64_t len = str ? (int64_t)jj_u8_count(obj.u.s->p, obj.u.s->n) : (int64_t)obj.u.l->n;
	int64_t a = slice_bound(rt, start, len, st > 0 ? 0 : len - 1, st < 0);
	int64_t b = slice_bound(rt, stop, len, st > 0 ? len : -1, st < 0);
	struct jj_val out = str ? jv_undef(NULL) : jv_list(rt, 0);
	struct jj_sb sb = {0};
	size_t *offs = NULL;

	if (str) {
		/* Each code point's byte offset, once: slicing stays linear. */
		offs = jj_rt_alloc(rt, ((size_t)len + 1) * sizeof(*offs));
		for (size_t i = 0, k = 0; i <= obj.u.s->n; i++)
			if (i == obj.u.s->n || ((unsigned char)obj.u.s->p[i] & 0xc0) != 0x80)
				offs[k++] = i;
	}
	for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
		if (str)
			jj_sb_add(rt, &sb, obj.u.s->p + offs[i], offs[i + 1] - offs[i]);
		else
			jj_list_push(rt, out.u.l, obj.u.l->v[i]);
	}
	return str ? jj_sb_val(rt, &sb) : out;
}
