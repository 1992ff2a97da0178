#!/bin/sh
# test_recap.sh (issue 13, "coming back shows nothing"): resuming at a
# terminal shows the last exchange (--recap N: the last N messages, 0 none);
# /history [N] prints the conversation as it was shown live: each user
# message after the ">>> " prompt, each reply's text as it streamed.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_SCROLL=300 KVC_TMUX_PROMPT='>>>'
. "$top_srcdir/tests/e2e/lib_tmux.sh"

tiny_model 61
DB="$TMPD/s.db"
OPTS="-m $M --db $DB --temp 0 -n 6 --ctx 1024"
printf 'FIRST-QUESTION about ships\nSECOND-QUESTION about lamps\n' >"$TMPD/in.txt"
kvrun "two turns" "$TMPD/e1" $OPTS --new trip <"$TMPD/in.txt" >"$TMPD/out.txt"
C=$(sql "SELECT id FROM conversations WHERE title = 'trip'")
# The replies as stdout showed them live (each followed by a blank line).
# Its longest run of plain ASCII: what any terminal shows the same.
R2=$(sql "SELECT text FROM messages WHERE conv_id = $C AND role = 2 ORDER BY seq DESC LIMIT 1" |
    python3 -c "import re, sys; r = re.findall(r'[A-Za-z0-9][ -~]*[A-Za-z0-9]', sys.stdin.read()); print(max(r, key=len) if r else '')")
echo "last reply: '$R2'"
check "the last reply has text to look for" [ -n "$R2" ]
check "the stored reply is what was shown live" grep -qF -- "$R2" "$TMPD/out.txt"

start() {
	# A fresh server for each start: a new session on the socket of a
	# server that is still exiting can fail ("server exited unexpectedly").
	new_server
	T new-session -d -s t -x 200 -y 50 \
	    "LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' $OPTS $*; echo KVCHAT-EXIT:\$?; sleep 60"
	wait_for "the prompt ($*)" prompt_ready
}
quit() {
	text "/quit"; keys Enter
	wait_for "exit 0" on_screen "KVCHAT-EXIT:0"
	T kill-server 2>/dev/null
}

# Default: the last exchange, after the banner.
start --resume
check "recap: the last question after the prompt" on_screen ">>> SECOND-QUESTION about lamps"
check "recap: the last reply" on_screen "$R2"
check "recap: not the older exchange" sh -c "! tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -q FIRST-QUESTION"
# /history: the whole conversation, in order.
text "/history"; keys Enter
wait_for "/history" on_screen ">>> FIRST-QUESTION about ships"
h=$(screen | grep -n -e '>>> FIRST-QUESTION' -e '>>> SECOND-QUESTION' | tail -n 2 | cut -d: -f2 | tr '\n' ' ')
check "/history: both questions, in order" [ "$h" = ">>> FIRST-QUESTION about ships >>> SECOND-QUESTION about lamps " ]
# /history 1: only the last message (the reply).
n0=$(count_on_screen ">>> SECOND-QUESTION")
cmd "/history 1"
check "/history 1: no question printed" [ "$(count_on_screen ">>> SECOND-QUESTION")" -eq "$n0" ]
text "/history x"; keys Enter
wait_for "/history with a bad count" on_screen "usage: /history [N]"
quit

# --recap 0: nothing; --recap 4: both exchanges.
start --resume --recap 0
check "--recap 0: no recap" sh -c "! tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -q QUESTION"
quit
start --resume --recap 4
check "--recap 4: the first question" on_screen ">>> FIRST-QUESTION about ships"
check "--recap 4: the second question" on_screen ">>> SECOND-QUESTION about lamps"
quit
# A long pasted message: the recap shows its first lines and how much more
# there is; /history shows it whole (issue 26, newcomer 5).
{ printf 'PASTE-START'; i=1; while [ $i -le 30 ]; do printf ' pasted part %d of the long message,' $i; i=$((i + 1)); done
  printf ' PASTE-END\n'; } >"$TMPD/paste.txt"
kvrun "a long message" "$TMPD/e3" $OPTS --new pasted <"$TMPD/paste.txt" >/dev/null
start --resume pasted
check "recap of a long message: its start" on_screen "PASTE-START"
check "recap: not its end" sh -c "! tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -q PASTE-END"
check "recap: says how much more" on_screen "of this message: /history shows it whole"
text "/history"; keys Enter
wait_for "/history shows it whole" on_screen "PASTE-END"
quit
"$KVCHAT" $OPTS --recap -1 </dev/null >/dev/null 2>"$TMPD/e2"
check "--recap -1 is a usage error (exit 2)" [ $? -eq 2 ]
# Piped: stdout holds replies only, never a recap.
echo "THIRD" | "$KVCHAT" $OPTS --resume >"$TMPD/out3.txt" 2>/dev/null
check "piped resume prints no recap" sh -c "! grep -q QUESTION '$TMPD/out3.txt'"
done_testing
