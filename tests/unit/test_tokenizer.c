/*
 * test_tokenizer.c: the tokenizers on vocabularies built here (no shared
 * data): a tiny byte-level BPE and a tiny SentencePiece vocabulary written
 * as GGUF with the project's writer, with expected ids derived by hand from
 * the merge ranks and scores (worked out in the comments); the
 * pre-tokenizer scanners against splits derived from their regexes;
 * special tokens; the streaming detokenizer; invalid UTF-8; bad vocabularies.
 *
 * `test_tokenizer --write-bpe FILE` writes the BPE vocabulary and exits
 * (the command-line test uses it).
 */
#include "test.h"

#include "gguf/gguf.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

#define N_ELEMS(a) (sizeof (a) / sizeof (a)[0])

/* ---- the tiny BPE vocabulary ----
 * ids 0..255: the byte b's GPT-2 character (so byte b is token b),
 * 256.. the results of the merges below, in rank order, then specials. */
static const char *const bpe_merges[] = {
	"h e",			/* 256 he */
	"l l",			/* 257 ll */
	"he ll",		/* 258 hell */
	"hell o",		/* 259 hello */
	"\xc4\xa0 w",		/* 260 Ġw (" w") */
	"o r",			/* 261 or */
	"\xc4\xa0w or",		/* 262 Ġwor */
	"l d",			/* 263 ld */
	"\xc4\xa0wor ld",	/* 264 Ġworld */
	"\xc3\xa4 \xc2\xbd",	/* 265 ä½ (bytes E4 BD) */
	"\xc3\xa4\xc2\xbd \xc5\x82",	/* 266 ä½ł = 你 (E4 BD A0) */
	"r l",			/* 271 rl: ranked last, so "orld" is or + ld */
};
enum {
	B_HELLO = 259, B_WORLD = 264, B_NI = 266,
	B_IM_END = 267, B_IM_START = 268, B_TOOL = 269, B_EOT = 270, B_RL = 271, B_N = 272,
};

static size_t
utf8_put(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	o[0] = (char)(0xC0 | (cp >> 6));
	o[1] = (char)(0x80 | (cp & 0x3F));
	return 2;
}

static void *
bpe_gguf(const char *pre, size_t *len)
{
	static char bytes[256][4];
	const char *toks[B_N];
	int32_t types[B_N];
	struct gguf_writer *w = gguf_writer_new();
	void *mem = NULL;
	int n = 256;

	for (int b = 0; b < 256; b++) {
		size_t k = utf8_put(bytes[b], tok_byte_to_cp((uint8_t)b));
		bytes[b][k] = '\0';
		toks[b] = bytes[b];
		types[b] = TOK_TYPE_NORMAL;
	}
	toks[n++] = "he";
	toks[n++] = "ll";
	toks[n++] = "hell";
	toks[n++] = "hello";
	toks[n++] = "\xc4\xa0w";
	toks[n++] = "or";
	toks[n++] = "\xc4\xa0wor";
	toks[n++] = "ld";
	toks[n++] = "\xc4\xa0world";
	toks[n++] = "\xc3\xa4\xc2\xbd";
	toks[n++] = "\xc3\xa4\xc2\xbd\xc5\x82";
	for (int i = 256; i < n; i++)
		types[i] = TOK_TYPE_NORMAL;
	types[n] = TOK_TYPE_CONTROL;
	toks[n++] = "<|im_end|>";
	types[n] = TOK_TYPE_CONTROL;
	toks[n++] = "<|im_start|>";
	types[n] = TOK_TYPE_USER_DEFINED;
	toks[n++] = "<tool>";
	types[n] = TOK_TYPE_CONTROL;
	toks[n++] = "<|endoftext|>";
	types[n] = TOK_TYPE_NORMAL;
	toks[n++] = "rl";
	if (w == NULL || n != B_N ||
	    gguf_w_str(w, "general.architecture", "qwen2") != 0 ||
	    gguf_w_str(w, "tokenizer.ggml.model", "gpt2") != 0 ||
	    (pre != NULL && gguf_w_str(w, "tokenizer.ggml.pre", pre) != 0) ||
	    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, (size_t)n) != 0 ||
	    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)n) != 0 ||
	    gguf_w_arr_str(w, "tokenizer.ggml.merges", bpe_merges, N_ELEMS(bpe_merges)) != 0 ||
	    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", B_EOT) != 0 ||
	    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", B_IM_END) != 0 ||
	    gguf_w_to_mem(w, &mem, len) != 0)
		mem = NULL;
	gguf_writer_free(w);
	return mem;
}

/* ---- the tiny SPM vocabulary ----
 * 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then scored pieces. */
#define U "\xe2\x96\x81"	/* U+2581 */
static const struct {
	const char *s;
	float score;
} spm_pieces[] = {
	{ U, -100 },		/* 259 */
	{ "h", -100 },		/* 260 */
	{ "e", -100 },		/* 261 */
	{ "l", -100 },		/* 262 */
	{ "o", -100 },		/* 263 */
	{ "w", -100 },		/* 264 */
	{ "r", -100 },		/* 265 */
	{ "d", -100 },		/* 266 */
	{ U "h", -5 },		/* 267 */
	{ "el", -1 },		/* 268: the best pair, though not the leftmost */
	{ "he", -2 },		/* 269 */
	{ "ll", -3 },		/* 270 */
	{ "hell", -4 },		/* 271 */
	{ "hello", -6 },	/* 272 */
	{ U "hello", -7 },	/* 273 */
	{ U "w", -8 },		/* 274 */
	{ "or", -9 },		/* 275 */
	{ U "wor", -10 },	/* 276 */
	{ "ld", -11 },		/* 277 */
	{ U "world", -12 },	/* 278 */
	{ "<s", -1 },		/* 279: "<s" + ">" would be the control token <s> */
};
#define SPM_N (259 + (int)N_ELEMS(spm_pieces))

static void *
spm_gguf(size_t *len)
{
	static char bytes[256][8];
	const char *toks[SPM_N];
	int32_t types[SPM_N];
	float scores[SPM_N];
	struct gguf_writer *w = gguf_writer_new();
	void *mem = NULL;

	toks[0] = "<unk>";
	toks[1] = "<s>";
	toks[2] = "</s>";
	types[0] = TOK_TYPE_UNKNOWN;
	types[1] = types[2] = TOK_TYPE_CONTROL;
	scores[0] = scores[1] = scores[2] = 0;
	for (int b = 0; b < 256; b++) {
		snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
		toks[3 + b] = bytes[b];
		types[3 + b] = TOK_TYPE_BYTE;
		scores[3 + b] = 0;
	}
	for (size_t i = 0; i < N_ELEMS(spm_pieces); i++) {
		toks[259 + i] = spm_pieces[i].s;
		types[259 + i] = TOK_TYPE_NORMAL;
		scores[259 + i] = spm_pieces[i].score;
	}
	if (w == NULL ||
	    gguf_w_str(w, "tokenizer.ggml.model", "llama") != 0 ||
	    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, SPM_N) != 0 ||
	    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, SPM_N) != 0 ||
	    gguf_w_arr_f32(w, "tokenizer.ggml.scores", scores, SPM_N) != 0 ||
	    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1) != 0 ||
	    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2) != 0 ||
	    gguf_w_to_mem(w, &mem, len) != 0)
		mem = NULL;
	gguf_writer_free(w);
	return mem;
}

static struct kvc_tokenizer *
load_mem(void *mem, size_t len, char *err, size_t errlen, int *rc)
{
	struct gguf_file *f;
	struct kvc_tokenizer *t = NULL;

	*rc = gguf_open_mem(&f, mem, len, "fixture", err, errlen);
	if (*rc != 0)
		return NULL;
	*rc = tok_load(&t, f, err, errlen);
	gguf_close(f);
	return t;
}

/* Encode s and compare with the expected ids (terminated by -1). */
static void
expect_ids(const struct kvc_tokenizer *t, const char *s, unsigned flags, const int32_t *want, int line)
{
	struct kvc_tokens ids = { 0 };
	char err[256] = "";
	size_t n = 0;
	bool same;
	int rc = tok_encode(t, s, strlen(s), flags, &ids, err, sizeof err);

	while (want[n] >= 0)
		n++;
	same = rc == 0 && ids.n == n && (n == 0 || memcmp(ids.v, want, n * sizeof *want) == 0);
	test_cond(same, "line %d: \"%s\" (rc %d %s)", line, s, rc, err);
	if (!same) {
		fprintf(stderr, "    got:");
		for (size_t i = 0; i < ids.n; i++)
			fprintf(stderr, " %d", ids.v[i]);
		fprintf(stderr, "\n");
	}
	kvc_tokens_free(&ids);
}
#define EXPECT(t, s, flags, ...) do {					\
	static const int32_t want_[] = { __VA_ARGS__, -1 };		\
	expect_ids(t, s, flags, want_, __LINE__);			\
} while (0)

static void
expect_decode(const struct kvc_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
    const char *want, int line)
{
	struct kvc_buf b = { 0 };
	int rc = tok_decode(t, ids, n, flags, &b);

	test_cond(rc == 0 && b.n == strlen(want) && memcmp(b.p ? b.p : "", want, b.n) == 0,
	    "line %d: decoded \"%.*s\", want \"%s\"", line, (int)b.n, b.p ? b.p : "", want);
	kvc_buf_free(&b);
}
#define DECODE(t, flags, want, ...) do {				\
	static const int32_t ids_[] = { __VA_ARGS__ };			\
	expect_decode(t, ids_, N_ELEMS(ids_), flags, want, __LINE__);	\
} while (0)

/* ---- pre-tokenizers: expected splits worked out from each regex ---- */

static void
expect_split(enum pretok_kind k, const char *s, const char *const *want, size_t n_want, int line)
{
	struct pretok_out o = { 0 };
	size_t start = 0;
	bool same;

	test_cond(pretok_split(k, s, strlen(s), &o) == 0, "line %d: split failed", line);
	same = o.n == n_want;
	for (size_t i = 0; same && i < o.n; i++) {
		size_t l = o.end[i] - start;
		same = strlen(want[i]) == l && memcmp(s + start, want[i], l) == 0;
		start = o.end[i];
	}
	test_cond(same, "line %d: split of \"%s\" differs", line, s);
	if (!same) {
		start = 0;
		for (size_t i = 0; i < o.n; i++) {
			fprintf(stderr, "    [%.*s]\n", (int)(o.end[i] - start), s + start);
			start = o.end[i];
		}
	}
	pretok_out_free(&o);
}
#define SPLIT(k, s, ...) do {						\
	static const char *const w_[] = { __VA_ARGS__ };		\
	expect_split(k, s, w_, N_ELEMS(w_), __LINE__);			\
} while (0)

static void
test_pretok(void)
{
	enum pretok_kind k;
	bool ign;

	/* gpt2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
	SPLIT(PRETOK_GPT2, "Hello world", "Hello", " world");
	SPLIT(PRETOK_GPT2, "  Hello", " ", " Hello");
	SPLIT(PRETOK_GPT2, "I'll go 2024!!", "I", "'ll", " go", " 2024", "!!");
	SPLIT(PRETOK_GPT2, "We'VE", "We", "'", "VE");	/* case-sensitive contractions */
	SPLIT(PRETOK_GPT2, "a  \n", "a", "  \n");	/* trailing whitespace stays whole */
	SPLIT(PRETOK_GPT2, "\xe4\xbd\xa0\xe5\xa5\xbd, \xe4\xb8\x96", "\xe4\xbd\xa0\xe5\xa5\xbd", ",", " \xe4\xb8\x96");
	/* llama3: contractions any case, [^\r\n\p{L}\p{N}]?\p{L}+, \p{N}{1,3}, ... */
	SPLIT(PRETOK_LLAMA3, "We'VE 12345", "We", "'VE", " ", "123", "45");
	SPLIT(PRETOK_LLAMA3, "(hi) x\n\n y", "(hi", ")", " x", "\n\n", " y");
	SPLIT(PRETOK_LLAMA3, "a  \t\n b", "a", "  \t\n", " b");
	SPLIT(PRETOK_LLAMA3, "ok?!\n\nz", "ok", "?!\n\n", "z");
	/* qwen2: single digits */
	SPLIT(PRETOK_QWEN2, "x123", "x", "1", "2", "3");
	/* starcoder: \p{N} first, then gpt2 */
	SPLIT(PRETOK_STARCODER, "ab 12", "ab", " ", "1", "2");
	/* falcon: punctuation runs, gpt2, then [0-9]{3} */
	SPLIT(PRETOK_FALCON, "x=1234567", "x", "=", "123", "456", "7");
	/* deepseek-coder: [\r\n], \s?\p{L}+, \s?\p{P}+, CJK, \p{N} */
	SPLIT(PRETOK_DEEPSEEK_CODER, "ab, 12\n\xe4\xbd\xa0", "ab", ",", " ", "1", "2", "\n", "\xe4\xbd\xa0");
	/* deepseek-llm: [\r\n], \s?[cased letters]+, \s?[punct]+, \s+$, CJK, \p{N}+ */
	SPLIT(PRETOK_DEEPSEEK_LLM, "Hi, 123  ", "Hi", ",", " ", "123", "  ");
	SPLIT(PRETOK_DEEPSEEK_LLM, "\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80\x82ok",
	    "\xe4\xbd\xa0\xe5\xa5\xbd", "\xe3\x80\x82", "ok");
	/* default: [\p{P}$+<=>^~|]+, gpt2, \p{N}+, [0-9]{3} */
	SPLIT(PRETOK_DEFAULT, "a+b 12345", "a", "+", "b", " ", "123", "45");

	test_cond(pretok_from_name("llama-bpe", &k, &ign) == 0 && k == PRETOK_LLAMA3 && ign, "llama-bpe");
	test_cond(pretok_from_name("llama3", &k, &ign) == 0 && k == PRETOK_LLAMA3 && ign, "llama3");
	test_cond(pretok_from_name("qwen2", &k, &ign) == 0 && k == PRETOK_QWEN2 && !ign, "qwen2");
	test_cond(pretok_from_name(NULL, &k, &ign) == 0 && k == PRETOK_DEFAULT, "missing pre");
	test_cond(pretok_from_name("no-such-pre", &k, &ign) == KVC_EUNSUPPORTED, "unknown pre");
}

static void
test_byte_map(void)
{
	int ok = 1;

	for (int b = 0; b < 256; b++)
		ok &= tok_cp_to_byte(tok_byte_to_cp((uint8_t)b)) == b;
	test_cond(ok, "byte <-> unicode does not round-trip");
	test_cond(tok_byte_to_cp(' ') == 0x120, "space is U+0120");
	test_cond(tok_byte_to_cp('\n') == 0x10A, "newline is U+010A");
	test_cond(tok_byte_to_cp('A') == 'A', "A is itself");
	test_cond(tok_byte_to_cp(0xA0) == 0x142, "0xA0 is U+0142");
	test_cond(tok_byte_to_cp(0xAD) == 0x143, "0xAD is U+0143");
	test_cond(tok_cp_to_byte(0x3000) == -1, "U+3000 is no byte");
}

static void
test_bpe(void)
{
	size_t len;
	void *mem = bpe_gguf("gpt-2", &len);
	char err[256];
	int rc;
	struct kvc_tokenizer *t;
	struct kvc_buf out = { 0 };
	struct tok_detok d;
	size_t n0;

	test_cond(mem != NULL, "cannot build the BPE fixture");
	if (mem == NULL)
		return;
	t = load_mem(mem, len, err, sizeof err, &rc);
	test_cond(t != NULL, "load: %s", err);
	free(mem);
	if (t == NULL)
		return;
	test_cond(tok_kind(t) == TOK_KIND_BPE && strcmp(tok_pre_name(t), "gpt-2") == 0, "kind/pre");
	test_cond(tok_n_vocab(t) == B_N && tok_bos(t) == B_EOT && tok_eos(t) == B_IM_END, "ids");

	/* "hello": he(0) ll(1) hell(2) hello(3). " world": Ġw(4) or(5) Ġwor(6) ld(7) Ġworld(8) */
	EXPECT(t, "hello world", 0, B_HELLO, B_WORLD);
	/* "helo": he, then no merge for (he,l) or (l,o) */
	EXPECT(t, "helo", 0, 256, 'l', 'o');
	EXPECT(t, "hell", 0, 258);
	/* "orld": or (rank 5) and ld (7) before rl (11), which never gets a chance */
	EXPECT(t, "orld", 0, 261, 263);
	EXPECT(t, "rl", 0, B_RL);
	/* "llo": ll then no (ll,o) merge */
	EXPECT(t, "llo!", 0, 257, 'o', '!');
	/* 你好 = E4 BD A0 E5 A5 BD: ä½ (9) then 你 (10); 好 stays bytes */
	EXPECT(t, "\xe4\xbd\xa0\xe5\xa5\xbd", 0, B_NI, 0xE5, 0xA5, 0xBD);
	/* a space is byte 0x20's token (id 32), newline id 10 */
	EXPECT(t, " \n", 0, ' ', '\n');
	{
		struct kvc_tokens ids = { 0 };
		test_cond(tok_encode(t, "", 0, 0, &ids, err, sizeof err) == 0 && ids.n == 0, "empty text");
		kvc_tokens_free(&ids);
	}

	/* special tokens: typed text stays text unless parse_special */
	EXPECT(t, "<|im_end|>", 0, '<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>');
	EXPECT(t, "<|im_end|>", TOK_PARSE_SPECIAL, B_IM_END);
	EXPECT(t, "hello<|im_end|><|im_start|>", TOK_PARSE_SPECIAL, B_HELLO, B_IM_END, B_IM_START);
	/* user-defined tokens are split out always (llama.cpp, HF added tokens) */
	EXPECT(t, "hello<tool>", 0, B_HELLO, B_TOOL);
	EXPECT(t, "hello world", TOK_ADD_BOS, B_EOT, B_HELLO, B_WORLD);

	/* eog: eos and control tokens named like turn ends; not others */
	test_cond(tok_is_eog(t, B_IM_END), "<|im_end|> ends a turn");
	test_cond(tok_is_eog(t, B_EOT), "<|endoftext|> ends the text");
	test_cond(!tok_is_eog(t, B_IM_START) && !tok_is_eog(t, B_HELLO) && !tok_is_eog(t, -1) &&
	    !tok_is_eog(t, B_N), "not eog");
	test_cond(tok_lookup(t, "<|im_start|>") == B_IM_START && tok_lookup(t, "nope") == -1, "lookup");
	test_cond(tok_type(t, B_IM_END) == TOK_TYPE_CONTROL && tok_type(t, B_TOOL) == TOK_TYPE_USER_DEFINED,
	    "types");

	/* detokenize */
	DECODE(t, 0, "hello world", B_HELLO, B_WORLD);
	DECODE(t, 0, "hello", B_HELLO, B_IM_END);
	DECODE(t, TOK_DETOK_SPECIAL, "hello<|im_end|>", B_HELLO, B_IM_END);
	DECODE(t, 0, "<tool>", B_TOOL);
	DECODE(t, 0, "\xe4\xbd\xa0\xe5\xa5\xbd", B_NI, 0xE5, 0xA5, 0xBD);
	/* a lone continuation byte and a cut sequence become U+FFFD */
	DECODE(t, 0, "\xef\xbf\xbd" "a" "\xef\xbf\xbd", 0xA5, 'a', 0xE5);
	DECODE(t, 0, "\xef\xbf\xbd" "a", 0xE5, 0xA5, 'a');
	test_cond(tok_decode(t, (int32_t[]){ B_N }, 1, 0, &out) == KVC_EINVAL, "id out of range");

	/* streaming: 好 split over three byte tokens prints whole at the third */
	out.n = 0;
	tok_detok_init(&d, 0);
	test_cond(tok_detok_push(t, &d, B_HELLO, &out) == 0 && out.n == 5, "hello at once");
	n0 = out.n;
	tok_detok_push(t, &d, 0xE5, &out);
	test_cond(out.n == n0, "first byte of 好 held back");
	tok_detok_push(t, &d, 0xA5, &out);
	test_cond(out.n == n0, "second byte of 好 held back");
	tok_detok_push(t, &d, 0xBD, &out);
	test_cond(out.n == n0 + 3 && memcmp(out.p + n0, "\xe5\xa5\xbd", 3) == 0, "好 written whole");
	/* a sequence cut by the end of the stream */
	tok_detok_push(t, &d, 0xE4, &out);
	test_cond(out.n == n0 + 3, "held back");
	tok_detok_flush(&d, &out);
	test_cond(out.n == n0 + 6 && memcmp(out.p + n0 + 3, "\xef\xbf\xbd", 3) == 0, "flush writes U+FFFD");
	test_cond(kvc_utf8_valid_prefix(out.p, out.n) == out.n, "output is valid UTF-8");
	/* surrogates (ED A0..) can never complete */
	out.n = 0;
	tok_detok_init(&d, 0);
	tok_detok_push(t, &d, 0xED, &out);
	tok_detok_push(t, &d, 0xA0, &out);
	tok_detok_push(t, &d, 0x80, &out);
	tok_detok_flush(&d, &out);
	test_cond(kvc_utf8_valid_prefix(out.p, out.n) == out.n && out.n > 0, "surrogate bytes become U+FFFD");

	/* invalid UTF-8 input is refused with its offset */
	{
		struct kvc_tokens ids = { 0 };
		rc = tok_encode(t, "ab\xc3(", 4, 0, &ids, err, sizeof err);
		test_cond(rc == KVC_EFORMAT && strstr(err, "byte 2") != NULL, "invalid UTF-8: %d %s", rc, err);
		rc = tok_encode(t, "\xed\xa0\x80", 3, 0, &ids, err, sizeof err);
		test_cond(rc == KVC_EFORMAT && strstr(err, "byte 0") != NULL, "surrogate: %d %s", rc, err);
		test_cond(ids.n == 0, "nothing appended on error");
		kvc_tokens_free(&ids);
	}
	kvc_buf_free(&out);
	tok_free(t);

	/* qwen2 pre-tokenizer on the same vocabulary: digits one by one */
	mem = bpe_gguf("qwen2", &len);
	t = mem ? load_mem(mem, len, err, sizeof err, &rc) : NULL;
	free(mem);
	test_cond(t != NULL, "qwen2 fixture");
	if (t != NULL) {
		EXPECT(t, "hello 42", 0, B_HELLO, ' ', '4', '2');
		tok_free(t);
	}
	/* unknown pre-tokenizer: refused, named */
	mem = bpe_gguf("no-such-pre", &len);
	t = mem ? load_mem(mem, len, err, sizeof err, &rc) : NULL;
	free(mem);
	test_cond(t == NULL && rc == KVC_EUNSUPPORTED && strstr(err, "no-such-pre") != NULL,
	    "unknown pre: rc %d '%s'", rc, err);
	/* missing pre: llama.cpp's default list */
	mem = bpe_gguf(NULL, &len);
	t = mem ? load_mem(mem, len, err, sizeof err, &rc) : NULL;
	free(mem);
	test_cond(t != NULL && strcmp(tok_pre_name(t), "default") == 0, "missing pre: %s", err);
	tok_free(t);
}

static void
test_spm(void)
{
	size_t len;
	void *mem = spm_gguf(&len);
	char err[256];
	int rc;
	struct kvc_tokenizer *t;
	struct kvc_buf out = { 0 };
	struct tok_detok d;

	test_cond(mem != NULL, "cannot build the SPM fixture");
	if (mem == NULL)
		return;
	t = load_mem(mem, len, err, sizeof err, &rc);
	free(mem);
	test_cond(t != NULL, "load: %s", err);
	if (t == NULL)
		return;
	test_cond(tok_kind(t) == TOK_KIND_SPM && strcmp(tok_pre_name(t), "") == 0, "kind");
	test_cond(tok_add_bos_default(t), "SPM adds BOS by default");

	/*
	 * "▁hello▁world": pairs ▁h -5, he -2, el -1, ll -3, ▁w -8, or -9, ld -11.
	 * el (-1) goes first, which spoils he and ll; then ▁h; ▁w; or; ▁wor;
	 * ld; ▁world. Left: ▁h el l o ▁world.
	 */
	EXPECT(t, "hello world", 0, 267, 268, 262, 263, 278);
	/* without the leading ▁: h el l */
	EXPECT(t, "hell", TOK_NO_SPACE_PREFIX, 260, 268, 262);
	/* 'i' is no piece: byte fallback <0x69> = 3 + 0x69 */
	EXPECT(t, "hi", 0, 267, 3 + 0x69);
	/* 你 = E4 BD A0, all bytes */
	EXPECT(t, "\xe4\xbd\xa0", TOK_NO_SPACE_PREFIX, 3 + 0xE4, 3 + 0xBD, 3 + 0xA0);
	EXPECT(t, "hello world", TOK_ADD_BOS, 1, 267, 268, 262, 263, 278);
	/* typed "<s>": "<s" merges but never into the control token <s> */
	EXPECT(t, "<s>", 0, 259, 279, 3 + '>');
	/* parsed <s>: the text after it gets a leading ▁ again */
	EXPECT(t, "<s>hello", TOK_PARSE_SPECIAL, 1, 267, 268, 262, 263);
	EXPECT(t, " ", 0, 259, 259);

	DECODE(t, 0, "hello world", 267, 268, 262, 263, 278);
	DECODE(t, TOK_DETOK_KEEP_LEADING_SPACE, " hello world", 267, 268, 262, 263, 278);
	DECODE(t, 0, "hello", 1, 267, 268, 262, 263);
	DECODE(t, TOK_DETOK_SPECIAL, "<s> hello", 1, 267, 268, 262, 263);
	DECODE(t, 0, "\xe4\xbd\xa0", 3 + 0xE4, 3 + 0xBD, 3 + 0xA0);
	DECODE(t, 0, " ", 259, 259);

	/* streaming a split character through byte tokens */
	tok_detok_init(&d, 0);
	tok_detok_push(t, &d, 3 + 0xE4, &out);
	tok_detok_push(t, &d, 3 + 0xBD, &out);
	test_cond(out.n == 0, "你 held back");
	tok_detok_push(t, &d, 3 + 0xA0, &out);
	test_cond(out.n == 3 && memcmp(out.p, "\xe4\xbd\xa0", 3) == 0, "你 whole");
	kvc_buf_free(&out);
	tok_free(t);
}

/* Vocabularies a hostile or broken file may carry: each is refused cleanly. */
static void
test_bad_vocab(void)
{
	static const char *const toks[] = { "a", "b", "ab" };
	static const char *const bad_merge[] = { "ab" };
	static const int32_t short_types[] = { 1, 1 };
	static const int32_t bad_types[] = { 1, 1, 99 };
	struct {
		const char *what;
		int want;
		const char *model;
		bool tokens, merges;
		const int32_t *types;
		size_t n_types;
	} cases[] = {
		{ "no model", KVC_EFORMAT, NULL, true, true, NULL, 0 },
		{ "unknown model", KVC_EUNSUPPORTED, "bert", true, true, NULL, 0 },
		{ "no tokens", KVC_EFORMAT, "gpt2", false, true, NULL, 0 },
		{ "no merges", KVC_EFORMAT, "gpt2", true, false, NULL, 0 },
		{ "short token_type", KVC_EFORMAT, "llama", true, false, short_types, 2 },
		{ "bad token_type", KVC_EFORMAT, "llama", true, false, bad_types, 3 },
	};

	for (size_t i = 0; i < N_ELEMS(cases) + 1; i++) {
		struct gguf_writer *w = gguf_writer_new();
		struct kvc_tokenizer *t;
		void *mem = NULL;
		size_t len = 0;
		char err[256] = "";
		int rc;
		bool merge_case = i == N_ELEMS(cases);

		if (merge_case) {
			gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
			gguf_w_str(w, "tokenizer.ggml.pre", "gpt-2");
			gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
			gguf_w_arr_str(w, "tokenizer.ggml.merges", bad_merge, 1);
		} else {
			gguf_w_str(w, "general.name", "bad");
			if (cases[i].model)
				gguf_w_str(w, "tokenizer.ggml.model", cases[i].model);
			gguf_w_str(w, "tokenizer.ggml.pre", "gpt-2");
			if (cases[i].tokens)
				gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
			if (cases[i].merges)
				gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const[]){ "a b" }, 1);
			if (cases[i].types)
				gguf_w_arr_i32(w, "tokenizer.ggml.token_type", cases[i].types, cases[i].n_types);
		}
		gguf_w_to_mem(w, &mem, &len);
		gguf_writer_free(w);
		t = load_mem(mem, len, err, sizeof err, &rc);
		test_cond(t == NULL && rc == (merge_case ? KVC_EFORMAT : cases[i].want) && err[0] != '\0' &&
		    strchr(err, '\n') == NULL, "%s: rc %d '%s'", merge_case ? "merge without space" : cases[i].what,
		    rc, err);
		tok_free(t);
		free(mem);
	}
}

/*
 * Damaged copies of both fixtures (bytes flipped, or cut short): opening,
 * loading, tokenizing and detokenizing must each succeed or fail with a
 * one-line message, never crash (run under the sanitizers too), and the
 * detokenizer's output must stay valid UTF-8.
 */
static void
test_damaged(void)
{
	static const char text[] = "hello world \xe4\xbd\xa0\xe5\xa5\xbd <|im_end|><s> 12";
	uint64_t x = 0x9E3779B97F4A7C15ull;
	size_t len[2];
	void *orig[2] = { bpe_gguf("qwen2", &len[0]), spm_gguf(&len[1]) };
	int n_loaded = 0, n_refused = 0, bad = 0;

	test_cond(orig[0] != NULL && orig[1] != NULL, "fixtures");
	if (orig[0] == NULL || orig[1] == NULL)
		return;
	for (int iter = 0; iter < 3000; iter++) {
		int which = iter & 1, rc;
		size_t n = len[which];
		uint8_t *mem = malloc(n);
		struct kvc_tokenizer *t;
		char err[256] = "";

		memcpy(mem, orig[which], n);
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (iter % 10 == 9) {
			n = (size_t)(x % n);
		} else {
			for (int k = 0; k < 1 + (int)(x % 4); k++) {
				uint64_t r = x * (uint64_t)(k + 1) * 0x2545F4914F6CDD1Dull;
				mem[(r >> 16) % n] ^= (uint8_t)(1u << ((r >> 8) % 8));
			}
		}
		t = n ? load_mem(mem, n, err, sizeof err, &rc) : NULL;
		if (t == NULL) {
			n_refused++;
			if (n != 0 && (rc >= 0 || err[0] == '\0' || strchr(err, '\n') != NULL))
				bad++;
		} else {
			struct kvc_tokens ids = { 0 };
			struct kvc_buf b = { 0 };
			n_loaded++;
			rc = tok_encode(t, text, sizeof text - 1, TOK_PARSE_SPECIAL | TOK_ADD_BOS, &ids, err, sizeof err);
			if (rc == 0) {
				for (size_t i = 0; i < ids.n; i++)
					if (ids.v[i] < 0 || ids.v[i] >= tok_n_vocab(t))
						bad++;
				if (tok_decode(t, ids.v, ids.n, TOK_DETOK_SPECIAL, &b) != 0 ||
				    kvc_utf8_valid_prefix(b.p ? b.p : "", b.n) != b.n)
					bad++;
			}
			kvc_tokens_free(&ids);
			kvc_buf_free(&b);
			tok_free(t);
		}
		free(mem);
	}
	printf("damaged fixtures: %d loaded, %d refused\n", n_loaded, n_refused);
	test_cond(bad == 0, "%d damaged files misbehaved", bad);
	test_cond(n_loaded > 0 && n_refused > 0, "both outcomes seen");
	free(orig[0]);
	free(orig[1]);
}

static int
write_bpe(const char *path)
{
	size_t len;
	void *mem = bpe_gguf("gpt-2", &len);
	FILE *f = fopen(path, "wb");
	int ok = mem != NULL && f != NULL && fwrite(mem, 1, len, f) == len;

	if (f != NULL && fclose(f) != 0)
		ok = 0;
	free(mem);
	if (!ok)
		fprintf(stderr, "cannot write %s\n", path);
	return ok ? 0 : 1;
}

int
main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--write-bpe") == 0)
		return write_bpe(argv[2]);
	test_pretok();
	test_byte_map();
	test_bpe();
	test_spm();
	test_bad_vocab();
	test_damaged();
	return test_done();
}
