/*
 * parse.c: tokens -> tree, by recursive descent in jinja2's grammar and
 * precedence (lowest first): conditional "x if c else y", or, and, not,
 * comparisons and (not) in, + -, ~, * / // %, **, unary - +, then postfix
 * .attr [index] [a:b:c] (call), filters "| f(args)" and tests "is [not] t".
 * Nesting is bounded (a hostile template cannot exhaust the stack).
 */
#include <string.h>

#include "jinja/jinja_int.h"

struct parser {
	struct jj_arena *a;
	struct jj_fail *f;
	const struct jj_token *t;	/* the tokens, T_EOF last */
	size_t i;
	int depth, max_depth;
	int loops;			/* enclosing for loops (break/continue) */
};

/* A growable array of node pointers (and keyword names) in the arena. */
struct nvec {
	struct jj_node **v;
	const char **kw;
	size_t n, cap;
};

static const struct jj_token *
cur(struct parser *p)
{
	return &p->t[p->i];
}

static const struct jj_token *
next(struct parser *p)
{
	const struct jj_token *t = &p->t[p->i];

	if (t->t != T_EOF)
		p->i++;
	return t;
}

_Noreturn static void
fail_at(struct parser *p, const struct jj_token *t, int code, const char *msg, const char *what)
{
	jj_failf(p->f, code, t->line, t->col, msg, what ? what : "");
}

static bool
is_op(const struct jj_token *t, const char *op)
{
	return t->t == T_OP && t->n == strlen(op) && memcmp(t->p, op, t->n) == 0;
}

static bool
is_name(const struct jj_token *t, const char *name)
{
	return t->t == T_NAME && t->n == strlen(name) && memcmp(t->p, name, t->n) == 0;
}

static void
expect_op(struct parser *p, const char *op)
{
	if (!is_op(cur(p), op))
		fail_at(p, cur(p), KVC_EFORMAT, "expected '%s'", op);
	next(p);
}

static const char *
name_str(struct parser *p, const struct jj_token *t)
{
	char *s = jj_alloc(p->a, p->f, t->n + 1);

	memcpy(s, t->p, t->n);
	return s;
}

static const char *
expect_name(struct parser *p)
{
	if (cur(p)->t != T_NAME)
		fail_at(p, cur(p), KVC_EFORMAT, "expected a name%s", NULL);
	return name_str(p, next(p));
}

static struct jj_node *
node(struct parser *p, enum jj_kind k, const struct jj_token *at)
{
	struct jj_node *n = jj_alloc(p->a, p->f, sizeof(*n));

	n->k = k;
	n->line = at->line;
	n->col = at->col;
	return n;
}

static void
nvec_push(struct parser *p, struct nvec *v, struct jj_node *n, const char *kw)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 4;
		struct jj_node **nv = jj_alloc(p->a, p->f, cap * sizeof(*nv));
		const char **nk = jj_alloc(p->a, p->f, cap * sizeof(*nk));

		if (v->n) {
			memcpy(nv, v->v, v->n * sizeof(*nv));
			memcpy(nk, v->kw, v->n * sizeof(*nk));
		}
		v->v = nv;
		v->kw = nk;
		v->cap = cap;
	}
	v->v[v->n] = n;
	v->kw[v->n++] = kw;
}

static void
set_kids(struct jj_node *n, const struct nvec *v)
{
	n->kids = v->v;
	n->kw = v->kw;
	n->nk = v->n;
}

static void
enter(struct parser *p)
{
	if (++p->depth > p->max_depth)
		jj_failf(p->f, KVC_ERANGE, cur(p)->line, cur(p)->col,
			 "template nested more than %d levels deep", p->max_depth);
}

static struct jj_node *parse_expr(struct parser *p, bool condexpr);
static struct jj_node *parse_tuple(struct parser *p, bool condexpr);
static struct jj_node *parse_unary(struct parser *p, bool filters);

/* "(" args ")": positional, then name=value. */
static void
parse_args(struct parser *p, struct jj_node *n)
{
	struct nvec v = {0};

	expect_op(p, "(");
	while (!is_op(cur(p), ")")) {
		if (v.n)
			expect_op(p, ",");
		if (is_op(cur(p), ")"))
			break;
		const char *kw = NULL;

		if (cur(p)->t == T_NAME && is_op(&p->t[p->i + 1], "=")) {
			kw = expect_name(p);
			next(p);
		} else if (is_op(cur(p), "*") || is_op(cur(p), "**")) {
			fail_at(p, cur(p), KVC_EUNSUPPORTED, "*args and **kwargs are not supported%s", NULL);
		}
		nvec_push(p, &v, parse_expr(p, true), kw);
	}
	next(p);
	set_kids(n, &v);
}

static struct jj_node *
parse_collection(struct parser *p, const struct jj_token *at, bool dict)
{
	struct jj_node *n = node(p, dict ? E_DICT : E_LIST, at);
	struct nvec v = {0};
	const char *close = dict ? "}" : "]";

	while (!is_op(cur(p), close)) {
		if (v.n)
			expect_op(p, ",");
		if (is_op(cur(p), close))
			break;
		nvec_push(p, &v, parse_expr(p, true), NULL);
		if (dict) {
			expect_op(p, ":");
			nvec_push(p, &v, parse_expr(p, true), NULL);
		}
	}
	next(p);
	set_kids(n, &v);
	return n;
}

static struct jj_node *
const_node(struct parser *p, const struct jj_token *t, struct jj_val v)
{
	struct jj_node *n = node(p, E_CONST, t);

	n->val = v;
	return n;
}

static struct jj_node *
parse_string(struct parser *p, const struct jj_token *t)
{
	/* Adjacent literals concatenate, as in Python. */
	size_t len = t->n, i = p->i;

	while (p->t[i].t == T_STRING)
		len += p->t[i++].n;
	struct jj_val v = { .t = JV_STR };

	v.u.s = jj_str_new(p->a, p->f, t->p, t->n);
	if (i > p->i) {
		struct jj_str *s = jj_alloc(p->a, p->f, sizeof(*s) + len + 1);
		memcpy(s->p, t->p, t->n);
		s->n = t->n;
		while (cur(p)->t == T_STRING) {
			const struct jj_token *u = next(p);

			memcpy(s->p + s->n, u->p, u->n);
			s->n += u->n;
		}
		s->p[s->n] = '\0';
		v.u.s = s;
	}
	return const_node(p, t, v);
}

static struct jj_node *
parse_primary(struct parser *p)
{
	const struct jj_token *t = next(p);

	switch (t->t) {
	case T_NAME:
		if (is_name(t, "true") || is_name(t, "True"))
			return const_node(p, t, jv_bool(true));
		if (is_name(t, "false") || is_name(t, "False"))
			return const_node(p, t, jv_bool(false));
		if (is_name(t, "none") || is_name(t, "None"))
			return const_node(p, t, jv_none());
		struct jj_node *n = node(p, E_NAME, t);

		n->names = jj_alloc(p->a, p->f, sizeof(*n->names));
		n->names[0] = name_str(p, t);
		n->nn = 1;
		return n;
	case T_STRING: return parse_string(p, t);
	case T_INT: return const_node(p, t, jv_int(t->i));
	case T_FLOAT: return const_node(p, t, jv_float(t->f));
	case T_OP:
		if (is_op(t, "(")) {
			if (is_op(cur(p), ")")) {
				next(p);
				return node(p, E_LIST, t);
			}
			struct jj_node *e = parse_tuple(p, true);

			expect_op(p, ")");
			return e;
		}
		if (is_op(t, "["))
			return parse_collection(p, t, false);
		if (is_op(t, "{"))
			return parse_collection(p, t, true);
		break;
	default:
		break;
	}
	fail_at(p, t, KVC_EFORMAT, "unexpected %s", t->t == T_EOF ? "end of template" :
		t->t == T_VAR_END || t->t == T_BLOCK_END ? "end of tag" : "token");
}

static struct jj_node *
parse_subscript(struct parser *p, struct jj_node *obj)
{
	const struct jj_token *t = next(p);
	struct jj_node *n;

	if (is_op(t, ".")) {
		const struct jj_token *a = next(p);

		if (a->t == T_INT) {
			n = node(p, E_INDEX, t);
			n->b = const_node(p, a, jv_int(a->i));
		} else if (a->t == T_NAME) {
			n = node(p, E_ATTR, t);
			n->s = name_str(p, a);
			n->sn = a->n;
		} else {
			fail_at(p, a, KVC_EFORMAT, "expected a name after '.'%s", NULL);
		}
		n->a = obj;
		return n;
	}
	/* "[": an index, or a slice with any of start:stop:step left out */
	struct jj_node *part[3] = { NULL, NULL, NULL };
	int k = 0;

	for (;;) {
		if (!is_op(cur(p), ":") && !is_op(cur(p), "]"))
			part[k] = parse_expr(p, true);
		if (is_op(cur(p), ":") && k < 2) {
			next(p);
			k++;
			continue;
		}
		break;
	}
	expect_op(p, "]");
	if (k == 0 && !part[0])
		fail_at(p, t, KVC_EFORMAT, "empty subscript%s", NULL);
	n = node(p, k ? E_SLICE : E_INDEX, t);
	n->a = obj;
	n->b = part[0];
	n->c = part[1];
	n->d = part[2];
	return n;
}

static struct jj_node *
parse_postfix(struct parser *p, struct jj_node *n)
{
	for (;;) {
		if (is_op(cur(p), ".") || is_op(cur(p), "[")) {
			n = parse_subscript(p, n);
		} else if (is_op(cur(p), "(")) {
			struct jj_node *c = node(p, E_CALL, cur(p));

			c->a = n;
			parse_args(p, c);
			n = c;
		} else {
			return n;
		}
	}
}

/* A filter's or test's name: dotted names joined. */
static void
dotted_name(struct parser *p, struct jj_node *n)
{
	const struct jj_token *t = cur(p);
	size_t from = p->i;

	expect_name(p);
	while (is_op(cur(p), ".") && p->t[p->i + 1].t == T_NAME)
		p->i += 2;
	size_t len = 0;

	for (size_t i = from; i < p->i; i++)
		len += p->t[i].n;
	char *s = jj_alloc(p->a, p->f, len + 1);

	len = 0;
	for (size_t i = from; i < p->i; i++) {
		memcpy(s + len, p->t[i].p, p->t[i].n);
		len += p->t[i].n;
	}
	n->s = s;
	n->sn = len;
	(void)t;
}

static struct jj_node *
parse_test(struct parser *p, struct jj_node *obj)
{
	struct jj_node *n = node(p, E_TEST, next(p));

	n->a = obj;
	if (is_name(cur(p), "not")) {
		next(p);
		n->op = 1;
	}
	dotted_name(p, n);
	const struct jj_token *t = cur(p);

	if (is_op(t, "(")) {
		parse_args(p, n);
	} else if ((t->t == T_NAME || t->t == T_STRING || t->t == T_INT || t->t == T_FLOAT ||
		    is_op(t, "[") || is_op(t, "{")) &&
		   !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and") && !is_name(t, "is")) {
		struct nvec v = {0};

		nvec_push(p, &v, parse_postfix(p, parse_primary(p)), NULL);
		set_kids(n, &v);
	}
	return n;
}

static struct jj_node *
parse_filters(struct parser *p, struct jj_node *n)
{
	for (;;) {
		if (is_op(cur(p), "|")) {
			struct jj_node *f = node(p, E_FILTER, next(p));

			f->a = n;
			dotted_name(p, f);
			if (is_op(cur(p), "("))
				parse_args(p, f);
			n = f;
		} else if (is_name(cur(p), "is")) {
			n = parse_test(p, n);
		} else if (is_op(cur(p), "(")) {
			n = parse_postfix(p, n);
		} else {
			return n;
		}
	}
}

static struct jj_node *
parse_unary(struct parser *p, bool filters)
{
	const struct jj_token *t = cur(p);
	struct jj_node *n;

	enter(p);
	if (is_op(t, "-") || is_op(t, "+")) {
		next(p);
		n = node(p, is_op(t, "-") ? E_NEG : E_POS, t);
		n->a = parse_unary(p, false);
	} else {
		n = parse_primary(p);
	}
	n = parse_postfix(p, n);
	if (filters)
		n = parse_filters(p, n);
	p->depth--;
	return n;
}

static struct jj_node *
binop(struct parser *p, const struct jj_token *t, int op, struct jj_node *a, struct jj_node *b)
{
	struct jj_node *n = node(p, E_BIN, t);

	n->op = op;
	n->a = a;
	n->b = b;
	return n;
}

static struct jj_node *
parse_pow(struct parser *p)
{
	struct jj_node *n = parse_unary(p, true);

	while (is_op(cur(p), "**")) {
		const struct jj_token *t = next(p);

		n = binop(p, t, OP_POW, n, parse_unary(p, true));
	}
	return n;
}

static struct jj_node *
parse_math2(struct parser *p)
{
	struct jj_node *n = parse_pow(p);

	for (;;) {
		const struct jj_token *t = cur(p);
		int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FDIV :
			 is_op(t, "%") ? OP_MOD : -1;

		if (op < 0)
			return n;
		next(p);
		n = binop(p, t, op, n, parse_pow(p));
	}
}

static struct jj_node *
parse_concat(struct parser *p)
{
	struct jj_node *n = parse_math2(p);

	while (is_op(cur(p), "~")) {
		const struct jj_token *t = next(p);

		n = binop(p, t, OP_CAT, n, parse_math2(p));
	}
	return n;
}

static struct jj_node *
parse_math1(struct parser *p)
{
	struct jj_node *n = parse_concat(p);

	for (;;) {
		const struct jj_token *t = cur(p);
		int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : -1;

		if (op < 0)
			return n;
		next(p);
		n = binop(p, t, op, n, parse_concat(p));
	}
}

static struct jj_node *
parse_compare(struct parser *p)
{
	struct jj_node *n = parse_math1(p);
	static const char *const ops[] = { "==", "!=", "<", "<=", ">", ">=" };
	static const int codes[] = { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };

	for (;;) {
		const struct jj_token *t = cur(p);
		int op = -1;

		for (size_t k = 0; k < 6; k++)
			if (is_op(t, ops[k]))
				op = codes[k];
		if (is_name(t, "in"))
			op = OP_IN;
		else if (is_name(t, "not") && is_name(&p->t[p->i + 1], "in"))
			op = OP_NOTIN;
		if (op < 0)
			return n;
		next(p);
		if (op == OP_NOTIN)
			next(p);
		n = binop(p, t, op, n, parse_math1(p));
	}
}

static struct jj_node *
parse_not(struct parser *p)
{
	if (is_name(cur(p), "not")) {
		struct jj_node *n = node(p, E_NOT, next(p));

		enter(p);
		n->a = parse_not(p);
		p->depth--;
		return n;
	}
	return parse_compare(p);
}

static struct jj_node *
parse_logic(struct parser *p, bool or)
{
	struct jj_node *n = or ? parse_logic(p, false) : parse_not(p);
	const char *word = or ? "or" : "and";

	while (is_name(cur(p), word)) {
		struct jj_node *b = node(p, or ? E_OR : E_AND, next(p));

		b->a = n;
		b->b = or ? parse_logic(p, false) : parse_not(p);
		n = b;
	}
	return n;
}

static struct jj_node *
parse_expr(struct parser *p, bool condexpr)
{
	enter(p);
	struct jj_node *n = parse_logic(p, true);

	while (condexpr && is_name(cur(p), "if")) {
		struct jj_node *c = node(p, E_COND, next(p));

		c->b = n;
		c->a = parse_logic(p, true);
		if (is_name(cur(p), "else")) {
			next(p);
			c->c = parse_expr(p, true);
		}
		n = c;
	}
	p->depth--;
	return n;
}

/* An expression, or several separated by commas: a tuple (a list here). */
static struct jj_node *
parse_tuple(struct parser *p, bool condexpr)
{
	const struct jj_token *t = cur(p);
	struct jj_node *first = parse_expr(p, condexpr);

	if (!is_op(cur(p), ","))
		return first;
	struct jj_node *n = node(p, E_LIST, t);
	struct nvec v = {0};

	nvec_push(p, &v, first, NULL);
	while (is_op(cur(p), ",")) {
		next(p);
		const struct jj_token *c = cur(p);

		if (c->t == T_VAR_END || c->t == T_BLOCK_END || is_op(c, ")") || is_op(c, "=") ||
		    is_name(c, "if"))
			break;
		nvec_push(p, &v, parse_expr(p, condexpr), NULL);
	}
	set_kids(n, &v);
	return n;
}

/* ---- statements ---- */

static struct jj_node *parse_body(struct parser *p, const char *const *ends);

static void
expect_end(struct parser *p)
{
	if (cur(p)->t != T_BLOCK_END)
		fail_at(p, cur(p), KVC_EFORMAT, "expected the end of the tag ('%%}')%s", NULL);
	next(p);
}

/* A target list: name or name, name, ... (for, set). */
static void
parse_targets(struct parser *p, struct jj_node *n)
{
	const char *names[16];
	size_t k = 0;

	do {
		if (k == 16)
			fail_at(p, cur(p), KVC_EUNSUPPORTED, "more than 16 targets%s", NULL);
		names[k++] = expect_name(p);
	} while (is_op(cur(p), ",") && (next(p), true));
	n->names = jj_alloc(p->a, p->f, k * sizeof(*n->names));
	memcpy(n->names, names, k * sizeof(*names));
	n->nn = k;
}

static struct jj_node *
parse_if(struct parser *p, const struct jj_token *at)
{
	static const char *const ends[] = { "elif", "else", "endif", NULL };
	struct jj_node *n = node(p, N_IF, at);

	n->a = parse_tuple(p, false);
	expect_end(p);
	n->b = parse_body(p, ends);
	const struct jj_token *t = next(p);	/* the end name; its '{%' is behind it */

	if (is_name(t, "elif")) {
		struct jj_node *body = node(p, N_BODY, t);
		struct nvec v = {0};

		nvec_push(p, &v, parse_if(p, t), NULL);
		set_kids(body, &v);
		n->c = body;
		return n;	/* the innermost elif consumed the endif */
	}
	if (is_name(t, "else")) {
		static const char *const endif[] = { "endif", NULL };

		expect_end(p);
		n->c = parse_body(p, endif);
		next(p);
	}
	expect_end(p);
	return n;
}

static struct jj_node *
parse_for(struct parser *p, const struct jj_token *at)
{
	static const char *const ends[] = { "else", "endfor", NULL };
	static const char *const endfor[] = { "endfor", NULL };
	struct jj_node *n = node(p, N_FOR, at);

	parse_targets(p, n);
	if (!is_name(cur(p), "in"))
		fail_at(p, cur(p), KVC_EFORMAT, "expected 'in'%s", NULL);
	next(p);
	n->a = parse_tuple(p, false);
	if (is_name(cur(p), "if")) {
		next(p);
		n->d = parse_expr(p, true);
	}
	if (is_name(cur(p), "recursive"))
		fail_at(p, cur(p), KVC_EUNSUPPORTED, "recursive loops are not supported%s", NULL);
	expect_end(p);
	p->loops++;
	n->b = parse_body(p, ends);
	p->loops--;
	if (is_name(next(p), "else")) {
		expect_end(p);
		n->c = parse_body(p, endfor);
		next(p);
	}
	expect_end(p);
	return n;
}

static struct jj_node *
parse_set(struct parser *p, const struct jj_token *at)
{
	struct jj_node *n;

	if (cur(p)->t == T_NAME && is_op(&p->t[p->i + 1], ".")) {
		n = node(p, N_SET_ATTR, at);
		n->names = jj_alloc(p->a, p->f, sizeof(*n->names));
		n->names[0] = expect_name(p);
		n->nn = 1;
		next(p);
		n->s = expect_name(p);
		n->sn = strlen(n->s);
	} else {
		n = node(p, N_SET, at);
		parse_targets(p, n);
	}
	if (!is_op(cur(p), "="))
		fail_at(p, cur(p), KVC_EUNSUPPORTED,
			"block assignments ({%% set x %%}...{%% endset %%}) are not supported%s", NULL);
	next(p);
	n->a = parse_tuple(p, true);
	expect_end(p);
	return n;
}

static struct jj_node *
parse_macro(struct parser *p, const struct jj_token *at)
{
	static const char *const ends[] = { "endmacro", NULL };
	struct jj_node *n = node(p, N_MACRO, at);
	struct nvec params = {0};
	int loops = p->loops;

	n->names = jj_alloc(p->a, p->f, sizeof(*n->names));
	n->names[0] = expect_name(p);
	n->nn = 1;
	expect_op(p, "(");
	while (!is_op(cur(p), ")")) {
		if (params.n)
			expect_op(p, ",");
		const char *name = expect_name(p);
		struct jj_node *def = NULL;

		if (is_op(cur(p), "=")) {
			next(p);
			def = parse_expr(p, true);
		}
		nvec_push(p, &params, def, name);
	}
	next(p);
	set_kids(n, &params);
	expect_end(p);
	p->loops = 0;	/* break and continue do not cross a macro */
	n->b = parse_body(p, ends);
	p->loops = loops;
	next(p);
	if (cur(p)->t == T_NAME)
		next(p);
	expect_end(p);
	return n;
}

static struct jj_node *
parse_stmt(struct parser *p)
{
	const struct jj_token *t = next(p);
	struct jj_node *n;

	if (t->t != T_NAME)
		fail_at(p, t, KVC_EFORMAT, "expected a tag name%s", NULL);
	if (is_name(t, "if"))
		return parse_if(p, t);
	if (is_name(t, "for"))
		return parse_for(p, t);
	if (is_name(t, "set"))
		return parse_set(p, t);
	if (is_name(t, "macro"))
		return parse_macro(p, t);
	if (is_name(t, "break") || is_name(t, "continue")) {
		if (p->loops == 0)
			fail_at(p, t, KVC_EFORMAT, "'%s' outside a loop", name_str(p, t));
		n = node(p, is_name(t, "break") ? N_BREAK : N_CONTINUE, t);
		expect_end(p);
		return n;
	}
	static const char *const known[] = { "elif", "else", "endif", "endfor", "endmacro", NULL };

	for (size_t k = 0; known[k]; k++)
		if (is_name(t, known[k]))
			fail_at(p, t, KVC_EFORMAT, "unexpected '%s'", known[k]);
	fail_at(p, t, KVC_EUNSUPPORTED, "the tag '%s' is not supported", name_str(p, t));
}

/* Statements up to a "{%" whose name is one of ends (left to the caller,
 * positioned on the name), or the end of the template when ends is NULL. */
static struct jj_node *
parse_body(struct parser *p, const char *const *ends)
{
	struct jj_node *body = node(p, N_BODY, cur(p));
	struct nvec v = {0};
	const struct jj_token *opened = cur(p);

	enter(p);
	for (;;) {
		const struct jj_token *t = cur(p);
		struct jj_node *n;

		if (t->t == T_EOF) {
			if (ends)
				fail_at(p, opened, KVC_EFORMAT, "block not closed: missing {%% %s %%}",
					ends[0] && ends[1] ? ends[1] : ends[0]);
			break;
		}
		if (t->t == T_TEXT) {
			next(p);
			n = node(p, N_TEXT, t);
			n->s = t->p;
			n->sn = t->n;
		} else if (t->t == T_VAR_BEGIN) {
			next(p);
			n = node(p, N_OUT, t);
			n->a = parse_tuple(p, true);
			if (cur(p)->t != T_VAR_END)
				fail_at(p, cur(p), KVC_EFORMAT, "expected the end of the expression ('}}')%s", NULL);
			next(p);
		} else if (t->t == T_BLOCK_BEGIN) {
			const struct jj_token *name = &p->t[p->i + 1];
			bool end = false;

			for (size_t k = 0; ends && ends[k]; k++)
				end |= is_name(name, ends[k]);
			if (end) {
				next(p);
				break;
			}
			next(p);
			n = parse_stmt(p);
		} else {
			fail_at(p, t, KVC_EFORMAT, "unexpected token%s", NULL);
		}
		nvec_push(p, &v, n, NULL);
	}
	set_kids(body, &v);
	p->depth--;
	return body;
}

struct jj_node *
jj_parse(struct jj_arena *a, struct jj_fail *f, const struct jj_tokens *tk, int max_depth)
{
	struct parser p = { .a = a, .f = f, .t = tk->v, .max_depth = max_depth };

	return parse_body(&p, NULL);
}
