#!/bin/sh
# test_kill_reply.sh (issue 13, "a crash mid-reply silently loses the typed
# message"): the user's message is stored when it is sent, so a SIGKILL
# while the reply streams keeps it (and nothing of the reply: a turn is
# stored whole or the reply is missing). The next start at a terminal says
# the reply was cut off and /retry answers it; a piped run that goes on
# instead keeps the message, answered by an empty reply marked interrupted,
# so the conversation still alternates user/assistant.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_SCROLL=300 KVC_TMUX_PROMPT='>>>'
. "$top_srcdir/tests/e2e/lib_tmux.sh"
PID=""
trap '[ -n "$PID" ] && kill -9 $PID 2>/dev/null; tmux_stop; rm -rf "$TMPD"' EXIT
roles() { sql "SELECT group_concat(role, '') FROM (SELECT role FROM messages WHERE conv_id = $C ORDER BY seq)"; }

# The wide fixture: its greedy reply of 7000 tokens is still streaming when
# the kill comes, on any machine (the tiny one's could be over, and stored,
# on a fast one).
M="$TMPD/w.gguf"
wide_model "$M"
DB="$TMPD/s.db"
OPTS="-m $M --db $DB --temp 0 --ctx 8192 --threads 2"

# kill_mid_reply MESSAGE ARGS...: a long reply to MESSAGE, killed once it streams.
kill_mid_reply() {
	_m=$1; shift
	: >"$TMPD/out"
	echo "$_m" | "$KVCHAT" $OPTS -n 7000 "$@" >"$TMPD/out" 2>"$TMPD/err" &
	PID=$!
	wait_for "the reply streams" test -s "$TMPD/out"
	kill -9 $PID
	wait $PID 2>/dev/null
	PID=""
}

kill_mid_reply "FIRST question, please answer at length." --new story
C=$(sql "SELECT id FROM conversations WHERE title = 'story'")
check "the conversation is stored" [ -n "$C" ]
check "the killed turn kept the user's message" \
    [ "$(sql "SELECT text FROM messages WHERE conv_id = $C AND role = 1")" = "FIRST question, please answer at length." ]
check "no part of the reply is stored (roles: $(roles))" [ "$(roles)" = 1 ]
check "integrity ok after the kill" [ "$(sql 'PRAGMA integrity_check')" = ok ]

# At a terminal: told, and /retry answers it.
T new-session -d -s t -x 160 -y 50 \
    "LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' $OPTS -n 5 --resume; echo KVCHAT-EXIT:\$?; sleep 60"
wait_for "the prompt" prompt_ready
check "the start says the reply was cut off" on_screen "the reply to the last message was cut off"
check "the recap shows the question" on_screen ">>> FIRST question, please answer at length."
check "the recap offers /retry" on_screen "/retry answers it"
text "/retry"; keys Enter
wait_for "/retry answered" sh -c "[ \"\$(sqlite3 -cmd '.timeout 10000' '$DB' \"SELECT group_concat(role, '') FROM (SELECT role FROM messages WHERE conv_id = $C ORDER BY seq)\")\" = 12 ]"
wait_for "prompt after /retry" prompt_ready
text "/quit"; keys Enter
wait_for "exit 0" on_screen "KVCHAT-EXIT:0"
T kill-server 2>/dev/null
check "the retried reply is not marked interrupted" \
    [ "$(sql "SELECT interrupted FROM messages WHERE conv_id = $C AND role = 2")" = 0 ]

# Killed again; a piped run goes on with another message: nothing is lost.
kill_mid_reply "SECOND question, also at length." --resume
check "the second killed turn kept its message (roles: $(roles))" [ "$(roles)" = 121 ]
echo "THIRD question." | "$KVCHAT" $OPTS -n 4 --resume >/dev/null 2>"$TMPD/err3"
rc=$?
check "the next piped run works (exit $rc)" [ $rc -eq 0 ]
check "the conversation alternates user/assistant (roles: $(roles))" [ "$(roles)" = 121212 ]
check "the unanswered message is kept" \
    [ "$(sql "SELECT text FROM messages WHERE conv_id = $C AND seq = (SELECT min(seq) FROM messages WHERE conv_id = $C AND text LIKE 'SECOND%')")" = "SECOND question, also at length." ]
check "its reply is empty and marked interrupted" \
    [ "$(sql "SELECT interrupted || ':' || length(text) FROM messages WHERE conv_id = $C AND role = 2 ORDER BY seq LIMIT 1 OFFSET 1")" = "1:0" ]
check "integrity ok" [ "$(sql 'PRAGMA integrity_check')" = ok ]
done_testing
