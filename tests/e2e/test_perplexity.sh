#!/bin/sh
# test_perplexity.sh (issue 12): kvchat perplexity reports exp(mean NLL)
# over llama-perplexity's positions, equal to what the float64 reference
# forward gives over the same positions (tests/fixtures/refppl, sharing no
# code with kvchat's forward or scoring): a qwen2 fixture (no BOS) and a
# gemma3 fixture (SPM, BOS put in place of each chunk's first token,
# sliding windows shorter than a chunk), qwen3moe, qwen2moe, gpt-oss and
# glm4moe fixtures (experts; gpt-oss's sinks and windows; glm4moe's dense
# layer, sigmoid routing and unrun last block), a YaRN-scaled qwen3. F32 weights and cache: the logits
# agree to ~1e-7 relative (test_forward), so the perplexities to 1e-4.
. "$top_srcdir/tests/e2e/lib.sh"
REFPPL="$top_builddir/tests/fixtures/refppl"
[ -x "$MKMODEL" ] && [ -x "$REFPPL" ] || { echo "FAIL: mkmodel/refppl not built"; exit 1; }

i=0
while [ $i -lt 40 ]; do
	echo "Line $i: the quick brown fox jumps over the lazy dog, and then it rests ($((i * 7 % 13)))."
	echo "第${i}行：今天天气很好，我们去公园散步。"
	i=$((i + 1))
done >"$TMPD/text.txt"

# Both streams into one file, as on a terminal: the first chunk's timing
# line comes before the estimates, not inside their line (issue 26,
# newcomer 5).
"$MKMODEL" -o "$TMPD/both.gguf" --arch qwen2 --type f32 --quiet --seed 5 || fail "mkmodel both"
"$KVCHAT" perplexity -m "$TMPD/both.gguf" -f "$TMPD/text.txt" -c 64 --chunks 3 --threads 2 \
    >"$TMPD/both.txt" 2>&1
check "the estimates' line holds no other message" sh -c "! grep '^\[1\]' '$TMPD/both.txt' | grep -q kvchat:"
check "... and it is whole" grep -q '^\[1\][0-9.]* +/- [0-9.]*, \[2\].*\[3\]' "$TMPD/both.txt"

# one ARCH BOSFLAG [MKMODEL OPTIONS]: build, score with kvchat and the reference, compare.
one() {
	M="$TMPD/$1.gguf"
	a=$1 b=$2
	shift 2
	"$MKMODEL" -o "$M" --arch "$a" --type f32 --quiet --seed 5 --swa 8 "$@" || { fail "mkmodel $a"; return; }
	set -- "$a" "$b"
	out=$("$KVCHAT" perplexity -m "$M" -f "$TMPD/text.txt" -c 64 --chunks 3 --kv-type f32 --threads 2 2>"$TMPD/err")
	rc=$?
	check "$1: kvchat perplexity exits 0 ($rc)" [ $rc -eq 0 ]
	[ $rc -eq 0 ] || { cat "$TMPD/err" >&2; return; }
	echo "$out"
	final=$(echo "$out" | sed -n 's/^Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\)$/\1 \2/p')
	check "$1: a final line ($final)" [ -n "$final" ]
	check "$1: three running estimates" [ "$(echo "$out" | grep -o '\[[0-9]\]' | wc -l)" -eq 3 ]
	if [ "$2" = bos ]; then
		bos=$("$KVCHAT" info -m "$M" | sed -n 's/^  bos  *\([0-9]*\) .*/\1/p')
		ids=$("$KVCHAT" tokenize -m "$M" --bos <"$TMPD/text.txt")
	else
		bos=-1
		ids=$("$KVCHAT" tokenize -m "$M" <"$TMPD/text.txt")
	fi
	ref=$(echo "$ids" | "$REFPPL" "$M" 64 3 "$bos") || { fail "$1: refppl"; return; }
	echo "$1: kvchat $final, reference $ref (bos $bos)"
	python3 - "$final" "$ref" <<'PY' || fail "$1: kvchat ($final) differs from the reference ($ref)"
import sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
sys.exit(0 if abs(a[0] - b[0]) <= 1e-4 * b[0] and abs(a[1] - b[1]) <= 1e-3 * b[1] + 1e-4 else 1)
PY
	ok
}
one qwen2 nobos
one gemma3 bos
# experts: refppl routes and sums them on its own (src/model/model_experts.c's defaults)
one qwen3moe nobos
one qwen2moe nobos
one glm4moe nobos
# gpt-oss: sinks, biases, the biased router, windows of 8 in the even layers, YaRN 32 over 4096;
# qwen3 with YaRN 4 over an original context of 64 (most of the dimensions interpolated)
one gpt-oss nobos
one qwen3 nobos --yarn 4 --yarn-orig 64

# Too short a text is refused with the count, as llama-perplexity does.
head -n 2 "$TMPD/text.txt" >"$TMPD/short.txt"
"$KVCHAT" perplexity -m "$TMPD/qwen2.gguf" -f "$TMPD/short.txt" -c 64 >/dev/null 2>"$TMPD/err"
rc=$?
check "short text refused (rc=$rc)" [ $rc -eq 1 ]
check "short text: says how many tokens it needs" grep -q "at least 128" "$TMPD/err"
done_testing
