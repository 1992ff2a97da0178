#!/bin/sh
# test_speculative.sh (issue 14, --draft MODEL and --lookup N): speculative
# decoding gives plain decoding's ids, token for token, on 20 prompts: greedy,
# and seeded at temperature 0.8 too (each id is sampled from the main model's
# logits with the same draws; a proposal only saves the forward pass). A
# draft model with another vocabulary is refused. The acceptance figures are
# printed.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }

T="$TMPD/target.gguf" D="$TMPD/draft.gguf"
"$MKMODEL" -o "$T" --preset tiny --arch qwen2 --type q8_0 --vocab bpe --seed 41 --quiet >/dev/null &&
"$MKMODEL" -o "$D" --preset tiny --arch qwen2 --type q4_0 --vocab bpe --seed 41 --n-layer 1 --quiet >/dev/null &&
"$MKMODEL" -o "$TMPD/spm.gguf" --preset tiny --arch llama --type f32 --vocab spm --seed 41 --quiet >/dev/null ||
	{ echo "FAIL: mkmodel"; exit 1; }

i=0 same=0 total=0
while [ $i -lt 20 ]; do
	p="Prompt $i: the cat sat on the mat, the cat sat on the mat, and then $i more words"
	samps="--temp=0"
	[ $((i % 2)) -eq 0 ] && samps="$samps --temp=0.8,--seed=$((i + 7))"
	for samp in $samps; do
		samp=$(echo "$samp" | tr ',=' '  ')
		"$KVCHAT" generate -m "$T" -p "$p" -n 48 $samp --ids --threads 1 >"$TMPD/plain" 2>/dev/null
		specs="lookup3 draft"
		[ $i -lt 3 ] && specs="$specs draft_k8 lookup2_k1"
		for name in $specs; do
			case $name in
			lookup3) spec="--lookup 3" ;;
			draft) spec="--draft $D" ;;
			draft_k8) spec="--draft $D --spec-k 8" ;;
			lookup2_k1) spec="--lookup 2 --spec-k 1" ;;
			esac
			total=$((total + 1))
			"$KVCHAT" generate -m "$T" -p "$p" -n 48 $samp --ids --threads 1 $spec >"$TMPD/spec" \
			    2>"$TMPD/spec.err" || fail "prompt $i, $samp, $name: exit status $?"
			if cmp -s "$TMPD/plain" "$TMPD/spec"; then
				same=$((same + 1))
			else
				fail "prompt $i, $samp, $name: ids differ from plain decoding"
			fi
			grep "speculative:" "$TMPD/spec.err" | sed "s/^kvchat: /$name, $samp: /" >>"$TMPD/accept"
		done
	done
	i=$((i + 1))
done
echo "$same of $total speculative runs gave plain decoding's ids"
check "every run has 48 ids" [ "$(wc -w <"$TMPD/plain")" -eq 48 ]
for name in lookup3 draft; do
	awk -v s="$name, --temp 0:" 'index($0, s) == 1 { p += $5; a += $7; n += $11 }
	    END { printf "%s greedy: %d proposed, %d accepted (%.0f %%), %d passes\n", s, p, a, 100 * a / (p ? p : 1), n }' \
	    "$TMPD/accept"
done
check "proposals were made and accepted" awk '{ a += $7 } END { exit !(a > 0) }' "$TMPD/accept"
# chat replies: the same with a draft and with lookup, proposals counted per turn
printf 'Repeat after me: one two three four five six.\nAnd again: one two three four five six.\nOnce more, please.\n' >"$TMPD/chat.txt"
for name in plain lookup draft; do
	case $name in plain) spec= ;; lookup) spec="--lookup 3" ;; draft) spec="--draft $D" ;; esac
	"$KVCHAT" -m "$T" --db "$TMPD/$name.db" --temp 0 -n 40 $spec --stats-json "$TMPD/$name.json" \
	    <"$TMPD/chat.txt" >"$TMPD/$name.out" 2>"$TMPD/$name.err" || fail "chat $name: exit status $?"
done
check "chat replies with lookup equal plain decoding's" cmp "$TMPD/plain.out" "$TMPD/lookup.out"
check "chat replies with a draft equal plain decoding's" cmp "$TMPD/plain.out" "$TMPD/draft.out"
check "per-turn proposals in --stats-json" [ "$(jget "$TMPD/draft.json" 2 spec_proposed)" -gt 0 ]
check "the stats line reports them" grep -q "speculative: [0-9]* of [0-9]* accepted" "$TMPD/lookup.err" "$TMPD/draft.err"
for name in lookup draft; do
	echo "chat, $name: proposed/accepted/passes per turn:" $(for t in 1 2 3; do
	    printf '%s/%s/%s ' "$(jget "$TMPD/$name.json" $t spec_proposed)" \
	    "$(jget "$TMPD/$name.json" $t spec_accepted)" "$(jget "$TMPD/$name.json" $t forward_passes)"; done)
done
"$KVCHAT" generate -m "$T" -p "x" -n 4 --draft "$TMPD/spm.gguf" >/dev/null 2>"$TMPD/voc.err"
check "a draft with another vocabulary is refused" grep -q "vocabulary differs" "$TMPD/voc.err"
done_testing
