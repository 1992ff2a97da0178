/*
 * eval.c: runs the tree. Scopes as jinja2's: the template's top level is
 * one frame (macros read it when called, so a name set after a macro's
 * definition is seen); each for-loop iteration gets a fresh frame over the
 * enclosing one (a set inside a loop does not outlive the iteration, and a
 * read before it sees the outer value); each macro call a frame over the top
 * level. if-blocks share their enclosing frame. Every statement and
 * expression counts one step against the limit; macro calls count depth.
 */
#include <math.h>
#include <string.h>

#include "jinja/jinja_int.h"

struct frame {
	struct frame *parent;
	struct jj_dict vars;
};

struct ev {
	struct jj_rt *rt;
	struct frame *root;
	const struct jj_eval_params *p;
	uint64_t steps;
	int depth;
};

enum flow { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE };

static void
step(struct ev *e, const struct jj_node *n)
{
	e->rt->line = n->line;
	e->rt->col = n->col;
	if (++e->steps > e->p->lim.max_steps)
		jj_rt_fail(e->rt, KVC_ERANGE, "template ran more than %llu steps",
			   (unsigned long long)e->p->lim.max_steps);
}

static struct jj_val
lookup(struct ev *e, struct frame *f, const char *name)
{
	size_t n = strlen(name);

	for (; f; f = f->parent) {
		struct jj_val *v = jj_dict_get(&f->vars, name, n);

		if (v)
			return *v;
	}
	int fn = jj_func_find(name);

	if (fn >= 0) {
		struct jj_val v = { .t = JV_FUNC };

		v.u.fn = fn;
		return v;
	}
	(void)e;
	return jv_undef(name);
}

static void
assign(struct ev *e, struct frame *f, const char *name, struct jj_val v)
{
	jj_dict_set(e->rt, &f->vars, name, strlen(name), v);
}

/* Binds targets (one, or several unpacked from a sequence) in f. */
static void
bind(struct ev *e, struct frame *f, const struct jj_node *n, struct jj_val v)
{
	if (n->nn == 1) {
		assign(e, f, n->names[0], v);
		return;
	}
	if (v.t != JV_LIST || v.u.l->n != n->nn)
		jj_rt_fail(e->rt, KVC_EFORMAT, "cannot unpack %s into %zu names", jv_type_name(v), n->nn);
	for (size_t i = 0; i < n->nn; i++)
		assign(e, f, n->names[i], v.u.l->v[i]);
}

static struct jj_val eval(struct ev *e, struct frame *f, const struct jj_node *n);
static enum flow exec(struct ev *e, struct frame *f, const struct jj_node *n, struct jj_sb *out);

_Noreturn static void
bad_operands(struct ev *e, const char *op, struct jj_val a, struct jj_val b)
{
	if (a.t == JV_UNDEF || b.t == JV_UNDEF) {
		const char *name = a.t == JV_UNDEF ? a.u.name : b.u.name;

		jj_rt_fail(e->rt, KVC_EFORMAT, "'%s' is undefined", name ? name : "value");
	}
	jj_rt_fail(e->rt, KVC_EFORMAT, "unsupported operand types for %s: '%s' and '%s'", op,
		   jv_type_name(a), jv_type_name(b));
}

static struct jj_val
concat(struct ev *e, struct jj_val a, struct jj_val b)
{
	struct jj_sb sb = {0};

	if (a.t == JV_STR && b.t == JV_STR) {
		jj_sb_add(e->rt, &sb, a.u.s->p, a.u.s->n);
		jj_sb_add(e->rt, &sb, b.u.s->p, b.u.s->n);
	} else {
		jv_str_to(e->rt, &sb, a);
		jv_str_to(e->rt, &sb, b);
	}
	return jj_sb_val(e->rt, &sb);
}

static struct jj_val
repeat(struct ev *e, struct jj_val seq, int64_t k)
{
	struct jj_sb sb = {0};
	struct jj_val l = seq.t == JV_LIST ? jv_list(e->rt, 0) : jv_undef(NULL);

	for (int64_t i = 0; i < k; i++) {
		step(e, &(struct jj_node){ .line = e->rt->line, .col = e->rt->col });
		if (seq.t == JV_STR)
			jj_sb_add(e->rt, &sb, seq.u.s->p, seq.u.s->n);
		else
			for (size_t j = 0; j < seq.u.l->n; j++)
				jj_list_push(e->rt, l.u.l, seq.u.l->v[j]);
	}
	return seq.t == JV_STR ? jj_sb_val(e->rt, &sb) : l;
}

/* Arithmetic on two numbers, Python's: ints stay ints (overflow refused). */
static struct jj_val
arith(struct ev *e, int op, struct jj_val a, struct jj_val b)
{
	static const char *const names[] = { "+", "-", "*", "/", "//", "%", "**" };
	bool ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
	/* a float's union holds no int: read the int side only for ints and bools */
	int64_t x = a.t == JV_INT ? a.u.i : a.t == JV_BOOL ? a.u.b : 0;
	int64_t y = b.t == JV_INT ? b.u.i : b.t == JV_BOOL ? b.u.b : 0, r;
	double fx = jv_num(a), fy = jv_num(b);

	if ((op == OP_DIV || op == OP_FDIV || op == OP_MOD) && fy == 0.0)
		jj_rt_fail(e->rt, KVC_EFORMAT, "division by zero");
	if (ints) {
		switch (op) {
		case OP_ADD: if (!__builtin_add_overflow(x, y, &r)) return jv_int(r); break;
		case OP_SUB: if (!__builtin_sub_overflow(x, y, &r)) return jv_int(r); break;
		case OP_MUL: if (!__builtin_mul_overflow(x, y, &r)) return jv_int(r); break;
		case OP_FDIV:
			if (x == INT64_MIN && y == -1)
				break;
			r = x / y;
			return jv_int((x % y != 0 && ((x < 0) != (y < 0))) ? r - 1 : r);
		case OP_MOD:
			if (y == -1)
				return jv_int(0);
			r = x % y;
			return jv_int(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
		case OP_POW:
			if (y >= 0) {
				r = 1;
				for (int64_t i = 0; i < y && i < 64; i++)
					if (__builtin_mul_overflow(r, x, &r))
						goto overflow;
				if (y < 64 || x == 0 || x == 1)
					return jv_int(y >= 64 && x == 0 ? 0 : r);
				goto overflow;
			}
			break;
		default: break;
		}
		if (op != OP_DIV && op != OP_POW)
			goto overflow;
	}
	switch (op) {
	case OP_ADD: return jv_float(fx + fy);
	case OP_SUB: return jv_float(fx - fy);
	case OP_MUL: return jv_float(fx * fy);
	case OP_DIV: return jv_float(fx / fy);
	case OP_FDIV: return jv_float(floor(fx / fy));
	case OP_MOD: {
		double m = fmod(fx, fy);

		return jv_float(m != 0 && ((m < 0) != (fy < 0)) ? m + fy : m);
	}
	case OP_POW: return jv_float(pow(fx, fy));
	default: break;
	}
overflow:
	jj_rt_fail(e->rt, KVC_ERANGE, "integer overflow in %s", names[op]);
}

static bool
contains(struct ev *e, struct jj_val item, struct jj_val in)
{
	if (in.t == JV_STR) {
		if (item.t != JV_STR)
			jj_rt_fail(e->rt, KVC_EFORMAT, "'in <string>' requires string as left operand, not %s",
				   jv_type_name(item));
		return memmem(in.u.s->p, in.u.s->n, item.u.s->p, item.u.s->n) != NULL;
	}
	if (in.t == JV_DICT || in.t == JV_NS)
		return item.t == JV_STR && jj_dict_get(in.u.d, item.u.s->p, item.u.s->n);
	if (in.t == JV_LIST) {
		for (size_t i = 0; i < in.u.l->n; i++)
			if (jv_equal(item, in.u.l->v[i]))
				return true;
		return false;
	}
	if (in.t == JV_UNDEF)
		return false;
	jj_rt_fail(e->rt, KVC_EFORMAT, "argument of type '%s' is not iterable", jv_type_name(in));
}

static struct jj_val
binary(struct ev *e, int op, struct jj_val a, struct jj_val b)
{
	switch (op) {
	case OP_CAT: return concat(e, a, b);
	case OP_EQ: return jv_bool(jv_equal(a, b));
	case OP_NE: return jv_bool(!jv_equal(a, b));
	case OP_LT: return jv_bool(jv_compare(e->rt, a, b) < 0);
	case OP_LE: return jv_bool(jv_compare(e->rt, a, b) <= 0);
	case OP_GT: return jv_bool(jv_compare(e->rt, a, b) > 0);
	case OP_GE: return jv_bool(jv_compare(e->rt, a, b) >= 0);
	case OP_IN: return jv_bool(contains(e, a, b));
	case OP_NOTIN: return jv_bool(!contains(e, a, b));
	default: break;
	}
	if (jv_is_num(a) && jv_is_num(b))
		return arith(e, op, a, b);
	if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR)
		return concat(e, a, b);
	if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST) {
		struct jj_val l = jv_list(e->rt, a.u.l->n + b.u.l->n);

		for (size_t i = 0; i < a.u.l->n; i++)
			jj_list_push(e->rt, l.u.l, a.u.l->v[i]);
		for (size_t i = 0; i < b.u.l->n; i++)
			jj_list_push(e->rt, l.u.l, b.u.l->v[i]);
		return l;
	}
	if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL))
		return repeat(e, a, b.t == JV_INT ? b.u.i : b.u.b);
	if (op == OP_MUL && (b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL))
		return repeat(e, b, a.t == JV_INT ? a.u.i : a.u.b);
	static const char *const names[] = { "+", "-", "*", "/", "//", "%", "**" };

	bad_operands(e, names[op], a, b);
}

/* Evaluates a call's arguments into arrays in the arena. */
static struct jj_val *
eval_args(struct ev *e, struct frame *f, const struct jj_node *n)
{
	struct jj_val *args = n->nk ? jj_rt_alloc(e->rt, n->nk * sizeof(*args)) : NULL;

	for (size_t i = 0; i < n->nk; i++)
		args[i] = eval(e, f, n->kids[i]);
	return args;
}

static struct jj_val
call_macro(struct ev *e, const struct jj_node *m, struct jj_val *args, const char **kw, size_t n)
{
	struct frame *mf = jj_rt_alloc(e->rt, sizeof(*mf));
	size_t npos = 0;

	while (npos < n && !kw[npos])
		npos++;
	if (npos > m->nk)
		jj_rt_fail(e->rt, KVC_EFORMAT, "macro '%s' takes not more than %zu argument(s)",
			   m->names[0], m->nk);
	if (e->depth >= e->p->lim.max_depth)
		jj_rt_fail(e->rt, KVC_ERANGE, "macro calls nested more than %d deep (recursion?)",
			   e->p->lim.max_depth);
	mf->parent = e->root;
	for (size_t i = npos; i < n; i++) {
		bool known = false;

		for (size_t k = 0; k < m->nk; k++)
			known |= !strcmp(m->kw[k], kw[i]);
		if (!known)
			jj_rt_fail(e->rt, KVC_EFORMAT, "macro '%s' takes no keyword argument '%s'",
				   m->names[0], kw[i]);
	}
	for (size_t k = 0; k < m->nk; k++) {
		struct jj_val v = jv_undef(m->kw[k]);
		bool set = k < npos;

		if (set)
			v = args[k];
		for (size_t i = npos; i < n && !set; i++)
			if (!strcmp(m->kw[k], kw[i])) {
				v = args[i];
				set = true;
			}
		if (!set && m->kids[k])
			v = eval(e, mf, m->kids[k]);
		assign(e, mf, m->kw[k], v);
	}
	struct jj_sb out = { .max = e->p->lim.max_output };

	e->depth++;
	exec(e, mf, m->b, &out);
	e->depth--;
	return jj_sb_val(e->rt, &out);
}

static struct jj_val
eval_call(struct ev *e, struct frame *f, const struct jj_node *n)
{
	const struct jj_node *callee = n->a;
	struct jj_val obj, fn;

	if (callee->k == E_ATTR) {
		obj = eval(e, f, callee->a);
		if (obj.t == JV_STR || obj.t == JV_DICT) {
			struct jj_val *args = eval_args(e, f, n);
			bool found;

			step(e, n);
			for (size_t i = 0; i < n->nk; i++)
				if (n->kw[i])
					jj_rt_fail(e->rt, KVC_EUNSUPPORTED, "keyword arguments to %s methods are not supported",
						   jv_type_name(obj));
			struct jj_val r = jj_method_call(e->rt, obj, callee->s, args, n->nk, &found);

			if (found)
				return r;
			if (obj.t == JV_STR)
				jj_rt_fail(e->rt, KVC_EUNSUPPORTED, "str has no method '%s' here", callee->s);
		}
		fn = jj_getattr(e->rt, obj, callee->s, callee->sn);
	} else {
		fn = eval(e, f, callee);
	}
	struct jj_val *args = eval_args(e, f, n);

	step(e, n);
	if (fn.t == JV_MACRO)
		return call_macro(e, fn.u.m, args, n->kw, n->nk);
	if (fn.t == JV_FUNC)
		return jj_func_call(e->rt, fn.u.fn, e->p->now, args, n->kw, n->nk);
	if (fn.t == JV_UNDEF)
		jj_rt_fail(e->rt, KVC_EFORMAT, "'%s' is undefined",
			   fn.u.name ? fn.u.name : callee->k == E_ATTR ? callee->s : "value");
	jj_rt_fail(e->rt, KVC_EFORMAT, "'%s' object is not callable", jv_type_name(fn));
}

static struct jj_val
eval_collection(struct ev *e, struct frame *f, const struct jj_node *n)
{
	if (n->k == E_LIST) {
		struct jj_val l = jv_list(e->rt, n->nk);

		for (size_t i = 0; i < n->nk; i++)
			jj_list_push(e->rt, l.u.l, eval(e, f, n->kids[i]));
		return l;
	}
	struct jj_val d = jv_dict(e->rt, JV_DICT);

	for (size_t i = 0; i + 1 < n->nk; i += 2) {
		struct jj_val k = eval(e, f, n->kids[i]);

		if (k.t != JV_STR)
			jj_rt_fail(e->rt, KVC_EUNSUPPORTED, "dict keys other than strings are not supported");
		jj_dict_set(e->rt, d.u.d, k.u.s->p, k.u.s->n, eval(e, f, n->kids[i + 1]));
	}
	return d;
}

static struct jj_val
eval_slice(struct ev *e, struct frame *f, const struct jj_node *n)
{
	struct jj_val obj = eval(e, f, n->a), part[3];
	const struct jj_node *src[3] = { n->b, n->c, n->d };

	if (obj.t == JV_UNDEF)
		jj_rt_fail(e->rt, KVC_EFORMAT, "'%s' is undefined", obj.u.name ? obj.u.name : "value");
	for (int k = 0; k < 3; k++)
		part[k] = src[k] ? eval(e, f, src[k]) : jv_none();
	return jj_slice(e->rt, obj, &part[0], &part[1], &part[2]);
}

static struct jj_val
eval(struct ev *e, struct frame *f, const struct jj_node *n)
{
	struct jj_val a, *args;

	step(e, n);
	switch (n->k) {
	case E_CONST: return n->val;
	case E_NAME: return lookup(e, f, n->names[0]);
	case E_ATTR:
		a = eval(e, f, n->a);
		step(e, n);
		return jj_getattr(e->rt, a, n->s, n->sn);
	case E_INDEX:
		a = eval(e, f, n->a);
		struct jj_val key = eval(e, f, n->b);

		step(e, n);
		return jj_getitem(e->rt, a, key);
	case E_SLICE: return eval_slice(e, f, n);
	case E_CALL: return eval_call(e, f, n);
	case E_FILTER:
		a = eval(e, f, n->a);
		args = eval_args(e, f, n);
		step(e, n);
		return jj_filter(e->rt, n->s, a, args, n->kw, n->nk);
	case E_TEST:
		a = eval(e, f, n->a);
		args = eval_args(e, f, n);
		step(e, n);
		return jv_bool(jj_test(e->rt, n->s, a, args, n->nk) != (n->op == 1));
	case E_NOT: return jv_bool(!jv_truthy(eval(e, f, n->a)));
	case E_NEG:
	case E_POS:
		a = eval(e, f, n->a);
		step(e, n);
		if (!jv_is_num(a))
			jj_rt_fail(e->rt, KVC_EFORMAT, "bad operand type for unary %c: '%s'",
				   n->k == E_NEG ? '-' : '+', jv_type_name(a));
		if (n->k == E_POS)
			return a.t == JV_BOOL ? jv_int(a.u.b) : a;
		if (a.t == JV_FLOAT)
			return jv_float(-a.u.f);
		if (a.t == JV_INT && a.u.i == INT64_MIN)
			jj_rt_fail(e->rt, KVC_ERANGE, "integer overflow in unary -");
		return jv_int(-(a.t == JV_INT ? a.u.i : a.u.b));
	case E_BIN: {
		a = eval(e, f, n->a);
		struct jj_val b = eval(e, f, n->b);

		step(e, n);
		return binary(e, n->op, a, b);
	}
	case E_AND:
		a = eval(e, f, n->a);
		return jv_truthy(a) ? eval(e, f, n->b) : a;
	case E_OR:
		a = eval(e, f, n->a);
		return jv_truthy(a) ? a : eval(e, f, n->b);
	case E_COND:
		if (jv_truthy(eval(e, f, n->a)))
			return eval(e, f, n->b);
		return n->c ? eval(e, f, n->c) : jv_undef(NULL);
	case E_LIST:
	case E_DICT: return eval_collection(e, f, n);
	default:
		jj_rt_fail(e->rt, KVC_EFORMAT, "not an expression");
	}
}

/* ---- statements ---- */

static enum flow
exec_for(struct ev *e, struct frame *f, const struct jj_node *n, struct jj_sb *out)
{
	const struct jj_list *src = jj_iter(e->rt, eval(e, f, n->a));
	const struct jj_list *items = src;

	if (n->d) {
		/* The filter runs first: loop.index and loop.length count what it keeps. */
		struct jj_val kept = jv_list(e->rt, 0);
		struct frame tf = { .parent = f };

		for (size_t i = 0; i < src->n; i++) {
			tf.vars.n = 0;
			bind(e, &tf, n, src->v[i]);
			if (jv_truthy(eval(e, &tf, n->d)))
				jj_list_push(e->rt, kept.u.l, src->v[i]);
		}
		items = kept.u.l;
	}
	struct jj_loop *lp = jj_rt_alloc(e->rt, sizeof(*lp));
	struct jj_val loop = { .t = JV_LOOP };

	lp->items = items;
	loop.u.loop = lp;
	struct frame *it = jj_rt_alloc(e->rt, sizeof(*it));

	it->parent = f;
	for (size_t i = 0; i < items->n; i++) {
		/* A fresh scope each iteration, in the same memory: nothing can
		 * hold a frame past its iteration (macros close over the top level). */
		step(e, n);
		it->vars.n = 0;
		lp->i = i;
		bind(e, it, n, items->v[i]);
		assign(e, it, "loop", loop);
		if (exec(e, it, n->b, out) == FLOW_BREAK)
			break;
	}
	if (items->n == 0 && n->c)
		return exec(e, f, n->c, out);
	return FLOW_NEXT;
}

static enum flow
exec(struct ev *e, struct frame *f, const struct jj_node *n, struct jj_sb *out)
{
	step(e, n);
	switch (n->k) {
	case N_BODY:
		for (size_t i = 0; i < n->nk; i++) {
			enum flow fl = exec(e, f, n->kids[i], out);

			if (fl != FLOW_NEXT)
				return fl;
		}
		return FLOW_NEXT;
	case N_TEXT: jj_sb_add(e->rt, out, n->s, n->sn); return FLOW_NEXT;
	case N_OUT: jv_str_to(e->rt, out, eval(e, f, n->a)); return FLOW_NEXT;
	case N_IF:
		if (jv_truthy(eval(e, f, n->a)))
			return exec(e, f, n->b, out);
		return n->c ? exec(e, f, n->c, out) : FLOW_NEXT;
	case N_FOR: return exec_for(e, f, n, out);
	case N_SET: bind(e, f, n, eval(e, f, n->a)); return FLOW_NEXT;
	case N_SET_ATTR: {
		struct jj_val ns = lookup(e, f, n->names[0]);

		if (ns.t != JV_NS)
			jj_rt_fail(e->rt, KVC_EFORMAT, "cannot assign attribute on non-namespace object '%s'",
				   n->names[0]);
		jj_dict_set(e->rt, ns.u.d, n->s, n->sn, eval(e, f, n->a));
		return FLOW_NEXT;
	}
	case N_MACRO: {
		struct jj_val m = { .t = JV_MACRO };

		m.u.m = n;
		assign(e, f, n->names[0], m);
		return FLOW_NEXT;
	}
	case N_BREAK: return FLOW_BREAK;
	case N_CONTINUE: return FLOW_CONTINUE;
	default: jj_rt_fail(e->rt, KVC_EFORMAT, "not a statement");
	}
}

void
jj_eval(struct jj_rt *rt, const struct jj_eval_params *p, struct jj_sb *out)
{
	struct frame *root = jj_rt_alloc(rt, sizeof(*root));
	struct ev e = { .rt = rt, .root = root, .p = p };

	for (size_t i = 0; i < p->n_vars; i++)
		assign(&e, root, p->vars[i].name, jv_from_json(rt, p->vars[i].value));
	exec(&e, root, p->root, out);
}
