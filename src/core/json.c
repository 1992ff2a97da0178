/* json.c: JSON string literals (escaping) for the JSON the program writes, and a strict reader for the JSON it reads. */
#include "kvc.h"

int
kvc_json_str(struct kvc_buf *b, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t run = 0;	/* bytes at p[i - run .. i) that need no escape */
	int rc;

	if ((rc = kvc_buf_append(b, "\"", 1)) != KVC_OK)
		return rc;
	for (size_t i = 0; i < n; i++) {
		const char *esc = NULL;

		switch (p[i]) {
		case '"': esc = "\\\""; break;
		case '\\': esc = "\\\\"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '\t': esc = "\\t"; break;
		default:
			if (p[i] >= 0x20) {
				run++;
				continue;
			}
		}
		/* Copy the plain bytes before this one in one piece. */
		if (run > 0 && (rc = kvc_buf_append(b, p + i - run, run)) != KVC_OK)
			return rc;
		run = 0;
		rc = esc ? kvc_buf_append(b, esc, 2) : kvc_buf_printf(b, "\\u%04x", p[i]);
		if (rc != KVC_OK)
			return rc;
	}
	if (run > 0 && (rc = kvc_buf_append(b, p + n - run, run)) != KVC_OK)
		return rc;
	return kvc_buf_append(b, "\"", 1);
}

/* ---- reading ---- */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct jp {
	const char *s;
	size_t n, i;		/* input, and the offset reached */
	char *err;
	size_t errlen;
};

static int
jp_fail(struct jp *p, const char *what)
{
	kvc_err(p->err, p->errlen, "JSON: %s at byte %zu", what, p->i + 1);
	return KVC_EFORMAT;
}

static void
jp_ws(struct jp *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
	    p->s[p->i] == '\r'))
		p->i++;
}

static bool
jp_lit(struct jp *p, const char *lit)
{
	size_t l = strlen(lit);

	if (p->n - p->i < l || memcmp(p->s + p->i, lit, l) != 0)
		return false;
	p->i += l;
	return true;
}

static int
hex4(const char *s, unsigned *out)
{
	unsigned v = 0;

	for (int k = 0; k < 4; k++) {
		char c = s[k];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

static int
put_utf8(struct kvc_buf *b, unsigned cp)
{
	char u[4];
	size_t n;

	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	return kvc_buf_append(b, u, n);
}

/* A \uXXXX escape at p->i (after the backslash and 'u'), a surrogate pair joined. */
static int
jp_uescape(struct jp *p, struct kvc_buf *b)
{
	unsigned cp, lo;

	if (p->n - p->i < 4 || hex4(p->s + p->i, &cp) != 0)
		return jp_fail(p, "bad \\u escape");
	p->i += 4;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return jp_fail(p, "lone low surrogate in \\u escape");
	if (cp >= 0xd800 && cp <= 0xdbff) {
		if (p->n - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' ||
		    hex4(p->s + p->i + 2, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff)
			return jp_fail(p, "high surrogate without its low half");
		p->i += 6;
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
	}
	return put_utf8(b, cp) == KVC_OK ? KVC_OK : KVC_ENOMEM;
}

/* A string at p->i (the opening quote), decoded into a fresh NUL-terminated buffer. */
static int
jp_string(struct jp *p, char **out, size_t *len)
{
	struct kvc_buf b = {0};
	int rc = KVC_OK;

	p->i++;
	for (;;) {
		size_t run = p->i, ok;
		unsigned char c;

		while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' &&
		    (unsigned char)p->s[p->i] >= 0x20)
			p->i++;
		ok = kvc_utf8_valid_prefix(p->s + run, p->i - run);
		if (ok < p->i - run) {
			p->i = run + ok;
			rc = jp_fail(p, "invalid UTF-8 in a string");
			break;
		}
		if (kvc_buf_append(&b, p->s + run, p->i - run) != KVC_OK) {
			rc = KVC_ENOMEM;
			break;
		}
		if (p->i >= p->n) {
			rc = jp_fail(p, "unterminated string");
			break;
		}
		c = (unsigned char)p->s[p->i];
		if (c == '"') {
			p->i++;
			break;
		}
		if (c < 0x20) {
			rc = jp_fail(p, "control character in a string (escape it)");
			break;
		}
		/* a backslash */
		if (++p->i >= p->n) {
			rc = jp_fail(p, "unterminated string");
			break;
		}
		c = (unsigned char)p->s[p->i++];
		{
			const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *k = strchr(from, c);

			if (c == 'u')
				rc = jp_uescape(p, &b);
			else if (c != 0 && k != NULL)
				rc = kvc_buf_append(&b, to + (k - from), 1);
			else {
				p->i--;
				rc = jp_fail(p, "bad escape in a string");
			}
		}
		if (rc != KVC_OK)
			break;
	}
	if (rc == KVC_OK && kvc_buf_append(&b, "", 0) != KVC_OK)
		rc = KVC_ENOMEM;
	if (rc != KVC_OK) {
		if (rc == KVC_ENOMEM)
			kvc_err(p->err, p->errlen, "JSON: out of memory");
		kvc_buf_free(&b);
		return rc;
	}
	*out = b.p;
	*len = b.n;
	return KVC_OK;
}

/* A number at p->i, as JSON's grammar has it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int
jp_number(struct jp *p, struct kvc_json *j)
{
	size_t st = p->i;
	const char *s = p->s;

	if (p->i < p->n && s[p->i] == '-')
		p->i++;
	if (p->i < p->n && s[p->i] == '0')
		p->i++;
	else if (p->i < p->n && s[p->i] >= '1' && s[p->i] <= '9')
		while (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9')
			p->i++;
	else
		return jp_fail(p, "bad number");
	if (p->i < p->n && s[p->i] == '.') {
		p->i++;
		if (p->i >= p->n || s[p->i] < '0' || s[p->i] > '9')
			return jp_fail(p, "bad number (a digit must follow '.')");
		while (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9')
			p->i++;
	}
	if (p->i < p->n && (s[p->i] == 'e' || s[p->i] == 'E')) {
		p->i++;
		if (p->i < p->n && (s[p->i] == '+' || s[p->i] == '-'))
			p->i++;
		if (p->i >= p->n || s[p->i] < '0' || s[p->i] > '9')
			return jp_fail(p, "bad number (a digit must follow the exponent)");
		while (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9')
			p->i++;
	}
	j->type = KVC_JSON_NUM;
	j->len = p->i - st;
	j->str = malloc(j->len + 1);
	if (j->str == NULL) {
		kvc_err(p->err, p->errlen, "JSON: out of memory");
		return KVC_ENOMEM;
	}
	memcpy(j->str, s + st, j->len);
	j->str[j->len] = '\0';
	errno = 0;
	j->num = strtod(j->str, NULL);	/* grammar checked above; overflow gives +-HUGE_VAL */
	return KVC_OK;
}

static void
json_clear(struct kvc_json *j)
{
	for (size_t i = 0; i < j->n; i++)
		json_clear(&j->kids[i]);
	free(j->kids);
	free(j->str);
	free(j->key);
}

static int jp_value(struct jp *p, struct kvc_json *j, int depth);

/* Append a zeroed node to j's kids; NULL when out of memory. */
static struct kvc_json *
jp_kid(struct jp *p, struct kvc_json *j, size_t *cap)
{
	if (j->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		struct kvc_json *k = realloc(j->kids, nc * sizeof *k);

		if (k == NULL) {
			kvc_err(p->err, p->errlen, "JSON: out of memory");
			return NULL;
		}
		j->kids = k;
		*cap = nc;
	}
	memset(&j->kids[j->n], 0, sizeof j->kids[j->n]);
	return &j->kids[j->n++];
}

/* An array or object at p->i (its opening bracket). */
static int
jp_container(struct jp *p, struct kvc_json *j, int depth)
{
	bool obj = p->s[p->i] == '{';
	char close = obj ? '}' : ']';
	size_t cap = 0;
	int rc;

	j->type = obj ? KVC_JSON_OBJ : KVC_JSON_ARR;
	if (depth >= KVC_JSON_DEPTH)
		return jp_fail(p, "nested too deep");
	p->i++;
	jp_ws(p);
	if (p->i < p->n && p->s[p->i] == close) {
		p->i++;
		return KVC_OK;
	}
	for (;;) {
		struct kvc_json *k = jp_kid(p, j, &cap);

		if (k == NULL)
			return KVC_ENOMEM;
		jp_ws(p);
		if (obj) {
			if (p->i >= p->n || p->s[p->i] != '"')
				return jp_fail(p, "expected a key (a string)");
			if ((rc = jp_string(p, &k->key, &k->key_len)) != KVC_OK)
				return rc;
			for (size_t d = 0; d + 1 < j->n; d++)
				if (j->kids[d].key_len == k->key_len &&
				    memcmp(j->kids[d].key, k->key, k->key_len) == 0)
					return jp_fail(p, "duplicate key");
			jp_ws(p);
			if (p->i >= p->n || p->s[p->i] != ':')
				return jp_fail(p, "expected ':'");
			p->i++;
			jp_ws(p);
		}
		if ((rc = jp_value(p, k, depth + 1)) != KVC_OK)
			return rc;
		jp_ws(p);
		if (p->i < p->n && p->s[p->i] == ',') {
			p->i++;
			continue;
		}
		if (p->i < p->n && p->s[p->i] == close) {
			p->i++;
			return KVC_OK;
		}
		return jp_fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
	}
}

static int
jp_value(struct jp *p, struct kvc_json *j, int depth)
{
	char c;

	if (p->i >= p->n)
		return jp_fail(p, "unexpected end of input");
	c = p->s[p->i];
	if (c == '{' || c == '[')
		return jp_container(p, j, depth);
	if (c == '"') {
		j->type = KVC_JSON_STR;
		return jp_string(p, &j->str, &j->len);
	}
	if (c == '-' || (c >= '0' && c <= '9'))
		return jp_number(p, j);
	if (jp_lit(p, "true") || jp_lit(p, "false")) {
		j->type = KVC_JSON_BOOL;
		j->b = p->s[p->i - 1] == 'e' && p->s[p->i - 2] == 'u';
		return KVC_OK;
	}
	if (jp_lit(p, "null")) {
		j->type = KVC_JSON_NULL;
		return KVC_OK;
	}
	return jp_fail(p, "unexpected character");
}

int
kvc_json_parse(const char *s, size_t n, struct kvc_json **out, char *err, size_t errlen)
{
	struct jp p = { s, n, 0, err, errlen };
	struct kvc_json *j = calloc(1, sizeof *j);
	int rc;

	*out = NULL;
	if (j == NULL) {
		kvc_err(err, errlen, "JSON: out of memory");
		return KVC_ENOMEM;
	}
	jp_ws(&p);
	rc = jp_value(&p, j, 0);
	if (rc == KVC_OK) {
		jp_ws(&p);
		if (p.i < p.n)
			rc = jp_fail(&p, "unexpected text after the value");
	}
	if (rc != KVC_OK) {
		kvc_json_free(j);
		return rc;
	}
	*out = j;
	return KVC_OK;
}

void
kvc_json_free(struct kvc_json *j)
{
	if (j == NULL)
		return;
	json_clear(j);
	free(j);
}

const struct kvc_json *
kvc_json_get(const struct kvc_json *obj, const char *key)
{
	size_t l = strlen(key);

	if (obj == NULL || obj->type != KVC_JSON_OBJ)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (obj->kids[i].key_len == l && memcmp(obj->kids[i].key, key, l) == 0)
			return &obj->kids[i];
	return NULL;
}

const char *
kvc_json_type_name(enum kvc_json_type t)
{
	static const char *const names[] = { "null", "boolean", "number", "string", "array", "object" };

	return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}
