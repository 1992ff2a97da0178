#!/bin/sh
# test_kernels.sh (issue 21): KVCHAT_KERNELS forces a CPU kernel table.
# Every table this CPU runs gives each position the same logits whether it
# was decoded alone or computed inside a prefill (greedy tokens and their
# log-probs, bitwise as printed), on an int8-kernel (Q4_K_M) and a float
# (F16) fixture; --version and bench name the table; a name that is no
# table, another architecture's table (neon on x86-64) and (on a CPU
# without AVX-512 or SDOT) a table the CPU cannot run are refused before
# anything runs.
# avx2vnni's output is avx2's, byte for byte.
. "$top_srcdir/tests/e2e/lib.sh"

best=$("$KVCHAT" --version | sed -n 's/^CPU kernels: //p')
check "--version names the table ($best)" [ -n "$best" ]

for ty in q4_k_m f16; do
	"$MKMODEL" -o "$TMPD/$ty.gguf" --arch qwen2 --type "$ty" --vocab bpe --n-embd 256 --n-layer 2 \
	    --n-head 4 --n-head-kv 2 --n-ff 512 --seed 3 --quiet || { echo "FAIL: mkmodel"; exit 1; }
done
P=11,12,13,14,15,16,17,18,19,20,21,22
# this program's tables, as its messages list them
case $(uname -m) in
x86_64) tables="scalar, avx2, avx2vnni, avx512" ;;
aarch64) tables="scalar, neon, neondot" ;;
*) tables="scalar" ;;
esac
ran=0 ran_best=no
for k in scalar avx2 avx2vnni avx512 neon neondot; do
	case ", $tables," in *", $k,"*) ;; *) continue ;; esac
	if ! KVCHAT_KERNELS=$k "$KVCHAT" --version >"$TMPD/v" 2>"$TMPD/e"; then
		# refused: only a table this CPU lacks, by name
		check "$k refused by name" grep -q "kernels '$k': this CPU cannot run them" "$TMPD/e"
		continue
	fi
	ran=$((ran + 1))
	[ "$k" = "$best" ] && ran_best=yes
	check "--version names $k" grep -q "^CPU kernels: $k\$" "$TMPD/v"
	for ty in q4_k_m f16; do
		M="$TMPD/$ty.gguf"
		KVCHAT_KERNELS=$k "$KVCHAT" generate -m "$M" --prompt-ids $P -n 8 --temp 0 --logprobs 2 \
		    --threads 2 >"$TMPD/a" 2>"$TMPD/e" || fail "$k $ty: generate"
		sed -n 's/^\[\([0-9]*\)\] \(.*\)/\1 \2/p' "$TMPD/a" >"$TMPD/a.l"
		cp "$TMPD/a.l" "$TMPD/$k.$ty.l"
		check "$k $ty: 8 tokens" [ "$(wc -l <"$TMPD/a.l")" -eq 8 ]
		# the first four generated tokens join the prompt: a prefill of 16
		ids=$(head -4 "$TMPD/a.l" | awk '{printf ",%s", $2}')
		KVCHAT_KERNELS=$k "$KVCHAT" generate -m "$M" --prompt-ids "$P$ids" -n 4 --temp 0 \
		    --logprobs 2 --threads 1 >"$TMPD/b" 2>"$TMPD/e" || fail "$k $ty: generate (longer prompt)"
		sed -n 's/^\[\([0-9]*\)\] \(.*\)/\1 \2/p' "$TMPD/b" | awk '{ $1 = $1 + 4; print }' >"$TMPD/b.l"
		tail -4 "$TMPD/a.l" | awk '{ $1 = $1; print }' >"$TMPD/a4.l"
		if cmp -s "$TMPD/a4.l" "$TMPD/b.l"; then ok; else
			fail "$k $ty: decoded alone and inside a prefill differ"
			diff "$TMPD/a4.l" "$TMPD/b.l" >&2
		fi
	done
	M="$TMPD/q4_k_m.gguf"
	KVCHAT_KERNELS=$k "$KVCHAT" bench -m "$M" -p 16 -n 4 --threads 1 >"$TMPD/bench" 2>"$TMPD/e" ||
		fail "$k: bench"
	check "bench names $k" grep -q "CPU kernels $k," "$TMPD/bench"
done
check "scalar and $best ran ($ran tables)" [ "$ran_best" = yes ]
# avx2vnni is avx2 with vpdpbusd forming the same exact integer sums: the same output
if [ -f "$TMPD/avx2vnni.q4_k_m.l" ]; then
	for ty in q4_k_m f16; do
		check "avx2vnni gives avx2's $ty output" cmp -s "$TMPD/avx2.$ty.l" "$TMPD/avx2vnni.$ty.l"
	done
fi

# a name that is no table: refused with the names, before the model is read
KVCHAT_KERNELS=sse9 "$KVCHAT" generate -m "$TMPD/none.gguf" -p hi -n 1 >"$TMPD/o" 2>"$TMPD/e"
check "unknown table: exit 2" [ $? -eq 2 ]
check "unknown table named" grep -q "KVCHAT_KERNELS: kernels 'sse9': no such table ($tables or auto)" "$TMPD/e"
check "unknown table: the model was not opened" sh -c "! grep -q none.gguf '$TMPD/e'"
# another architecture's table: refused by name, saying whose it is
case $(uname -m) in
x86_64) foreign="neon aarch64" ;;
aarch64) foreign="avx2 x86-64" ;;
*) foreign= ;;
esac
if [ -n "$foreign" ]; then
	set -- $foreign
	KVCHAT_KERNELS=$1 "$KVCHAT" generate -m "$TMPD/none.gguf" -p hi -n 1 >"$TMPD/o" 2>"$TMPD/e"
	rc=$?
	check "$1 on $(uname -m): exit 2" [ $rc -eq 2 ]
	check "$1 refused by name" grep -q "KVCHAT_KERNELS: kernels '$1': $2 kernels, not built into this program (it has $tables or auto)" "$TMPD/e"
fi
KVCHAT_KERNELS=auto "$KVCHAT" --version >"$TMPD/v" 2>&1
check "auto is the best ($best)" grep -q "^CPU kernels: $best\$" "$TMPD/v"
done_testing
