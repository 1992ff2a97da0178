/*
 * tokenizer.c: loading a vocabulary from GGUF metadata, special-token
 * splitting, the encode entry point and the streaming detokenizer. The
 * merging itself lives in tok_bpe.c and tok_spm.c.
 *
 * Behaviour follows llama.cpp's llama-vocab.cpp (whose test vectors are the
 * reference), with one deliberate difference noted where it happens.
 */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hashing ---- */

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

static int
strmap_init(struct tok_strmap *m, size_t n)
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

static void
strmap_free(struct tok_strmap *m)
{
	free(m->slot);
	free(m->hash);
	m->slot = NULL;
	m->hash = NULL;
}

/* Insert id under its own string; an earlier id with the same string is replaced. */
static void
strmap_put(const struct kvc_tokenizer *t, struct tok_strmap *m, int32_t id)
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

static int
pairmap_init(struct tok_pairmap *m, size_t n)
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

static void
pairmap_free(struct tok_pairmap *m)
{
	free(m->key);
	free(m->rank);
	free(m->result);
	m->key = NULL;
	m->rank = m->result = NULL;
}

/* The first merge of a pair wins, as in llama.cpp (emplace). */
static void
pairmap_put(struct tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t result)
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

/* ---- GPT-2 byte <-> unicode ---- */

/*
 * Printable bytes (33..126, 161..172, 174..255) stand for themselves; the
 * other 68 bytes, in increasing order, become U+0100, U+0101, ...
 */
uint32_t
tok_byte_to_cp(uint8_t b)
{
	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
		return b;
	if (b <= 32)
		return 256u + b;
	if (b <= 160)
		return 256u + 33 + (b - 127u);
	return 256u + 67;	/* 173 */
}

int
tok_cp_to_byte(uint32_t cp)
{
	if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
		return (int)cp;
	if (cp < 256 || cp > 256 + 67)
		return -1;
	cp -= 256;
	if (cp < 33)
		return (int)cp;
	if (cp < 67)
		return (int)(127 + cp - 33);
	return 173;
}

/* ---- loading ---- */

void
tok_scratch_free(struct tok_scratch *s)
{
	free(s->sym);
	free(s->heap);
	free(s->buf);
	pretok_out_free(&s->pieces);
	memset(s, 0, sizeof *s);
}

void
tok_free(struct kvc_tokenizer *t)
{
	if (t == NULL)
		return;
	free(t->text);
	free(t->text_off);
	free(t->type);
	free(t->score);
	free(t->dec);
	free(t->dec_off);
	free(t->eog);
	free(t->slen);
	strmap_free(&t->map);
	strmap_free(&t->smap);
	pairmap_free(&t->merges);
	free(t);
}

static int32_t
special_id(const struct kvc_tokenizer *t, const struct gguf_file *f, const char *key, int32_t def)
{
	int64_t v = gguf_get_int(f, key, def);

	return (v >= 0 && v < t->n_vocab) ? (int32_t)v : -1;
}

static int
load_tokens(struct kvc_tokenizer *t, const struct gguf_file *f, const char *path, char *err, size_t errlen)
{
	const struct gguf_arr *a = gguf_get_arr(f, "tokenizer.ggml.tokens");
	uint64_t n, total = 0;

	if (a == NULL || gguf_arr_type(a) != GGUF_TYPE_STRING) {
		kvc_err(err, errlen, "%s: no tokenizer.ggml.tokens string array", path);
		return KVC_EFORMAT;
	}
	n = gguf_arr_n(a);
	if (n == 0 || n >= INT32_MAX) {
		kvc_err(err, errlen, "%s: tokenizer.ggml.tokens has %llu entries", path, (unsigned long long)n);
		return KVC_EFORMAT;
	}
	t->n_vocab = (int32_t)n;
	for (uint64_t i = 0; i < n; i++) {
		struct gguf_str s;
		gguf_arr_str(a, i, &s);
		total += s.len + 1;
		if (total >= UINT32_MAX) {
			kvc_err(err, errlen, "%s: token strings exceed 4 GiB", path);
			return KVC_EFORMAT;
		}
	}
	t->text = malloc(total);
	t->text_off = malloc((n + 1) * sizeof *t->text_off);
	t->type = malloc(n);
	t->score = calloc(n, sizeof *t->score);
	t->eog = calloc(n, 1);
	if (t->text == NULL || t->text_off == NULL || t->type == NULL || t->score == NULL || t->eog == NULL)
		return KVC_ENOMEM;
	total = 0;
	for (uint64_t i = 0; i < n; i++) {
		struct gguf_str s;
		gguf_arr_str(a, i, &s);
		t->text_off[i] = (uint32_t)total;
		memcpy(t->text + total, s.ptr, s.len);
		t->text[total + s.len] = '\0';
		total += s.len + 1;
	}
	t->text_off[n] = (uint32_t)total;

	/* llama.cpp treats a missing token_type as all normal */
	memset(t->type, TOK_TYPE_NORMAL, n);
	if ((a = gguf_get_arr(f, "tokenizer.ggml.token_type")) != NULL) {
		if (gguf_arr_n(a) != n || gguf_arr_data(a) == NULL) {
			kvc_err(err, errlen, "%s: tokenizer.ggml.token_type has %llu entries for %llu tokens",
			    path, (unsigned long long)gguf_arr_n(a), (unsigned long long)n);
			return KVC_EFORMAT;
		}
		for (uint64_t i = 0; i < n; i++) {
			int64_t v = 0;
			if (gguf_arr_int(a, i, &v) != KVC_OK || v < 0 || v > TOK_TYPE_BYTE) {
				kvc_err(err, errlen, "%s: token %llu has invalid type", path, (unsigned long long)i);
				return KVC_EFORMAT;
			}
			t->type[i] = (uint8_t)v;
		}
	}
	if ((a = gguf_get_arr(f, "tokenizer.ggml.scores")) != NULL) {
		if (gguf_arr_n(a) != n || gguf_arr_data(a) == NULL) {
			kvc_err(err, errlen, "%s: tokenizer.ggml.scores has %llu entries for %llu tokens",
			    path, (unsigned long long)gguf_arr_n(a), (unsigned long long)n);
			return KVC_EFORMAT;
		}
		for (uint64_t i = 0; i < n; i++) {
			double v = 0;
			if (gguf_arr_float(a, i, &v) != KVC_OK) {
				kvc_err(err, errlen, "%s: tokenizer.ggml.scores is not numeric", path);
				return KVC_EFORMAT;
			}
			t->score[i] = (float)v;
		}
	}
	return KVC_OK;
}

static int
load_merges(struct kvc_tokenizer *t, const struct gguf_file *f, const char *path, char *err, size_t errlen)
{
	const struct gguf_arr *a = gguf_get_arr(f, "tokenizer.ggml.merges");
	char *tmp = NULL;
	size_t tmp_cap = 0;
	uint64_t n;

	if (a == NULL || gguf_arr_type(a) != GGUF_TYPE_STRING) {
		kvc_err(err, errlen, "%s: BPE vocabulary without tokenizer.ggml.merges", path);
		return KVC_EFORMAT;
	}
	n = gguf_arr_n(a);
	/* ranks become float heap keys: exact only below 2^24 */
	if (n >= (1u << 24)) {
		kvc_err(err, errlen, "%s: too many merges (%llu)", path, (unsigned long long)n);
		return KVC_EFORMAT;
	}
	if (pairmap_init(&t->merges, n) != KVC_OK)
		return KVC_ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		struct gguf_str s;
		const char *sp;
		size_t la, lb;
		int32_t ia, ib, ir;

		gguf_arr_str(a, i, &s);
		/* llama.cpp splits at the first space after the first byte */
		sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
		if (sp == NULL) {
			kvc_err(err, errlen, "%s: merge %llu has no space", path, (unsigned long long)i);
			free(tmp);
			return KVC_EFORMAT;
		}
		la = (size_t)(sp - s.ptr);
		lb = s.len - la - 1;
		if (la + lb > tmp_cap) {
			char *p = realloc(tmp, la + lb);
			if (p == NULL) {
				free(tmp);
				return KVC_ENOMEM;
			}
			tmp = p;
			tmp_cap = la + lb;
		}
		memcpy(tmp, s.ptr, la);
		memcpy(tmp + la, sp + 1, lb);
		ia = tok_strmap_find(t, &t->map, s.ptr, la);
		ib = tok_strmap_find(t, &t->map, sp + 1, lb);
		ir = tok_strmap_find(t, &t->map, tmp, la + lb);
		/* a merge whose parts or result are not tokens can never produce a token: skip it */
		if (ia >= 0 && ib >= 0 && ir >= 0)
			pairmap_put(&t->merges, ia, ib, (int32_t)i, ir);
	}
	free(tmp);
	return KVC_OK;
}

size_t
tok_put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xC0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xE0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* "<0xXX>" -> XX, or -1 */
static int
byte_piece(const char *s, size_t n)
{
	int hi, lo;

	if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
		return -1;
	hi = hexval(s[3]);
	lo = hexval(s[4]);
	return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

/*
 * What each token writes when detokenized (llama.cpp's token_to_piece):
 * normal tokens decoded (BPE: GPT-2 bytes; SPM: U+2581 -> space), SPM byte
 * tokens their byte, control/unknown/user-defined tokens their text as is
 * (control and unknown only when asked), unused tokens nothing.
 */
static int
build_decoded(struct kvc_tokenizer *t)
{
	size_t cap = t->text_off[t->n_vocab], n = 0;

	/* decoding never lengthens a string: a GPT-2 char (>= 1 byte) gives one byte, U+2581 (3) gives 1 */
	t->dec = malloc(cap ? cap : 1);
	t->dec_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->dec_off);
	if (t->dec == NULL || t->dec_off == NULL)
		return KVC_ENOMEM;
	for (int32_t id = 0; id < t->n_vocab; id++) {
		size_t len;
		const char *s = tok_text(t, id, &len);
		int b;

		t->dec_off[id] = (uint32_t)n;
		switch (t->type[id]) {
		case TOK_TYPE_NORMAL:
			if (t->kind == TOK_KIND_SPM) {
				for (size_t i = 0; i < len; i++) {
					if (i + 2 < len && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
						t->dec[n++] = ' ';
						i += 2;
					} else {
						t->dec[n++] = s[i];
					}
				}
				break;
			}
			for (size_t i = 0; i < len;) {
				uint32_t cp;
				size_t k;
				if (kvc_utf8_valid_prefix(s + i, len - i < 4 ? len - i : 4) == 0) {
					/* not UTF-8: copy the byte as is */
					t->dec[n++] = s[i++];
					continue;
				}
				k = pretok_utf8_decode(s + i, len - i, &cp);
				b = tok_cp_to_byte(cp);
				if (b >= 0) {
					t->dec[n++] = (char)b;
				} else {
					/* outside the byte table: write the character itself */
					memcpy(t->dec + n, s + i, k);
					n += k;
				}
				i += k;
			}
			break;
		case TOK_TYPE_BYTE:
			if (t->kind == TOK_KIND_SPM && (b = byte_piece(s, len)) >= 0)
				t->dec[n++] = (char)b;
			break;
		case TOK_TYPE_CONTROL:
		case TOK_TYPE_UNKNOWN:
		case TOK_TYPE_USER_DEFINED:
			memcpy(t->dec + n, s, len);
			n += len;
			break;
		default:
			break;
		}
	}
	t->dec_off[t->n_vocab] = (uint32_t)n;
	return KVC_OK;
}

static int
cmp_u32_desc(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* Control, user-defined and unknown tokens can be split out of text whole. */
static int
build_specials(struct kvc_tokenizer *t)
{
	size_t n_special = 0;

	for (int32_t id = 0; id < t->n_vocab; id++) {
		uint8_t ty = t->type[id];
		if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN) &&
		    t->text_off[id + 1] - t->text_off[id] > 1)
			n_special++;
	}
	if (strmap_init(&t->smap, n_special) != KVC_OK)
		return KVC_ENOMEM;
	if (n_special == 0)
		return KVC_OK;
	if ((t->slen = malloc(n_special * sizeof *t->slen)) == NULL)
		return KVC_ENOMEM;
	for (int32_t id = 0; id < t->n_vocab; id++) {
		uint8_t ty = t->type[id];
		size_t len;
		const char *s = tok_text(t, id, &len);
		bool seen = false;

		if (!(ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN) || len == 0)
			continue;
		strmap_put(t, &t->smap, id);
		t->sfirst[(uint8_t)s[0]] = 1;
		if (ty == TOK_TYPE_USER_DEFINED)
			t->has_user_defined = true;
		for (size_t k = 0; k < t->n_slen && !seen; k++)
			seen = t->slen[k] == len;
		if (!seen)
			t->slen[t->n_slen++] = (uint32_t)len;
	}
	qsort(t->slen, t->n_slen, sizeof *t->slen, cmp_u32_desc);
	return KVC_OK;
}

/* See tok_internal.h: barrier bytes let SPM work on short stretches. */
static void
build_barriers(struct kvc_tokenizer *t)
{
	memset(t->barrier, 1, sizeof t->barrier);
	for (int32_t id = 0; id < t->n_vocab; id++) {
		size_t len;
		const char *s = tok_text(t, id, &len);
		uint8_t ty = t->type[id];

		if (len < 2 || !(ty == TOK_TYPE_NORMAL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNDEFINED))
			continue;
		for (size_t i = 0; i < len; i++)
			if ((uint8_t)s[i] < 128)
				t->barrier[(uint8_t)s[i]] = 0;
	}
}

static void
build_eog(struct kvc_tokenizer *t)
{
	static const char *const names[] = {
		"<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>",
		"<end_of_turn>", "<|eom_id|>", "</s>",
	};

	if (t->eos >= 0)
		t->eog[t->eos] = 1;
	if (t->eot >= 0)
		t->eog[t->eot] = 1;
	if (t->eom >= 0)
		t->eog[t->eom] = 1;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		int32_t id = tok_strmap_find(t, &t->map, names[i], strlen(names[i]));
		if (id >= 0 && t->type[id] == TOK_TYPE_CONTROL)
			t->eog[id] = 1;
	}
}

static int
tok_load_inner(struct kvc_tokenizer *t, const struct gguf_file *f, char *err, size_t errlen)
{
	const char *path = gguf_path(f);
	const char *model = gguf_get_str(f, "tokenizer.ggml.model", NULL);
	const char *pre = gguf_get_str(f, "tokenizer.ggml.pre", NULL);
	int rc;

	if (model == NULL) {
		kvc_err(err, errlen, "%s: no tokenizer.ggml.model", path);
		return KVC_EFORMAT;
	}
	if (strcmp(model, "gpt2") == 0) {
		t->kind = TOK_KIND_BPE;
	} else if (strcmp(model, "llama") == 0) {
		t->kind = TOK_KIND_SPM;
	} else {
		kvc_err(err, errlen, "%s: tokenizer model '%.40s' is not supported (gpt2 and llama are)", path, model);
		return KVC_EUNSUPPORTED;
	}
	snprintf(t->model, sizeof t->model, "%s", model);
	if (t->kind == TOK_KIND_BPE) {
		bool ign = false;
		if (pretok_from_name(pre, &t->pre_kind, &ign) != KVC_OK) {
			kvc_err(err, errlen, "%s: pre-tokenizer '%.40s' is not supported", path, pre);
			return KVC_EUNSUPPORTED;
		}
		t->ignore_merges = ign;
		snprintf(t->pre, sizeof t->pre, "%s", pre ? pre : "default");
	}
	if ((rc = load_tokens(t, f, path, err, errlen)) != KVC_OK)
		goto fail;
	if ((rc = strmap_init(&t->map, (size_t)t->n_vocab)) != KVC_OK)
		goto fail;
	for (int32_t id = 0; id < t->n_vocab; id++)
		strmap_put(t, &t->map, id);
	if (t->kind == TOK_KIND_BPE && (rc = load_merges(t, f, path, err, errlen)) != KVC_OK)
		goto fail;
	for (int b = 0; b < 256; b++) {
		char s[8];
		size_t n;
		if (t->kind == TOK_KIND_BPE)
			n = tok_put_utf8(s, tok_byte_to_cp((uint8_t)b));
		else
			n = (size_t)snprintf(s, sizeof s, "<0x%02X>", b);
		t->byte_tok[b] = tok_strmap_find(t, &t->map, s, n);
	}
	if ((rc = build_decoded(t)) != KVC_OK || (rc = build_specials(t)) != KVC_OK)
		goto fail;
	if (t->kind == TOK_KIND_SPM)
		build_barriers(t);

	/* llama.cpp's defaults for SPM vocabularies that lack the keys */
	t->bos = special_id(t, f, "tokenizer.ggml.bos_token_id", t->kind == TOK_KIND_SPM ? 1 : -1);
	t->eos = special_id(t, f, "tokenizer.ggml.eos_token_id", t->kind == TOK_KIND_SPM ? 2 : -1);
	t->unk = special_id(t, f, "tokenizer.ggml.unknown_token_id", t->kind == TOK_KIND_SPM ? 0 : -1);
	t->eot = special_id(t, f, "tokenizer.ggml.eot_token_id", -1);
	t->eom = special_id(t, f, "tokenizer.ggml.eom_token_id", -1);
	t->pad = special_id(t, f, "tokenizer.ggml.padding_token_id", -1);
	t->add_bos = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", t->kind == TOK_KIND_SPM);
	t->add_space_prefix = gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", true);
	build_eog(t);
	return KVC_OK;
fail:
	if (rc == KVC_ENOMEM)
		kvc_err(err, errlen, "%s: out of memory loading the vocabulary", path);
	return rc;
}

int
tok_load(struct kvc_tokenizer **out, const struct gguf_file *f, char *err, size_t errlen)
{
	struct kvc_tokenizer *t = calloc(1, sizeof *t);
	int rc;

	*out = NULL;
	if (t == NULL) {
		kvc_err(err, errlen, "out of memory");
		return KVC_ENOMEM;
	}
	if ((rc = tok_load_inner(t, f, err, errlen)) != KVC_OK) {
		tok_free(t);
		return rc;
	}
	*out = t;
	return KVC_OK;
}

/* ---- accessors ---- */

enum tok_kind tok_kind(const struct kvc_tokenizer *t) { return t->kind; }
const char *tok_model_name(const struct kvc_tokenizer *t) { return t->model; }
const char *tok_pre_name(const struct kvc_tokenizer *t) { return t->pre; }
int32_t tok_n_vocab(const struct kvc_tokenizer *t) { return t->n_vocab; }
int32_t tok_bos(const struct kvc_tokenizer *t) { return t->bos; }
int32_t tok_eos(const struct kvc_tokenizer *t) { return t->eos; }
bool tok_add_bos_default(const struct kvc_tokenizer *t) { return t->add_bos; }

bool
tok_is_eog(const struct kvc_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_vocab && t->eog[id];
}

enum tok_attr
tok_type(const struct kvc_tokenizer *t, int32_t id)
{
	if (id < 0 || id >= t->n_vocab)
		return TOK_TYPE_UNDEFINED;
	return (enum tok_attr)t->type[id];
}

const char *
tok_piece(const struct kvc_tokenizer *t, int32_t id, size_t *len)
{
	size_t l;
	const char *s;

	if (id < 0 || id >= t->n_vocab)
		return NULL;
	s = tok_text(t, id, &l);
	if (len != NULL)
		*len = l;
	return s;
}

int32_t
tok_lookup(const struct kvc_tokenizer *t, const char *text)
{
	return tok_strmap_find(t, &t->map, text, strlen(text));
}

/* ---- encoding ---- */

struct enc {
	const struct kvc_tokenizer *t;
	unsigned flags;
	struct tok_scratch s;
	struct kvc_buf esc;	/* SPM: text with spaces escaped */
	bool prev_special;	/* SPM: the previous fragment was a token (or the start) */
	struct kvc_tokens *out;
};

static int
enc_text(struct enc *e, const char *s, size_t n)
{
	const struct kvc_tokenizer *t = e->t;
	int rc;

	if (n == 0)
		return KVC_OK;
	if (t->kind == TOK_KIND_BPE)
		return tok_bpe_encode(t, s, n, &e->s, e->out);
	/* SPM: a leading U+2581 at the start and after every special token, as llama.cpp */
	e->esc.n = 0;
	if (t->add_space_prefix && e->prev_special && !(e->flags & TOK_NO_SPACE_PREFIX) &&
	    kvc_buf_append(&e->esc, "\xe2\x96\x81", 3) != KVC_OK)
		return KVC_ENOMEM;
	for (size_t i = 0; i < n;) {
		const char *sp = memchr(s + i, ' ', n - i);
		size_t run = sp ? (size_t)(sp - (s + i)) : n - i;
		if (kvc_buf_append(&e->esc, s + i, run) != KVC_OK)
			return KVC_ENOMEM;
		i += run;
		if (sp != NULL) {
			if (kvc_buf_append(&e->esc, "\xe2\x96\x81", 3) != KVC_OK)
				return KVC_ENOMEM;
			i++;
		}
	}
	e->prev_special = false;
	if (e->esc.n > UINT32_MAX / 2)
		return KVC_ERANGE;
	rc = tok_spm_encode(t, e->esc.p, e->esc.n, &e->s, e->out);
	return rc;
}

/* Special token starting at s[0..n), longest first; -1 if none may match here. */
static int32_t
match_special(const struct kvc_tokenizer *t, const char *s, size_t n, unsigned flags, size_t *len)
{
	for (size_t k = 0; k < t->n_slen; k++) {
		int32_t id;
		if (t->slen[k] > n)
			continue;
		id = tok_strmap_find(t, &t->smap, s, t->slen[k]);
		if (id < 0)
			continue;
		/* user-defined tokens are always split out (llama.cpp, HF added tokens);
		 * control and unknown ones only when the caller asks */
		if (t->type[id] != TOK_TYPE_USER_DEFINED && !(flags & TOK_PARSE_SPECIAL))
			continue;
		*len = t->slen[k];
		return id;
	}
	return -1;
}

int
tok_encode(const struct kvc_tokenizer *t, const char *text, size_t len,
    unsigned flags, struct kvc_tokens *out, char *err, size_t errlen)
{
	struct enc e = { .t = t, .flags = flags, .prev_special = true, .out = out };
	size_t valid = kvc_utf8_valid_prefix(text, len), seg = 0, pos = 0;
	bool any_special = t->n_slen > 0 && ((flags & TOK_PARSE_SPECIAL) || t->has_user_defined);
	int rc = KVC_OK;

	if (valid != len) {
		kvc_err(err, errlen, "invalid UTF-8 at byte %zu", valid);
		return KVC_EFORMAT;
	}
	if (len > UINT32_MAX / 4) {
		kvc_err(err, errlen, "text of %zu bytes is too long to tokenize at once", len);
		return KVC_ERANGE;
	}
	if ((flags & TOK_ADD_BOS) && t->bos >= 0 && (rc = kvc_tokens_push(out, t->bos)) != KVC_OK)
		goto done;
	/*
	 * Special tokens: llama.cpp splits by each special string in turn,
	 * longest first, over the whole text; this scans once and takes the
	 * longest special string at each position. The two differ only for
	 * overlapping occurrences of different special strings.
	 */
	while (any_special && pos < len) {
		size_t mlen;
		int32_t id;

		if (!t->sfirst[(uint8_t)text[pos]] ||
		    (id = match_special(t, text + pos, len - pos, flags, &mlen)) < 0) {
			pos++;
			continue;
		}
		if ((rc = enc_text(&e, text + seg, pos - seg)) != KVC_OK ||
		    (rc = kvc_tokens_push(out, id)) != KVC_OK)
			goto done;
		e.prev_special = true;
		pos += mlen;
		seg = pos;
	}
	rc = enc_text(&e, text + seg, len - seg);
done:
	tok_scratch_free(&e.s);
	kvc_buf_free(&e.esc);
	if (rc == KVC_ENOMEM)
		kvc_err(err, errlen, "out of memory while tokenizing");
	else if (rc == KVC_ERANGE)
		kvc_err(err, errlen, "text too long to tokenize at once");
	return rc;
}

/* ---- streaming detokenizer ---- */

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

/* The merge-candidate heap shared by tok_bpe.c and tok_spm.c. */
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
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!cand_before(c, &h->v[p]))
			break;
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
		h->v[i] = h->v[m];
		i = m;
	}
	if (h->n > 0)
		h->v[i] = last;
}
