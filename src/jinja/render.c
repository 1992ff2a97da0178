/*
 * render.c: the public entry points. Each sets up the arena and the error
 * jump, runs the lexer and parser (jinja_parse) or the evaluator
 * (jinja_render), and frees everything on the way out, error or not.
 */
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

struct jinja_tmpl {
	struct jj_arena arena;	/* the tree and its strings */
	struct jj_node *root;
	struct jinja_limits lim;
};

struct jinja_limits
jinja_default_limits(void)
{
	return (struct jinja_limits){
		.max_output = 16u << 20,
		.max_memory = 256u << 20,
		.max_steps = 50000000,
		.max_depth = 64,
	};
}

static int
fail_init(struct jj_fail *f, char *err, size_t errlen)
{
	f->err = err;
	f->errlen = errlen;
	f->code = 0;
	if (err && errlen)
		err[0] = '\0';
	return 0;
}

int
jinja_parse(const char *src, size_t n, const struct jinja_limits *lim, struct jinja_tmpl **out,
	    char *err, size_t errlen)
{
	struct jinja_tmpl *t = calloc(1, sizeof(*t));
	struct jj_fail f;
	struct jj_tokens tk = {0};

	*out = NULL;
	if (!t) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	t->lim = lim ? *lim : jinja_default_limits();
	t->arena.limit = t->lim.max_memory;
	fail_init(&f, err, errlen);
	if (setjmp(f.jb)) {
		jj_arena_free(&t->arena);
		free(t);
		return f.code;
	}
	if (kvc_utf8_valid_prefix(src, n) != n)
		jj_failf(&f, KVC_EFORMAT, 0, 0, "template is not valid UTF-8 (at byte %zu)",
			 kvc_utf8_valid_prefix(src, n));
	jj_lex(&t->arena, &f, src, n, &tk);
	t->root = jj_parse(&t->arena, &f, &tk, t->lim.max_depth);
	*out = t;
	return 0;
}

void
jinja_free(struct jinja_tmpl *t)
{
	if (!t)
		return;
	jj_arena_free(&t->arena);
	free(t);
}

int
jinja_render(const struct jinja_tmpl *t, const struct jinja_var *vars, size_t n_vars,
	     int64_t now, struct kvc_buf *out, char *err, size_t errlen)
{
	struct jj_rt *rt = calloc(1, sizeof(*rt));
	struct jj_fail f;
	struct jj_eval_params p = { .root = t->root, .vars = vars, .n_vars = n_vars, .now = now, .lim = t->lim };
	struct jj_sb *sb;
	volatile int rc = 0;

	if (!rt) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	rt->arena.limit = t->lim.max_memory;
	rt->fail = &f;
	fail_init(&f, err, errlen);
	if (setjmp(f.jb)) {
		rc = f.code;
		goto done;
	}
	sb = jj_rt_alloc(rt, sizeof(*sb));
	sb->max = t->lim.max_output;
	jj_eval(rt, &p, sb);
	if (kvc_buf_append(out, sb->p ? sb->p : "", sb->n) != 0) {
		kvc_err(err, errlen, "out of memory");
		rc = KVC_ENOMEM;
	}
done:
	jj_arena_free(&rt->arena);
	free(rt);
	return rc;
}
