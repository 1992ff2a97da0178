/*
 * tokenizer.c: loading a vocabulary from GGUF metadata, special-token
 * splitting and the encode entry point. The merging itself lives in
 * tok_bpe.c and tok_spm.c, the hash maps in tok_maps.c, the merge heap in
 * tok_heap.c, the GPT-2 byte map in tok_bytes.c, the detokenizer in detok.c.
 *
 * Behaviour follows llama.cpp's llama-vocab.cpp (whose test vectors are the
 * reference), with one deliberate difference noted where it happens.
 */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- loading ---- */

void
tok_scratch_free(struct tok_scratch *s)
{
	free(s->sym);
	free(s->heap);
	tok_rankq_free(&s->ranks);
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
	tok_strmap_free(&t->map);
	tok_strmap_free(&t->smap);
	tok_pairmap_free(&t->merges);
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
	if (tok_pairmap_init(&t->merges, n) != KVC_OK)
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
			tok_pairmap_put(&t->merges, ia, ib, (int32_t)i, ir);
	}
	free(tmp);
	return KVC_OK;
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
	if (tok_strmap_init(&t->smap, n_special) != KVC_OK)
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
		tok_strmap_put(t, &t->smap, id);
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

/*
 * End-of-generation ids: EOS, EOT, EOM and the control tokens llama.cpp
 * treats as such. ChatGLM3 (SentencePiece, pre-tokenizer "chatglm-spm")
 * ends a reply with the role token that opens the next message, <|user|>
 * or <|observation|>: its generation_config.json lists both beside EOS,
 * and its GGUF has no EOT key to say so.
 */
static void
build_eog(struct kvc_tokenizer *t, const char *pre)
{
	static const char *const glm3[] = { "<|user|>", "<|observation|>" };

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
	/*
	 * Harmony (gpt-oss): a reply's analysis message ends with <|end|> and
	 * the final one follows it; the reply ends at <|return|> or <|call|>,
	 * as llama.cpp takes them when the vocabulary has <|return|>.
	 */
	int32_t ret = tok_strmap_find(t, &t->map, "<|return|>", strlen("<|return|>"));

	if (ret >= 0 && t->type[ret] == TOK_TYPE_CONTROL) {
		int32_t end = tok_strmap_find(t, &t->map, "<|end|>", strlen("<|end|>"));
		int32_t call = tok_strmap_find(t, &t->map, "<|call|>", strlen("<|call|>"));

		t->eog[ret] = 1;
		if (call >= 0 && t->type[call] == TOK_TYPE_CONTROL)
			t->eog[call] = 1;
		if (end >= 0 && end != t->eos)
			t->eog[end] = 0;
	}
	if (t->kind == TOK_KIND_SPM && pre != NULL && strcmp(pre, "chatglm-spm") == 0)
		for (size_t i = 0; i < sizeof glm3 / sizeof glm3[0]; i++) {
			int32_t id = tok_strmap_find(t, &t->map, glm3[i], strlen(glm3[i]));
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
		t->long_word = TOK_LONG_WORD;
		snprintf(t->pre, sizeof t->pre, "%s", pre ? pre : "default");
	}
	if ((rc = load_tokens(t, f, path, err, errlen)) != KVC_OK)
		goto fail;
	if ((rc = tok_strmap_init(&t->map, (size_t)t->n_vocab)) != KVC_OK)
		goto fail;
	for (int32_t id = 0; id < t->n_vocab; id++)
		tok_strmap_put(t, &t->map, id);
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
	/* Stored strings are never shorter than the bytes they decode to (build_decoded). */
	t->max_token_bytes = 1;
	for (int32_t id = 0; id < t->n_vocab; id++) {
		size_t len = t->text_off[id + 1] - t->text_off[id] - 1;
		if (len > t->max_token_bytes)
			t->max_token_bytes = len;
	}
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
	build_eog(t, pre);
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

size_t
tok_max_token_bytes(const struct kvc_tokenizer *t)
{
	return t->max_token_bytes;
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
	e->s.work += n;	/* the escaping */
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
	return tok_encode_work(t, text, len, flags, out, NULL, err, errlen);
}

int
tok_encode_work(const struct kvc_tokenizer *t, const char *text, size_t len,
    unsigned flags, struct kvc_tokens *out, size_t *work, char *err, size_t errlen)
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
	if (any_special)
		e.s.work += len;	/* the scan for special strings */
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
	if (work != NULL)
		*work += e.s.work + e.s.pieces.work;
	tok_scratch_free(&e.s);
	kvc_buf_free(&e.esc);
	if (rc == KVC_ENOMEM)
		kvc_err(err, errlen, "out of memory while tokenizing");
	else if (rc == KVC_ERANGE)
		kvc_err(err, errlen, "text too long to tokenize at once");
	return rc;
}
