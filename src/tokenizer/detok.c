/*
 * detok.c: the streaming detokenizer: token ids back to bytes, holding back
 * an incomplete UTF-8 sequence until a later token completes it, so what
 * it writes is always valid UTF-8.
 */
#include "tok_internal.h"

#include <string.h>

void
tok_detok_init(struct tok_detok *d, unsigned flags)
{
	memset(d, 0, sizeof *d);
	d->flags = flags;
}

static int
utf8_need(uint8_t b)
{
	if (b >= 0xC2 && b <= 0xDF)
		return 2;
	if (b >= 0xE0 && b <= 0xEF)
		return 3;
	if (b >= 0xF0 && b <= 0xF4)
		return 4;
	return 0;
}

/* May b follow the held-back bytes? (excludes overlongs, surrogates, > U+10FFFF) */
static bool
utf8_continues(const struct tok_detok *d, uint8_t b)
{
	uint8_t lo = 0x80, hi = 0xBF;

	if (d->n_pending == 1) {
		switch (d->pending[0]) {
		case 0xE0: lo = 0xA0; break;
		case 0xED: hi = 0x9F; break;
		case 0xF0: lo = 0x90; break;
		case 0xF4: hi = 0x8F; break;
		default: break;
		}
	}
	return b >= lo && b <= hi;
}

static const char replacement[] = "\xef\xbf\xbd";	/* U+FFFD */

static int
detok_bytes(struct tok_detok *d, const uint8_t *p, size_t n, struct kvc_buf *out)
{
	size_t i = 0;

	/* fast path: nothing held back, the piece is whole UTF-8 */
	if (d->n_pending == 0) {
		size_t v = kvc_utf8_valid_prefix((const char *)p, n);
		if (kvc_buf_append(out, p, v) != KVC_OK)
			return KVC_ENOMEM;
		i = v;
	}
	while (i < n) {
		uint8_t b = p[i];

		if (d->n_pending == 0) {
			int need = utf8_need(b);
			if (b < 0x80) {
				if (kvc_buf_append(out, &b, 1) != KVC_OK)
					return KVC_ENOMEM;
			} else if (need == 0) {
				if (kvc_buf_append(out, replacement, 3) != KVC_OK)
					return KVC_ENOMEM;
			} else {
				d->pending[d->n_pending++] = b;
			}
			i++;
			continue;
		}
		if (!utf8_continues(d, b)) {
			/* the held-back sequence can never complete: one U+FFFD, then look at b afresh */
			d->n_pending = 0;
			if (kvc_buf_append(out, replacement, 3) != KVC_OK)
				return KVC_ENOMEM;
			continue;
		}
		d->pending[d->n_pending++] = b;
		i++;
		if (d->n_pending == utf8_need(d->pending[0])) {
			if (kvc_buf_append(out, d->pending, (size_t)d->n_pending) != KVC_OK)
				return KVC_ENOMEM;
			d->n_pending = 0;
		}
	}
	return KVC_OK;
}

int
tok_detok_push(const struct kvc_tokenizer *t, struct tok_detok *d, int32_t id, struct kvc_buf *out)
{
	const uint8_t *p;
	size_t n;
	uint8_t ty;

	if (id < 0 || id >= t->n_vocab)
		return KVC_EINVAL;
	ty = t->type[id];
	if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN) && !(d->flags & TOK_DETOK_SPECIAL))
		return KVC_OK;
	p = (const uint8_t *)t->dec + t->dec_off[id];
	n = t->dec_off[id + 1] - t->dec_off[id];
	/* SPM: drop the space tok_encode's leading U+2581 stands for (llama.cpp's lstrip) */
	if (t->kind == TOK_KIND_SPM && t->add_space_prefix && d->n_emitted == 0 &&
	    !(d->flags & TOK_DETOK_KEEP_LEADING_SPACE) && n > 0 && p[0] == ' ') {
		p++;
		n--;
	}
	if (d->n_emitted < INT32_MAX)
		d->n_emitted++;
	return detok_bytes(d, p, n, out);
}

int
tok_detok_flush(struct tok_detok *d, struct kvc_buf *out)
{
	if (d->n_pending == 0)
		return KVC_OK;
	d->n_pending = 0;
	return kvc_buf_append(out, replacement, 3);
}

int
tok_decode(const struct kvc_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, struct kvc_buf *out)
{
	struct tok_detok d;
	int rc;

	tok_detok_init(&d, flags);
	for (size_t i = 0; i < n; i++)
		if ((rc = tok_detok_push(t, &d, ids[i], out)) != KVC_OK)
			return rc;
	return tok_detok_flush(&d, out);
}
