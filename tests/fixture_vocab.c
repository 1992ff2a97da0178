/*
 * fixture_vocab.c: the fixture vocabularies. A tiny BPE trainer learns
 * merges from the built-in text: words are split roughly as the qwen2
 * pre-tokenizer does (an optional space then letters, single digits,
 * punctuation runs, whitespace runs), then the most frequent adjacent pair
 * is merged repeatedly (ties: lowest ids first) until every word is one
 * token or the merge budget is spent.
 */
#include "fixture_vocab.h"
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MERGES 300

static const char train_text[] =
    "Once upon a time, there was a little girl named Lily. She liked to play in the garden "
    "with her dog. One day, the sun was shining and the birds were singing. Lily said, "
    "\"Let's go to the park!\" Her mother smiled and said, \"That is a good idea.\"\n"
    "The quick brown fox jumps over the lazy dog. The dog was not happy, but the fox was "
    "very happy. They played together until the evening, and then they went home.\n"
    "A language model reads text as tokens. Each token is a number, and the model "
    "predicts the next token from the ones before it. The cache keeps the keys and values "
    "of every position, so a conversation only computes the new tokens of each turn.\n"
    "In 2024 there were 365 days, 12 months and 52 weeks; 7 + 5 = 12, and 3 * 4 = 12 too.\n"
    "Please remember: the answer is always in the question. What is your name? Where do "
    "you live? How are you today? I am fine, thank you, and you?\n"
    "Programs are written in C, with functions, structures and pointers. The compiler "
    "turns them into machine code that the computer runs quickly.\n"
    "The little bird flew over the big tree. The tree was green and tall, and the bird "
    "sang a happy song for everyone in the garden.\n"
    "今天天气很好，我们去公园散步吧。我喜欢学习中文，也喜欢读书和写字。"
    "他说：“你好，世界！”大家都笑了。这是一个简单的例子，用来测试分词器。"
    "小猫在花园里玩，太阳照在绿色的树上。我们的模型会读文字，也会写文字。\n";

const char *
fixture_vocab_text(void)
{
	return train_text;
}

struct vocab {
	char **tok;		/* token strings (NUL-terminated) */
	int32_t *type;		/* tokenizer.ggml.token_type */
	float *score;		/* SPM scores */
	size_t n, cap;
	char **merges;		/* BPE: "left right" */
	size_t n_merges, cap_merges;
};

struct word {
	int32_t *sym;		/* token ids */
	int n;
	int count;		/* occurrences in the text */
	char *text;
};

static void
vocab_free(struct vocab *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->tok[i]);
	for (size_t i = 0; i < v->n_merges; i++)
		free(v->merges[i]);
	free(v->tok);
	free(v->type);
	free(v->score);
	free(v->merges);
	memset(v, 0, sizeof *v);
}

/* Append a token; returns its id or -1 on ENOMEM. */
static int32_t
vocab_add(struct vocab *v, const char *s, size_t len, int32_t type, float score)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? 2 * v->cap : 1024;
		char **t = realloc(v->tok, cap * sizeof *t);
		if (t == NULL)
			return -1;
		v->tok = t;
		int32_t *ty = realloc(v->type, cap * sizeof *ty);
		if (ty == NULL)
			return -1;
		v->type = ty;
		float *sc = realloc(v->score, cap * sizeof *sc);
		if (sc == NULL)
			return -1;
		v->score = sc;
		v->cap = cap;
	}
	char *c = malloc(len + 1);
	if (c == NULL)
		return -1;
	memcpy(c, s, len);
	c[len] = 0;
	v->tok[v->n] = c;
	v->type[v->n] = type;
	v->score[v->n] = score;
	return (int32_t)v->n++;
}

static int32_t
vocab_find(const struct vocab *v, const char *s, size_t from)
{
	for (size_t i = from; i < v->n; i++)
		if (strcmp(v->tok[i], s) == 0)
			return (int32_t)i;
	return -1;
}

static bool
is_letter(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

static bool
is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static bool
is_space(unsigned char c)
{
	return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* Length of the pre-token starting at s[0] (s non-empty, NUL-terminated). */
static size_t
next_word(const unsigned char *s)
{
	size_t i = 0;

	if (s[0] == ' ' && is_letter(s[1]))
		i = 1;
	if (is_letter(s[i])) {
		while (is_letter(s[i]))
			i++;
		return i;
	}
	if (is_digit(s[0]))
		return 1;
	if (is_space(s[0])) {
		while (is_space(s[i]))
			i++;
		return i;
	}
	i = s[0] == ' ' ? 1 : 0;
	while (s[i] && !is_letter(s[i]) && !is_digit(s[i]) && !is_space(s[i]))
		i++;
	return i ? i : 1;
}

static size_t
utf8_len(unsigned char c)
{
	return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

struct pair_slot { int32_t a, b; int count; };

#define PAIR_SLOTS 16384

/*
 * Learn up to MAX_MERGES merges over words (symbol ids into v). bpe: record
 * merges as "left right"; otherwise score new pieces by merge order.
 */
static int
train(struct vocab *v, struct word *words, size_t n_words, bool bpe)
{
	struct pair_slot *tab = malloc(PAIR_SLOTS * sizeof *tab);

	if (tab == NULL)
		return KVC_ENOMEM;
	for (int m = 0; m < MAX_MERGES; m++) {
		for (size_t i = 0; i < PAIR_SLOTS; i++)
			tab[i].count = 0;
		for (size_t w = 0; w < n_words; w++) {
			for (int k = 0; k + 1 < words[w].n; k++) {
				int32_t a = words[w].sym[k], b = words[w].sym[k + 1];
				size_t h = ((uint32_t)a * 2654435761u ^ (uint32_t)b * 40503u) % PAIR_SLOTS;
				while (tab[h].count && (tab[h].a != a || tab[h].b != b))
					h = (h + 1) % PAIR_SLOTS;
				tab[h].a = a;
				tab[h].b = b;
				tab[h].count += words[w].count;
			}
		}
		struct pair_slot best = {0, 0, 0};
		for (size_t i = 0; i < PAIR_SLOTS; i++) {
			struct pair_slot *p = &tab[i];
			if (p->count == 0)
				continue;
			if (p->count > best.count || (p->count == best.count &&
			    (p->a < best.a || (p->a == best.a && p->b < best.b))))
				best = *p;
		}
		if (best.count < 1)
			break;
		size_t la = strlen(v->tok[best.a]), lb = strlen(v->tok[best.b]);
		char *cat = malloc(la + lb + 2);
		if (cat == NULL)
			goto nomem;
		memcpy(cat, v->tok[best.a], la);
		memcpy(cat + la, v->tok[best.b], lb + 1);
		int32_t id = vocab_find(v, cat, 0);
		if (id < 0)
			id = vocab_add(v, cat, la + lb, 1, -(float)(m + 1));
		if (id < 0) {
			free(cat);
			goto nomem;
		}
		if (bpe) {
			memcpy(cat, v->tok[best.a], la);
			cat[la] = ' ';
			memcpy(cat + la + 1, v->tok[best.b], lb + 1);
			if (v->n_merges == v->cap_merges) {
				size_t cap = v->cap_merges ? 2 * v->cap_merges : 512;
				char **p = realloc(v->merges, cap * sizeof *p);
				if (p == NULL) {
					free(cat);
					goto nomem;
				}
				v->merges = p;
				v->cap_merges = cap;
			}
			v->merges[v->n_merges++] = cat;
		} else {
			free(cat);
		}
		for (size_t w = 0; w < n_words; w++) {
			int o = 0;
			for (int k = 0; k < words[w].n; k++) {
				if (k + 1 < words[w].n && words[w].sym[k] == best.a && words[w].sym[k + 1] == best.b) {
					words[w].sym[o++] = id;
					k++;
				} else {
					words[w].sym[o++] = words[w].sym[k];
				}
			}
			words[w].n = o;
		}
	}
	free(tab);
	return 0;
nomem:
	free(tab);
	return KVC_ENOMEM;
}

/* Split text into distinct words with counts. SPM text has U+2581 for spaces and starts words at it. */
static int
split_words(const char *text, bool spm, struct word **out, size_t *n_out)
{
	struct word *w = NULL;
	size_t n = 0, cap = 0;
	const unsigned char *s = (const unsigned char *)text;

	while (*s) {
		size_t len;
		if (spm) {
			/* a word runs from one U+2581 (E2 96 81) to the next */
			len = 3;
			while (s[len] && !(s[len] == 0xE2 && s[len + 1] == 0x96 && s[len + 2] == 0x81))
				len++;
			if (!(s[0] == 0xE2 && s[1] == 0x96 && s[2] == 0x81))
				len = utf8_len(s[0]);
		} else {
			len = next_word(s);
		}
		size_t i;
		for (i = 0; i < n; i++)
			if (strlen(w[i].text) == len && memcmp(w[i].text, s, len) == 0)
				break;
		if (i < n) {
			w[i].count++;
		} else {
			if (n == cap) {
				cap = cap ? 2 * cap : 256;
				struct word *p = realloc(w, cap * sizeof *p);
				if (p == NULL)
					goto nomem;
				w = p;
			}
			memset(&w[n], 0, sizeof w[n]);
			if ((w[n].text = malloc(len + 1)) == NULL || (w[n].sym = malloc(len * sizeof(int32_t))) == NULL) {
				n++;
				goto nomem;
			}
			memcpy(w[n].text, s, len);
			w[n].text[len] = 0;
			w[n].count = 1;
			n++;
		}
		s += len;
	}
	*out = w;
	*n_out = n;
	return 0;
nomem:
	for (size_t i = 0; i < n; i++) {
		free(w[i].text);
		free(w[i].sym);
	}
	free(w);
	return KVC_ENOMEM;
}

static void
free_words(struct word *w, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(w[i].text);
		free(w[i].sym);
	}
	free(w);
}

static const char *const bpe_control[] = {
	"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
	"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|user|>",
	"<|assistant|>", "<|system|>", "<|end|>", "<start_of_turn>",
	"<end_of_turn>", "<s>", "</s>",
};

static int
build_bpe(struct vocab *v)
{
	struct word *w;
	size_t nw;
	char u[4];
	int rc;

	for (unsigned b = 0; b < 256; b++)
		if (vocab_add(v, u, tok_put_utf8(u, tok_byte_to_cp((uint8_t)b)), 1, 0) < 0)
			return KVC_ENOMEM;
	if ((rc = split_words(train_text, false, &w, &nw)) != 0)
		return rc;
	for (size_t i = 0; i < nw; i++) {
		w[i].n = (int)strlen(w[i].text);
		for (int k = 0; k < w[i].n; k++)
			w[i].sym[k] = (unsigned char)w[i].text[k];	/* byte b is token b */
	}
	rc = train(v, w, nw, true);
	free_words(w, nw);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < sizeof bpe_control / sizeof bpe_control[0]; i++)
		if (vocab_add(v, bpe_control[i], strlen(bpe_control[i]), 3, 0) < 0)
			return KVC_ENOMEM;
	return 0;
}

static int
build_spm(struct vocab *v)
{
	struct word *w;
	size_t nw, n = 0, base;
	char buf[16];
	int rc;

	if (vocab_add(v, "<unk>", 5, 2, 0) < 0 || vocab_add(v, "<s>", 3, 3, 0) < 0 ||
	    vocab_add(v, "</s>", 4, 3, 0) < 0)
		return KVC_ENOMEM;
	for (unsigned b = 0; b < 256; b++) {
		snprintf(buf, sizeof buf, "<0x%02X>", b);
		if (vocab_add(v, buf, 6, 6, 0) < 0)
			return KVC_ENOMEM;
	}
	base = v->n;
	/* SentencePiece's view of the text: U+2581 for each space and at each line start */
	size_t tl = strlen(train_text);
	char *t = malloc(3 * tl + 4);
	if (t == NULL)
		return KVC_ENOMEM;
	bool line_start = true;
	for (size_t i = 0; i < tl; i++) {
		if (train_text[i] == '\n') {
			line_start = true;
			continue;
		}
		if (line_start || train_text[i] == ' ') {
			memcpy(t + n, "\xE2\x96\x81", 3);
			n += 3;
		}
		if (train_text[i] != ' ')
			t[n++] = train_text[i];
		line_start = false;
	}
	t[n] = 0;
	rc = split_words(t, true, &w, &nw);
	free(t);
	if (rc != 0)
		return rc;
	/* single characters, in order of first appearance, score below every merge */
	for (size_t i = 0; i < nw && rc == 0; i++) {
		w[i].n = 0;
		for (const char *p = w[i].text; *p; ) {
			size_t cl = utf8_len((unsigned char)*p);
			memcpy(buf, p, cl);
			buf[cl] = 0;
			int32_t id = vocab_find(v, buf, base);
			if (id < 0)
				id = vocab_add(v, buf, cl, 1, -1000.0f - (float)(v->n - base));
			if (id < 0)
				rc = KVC_ENOMEM;
			w[i].sym[w[i].n++] = id;
			p += cl;
		}
	}
	if (rc == 0)
		rc = train(v, w, nw, false);
	free_words(w, nw);
	return rc;
}

static int
build(struct vocab *v, enum fixture_vocab_kind kind)
{
	int rc;

	memset(v, 0, sizeof *v);
	rc = kind == FIXTURE_VOCAB_SPM ? build_spm(v) : build_bpe(v);
	if (rc != 0)
		vocab_free(v);
	return rc;
}

int32_t
fixture_vocab_size(enum fixture_vocab_kind kind)
{
	struct vocab v;
	int rc = build(&v, kind);

	if (rc != 0)
		return rc;
	int32_t n = (int32_t)v.n;
	vocab_free(&v);
	return n;
}

static const char chatml_template[] =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char inst_template[] =
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + ' ' + eos_token }}"
    "{% endif %}{% endfor %}";

int
fixture_vocab_add(struct gguf_writer *gw, enum fixture_vocab_kind kind,
    int32_t n_vocab_min, int32_t *n_vocab)
{
	struct vocab v;
	char buf[32];
	int rc = build(&v, kind);

	if (rc != 0)
		return rc;
	while ((int32_t)v.n < n_vocab_min) {
		snprintf(buf, sizeof buf, "[PAD%zu]", v.n);
		if (vocab_add(&v, buf, strlen(buf), 5, 0) < 0) {
			vocab_free(&v);
			return KVC_ENOMEM;
		}
	}
	bool spm = kind == FIXTURE_VOCAB_SPM;
	rc |= gguf_w_str(gw, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
	if (!spm)
		rc |= gguf_w_str(gw, "tokenizer.ggml.pre", "qwen2");
	rc |= gguf_w_arr_str(gw, "tokenizer.ggml.tokens", (const char *const *)v.tok, v.n);
	rc |= gguf_w_arr_i32(gw, "tokenizer.ggml.token_type", v.type, v.n);
	if (spm) {
		rc |= gguf_w_arr_f32(gw, "tokenizer.ggml.scores", v.score, v.n);
		rc |= gguf_w_u32(gw, "tokenizer.ggml.unknown_token_id", 0);
		rc |= gguf_w_u32(gw, "tokenizer.ggml.bos_token_id", 1);
		rc |= gguf_w_u32(gw, "tokenizer.ggml.eos_token_id", 2);
		rc |= gguf_w_bool(gw, "tokenizer.ggml.add_bos_token", true);
		rc |= gguf_w_bool(gw, "tokenizer.ggml.add_space_prefix", true);
		rc |= gguf_w_str(gw, "tokenizer.chat_template", inst_template);
	} else {
		int32_t eot = vocab_find(&v, "<|endoftext|>", 256), im_end = vocab_find(&v, "<|im_end|>", 256);
		rc |= gguf_w_arr_str(gw, "tokenizer.ggml.merges", (const char *const *)v.merges, v.n_merges);
		rc |= gguf_w_u32(gw, "tokenizer.ggml.bos_token_id", (uint32_t)eot);
		rc |= gguf_w_u32(gw, "tokenizer.ggml.eos_token_id", (uint32_t)im_end);
		rc |= gguf_w_u32(gw, "tokenizer.ggml.padding_token_id", (uint32_t)eot);
		rc |= gguf_w_bool(gw, "tokenizer.ggml.add_bos_token", false);
		rc |= gguf_w_str(gw, "tokenizer.chat_template", chatml_template);
	}
	if (n_vocab != NULL)
		*n_vocab = (int32_t)v.n;
	vocab_free(&v);
	return rc ? KVC_ENOMEM : 0;
}
