#!/bin/sh
# test_load_interrupt.sh (issue 21, "a load that takes more than a second
# shows progress on a terminal and stops cleanly on Ctrl-C"). The load is
# made slow by KVCHAT_TEST_LOAD_DELAY_MS (the REPL sleeps that long at each
# progress report of the load). On a terminal (a tmux pane) the "loading
# weights" bar shows and Ctrl-C ends kvchat with status 130 and a message,
# the store holding no conversation; kvchat generate the same; piped, no
# bar is drawn and SIGINT does the same; then the same model loads and
# answers as usual.
. "$top_srcdir/tests/e2e/lib.sh"
. "$top_srcdir/tests/e2e/lib_tmux.sh"

# Q8_0: matrices the avx512 table packs, each a progress report (elsewhere
# the load reports once, at its end, and the engine sees the flag after it).
M="$TMPD/m.gguf"
"$MKMODEL" -o "$M" --preset tiny --arch qwen2 --type q8_0 --vocab bpe --ctx 512 --seed 4 >/dev/null ||
	{ echo "FAIL: mkmodel"; exit 1; }
DB="$TMPD/s.db"

# On a terminal: the bar, then Ctrl-C.
T new-session -d -s t -x 200 -y 50 \
    "LC_ALL=C.UTF-8 TERM=xterm KVCHAT_TEST_LOAD_DELAY_MS=1500 '$KVCHAT' -m '$M' --db '$DB' \
    --new talk --temp 0 -n 4 --threads 2; echo KVCHAT-EXIT:\$?; sleep 60"
wait_for "the load's progress bar" on_screen "loading weights"
keys C-c
wait_for "kvchat to exit" on_screen "KVCHAT-EXIT:"
check "exit status 130 after Ctrl-C in the load" on_screen "KVCHAT-EXIT:130"
check "the interrupted load says so" on_screen "interrupted while loading the model"
check "the bar is cleared" sh -c "! tmux -L '$SOCK' -f '$KVC_TMUX_CONF' capture-pane -p -t t | grep -q 'loading weights'"
check "no conversation stored" [ "$(sql 'SELECT count(*) FROM conversations' 2>/dev/null || echo 0)" = 0 ]

# kvchat generate on a terminal: the same bar and Ctrl-C (status 130, no reply).
T kill-session -t t
T new-session -d -s t -x 200 -y 50 \
    "LC_ALL=C.UTF-8 TERM=xterm KVCHAT_TEST_LOAD_DELAY_MS=1500 '$KVCHAT' generate -m '$M' -p hi -n 4 \
    --threads 2; echo KVCHAT-EXIT:\$?; sleep 60"
wait_for "generate's progress bar" on_screen "loading weights"
keys C-c
wait_for "generate to exit" on_screen "KVCHAT-EXIT:"
check "generate: exit status 130 after Ctrl-C in the load" on_screen "KVCHAT-EXIT:130"
check "generate: the message" on_screen "generate: interrupted while"

# Piped: no bar; SIGINT once kvchat has its handler (SigCgt bit 2).
mkfifo "$TMPD/in"
KVCHAT_TEST_LOAD_DELAY_MS=1500 "$KVCHAT" -m "$M" --db "$DB" --new talk --temp 0 -n 4 --threads 2 \
    <"$TMPD/in" >"$TMPD/out" 2>"$TMPD/err" &
pid=$!
exec 3>"$TMPD/in"
caught() { [ $(( 0x$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$pid/status) & 2 )) -ne 0 ]; }
i=0
while ! caught 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
kill -INT $pid
wait $pid
rc=$?
exec 3>&-
check "piped: exit status 130 (was $rc)" [ "$rc" = 130 ]
check "piped: the message" grep -q "interrupted while loading the model" "$TMPD/err"
check "piped: no progress bar" sh -c "! grep -q 'loading weights' '$TMPD/err'"
check "piped: no conversation stored" [ "$(sql 'SELECT count(*) FROM conversations' 2>/dev/null || echo 0)" = 0 ]

# Nothing left behind: the next start loads and answers.
printf 'hello\n' | "$KVCHAT" -m "$M" --db "$DB" --new talk --temp 0 -n 4 --threads 2 >"$TMPD/out2" 2>"$TMPD/err2"
check "a later start answers (rc $?): $(cat "$TMPD/err2")" [ "$(sql "SELECT count(*) FROM conversations WHERE title = 'talk'")" = 1 ]
done_testing
