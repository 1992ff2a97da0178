/*
 * jinja.h: a Jinja renderer for the chat templates GGUF files carry
 * (tokenizer.chat_template), configured as Hugging Face transformers'
 * apply_chat_template configures jinja2: trim_blocks and lstrip_blocks on,
 * a template's one trailing newline dropped, the loop controls extension
 * (break, continue), the globals raise_exception, strftime_now, namespace,
 * range and dict, and tojson as json.dumps(ensure_ascii=False) with its
 * indent, separators and sort_keys arguments.
 *
 * The subset is what real chat templates use (if/elif/else, for with loop.*
 * and else and a filter condition, set with namespaces and tuple targets,
 * macros with default and keyword arguments, the expression grammar with
 * filters, tests, slices and string/dict methods); anything else is refused
 * with a message naming the template's line and column, never guessed.
 *
 * A template in a model file is untrusted input: parsing and rendering are
 * bounded (struct jinja_limits) and a template that exceeds a bound is
 * refused with a message (KVC_ERANGE), never a crash or a hang.
 */
#ifndef KVC_JINJA_H
#define KVC_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/kvc.h"

/* Bounds on one parse and one render. */
struct jinja_limits {
	size_t max_output;	/* bytes of rendered text */
	size_t max_memory;	/* bytes the parse or the render may allocate (values, strings, the tree) */
	uint64_t max_steps;	/* expressions evaluated and statements run, loop iterations included */
	int max_depth;		/* nesting of macro calls, and of expressions and blocks in the parser */
};

/* The defaults: 16 MiB of output, 256 MiB of memory, 50 million steps, depth 64. */
struct jinja_limits jinja_default_limits(void);

/* A parsed template (opaque); free with jinja_free. */
struct jinja_tmpl;

/*
 * Parses src[0..n) (UTF-8; any line break Python's splitlines knows becomes
 * "\n", as jinja2 does). lim may be NULL for the defaults; the template keeps
 * a copy for its renders. Returns 0 and *out, or KVC_EFORMAT (syntax: err
 * says "line L col C: ..."), KVC_EUNSUPPORTED (a construct outside the
 * subset, named), KVC_ERANGE (a bound) or KVC_ENOMEM.
 */
int jinja_parse(const char *src, size_t n, const struct jinja_limits *lim,
		struct jinja_tmpl **out, char *err, size_t errlen);

void jinja_free(struct jinja_tmpl *t);

/* One variable of a render: its name and its value as a JSON tree (jansson's,
 * read only during the render; strings may hold NULs, json_string_length). */
struct jinja_var {
	const char *name;
	const json_t *value;
};

/*
 * Renders t with the variables vars[0..n_vars) (messages,
 * add_generation_prompt, bos_token, tools, enable_thinking, ...; a later
 * one of the same name wins). JSON integers are integers, other numbers
 * floats. now is the time strftime_now formats, in seconds since the
 * epoch, shown in local time as Python's datetime.now() is. The text is
 * appended to out. Returns 0, or KVC_EINVAL when the template called
 * raise_exception (err holds its message), KVC_EFORMAT (a runtime error:
 * an undefined value used, a type mismatch; err names the line and
 * column), KVC_EUNSUPPORTED (a filter, test or method outside the subset),
 * KVC_ERANGE (a bound) or KVC_ENOMEM. On failure out is as it was.
 */
int jinja_render(const struct jinja_tmpl *t, const struct jinja_var *vars, size_t n_vars,
		 int64_t now, struct kvc_buf *out, char *err, size_t errlen);

#endif
