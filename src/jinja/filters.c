/*
 * filters.c: jinja2's filters and tests as the chat templates use them, and
 * its attribute and item access (a missing attribute or key is undefined;
 * using an undefined value as an object is the error).
 */
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

_Noreturn static void
undefined_error(struct jj_rt *rt, struct jj_val v)
{
	if (v.u.name)
		jj_rt_fail(rt, KVC_EFORMAT, "'%s' is undefined", v.u.name);
	jj_rt_fail(rt, KVC_EFORMAT, "an undefined value was used");
}

static struct jj_val
loop_attr(struct jj_rt *rt, const struct jj_loop *lp, const char *name)
{
	int64_t i = (int64_t)lp->i, n = (int64_t)lp->items->n;

	if (!strcmp(name, "index0")) return jv_int(i);
	if (!strcmp(name, "index")) return jv_int(i + 1);
	if (!strcmp(name, "revindex0")) return jv_int(n - i - 1);
	if (!strcmp(name, "revindex")) return jv_int(n - i);
	if (!strcmp(name, "first")) return jv_bool(i == 0);
	if (!strcmp(name, "last")) return jv_bool(i == n - 1);
	if (!strcmp(name, "length")) return jv_int(n);
	if (!strcmp(name, "depth")) return jv_int(1);
	if (!strcmp(name, "depth0")) return jv_int(0);
	if (!strcmp(name, "previtem"))
		return i > 0 ? lp->items->v[i - 1] : jv_undef("previtem");
	if (!strcmp(name, "nextitem"))
		return i + 1 < n ? lp->items->v[i + 1] : jv_undef("nextitem");
	(void)rt;
	return jv_undef(NULL);
}

struct jj_val
jj_getattr(struct jj_rt *rt, struct jj_val obj, const char *name, size_t n)
{
	struct jj_val *v;

	switch (obj.t) {
	case JV_UNDEF: undefined_error(rt, obj);
	case JV_DICT:
	case JV_NS:
		v = jj_dict_get(obj.u.d, name, n);
		return v ? *v : jv_undef(NULL);
	case JV_LOOP: return loop_attr(rt, obj.u.loop, name);
	default: return jv_undef(NULL);
	}
}

struct jj_val
jj_getitem(struct jj_rt *rt, struct jj_val obj, struct jj_val key)
{
	if (obj.t == JV_UNDEF)
		undefined_error(rt, obj);
	if (key.t == JV_STR && (obj.t == JV_DICT || obj.t == JV_NS || obj.t == JV_LOOP))
		return jj_getattr(rt, obj, key.u.s->p, key.u.s->n);
	if ((key.t == JV_INT || key.t == JV_BOOL) && (obj.t == JV_LIST || obj.t == JV_STR)) {
		int64_t i = key.t == JV_INT ? key.u.i : key.u.b;
		int64_t len = obj.t == JV_LIST ? (int64_t)obj.u.l->n :
			      (int64_t)jj_u8_count(obj.u.s->p, obj.u.s->n);

		if (i < 0)
			i += len;
		if (i < 0 || i >= len)
			return jv_undef(NULL);
		if (obj.t == JV_LIST)
			return obj.u.l->v[i];
		size_t off = jj_u8_offset(obj.u.s->p, obj.u.s->n, (size_t)i), l;

		jj_u8_decode(obj.u.s->p + off, obj.u.s->n - off, &l);
		return jv_str(rt, obj.u.s->p + off, l);
	}
	return jv_undef(NULL);
}

const struct jj_list *
jj_iter(struct jj_rt *rt, struct jj_val v)
{
	static const struct jj_list empty;

	switch (v.t) {
	case JV_UNDEF: return &empty;
	case JV_LIST: return v.u.l;
	case JV_DICT: {
		struct jj_val l = jv_list(rt, v.u.d->n);

		for (size_t i = 0; i < v.u.d->n; i++) {
			struct jj_val k = { .t = JV_STR };

			k.u.s = v.u.d->k[i];
			jj_list_push(rt, l.u.l, k);
		}
		return l.u.l;
	}
	case JV_STR: {
		struct jj_val l = jv_list(rt, 0);

		for (size_t i = 0, len; i < v.u.s->n; i += len) {
			jj_u8_decode(v.u.s->p + i, v.u.s->n - i, &len);
			jj_list_push(rt, l.u.l, jv_str(rt, v.u.s->p + i, len));
		}
		return l.u.l;
	}
	default:
		jj_rt_fail(rt, KVC_EFORMAT, "'%s' object is not iterable", jv_type_name(v));
	}
}

/* ---- tests ---- */

static bool
test_compare(struct jj_rt *rt, const char *name, struct jj_val v, struct jj_val *args, size_t n,
	     bool *known)
{
	*known = true;
	if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") ||
	    !strcmp(name, "sameas"))
		return n && jv_equal(v, args[0]);
	if (!strcmp(name, "ne") || !strcmp(name, "!="))
		return !n || !jv_equal(v, args[0]);
	if (!strcmp(name, "lt") || !strcmp(name, "lessthan"))
		return n && jv_compare(rt, v, args[0]) < 0;
	if (!strcmp(name, "le"))
		return n && jv_compare(rt, v, args[0]) <= 0;
	if (!strcmp(name, "gt") || !strcmp(name, "greaterthan"))
		return n && jv_compare(rt, v, args[0]) > 0;
	if (!strcmp(name, "ge"))
		return n && jv_compare(rt, v, args[0]) >= 0;
	if (!strcmp(name, "in") && n) {
		const struct jj_list *l = args[0].t == JV_STR ? NULL : jj_iter(rt, args[0]);

		if (!l)
			return v.t == JV_STR && memmem(args[0].u.s->p, args[0].u.s->n, v.u.s->p, v.u.s->n);
		for (size_t i = 0; i < l->n; i++)
			if (jv_equal(v, l->v[i]))
				return true;
		return false;
	}
	*known = false;
	return false;
}

bool
jj_test(struct jj_rt *rt, const char *name, struct jj_val v, struct jj_val *args, size_t n)
{
	bool known;
	bool r = test_compare(rt, name, v, args, n, &known);

	if (known)
		return r;
	if (!strcmp(name, "defined")) return v.t != JV_UNDEF;
	if (!strcmp(name, "undefined")) return v.t == JV_UNDEF;
	if (!strcmp(name, "none")) return v.t == JV_NONE;
	if (!strcmp(name, "string")) return v.t == JV_STR;
	if (!strcmp(name, "mapping")) return v.t == JV_DICT;
	/* jinja2's Undefined is iterable and a sequence (len 0, __getitem__). */
	if (!strcmp(name, "iterable")) return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
	if (!strcmp(name, "sequence")) return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
	if (!strcmp(name, "boolean")) return v.t == JV_BOOL;
	if (!strcmp(name, "true")) return v.t == JV_BOOL && v.u.b;
	if (!strcmp(name, "false")) return v.t == JV_BOOL && !v.u.b;
	if (!strcmp(name, "number")) return jv_is_num(v);
	if (!strcmp(name, "integer")) return v.t == JV_INT;
	if (!strcmp(name, "float")) return v.t == JV_FLOAT;
	if (!strcmp(name, "callable")) return v.t == JV_MACRO || v.t == JV_FUNC;
	if (!strcmp(name, "odd") || !strcmp(name, "even")) {
		if (v.t != JV_INT)
			jj_rt_fail(rt, KVC_EFORMAT, "test '%s' needs an integer", name);
		return (v.u.i % 2 != 0) == (name[0] == 'o');
	}
	if (!strcmp(name, "divisibleby") && n && args[0].t == JV_INT && args[0].u.i != 0 && v.t == JV_INT)
		return v.u.i % args[0].u.i == 0;
	if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
		if (v.t != JV_STR)
			return false;
		for (size_t i = 0; i < v.u.s->n; i++) {
			char c = v.u.s->p[i];

			if (name[0] == 'l' ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z'))
				return false;
		}
		return true;
	}
	jj_rt_fail(rt, KVC_EUNSUPPORTED, "no test named '%s'", name);
}

/* ---- filters ---- */

/* The argument at position pos or named name, or NULL. */
static const struct jj_val *
arg(struct jj_val *args, const char **kw, size_t n, size_t pos, const char *name)
{
	size_t npos = 0;

	while (npos < n && !kw[npos])
		npos++;
	if (pos < npos)
		return &args[pos];
	for (size_t i = npos; i < n; i++)
		if (!strcmp(kw[i], name))
			return &args[i];
	return NULL;
}

static bool
arg_bool(const struct jj_val *v, bool dflt)
{
	return v ? jv_truthy(*v) : dflt;
}

static struct jj_val
f_tojson(struct jj_rt *rt, struct jj_val v, struct jj_val *args, const char **kw, size_t n)
{
	const struct jj_val *indent = arg(args, kw, n, 1, "indent"), *sep = arg(args, kw, n, 3, "separators");
	struct jj_json_opts o = {
		.indent = -1,
		.ensure_ascii = arg_bool(arg(args, kw, n, 0, "ensure_ascii"), false),
		.sort_keys = arg_bool(arg(args, kw, n, 4, "sort_keys"), false),
	};
	struct jj_sb b = {0};

	if (indent && indent->t == JV_INT)
		o.indent = indent->u.i < 0 ? 0 : indent->u.i > 64 ? 64 : (int)indent->u.i;
	else if (indent && indent->t != JV_NONE)
		jj_rt_fail(rt, KVC_EUNSUPPORTED, "tojson: indent must be an integer");
	if (sep && sep->t == JV_LIST && sep->u.l->n == 2 && sep->u.l->v[0].t == JV_STR &&
	    sep->u.l->v[1].t == JV_STR) {
		o.item_sep = sep->u.l->v[0].u.s->p;
		o.key_sep = sep->u.l->v[1].u.s->p;
	} else if (sep && sep->t != JV_NONE) {
		jj_rt_fail(rt, KVC_EFORMAT, "tojson: separators must be two strings");
	}
	jj_json_dump(rt, &b, v, &o);
	return jj_sb_val(rt, &b);
}

static struct jj_val
f_items(struct jj_rt *rt, struct jj_val v, bool sort)
{
	if (v.t == JV_UNDEF)
		return jv_list(rt, 0);
	if (v.t != JV_DICT)
		jj_rt_fail(rt, KVC_EFORMAT, "%s: expected a mapping, got %s", sort ? "dictsort" : "items",
			   jv_type_name(v));
	bool found;
	struct jj_val l = jj_method_call(rt, v, "items", NULL, 0, &found);

	if (sort)
		for (size_t i = 1; i < l.u.l->n; i++) {
			/* insertion sort on the lower-cased key (case_sensitive=False), stable */
			struct jj_val x = l.u.l->v[i];
			size_t k = i;

			while (k > 0) {
				const struct jj_str *a = l.u.l->v[k - 1].u.l->v[0].u.s, *b = x.u.l->v[0].u.s;
				size_t m = a->n < b->n ? a->n : b->n, j = 0;
				int c = 0;

				for (; j < m && !c; j++) {
					int ca = a->p[j] >= 'A' && a->p[j] <= 'Z' ? a->p[j] + 32 : (unsigned char)a->p[j];
					int cb = b->p[j] >= 'A' && b->p[j] <= 'Z' ? b->p[j] + 32 : (unsigned char)b->p[j];

					c = ca - cb;
				}
				if (!c)
					c = (a->n > b->n) - (a->n < b->n);
				if (c <= 0)
					break;
				l.u.l->v[k] = l.u.l->v[k - 1];
				k--;
			}
			l.u.l->v[k] = x;
		}
	return l;
}

static struct jj_val
f_join(struct jj_rt *rt, struct jj_val v, struct jj_val *args, const char **kw, size_t n)
{
	const struct jj_val *sep = arg(args, kw, n, 0, "d"), *attr = arg(args, kw, n, 1, "attribute");
	const struct jj_list *l = jj_iter(rt, v);
	struct jj_sb b = {0};

	for (size_t i = 0; i < l->n; i++) {
		struct jj_val x = l->v[i];

		if (i && sep)
			jv_str_to(rt, &b, *sep);
		if (attr && attr->t == JV_STR)
			x = jj_getattr(rt, x, attr->u.s->p, attr->u.s->n);
		jv_str_to(rt, &b, x);
	}
	return jj_sb_val(rt, &b);
}

/* select, reject, selectattr, rejectattr. */
static struct jj_val
f_select(struct jj_rt *rt, struct jj_val v, struct jj_val *args, size_t n, bool attr, bool keep)
{
	const struct jj_list *l = jj_iter(rt, v);
	struct jj_val out = jv_list(rt, 0);
	size_t first = attr ? 1 : 0;

	if (attr && (n < 1 || args[0].t != JV_STR))
		jj_rt_fail(rt, KVC_EFORMAT, "selectattr/rejectattr need an attribute name");
	if (n > first && args[first].t != JV_STR)
		jj_rt_fail(rt, KVC_EFORMAT, "select/reject: the test must be named by a string");
	for (size_t i = 0; i < l->n; i++) {
		struct jj_val x = attr ? jj_getattr(rt, l->v[i], args[0].u.s->p, args[0].u.s->n) : l->v[i];
		bool r = n > first ? jj_test(rt, args[first].u.s->p, x, args + first + 1, n - first - 1) :
			 jv_truthy(x);

		if (r == keep)
			jj_list_push(rt, out.u.l, l->v[i]);
	}
	return out;
}

static struct jj_val
f_map(struct jj_rt *rt, struct jj_val v, struct jj_val *args, const char **kw, size_t n)
{
	const struct jj_list *l = jj_iter(rt, v);
	const struct jj_val *attr = arg(args, kw, n, n, "attribute"), *dflt = arg(args, kw, n, n, "default");
	struct jj_val out = jv_list(rt, l->n);

	if (!attr && (n < 1 || kw[0] || args[0].t != JV_STR))
		jj_rt_fail(rt, KVC_EFORMAT, "map needs a filter name or attribute=");
	for (size_t i = 0; i < l->n; i++) {
		struct jj_val x;

		if (attr) {
			x = attr->t == JV_STR ? jj_getattr(rt, l->v[i], attr->u.s->p, attr->u.s->n) :
			    jj_getitem(rt, l->v[i], *attr);
			if (x.t == JV_UNDEF && dflt)
				x = *dflt;
		} else {
			x = jj_filter(rt, args[0].u.s->p, l->v[i], args + 1, kw + 1, n - 1);
		}
		jj_list_push(rt, out.u.l, x);
	}
	return out;
}

static struct jj_val
f_length(struct jj_rt *rt, struct jj_val v)
{
	switch (v.t) {
	case JV_UNDEF: return jv_int(0);
	case JV_STR: return jv_int((int64_t)jj_u8_count(v.u.s->p, v.u.s->n));
	case JV_LIST: return jv_int((int64_t)v.u.l->n);
	case JV_DICT: return jv_int((int64_t)v.u.d->n);
	default: jj_rt_fail(rt, KVC_EFORMAT, "object of type '%s' has no len()", jv_type_name(v));
	}
}

static struct jj_val
f_int(struct jj_rt *rt, struct jj_val v, const struct jj_val *dflt)
{
	if (v.t == JV_INT)
		return v;
	if (v.t == JV_BOOL)
		return jv_int(v.u.b);
	if (v.t == JV_FLOAT && v.u.f > -9.2e18 && v.u.f < 9.2e18)
		return jv_int((int64_t)v.u.f);
	if (v.t == JV_STR) {
		char *end;
		long long i = strtoll(v.u.s->p, &end, 10);

		if (end != v.u.s->p && *end == '\0')
			return jv_int(i);
	}
	(void)rt;
	return dflt ? *dflt : jv_int(0);
}

static struct jj_val
f_first_last(struct jj_rt *rt, struct jj_val v, bool last)
{
	const struct jj_list *l = jj_iter(rt, v);

	if (l->n == 0)
		return jv_undef(NULL);
	return l->v[last ? l->n - 1 : 0];
}

static struct jj_val
f_unique(struct jj_rt *rt, struct jj_val v)
{
	const struct jj_list *l = jj_iter(rt, v);
	struct jj_val out = jv_list(rt, 0);

	for (size_t i = 0; i < l->n; i++) {
		bool seen = false;

		for (size_t k = 0; k < out.u.l->n && !seen; k++)
			seen = jv_equal(out.u.l->v[k], l->v[i]);
		if (!seen)
			jj_list_push(rt, out.u.l, l->v[i]);
	}
	return out;
}

struct jj_val
jj_filter(struct jj_rt *rt, const char *name, struct jj_val v, struct jj_val *args, const char **kw,
	  size_t n)
{
	if (!strcmp(name, "tojson")) return f_tojson(rt, v, args, kw, n);
	if (!strcmp(name, "length") || !strcmp(name, "count")) return f_length(rt, v);
	if (!strcmp(name, "string")) return jv_to_str(rt, v);
	if (!strcmp(name, "safe")) return v;
	if (!strcmp(name, "trim"))
		return jj_strip(rt, jv_to_str(rt, v), arg(args, kw, n, 0, "chars"), 3);
	if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
	    !strcmp(name, "title")) {
		bool found;

		return jj_method_call(rt, jv_to_str(rt, v), name, NULL, 0, &found);
	}
	if (!strcmp(name, "replace")) {
		bool found;

		return jj_method_call(rt, jv_to_str(rt, v), name, args, n, &found);
	}
	if (!strcmp(name, "items")) return f_items(rt, v, false);
	if (!strcmp(name, "dictsort")) return f_items(rt, v, true);
	if (!strcmp(name, "list")) {
		const struct jj_list *l = jj_iter(rt, v);
		struct jj_val out = jv_list(rt, l->n);

		for (size_t i = 0; i < l->n; i++)
			jj_list_push(rt, out.u.l, l->v[i]);
		return out;
	}
	if (!strcmp(name, "join")) return f_join(rt, v, args, kw, n);
	if (!strcmp(name, "default") || !strcmp(name, "d")) {
		const struct jj_val *d = arg(args, kw, n, 0, "default_value");
		bool boolean = arg_bool(arg(args, kw, n, 1, "boolean"), false);

		if (v.t == JV_UNDEF || (boolean && !jv_truthy(v)))
			return d ? *d : jv_cstr(rt, "");
		return v;
	}
	if (!strcmp(name, "first") || !strcmp(name, "last")) return f_first_last(rt, v, name[0] == 'l');
	if (!strcmp(name, "map")) return f_map(rt, v, args, kw, n);
	if (!strcmp(name, "select") || !strcmp(name, "reject"))
		return f_select(rt, v, args, n, false, name[0] == 's');
	if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
		return f_select(rt, v, args, n, true, name[0] == 's');
	if (!strcmp(name, "int")) return f_int(rt, v, arg(args, kw, n, 0, "default"));
	if (!strcmp(name, "float")) {
		if (jv_is_num(v))
			return jv_float(jv_num(v));
		return arg(args, kw, n, 0, "default") ? *arg(args, kw, n, 0, "default") : jv_float(0.0);
	}
	if (!strcmp(name, "abs") && jv_is_num(v))
		return v.t == JV_FLOAT ? jv_float(v.u.f < 0 ? -v.u.f : v.u.f) :
		       jv_int(v.t == JV_INT ? (v.u.i < 0 ? -v.u.i : v.u.i) : v.u.b);
	if (!strcmp(name, "unique")) return f_unique(rt, v);
	if (!strcmp(name, "reverse")) {
		struct jj_val m1 = jv_int(-1);

		struct jj_val lv = { .t = JV_LIST };

		if (v.t != JV_STR)
			lv.u.l = (struct jj_list *)jj_iter(rt, v);	/* read only: sliced into a copy */
		return jj_slice(rt, v.t == JV_STR ? v : lv, NULL, NULL, &m1);
	}
	jj_rt_fail(rt, KVC_EUNSUPPORTED, "no filter named '%s'", name);
}
