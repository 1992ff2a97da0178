#!/bin/sh
# test_llama2c.sh: real trained llama2.c models, converted with convert-llama2c,
# say what they are known to say (greedy from BOS), per ../shared/data/SOURCES.md.
. "$top_srcdir/tests/e2e/lib.sh"
have_shared || skip "shared test data not found (SHARED_DATA=${SHARED_DATA:-unset})"
command -v python3 >/dev/null 2>&1 || skip "python3 is needed to read the reference JSON"
D=$SHARED_DATA/llama2c

# json FILE FIELD: print a field of a *.greedy.json (ids space-separated, text as is)
json() {
	python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))[sys.argv[2]]
sys.stdout.write(" ".join(map(str, v)) + "\n" if isinstance(v, list) else str(v))' "$1" "$2"
}

# aidreams260K: a real model with its own tokenizer; text and ids must match exactly.
J=$D/aidreams260K/aidreams260K.greedy.json
check "convert aidreams260K" "$KVCHAT" convert-llama2c "$D/aidreams260K/aidreams260K.bin" \
	"$D/aidreams260K/tok512.bin" -o "$TMPD/aid.gguf"
json "$J" generated_ids >"$TMPD/aid.ids.expect"
json "$J" decoded_text >"$TMPD/aid.text.expect"
n=$(wc -w <"$TMPD/aid.ids.expect")
[ "$(json "$J" start_token)" = 1 ] && [ "$(json "$J" start_pos)" = 0 ] || fail "aidreams reference does not start from BOS at 0"
check "aidreams greedy ids" "$KVCHAT" generate -m "$TMPD/aid.gguf" --temp 0 -n "$n" --ids --threads 1 \
	>"$TMPD/aid.ids" 2>"$TMPD/aid.err"
check "aidreams ids equal the reference ($n ids)" cmp "$TMPD/aid.ids" "$TMPD/aid.ids.expect"
check "aidreams greedy text" "$KVCHAT" generate -m "$TMPD/aid.gguf" --temp 0 -n "$n" \
	>"$TMPD/aid.text" 2>"$TMPD/aid.err"
check "aidreams text equals the reference" cmp "$TMPD/aid.text" "$TMPD/aid.text.expect"
check "timings on stderr" grep -q "tok/s" "$TMPD/aid.err"

# stories260K: grouped-query attention; ids only (its own tokenizer is not
# available). The reference is a float32 forward, so the cache is F32 here:
# at step 38 the top two logits differ by only 0.003 (416: 5.6203, 417:
# 5.6173), and an F16 cache's rounding flips that near-tie.
J=$D/stories260K.greedy.json
check "convert stories260K" "$KVCHAT" convert-llama2c "$D/stories260K.bin" \
	"$D/aidreams260K/tok512.bin" -o "$TMPD/st.gguf"
json "$J" generated_ids >"$TMPD/st.ids.expect"
n=$(wc -w <"$TMPD/st.ids.expect")
check "stories greedy ids, f32 cache" "$KVCHAT" generate -m "$TMPD/st.gguf" --temp 0 -n "$n" --ids \
	--kv-type f32 >"$TMPD/st.ids" 2>"$TMPD/st.err"
check "stories ids equal the reference ($n ids)" cmp "$TMPD/st.ids" "$TMPD/st.ids.expect"
check "stories greedy ids, f16 cache" "$KVCHAT" generate -m "$TMPD/st.gguf" --temp 0 -n 37 --ids \
	>"$TMPD/st16.ids" 2>"$TMPD/st.err"
cut -d' ' -f1-37 "$TMPD/st.ids.expect" >"$TMPD/st16.ids.expect"
check "stories ids (f16 cache) equal the reference up to the near-tie" cmp "$TMPD/st16.ids" "$TMPD/st16.ids.expect"

# Broken inputs are refused with a clear message.
head -c 100000 "$D/stories260K.bin" >"$TMPD/trunc.bin"
if "$KVCHAT" convert-llama2c "$TMPD/trunc.bin" "$D/aidreams260K/tok512.bin" -o "$TMPD/x.gguf" 2>"$TMPD/err"; then
	fail "truncated checkpoint accepted"
else
	check "truncated checkpoint: message" grep -q "truncated.*needs 1056540 bytes, the file has 100000" "$TMPD/err"
fi
if "$KVCHAT" convert-llama2c "$D/stories260K.bin" "$D/tokenizer.bin" -o "$TMPD/x.gguf" 2>"$TMPD/err"; then
	fail "32000-token tokenizer accepted for a 512-token checkpoint"
else
	check "mismatched tokenizer: message" grep -q "more than the 512 tokens" "$TMPD/err"
fi
check "no output left behind" test ! -e "$TMPD/x.gguf"
done_testing
