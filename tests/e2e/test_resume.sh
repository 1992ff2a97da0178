#!/bin/sh
# test_resume.sh (issue 4, "resume equals never stopping"): 3 turns, exit; a
# new process continues the conversation with --session and a 4th turn. The
# cache comes back from the snapshot (resumed_from_snapshot, nothing but the
# 4th turn's tokens computed) and, greedy, the 4th reply is byte-identical to
# the 4th reply of an uninterrupted 4-turn run. --resume (most recent, by id,
# by title) continues the same way.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }

tiny_model 21
OPTS="--temp 0 -n 24 --ctx 1024"

cat >"$TMPD/in3.txt" <<'EOF'
My name is Ada and I like tea.
请记住：我住在上海。
What do you know about me so far?
EOF
echo "Say it all again, briefly." >"$TMPD/in4.txt"
cat "$TMPD/in3.txt" "$TMPD/in4.txt" >"$TMPD/in_all.txt"

# last_reply DB TITLE: hex of the last assistant message of a conversation, as stored.
last_reply() {
	sqlite3 "$1" "SELECT hex(m.text) FROM messages m JOIN conversations c ON c.id = m.conv_id
	    WHERE c.title = '$2' AND m.role = 2 ORDER BY m.seq DESC LIMIT 1"
}

# Uninterrupted: four turns in one process.
kvrun "uninterrupted run" "$TMPD/u.err" -m "$M" --db "$TMPD/u.db" --session whole $OPTS \
    --stats-json "$TMPD/u.json" <"$TMPD/in_all.txt" >"$TMPD/u.out"
check "4 stats lines" [ "$(wc -l <"$TMPD/u.json")" -eq 4 ]

# Three turns, exit, then a new process for the 4th.
kvrun "first process" "$TMPD/r3.err" -m "$M" --db "$TMPD/r.db" --session split $OPTS \
    --stats-json "$TMPD/r3.json" <"$TMPD/in3.txt" >"$TMPD/r3.out"
kvrun "second process" "$TMPD/r4.err" -m "$M" --db "$TMPD/r.db" --session split $OPTS \
    --stats-json "$TMPD/r4.json" <"$TMPD/in4.txt" >"$TMPD/r4.out"

resumed=$(jget "$TMPD/r4.json" 1 resumed_from_snapshot)
rebuilt=$(jget "$TMPD/r4.json" 1 rebuilt)
prompt=$(jget "$TMPD/r4.json" 1 prompt_tokens)
prefill=$(jget "$TMPD/r4.json" 1 prefill_tokens)
reused=$(jget "$TMPD/r4.json" 1 reused_tokens)
u_prompt=$(jget "$TMPD/u.json" 4 prompt_tokens)
u_reused=$(jget "$TMPD/u.json" 4 reused_tokens)
echo "resumed turn: resumed=$resumed rebuilt=$rebuilt prompt=$prompt prefill=$prefill reused=$reused (uninterrupted: prompt=$u_prompt reused=$u_reused)"
check "resumed_from_snapshot is true" [ "$resumed" = true ]
check "not rebuilt" [ "$rebuilt" = false ]
check "prefill_tokens == the 4th turn's tokens ($prefill == $prompt)" [ "$prefill" = "$prompt" ]
check "4th turn's tokens as in the uninterrupted run ($prompt == $u_prompt)" [ "$prompt" = "$u_prompt" ]
check "the whole history reused ($reused == $u_reused)" [ "$reused" = "$u_reused" ]
check "the first three replies are the same" [ "$(cat "$TMPD/r3.out")" = "$(head -c "$(wc -c <"$TMPD/r3.out")" "$TMPD/u.out")" ]

a=$(last_reply "$TMPD/u.db" whole)
b=$(last_reply "$TMPD/r.db" split)
check "a 4th reply was stored" [ -n "$a" ]
check "4th reply byte-identical to the uninterrupted run" [ "$a" = "$b" ]
# stdout of the second process is that reply and a blank line, nothing else.
python3 - "$TMPD/r.db" "$TMPD/r4.out" <<'EOF'
import sqlite3, sys
t = sqlite3.connect(sys.argv[1]).execute(
    "SELECT text FROM messages WHERE role = 2 ORDER BY id DESC LIMIT 1").fetchone()[0]
sys.exit(0 if open(sys.argv[2], encoding="utf-8", newline="").read() == t + "\n\n" else 1)
EOF
check "stdout of the resumed run is the reply and a blank line" [ $? -eq 0 ]
nm=$(sqlite3 "$TMPD/r.db" "SELECT count(*) FROM messages WHERE role IN (1, 2)")
check "8 messages stored (got $nm)" [ "$nm" -eq 8 ]
nc=$(sqlite3 "$TMPD/r.db" "SELECT count(*) FROM conversations")
check "one conversation (got $nc)" [ "$nc" -eq 1 ]

# --resume without an argument continues the most recent conversation;
# with an id or a title, that one. A 5th turn each time, from the snapshot.
echo "And one more thing." >"$TMPD/in5.txt"
kvrun "another conversation" "$TMPD/o.err" -m "$M" --db "$TMPD/r.db" --session other $OPTS \
    <"$TMPD/in5.txt" >/dev/null
id=$(sqlite3 "$TMPD/r.db" "SELECT id FROM conversations WHERE title = 'split'")
kvrun "--resume ID" "$TMPD/r5.err" -m "$M" --db "$TMPD/r.db" $OPTS --stats-json "$TMPD/r5.json" \
    --resume "$id" <"$TMPD/in5.txt" >/dev/null
check "--resume ID: from the snapshot" [ "$(jget "$TMPD/r5.json" 1 resumed_from_snapshot)" = true ]
check "--resume ID: that conversation" [ "$(jget "$TMPD/r5.json" 1 conversation_id)" = "$id" ]
check "--resume ID: only the new turn computed" \
    [ "$(jget "$TMPD/r5.json" 1 prefill_tokens)" = "$(jget "$TMPD/r5.json" 1 prompt_tokens)" ]
# split is now the most recent.
kvrun "--resume" "$TMPD/r6.err" -m "$M" --db "$TMPD/r.db" $OPTS --stats-json "$TMPD/r6.json" \
    --resume <"$TMPD/in5.txt" >/dev/null
check "--resume: the most recent conversation" [ "$(jget "$TMPD/r6.json" 1 conversation_id)" = "$id" ]
check "--resume: from the snapshot" [ "$(jget "$TMPD/r6.json" 1 resumed_from_snapshot)" = true ]
kvrun "--resume TITLE" "$TMPD/r7.err" -m "$M" --db "$TMPD/r.db" $OPTS --stats-json "$TMPD/r7.json" \
    --resume other <"$TMPD/in5.txt" >/dev/null
check "--resume TITLE: that conversation" [ "$(jget "$TMPD/r7.json" 1 title)" = '"other"' ]
"$KVCHAT" -m "$M" --db "$TMPD/r.db" $OPTS --resume "no such title" </dev/null >/dev/null 2>"$TMPD/r8.err"
rc=$?
check "--resume of a missing conversation fails (rc=$rc)" [ $rc -ne 0 ]
check "... saying so" grep -qi "no such title\|not found" "$TMPD/r8.err"
check "integrity ok" [ "$(sqlite3 "$TMPD/r.db" 'PRAGMA integrity_check')" = ok ]

# Two models in the models folder (issue 26, newcomer 1): --resume without
# -m runs the conversation on the model it was made with, not on the first
# model found, and answers as the uninterrupted run did. With that file
# gone, it says so and continues on the one chosen, its messages tokenized
# afresh for that vocabulary (never the other model's ids), and moves there.
MD="$XDG_DATA_HOME/kvchat/models"
mkdir -p -m 700 "$MD"
cp "$M" "$MD/b-own.gguf"
"$MKMODEL" -o "$MD/a-other.gguf" --preset tiny --arch llama --type f32 --vocab spm --ctx 1024 \
    --seed 5 >/dev/null || fail "mkmodel (spm)"
kvrun "three turns on b-own" "$TMPD/t1.err" -m "$MD/b-own.gguf" --db "$TMPD/two.db" \
    --session two $OPTS <"$TMPD/in3.txt" >/dev/null
kvrun "--resume without -m" "$TMPD/t2.err" --db "$TMPD/two.db" --resume two $OPTS \
    <"$TMPD/in4.txt" >/dev/null
echo "resume without -m: $(cat "$TMPD/t2.err")"
check "it names the conversation's own model" grep -q "using $MD/b-own.gguf, the model" "$TMPD/t2.err"
check "the 4th reply equals the uninterrupted run's" \
    [ "$(last_reply "$TMPD/two.db" two)" = "$(last_reply "$TMPD/u.db" whole)" ]
# le_hex IDS...: the ids as the store keeps them (little-endian int32), in hex
le_hex() {
	for i in "$@"; do
		printf '%02X%02X%02X%02X' $((i & 255)) $((i >> 8 & 255)) $((i >> 16 & 255)) $((i >> 24 & 255))
	done
}
mv "$MD/b-own.gguf" "$TMPD/away.gguf"
echo "And now?" | kvrun "--resume with its model gone" "$TMPD/t3.err" --db "$TMPD/two.db" \
    --resume two $OPTS >/dev/null
echo "model gone: $(cat "$TMPD/t3.err")"
check "it says the model is gone" grep -q "was made with $MD/b-own.gguf, which is gone" "$TMPD/t3.err"
check "and that the messages were tokenized afresh" grep -q "tokenized afresh" "$TMPD/t3.err"
want=$(le_hex $(printf '%s' "My name is Ada and I like tea." | "$KVCHAT" tokenize -m "$MD/a-other.gguf"))
first=$(sqlite3 "$TMPD/two.db" "SELECT hex(m.tokens) FROM messages m JOIN conversations c
    ON c.id = m.conv_id WHERE c.title = 'two' AND m.seq = 0")
check "the first message holds the other vocabulary's tokens of its text" \
    sh -c 'case "$1" in *"$2"*) exit 0 ;; esac; exit 1' sh "$first" "$want"
check "the conversation now names the model it continued on" \
    [ "$(sqlite3 "$TMPD/two.db" "SELECT model_path FROM conversations WHERE title = 'two'")" = \
    "$MD/a-other.gguf" ]
echo "Once more." | kvrun "--resume on the model it moved to" "$TMPD/t4.err" --db "$TMPD/two.db" \
    --resume two $OPTS >/dev/null
check "no second re-tokenization" sh -c "! grep -q 'tokenized afresh' '$TMPD/t4.err'"
check "integrity ok after the move" [ "$(sqlite3 "$TMPD/two.db" 'PRAGMA integrity_check')" = ok ]
done_testing
