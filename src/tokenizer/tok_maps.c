/*
 * tok_maps.c: the vocabulary's open-addressing hash maps: token string ->
 * id (tok_strmap) and pair of ids -> BPE merge (tok_pairmap). Built once
 * when a vocabulary loads, read by every encode.
 */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

uint32_t
tok_hash_bytes(const char *s, size_t n)
{
	uint32_t h = 2166136261u;	/* FNV-1a */

	for (size_t i = 0; i < n; i++) {
		h ^= (uint8_t)s[i];
		h *= 16777619u;
	}
	return h;
}

static uint32_t
pow2_at_least(size_t n)
{
	uint32_t c = 16;

	while (c < n && c < (1u << 31))
		c <<= 1;
	return c;
}

int
tok_strmap_init(struct tok_strmap *m, size_t n)
{
	uint32_t cap = pow2_at_least(n * 2);

	m->slot = malloc(cap * sizeof *m->slot);
	m->hash = malloc(cap * sizeof *m->hash);
	if (m->slot == NULL || m->hash == NULL)
		return KVC_ENOMEM;
	memset(m->slot, 0xff, cap * sizeof *m->slot);
	m->mask = cap - 1;
	return KVC_OK;
}

void
tok_strmap_free(struct tok_strmap *m)
{
	free(m->slot);
	free(m->hash);
	m->slot = NULL;
	m->hash = NULL;
}

/* Insert id under its own string; an earlier id with the same string is replaced. */
void
tok_strmap_put(const struct kvc_tokenizer *t, struct tok_strmap *m, int32_t id)
{
	size_t len;
	const char *s = tok_text(t, id, &len);
	uint32_t h = tok_hash_bytes(s, len), i = h & m->mask;

	while (m->slot[i] >= 0) {
		size_t l2;
		const char *s2 = tok_text(t, m->slot[i], &l2);
		if (m->hash[i] == h && l2 == len && memcmp(s, s2, len) == 0)
			break;
		i = (i + 1) & m->mask;
	}
	m->slot[i] = id;
	m->hash[i] = h;
}

int32_t
tok_strmap_find(const struct kvc_tokenizer *t, const struct tok_strmap *m, const char *s, size_t n)
{
	uint32_t h = tok_hash_bytes(s, n), i = h & m->mask;

	while (m->slot[i] >= 0) {
		if (m->hash[i] == h) {
			size_t l2;
			const char *s2 = tok_text(t, m->slot[i], &l2);
			if (l2 == n && memcmp(s, s2, n) == 0)
				return m->slot[i];
		}
		i = (i + 1) & m->mask;
	}
	return -1;
}

static uint32_t
pair_hash(uint64_t k)
{
	return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 32);
}

int
tok_pairmap_init(struct tok_pairmap *m, size_t n)
{
	uint32_t cap = pow2_at_least(n * 2);

	m->key = malloc(cap * sizeof *m->key);
	m->rank = malloc(cap * sizeof *m->rank);
	m->result = malloc(cap * sizeof *m->result);
	if (m->key == NULL || m->rank == NULL || m->result == NULL)
		return KVC_ENOMEM;
	memset(m->key, 0xff, cap * sizeof *m->key);
	m->mask = cap - 1;
	return KVC_OK;
}

void
tok_pairmap_free(struct tok_pairmap *m)
{
	free(m->key);
	free(m->rank);
	free(m->result);
	m->key = NULL;
	m->rank = m->result = NULL;
}

/* The first merge of a pair wins, as in llama.cpp (emplace). */
void
tok_pairmap_put(struct tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t result)
{
	uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
	uint32_t i = pair_hash(k) & m->mask;

	while (m->key[i] != UINT64_MAX) {
		if (m->key[i] == k)
			return;
		i = (i + 1) & m->mask;
	}
	m->key[i] = k;
	m->rank[i] = rank;
	m->result[i] = result;
}

bool
tok_pairmap_find(const struct tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *result)
{
	uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
	uint32_t i;

	if (m->key == NULL)
		return false;
	i = pair_hash(k) & m->mask;
	while (m->key[i] != UINT64_MAX) {
		if (m->key[i] == k) {
			*rank = m->rank[i];
			*result = m->result[i];
			return true;
		}
		i = (i + 1) & m->mask;
	}
	return false;
}
