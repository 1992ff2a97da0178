#!/bin/sh
# test_set_carry.sh (issue 13, "settings set with /set in one conversation
# are kept as the defaults for the next /new in the same session, and /help
# says so"): /set max_tokens and temperature in one conversation, /new, and
# the new conversation's turn and stored settings follow them; a
# conversation resumed with /resume keeps its own.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_SCROLL=300 KVC_TMUX_PROMPT='>>>'
. "$top_srcdir/tests/e2e/lib_tmux.sh"
settings() { sql "SELECT settings FROM conversations WHERE title = '$1'"; }

tiny_model 61
DB="$TMPD/s.db"
ST="$TMPD/st.json"
echo "hello" | "$KVCHAT" -m "$M" --db "$DB" --temp 0.9 -n 30 --new older >/dev/null 2>&1

T new-session -d -s t -x 160 -y 50 \
    "LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' -m '$M' --db '$DB' --temp 0.9 -n 30 --new first \
    --stats-json '$ST'; echo KVCHAT-EXIT:\$?; sleep 60"
wait_for "the prompt" prompt_ready
text "/help"; keys Enter
wait_for "/help says /set values carry to /new" on_screen "conversations /new starts in this session"
text "/set max_tokens 3"; keys Enter
wait_for "/set max_tokens" on_screen "max_tokens 3"
text "/set temperature 0"; keys Enter
wait_for "/set temperature" on_screen "temperature 0 "
text "first message"; keys Enter
wait_for "turn 1" has_lines "$ST" 1
wait_for "prompt" prompt_ready
text "/new second"; keys Enter
wait_for "/new" on_screen "new conversation (second)"
text "/set"; keys Enter
wait_for "/set in the new conversation shows the carried values" sh -c \
    "[ \$(tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -c 'temperature 0 .*max_tokens 3') -ge 2 ]"
text "a long answer please, with many words"; keys Enter
wait_for "turn 2" has_lines "$ST" 2
g=$(jget "$ST" 2 gen_tokens)
check "the new conversation's reply is capped by the carried max_tokens ($g <= 3)" [ "$g" -le 3 ]
s2=$(settings second)
echo "stored settings of the new conversation: $s2"
check "the new conversation stored max_tokens 3" sh -c "echo '$s2' | grep -q 'max_tokens=3'"
check "the new conversation stored temperature 0" sh -c "echo '$s2' | grep -Eq 'temp(erature)?=0(;|$)'"
# A stored conversation keeps its own settings when resumed.
wait_for "prompt" prompt_ready
text "/resume older"; keys Enter
wait_for "/resume older" on_screen "(older): 2 messages"
text "/set"; keys Enter
wait_for "older keeps its own max_tokens" on_screen "max_tokens 30"
text "/quit"; keys Enter
wait_for "exit 0" on_screen "KVCHAT-EXIT:0"
done_testing
