#!/bin/sh
# test_moe.sh (issue 22): mixture-of-experts files through the program:
# kvchat info names the experts (count, used, width, the shared one),
# kvchat bench reports the active parameters and counts the active experts'
# bytes, and generation runs on
# qwen3moe, qwen2moe, a Mixtral-style llama and glm4moe (a dense first
# layer, sigmoid routing, an unrun last block) with F16 and Q8_0 caches,
# greedy, the same text at 1 and 2 threads (the experts' items split
# between threads change no bit).
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: mkmodel not built"; exit 1; }

"$MKMODEL" -o "$TMPD/q3.gguf" --arch qwen3moe --type q4_k_m --quiet --seed 3 || fail "mkmodel qwen3moe"
"$MKMODEL" -o "$TMPD/q2.gguf" --arch qwen2moe --type q8_0 --quiet --seed 4 || fail "mkmodel qwen2moe"
"$MKMODEL" -o "$TMPD/mx.gguf" --arch llama --experts 4 --experts-used 2 --type q6_k --quiet --seed 5 ||
	fail "mkmodel llama with experts"
"$MKMODEL" -o "$TMPD/glm.gguf" --arch glm4moe --type q4_k_m --quiet --seed 6 || fail "mkmodel glm4moe"

out=$("$KVCHAT" info -m "$TMPD/q2.gguf")
check "info: experts line ($out)" sh -c "echo '$out' | grep -q '^experts  *8, 2 used per token, 256 wide; shared expert 512 wide$'"
out=$("$KVCHAT" info -m "$TMPD/mx.gguf")
check "info: Mixtral experts" sh -c "echo '$out' | grep -q '^experts  *4, 2 used per token, 512 wide$'"
out=$("$KVCHAT" info -m "$TMPD/glm.gguf")
check "info: glm4moe experts ($out)" sh -c "echo '$out' | grep -q '^experts  *8, 2 used per token, 256 wide; shared expert 256 wide; first 1 layer dense; sigmoid routing$'"
check "info: glm4moe's unrun block" sh -c "echo '$out' | grep -q '^layers  *4 (the last 1 for multi-token prediction, not run)$'"
out=$("$KVCHAT" bench -m "$TMPD/q3.gguf" -p 8 -n 2 -r 1 --threads 2 2>/dev/null)
check "bench: active parameters ($out)" sh -c "echo '$out' | grep -q 'M active: 2 of 8 experts'"

# bench's bytes per token: the selected experts' share of each expert
# matrix, as a reader of the header that shares no code with kvchat counts
# them (tests/e2e/gguf_weight_bytes.py --per-token); counting every expert
# would show at this resolution. qwen3moe in Q4_K_M, and gpt-oss with MXFP4
# experts and the biases it reads whole.
command -v python3 >/dev/null || fail "python3 is not installed (scripts/deps.sh installs it)"
"$MKMODEL" -o "$TMPD/oss.gguf" --arch gpt-oss --type mxfp4_moe --quiet --seed 8 || fail "mkmodel gpt-oss"
for m in q3 oss; do
	out=$("$KVCHAT" bench -m "$TMPD/$m.gguf" -p 4 -n 1 -r 1 --threads 2 2>/dev/null)
	got=$(echo "$out" | sed -n 's/.*, \([0-9.]*\) MiB read per token).*/\1/p')
	want=$(python3 "$top_srcdir/tests/e2e/gguf_weight_bytes.py" --per-token "$TMPD/$m.gguf" |
	    awk '{ printf "%.1f", $1 / 1048576 }')
	every=$(python3 "$top_srcdir/tests/e2e/gguf_weight_bytes.py" --per-token --used 8 "$TMPD/$m.gguf" |
	    awk '{ printf "%.1f", $1 / 1048576 }')
	check "$m: bench reads $got MiB per token, the header's active experts $want MiB" [ "$got" = "$want" ]
	check "$m: every expert ($every MiB) would differ" [ "$every" != "$want" ]
done

for m in q3 q2 mx glm; do
	for kv in f16 q8_0; do
		a=$("$KVCHAT" generate -m "$TMPD/$m.gguf" -p "the quick brown fox" -n 12 --temp 0 --kv-type $kv --threads 2 2>"$TMPD/err")
		rc=$?
		check "$m $kv: generate exits 0 ($rc: $(cat "$TMPD/err"))" [ $rc -eq 0 ]
		b=$("$KVCHAT" generate -m "$TMPD/$m.gguf" -p "the quick brown fox" -n 12 --temp 0 --kv-type $kv --threads 1 2>/dev/null)
		check "$m $kv: the same text at 1 and 2 threads" [ "$a" = "$b" ]
		check "$m $kv: some text" [ -n "$a" ]
	done
done
done_testing
