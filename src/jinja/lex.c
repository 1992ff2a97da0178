/*
 * lex.c: template source -> tokens, as jinja2's lexer under Hugging Face's
 * settings:
 *   - line breaks: every one Python's str.splitlines() knows (\r\n, \r, \v,
 *     \f, \x1c-\x1e, U+0085, U+2028, U+2029) becomes "\n", and one trailing
 *     line break is dropped (keep_trailing_newline=False);
 *   - "{%-" / "{{-" / "{#-" strip the white space before the tag, "-%}" /
 *     "-}}" / "-#}" the white space after it;
 *   - lstrip_blocks: a block or comment tag preceded on its line by white
 *     space only takes that white space away ("{%+" keeps it);
 *   - trim_blocks: the first newline after a block or comment tag goes
 *     ("+%}" keeps it);
 *   - inside a tag, an end delimiter counts only outside brackets, so
 *     {{ {'a': {'b': 1}} }} is one expression.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

struct lexer {
	struct jj_arena *a;
	struct jj_fail *f;
	const char *s;		/* the normalised source */
	size_t n;
	size_t lc_off;		/* line/col known up to this offset */
	int line, col;
	struct jj_tokens *out;
};

/* Line and column (1-based, in characters) of offset off (offsets only grow). */
static void
lx_pos(struct lexer *lx, size_t off, int *line, int *col)
{
	for (; lx->lc_off < off && lx->lc_off < lx->n; lx->lc_off++) {
		unsigned char c = (unsigned char)lx->s[lx->lc_off];

		if (c == '\n') {
			lx->line++;
			lx->col = 1;
		} else if ((c & 0xc0) != 0x80) {
			lx->col++;
		}
	}
	*line = lx->line;
	*col = lx->col;
}

_Noreturn static void
lx_fail(struct lexer *lx, size_t off, const char *msg)
{
	int line, col;

	lx_pos(lx, off, &line, &col);
	jj_failf(lx->f, KVC_EFORMAT, line, col, "%s", msg);
}

static struct jj_token *
emit(struct lexer *lx, enum jj_tok t, size_t off, const char *p, size_t n)
{
	struct jj_tokens *o = lx->out;

	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 256;
		struct jj_token *v = jj_alloc(lx->a, lx->f, cap * sizeof(*v));

		if (o->n)
			memcpy(v, o->v, o->n * sizeof(*v));
		o->v = v;
		o->cap = cap;
	}
	struct jj_token *tk = &o->v[o->n++];

	memset(tk, 0, sizeof(*tk));
	tk->t = t;
	tk->p = p;
	tk->n = n;
	lx_pos(lx, off, &tk->line, &tk->col);
	return tk;
}

/* Length of the line break at s (0 if none): the ones str.splitlines() takes. */
static size_t
line_break(const unsigned char *s, size_t n)
{
	if (s[0] == '\r')
		return n > 1 && s[1] == '\n' ? 2 : 1;
	if (s[0] == '\n' || s[0] == '\v' || s[0] == '\f' || (s[0] >= 0x1c && s[0] <= 0x1e))
		return 1;
	if (n > 1 && s[0] == 0xc2 && s[1] == 0x85)
		return 2;
	if (n > 2 && s[0] == 0xe2 && s[1] == 0x80 && (s[2] == 0xa8 || s[2] == 0xa9))
		return 3;
	return 0;
}

/* splitlines() and "\n".join(): every line break one "\n", the last one dropped. */
static char *
normalise(struct jj_arena *a, struct jj_fail *f, const char *src, size_t n, size_t *out_n)
{
	char *d = jj_alloc(a, f, n + 1);
	size_t o = 0;

	for (size_t i = 0; i < n;) {
		size_t br = line_break((const unsigned char *)src + i, n - i);

		if (br) {
			d[o++] = '\n';
			i += br;
		} else {
			d[o++] = src[i++];
		}
	}
	if (o > 0 && d[o - 1] == '\n')
		o--;
	d[o] = '\0';
	*out_n = o;
	return d;
}

/* Byte length of the white space (Python's \s) starting at s[i]. */
static size_t
space_at(const char *s, size_t n, size_t i)
{
	size_t len;

	if (i >= n)
		return 0;
	uint32_t cp = jj_u8_decode(s + i, n - i, &len);

	return jj_is_space(cp) ? len : 0;
}

/* Python's rstrip(): the length of s[0..n) without its trailing white space. */
static size_t
rstrip_len(const char *s, size_t n)
{
	size_t end = n;

	while (end > 0) {
		size_t st = end - 1;

		while (st > 0 && ((unsigned char)s[st] & 0xc0) == 0x80)
			st--;
		if (!space_at(s, end, st))
			break;
		end = st;
	}
	return end;
}

static size_t
skip_space(const char *s, size_t n, size_t i)
{
	size_t k;

	while ((k = space_at(s, n, i)) > 0)
		i += k;
	return i;
}

/* The text before a tag, with the tag's stripping applied. */
static void
emit_text(struct lexer *lx, size_t from, size_t to, char kind, char sign)
{
	size_t len = to - from;
	const char *t = lx->s + from;

	if (sign == '-') {
		len = rstrip_len(t, len);
	} else if (sign != '+' && kind != '{') {
		/* lstrip_blocks: the text after the last newline, if all white space. */
		size_t l = len;

		while (l > 0 && t[l - 1] != '\n')
			l--;
		bool line_starting = from == 0 || lx->s[from - 1] == '\n';

		if ((l > 0 || line_starting) && skip_space(t, len, l) == len)
			len = l;
	}
	if (len)
		emit(lx, T_TEXT, from, t, len);
}


static size_t after_tag(struct lexer *lx, size_t e, char sign, char kind);

/* Python's unicode-escape of a string literal's body into the arena. */
static size_t
unescape(struct lexer *lx, size_t at, const char *s, size_t n, char *d)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] != '\\' || i + 1 >= n) {
			d[o++] = s[i];
			continue;
		}
		static const char from[] = "\\'\"abfnrtv\n", to[] = "\\'\"\a\b\f\n\r\t\v";
		char c = s[++i];
		const char *simple = c ? strchr(from, c) : NULL;

		if (simple) {
			if (c != '\n')	/* backslash-newline: a continuation, nothing */
				d[o++] = to[simple - from];
			continue;
		}
		if (c == 'x' || c == 'u' || c == 'U') {
			size_t w = c == 'x' ? 2 : c == 'u' ? 4 : 8;
			uint32_t cp = 0;

			for (size_t k = 1; k <= w; k++) {
				char h = i + k < n ? s[i + k] : 0;
				int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 :
					h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;

				if (v < 0)
					lx_fail(lx, at, "bad \\x/\\u escape in a string literal");
				cp = cp * 16 + (uint32_t)v;
			}
			if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
				lx_fail(lx, at, "string literal escapes a code point UTF-8 cannot hold");
			i += w;
			if (cp < 0x80) {
				d[o++] = (char)cp;
			} else if (cp < 0x800) {
				d[o++] = (char)(0xc0 | (cp >> 6));
				d[o++] = (char)(0x80 | (cp & 0x3f));
			} else if (cp < 0x10000) {
				d[o++] = (char)(0xe0 | (cp >> 12));
				d[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
				d[o++] = (char)(0x80 | (cp & 0x3f));
			} else {
				d[o++] = (char)(0xf0 | (cp >> 18));
				d[o++] = (char)(0x80 | ((cp >> 12) & 0x3f));
				d[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
				d[o++] = (char)(0x80 | (cp & 0x3f));
			}
			continue;
		}
		if (c >= '0' && c <= '7') {
			unsigned v = 0;
			size_t k = 0;

			while (k < 3 && i + k < n && s[i + k] >= '0' && s[i + k] <= '7')
				v = v * 8 + (unsigned)(s[i + k++] - '0');
			i += k - 1;
			if (v >= 0x80)
				lx_fail(lx, at, "octal escape above \\177 in a string literal is not supported");
			d[o++] = (char)v;
			continue;
		}
		if (c == 'N')
			lx_fail(lx, at, "\\N{...} escapes are not supported");
		d[o++] = '\\';	/* an unknown escape keeps its backslash, as Python */
		d[o++] = c;
	}
	return o;
}

static size_t
lex_string(struct lexer *lx, size_t i)
{
	char q = lx->s[i];
	size_t k = i + 1;

	while (k < lx->n && lx->s[k] != q)
		k += lx->s[k] == '\\' ? 2 : 1;
	if (k >= lx->n)
		lx_fail(lx, i, "string literal not closed");
	char *d = jj_alloc(lx->a, lx->f, k - i);
	size_t len = unescape(lx, i, lx->s + i + 1, k - i - 1, d);

	emit(lx, T_STRING, i, d, len);
	return k + 1;
}

static bool
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static size_t
lex_number(struct lexer *lx, size_t i)
{
	size_t k = i;
	bool flt = false;
	char buf[64];
	size_t b = 0;

	while (k < lx->n && (is_digit(lx->s[k]) || (lx->s[k] == '_' && k + 1 < lx->n && is_digit(lx->s[k + 1]))))
		k++;
	if (k + 1 < lx->n && lx->s[k] == '.' && is_digit(lx->s[k + 1])) {
		flt = true;
		for (k++; k < lx->n && is_digit(lx->s[k]); k++)
			;
	}
	if (k < lx->n && (lx->s[k] == 'e' || lx->s[k] == 'E')) {
		size_t e = k + 1;

		if (e < lx->n && (lx->s[e] == '+' || lx->s[e] == '-'))
			e++;
		if (e < lx->n && is_digit(lx->s[e])) {
			flt = true;
			for (k = e; k < lx->n && is_digit(lx->s[k]); k++)
				;
		}
	}
	for (size_t j = i; j < k && b + 1 < sizeof(buf); j++)
		if (lx->s[j] != '_')
			buf[b++] = lx->s[j];
	buf[b] = '\0';
	if (k - i >= sizeof(buf) - 1)
		lx_fail(lx, i, "number literal too long");
	struct jj_token *t = emit(lx, flt ? T_FLOAT : T_INT, i, NULL, 0);

	if (flt) {
		t->f = strtod(buf, NULL);
	} else {
		errno = 0;
		long long v = strtoll(buf, NULL, 10);

		if (errno)
			lx_fail(lx, i, "integer literal out of range");
		t->i = v;
	}
	return k;
}

static size_t
lex_op(struct lexer *lx, size_t i, int *depth)
{
	static const char *const two[] = { "//", "**", "==", "!=", "<=", ">=" };
	const char *s = lx->s + i;

	for (size_t k = 0; k < sizeof(two) / sizeof(two[0]); k++)
		if (i + 1 < lx->n && s[0] == two[k][0] && s[1] == two[k][1]) {
			emit(lx, T_OP, i, two[k], 2);
			return i + 2;
		}
	const char *one = strchr("+-*/%~<>=()[]{},.:|;", s[0]);

	if (!s[0] || !one)
		lx_fail(lx, i, "unexpected character in a tag");
	if (s[0] == '(' || s[0] == '[' || s[0] == '{')
		(*depth)++;
	else if ((s[0] == ')' || s[0] == ']' || s[0] == '}') && *depth > 0)
		(*depth)--;
	emit(lx, T_OP, i, one, 1);
	return i + 1;
}

/* The tag opening at at: its tokens up to its end delimiter; returns where text resumes. */
static size_t
lex_tag(struct lexer *lx, size_t at, char kind, char sign)
{
	char close = kind == '{' ? '}' : '%';
	size_t i = at + 2 + (sign != 0);
	int depth = 0;

	emit(lx, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, at, NULL, 0);
	for (;;) {
		i = skip_space(lx->s, lx->n, i);
		if (i >= lx->n)
			lx_fail(lx, at, kind == '{' ? "'{{' not closed" : "'{%' not closed");
		const char *s = lx->s + i;
		char c = s[0];

		if (depth == 0 && (c == '-' || c == '+') && i + 2 < lx->n && s[1] == close && s[2] == '}' &&
		    (c == '-' || kind == '%')) {
			emit(lx, kind == '{' ? T_VAR_END : T_BLOCK_END, i, NULL, 0);
			return after_tag(lx, i + 3, c, kind);
		}
		if (depth == 0 && c == close && i + 1 < lx->n && s[1] == '}') {
			emit(lx, kind == '{' ? T_VAR_END : T_BLOCK_END, i, NULL, 0);
			return after_tag(lx, i + 2, 0, kind);
		}
		if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			size_t k = i;

			while (k < lx->n && (lx->s[k] == '_' || is_digit(lx->s[k]) ||
			       (lx->s[k] >= 'a' && lx->s[k] <= 'z') || (lx->s[k] >= 'A' && lx->s[k] <= 'Z')))
				k++;
			emit(lx, T_NAME, i, s, k - i);
			i = k;
		} else if (is_digit(c)) {
			i = lex_number(lx, i);
		} else if (c == '\'' || c == '"') {
			i = lex_string(lx, i);
		} else {
			i = lex_op(lx, i, &depth);
		}
	}
}

/* After a tag's end delimiter at e (one past it): "-" strips, trim_blocks eats one newline. */
static size_t
after_tag(struct lexer *lx, size_t e, char sign, char kind)
{
	if (sign == '-')
		return skip_space(lx->s, lx->n, e);
	if (sign != '+' && kind != '{' && e < lx->n && lx->s[e] == '\n')
		return e + 1;
	return e;
}

static size_t
lex_comment(struct lexer *lx, size_t i)
{
	const char *end = NULL;

	for (size_t k = i; k + 1 < lx->n; k++)
		if (lx->s[k] == '#' && lx->s[k + 1] == '}') {
			end = lx->s + k;
			break;
		}
	if (!end)
		lx_fail(lx, i, "comment not closed (missing '#}')");
	size_t e = (size_t)(end - lx->s);
	char sign = e > i && (lx->s[e - 1] == '-' || lx->s[e - 1] == '+') ? lx->s[e - 1] : 0;

	return after_tag(lx, e + 2, sign, '#');
}

void
jj_lex(struct jj_arena *a, struct jj_fail *f, const char *src, size_t n, struct jj_tokens *out)
{
	struct lexer lx = { .a = a, .f = f, .line = 1, .col = 1, .out = out };
	size_t i = 0;

	lx.s = normalise(a, f, src, n, &lx.n);
	while (i < lx.n) {
		const char *t = NULL;

		for (size_t k = i; k + 1 < lx.n; k++)
			if (lx.s[k] == '{' && (lx.s[k + 1] == '{' || lx.s[k + 1] == '%' || lx.s[k + 1] == '#')) {
				t = lx.s + k;
				break;
			}
		if (!t) {
			emit(&lx, T_TEXT, i, lx.s + i, lx.n - i);
			break;
		}
		size_t at = (size_t)(t - lx.s);
		char kind = t[1];
		char sign = at + 2 < lx.n && (t[2] == '-' || t[2] == '+') ? t[2] : 0;

		emit_text(&lx, i, at, kind, sign);
		if (kind == '#')
			i = lex_comment(&lx, at + 2 + (sign != 0));
		else
			i = lex_tag(&lx, at, kind, sign);
	}
	emit(&lx, T_EOF, lx.n, NULL, 0);
}
