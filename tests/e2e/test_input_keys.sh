#!/bin/sh
# test_input_keys.sh (issue 13 "commands as people type them"), through a
# pseudo-terminal: Ctrl-D inside an unfinished """ block drops the block
# (as Ctrl-C does) instead of sending it, and the chat goes on; one Ctrl-C
# shows "^C" once, at the prompt and during a reply; an interrupted reply's
# stats line says "stopped: interrupted".
. "$top_srcdir/tests/e2e/lib.sh"
. "$top_srcdir/tests/e2e/lib_tmux.sh"
tiny_model 61
DB="$TMPD/s.db"
ST="$TMPD/st.json"
n_ctrl_c() { screen | grep -o '\^C' | wc -l; }
users() { sql "SELECT count(*) FROM messages WHERE role = 1"; }

start -m "$M" --db "$DB" --session keys --temp 0 -n 4 --stats-json "$ST"
wait_for "the prompt" prompt_ready
cmd "first"
wait_for "turn 1" has_lines "$ST" 1

# Ctrl-D in an unfinished block: dropped, said, and the chat goes on.
text '"""'; keys Enter
text "half a block"; keys Enter
text "second line"; keys Enter
keys C-d
wait_for "the block is dropped" on_screen 'unfinished """ block was discarded'
wait_for "back at the prompt" prompt_ready
sleep 0.5
check "nothing sent" [ "$(users)" -eq 1 ]
check "no turn ran" [ "$(wc -l <"$ST")" -eq 1 ]
check "still running" sh -c "! tmux -L '$SOCK' capture-pane -p -t t | grep -q KVCHAT-EXIT"
cmd "after the block"
wait_for "turn 2" has_lines "$ST" 2
check "the next message is sent alone" [ "$(sql "SELECT text FROM messages WHERE role = 1 ORDER BY id DESC LIMIT 1")" = "after the block" ]

# One Ctrl-C at the prompt: "^C" once, after what was typed; the line is dropped.
c0=$(n_ctrl_c)
text "never sent"
# Ctrl-C flushes the terminal's input queue: wait until readline has the text.
wait_for "the typed text shown" on_screen ">>> never sent"
keys C-c
wait_for "the prompt after Ctrl-C" prompt_ready
check "one ^C shown at the prompt" [ "$(n_ctrl_c)" -eq $((c0 + 1)) ]
check "^C after the typed text" on_screen "never sent^C"

# One Ctrl-C during a long reply: "^C" once, and the stats line says why it stopped.
cmd "/set max_tokens 4000"
c0=$(n_ctrl_c)
text "a long story please"; keys Enter
# The reply is streaming (the last line is no longer the typed one): stop it.
reply_started() { screen | grep -v '^[[:space:]]*$' | tail -n 1 | grep -vqF ">>> a long story please"; }
wait_for "the reply started" reply_started
keys C-c
wait_for "the interrupted turn" has_lines "$ST" 3
wait_for "the prompt after the interrupted reply" prompt_ready
check "the reply was interrupted" [ "$(jget "$ST" 3 interrupted)" = true ]
check "one ^C shown for the interrupted reply" [ "$(n_ctrl_c)" -eq $((c0 + 1)) ]
check "stats line: stopped: interrupted" on_screen "| stopped: interrupted]"
check "stats line: new and reused apart" on_screen "new + $(jget "$ST" 3 reused_tokens) reused"

# Ctrl-D at an empty prompt still leaves.
keys C-d
wait_for "Ctrl-D leaves with status 0" on_screen "KVCHAT-EXIT:0"
done_testing
