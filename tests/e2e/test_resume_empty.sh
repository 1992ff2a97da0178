#!/bin/sh
# test_resume_empty.sh (issue 13, "empty conversations hijack --resume";
# issue 10 point 9, "a refused over-long first message still creates an
# empty conversation"): a conversation is stored with its first message.
# Starting and leaving (at a terminal, or with empty piped input), /new then
# /quit, and a first message refused as too long store nothing; --resume
# and a bare /resume pick the most recent conversation that has messages,
# also past empty rows an older kvchat left; /list shows no empty rows.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_SCROLL=300 KVC_TMUX_PROMPT='>>>'
. "$top_srcdir/tests/e2e/lib_tmux.sh"
nconv() { sql "SELECT count(*) FROM conversations"; }

tiny_model 61
DB="$TMPD/s.db"
OPTS="-m $M --db $DB --temp 0 -n 6 --ctx 512"

# Piped: no input, then only empty lines: nothing stored.
kvrun "empty piped input" "$TMPD/e1" $OPTS </dev/null >/dev/null
printf '\n\n' >"$TMPD/blank.txt"
kvrun "blank piped lines" "$TMPD/e2" $OPTS <"$TMPD/blank.txt" >/dev/null
check "no conversation stored by empty runs (got $(nconv))" [ "$(nconv)" -eq 0 ]
# A first message longer than the context is refused, and stores nothing.
python3 -c "print('word ' * 2000)" >"$TMPD/long.txt"
"$KVCHAT" $OPTS <"$TMPD/long.txt" >/dev/null 2>"$TMPD/e3"
check "an over-long first message is refused (exit 1)" [ $? -eq 1 ]
check "the refusal says why" grep -q "too long" "$TMPD/e3"
check "no conversation stored by the refused message (got $(nconv))" [ "$(nconv)" -eq 0 ]

# A real conversation, then empty runs after it.
echo "Remember the word lighthouse." >"$TMPD/in1.txt"
kvrun "first real conversation" "$TMPD/e4" $OPTS --new real <"$TMPD/in1.txt" >/dev/null
REAL=$(sql "SELECT id FROM conversations WHERE title = 'real'")
check "the conversation is stored with its message" [ -n "$REAL" ]
kvrun "empty run after it" "$TMPD/e5" $OPTS </dev/null >/dev/null
# What an older kvchat left: an empty row, more recent than the real one.
sql "INSERT INTO conversations (title, model_fp, template, system, settings, created, updated,
    touched) VALUES ('old empty', 'x', 'chatml', NULL, '', strftime('%s'), strftime('%s'),
    (SELECT max(touched) + 100 FROM conversations))"
check "two rows now (the real one and the old empty one)" [ "$(nconv)" -eq 2 ]
echo "What was the word?" >"$TMPD/in2.txt"
kvrun "--resume" "$TMPD/e6" $OPTS --resume --stats-json "$TMPD/st.json" <"$TMPD/in2.txt" >/dev/null
check "--resume continued the conversation with messages" \
    [ "$(jget "$TMPD/st.json" 1 conversation_id)" = "$REAL" ]
check "--resume: 4 messages in it" \
    [ "$(sql "SELECT count(*) FROM messages WHERE conv_id = $REAL")" -eq 4 ]

# At a terminal: start, /new, leave; /list; bare /resume.
start() {
	# A fresh server for each start: a new session on the socket of a
	# server that is still exiting can fail ("server exited unexpectedly").
	new_server
	T new-session -d -s t -x 160 -y 50 \
	    "LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' $OPTS $*; echo KVCHAT-EXIT:\$?; sleep 60"
	wait_for "the prompt" prompt_ready
}
start
text "/new"; keys Enter
wait_for "/new" on_screen "saved with its first message"
text "/quit"; keys Enter
wait_for "exit after start, /new, /quit" on_screen "KVCHAT-EXIT:0"
T kill-server 2>/dev/null
check "start, /new, /quit stored nothing (got $(nconv) rows)" [ "$(nconv)" -eq 2 ]
start
text "/list"; keys Enter
wait_for "/list" on_screen "real"
check "/list shows no 0-message row of this version" sh -c "! tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -q ' 0 msgs  chat '"
text "/resume"; keys Enter
wait_for "bare /resume" on_screen "conversation $REAL (real): 4 messages"
check "bare /resume did not pick the empty row" sh -c "! tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -q '(old empty)'"
text "/quit"; keys Enter
wait_for "exit 0" on_screen "KVCHAT-EXIT:0"
check "integrity ok" [ "$(sql 'PRAGMA integrity_check')" = ok ]
done_testing
