#!/bin/sh
# test_bench_bytes.sh (issue 25, item 8): kvchat bench's bytes read per
# token count the output matrix whole, tied to the embedding or not (a tied
# one is read for every token like any layer matrix), and the embedding
# only as rows: a tied file's count is then every tensor byte in it, an
# untied one's all but the embedding's. Checked against an independent GGUF
# reader (tests/e2e/gguf_weight_bytes.py), on tiny F32 fixtures: qwen2
# (tied) and llama (untied), whose embedding is n_vocab x n_embd x 4 bytes.
. "$top_srcdir/tests/e2e/lib.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 is not installed (scripts/deps.sh installs it)"; exit 1; }

for arch in qwen2 llama; do
	M="$TMPD/$arch.gguf"
	"$MKMODEL" -o "$M" --preset tiny --arch "$arch" --type f32 --vocab bpe --ctx 512 --seed 5 \
	    >"$TMPD/mk.txt" 2>&1 || { echo "FAIL: mkmodel"; exit 1; }
	total=$(python3 "$top_srcdir/tests/e2e/gguf_weight_bytes.py" "$M")
	vocab=$(sed -n 's/.*n_vocab \([0-9]*\).*/\1/p' "$TMPD/mk.txt")
	embd=$(sed -n 's/.*n_embd \([0-9]*\).*/\1/p' "$TMPD/mk.txt")
	if [ "$arch" = qwen2 ]; then want=$total; else want=$((total - vocab * embd * 4)); fi
	kvrun "$arch: bench" "$TMPD/err" bench -m "$M" --device cpu -p 4 -n 2 -r 1 >"$TMPD/out"
	got=$(sed -n 's/.*, \([0-9.]*\) MiB read per token).*/\1/p' "$TMPD/out")
	want_mib=$(awk -v b="$want" 'BEGIN { printf "%.1f", b / 1048576 }')
	echo "$arch: bench says $got MiB per token, the file's tensors give $want_mib MiB"
	check "$arch: bench's bytes per token ($got MiB) = $want_mib MiB" [ "$got" = "$want_mib" ]
	# leaving the tied output out (the old count) must show at this resolution
	if [ "$arch" = qwen2 ]; then
		old=$(awk -v b="$((total - vocab * embd * 4))" 'BEGIN { printf "%.1f", b / 1048576 }')
		check "the count without the tied output ($old MiB) differs" [ "$old" != "$want_mib" ]
	fi
done
done_testing
