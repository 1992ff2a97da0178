/*
 * pretok.c: hand-written pre-tokenizer scanners (see pretok.h).
 *
 * The patterns, as llama.cpp's llama-vocab.cpp lists them per pre type:
 *   gpt2:    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   llama3:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   qwen2:   as llama3 with \p{N} instead of \p{N}{1,3}
 *   starcoder: \p{N} ; gpt2
 *   falcon:  [\p{P}\$\+<=>\^~\|`]+ ; gpt2 ; [0-9][0-9][0-9]
 *   default: [\p{P}\$\+<=>\^~\|]+ ; gpt2 ; \p{N}+ ; [0-9][0-9][0-9]
 *   deepseek-coder: [\r\n] ; \s?\p{L}+ ; \s?\p{P}+ ; [一-龥ࠀ-一가-퟿]+ ; \p{N}
 *   deepseek-llm:   [\r\n] ; \s?[cased letters]+ ; \s?[!-/:-~！-／：-～‘-‟　-。]+ ;
 *                   \s+$ ; [一-龥ࠀ-一가-퟿]+ ; \p{N}+
 * Each matcher below returns the length (in code points) of the pattern's
 * match starting exactly at pos within [pos, end), or 0; the driver turns
 * that into a leftmost-first search as a regex iterator does. Lookaheads
 * and $ see the end of the current piece as the end of the text, as in
 * llama.cpp, which runs each stage on each piece separately.
 *
 * \s is Unicode White_Space (llama.cpp's table); \p{L}, \p{N}, \p{P} are the
 * general categories L*, N*, P* as utf8proc reports them.
 */
#include "pretok.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

enum {
	PT_L = 1 << 0,		/* letter */
	PT_N = 1 << 1,		/* number */
	PT_WS = 1 << 2,		/* White_Space */
	PT_P = 1 << 3,		/* punctuation */
	/* DeepSeek's own classes, set only for its pre-tokenizers */
	PT_DS_CJK = 1 << 4,	/* [一-龥ࠀ-一가-퟿] */
	PT_DS_LET = 1 << 5,	/* the cased letters of DeepSeek-LLM */
	PT_DS_PUN = 1 << 6,	/* [!-/:-~！-／：-～‘-‟　-。] */
};

/*
 * The one whitespace run measured last, [s, e): e is the first
 * non-White_Space code point at or after s. A matcher that looks past a
 * whitespace run (\s+$, \s+(?!\S)) may be tried at every position of a
 * long run; the memo gives the run's end to every later position of it in
 * O(1), so that stays linear (it is a fact of the text, whatever the piece).
 */
struct pt_ws_memo {
	size_t s, e;
};

/*
 * Two bytes a code point: what the scanners ask of a code point is its
 * classes (fl) or, for ASCII, which character it is (ch); nothing needs
 * the value of any other. At 1 MB the memory touched costs more than the
 * scanning, so it is kept small.
 */
#define PT_NON_ASCII 0x80	/* ch of a code point above 0x7F: equals no ASCII character */

struct pt_ctx {
	const uint8_t *ch;	/* (n) the code point if ASCII, else PT_NON_ASCII */
	const uint8_t *fl;	/* (n) PT_* flags */
	size_t n;
	struct pt_ws_memo *ws;	/* mutable, see above */
	size_t *work;		/* mutable: code points looked at (pretok_out.work) */
};

/*
 * Every look at a code point's flags or character goes through these, and
 * counts one: what test_tok_linear bounds instead of timing the scanners.
 */
#define FL(i) (++*c->work, c->fl[i])
#define CH(i) (++*c->work, c->ch[i])

typedef size_t (*pt_match)(const struct pt_ctx *c, size_t pos, size_t end);

size_t
pretok_utf8_decode(const char *s, size_t n, uint32_t *cp)
{
	const uint8_t *u = (const uint8_t *)s;

	if (u[0] < 0x80 || n < 2) {
		*cp = u[0];
		return 1;
	}
	if (u[0] < 0xE0) {
		*cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
		return 2;
	}
	if (u[0] < 0xF0 || n < 4) {
		if (n < 3) {
			*cp = u[0];
			return 1;
		}
		*cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
		return 3;
	}
	*cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
	    ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
	return 4;
}

static bool
is_white_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 ||
	    c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
	    c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static uint8_t
cp_flags(uint32_t c)
{
	uint8_t f = is_white_space(c) ? PT_WS : 0;

	if (c > 0x10FFFF)	/* only from bytes a special token cut apart */
		return 0;
	switch (utf8proc_category((utf8proc_int32_t)c)) {
	case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
	case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
		return f | PT_L;
	case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
		return f | PT_N;
	case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
	case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
	case UTF8PROC_CATEGORY_PO:
		return f | PT_P;
	default:
		return f;
	}
}

#define L(i) (FL(i) & PT_L)
#define N(i) (FL(i) & PT_N)
#define WS(i) (FL(i) & PT_WS)
/* [^\s\p{L}\p{N}] */
#define OTHER(i) (!(FL(i) & (PT_L | PT_N | PT_WS)))

static size_t
run(const struct pt_ctx *c, size_t pos, size_t end, uint8_t want)
{
	size_t i = pos;

	while (i < end && (FL(i) & want))
		i++;
	return i - pos;
}

/* Length of the White_Space run at pos, within [pos, end): amortised O(1). */
static size_t
ws_run(const struct pt_ctx *c, size_t pos, size_t end)
{
	struct pt_ws_memo *m = c->ws;
	size_t e;

	if (!(pos >= m->s && pos < m->e)) {
		e = pos;
		while (e < c->n && (FL(e) & PT_WS))
			e++;
		if (e == pos)
			return 0;
		m->s = pos;
		m->e = e;
	}
	e = m->e;
	return (e < end ? e : end) - pos;
}

/* run() that stops after max code points: a matcher that keeps only a few
 * never measures the rest of the run (each call costs O(max), not O(run)). */
static size_t
run_max(const struct pt_ctx *c, size_t pos, size_t end, uint8_t want, size_t max)
{
	size_t i = pos;

	while (i < end && i - pos < max && (FL(i) & want))
		i++;
	return i - pos;
}

static size_t
run_other(const struct pt_ctx *c, size_t pos, size_t end)
{
	size_t i = pos;

	while (i < end && OTHER(i))
		i++;
	return i - pos;
}

static uint32_t
ascii_lower(uint32_t x)
{
	return (x >= 'A' && x <= 'Z') ? x + 32 : x;
}

/* 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII case-insensitive */
static size_t
contraction(const struct pt_ctx *c, size_t pos, size_t end, bool icase)
{
	uint32_t a, b;

	if (CH(pos) != '\'' || pos + 1 >= end)
		return 0;
	a = icase ? ascii_lower(CH(pos + 1)) : CH(pos + 1);
	if (a == 's' || a == 't' || a == 'm' || a == 'd')
		return 2;
	if (pos + 2 >= end)
		return 0;
	b = icase ? ascii_lower(CH(pos + 2)) : CH(pos + 2);
	if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
		return 3;
	return 0;
}

/* \s+(?!\S)|\s+ : a whitespace run keeps its last character for the next
 * piece when something other than whitespace follows. */
static size_t
ws_tail(const struct pt_ctx *c, size_t pos, size_t end)
{
	size_t k = ws_run(c, pos, end);

	if (k > 1 && pos + k < end)
		return k - 1;
	return k;
}

static size_t
m_gpt2(const struct pt_ctx *c, size_t pos, size_t end)
{
	size_t n, p;

	if ((n = contraction(c, pos, end, false)) != 0)
		return n;
	/* " ?X+": the optional space only helps when X follows it */
	p = (CH(pos) == ' ' && pos + 1 < end) ? pos + 1 : pos;
	if (L(p))
		return p - pos + run(c, p, end, PT_L);
	if (N(p))
		return p - pos + run(c, p, end, PT_N);
	if (OTHER(p))
		return p - pos + run_other(c, p, end);
	return ws_tail(c, pos, end);
}

static bool
is_crlf(uint32_t x)
{
	return x == '\r' || x == '\n';
}

static size_t
m_llama3_common(const struct pt_ctx *c, size_t pos, size_t end, size_t max_digits)
{
	size_t n, p, k, last;

	if ((n = contraction(c, pos, end, true)) != 0)
		return n;
	/* [^\r\n\p{L}\p{N}]?\p{L}+ */
	if (L(pos))
		return run(c, pos, end, PT_L);
	if (!is_crlf(CH(pos)) && !N(pos) && pos + 1 < end && L(pos + 1))
		return 1 + run(c, pos + 1, end, PT_L);
	/* \p{N}{1,max} */
	if (N(pos))
		return run_max(c, pos, end, PT_N, max_digits);
	/*  ?[^\s\p{L}\p{N}]+[\r\n]* */
	p = (CH(pos) == ' ' && pos + 1 < end && OTHER(pos + 1)) ? pos + 1 : pos;
	if (OTHER(p)) {
		p += run_other(c, p, end);
		while (p < end && is_crlf(CH(p)))
			p++;
		return p - pos;
	}
	/*
	 * \s*[\r\n]+ : up to the last newline of the whitespace run. Linear
	 * over a run: the match ends at that newline, and what follows it has
	 * none (ws_tail below), so a run is scanned at most twice.
	 */
	k = ws_run(c, pos, end);
	last = 0;
	for (size_t i = k; i > 0 && last == 0; i--)
		if (is_crlf(CH(pos + i - 1)))
			last = i;
	if (last != 0)
		return last;
	return ws_tail(c, pos, end);
}

static size_t
m_llama3(const struct pt_ctx *c, size_t pos, size_t end)
{
	return m_llama3_common(c, pos, end, 3);
}

static size_t
m_qwen2(const struct pt_ctx *c, size_t pos, size_t end)
{
	return m_llama3_common(c, pos, end, 1);
}

/* [\r\n] */
static size_t
m_crlf(const struct pt_ctx *c, size_t pos, size_t end)
{
	return is_crlf(CH(pos)) ? 1 : 0;
}

/* \p{N} */
static size_t
m_digit1(const struct pt_ctx *c, size_t pos, size_t end)
{
	return N(pos) ? 1 : 0;
}

/* \p{N}+ */
static size_t
m_digits(const struct pt_ctx *c, size_t pos, size_t end)
{
	return run(c, pos, end, PT_N);
}

/* [0-9][0-9][0-9] */
static size_t
m_ascii3(const struct pt_ctx *c, size_t pos, size_t end)
{
	if (pos + 3 > end)
		return 0;
	for (size_t i = pos; i < pos + 3; i++)
		if (CH(i) < '0' || CH(i) > '9')
			return 0;
	return 3;
}

static bool
is_ascii_sym(uint32_t x, bool backtick)
{
	return x == '$' || x == '+' || x == '<' || x == '=' || x == '>' ||
	    x == '^' || x == '~' || x == '|' || (backtick && x == '`');
}

/* [\p{P}\$\+<=>\^~\|`]+ (falcon) */
static size_t
m_punct_falcon(const struct pt_ctx *c, size_t pos, size_t end)
{
	size_t i = pos;

	while (i < end && ((FL(i) & PT_P) || is_ascii_sym(CH(i), true)))
		i++;
	return i - pos;
}

/* [\p{P}\$\+<=>\^~\|]+ (default) */
static size_t
m_punct_default(const struct pt_ctx *c, size_t pos, size_t end)
{
	size_t i = pos;

	while (i < end && ((FL(i) & PT_P) || is_ascii_sym(CH(i), false)))
		i++;
	return i - pos;
}

/* \s?X+ for a flag class X */
static size_t
ws_opt_run(const struct pt_ctx *c, size_t pos, size_t end, uint8_t want)
{
	if (WS(pos) && pos + 1 < end && (FL(pos + 1) & want))
		return 1 + run(c, pos + 1, end, want);
	return run(c, pos, end, want);
}

static size_t
m_ws_letters(const struct pt_ctx *c, size_t pos, size_t end)
{
	return ws_opt_run(c, pos, end, PT_L);
}

static size_t
m_ws_punct(const struct pt_ctx *c, size_t pos, size_t end)
{
	return ws_opt_run(c, pos, end, PT_P);
}

/* [一-龥ࠀ-一가-퟿]+ */
static bool
is_ds_cjk(uint32_t x)
{
	return (x >= 0x0800 && x <= 0x9FA5) || (x >= 0xAC00 && x <= 0xD7FF);
}

static size_t
m_ds_cjk(const struct pt_ctx *c, size_t pos, size_t end)
{
	return run(c, pos, end, PT_DS_CJK);
}

/* The cased-letter class of DeepSeek-LLM's second pattern. */
static const uint32_t ds_letters[][2] = {
	{0x0041, 0x005A}, {0x0061, 0x007A}, {0x00B5, 0x00B5}, {0x00C0, 0x00D6},
	{0x00D8, 0x00F6}, {0x00F8, 0x01BA}, {0x01BC, 0x01BF}, {0x01C4, 0x0293},
	{0x0295, 0x02AF}, {0x0370, 0x0373}, {0x0376, 0x0377}, {0x037B, 0x037D},
	{0x037F, 0x037F}, {0x0386, 0x0386}, {0x0388, 0x038A}, {0x038C, 0x038C},
	{0x038E, 0x03A1}, {0x03A3, 0x03F5}, {0x03F7, 0x0481}, {0x048A, 0x052F},
	{0x0531, 0x0556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD},
	{0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77},
	{0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45},
	{0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
	{0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC},
	{0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3},
	{0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC},
	{0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115},
	{0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
	{0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F},
	{0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B},
	{0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0xA640, 0xA66D},
	{0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E},
	{0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A},
	{0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
	{0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

static bool
in_ranges(const uint32_t (*r)[2], size_t n, uint32_t x)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (x < r[mid][0])
			hi = mid;
		else if (x > r[mid][1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

static bool
is_ds_letter(uint32_t x)
{
	return in_ranges(ds_letters, sizeof ds_letters / sizeof ds_letters[0], x);
}

/* [!-/:-~！-／：-～‘-‟　-。] */
static bool
is_ds_punct(uint32_t x)
{
	return (x >= 0x21 && x <= 0x2F) || (x >= 0x3A && x <= 0x7E) ||
	    (x >= 0xFF01 && x <= 0xFF0F) || (x >= 0xFF1A && x <= 0xFF5E) ||
	    (x >= 0x2018 && x <= 0x201F) || (x >= 0x3000 && x <= 0x3002);
}

static size_t
m_ds_letters(const struct pt_ctx *c, size_t pos, size_t end)
{
	return ws_opt_run(c, pos, end, PT_DS_LET);
}

static size_t
m_ds_punct(const struct pt_ctx *c, size_t pos, size_t end)
{
	return ws_opt_run(c, pos, end, PT_DS_PUN);
}

/* DeepSeek's classes of code point x (PT_DS_*). */
static uint8_t
ds_flags(uint32_t x)
{
	return (uint8_t)((is_ds_cjk(x) ? PT_DS_CJK : 0) | (is_ds_letter(x) ? PT_DS_LET : 0) |
	    (is_ds_punct(x) ? PT_DS_PUN : 0));
}

/* \s+$ : tried at every position of a run that stops short of the end,
 * so its length must come in O(1) (ws_run), not by scanning the run. */
static size_t
m_ws_to_end(const struct pt_ctx *c, size_t pos, size_t end)
{
	size_t k = ws_run(c, pos, end);

	return (k > 0 && pos + k == end) ? k : 0;
}

#undef L
#undef N
#undef WS
#undef OTHER

struct pt_stages {
	const pt_match *m;
	size_t n;
};

static const pt_match st_default[] = { m_punct_default, m_gpt2, m_digits, m_ascii3 };
static const pt_match st_gpt2[] = { m_gpt2 };
static const pt_match st_llama3[] = { m_llama3 };
static const pt_match st_qwen2[] = { m_qwen2 };
static const pt_match st_ds_llm[] = { m_crlf, m_ds_letters, m_ds_punct, m_ws_to_end, m_ds_cjk, m_digits };
static const pt_match st_ds_coder[] = { m_crlf, m_ws_letters, m_ws_punct, m_ds_cjk, m_digit1 };
static const pt_match st_falcon[] = { m_punct_falcon, m_gpt2, m_ascii3 };
static const pt_match st_starcoder[] = { m_digit1, m_gpt2 };

#define STAGES(a) { a, sizeof a / sizeof a[0] }
static const struct pt_stages stages[] = {
	[PRETOK_DEFAULT] = STAGES(st_default),
	[PRETOK_GPT2] = STAGES(st_gpt2),
	[PRETOK_LLAMA3] = STAGES(st_llama3),
	[PRETOK_QWEN2] = STAGES(st_qwen2),
	[PRETOK_DEEPSEEK_LLM] = STAGES(st_ds_llm),
	[PRETOK_DEEPSEEK_CODER] = STAGES(st_ds_coder),
	[PRETOK_FALCON] = STAGES(st_falcon),
	[PRETOK_STARCODER] = STAGES(st_starcoder),
};

static const struct {
	const char *name;
	enum pretok_kind kind;
	bool ignore_merges;
} pre_names[] = {
	/* llama.cpp maps a missing or "default" pre to its DEFAULT list (not to gpt-2) */
	{ "default", PRETOK_DEFAULT, false },
	{ "llama3", PRETOK_LLAMA3, true },
	{ "llama-v3", PRETOK_LLAMA3, true },
	{ "llama-bpe", PRETOK_LLAMA3, true },
	{ "qwen2", PRETOK_QWEN2, false },
	{ "deepseek-r1-qwen", PRETOK_QWEN2, false },
	{ "stablelm2", PRETOK_QWEN2, false },
	{ "gpt-2", PRETOK_GPT2, false },
	{ "phi-2", PRETOK_GPT2, false },
	{ "mpt", PRETOK_GPT2, false },
	{ "olmo", PRETOK_GPT2, false },
	{ "roberta-bpe", PRETOK_GPT2, false },
	{ "deepseek-llm", PRETOK_DEEPSEEK_LLM, false },
	{ "deepseek-coder", PRETOK_DEEPSEEK_CODER, false },
	{ "falcon", PRETOK_FALCON, false },
	{ "starcoder", PRETOK_STARCODER, false },
	{ "refact", PRETOK_STARCODER, false },
	{ "command-r", PRETOK_STARCODER, false },
	{ "smollm", PRETOK_STARCODER, false },
	{ "codeshell", PRETOK_STARCODER, false },
};

int
pretok_from_name(const char *name, enum pretok_kind *kind, bool *ignore_merges)
{
	if (name == NULL || name[0] == '\0')
		name = "default";
	for (size_t i = 0; i < sizeof pre_names / sizeof pre_names[0]; i++)
		if (strcmp(pre_names[i].name, name) == 0) {
			*kind = pre_names[i].kind;
			*ignore_merges = pre_names[i].ignore_merges;
			return KVC_OK;
		}
	return KVC_EUNSUPPORTED;
}

/* Piece ends in code point indices (below 2^32: pretok_split checks). */
struct ends {
	uint32_t *v;
	size_t n, cap;
};

static int
ends_push(struct ends *e, size_t x)
{
	if (e->n == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 256;
		uint32_t *v = realloc(e->v, cap * sizeof *v);
		if (v == NULL)
			return KVC_ENOMEM;
		e->v = v;
		e->cap = cap;
	}
	e->v[e->n++] = (uint32_t)x;
	return KVC_OK;
}

/* One stage: split every piece of in into matches and the gaps between. */
static int
split_stage(const struct pt_ctx *c, pt_match m, const struct ends *in, struct ends *out)
{
	size_t start = 0;

	out->n = 0;
	for (size_t k = 0; k < in->n; k++) {
		size_t end = in->v[k], pos = start, gap = start;

		while (pos < end) {
			size_t len = m(c, pos, end);

			++*c->work;	/* the attempt itself, whatever it looked at */
			if (len == 0) {
				pos++;
				continue;
			}
			if (gap < pos && ends_push(out, pos) != KVC_OK)
				return KVC_ENOMEM;
			pos += len;
			if (ends_push(out, pos) != KVC_OK)
				return KVC_ENOMEM;
			gap = pos;
		}
		if (gap < end && ends_push(out, end) != KVC_OK)
			return KVC_ENOMEM;
		start = end;
	}
	return KVC_OK;
}

/*
 * Memory is what costs at 1 MB (a fresh page is slower to touch than the
 * scanning): 2 bytes a code point (struct pt_ctx), piece ends in 32 bits,
 * and byte offsets found by walking the text again rather than kept for
 * every code point.
 */
int
pretok_split(enum pretok_kind kind, const char *text, size_t len, struct pretok_out *out)
{
	const struct pt_stages *st = &stages[kind];
	struct ends a = { 0 }, b = { 0 }, tmp;
	struct pt_ws_memo memo = { 0, 0 };
	bool ds = kind == PRETOK_DEEPSEEK_LLM || kind == PRETOK_DEEPSEEK_CODER;
	uint8_t *ch = NULL, *fl = NULL;
	size_t n = 0, i = 0, k, work = 0;
	int rc = KVC_ENOMEM;

	if (len == 0)
		return KVC_OK;
	if (len >= UINT32_MAX)
		return KVC_ERANGE;	/* piece ends are code point indices in 32 bits */
	ch = malloc(len);
	fl = malloc(len);
	if (ch == NULL || fl == NULL)
		goto out;
	for (i = 0; i < len; n++) {
		uint32_t x;

		if ((uint8_t)text[i] < 0x80) {	/* ASCII: nothing to decode */
			x = (uint8_t)text[i++];
			ch[n] = (uint8_t)x;
		} else {
			i += pretok_utf8_decode(text + i, len - i, &x);
			ch[n] = PT_NON_ASCII;
		}
		fl[n] = cp_flags(x);
		if (ds)
			fl[n] |= ds_flags(x);
	}
	{
		struct pt_ctx c = { ch, fl, n, &memo, &work };

		work += n;	/* the decoding, one a code point */

		if (ends_push(&a, n) != KVC_OK)
			goto out;
		for (size_t s = 0; s < st->n; s++) {
			if (split_stage(&c, st->m[s], &a, &b) != KVC_OK)
				goto out;
			tmp = a;
			a = b;
			b = tmp;
		}
	}
	if (out->cap - out->n < a.n) {
		size_t cap = out->n + a.n;
		size_t *v = realloc(out->end, cap * sizeof *v);
		if (v == NULL)
			goto out;
		out->end = v;
		out->cap = cap;
	}
	/* code point index -> byte offset: the ends ascend, so one walk does */
	i = 0;
	n = 0;
	for (k = 0; k < a.n; k++) {
		while (n < a.v[k]) {
			uint32_t x;
			i += pretok_utf8_decode(text + i, len - i, &x);
			n++;
		}
		out->end[out->n++] = i;
	}
	out->work += work;
	rc = KVC_OK;
out:
	free(ch);
	free(fl);
	free(a.v);
	free(b.v);
	return rc;
}

void
pretok_out_free(struct pretok_out *out)
{
	free(out->end);
	out->end = NULL;
	out->n = out->cap = 0;
	out->work = 0;
}
