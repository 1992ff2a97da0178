/*
 * test_jinja.c: the chat-template renderer on its own: the jinja2 semantics
 * the real templates lean on (each expected string is what Python's jinja2
 * 3.1 renders under transformers' settings), errors naming line and column,
 * and hostile templates (deep recursion, huge loops, huge output, deep
 * nesting) refused with a message instead of a crash or a hang. The
 * byte-for-byte comparison over the real templates is
 * tests/e2e/test_jinja_ref.sh.
 */
#include "test.h"

#include "core/kvc.h"
#include "jinja/jinja.h"

/* Renders src with messages and extra variables (a JSON object text). */
static int
render(const char *src, const char *vars_json, const struct jinja_limits *lim, struct kvc_buf *out,
       char *err, size_t errlen)
{
	struct jinja_tmpl *t;
	json_t *j = NULL, *v;
	json_error_t je;
	const char *key;
	struct jinja_var vars[16];
	size_t n = 0;
	int rc = jinja_parse(src, strlen(src), lim, &t, err, errlen);

	out->n = 0;
	if (rc != 0)
		return rc;
	if (vars_json) {
		j = json_loads(vars_json, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
		if (j == NULL) {
			snprintf(err, errlen, "JSON: %s", je.text);
			jinja_free(t);
			return -100;
		}
		json_object_foreach(j, key, v)
			if (n < 16)
				vars[n++] = (struct jinja_var){ key, v };
	}
	rc = jinja_render(t, vars, n, 0, out, err, errlen);
	if (out->p)
		out->p[out->n] = '\0';
	json_decref(j);
	jinja_free(t);
	return rc;
}

static void
expect(const char *src, const char *vars, const char *want)
{
	struct kvc_buf out = {0};
	char err[512] = "";
	int rc = render(src, vars, NULL, &out, err, sizeof err);

	test_cond(rc == 0 && out.n == strlen(want) && memcmp(out.p, want, out.n) == 0,
		  "%s -> rc %d [%s] err '%s', want [%s]", src, rc, rc == 0 && out.p ? out.p : "", err, want);
	kvc_buf_free(&out);
}

static void
expect_fail(const char *src, const char *vars, const struct jinja_limits *lim, int code, const char *msg)
{
	struct kvc_buf out = {0};
	char err[512] = "";
	int rc = render(src, vars, lim, &out, err, sizeof err);

	test_cond(rc == code && strstr(err, msg) != NULL, "%.60s -> rc %d err '%s', want %d '%s'",
		  src, rc, err, code, msg);
	kvc_buf_free(&out);
}

static void
test_semantics(void)
{
	/* trim_blocks, lstrip_blocks, "-" and the dropped final newline */
	expect("  {% if true %}\n  a\n  {% endif %}\nb\n", NULL, "  a\nb");
	expect("x  {%- if true -%}  y  {%- endif %}", NULL, "xy");
	expect("{# c #}\n{{ 1 }}", NULL, "1");
	expect("a\r\nb", NULL, "a\nb");
	/* Python's str() of values, and arithmetic */
	expect("{{ {'a': 1, 'b': [1, 2.5, \"x'y\", none, true]} }}", NULL,
	       "{'a': 1, 'b': [1, 2.5, \"x'y\", None, True]}");
	expect("{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ 10 / 4 }}|{{ 7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}", NULL,
	       "1e+20|0.30000000000000004|2.5|3|2|1024");
	expect("{{ 'x' ~ none ~ 1.0 ~ true }}", NULL, "xNone1.0True");
	/* scopes: a set inside a loop does not outlive its iteration; macros see the top level */
	expect("{% set x = 1 %}{% for i in [1, 2] %}[{{ x }}]{% set x = x + 1 %}{% endfor %}{{ x }}",
	       NULL, "[1][1]1");
	expect("{% macro f(a, b='d') %}{{ a }}{{ b }}{{ y }}{% endmacro %}{% set y = 3 %}{{ f(1) }}{{ f(1, b=2) }}",
	       NULL, "1d3123");
	expect("{% set ns = namespace(n=0) %}{% for i in range(5) if i is odd %}{% set ns.n = ns.n + i %}"
	       "{{ loop.index }}/{{ loop.length }}{% endfor %}={{ ns.n }}", NULL, "1/22/2=4");
	expect("{% for i in [1, 2, 3] %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}"
	       "{% if loop.last %}!{% endif %}{% endfor %}", NULL, "13!");
	expect("{% for i in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
	/* strings: code points, slices, methods */
	expect("{{ '北京abc'[::-1] }}{{ '北京'|length }}{{ 'a b  c'.split() }}{{ ' x\\n'.strip() }}",
	       NULL, "cba京北2['a', 'b', 'c']x");
	expect("{{ '<think>r</think>\\n\\nc'.split('</think>')[-1].lstrip('\\n') }}", NULL, "c");
	expect("{{ 'abc'.startswith(('x', 'a')) }}{{ 'a-b'.replace('-', '+') }}{{ 'ab'|upper }}",
	       NULL, "Truea+bAB");
	/* filters and tests the templates use */
	expect("{{ messages|selectattr('role', 'equalto', 'user')|list|length }}"
	       "{{ messages[0].content|tojson }}{{ messages|map(attribute='role')|join(',') }}",
	       "{\"messages\": [{\"role\": \"user\", \"content\": \"é\\n\\\"\"}, {\"role\": \"assistant\"}]}",
	       "1\"é\\n\\\"\"user,assistant");
	expect("{{ {'b': 1, 'a': [1, {}]}|tojson(indent=2) }}", NULL,
	       "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {}\n  ]\n}");
	expect("{{ x is defined }}{{ x is none }}{{ none is none }}{{ [] is sequence }}{{ {} is mapping }}"
	       "{{ 'a' is string }}{{ x|default('d') }}{{ x|length }}", NULL,
	       "FalseFalseTrueTrueTrueTrued0");
	expect("{% for k, v in {'b': 1, 'A': 2}|dictsort %}{{ k }}={{ v }};{% endfor %}", NULL, "A=2;b=1;");
	expect("{{ m.get('x', 5) }}{% for k, v in m.items() %}{{ k }}{{ v }}{% endfor %}",
	       "{\"m\": {\"a\": 1}}", "5a1");
	expect("{{ strftime_now('%Y-%m-%d') }}", NULL, "1970-01-01");
}

static void
test_errors(void)
{
	/* syntax errors name line and column */
	expect_fail("ok\n{% if %}", NULL, NULL, KVC_EFORMAT, "line 2 col 7");
	expect_fail("{% for x in y %}", NULL, NULL, KVC_EFORMAT, "missing {% endfor %}");
	expect_fail("{{ 'abc }}", NULL, NULL, KVC_EFORMAT, "not closed");
	expect_fail("{% raw %}x{% endraw %}", NULL, NULL, KVC_EUNSUPPORTED, "'raw' is not supported");
	expect_fail("{% break %}", NULL, NULL, KVC_EFORMAT, "outside a loop");
	/* runtime errors name line and column too */
	expect_fail("\n\n  {{ x.y }}", NULL, NULL, KVC_EFORMAT, "line 3 col 7: 'x' is undefined");
	expect_fail("{{ 1 + 'a' }}", NULL, NULL, KVC_EFORMAT, "unsupported operand");
	expect_fail("{{ x|frobnicate }}", NULL, NULL, KVC_EUNSUPPORTED, "no filter named 'frobnicate'");
	expect_fail("{{ raise_exception('roles must alternate') }}", NULL, NULL, KVC_EINVAL,
		    "roles must alternate");
}

static void
test_hostile(void)
{
	struct jinja_limits lim = jinja_default_limits();
	char deep[20000];

	lim.max_steps = 200000;
	lim.max_output = 1 << 20;
	lim.max_memory = 16 << 20;
	/* unbounded recursion */
	expect_fail("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &lim, KVC_ERANGE,
		    "macro calls nested more than");
	/* a huge loop: stopped by the step bound */
	expect_fail("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
		    NULL, &lim, KVC_ERANGE, "steps");
	/* huge output, and a string doubled until it is huge */
	expect_fail("{% for i in range(100000) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}",
		    NULL, &lim, KVC_ERANGE, "output is over");
	expect_fail("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
		    "{% endfor %}", NULL, &lim, KVC_ERANGE, "");
	expect_fail("{{ 'x' * 1000000000 }}", NULL, &lim, KVC_ERANGE, "");
	expect_fail("{{ range(1000000000)|length }}", NULL, &lim, KVC_ERANGE, "range too big");
	/* nesting deep enough to overflow a recursive parser's stack */
	memset(deep, '-', sizeof deep);
	memcpy(deep, "{{ ", 3);
	memcpy(deep + sizeof deep - 6, "1 }}", 5);
	expect_fail(deep, NULL, &lim, KVC_ERANGE, "nested more than");
	for (size_t i = 0; i + 8 < sizeof deep; i += 8)
		memcpy(deep + i, "{% if 1", 7), deep[i + 7] = '%';
	deep[sizeof deep - 1] = '\0';
	expect_fail(deep, NULL, &lim, KVC_EFORMAT, "");
	{
		/* a well-formed 10000-deep if-nest: bounded as well */
		struct kvc_buf b = {0};

		for (int i = 0; i < 10000; i++)
			kvc_buf_printf(&b, "{%% if 1 %%}");
		for (int i = 0; i < 10000; i++)
			kvc_buf_printf(&b, "{%% endif %%}");
		expect_fail(b.p, NULL, &lim, KVC_ERANGE, "nested more than");
		kvc_buf_free(&b);
	}
}

int
main(void)
{
	test_semantics();
	test_errors();
	test_hostile();
	return test_done();
}
