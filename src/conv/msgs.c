/*
 * msgs.c: the in-memory copy of a conversation's messages, each with the
 * exact token ids it added to the stream.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "conv_int.h"

char *
conv_strdup(const char *s)
{
	char *d;
	size_t n;

	if (s == NULL)
		return NULL;
	n = strlen(s) + 1;
	d = malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

static void
msg_clear(struct sess_msg *x)
{
	free(x->text);
	free(x->reasoning);
	free(x->ids);
	memset(x, 0, sizeof *x);
}

int
conv_msgs_push(struct conv *c, const struct sess_msg *x)
{
	struct sess_msg *d;

	if (c->n_msgs == c->cap_msgs) {
		int cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
		struct sess_msg *v = realloc(c->msgs, (size_t)cap * sizeof *v);
		if (v == NULL)
			return KVC_ENOMEM;
		c->msgs = v;
		c->cap_msgs = cap;
	}
	d = &c->msgs[c->n_msgs];
	*d = *x;
	d->text = conv_strdup(x->text ? x->text : "");
	d->reasoning = conv_strdup(x->reasoning);
	d->ids = malloc((size_t)(x->n_ids > 0 ? x->n_ids : 1) * sizeof *d->ids);
	if (d->text == NULL || d->ids == NULL || (x->reasoning && d->reasoning == NULL)) {
		msg_clear(d);
		return KVC_ENOMEM;
	}
	if (x->n_ids > 0)
		memcpy(d->ids, x->ids, (size_t)x->n_ids * sizeof *d->ids);
	c->n_msgs++;
	return KVC_OK;
}

void
conv_msgs_drop(struct conv *c, int k)
{
	for (int i = k; i < c->n_msgs; i++)
		msg_clear(&c->msgs[i]);
	if (k < c->n_msgs)
		c->n_msgs = k;
}
