/*
 * tok_bpe.c: byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * Text is cut into pre-tokens (pretok.c); each pre-token's bytes start as
 * one symbol per byte (the token of the byte's GPT-2 unicode character) and
 * the adjacent pair with the lowest merge rank is merged until none is
 * left, ties going to the leftmost pair, as llama.cpp's llm_tokenizer_bpe.
 * Pairs are looked up by token id, so a merge is a hash probe, and the
 * candidates sit in a binary heap with lazy deletion: O(n log n) per word.
 * A long word (a pasted run of digits is one under gpt-2's \p{N}+) merges
 * by rank buckets instead, linear in its length (merge_ranks says why the
 * tokens are the same).
 */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* 12 bytes: a long word's symbols are walked often, and fewer cache lines keep it linear. */
struct bpe_sym {
	int32_t id;		/* token of this symbol, -1 if none, MERGED once merged into prev */
	int32_t prev, next;	/* neighbours, -1 at the ends */
};
#define MERGED (-2)

static int
try_pair(const struct kvc_tokenizer *t, const struct bpe_sym *sym, int32_t l, int32_t r,
    struct tok_heap *h)
{
	struct tok_cand c;
	int32_t rank;

	h->steps++;
	if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0)
		return KVC_OK;
	if (!tok_pairmap_find(&t->merges, sym[l].id, sym[r].id, &rank, &c.result))
		return KVC_OK;
	c.key = (float)rank;
	c.left = l;
	c.right = r;
	c.lid = sym[l].id;
	c.rid = sym[r].id;
	return tok_heap_push(h, &c);
}

/* Symbol l takes in its right neighbour, becoming token result. */
static void
merge(struct bpe_sym *sym, int32_t l, int32_t result)
{
	struct bpe_sym *a = &sym[l], *b = &sym[a->next];

	a->id = result;
	b->id = MERGED;
	a->next = b->next;
	if (b->next >= 0)
		sym[b->next].prev = l;
}

/* One symbol a byte. */
static void
init_syms(const struct kvc_tokenizer *t, struct bpe_sym *sym, const uint8_t *w, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		sym[i].id = t->byte_tok[w[i]];
		sym[i].prev = (int32_t)i - 1;
		sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
	}
}

/* merge_ranks' answer for a merge list it cannot take: merge the word with the heap. */
#define MERGE_BY_HEAP 1

/* The rank of the pair whose left symbol is l: false if it has none. */
static bool
pair_rank(const struct kvc_tokenizer *t, const struct bpe_sym *sym, int32_t l, int32_t *rank,
    int32_t *result)
{
	int32_t r = l >= 0 ? sym[l].next : -1;

	return r >= 0 && sym[l].id >= 0 && sym[r].id >= 0 &&
	    tok_pairmap_find(&t->merges, sym[l].id, sym[r].id, rank, result);
}

/*
 * The heap's merges, in buckets by rank. The heap takes the lowest rank
 * first, the leftmost of equal ranks first. A rank is one pair (a, b), and
 * a pair that a merge of rank r makes holds the new token ab, which a
 * sound merge list only merges at a later rank: so while rank r's
 * candidates are taken no new one of rank r appears, and the queue can
 * hold each rank's candidates in one unordered bucket. In it, order
 * matters only along a run of overlapping pairs of rank r ("a a a" with
 * (a, a)): each candidate is first walked back to the start of its run,
 * which is then merged left to right, as the heap would. A merge that
 * makes a pair of rank r or lower (a list no trained vocabulary has)
 * returns MERGE_BY_HEAP; the caller starts the word again with the heap.
 * Every candidate is pushed once and visited a bounded number of times:
 * linear in the word.
 */
static int
merge_ranks(const struct kvc_tokenizer *t, struct bpe_sym *sym, int32_t n, struct tok_rankq *q)
{
	int32_t rank, result, r;
	const int32_t *left;
	size_t nl;
	int rc = KVC_OK;

	tok_rankq_reset(q);
	q->steps += (size_t)n;	/* the first pass over the pairs */
	for (int32_t i = 0; i + 1 < n && rc == KVC_OK; i++)
		if (pair_rank(t, sym, i, &rank, &result))
			rc = tok_rankq_push(q, rank, i);
	while (rc == KVC_OK && tok_rankq_pop(q, &r, &left, &nl)) {
		q->steps += nl;	/* each candidate visited */
		for (size_t k = 0; k < nl && rc == KVC_OK; k++) {
			int32_t l = left[k];

			if (sym[l].id == MERGED || !pair_rank(t, sym, l, &rank, &result) || rank != r)
				continue;	/* merged away, or its pair changed since */
			/* back to the run's first pair of rank r */
			while (pair_rank(t, sym, sym[l].prev, &rank, &result) && rank == r) {
				l = sym[l].prev;
				q->steps++;
			}
			/* the run, left to right */
			while (rc == KVC_OK && l >= 0 && pair_rank(t, sym, l, &rank, &result) && rank == r) {
				int32_t p = sym[l].prev;

				q->steps++;

				merge(sym, l, result);
				if (p >= 0 && pair_rank(t, sym, p, &rank, &result)) {
					if (rank <= r)
						return MERGE_BY_HEAP;
					rc = tok_rankq_push(q, rank, p);
				}
				if (rc == KVC_OK && pair_rank(t, sym, l, &rank, &result)) {
					if (rank <= r)
						return MERGE_BY_HEAP;
					rc = tok_rankq_push(q, rank, l);
				}
				l = sym[l].next;
			}
		}
	}
	return rc;
}

static int
grow(void **p, size_t *cap, size_t need, size_t elem)
{
	void *q;

	if (*cap >= need)
		return KVC_OK;
	if ((q = realloc(*p, need * elem)) == NULL)
		return KVC_ENOMEM;
	*p = q;
	*cap = need;
	return KVC_OK;
}

/* A byte with no token of its own: llama.cpp then looks up each byte of
 * the mapped character as a one-byte string. */
static int
push_unmapped_byte(const struct kvc_tokenizer *t, uint8_t b, struct kvc_tokens *out)
{
	char u[4];
	size_t n = tok_put_utf8(u, tok_byte_to_cp(b));

	for (size_t i = 0; i < n; i++) {
		int32_t id = tok_strmap_find(t, &t->map, &u[i], 1);
		if (id >= 0 && kvc_tokens_push(out, id) != KVC_OK)
			return KVC_ENOMEM;
	}
	return KVC_OK;
}

static int
bpe_word(const struct kvc_tokenizer *t, const uint8_t *w, size_t n,
    struct tok_scratch *s, struct kvc_tokens *out)
{
	struct tok_heap h = { s->heap, 0, s->heap_cap, 0 };
	struct bpe_sym *sym;
	int rc = KVC_OK;

	s->work += n;	/* the word's bytes: mapped, or made symbols */
	if (t->ignore_merges && n > 1) {
		size_t m = 0;
		int32_t id;
		if (grow((void **)&s->buf, &s->buf_cap, n * 3, 1) != KVC_OK)
			return KVC_ENOMEM;
		for (size_t i = 0; i < n; i++)
			m += tok_put_utf8(s->buf + m, tok_byte_to_cp(w[i]));
		id = tok_strmap_find(t, &t->map, s->buf, m);
		if (id >= 0 && t->type[id] == TOK_TYPE_NORMAL)
			return kvc_tokens_push(out, id);
	}
	if (n == 1) {
		if (t->byte_tok[w[0]] >= 0)
			return kvc_tokens_push(out, t->byte_tok[w[0]]);
		return push_unmapped_byte(t, w[0], out);
	}
	if (grow(&s->sym, &s->sym_cap, n, sizeof *sym) != KVC_OK)
		return KVC_ENOMEM;
	sym = s->sym;
	init_syms(t, sym, w, n);
	if (n >= t->long_word) {
		rc = merge_ranks(t, sym, (int32_t)n, &s->ranks);
		s->work += s->ranks.steps;
		s->ranks.steps = 0;
		if (rc == MERGE_BY_HEAP)
			init_syms(t, sym, w, n);	/* a merge list the buckets cannot take */
	}
	if (n < t->long_word || rc == MERGE_BY_HEAP) {
		rc = KVC_OK;
		for (size_t i = 0; i + 1 < n && rc == KVC_OK; i++)
			rc = try_pair(t, sym, (int32_t)i, (int32_t)i + 1, &h);
		while (rc == KVC_OK && h.n > 0) {
			struct tok_cand c;
			struct bpe_sym *l, *r;

			tok_heap_pop(&h, &c);
			l = &sym[c.left];
			r = &sym[c.right];
			/* stale: one side was merged away (MERGED) or changed since */
			if (l->next != c.right || l->id != c.lid || r->id != c.rid)
				continue;
			merge(sym, c.left, c.result);
			rc = try_pair(t, sym, l->prev, c.left, &h);
			if (rc == KVC_OK)
				rc = try_pair(t, sym, c.left, l->next, &h);
		}
		s->heap = h.v;
		s->heap_cap = h.cap;
		s->work += h.steps;
	}
	if (rc != KVC_OK)
		return rc;
	for (int32_t i = 0; i >= 0; i = sym[i].next) {
		if (sym[i].id >= 0) {
			if (kvc_tokens_push(out, sym[i].id) != KVC_OK)
				return KVC_ENOMEM;
		} else if (push_unmapped_byte(t, w[i], out) != KVC_OK) {
			return KVC_ENOMEM;
		}
	}
	return KVC_OK;
}

int
tok_bpe_encode(const struct kvc_tokenizer *t, const char *text, size_t len,
    struct tok_scratch *s, struct kvc_tokens *out)
{
	size_t start = 0;
	int rc;

	s->pieces.n = 0;
	if ((rc = pretok_split(t->pre_kind, text, len, &s->pieces)) != KVC_OK)
		return rc;
	for (size_t k = 0; k < s->pieces.n; k++) {
		size_t end = s->pieces.end[k];
		if ((rc = bpe_word(t, (const uint8_t *)text + start, end - start, s, out)) != KVC_OK)
			return rc;
		start = end;
	}
	return KVC_OK;
}
