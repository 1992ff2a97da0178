/*
 * tok_ranks.c: merge candidates of a long BPE word in buckets by rank (see
 * tok_internal.h). A pair's rank is an integer and every rank is one pair,
 * so all candidates of a rank can be taken together; tok_bpe.c says why
 * that merges as the heap does. Everything here is O(1) per candidate,
 * plus a log of the number of distinct ranks per bucket.
 */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

void
tok_rankq_reset(struct tok_rankq *q)
{
	q->nb = 0;
	q->nheap = 0;
	if (q->slot != NULL) {
		memset(q->slot, 0xff, ((size_t)q->mask + 1) * sizeof *q->slot);
		q->steps += (size_t)q->mask + 1;
	}
}

void
tok_rankq_free(struct tok_rankq *q)
{
	for (size_t i = 0; i < q->b_cap; i++)
		free(q->b[i].left);
	free(q->b);
	free(q->slot);
	free(q->heap);
	memset(q, 0, sizeof *q);
}

static uint32_t
rank_hash(int32_t rank)
{
	return (uint32_t)rank * 2654435761u;
}

/* The slot of rank: its bucket's, or the empty one where it would go. */
static uint32_t
find_slot(const struct tok_rankq *q, int32_t rank)
{
	uint32_t i = rank_hash(rank) & q->mask;

	while (q->slot[i] >= 0 && q->b[q->slot[i]].rank != rank)
		i = (i + 1) & q->mask;
	return i;
}

/* Twice the slots (or 64), the buckets placed again. */
static int
grow_slots(struct tok_rankq *q)
{
	uint32_t n = q->slot ? (q->mask + 1) * 2 : 64;
	int32_t *v = malloc((size_t)n * sizeof *v);

	if (v == NULL)
		return KVC_ENOMEM;
	free(q->slot);
	q->slot = v;
	q->mask = n - 1;
	memset(q->slot, 0xff, (size_t)n * sizeof *q->slot);
	for (size_t i = 0; i < q->nb; i++)
		q->slot[find_slot(q, q->b[i].rank)] = (int32_t)i;
	return KVC_OK;
}

static void
heap_up(struct tok_rankq *q, size_t i)
{
	int32_t x = q->heap[i];

	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (q->b[q->heap[p]].rank <= q->b[x].rank)
			break;
		q->steps++;
		q->heap[i] = q->heap[p];
		i = p;
	}
	q->heap[i] = x;
}

/* A new bucket for rank, its index in the heap too: its index or -1 (no memory). */
static int32_t
new_bucket(struct tok_rankq *q, int32_t rank)
{
	if ((q->nb + 1) * 2 > (size_t)q->mask + 1 || q->slot == NULL)
		if (grow_slots(q) != KVC_OK)
			return -1;
	if (q->nb == q->b_cap) {
		size_t cap = q->b_cap ? q->b_cap * 2 : 32;
		struct tok_bucket *b = realloc(q->b, cap * sizeof *b);

		if (b == NULL)
			return -1;
		memset(b + q->b_cap, 0, (cap - q->b_cap) * sizeof *b);
		q->b = b;
		q->b_cap = cap;
	}
	if (q->nheap == q->heap_cap) {
		size_t cap = q->heap_cap ? q->heap_cap * 2 : 32;
		int32_t *h = realloc(q->heap, cap * sizeof *h);

		if (h == NULL)
			return -1;
		q->heap = h;
		q->heap_cap = cap;
	}
	int32_t bi = (int32_t)q->nb++;

	q->b[bi].rank = rank;
	q->b[bi].n = 0;
	q->slot[find_slot(q, rank)] = bi;
	q->heap[q->nheap++] = bi;
	heap_up(q, q->nheap - 1);
	return bi;
}

int
tok_rankq_push(struct tok_rankq *q, int32_t rank, int32_t left)
{
	int32_t bi = q->slot ? q->slot[find_slot(q, rank)] : -1;
	struct tok_bucket *b;

	q->steps++;
	if (bi < 0 && (bi = new_bucket(q, rank)) < 0)
		return KVC_ENOMEM;
	b = &q->b[bi];
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		int32_t *v = realloc(b->left, cap * sizeof *v);

		if (v == NULL)
			return KVC_ENOMEM;
		b->left = v;
		b->cap = cap;
	}
	b->left[b->n++] = left;
	return KVC_OK;
}

bool
tok_rankq_pop(struct tok_rankq *q, int32_t *rank, const int32_t **left, size_t *n)
{
	int32_t top, last;
	size_t i = 0;

	if (q->nheap == 0)
		return false;
	top = q->heap[0];
	last = q->heap[--q->nheap];
	q->steps++;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		int32_t best = last;

		if (l < q->nheap && q->b[q->heap[l]].rank < q->b[best].rank) {
			m = l;
			best = q->heap[l];
		}
		if (r < q->nheap && q->b[q->heap[r]].rank < q->b[best].rank)
			m = r;
		if (m == i)
			break;
		q->steps++;
		q->heap[i] = q->heap[m];
		i = m;
	}
	if (q->nheap > 0)
		q->heap[i] = last;
	*rank = q->b[top].rank;
	*left = q->b[top].left;
	*n = q->b[top].n;
	return true;
}
