#!/bin/sh
# test_gemma3.sh (issue 12): the real Gemma 3 270M (Q4_K_M, fetched once per
# machine by scripts/fetch-models.sh; SKIP without it).
#  - kvchat generate --temp 0 continues an English and a Chinese prompt with
#    llama.cpp's greedy tokens, over the steps where llama.cpp's top-2 gap is
#    clear (recorded with llama-server n_probs, -fa off: every gap >= 0.69 nats,
#    far above the ~0.1 nats both programs' activation rounding moves a
#    log-prob), and a longer continuation stays in the prompt's script;
#  - a 20-turn piped chat (the gemma template, taken from the architecture)
#    computes only each turn's own tokens;
#  - the same chat cut in two processes after turn 10 prints byte for byte
#    what one process printed, the second resuming from the stored snapshot.
. "$top_srcdir/tests/e2e/lib.sh"
have_gemma3 || skip "no $GEMMA3 (scripts/fetch-models.sh fetches it)"
G=$GEMMA3

# llama.cpp's greedy continuations (ids 38167 1024 506 31770 4799 236761 and
# 108 238868 238321 240649 237464 236900; gaps 2.36..5.97 and 0.69..3.40 nats).
out=$("$KVCHAT" generate -m "$G" -p "The quick brown fox jumps over the lazy dog. The quick brown fox" \
    -n 6 --temp 0 --threads 2 2>"$TMPD/e1")
check "English: '$out'" [ "$out" = " jumps over the lazy dog." ]
out=$("$KVCHAT" generate -m "$G" -p "春眠不觉晓，处处闻啼鸟。" -n 6 --temp 0 --threads 2 2>"$TMPD/e2")
want=$(printf '\n\n春风吹过，')
check "Chinese: '$out'" [ "$out" = "$want" ]

# Plausibility of a longer greedy run: English words and Chinese characters.
"$KVCHAT" generate -m "$G" -p "Once upon a time, in a small village by the sea, there lived" \
    -n 20 --temp 0 --threads 2 >"$TMPD/en.txt" 2>"$TMPD/e3"
"$KVCHAT" generate -m "$G" -p "北京是中国的首都，也是" -n 20 --temp 0 --threads 2 >"$TMPD/zh.txt" 2>"$TMPD/e4"
python3 - "$TMPD/en.txt" "$TMPD/zh.txt" <<'PY' || fail "longer continuations are not plausible"
import sys
en = open(sys.argv[1], encoding="utf-8").read()
zh = open(sys.argv[2], encoding="utf-8").read()
words = en.split()
letters = sum(c.isascii() and c.isalpha() for c in en)
cjk = sum('\u4e00' <= c <= '\u9fff' for c in zh)
print("en:", repr(en)); print("zh:", repr(zh))
ok = len(words) >= 12 and letters >= 0.6 * len(en) and cjk >= 8 and cjk >= 0.4 * len(zh)
sys.exit(0 if ok else 1)
PY
ok

# A 20-turn chat, piped.
i=1
: >"$TMPD/in.txt"
while [ $i -le 20 ]; do
	case $((i % 3)) in
	0) echo "Turn $i: tell me one fact about the sea." ;;
	1) echo "第${i}轮：请说一句话。" ;;
	2) echo "Turn $i. What comes after $i?" ;;
	esac >>"$TMPD/in.txt"
	i=$((i + 1))
done
chat() { # DB SESSION STATS < input > output
	"$KVCHAT" -m "$G" --db "$1" --session "$2" --temp 0 -n 4 --threads 2 --ctx 2048 --stats-json "$3"
}
chat "$TMPD/a.db" full "$TMPD/a.json" <"$TMPD/in.txt" >"$TMPD/a.out" 2>"$TMPD/a.err" ||
	{ fail "20-turn chat"; cat "$TMPD/a.err" >&2; }
check "no chatml fallback notice" sh -c "! grep -q chatml '$TMPD/a.err'"
n=$(wc -l <"$TMPD/a.json")
check "20 turns (got $n)" [ "$n" -eq 20 ]
i=1
while [ $i -le "$n" ]; do
	prompt=$(jget "$TMPD/a.json" $i prompt_tokens)
	prefill=$(jget "$TMPD/a.json" $i prefill_tokens)
	reused=$(jget "$TMPD/a.json" $i reused_tokens)
	check "turn $i: computes only its own $prompt tokens (prefill $prefill)" [ "$prefill" = "$prompt" ]
	[ $i -gt 1 ] && check "turn $i: reuses the history ($reused)" [ "$reused" -gt 0 ]
	i=$((i + 1))
done
# the opening turn is exactly <bos><start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n
want=$(printf '<start_of_turn>user\n%s<end_of_turn>\n<start_of_turn>model\n' "$(sed -n 1p "$TMPD/in.txt")" |
    "$KVCHAT" tokenize -m "$G" --parse-special --bos | wc -w)
got=$(jget "$TMPD/a.json" 1 prompt_tokens)
check "turn 1 is the Gemma turn ($got == $want tokens)" [ "$got" = "$want" ]

# The same chat in two processes: the second resumes after turn 10.
head -n 10 "$TMPD/in.txt" | chat "$TMPD/b.db" half "$TMPD/b1.json" >"$TMPD/b1.out" 2>"$TMPD/b1.err" ||
	fail "first half"
tail -n 10 "$TMPD/in.txt" | chat "$TMPD/b.db" half "$TMPD/b2.json" >"$TMPD/b2.out" 2>"$TMPD/b2.err" ||
	fail "second half"
cat "$TMPD/b1.out" "$TMPD/b2.out" >"$TMPD/b.out"
check "resumed chat is byte-identical" cmp "$TMPD/a.out" "$TMPD/b.out"
reused=$(jget "$TMPD/b2.json" 1 reused_tokens)
prefill=$(jget "$TMPD/b2.json" 1 prefill_tokens)
prompt=$(jget "$TMPD/b2.json" 1 prompt_tokens)
check "resume restores the cache: turn 11 reuses $reused, computes only its $prompt ($prefill)" \
    [ "$reused" -gt 0 -a "$prefill" = "$prompt" ]
done_testing
