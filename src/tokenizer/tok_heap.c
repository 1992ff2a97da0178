/*
 * tok_heap.c: the binary heap of merge candidates shared by tok_bpe.c and
 * tok_spm.c: the lowest key merges first, ties going to the leftmost pair.
 */
#include "tok_internal.h"

#include <stdlib.h>

static bool
cand_before(const struct tok_cand *a, const struct tok_cand *b)
{
	return a->key < b->key || (a->key == b->key && a->left < b->left);
}

int
tok_heap_push(struct tok_heap *h, const struct tok_cand *c)
{
	size_t i;

	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 256;
		struct tok_cand *v = realloc(h->v, cap * sizeof *v);
		if (v == NULL)
			return KVC_ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	i = h->n++;
	h->steps++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!cand_before(c, &h->v[p]))
			break;
		h->steps++;
		h->v[i] = h->v[p];
		i = p;
	}
	h->v[i] = *c;
	return KVC_OK;
}

void
tok_heap_pop(struct tok_heap *h, struct tok_cand *top)
{
	struct tok_cand last;
	size_t i = 0;

	*top = h->v[0];
	last = h->v[--h->n];
	h->steps++;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		const struct tok_cand *best = &last;
		if (l < h->n && cand_before(&h->v[l], best)) {
			m = l;
			best = &h->v[l];
		}
		if (r < h->n && cand_before(&h->v[r], best))
			m = r;
		if (m == i)
			break;
		h->steps++;
		h->v[i] = h->v[m];
		i = m;
	}
	if (h->n > 0)
		h->v[i] = last;
}
