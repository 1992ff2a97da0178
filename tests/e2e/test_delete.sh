#!/bin/sh
# test_delete.sh (issue 13, "/delete asks for confirmation"): at a terminal
# /delete asks "[y/N]" and only "y" deletes; deleting the current
# conversation leaves a new one and never brings the deleted one back;
# /resume TITLE and /delete TITLE with several conversations of that title
# list them and pick none.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_SCROLL=300 KVC_TMUX_PROMPT='>>>'
. "$top_srcdir/tests/e2e/lib_tmux.sh"
exists() { [ "$(sql "SELECT count(*) FROM conversations WHERE id = $1")" -eq 1 ]; }
# asked N: the screen holds N or more "[y/N]" questions (the answer is typed
# once the question is there, not after a guessed delay)
asked() { [ "$(count_on_screen '? [y/N]')" -ge "$1" ]; }
gone() { [ "$(sql "SELECT count(*) FROM conversations WHERE id = $1")" -eq 0 ]; }

tiny_model 61
DB="$TMPD/s.db"
OPTS="-m $M --db $DB --temp 0 -n 4 --ctx 512"
echo "hello" >"$TMPD/in.txt"
for t in dup dup keep other; do
	kvrun "conversation $t" "$TMPD/e.$t" $OPTS --new $t <"$TMPD/in.txt" >/dev/null
done
D1=$(sql "SELECT min(id) FROM conversations WHERE title = 'dup'")
D2=$(sql "SELECT max(id) FROM conversations WHERE title = 'dup'")
K=$(sql "SELECT id FROM conversations WHERE title = 'keep'")
O=$(sql "SELECT id FROM conversations WHERE title = 'other'")

T new-session -d -s t -x 160 -y 50 \
    "LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' $OPTS --resume keep --stats-json '$TMPD/st.json'; echo KVCHAT-EXIT:\$?; sleep 60"
wait_for "the prompt" prompt_ready

# Two titled "dup": listed, neither deleted nor resumed.
text "/delete dup"; keys Enter
wait_for "/delete dup lists the two" on_screen "2 conversations are titled 'dup'"
check "/delete dup: lists the first id" sh -c "tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -Eq '^ +$D1 +[0-9-]+ [0-9:]+ +[0-9]+ msgs +dup'"
check "/delete dup: lists the second id" sh -c "tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -Eq '^ +$D2 +[0-9-]+ [0-9:]+ +[0-9]+ msgs +dup'"
check "/delete dup: the first is still stored" exists "$D1"
check "/delete dup: the second is still stored" exists "$D2"
text "/resume dup"; keys Enter
wait_for "/resume dup lists" sh -c "[ \$(tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -c \"titled 'dup'\") -ge 2 ]"
check "/resume dup switched to none" sh -c "! tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -q '(dup): '"

# An id: asked first; anything but y keeps it.
text "/delete $D1"; keys Enter
wait_for "the question" on_screen "delete conversation $D1 (dup, 2 messages)? [y/N]"
text "n"; keys Enter
wait_for "not deleted" on_screen "not deleted"
check "answer n keeps it" exists "$D1"
text "/delete $D1"; keys Enter
wait_for "the question again" asked 2
keys Enter
wait_for "empty answer" sh -c "[ \$(tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -c 'not deleted') -ge 2 ]"
check "an empty answer keeps it" exists "$D1"
text "/delete $D1"; keys Enter
wait_for "the question a third time" asked 3
text "y"; keys Enter
wait_for "deleted" on_screen "deleted conversation $D1"
check "answer y deletes it" gone "$D1"
check "the current one is untouched" exists "$K"

# The current one: deleted, a new one takes its place, the old one never returns.
text "/delete"; keys Enter
wait_for "the question for the current one" asked 4
text "y"; keys Enter
wait_for "current deleted" on_screen "deleted conversation $K; new conversation"
check "the current conversation is deleted" gone "$K"
text "a message after the delete"; keys Enter
wait_for "the turn after the delete" sh -c "[ -s '$TMPD/st.json' ]"
N=$(jget "$TMPD/st.json" 1 conversation_id)
check "the turn went to a new conversation ($N)" sh -c "[ -n '$N' ] && [ '$N' != '$K' ]"
check "the deleted one did not come back" gone "$K"
check "other conversations untouched" exists "$O"
check "the other dup untouched" exists "$D2"
wait_for "prompt" prompt_ready
text "/quit"; keys Enter
wait_for "exit 0" on_screen "KVCHAT-EXIT:0"
check "the deleted one is still gone after exit" gone "$K"
check "integrity ok" [ "$(sql 'PRAGMA integrity_check')" = ok ]
done_testing
