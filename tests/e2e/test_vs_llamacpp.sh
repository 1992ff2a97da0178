#!/bin/sh
# test_vs_llamacpp.sh: bench/vs-llamacpp.sh (issue 11) against a stand-in
# llama-bench that prints llama-bench's markdown table with known figures:
# the runs alternate kvchat (prefill, then decode from an empty cache) /
# llama-bench (flash attention off and on, the faster row kept) with the
# same file, sizes and threads; the table holds the medians, kvchat /
# llama.cpp ratios and kvchat's kernel table; a llama-bench that fails
# shows as "fail" and "-", not as a number.
. "$top_srcdir/tests/e2e/lib.sh"
S="$top_srcdir/bench/vs-llamacpp.sh"
M=$TMPD/tiny.gguf
"$MKMODEL" -o "$M" --quiet || { fail "mkmodel"; done_testing; exit 1; }
SEQ=$TMPD/seq
export SEQ
# kvchat through a wrapper that logs its turn in the same sequence file
cat > "$TMPD/kv" <<EOF2
#!/bin/sh
echo "kvchat \$*" >> "$SEQ"
exec "$KVCHAT" "\$@"
EOF2
# pp: 100, 300, 200 over three rounds (median 200); tg always 50 with
# -fa 0 and 60 with -fa 1 (the faster, 60, is llama.cpp's); the -fa 1 pp
# row is slower and must not be taken
cat > "$TMPD/lb" <<'EOF2'
#!/bin/sh
echo "llama $*" >> "$SEQ"
n=$(grep -c '^llama' "$SEQ")
pp=$(echo "100.00 300.00 200.00" | cut -d' ' -f$(( (n - 1) % 3 + 1 )))
echo "| model | size | params | backend | threads | test | t/s |"
echo "| --- | ---: | ---: | --- | ---: | ---: | ---: |"
echo "| qwen2 ?B F32 | 1.00 MiB | 0.10 M | CPU | 1 | pp16 | $pp ± 1.50 |"
echo "| qwen2 ?B F32 | 1.00 MiB | 0.10 M | CPU | 1 | tg4 | 50.00 ± 0.00 |"
echo "| qwen2 ?B F32 | 1.00 MiB | 0.10 M | CPU | 1 | pp16 | 10.00 ± 1.50 |"
echo "| qwen2 ?B F32 | 1.00 MiB | 0.10 M | CPU | 1 | tg4 | 60.00 ± 0.00 |"
echo
echo "build: unknown (0)"
EOF2
printf '#!/bin/sh\necho "llama $*" >> "$SEQ"\nexit 1\n' > "$TMPD/bad"
chmod +x "$TMPD/kv" "$TMPD/lb" "$TMPD/bad"

KVCHAT="$TMPD/kv" VS_THREADS="1 2" VS_ROUNDS=3 VS_P=16 VS_N=4 VS_REPS=1 \
	sh "$S" "$TMPD/lb" "$M" > "$TMPD/out" 2> "$TMPD/err"
check "script exits 0" [ $? -eq 0 ]
cat "$TMPD/out"
check "two rows, one per thread count" [ "$(grep -c '^| tiny.gguf |' "$TMPD/out")" -eq 2 ]
# alternation: kvchat (prefill, decode), llama ... 6 rounds, 18 runs in all
check "runs alternate" [ "$(cut -d' ' -f1 "$SEQ" | tr '\n' ' ')" = \
	"$(for r in 1 2 3 4 5 6; do printf 'kvchat kvchat llama '; done)" ]
check "llama-bench arguments" [ "$(grep '^llama' "$SEQ" | sed 's/ -m [^ ]*//' | LC_ALL=C sort -u)" = \
	"$(printf 'llama -fa 0,1 -p 16 -n 4 -r 1 -t 1 -o md\nllama -fa 0,1 -p 16 -n 4 -r 1 -t 2 -o md\n' | LC_ALL=C sort -u)" ]
check "kvchat arguments: prefill, then decode from an empty cache" \
	[ "$(grep '^kvchat' "$SEQ" | sed 's/ -m [^ ]*//' | LC_ALL=C sort -u)" = \
	"$(printf 'kvchat bench -p 16 -n 0 -r 1 --threads 1\nkvchat bench -p 0 -n 4 -r 1 --threads 1\nkvchat bench -p 16 -n 0 -r 1 --threads 2\nkvchat bench -p 0 -n 4 -r 1 --threads 2\n' | LC_ALL=C sort -u)" ]
row=$(grep '^| tiny.gguf | 1 |' "$TMPD/out")
kp=$(echo "$row" | awk -F'|' '{ gsub(/ /, "", $4); print $4 }')
check "llama.cpp prefill is the median of 100, 300, 200" [ "$(echo "$row" | awk -F'|' '{ gsub(/ /, "", $5); print $5 }')" = 200.00 ]
check "llama.cpp decode is the faster -fa row" [ "$(echo "$row" | awk -F'|' '{ gsub(/ /, "", $8); print $8 }')" = 60.00 ]
check "the kernel table kvchat ran is named" [ -n "$(echo "$row" | awk -F'|' '{ gsub(/ /, "", $10); if ($10 ~ /^[a-z0-9]+$/) print $10 }')" ]
want=$(awk -v a="$kp" 'BEGIN { printf "%.2fx", a / 200 }')
check "prefill ratio is kvchat / llama.cpp ($kp / 200 = $want)" \
	[ "$(echo "$row" | awk -F'|' '{ gsub(/ /, "", $6); print $6 }')" = "$want" ]

: > "$SEQ"
KVCHAT="$TMPD/kv" VS_THREADS=1 VS_ROUNDS=1 VS_P=16 VS_N=4 VS_REPS=1 \
	sh "$S" "$TMPD/bad" "$M" > "$TMPD/out2" 2>&1
check "a failing llama-bench shows as fail" grep -q '^| tiny.gguf | 1 | [0-9.]* | fail | - |' "$TMPD/out2"
# a base build in the same alternation: kvchat, llama, base
: > "$SEQ"
KVCHAT="$TMPD/kv" KVCHAT_BASE="$TMPD/kv" VS_THREADS=1 VS_ROUNDS=2 VS_P=16 VS_N=4 VS_REPS=1 \
	sh "$S" "$TMPD/lb" "$M" > "$TMPD/out3" 2>&1
check "base runs alternate" [ "$(cut -d' ' -f1 "$SEQ" | tr '\n' ' ')" = \
	"kvchat kvchat llama kvchat kvchat kvchat kvchat llama kvchat kvchat " ]
check "base columns" grep -q '^| tiny.gguf | 1 | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]*x | [0-9.]*x | [0-9.]* | [0-9.]* | 60.00 | [0-9.]*x | [0-9.]*x | [a-z0-9]* |$' "$TMPD/out3"
sh "$S" "$TMPD/lb" > /dev/null 2>&1
check "usage error without a model" [ $? -eq 2 ]
KVCHAT="$TMPD/kv" sh "$S" "$TMPD/lb" "$TMPD/missing.gguf" > /dev/null 2>&1
check "unreadable model refused" [ $? -eq 2 ]
done_testing
