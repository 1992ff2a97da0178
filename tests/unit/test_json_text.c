/*
 * test_json_text.c: the JSON kvchat writes and the JSON kvchat batch reads,
 * both through jansson now that core's own reader and writer are gone.
 *
 * Written (cli/json_text.c): every byte value escaped so that the text
 * reads back as it was, UTF-8 passed through unescaped, bytes that are
 * not UTF-8 (a hand-edited database) made U+FFFD so the output is always
 * JSON, members in the order they were set, rounded reals short.
 * Read (kvchat batch's lines, sub_batch_req.c): the inputs core's strict
 * reader refused are still refused, each as "line L: JSON: ..."; values
 * reach the settings table as they were written; a seed above 2^63 - 1
 * (jansson's integers are 64-bit signed) is refused by name.
 */
#include "test.h"

#include <jansson.h>

#include "cli/json_text.h"
#include "cli/sub/sub_batch.h"

/* v as a compact line (static buffer, newline dropped). */
static const char *
line_of(json_t *v, size_t flags)
{
	static char out[512];
	struct kvc_buf b = {0};
	int rc = cli_json_line(v, flags, &b);

	snprintf(out, sizeof out, "%s", rc == 0 && b.p ? b.p : "(failed)");
	if (rc == 0 && b.n > 0 && b.p[b.n - 1] == '\n')
		out[b.n - 1 < sizeof out ? b.n - 1 : sizeof out - 1] = '\0';
	else
		snprintf(out, sizeof out, "(no newline)");
	kvc_buf_free(&b);
	json_decref(v);
	return out;
}

/* s[0..n) written and read back by jansson equals want[0..wn). */
static bool
round_trip(const char *s, size_t n, const char *want, size_t wn)
{
	json_t *v = cli_json_text(s, n), *back;
	char *text = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
	bool ok;

	back = text ? json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
	ok = json_is_string(back) && json_string_length(back) == wn &&
	    memcmp(json_string_value(back), want, wn) == 0;
	if (!ok)
		fprintf(stderr, "wrote %s\n", text ? text : "(nothing)");
	free(text);
	json_decref(v);
	json_decref(back);
	return ok;
}

static void
test_written(void)
{
	json_t *o;

	test_cond(strcmp(line_of(cli_json_cstr("say \"hi\" a\\b /"), JSON_ENCODE_ANY),
	    "\"say \\\"hi\\\" a\\\\b /\"") == 0, "quotes and backslash escaped, slash not");
	test_cond(strcmp(line_of(cli_json_cstr("l1\nl2\r\tx"), JSON_ENCODE_ANY), "\"l1\\nl2\\r\\tx\"") == 0,
	    "named escapes");
	test_cond(strcmp(line_of(cli_json_cstr("h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80"), JSON_ENCODE_ANY),
	    "\"h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80\"") == 0, "UTF-8 passes through unescaped");
	test_cond(strcmp(line_of(cli_json_cstr(NULL), JSON_ENCODE_ANY), "\"\"") == 0, "NULL is \"\"");
	test_cond(round_trip("a\0b", 3, "a\0b", 3), "a NUL inside the length is kept");
	test_cond(round_trip("\xff\xc3(\xed\xa0\x80", 6,
	    "\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 16),
	    "each byte that is not UTF-8 (a stray byte, a cut sequence, a surrogate) becomes U+FFFD");
	test_cond(round_trip("ok \xe2\x9c", 5, "ok \xef\xbf\xbd\xef\xbf\xbd", 9), "a sequence cut at the end");
	/* Every byte value alone: ASCII reads back as itself, the rest as U+FFFD. */
	for (int c = 0; c < 256; c++) {
		char in = (char)c;

		test_cond(c < 0x80 ? round_trip(&in, 1, &in, 1) : round_trip(&in, 1, "\xef\xbf\xbd", 3),
		    "byte 0x%02x", c);
	}
	/* A record: compact, in the order set, one line; three-decimal reals short. */
	o = json_object();
	{
		bool bad = false;

		cli_json_put(o, "b", json_integer(1), &bad);
		cli_json_put(o, "a", json_real(12.5), &bad);
		cli_json_put(o, "c", json_real(0.1), &bad);
		cli_json_put(o, "z", NULL, &bad);
		test_cond(bad, "a member without a value (out of memory) is caught");
	}
	test_cond(strcmp(line_of(o, JSON_REAL_PRECISION(15)), "{\"b\":1,\"a\":12.5,\"c\":0.1}") == 0,
	    "compact, in order, reals short");
}

/* Line 3's request from text: its error ("" when none); r kept for the caller's checks. */
static const char *
req(struct batch_req *r, const char *text)
{
	static struct kvc_sampler_params smp;
	struct batch_defaults d = { .max_tokens = 7 };
	int rc;

	smp = kvc_sampler_default_params();
	d.smp = smp;
	/* no engine: every case here is decided before the prompt is tokenized */
	rc = batch_req_parse(r, text, strlen(text), 3, 2, NULL, &d);
	test_cond(rc == KVC_OK, "parse returns OK for '%s': %d", text, rc);
	return r->error ? r->error : "";
}

static void
test_refused(void)
{
	static const char *const bad[] = {
		"", "{\"a\":1} x", "{\"a\":1,}", "{\"a\" 1}", "{\"a\":1 \"b\":2}", "[1 2]",
		"{\"a\":1,\"a\":2}", "\"abc", "\"a\tb\"", "\"a\\qb\"", "\"\\u12G4\"", "\"\\ud800x\"",
		"\"\\udc00\"", "\"\xff\"", "\"a\xc3\"", "01", "+1", ".5", "1.", "1e", "-", "NaN", "tru",
		"nul", "{\"prompt\": \"x\", \"temperature\": 1e400}",
	};
	char deep[200];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct batch_req r;
		const char *e = req(&r, bad[i]);

		test_cond(strncmp(e, "line 3: JSON: ", 14) == 0, "'%s' refused: %s", bad[i], e);
		batch_req_free(&r);
	}
	memset(deep, '[', sizeof deep - 1);
	deep[sizeof deep - 1] = '\0';
	{
		struct batch_req r;
		const char *e = req(&r, deep);

		test_cond(strncmp(e, "line 3: JSON: ", 14) == 0, "unclosed nesting refused: %s", e);
		batch_req_free(&r);
	}
}

static void
test_values(void)
{
	struct batch_req r;
	const char *e;

	/* every option read, then the prompt refused before any tokenizing */
	e = req(&r, "{\"prompt\": 5, \"max_tokens\": 12, \"temperature\": 0.5e1, \"top_p\": 0.9, "
	    "\"top_k\": 3, \"seed\": 9223372036854775807}");
	test_cond(strstr(e, "\"prompt\" must be a string") != NULL, "prompt not a string: %s", e);
	test_cond(r.max_tokens == 12 && r.smp.temp == 5.0f && r.smp.top_p == 0.9f && r.smp.top_k == 3 &&
	    r.smp.seed == (uint64_t)INT64_MAX, "options as written: %d %g %g %d %llu", r.max_tokens,
	    (double)r.smp.temp, (double)r.smp.top_p, r.smp.top_k, (unsigned long long)r.smp.seed);
	batch_req_free(&r);
	e = req(&r, "{\"prompt\": 5, \"seed\": -1}");
	test_cond(r.smp.seed == KVC_SEED_RANDOM && r.max_tokens == 7, "seed -1 is random, max_tokens "
	    "the default: %s", e);
	batch_req_free(&r);

	static const struct {
		const char *in, *part;
	} bad[] = {
		{ "{\"prompt\": \"x\", \"seed\": 9223372036854775808}", "\"seed\" is out of range: from 0 to "
		    "9223372036854775807" },
		{ "{\"prompt\": \"x\", \"seed\": 18446744073709551615}", "\"seed\" is out of range" },
		{ "{\"seed\": -9223372036854775809, \"prompt\": \"x\"}", "\"seed\" is out of range" },
		{ "{\"prompt\": \"x\", \"max_tokens\": 99999999999999999999}", "\"max_tokens\": the number is too big" },
		{ "{\"prompt\": \"x\", \"seed\": -2}", "seed" },
		{ "{\"prompt\": \"x\", \"seed\": 1e3}", "seed: not a number (or 'random'): '1000.0'" },
		{ "{\"prompt\": \"x\", \"max_tokens\": 2.5}", "\"max_tokens\" must be an integer" },
		{ "{\"prompt\": \"x\", \"max_tokens\": 1e2}", "\"max_tokens\" must be an integer" },
		{ "{\"prompt\": \"x\", \"max_tokens\": 12.0}", "\"max_tokens\" must be an integer" },
		{ "{\"prompt\": \"x\", \"temperature\": -1}", "temperature: must be >= 0, not '-1'" },
		{ "{\"prompt\": \"x\", \"temperature\": -0.1}", "not '-0.1'" },
		{ "{\"prompt\": \"x\", \"temperature\": \"hot\"}", "\"temperature\" must be a number, not a string" },
		{ "{\"prompt\": \"x\", \"max_token\": 3}", "unknown key \"max_token\"" },
		{ "{\"prompt\": \"a\\u0000b\"}", "\"prompt\" must be a string (without NUL characters)" },
		{ "{\"prompt\": \"a\", \"messages\": []}", "not both" },
		{ "{\"messages\": [{\"role\": \"robot\", \"content\": \"hi\"}]}", "role \"robot\"" },
		{ "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"x\": 1}]}", "no other keys" },
		{ "{\"messages\": {}}", "non-empty array" },
		{ "[1, 2]", "expected an object, not an array" },
		{ "\"x\"", "expected an object, not a string" },
		{ "true", "expected an object, not a boolean" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		e = req(&r, bad[i].in);
		test_cond(strncmp(e, "line 3: ", 8) == 0 && strstr(e, bad[i].part) != NULL, "%s: %s",
		    bad[i].in, e);
		batch_req_free(&r);
	}
}

int
main(void)
{
	test_written();
	test_refused();
	test_values();
	return test_done();
}
