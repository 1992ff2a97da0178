/*
 * test_json.c: core's strict JSON reader (kvc_json_parse): the values
 * kvchat batch reads, escapes and surrogate pairs, and every kind of input
 * it must refuse, each with the byte offset in its message.
 */
#include "test.h"

#include "core/kvc.h"

static struct kvc_json *
parse(const char *s, int *rc, char *err, size_t errlen)
{
	struct kvc_json *j = NULL;

	err[0] = '\0';
	*rc = kvc_json_parse(s, strlen(s), &j, err, errlen);
	return j;
}

static void
test_values(void)
{
	char err[256];
	int rc;
	struct kvc_json *j = parse(" {\"prompt\": \"a\\\"b\\\\c\\n\\u00e9\\ud83d\\ude00/\", \"max_tokens\": 12,"
	    " \"temperature\": -0.5e1, \"x\": [true, false, null, [], {}], \"seed\": 18446744073709551615}\n",
	    &rc, err, sizeof err);
	const struct kvc_json *v;

	test_cond(rc == 0 && j != NULL && j->type == KVC_JSON_OBJ && j->n == 5, "object: %d %s", rc, err);
	if (j == NULL)
		return;
	v = kvc_json_get(j, "prompt");
	test_cond(v && v->type == KVC_JSON_STR && v->len == 13 &&
	    memcmp(v->str, "a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80/", 13) == 0, "escapes and a surrogate pair decoded");
	v = kvc_json_get(j, "max_tokens");
	test_cond(v && v->type == KVC_JSON_NUM && v->num == 12 && strcmp(v->str, "12") == 0, "integer");
	v = kvc_json_get(j, "temperature");
	test_cond(v && v->type == KVC_JSON_NUM && v->num == -5.0 && strcmp(v->str, "-0.5e1") == 0,
	    "number with exponent keeps its text");
	v = kvc_json_get(j, "seed");
	test_cond(v && strcmp(v->str, "18446744073709551615") == 0, "a 64-bit seed's text is exact");
	v = kvc_json_get(j, "x");
	test_cond(v && v->type == KVC_JSON_ARR && v->n == 5 && v->kids[0].type == KVC_JSON_BOOL &&
	    v->kids[0].b && !v->kids[1].b && v->kids[2].type == KVC_JSON_NULL &&
	    v->kids[3].type == KVC_JSON_ARR && v->kids[3].n == 0 && v->kids[4].type == KVC_JSON_OBJ,
	    "array of literals and empty containers");
	test_cond(kvc_json_get(j, "nope") == NULL && kvc_json_get(v, "x") == NULL, "missing key, not an object");
	test_cond(strcmp(kvc_json_type_name(KVC_JSON_ARR), "array") == 0, "type names");
	kvc_json_free(j);

	j = parse("\"\\u0000x\"", &rc, err, sizeof err);
	test_cond(rc == 0 && j && j->len == 2 && j->str[0] == '\0' && j->str[1] == 'x',
	    "an escaped NUL is kept with its length");
	kvc_json_free(j);
}

static void
test_refused(void)
{
	static const struct {
		const char *in;
		const char *why;	/* part of the message */
		int at;			/* the byte offset named (1-based) */
	} bad[] = {
		{ "", "end of input", 1 },
		{ "{\"a\":1} x", "after the value", 9 },
		{ "{\"a\":1,}", "expected a key", 8 },
		{ "{\"a\" 1}", "expected ':'", 6 },
		{ "{\"a\":1 \"b\":2}", "expected ','", 8 },
		{ "[1 2]", "expected ','", 4 },
		{ "{\"a\":1,\"a\":2}", "duplicate key", 11 },
		{ "\"abc", "unterminated", 5 },
		{ "\"a\tb\"", "control character", 3 },
		{ "\"a\\qb\"", "bad escape", 4 },
		{ "\"\\u12G4\"", "bad \\u escape", 4 },
		{ "\"\\ud800x\"", "surrogate", 8 },
		{ "\"\\udc00\"", "lone low surrogate", 8 },
		{ "\"\xff\"", "invalid UTF-8", 2 },
		{ "\"a\xc3\"", "invalid UTF-8", 3 },
		{ "01", "after the value", 2 },
		{ "+1", "unexpected character", 1 },
		{ ".5", "unexpected character", 1 },
		{ "1.", "digit must follow '.'", 3 },
		{ "1e", "digit must follow the exponent", 3 },
		{ "-", "bad number", 2 },
		{ "NaN", "unexpected character", 1 },
		{ "tru", "unexpected character", 1 },
		{ "nul", "unexpected character", 1 },
	};
	char err[256], deep[200];
	int rc;

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct kvc_json *j = parse(bad[i].in, &rc, err, sizeof err);
		char at[32];

		snprintf(at, sizeof at, "at byte %d", bad[i].at);
		test_cond(rc == KVC_EFORMAT && j == NULL && strstr(err, bad[i].why) != NULL &&
		    strstr(err, at) != NULL, "'%s' refused (%s, %s): %d '%s'", bad[i].in, bad[i].why, at,
		    rc, err);
	}
	memset(deep, '[', sizeof deep - 1);
	deep[sizeof deep - 1] = '\0';
	test_cond(parse(deep, &rc, err, sizeof err) == NULL && rc == KVC_EFORMAT &&
	    strstr(err, "too deep") != NULL, "nesting is bounded: %s", err);
	memset(deep, '[', KVC_JSON_DEPTH);
	memset(deep + KVC_JSON_DEPTH, ']', KVC_JSON_DEPTH);
	deep[2 * KVC_JSON_DEPTH] = '\0';
	{
		struct kvc_json *j = parse(deep, &rc, err, sizeof err);

		test_cond(rc == 0 && j != NULL, "%d levels are fine: %s", KVC_JSON_DEPTH, err);
		kvc_json_free(j);
	}
}

int
main(void)
{
	test_values();
	test_refused();
	return test_done();
}
