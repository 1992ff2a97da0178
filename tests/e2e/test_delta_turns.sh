#!/bin/sh
# test_delta_turns.sh (issue 4, "delta prefill in the real program"): a
# 10-turn non-interactive conversation; every turn computes only the tokens
# its own message added (prefill_tokens == prompt_tokens), never the history,
# and what is reused grows by what the previous turns added.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
# jget FILE LINE KEY: the scalar value of KEY on line LINE of a JSON-lines file.

tiny_model 11

# Ten turns of different lengths, English and Chinese, one with an escaped newline.
cat >"$TMPD/in.txt" <<'EOF'
Hello there.
What is the capital of France? Please answer in one word.
你好，请用中文介绍一下你自己。
A longer message this time, to make sure the new tokens of a turn are counted as they are and not as the whole history: one two three four five six seven eight nine ten.
line one\nline two\nline three
Short.
再来一句：今天天气怎么样？
Numbers 12345 67890 and symbols !@#$%^&*()
ok
The last turn of ten, which should still compute only itself.
EOF

"$KVCHAT" -m "$M" --db "$TMPD/s.db" --session delta --temp 0 -n 12 --ctx 2048 \
    --stats-json "$TMPD/st.json" <"$TMPD/in.txt" >"$TMPD/out.txt" 2>"$TMPD/err.txt"
rc=$?
check "kvchat exits 0 (rc=$rc)" [ $rc -eq 0 ]
[ $rc -eq 0 ] || { cat "$TMPD/err.txt" >&2; done_testing; exit 1; }
n=$(wc -l <"$TMPD/st.json")
check "10 stats lines (got $n)" [ "$n" -eq 10 ]

prev_reused=-1 prev_prompt=0 prev_gen=0
i=1
while [ $i -le 10 ]; do
	text=$(sed -n "${i}p" "$TMPD/in.txt" | sed 's/\\n/\
/g')
	turn=$(jget "$TMPD/st.json" $i turn)
	prompt=$(jget "$TMPD/st.json" $i prompt_tokens)
	prefill=$(jget "$TMPD/st.json" $i prefill_tokens)
	reused=$(jget "$TMPD/st.json" $i reused_tokens)
	gen=$(jget "$TMPD/st.json" $i gen_tokens)
	echo "turn $turn: prompt $prompt prefill $prefill reused $reused gen $gen"
	check "turn $i numbered" [ "$turn" = "$i" ]
	check "turn $i: prefill_tokens ($prefill) == prompt_tokens ($prompt)" [ "$prefill" = "$prompt" ]
	check "turn $i: generated something (gen=$gen)" [ "$gen" -ge 1 ]
	# The user's words alone, tokenized independently of the chat code.
	words=$(printf '%s' "$text" | "$KVCHAT" tokenize -m "$M" | wc -w)
	check "turn $i: prompt has the message ($prompt >= $words)" [ "$prompt" -ge "$words" ]
	if [ $i -ge 2 ]; then
		# The exact ChatML delta, tokenized independently of the chat code:
		# close the previous reply (its <|im_end|> is already there when the
		# model ended it itself, i.e. stopped before -n 12), open the user
		# turn, the message, close it, open the assistant turn.
		if [ "$prev_gen" -lt 12 ]; then close='\n'; else close='<|im_end|>\n'; fi
		want=$(printf "$close"'<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$text" |
		    "$KVCHAT" tokenize -m "$M" --parse-special | wc -w)
		check "turn $i: prompt is the ChatML delta ($prompt == $want), not the history" \
		    [ "$prompt" -eq "$want" ]
		check "turn $i: reused ($reused) grew past the previous turn ($prev_reused + $prev_prompt)" \
		    [ "$reused" -ge $((prev_reused + prev_prompt)) ]
		check "turn $i: reused ($reused) is no more than the history ($prev_reused + $prev_prompt + $prev_gen)" \
		    [ "$reused" -le $((prev_reused + prev_prompt + prev_gen)) ]
	else
		check "turn 1 reuses nothing ($reused)" [ "$reused" -eq 0 ]
	fi
	prev_reused=$reused prev_prompt=$prompt prev_gen=$gen
	i=$((i + 1))
done
# By the end the history dwarfs a turn: computing it again would show.
check "last turn computes less than it reuses" [ "$prefill" -lt "$reused" ]

# The store has all twenty messages, and stdout is exactly the replies, each
# followed by a blank line.
nm=$(sqlite3 "$TMPD/s.db" "SELECT count(*) FROM messages WHERE role IN (1, 2)")
check "20 messages stored (got $nm)" [ "$nm" -eq 20 ]
python3 - "$TMPD/s.db" "$TMPD/out.txt" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
want = "".join(t + "\n\n" for (t,) in db.execute(
    "SELECT text FROM messages WHERE role = 2 ORDER BY seq"))
got = open(sys.argv[2], encoding="utf-8", errors="replace", newline="").read()
if got != want:
    print("stdout differs from the stored replies:\n%r\n%r" % (got[:400], want[:400]), file=sys.stderr)
    sys.exit(1)
EOF
check "stdout is the replies, each followed by a blank line" [ $? -eq 0 ]
done_testing
