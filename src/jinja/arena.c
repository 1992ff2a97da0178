/*
 * arena.c: the one allocator of a parse or a render, and its errors.
 *
 * A template is untrusted: what it may allocate is bounded (the arena's
 * limit), and every failure, deep in an expression or a filter, jumps back
 * to the entry point (render.c), which frees the arena whole. So no code
 * below has to unwind by hand, and nothing leaks on an error.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

/* Blocks of 64 KiB, or one of its own for a larger allocation. */
#define JJ_BLOCK 65536

struct jj_block {
	struct jj_block *next;
	size_t used, cap;
	max_align_t data[];
};

void
jj_arena_free(struct jj_arena *a)
{
	struct jj_block *b = a->head;

	while (b) {
		struct jj_block *next = b->next;

		free(b);
		b = next;
	}
	a->head = NULL;
	a->total = 0;
}

void *
jj_alloc(struct jj_arena *a, struct jj_fail *f, size_t n)
{
	size_t al = sizeof(max_align_t), need = (n + al - 1) / al * al;
	struct jj_block *b = a->head;

	if (n > a->limit)
		jj_failf(f, KVC_ERANGE, 0, 0, "template needs more than %zu bytes of memory", a->limit);
	if (!b || b->cap - b->used < need) {
		size_t cap = need > JJ_BLOCK ? need : JJ_BLOCK;

		if (a->total + cap > a->limit)
			jj_failf(f, KVC_ERANGE, 0, 0, "template needs more than %zu bytes of memory", a->limit);
		b = malloc(sizeof(*b) + cap);
		if (!b)
			jj_failf(f, KVC_ENOMEM, 0, 0, "out of memory");
		b->cap = cap;
		b->used = 0;
		/* A large block goes behind the head so the head's room stays usable. */
		if (a->head && cap > JJ_BLOCK) {
			b->next = a->head->next;
			a->head->next = b;
		} else {
			b->next = a->head;
			a->head = b;
		}
		a->total += cap;
	}
	void *p = (char *)b->data + b->used;

	b->used += need;
	memset(p, 0, n);
	return p;
}

void
jj_failf(struct jj_fail *f, int code, int line, int col, const char *fmt, ...)
{
	if (f->err && f->errlen > 0) {
		size_t k = 0;
		va_list ap;

		if (line > 0) {
			int r = snprintf(f->err, f->errlen, "line %d col %d: ", line, col);

			k = r < 0 ? 0 : (size_t)r < f->errlen ? (size_t)r : f->errlen - 1;
		}
		va_start(ap, fmt);
		vsnprintf(f->err + k, f->errlen - k, fmt, ap);
		va_end(ap);
	}
	f->code = code;
	longjmp(f->jb, 1);
}

void
jj_rt_fail(struct jj_rt *rt, int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	jj_failf(rt->fail, code, rt->line, rt->col, "%s", msg);
}

void *
jj_rt_alloc(struct jj_rt *rt, size_t n)
{
	return jj_alloc(&rt->arena, rt->fail, n);
}
