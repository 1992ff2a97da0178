#!/bin/sh
# test_repl_pty.sh (issue 4, "the interactive REPL through a pseudo-
# terminal"): kvchat runs in a tmux pane (private server socket, no config)
# and is driven with send-keys: line editing over Chinese (double-width)
# text, Ctrl-C at the prompt, a Chinese multi-line """ block, Ctrl-C during
# generation followed by another turn, /undo, /retry, /new and /resume
# between two conversations, /list, /quit. What happened is read back from
# the database and --stats-json, which do not depend on the screen layout.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_SCROLL=300
. "$top_srcdir/tests/e2e/lib_tmux.sh"
conv_id() { sql "SELECT id FROM conversations WHERE title = '$1'"; }
nmsgs() { sql "SELECT count(*) FROM messages WHERE conv_id = $1 AND role IN (1, 2)"; }
last_text() { sql "SELECT hex(text) FROM messages WHERE conv_id = $1 AND role = $2 ORDER BY seq DESC LIMIT 1"; }
hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n' | tr a-f A-F; }
# turn_done N: the Nth turn's stats are written and the next prompt is shown
turn_done() { has_lines "$ST" "$1" && prompt_ready; }
# nmsgs_is CONV N: re-evaluated on every poll of wait_for
nmsgs_is() { [ "$(nmsgs "$1")" -eq "$2" ]; }

# The wide fixture: its greedy reply of 4000 tokens is still streaming when
# Ctrl-C comes, on any machine (the tiny one's could be over on a fast one).
M="$TMPD/w.gguf"
wide_model "$M"
DB="$TMPD/s.db"
ST="$TMPD/st.json"

T new-session -d -s t -x 160 -y 50 \
    "LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' -m '$M' --db '$DB' --session first --temp 0 -n 24 \
    --ctx 8192 --threads 2 --stats-json '$ST'; echo KVCHAT-EXIT:\$?; sleep 60"
wait_for "the prompt" on_screen ">>> " || { done_testing; exit 1; }

# Editing over double-width text: Home, Right moves over one character.
text "中文字"
keys Home Right
text "X"
keys End
text "Y"
keys Enter
wait_for "turn 1" turn_done 1
C1=$(conv_id first)
check "edited Chinese line stored as typed" [ "$(last_text "$C1" 1)" = "$(hex "中X文字Y")" ]

# Ctrl-C at the prompt clears the line: once readline has it (Ctrl-C also
# flushes the terminal's input queue), and the next line typed once the
# fresh prompt is drawn.
text "garbage that must not be sent"
wait_for "the typed text shown" on_screen ">>> garbage that must not be sent"
n=$(screen | grep -c '^>>>')
keys C-c
wait_for "a fresh prompt after Ctrl-C" prompts_are $((n + 1))
text "hello"
keys Enter
wait_for "turn 2" turn_done 2
check "Ctrl-C at the prompt cleared the line" [ "$(last_text "$C1" 1)" = "$(hex hello)" ]

# A Chinese multi-line block.
text '"""'; keys Enter
text "你好，世界！"; keys Enter
text "第二行：多行输入。"; keys Enter
text "third line, English"; keys Enter
text '"""'; keys Enter
wait_for "turn 3" turn_done 3
check "multi-line block stored as one message" \
    [ "$(last_text "$C1" 1)" = "$(hex "你好，世界！
第二行：多行输入。
third line, English")" ]
check "the Chinese shows on the screen" on_screen "第二行：多行输入。"
# A trailing backslash continues the line.
text 'one \'; keys Enter
text 'two'; keys Enter
wait_for "turn 4" turn_done 4
check "backslash continuation" [ "$(last_text "$C1" 1)" = "$(hex "one 
two")" ]

# Ctrl-C during generation: a long reply, stopped; the next turn works and
# computes only its own tokens (the cache matches the kept partial reply).
cmd "/set max_tokens 4000"
n_before=$(nmsgs "$C1")
text "Tell me a very long story, please."; keys Enter
wait_for "the reply streams" reply_streams "Tell me a very long story, please."
keys C-c
wait_for "interrupted turn" turn_done 5
check "the reply was interrupted" [ "$(jget "$ST" 5 interrupted)" = true ]
g=$(jget "$ST" 5 gen_tokens)
echo "interrupted after $g tokens"
check "interrupted early ($g < 4000 tokens)" [ "$g" -lt 4000 ]
check "interrupted reply stored, marked" \
    [ "$(sql "SELECT interrupted FROM messages WHERE conv_id = $C1 AND role = 2 ORDER BY seq DESC LIMIT 1")" = 1 ]
check "both messages of the interrupted turn stored" [ "$(nmsgs "$C1")" -eq $((n_before + 2)) ]
cmd "/set max_tokens 24"
text "After the interruption."; keys Enter
wait_for "turn after Ctrl-C" turn_done 6
check "after Ctrl-C: only the new tokens computed" \
    [ "$(jget "$ST" 6 prefill_tokens)" = "$(jget "$ST" 6 prompt_tokens)" ]
r5=$(jget "$ST" 5 reused_tokens) p5=$(jget "$ST" 5 prompt_tokens) r6=$(jget "$ST" 6 reused_tokens)
check "after Ctrl-C: the partial reply is in the cache ($r6 >= $r5 + $p5 + $g - 1)" \
    [ "$r6" -ge $((r5 + p5 + g - 1)) ]
check "the process is still running" on_screen ">>> "

# /undo drops the last exchange.
n=$(nmsgs "$C1")
text "/undo"; keys Enter
wait_for "/undo" nmsgs_is "$C1" $((n - 2)) ||
    echo "messages before /undo: $n, now: $(nmsgs "$C1")" >&2
check "/undo: the interrupted exchange is last again" \
    [ "$(last_text "$C1" 1)" = "$(hex "Tell me a very long story, please.")" ]

# /retry regenerates the last reply from the rewound cache: greedy, the same text.
text "Short question?"; keys Enter
wait_for "turn before /retry" turn_done 7
a1=$(last_text "$C1" 2)
n=$(nmsgs "$C1")
text "/retry"; keys Enter
wait_for "/retry" turn_done 8
check "/retry: same number of messages" [ "$(nmsgs "$C1")" -eq "$n" ]
check "/retry: greedy reply identical" [ "$(last_text "$C1" 2)" = "$a1" ]
check "/retry: same user message" [ "$(last_text "$C1" 1)" = "$(hex "Short question?")" ]
echo "/retry computed $(jget "$ST" 8 prefill_tokens) positions, reused $(jget "$ST" 8 reused_tokens)"
check "/retry: at most one position computed" [ "$(jget "$ST" 8 prefill_tokens)" -le 1 ]
r7=$(jget "$ST" 7 reused_tokens) p7=$(jget "$ST" 7 prompt_tokens) r8=$(jget "$ST" 8 reused_tokens)
c8=$(jget "$ST" 8 prefill_tokens)
check "/retry: the whole prompt reused ($r8 + $c8 = $r7 + $p7)" [ $((r8 + c8)) -eq $((r7 + p7)) ]

# Two conversations: /new, /resume by title, back again; /list shows both.
cmd "/new second"
text "This is the second conversation."; keys Enter
wait_for "turn in second" turn_done 9
C2=$(conv_id second)
check "second conversation created" [ -n "$C2" -a "$C2" != "$C1" ]
check "turn went to the second conversation" [ "$(jget "$ST" 9 conversation_id)" = "$C2" ]
n1=$(nmsgs "$C1")
cmd "/resume first"
text "Back in the first."; keys Enter
wait_for "turn back in first" turn_done 10
check "/resume first: the turn went there" [ "$(jget "$ST" 10 conversation_id)" = "$C1" ]
check "/resume first: stored there" [ "$(nmsgs "$C1")" -eq $((n1 + 2)) ]
check "/resume first: nothing recomputed" [ "$(jget "$ST" 10 prefill_tokens)" = "$(jget "$ST" 10 prompt_tokens)" ]
cmd "/resume $C2"
text "And the second again."; keys Enter
wait_for "turn back in second" turn_done 11
check "/resume ID: the turn went there" [ "$(jget "$ST" 11 conversation_id)" = "$C2" ]
check "second conversation has 4 messages" [ "$(nmsgs "$C2")" -eq 4 ]
# /system on a conversation with messages: recomputed and stored.
text "/system Be brief."; keys Enter
wait_for "/system recomputes" on_screen "system prompt changed:"
check "/system stored" [ "$(sql "SELECT system FROM conversations WHERE id = $C2")" = "Be brief." ]
check "/system kept the messages" [ "$(nmsgs "$C2")" -eq 4 ]
text "/list"; keys Enter
wait_for "/list shows both" sh -c "tmux -L '$SOCK' capture-pane -p -J -t t -S -300 | grep -q second"

text "/quit"; keys Enter
wait_for "exit status 0" on_screen "KVCHAT-EXIT:0"
H="$XDG_STATE_HOME/kvchat/history"
check "history file kept" grep -q "Back in the first." "$H"
check "multi-line entry kept on one line of the history file" \
    grep -qF '你好，世界！\n第二行：多行输入。\nthird line, English' "$H"

# After a restart the """ block comes back from history as one entry:
# reverse-search it, send it, and the stored message has all three lines.
T kill-session -t t
ST2="$TMPD/st2.json"
T new-session -d -s t -x 160 -y 50 \
    "LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' -m '$M' --db '$DB' --session first --temp 0 -n 8 \
    --ctx 8192 --threads 2 --stats-json '$ST2'; echo KVCHAT-EXIT:\$?; sleep 60"
wait_for "the prompt after restart" prompt_ready
n1=$(nmsgs "$C1")
keys C-r
text "third line"
sleep 0.3
keys Enter
wait_for "turn from history" sh -c "[ \"\$(cat '$ST2' 2>/dev/null | wc -l)\" -ge 1 ]"
wait_for "its reply stored" nmsgs_is "$C1" $((n1 + 2))
check "multi-line history entry sent whole after a restart" \
    [ "$(last_text "$C1" 1)" = "$(hex "你好，世界！
第二行：多行输入。
third line, English")" ]
text "/quit"; keys Enter
wait_for "exit status 0 after restart" on_screen "KVCHAT-EXIT:0"
check "integrity ok" [ "$(sql 'PRAGMA integrity_check')" = ok ]
done_testing
