#!/bin/sh
# test_swa.sh (issue 12): gemma3's sliding-window layers keep bounded
# caches (window 8 here: 2 * 8 - 1 + 128 = 143 positions, crossed several
# times by four 150-token replies), and the chat still behaves as if they
# kept everything:
#  - at a terminal, /retry of the third reply and /undo then the same
#    message again rewind past what the windowed layers hold (a reply is
#    longer than the 143 positions they keep): kvchat recomputes (the turn
#    reuses nothing) and the replies and the stored conversation are those
#    of an uninterrupted piped run;
#  - the chat cut in two processes prints byte for byte what one process
#    printed, the second restoring the snapshot (chunks whose windowed rows
#    were gone are stored as version 4, only the rows still held) and computing only its own tokens;
#  - --stats-json reports the memory per position of the global layer
#    alone (1 of the 6 layers), the snapshot's of all of them.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_SCROLL=400 KVC_TMUX_PROMPT='>>>'
. "$top_srcdir/tests/e2e/lib_tmux.sh"

M="$TMPD/g.gguf"
"$MKMODEL" -o "$M" --preset tiny --arch gemma3 --swa 8 --type f32 --seed 4 --ctx 4096 \
    >/dev/null || { echo "FAIL: mkmodel"; exit 1; }
# The gemma family: the fixture's own template (Llama 2's [INST] form) puts a
# space before each reply, which a random model's first token lacks, so each
# turn would rightly recompute the replies (the chat renders the whole
# conversation); this test is about the windowed caches, not templates.
OPTS="-m $M --temp 0 -n 150 --ctx 4096 --threads 2 --chat-template gemma"
sqlq() { command sqlite3 -cmd '.timeout 10000' "$1" "$2"; }
texts() { sqlq "$1" "SELECT group_concat(text, '|') FROM (SELECT text FROM messages ORDER BY conv_id, seq)"; }
nmsg() { [ "$(sqlq "$1" 'SELECT count(*) FROM messages')" -eq "$2" ]; }
printf 'hello there\nsecond message\nthird one\nand the fourth\n' >"$TMPD/in.txt"

# Uninterrupted, piped.
kvrun "piped chat" "$TMPD/a.err" $OPTS --db "$TMPD/a.db" --session s --stats-json "$TMPD/a.json" \
    <"$TMPD/in.txt" >"$TMPD/a.out"
check "4 turns" [ "$(wc -l <"$TMPD/a.json")" -eq 4 ]
used=$(jget "$TMPD/a.json" 4 context_used)
check "the chat crosses the windowed caches' 143 positions ($used)" [ "$used" -gt 572 ]
kvp=$(jget "$TMPD/a.json" 1 kv_bytes_per_pos)
snp=$(jget "$TMPD/a.json" 1 snapshot_bytes_per_pos)
check "memory per position is the global layer's ($kvp x 6 = $snp)" [ $((kvp * 6)) -eq "$snp" ]
v3=$(sqlq "$TMPD/a.db" "SELECT count(*) FROM kv_chunks WHERE part = 0 AND hex(substr(data, 5, 4)) = '04000000'")
check "chunks with windowed rows gone are version 4 ($v3)" [ "$v3" -gt 0 ]

# At a terminal: three turns, /retry, /undo and the third message again, the fourth.
start $OPTS --db "$TMPD/b.db" --new s --stats-json "$TMPD/b.json"
wait_for "prompt" prompt_ready
n=0
say() { text "$1"; keys Enter; n=$((n + 2)); wait_for "reply to '$1'" nmsg "$TMPD/b.db" $n &&
	wait_for "prompt after '$1'" prompt_ready; }
say "hello there"
say "second message"
say "third one"
r3=$(sqlq "$TMPD/b.db" "SELECT text FROM messages ORDER BY seq DESC LIMIT 1")
text "/retry"; keys Enter
wait_for "the retried turn's stats" sh -c "[ \$(wc -l <'$TMPD/b.json') -eq 4 ]"
wait_for "prompt after /retry" prompt_ready
check "/retry gives the same reply" [ "$(sqlq "$TMPD/b.db" "SELECT text FROM messages ORDER BY seq DESC LIMIT 1")" = "$r3" ]
check "/retry recomputed from the start (reused $(jget "$TMPD/b.json" 4 reused_tokens))" \
    [ "$(jget "$TMPD/b.json" 4 reused_tokens)" -eq 0 ]
text "/undo"; keys Enter
wait_for "/undo" nmsg "$TMPD/b.db" 4
wait_for "prompt after /undo" prompt_ready
n=4
say "third one"
check "the message again, after /undo, recomputed (reused $(jget "$TMPD/b.json" 5 reused_tokens))" \
    [ "$(jget "$TMPD/b.json" 5 reused_tokens)" -eq 0 ]
say "and the fourth"
check "the fourth turn reuses the history" [ "$(jget "$TMPD/b.json" 6 reused_tokens)" -gt 0 ]
check "the conversation is the uninterrupted one" [ "$(texts "$TMPD/b.db")" = "$(texts "$TMPD/a.db")" ]

# Two processes: the second resumes from the snapshot.
head -n 2 "$TMPD/in.txt" >"$TMPD/in1.txt"
tail -n 2 "$TMPD/in.txt" >"$TMPD/in2.txt"
kvrun "first half" "$TMPD/c1.err" $OPTS --db "$TMPD/c.db" --session s <"$TMPD/in1.txt" >"$TMPD/c1.out"
kvrun "second half" "$TMPD/c2.err" $OPTS --db "$TMPD/c.db" --session s --stats-json "$TMPD/c.json" \
    <"$TMPD/in2.txt" >"$TMPD/c2.out"
cat "$TMPD/c1.out" "$TMPD/c2.out" >"$TMPD/c.out"
check "resumed output is byte-identical" cmp -s "$TMPD/a.out" "$TMPD/c.out"
check "resumed from the snapshot" [ "$(jget "$TMPD/c.json" 1 resumed_from_snapshot)" = true ]
check "the resumed turn computes only its own tokens" \
    [ "$(jget "$TMPD/c.json" 1 prefill_tokens)" = "$(jget "$TMPD/c.json" 1 prompt_tokens)" ]
done_testing
