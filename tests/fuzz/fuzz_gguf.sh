#!/bin/sh
# Runs the GGUF reader's libFuzzer target briefly (FUZZ_SECONDS, default 20)
# from a seed corpus the writer makes. A crash or sanitizer report fails.
. "$top_srcdir/tests/e2e/lib.sh"
fuzz="$top_builddir/tests/fuzz/fuzz_gguf"
[ -x "$fuzz" ] || skip "fuzz target not built (needs clang with libFuzzer)"
mkdir -p "$TMPD/corpus"
"$top_builddir/tests/unit/test_gguf" --write-seeds "$TMPD/corpus" >/dev/null || fail "writing seeds"
n=$(ls "$TMPD/corpus" | wc -l)
check "seed corpus written" [ "$n" -ge 3 ]
if "$fuzz" -max_total_time="${FUZZ_SECONDS:-20}" -max_len=4096 -rss_limit_mb=1024 \
    -print_final_stats=1 "$TMPD/corpus" >"$TMPD/fuzz.log" 2>&1; then
	ok
else
	fail "fuzzer found a problem"; tail -40 "$TMPD/fuzz.log" >&2
fi
grep -E 'stat::number_of_executed_units|cov:' "$TMPD/fuzz.log" | tail -2
done_testing
