#!/bin/sh
# test_startup_warnings.sh (issue 13 "commands as people type them"): what
# works but costs the user is said once at start: --ctx above the model's
# training context, --threads above the core count; a folder that cannot be
# made is refused with the reason; the no-model help names the folder
# $XDG_DATA_HOME points to now; a history file that cannot be written is
# announced at the terminal (the chat goes on without it).
. "$top_srcdir/tests/e2e/lib.sh"
. "$top_srcdir/tests/e2e/lib_tmux.sh"
tiny_model 61 1024
DB="$TMPD/s.db"
run() { printf 'hi\n' | "$KVCHAT" -m "$M" --db "$DB" --temp 0 -n 2 "$@" >/dev/null 2>"$TMPD/err"; }

run --ctx 2048
check "--ctx 2048 above 1024 runs" [ $? -eq 0 ]
cat "$TMPD/err"
check "--ctx above the training context: warned once" \
    [ "$(grep -c 'warning: --ctx 2048 is above the 1024 positions' "$TMPD/err")" -eq 1 ]
run --ctx 1024
check "--ctx at the training context: no warning" sh -c "! grep -q warning '$TMPD/err'"

cores=$(nproc)
run --threads $((cores + 1))
check "--threads above the cores runs" [ $? -eq 0 ]
check "--threads above the $cores cores: said once" \
    [ "$(grep -c "threads $((cores + 1)) is more than the $cores cores this process may run on; using $cores" "$TMPD/err")" -eq 1 ]
run --threads "$cores"
check "--threads at the core count: nothing said" sh -c "! grep -q threads '$TMPD/err'"
# Issue 26 (newcomer 3): --threads 64 runs with the cores' threads, not 64
# (999 threads on 2 cores gave a 67 s first token). The pool's threads are
# counted in /proc while kvchat waits for its second line.
mkfifo "$TMPD/tin"
"$KVCHAT" -m "$M" --db "$DB" --temp 0 -n 2 --threads 64 --stats-json "$TMPD/th.json" \
    <"$TMPD/tin" >/dev/null 2>"$TMPD/th.err" &
tpid=$!
exec 3>"$TMPD/tin"
echo hi >&3
i=0
while [ "$(cat "$TMPD/th.json" 2>/dev/null | wc -l)" -lt 1 ] && [ $i -lt 300 ]; do
	sleep 0.1; i=$((i + 1))
done
nth=$(sed -n 's/^Threads:[[:space:]]*//p' /proc/$tpid/status)
exec 3>&-
wait $tpid
echo "--threads 64 on $cores cores: $nth threads in the process"
check "--threads 64: at most the $cores cores' threads run ($nth)" [ "${nth:-999}" -le $((cores + 1)) ]
check "... and it says so" grep -q "using $cores" "$TMPD/th.err"

# A database folder that cannot be made: the reason is given.
: >"$TMPD/plainfile"
printf 'hi\n' | "$KVCHAT" -m "$M" --db "$TMPD/plainfile/sub/s.db" >/dev/null 2>"$TMPD/err"
check "a folder under a file: refused" [ $? -ne 0 ]
cat "$TMPD/err"
check "... with the reason" grep -q "cannot use the folder of $TMPD/plainfile/sub/s.db: .*Not a directory" "$TMPD/err"

# No model anywhere: the help names the folder XDG_DATA_HOME points to.
env -u KVCHAT_MODEL -u OLLAMA_MODELS -u HF_HUB_CACHE -u HF_HOME XDG_DATA_HOME="$TMPD/xdg" \
    "$KVCHAT" --db "$DB" </dev/null >/dev/null 2>"$TMPD/err"
check "no model: exit 1" [ $? -eq 1 ]
cat "$TMPD/err"
check "no model: the help names \$XDG_DATA_HOME's folder" grep -qF "Put a .gguf file in $TMPD/xdg/kvchat/models/" "$TMPD/err"

# An unusable $XDG_STATE_HOME: the history will not be saved, and the chat goes on.
T new-session -d -s t -x 200 -y 50 \
    "XDG_STATE_HOME='$TMPD/plainfile' LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' -m '$M' --db '$DB' --temp 0 -n 2; echo KVCHAT-EXIT:\$?; sleep 60"
wait_for "the prompt" prompt_ready
check "history not saved: said" on_screen "the line history will not be saved: $TMPD/plainfile/kvchat/history"
check "... with the reason" on_screen "Not a directory"
cmd "still chatting"
text "/quit"; keys Enter
wait_for "exit 0" on_screen "KVCHAT-EXIT:0"
check "the turn was stored" [ "$(sqlite3 "$DB" "SELECT count(*) FROM messages WHERE text = 'still chatting'")" -eq 1 ]
done_testing
