/*
 * slide.c: --ctx-overflow slide, the StreamingLLM window. When a turn does
 * not fit, the cache keeps its first `keep` positions (the system prompt,
 * or 4 attention sinks) and its most recent ones, and the middle is
 * dropped; the engine moves the later positions down and re-rotates their
 * K (eng_seq_slide) instead of computing them again.
 *
 * What the cache holds is then, in the window's stream F (the ids of
 * msgs[win..n_msgs), conv_build_stream), F[0, keep) followed by F[cut, end):
 * dropping more of the middle only moves cut on. The store remembers
 * (win, keep, cut) in the conversation's window value, packed by
 * conv_window_key (an unslid window is its message index, as before), and
 * keys the snapshot chunks with the same value, so a resume restores the
 * slid cache from its chunks byte for byte, and chunks of another slide
 * are never taken for it.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "conv_int.h"

/*
 * A slid window's key: bit 62 set (an unslid window is any smaller
 * non-negative value: its message index), then cut, keep and the message
 * index in fields of these widths.
 */
#define KEY_WIN_BITS 20
#define KEY_KEEP_BITS 20
#define KEY_CUT_BITS 22
#define KEY_SLID ((int64_t)1 << 62)

int64_t
conv_window_key(const struct conv *c, int win)
{
	if (c->slide_keep == 0)
		return win;
	return KEY_SLID | (int64_t)win | (int64_t)c->slide_keep << KEY_WIN_BITS |
	    (int64_t)c->slide_cut << (KEY_WIN_BITS + KEY_KEEP_BITS);
}

/* Whether (win, keep, cut) can be packed. */
static bool
key_fits(int win, int keep, int cut)
{
	return win < (1 << KEY_WIN_BITS) && keep < (1 << KEY_KEEP_BITS) && cut < (1 << KEY_CUT_BITS);
}

void
conv_slide_reset(struct conv *c)
{
	c->slide_keep = c->slide_cut = 0;
}

int
conv_build_cached(const struct conv *c, int to, struct kvc_tokens *out, char *err,
    size_t errlen)
{
	int rc = conv_build_stream(c, c->win, to, out, err, errlen), keep = c->slide_keep;

	if (rc || keep == 0)
		return rc;
	if ((int)out->n < c->slide_cut) {
		kvc_err(err, errlen, "the slid context starts after message %d", to);
		return KVC_ERANGE;
	}
	memmove(out->v + keep, out->v + c->slide_cut, (out->n - (size_t)c->slide_cut) * sizeof *out->v);
	out->n -= (size_t)(c->slide_cut - keep);
	return KVC_OK;
}

int
conv_window_open(struct conv *c, int64_t key)
{
	int64_t mask_w = (1 << KEY_WIN_BITS) - 1, mask_k = (1 << KEY_KEEP_BITS) - 1;
	int64_t win = key & KEY_SLID ? key & mask_w : key;
	struct kvc_tokens f = {0};

	conv_slide_reset(c);
	if (win > 0 && win < c->n_msgs && c->msgs[win].role == SESS_USER)
		c->win = (int)win;
	else if (win != 0)
		return KVC_ECORRUPT;
	if (!(key & KEY_SLID))
		return KVC_OK;
	if (key >> (KEY_WIN_BITS + KEY_KEEP_BITS + KEY_CUT_BITS) != KEY_SLID >> (KEY_WIN_BITS +
	    KEY_KEEP_BITS + KEY_CUT_BITS))
		return KVC_ECORRUPT;
	c->slide_keep = (int)(key >> KEY_WIN_BITS & mask_k);
	c->slide_cut = (int)(key >> (KEY_WIN_BITS + KEY_KEEP_BITS) & (((int64_t)1 << KEY_CUT_BITS) - 1));
	/* a slide that does not describe these messages is forgotten: the cache is recomputed */
	if (c->slide_keep < 1 || c->slide_cut <= c->slide_keep ||
	    conv_build_stream(c, c->win, c->n_msgs, &f, NULL, 0) != 0 || (int)f.n < c->slide_cut) {
		conv_slide_reset(c);
		kvc_tokens_free(&f);
		return KVC_ECORRUPT;
	}
	kvc_tokens_free(&f);
	return KVC_OK;
}

bool
conv_slide_cuts(const struct conv *c, int k)
{
	struct kvc_tokens f = {0};
	bool cuts;

	if (c->slide_keep == 0)
		return false;
	/* message k starts where the stream of the messages before it ends */
	cuts = conv_build_stream(c, c->win, k, &f, NULL, 0) != 0 || (int)f.n < c->slide_cut;
	kvc_tokens_free(&f);
	return cuts;
}

/*
 * The positions kept at the front: --keep, else the system prompt as the
 * stream renders it (when the stream starts with it), else 4.
 */
static int
keep_positions(const struct conv *c)
{
	struct conv_mgr *m = c->m;
	struct chat_msg sys = { .role = CHAT_SYSTEM, .text = c->system };
	struct kvc_tokens t = {0};
	const int32_t *s = eng_seq_tokens(c->seq);
	int n = eng_seq_n_pos(c->seq), keep = 4;

	if (c->slide_keep > 0)
		return c->slide_keep;	/* already slid: the same sinks stay */
	if (m->p.keep > 0)
		return m->p.keep;
	if (c->win == 0 && c->system != NULL && c->system[0] != '\0' &&
	    conv_render(m, &sys, 1, false, &t, NULL, 0) == 0 &&
	    t.n > 0 && (int)t.n < n && memcmp(t.v, s, t.n * sizeof *s) == 0)
		keep = (int)t.n;
	kvc_tokens_free(&t);
	return keep;
}

int
conv_slide(struct conv *c, int need, int *slid, char *err, size_t errlen)
{
	int n = eng_seq_n_pos(c->seq), keep = keep_positions(c), drop, cut, rc;

	*slid = 0;
	/* Drop what is needed, and at least half of what lies after the sinks: a
	 * conversation at the edge of its context would otherwise slide every turn. */
	drop = (n - keep) / 2 > need ? (n - keep) / 2 : need;
	if (keep >= n || drop > n - keep) {
		kvc_err(err, errlen, "cannot slide: %d positions to keep and %d to free of %d",
		    keep, need, n);
		return KVC_ERANGE;
	}
	cut = (c->slide_keep > 0 ? c->slide_cut : keep) + drop;
	if (!key_fits(c->win, keep, cut)) {
		kvc_err(err, errlen, "cannot slide: the conversation's stream is too long to record "
		    "(%d positions)", cut);
		return KVC_ERANGE;
	}
	rc = eng_seq_slide(c->seq, keep, drop, err, errlen);
	if (rc)
		return rc;
	c->slide_keep = keep;
	c->slide_cut = cut;
	*slid = drop;
	return KVC_OK;
}
