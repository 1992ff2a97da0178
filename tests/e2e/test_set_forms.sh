#!/bin/sh
# test_set_forms.sh (issue 13 "commands as people type them"): ollama's
# forms of /set (parameter NAME VALUE, system TEXT, verbose, quiet), the
# setting's name checked before its value, and other programs' names for
# commands: /? (help), /regen (retry), /bye and /exit (quit).
. "$top_srcdir/tests/e2e/lib.sh"
. "$top_srcdir/tests/e2e/lib_tmux.sh"
tiny_model 61
DB="$TMPD/s.db"
ST="$TMPD/st.json"
settings() { sql "SELECT settings FROM conversations WHERE title = 'forms'"; }
stats_lines() { screen | grep -c '^\[ttft'; }

start -m "$M" --db "$DB" --session forms --temp 0 -n 3 --stats-json "$ST"
wait_for "the prompt" prompt_ready
cmd "first message"
wait_for "turn 1" has_lines "$ST" 1

cmd "/set parameter temperature 0.5"
check "/set parameter temperature 0.5 stored" sh -c "sqlite3 '$DB' \"SELECT settings FROM conversations WHERE title = 'forms'\" | grep -q '^temp=0.5;'"
cmd "/set parameter num_predict 5"
check "ollama's num_predict is max_tokens" sh -c "sqlite3 '$DB' \"SELECT settings FROM conversations WHERE title = 'forms'\" | grep -q 'max_tokens=5\$'"
cmd "/set parameter top_p 3"
check "/set parameter checks the range" on_screen "top_p: must be in (0, 1], not '3'"
cmd "/set temperature 0"

# The name is checked first: an unknown name is said so, value or not.
cmd "/set temprature 0.5"
check "unknown name with a value" on_screen "unknown setting 'temprature'"
cmd "/set bogus"
check "unknown name without a value: the name is what is wrong" on_screen "unknown setting 'bogus'"
check "... not a usage line" sh -c "! tmux -L '$SOCK' capture-pane -p -J -t t -S -500 | grep -q 'usage: /set bogus'"
cmd "/set top_k"
check "a known name without a value: usage with its range and value" on_screen "usage: /set top_k VALUE (>= 0; now 40)"
before=$(settings)
cmd "/set top_k lots"
check "a bad value: not a number" on_screen "top_k: not an integer: 'lots'"
check "nothing stored by refused /set lines" [ "$(settings)" = "$before" ]

# /set system TEXT is /system TEXT.
cmd "/set system You are terse."
check "/set system stored" [ "$(sql "SELECT system FROM conversations WHERE title = 'forms'")" = "You are terse." ]

# /set quiet hides the stats line at the terminal, /set verbose shows it again.
cmd "/set quiet"
n=$(stats_lines)
cmd "quiet turn"
wait_for "turn 2" has_lines "$ST" 2
check "/set quiet: no stats line" [ "$(stats_lines)" -eq "$n" ]
cmd "/set verbose"
cmd "verbose turn"
wait_for "turn 3" has_lines "$ST" 3
check "/set verbose: the stats line again" [ "$(stats_lines)" -eq $((n + 1)) ]

# /? is /help; /regen is /retry (same messages, one more turn).
cmd "/?"
check "/? lists the commands" on_screen "/regen"
check "/help names the aliases" on_screen "also /bye, /exit"
nm=$(sql "SELECT count(*) FROM messages")
cmd "/regen"
wait_for "/regen ran a turn" has_lines "$ST" 4
check "/regen: no message added" [ "$(sql "SELECT count(*) FROM messages")" -eq "$nm" ]

text "/exit"; keys Enter
wait_for "/exit leaves with status 0" on_screen "KVCHAT-EXIT:0"
start -m "$M" --db "$DB" --session forms --temp 0 -n 3
wait_for "the prompt again" prompt_ready
text "/bye"; keys Enter
wait_for "/bye leaves with status 0" on_screen "KVCHAT-EXIT:0"
done_testing
