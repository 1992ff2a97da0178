/*
 * render.c: the chat template call every file of the conversation layer
 * makes, with the manager's family, template text and template variables
 * (--think, --reasoning-effort: only the model's own template reads them).
 */
#include "config.h"

#include "conv_int.h"

int
conv_render(const struct conv_mgr *m, const struct chat_msg *msgs, size_t n, bool add_gen,
    struct kvc_tokens *out, char *err, size_t errlen)
{
	if (m->p.family == CHAT_JINJA)
		return chat_jinja_render(eng_tokenizer(m->e), m->jinja, m->vars, msgs, 0, n, add_gen,
		    out, err, errlen);
	return chat_render(eng_tokenizer(m->e), m->p.family, m->jinja, msgs, n, add_gen, out,
	    err, errlen);
}

int
conv_render_delta(const struct conv_mgr *m, const struct chat_msg *msgs, size_t n_prev, size_t n,
    bool add_gen, struct kvc_tokens *out, char *err, size_t errlen)
{
	if (m->p.family == CHAT_JINJA)
		return chat_jinja_render(eng_tokenizer(m->e), m->jinja, m->vars, msgs, n_prev, n,
		    add_gen, out, err, errlen);
	return chat_render_delta(eng_tokenizer(m->e), m->p.family, m->jinja, msgs, n_prev, n,
	    add_gen, out, err, errlen);
}
