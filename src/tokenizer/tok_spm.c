/*
 * tok_spm.c: SentencePiece-style tokenization (tokenizer.ggml.model =
 * "llama"), as llama.cpp's llm_tokenizer_spm: the text (spaces already
 * replaced by U+2581) starts as one symbol per UTF-8 character; the
 * adjacent pair whose concatenation is a token with the highest score is
 * merged first (ties: leftmost), until no pair forms a token. A final
 * symbol that is not a token is written as its bytes' <0xXX> tokens.
 *
 * Unlike llama.cpp, merges may only produce normal or user-defined tokens:
 * typed text never merges into a control, unknown, unused or byte token
 * (e.g. "<s>", "<0x0A>"), as in SentencePiece itself.
 */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

struct spm_sym {
	int32_t prev, next;	/* neighbours, -1 at the ends */
	uint32_t start;		/* first byte in the text */
	uint32_t len;		/* bytes; 0 once merged into prev */
};

static bool
mergeable(const struct kvc_tokenizer *t, int32_t id)
{
	return t->type[id] == TOK_TYPE_NORMAL || t->type[id] == TOK_TYPE_USER_DEFINED ||
	    t->type[id] == TOK_TYPE_UNDEFINED;
}

static int
try_pair(const struct kvc_tokenizer *t, const char *text, const struct spm_sym *sym,
    int32_t l, int32_t r, struct tok_heap *h)
{
	struct tok_cand c;
	int32_t id;

	h->steps++;
	if (l < 0 || r < 0)
		return KVC_OK;
	c.size = sym[l].len + sym[r].len;
	id = tok_strmap_find(t, &t->map, text + sym[l].start, c.size);
	if (id < 0 || !mergeable(t, id))
		return KVC_OK;
	c.key = -t->score[id];
	c.left = l;
	c.right = r;
	return tok_heap_push(h, &c);
}

static int
push_bytes(const struct kvc_tokenizer *t, const uint8_t *p, size_t n, struct kvc_tokens *out)
{
	for (size_t i = 0; i < n; i++) {
		int32_t id = t->byte_tok[p[i]];
		if (id < 0)
			id = tok_strmap_find(t, &t->map, (const char *)&p[i], 1);
		if (id < 0)
			id = t->unk;
		if (id >= 0 && kvc_tokens_push(out, id) != KVC_OK)
			return KVC_ENOMEM;
	}
	return KVC_OK;
}

static int
spm_run(const struct kvc_tokenizer *t, const char *text, size_t len,
    struct tok_scratch *s, struct kvc_tokens *out)
{
	struct tok_heap h = { s->heap, 0, s->heap_cap, 0 };
	struct spm_sym *sym;
	size_t n = 0;
	int rc = KVC_OK;

	if (len == 0)
		return KVC_OK;
	if (s->sym_cap < len) {
		void *p = realloc(s->sym, len * sizeof *sym);
		if (p == NULL)
			return KVC_ENOMEM;
		s->sym = p;
		s->sym_cap = len;
	}
	sym = s->sym;
	for (size_t i = 0; i < len; n++) {
		uint32_t cp;
		size_t k = pretok_utf8_decode(text + i, len - i, &cp);
		sym[n].start = (uint32_t)i;
		sym[n].len = (uint32_t)k;
		sym[n].prev = (int32_t)n - 1;
		sym[n].next = (int32_t)n + 1;
		i += k;
	}
	sym[n - 1].next = -1;
	s->work += n;	/* the symbols made */
	for (size_t i = 0; i + 1 < n && rc == KVC_OK; i++)
		rc = try_pair(t, text, sym, (int32_t)i, (int32_t)i + 1, &h);
	while (rc == KVC_OK && h.n > 0) {
		struct tok_cand c;
		struct spm_sym *l, *r;

		tok_heap_pop(&h, &c);
		l = &sym[c.left];
		r = &sym[c.right];
		/* stale: a side was merged away or grew since */
		if (l->len == 0 || r->len == 0 || l->len + r->len != c.size)
			continue;
		l->len += r->len;
		r->len = 0;
		l->next = r->next;
		if (r->next >= 0)
			sym[r->next].prev = c.left;
		rc = try_pair(t, text, sym, l->prev, c.left, &h);
		if (rc == KVC_OK)
			rc = try_pair(t, text, sym, c.left, l->next, &h);
	}
	s->heap = h.v;
	s->heap_cap = h.cap;
	s->work += h.steps;
	if (rc != KVC_OK)
		return rc;
	for (int32_t i = 0; i >= 0; i = sym[i].next) {
		int32_t id = tok_strmap_find(t, &t->map, text + sym[i].start, sym[i].len);
		if (id >= 0) {
			if (kvc_tokens_push(out, id) != KVC_OK)
				return KVC_ENOMEM;
		} else if (push_bytes(t, (const uint8_t *)text + sym[i].start, sym[i].len, out) != KVC_OK) {
			return KVC_ENOMEM;
		}
	}
	return KVC_OK;
}

/*
 * llama.cpp merges over the whole text at once. A barrier byte (see
 * tok_internal.h) is never part of a merge, so merging the stretches
 * between barriers separately gives the same tokens with small heaps.
 */
int
tok_spm_encode(const struct kvc_tokenizer *t, const char *text, size_t len,
    struct tok_scratch *s, struct kvc_tokens *out)
{
	size_t start = 0;
	int rc;

	s->work += len;	/* the scan for barriers */
	for (size_t i = 0; i < len; i++) {
		uint8_t b = (uint8_t)text[i];
		if (b >= 128 || !t->barrier[b])
			continue;
		if ((rc = spm_run(t, text + start, i - start, s, out)) != KVC_OK ||
		    (rc = spm_run(t, text + i, 1, s, out)) != KVC_OK)
			return rc;
		start = i + 1;
	}
	return spm_run(t, text + start, len - start, s, out);
}
