#!/bin/sh
# test_input_keys.sh (issue 13 "commands as people type them"), through a
# pseudo-terminal: Ctrl-D inside an unfinished """ block drops the block
# (as Ctrl-C does) instead of sending it, and the chat goes on; one Ctrl-C
# shows "^C" once, at the prompt and during a reply (on the wide fixture,
# whose reply is still streaming when the key comes); an interrupted reply's
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

# Ctrl-D at an empty prompt still leaves.
keys C-d
wait_for "Ctrl-D leaves with status 0" on_screen "KVCHAT-EXIT:0"

# One Ctrl-C during a long reply: "^C" once, and the stats line says why it
# stopped. On the wide model, a greedy reply of 4000 tokens takes many
# seconds on any machine: the tiny one's could end (or reach its end of
# turn) before the key arrived on a fast one.
W="$TMPD/w.gguf"
wide_model "$W"
ST2="$TMPD/st2.json"
start -m "$W" --db "$DB" --session keys-wide --temp 0 -n 4 --threads 2 --stats-json "$ST2"
wait_for "the prompt (wide)" prompt_ready
cmd "first"
wait_for "turn 1 (wide)" has_lines "$ST2" 1
cmd "/set max_tokens 4000"
c0=$(n_ctrl_c)
text "a long story please"; keys Enter
# The reply is streaming (text below the typed line): stop it.
wait_for "the reply started" reply_streams "a long story please"
keys C-c
wait_for "the interrupted turn" has_lines "$ST2" 2
wait_for "the prompt after the interrupted reply" prompt_ready
check "the reply was interrupted" [ "$(jget "$ST2" 2 interrupted)" = true ]
check "one ^C shown for the interrupted reply" [ "$(n_ctrl_c)" -eq $((c0 + 1)) ]
check "stats line: stopped: interrupted" on_screen "| stopped: interrupted]"
check "stats line: new and reused apart" on_screen "new + $(jget "$ST2" 2 reused_tokens) reused"
text "/quit"; keys Enter
wait_for "exit 0 (wide)" on_screen "KVCHAT-EXIT:0"
done_testing
