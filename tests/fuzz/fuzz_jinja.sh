#!/bin/sh
# Runs the chat-template renderer's libFuzzer target briefly (FUZZ_SECONDS,
# default 10) from a seed corpus of the real templates in
# $SHARED_DATA/chat-templates (when there) and a few written here. A crash,
# a sanitizer report, a leak or an input slower than 10 s fails.
. "$top_srcdir/tests/e2e/lib.sh"
fuzz="$top_builddir/tests/fuzz/fuzz_jinja"
[ -x "$fuzz" ] || skip "fuzz target not built (needs clang with libFuzzer)"
C="$TMPD/corpus"
mkdir -p "$C"
if have_shared; then
	for f in "$SHARED_DATA"/chat-templates/llama.cpp/*.jinja; do cp "$f" "$C/"; done
fi
printf '%s' '{% for m in messages %}{{ m.role|upper }}: {{ m.content|trim }}{% if not loop.last %}\n{% endif %}{% endfor %}' >"$C/s1"
printf '%s' '{%- set ns = namespace(a=[]) -%}{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{{ tools|tojson(indent=2) }}{{ messages[1:][::-1]|map(attribute="role")|join(",") }}' >"$C/s2"
printf '%s' "{{ 'a,b'.split(',') }}{{ {'k': [1, 2.5, none]}|dictsort }}{{ raise_exception('x') if false }}" >"$C/s3"
if "$fuzz" -max_total_time="${FUZZ_SECONDS:-10}" -max_len=20000 -timeout=10 -rss_limit_mb=1024 \
    -print_final_stats=1 "$C" >"$TMPD/fuzz.log" 2>&1; then
	ok
else
	fail "fuzzer found a problem"; tail -40 "$TMPD/fuzz.log" >&2
fi
grep -E 'stat::number_of_executed_units|cov:' "$TMPD/fuzz.log" | tail -2
done_testing
