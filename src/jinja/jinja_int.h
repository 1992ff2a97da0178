/*
 * jinja_int.h: what the renderer's files share. Bottom up:
 *   arena.c   the one allocator of a parse or a render (bounded, freed whole),
 *             errors (a longjmp back to the entry point with a message)
 *   value.c   values: construction from JSON, truthiness, equality, order,
 *             Python's str() and repr(), UTF-8 code point helpers
 *   json_out.c  tojson: Python's json.dumps
 *   lex.c     source -> tokens (text, tags, expression tokens), whitespace control
 *   parse.c   tokens -> tree of jj_node
 *   methods.c str/dict/list methods, the globals (range, namespace, ...)
 *   filters.c filters and tests
 *   eval.c    expressions and statements
 *   render.c  the public entry points
 *
 * Memory: every tree node, string and container of a parse or a render comes
 * from its arena and is released with it, so an error may longjmp out of any
 * depth without leaking (nothing between the setjmp and the longjmp owns
 * memory outside the arena, except the caller's output buffer).
 */
#ifndef KVC_JINJA_INT_H
#define KVC_JINJA_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kvc.h"
#include "jinja/jinja.h"

/* ---- arena.c ---- */

struct jj_block;

struct jj_arena {
	struct jj_block *head;	/* newest block first */
	size_t total;		/* bytes allocated from malloc */
	size_t limit;		/* most bytes total may reach */
};

/* Where errors go: the message, its code, and the jump back to the entry. */
struct jj_fail {
	jmp_buf jb;
	int code;		/* KVC_E* */
	char *err;
	size_t errlen;
};

/* Frees every block. */
void jj_arena_free(struct jj_arena *a);

/* n zeroed bytes from a, or a failure (KVC_ERANGE past the limit, KVC_ENOMEM). */
void *jj_alloc(struct jj_arena *a, struct jj_fail *f, size_t n);

/* Writes "line L col C: " (when line > 0) and the message into f, then longjmps. */
_Noreturn void jj_failf(struct jj_fail *f, int code, int line, int col, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* ---- value.c ---- */

enum jj_type {
	JV_UNDEF,	/* an undefined name or a missing key (name: which) */
	JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR,
	JV_LIST,	/* lists and tuples alike (the templates never tell them apart) */
	JV_DICT,
	JV_NS,		/* namespace(): a dict whose attributes may be set */
	JV_MACRO,	/* a macro (n: its definition) */
	JV_LOOP,	/* the loop variable of a for */
	JV_FUNC,	/* a global function (fn: which) */
};

struct jj_str {
	size_t n;	/* bytes, not counting the NUL */
	char p[];	/* UTF-8, NUL-terminated */
};

struct jj_list {
	size_t n, cap;
	struct jj_val *v;
};

struct jj_dict {
	size_t n, cap;
	struct jj_str **k;	/* keys, in insertion order (string keys only) */
	struct jj_val *v;
};

struct jj_loop;
struct jj_sb;
struct jj_node;

struct jj_val {
	enum jj_type t;
	union {
		bool b;
		int64_t i;
		double f;
		struct jj_str *s;
		struct jj_list *l;
		struct jj_dict *d;	/* JV_DICT, JV_NS */
		const struct jj_node *m;
		struct jj_loop *loop;
		int fn;
		const char *name;	/* JV_UNDEF: what was looked up, or NULL */
	} u;
};

struct jj_loop {
	const struct jj_list *items;
	size_t i;		/* index0 */
};

/* The context a value operation allocates in and fails through. */
struct jj_rt {
	struct jj_arena arena;
	struct jj_fail *fail;
	int line, col;		/* the node being evaluated, for messages */
};

_Noreturn void jj_rt_fail(struct jj_rt *rt, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void *jj_rt_alloc(struct jj_rt *rt, size_t n);

static inline struct jj_val jv_undef(const char *name) { struct jj_val v = { .t = JV_UNDEF }; v.u.name = name; return v; }
static inline struct jj_val jv_none(void) { struct jj_val v = { .t = JV_NONE }; return v; }
static inline struct jj_val jv_bool(bool b) { struct jj_val v = { .t = JV_BOOL }; v.u.b = b; return v; }
static inline struct jj_val jv_int(int64_t i) { struct jj_val v = { .t = JV_INT }; v.u.i = i; return v; }
static inline struct jj_val jv_float(double f) { struct jj_val v = { .t = JV_FLOAT }; v.u.f = f; return v; }

struct jj_str *jj_str_new(struct jj_arena *a, struct jj_fail *f, const char *p, size_t n);
struct jj_val jv_str(struct jj_rt *rt, const char *p, size_t n);
struct jj_val jv_cstr(struct jj_rt *rt, const char *p);
struct jj_val jv_list(struct jj_rt *rt, size_t cap);
struct jj_val jv_dict(struct jj_rt *rt, enum jj_type t);
void jj_list_push(struct jj_rt *rt, struct jj_list *l, struct jj_val v);
/* Sets key (overwriting) in d. */
void jj_dict_set(struct jj_rt *rt, struct jj_dict *d, const char *k, size_t kn, struct jj_val v);
/* The value at key, or NULL. */
struct jj_val *jj_dict_get(const struct jj_dict *d, const char *k, size_t kn);

/* A JSON tree as values (integers stay integers). */
struct jj_val jv_from_json(struct jj_rt *rt, const json_t *j);

bool jv_truthy(struct jj_val v);
bool jv_is_num(struct jj_val v);	/* int, float or bool (Python's bool is an int) */
double jv_num(struct jj_val v);
bool jv_equal(struct jj_val a, struct jj_val b);
/* Python's ordering (numbers, strings, lists); other pairs fail. <0, 0, >0. */
int jv_compare(struct jj_rt *rt, struct jj_val a, struct jj_val b);
/* Python's type name, for messages. */
const char *jv_type_name(struct jj_val v);

/* Python's str() (what {{ }} prints) and repr() appended to b. */
void jv_str_to(struct jj_rt *rt, struct jj_sb *b, struct jj_val v);
void jv_repr_to(struct jj_rt *rt, struct jj_sb *b, struct jj_val v);
/* str() as a value (strings returned as they are). */
struct jj_val jv_to_str(struct jj_rt *rt, struct jj_val v);
/* Python's repr() of a float. */
void jj_float_repr(char *buf, size_t len, double f);
/* A string being built, in the arena (so a failure leaks nothing); max bounds it. */
struct jj_sb {
	char *p;
	size_t n, cap;
	size_t max;	/* 0: the arena's limit */
};
/* Appends or fails (KVC_ERANGE past max). */
void jj_sb_add(struct jj_rt *rt, struct jj_sb *b, const void *p, size_t n);
/* The built string as a value. */
struct jj_val jj_sb_val(struct jj_rt *rt, const struct jj_sb *b);

/* UTF-8 code points: count, byte offset of the k-th, the one at s (its length in *len). */
size_t jj_u8_count(const char *s, size_t n);
size_t jj_u8_offset(const char *s, size_t n, size_t k);
uint32_t jj_u8_decode(const char *s, size_t n, size_t *len);
/* Python's str.isspace() for one code point. */
bool jj_is_space(uint32_t cp);

/* ---- json_out.c ---- */

struct jj_json_opts {
	int indent;		/* < 0: none (one line) */
	bool sort_keys;
	bool ensure_ascii;
	const char *item_sep, *key_sep;	/* NULL: json.dumps' defaults for the indent */
};

/* json.dumps(v, ...) appended to b; fails on what JSON cannot hold. */
void jj_json_dump(struct jj_rt *rt, struct jj_sb *b, struct jj_val v, const struct jj_json_opts *o);

/* ---- lex.c ---- */

enum jj_tok {
	T_EOF, T_TEXT,
	T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
	T_NAME, T_STRING, T_INT, T_FLOAT,
	T_OP,		/* an operator or punctuation: op holds it, e.g. "==", "(", "|" */
};

struct jj_token {
	enum jj_tok t;
	int line, col;
	const char *p;	/* T_TEXT, T_NAME, T_STRING (decoded), T_OP */
	size_t n;
	int64_t i;	/* T_INT */
	double f;	/* T_FLOAT */
};

struct jj_tokens {
	struct jj_token *v;
	size_t n, cap;
};

/* Source (already normalised) -> tokens, in the arena. */
void jj_lex(struct jj_arena *a, struct jj_fail *f, const char *src, size_t n, struct jj_tokens *out);

/* ---- parse.c ---- */

enum jj_kind {
	/* statements */
	N_BODY,		/* kids: the statements */
	N_TEXT,		/* s: the text */
	N_OUT,		/* a: the expression */
	N_IF,		/* a: test, b: then (N_BODY), c: else (N_BODY, an elif's N_IF inside) or NULL */
	N_FOR,		/* names: targets, a: iterable, b: body, c: else body or NULL, d: filter or NULL */
	N_SET,		/* names: targets (several: unpacked), a: value */
	N_SET_ATTR,	/* names[0].attr (s) = a */
	N_MACRO,	/* names[0]: the macro, kids: defaults (NULL for none) of params (kw), b: body */
	N_BREAK, N_CONTINUE,
	/* expressions */
	E_CONST,	/* val */
	E_NAME,		/* names[0] */
	E_ATTR,		/* a.s */
	E_INDEX,	/* a[b] */
	E_SLICE,	/* a[b:c:d], each of b c d may be NULL */
	E_CALL,		/* a(kids), kw[i] the keyword of kids[i] or NULL */
	E_FILTER,	/* a | s(kids, kw) */
	E_TEST,		/* a is [not: op] s(kids) */
	E_NOT, E_NEG, E_POS,	/* a */
	E_BIN,		/* a op b, op one of the jj_binop */
	E_AND, E_OR,	/* a, b */
	E_COND,		/* b if a else c (c NULL: undefined) */
	E_LIST, E_DICT,	/* kids (dict: key, value, key, value, ...) */
};

enum jj_binop {
	OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_CAT,
	OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
};

struct jj_node {
	enum jj_kind k;
	int op;			/* enum jj_binop; E_TEST: 1 when negated */
	int line, col;
	struct jj_node *a, *b, *c, *d;
	struct jj_node **kids;
	const char **kw;	/* E_CALL, E_FILTER, E_TEST, N_MACRO: names of kids, or NULL entries */
	size_t nk;
	const char **names;
	size_t nn;
	const char *s;		/* N_TEXT, E_ATTR, E_FILTER, E_TEST, N_SET_ATTR */
	size_t sn;
	struct jj_val val;	/* E_CONST */
};

/* Tokens -> tree; max_depth bounds the nesting. */
struct jj_node *jj_parse(struct jj_arena *a, struct jj_fail *f, const struct jj_tokens *tk, int max_depth);

/* ---- methods.c ---- */

enum jj_func { FN_RANGE, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_DICT };

/* The global function called name, or -1. */
int jj_func_find(const char *name);

/* Call of global fn with evaluated arguments (kw[i] NULL for positional). */
struct jj_val jj_func_call(struct jj_rt *rt, int fn, int64_t now, struct jj_val *args,
			   const char **kw, size_t n);

/* obj.name(args): a method of a string, dict or list; *found false when obj has none so named. */
struct jj_val jj_method_call(struct jj_rt *rt, struct jj_val obj, const char *name,
			     struct jj_val *args, size_t n, bool *found);

/* Python's str.strip/lstrip/rstrip (chars NULL: white space); which: 1 left, 2 right, 3 both. */
struct jj_val jj_strip(struct jj_rt *rt, struct jj_val s, const struct jj_val *chars, int which);

/* s[start:stop:step] of a string or a list, Python's rules; NULL bounds omitted. */
struct jj_val jj_slice(struct jj_rt *rt, struct jj_val obj, const struct jj_val *start,
		       const struct jj_val *stop, const struct jj_val *step);

/* ---- filters.c ---- */

/* value | name(args); fails on an unknown filter. */
struct jj_val jj_filter(struct jj_rt *rt, const char *name, struct jj_val v, struct jj_val *args,
			const char **kw, size_t n);

/* value is name(args). */
bool jj_test(struct jj_rt *rt, const char *name, struct jj_val v, struct jj_val *args, size_t n);

/* obj.name / obj[key] as jinja2's getattr and getitem: a missing one is undefined. */
struct jj_val jj_getattr(struct jj_rt *rt, struct jj_val obj, const char *name, size_t n);
struct jj_val jj_getitem(struct jj_rt *rt, struct jj_val obj, struct jj_val key);

/* The elements a for loop or a filter iterates: list items, dict keys, string characters. */
const struct jj_list *jj_iter(struct jj_rt *rt, struct jj_val v);

/* ---- eval.c ---- */

struct jj_eval_params {
	const struct jj_node *root;
	const struct jinja_var *vars;
	size_t n_vars;
	int64_t now;
	struct jinja_limits lim;
};

/* Runs the template, appending to out (whose max bounds the output). */
void jj_eval(struct jj_rt *rt, const struct jj_eval_params *p, struct jj_sb *out);

#endif
