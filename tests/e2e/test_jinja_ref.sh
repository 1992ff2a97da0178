#!/bin/sh
# test_jinja_ref.sh (issue 23): every real chat template in
# $SHARED_DATA/chat-templates/llama.cpp x the conversations of
# tests/fixtures/jinja/convs.json (system or not, multi-turn, Chinese and
# English, reasoning_content and inline <think>, awkward text, tool calls)
# x add_generation_prompt on and off, enable_thinking absent/on/off and
# reasoning_effort low/high, rendered by `kvchat template` and by Python's
# jinja2 as transformers configures it: byte for byte the same, or the
# first differing byte is named (tests/e2e/jinja_compare.py).
. "$top_srcdir/tests/e2e/lib.sh"
have_shared || skip "shared test data not found (SHARED_DATA=${SHARED_DATA:-unset})"
command -v python3 >/dev/null 2>&1 || skip "python3 not installed"
python3 -c 'import jinja2' 2>/dev/null || skip "Python's jinja2 not installed (Debian: python3-jinja2)"
F="$top_srcdir/tests/fixtures/jinja"
python3 "$top_srcdir/tests/e2e/jinja_compare.py" "$SHARED_DATA/chat-templates/llama.cpp" \
    "$F/convs.json" "$F/tools.json" -- "$KVCHAT" template >"$TMPD/cmp.txt" 2>&1
rc=$?
cat "$TMPD/cmp.txt"
check "every render byte-identical to jinja2" [ "$rc" -eq 0 ]
check "all 20 templates compared" grep -q "^1280 of 1280 renders" "$TMPD/cmp.txt"
done_testing
