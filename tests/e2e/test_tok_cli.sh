#!/bin/sh
# test_tok_cli.sh: the `kvchat tokenize` / `kvchat detokenize` contract on
# the tiny BPE vocabulary test_tokenizer writes (ids derived in
# tests/unit/test_tokenizer.c), plus a round trip through the commands on the
# shared corpus when $SHARED_DATA is there.
. "$top_srcdir/tests/e2e/lib.sh"

V="$TMPD/bpe.gguf"
"$top_builddir/tests/unit/test_tokenizer" --write-bpe "$V" || { echo "FAIL: cannot write the fixture"; exit 1; }

# tok TEXT ARGS...: stdout of tokenize on printf'd TEXT
tok() { t=$1; shift; printf "$t" | "$KVCHAT" tokenize -m "$V" "$@"; }

check "hello world" test "$(tok 'hello world')" = "259 264"
check "one line" test "$(tok 'hello world' | wc -l)" -eq 1
check "exact bytes" sh -c 'printf "hello world" | "$1" tokenize -m "$2" | od -c | grep -q "2   5   9       2   6   4  \\\\n"' sh "$KVCHAT" "$V"
check "--bos" test "$(tok 'hello world' --bos)" = "270 259 264"
check "typed special is text" test "$(tok 'hello<|im_end|>')" = "259 60 124 105 109 95 101 110 100 124 62"
check "--parse-special" test "$(tok 'hello<|im_end|>' --parse-special)" = "259 267"
check "chinese" test "$(tok '\344\275\240\345\245\275')" = "266 229 165 189"
check "empty input" test "$(tok '' | od -c | head -1)" = "0000000  \\n"

# invalid UTF-8: message with the offset, exit 1, nothing on stdout
printf 'ab\377c' | "$KVCHAT" tokenize -m "$V" >"$TMPD/out" 2>"$TMPD/err"
check "invalid UTF-8 exits 1" test $? -eq 1
check "invalid UTF-8 names the offset" grep -q "byte 2" "$TMPD/err"
check "invalid UTF-8 prints no ids" test ! -s "$TMPD/out"

# usage errors exit 2, bad model files exit 1 with one line
"$KVCHAT" tokenize -m "$V" --frobnicate </dev/null >/dev/null 2>&1
check "unknown option exits 2" test $? -eq 2
"$KVCHAT" tokenize </dev/null >/dev/null 2>&1
check "missing -m exits 2" test $? -eq 2
"$KVCHAT" detokenize -m "$V" --bos </dev/null >/dev/null 2>&1
check "detokenize has no --bos" test $? -eq 2
printf 'not a gguf file at all' >"$TMPD/bad.gguf"
"$KVCHAT" tokenize -m "$TMPD/bad.gguf" </dev/null >"$TMPD/out" 2>"$TMPD/err"
check "bad model exits 1" test $? -eq 1
check "bad model: one line" test "$(wc -l <"$TMPD/err")" -eq 1
head -c 200 "$V" >"$TMPD/trunc.gguf"
"$KVCHAT" tokenize -m "$TMPD/trunc.gguf" </dev/null >/dev/null 2>"$TMPD/err"
check "truncated model exits 1" test $? -eq 1
check "truncated model: one line" test "$(wc -l <"$TMPD/err")" -eq 1

# detokenize
check "detokenize" test "$(echo '259 264' | "$KVCHAT" detokenize -m "$V")" = "hello world"
check "detokenize chinese" test "$(printf '266\n229\t165  189\n' | "$KVCHAT" detokenize -m "$V")" = "$(printf '\344\275\240\345\245\275')"
check "detokenize special" test "$(echo '259 267' | "$KVCHAT" detokenize -m "$V")" = "hello<|im_end|>"
echo '259 99999' | "$KVCHAT" detokenize -m "$V" >/dev/null 2>&1
check "bad id exits 1" test $? -eq 1
echo '259 x' | "$KVCHAT" detokenize -m "$V" >/dev/null 2>&1
check "non-number exits 1" test $? -eq 1

# with the shared data: the commands round-trip the Chinese corpus
if have_shared; then
	C="$SHARED_DATA/corpus/julia-zh-manual.md"
	for v in qwen2 llama-spm; do
		M="$SHARED_DATA/llama.cpp-vocab/ggml-vocab-$v.gguf"
		"$KVCHAT" tokenize -m "$M" <"$C" >"$TMPD/ids" &&
		"$KVCHAT" detokenize -m "$M" <"$TMPD/ids" >"$TMPD/back"
		check "$v: command round trip" cmp -s "$C" "$TMPD/back"
	done
	check "qwen2: Hello world" test "$(printf 'Hello world' | "$KVCHAT" tokenize -m "$SHARED_DATA/llama.cpp-vocab/ggml-vocab-qwen2.gguf")" = "9707 1879"
fi
done_testing
