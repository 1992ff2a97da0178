#!/bin/sh
# test_batch_interrupt.sh (issue 13, piped mode and Ctrl-C): a SIGINT stops
# a batch as it stops a shell script, with exit status 130, saying which
# line was not answered; what was answered before stays stored and the
# lines after it are not sent.
#  - In a prefill (a long second line): "line 2 was not answered", nothing
#    of it stored, no stats record for it, the third line not sent.
#  - In a reply: "the reply to line 1 was cut off", the reply kept marked
#    interrupted, its --stats-json record says stop "interrupted" with a
#    time to first token, the second line not sent.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
PID=""
trap '[ -n "$PID" ] && kill -9 $PID 2>/dev/null; rm -rf "$TMPD"' EXIT
sql() { sqlite3 "$DB" "$1"; }
msgs() { sql "SELECT count(*) FROM messages"; }
# poll DESC COMMAND...: until COMMAND succeeds (60 s at most); one check.
poll() {
	_d=$1; shift
	_i=0
	while ! "$@" >/dev/null 2>&1; do
		_i=$((_i + 1))
		if [ $_i -gt 600 ]; then
			fail "timed out waiting for: $_d"
			return 1
		fi
		sleep 0.1
	done
	ok
}
# stop_batch: SIGINT to the running kvchat, its exit status in $RC.
stop_batch() {
	kill -INT $PID
	wait $PID
	RC=$?
	PID=""
}

# A model wide enough that a few hundred positions take seconds.
W="$TMPD/w.gguf"
wide_model "$W"
python3 -c "
import random
random.seed(5)
w = ['lighthouse', 'keeper', 'ocean', 'storm', 'wave', 'lamp', 'night', 'ship', 'harbor', 'stone']
print('A short first line.')
print('PASTE-START ' + ' '.join(random.choice(w) for _ in range(600)))
print('A third line.')" >"$TMPD/in.txt"

DB="$TMPD/p.db"
"$KVCHAT" -m "$W" --db "$DB" --new p --temp 0 -n 2 --threads 2 --stats-json "$TMPD/p.json" \
    <"$TMPD/in.txt" >"$TMPD/out" 2>"$TMPD/err" &
PID=$!
# The second line's message is stored just before its prefill starts (and
# after the turn cleared the interrupt flag): the signal at once lands in
# that prefill, where a guessed delay might outlast it on a fast machine.
poll "line 2 is being read" sh -c "[ \"\$(sqlite3 -cmd '.timeout 10000' '$DB' \
    'SELECT count(*) FROM messages' 2>/dev/null)\" = 3 ]"
stop_batch
cat "$TMPD/err"
check "prefill: exit status 130 (got $RC)" [ "$RC" -eq 130 ]
check "prefill: says line 2 was not answered" \
    grep -qF "stopped by Ctrl-C: line 2 was not answered, nor the lines after it" "$TMPD/err"
check "prefill: the first exchange stays, nothing of line 2 (messages: $(msgs))" [ "$(msgs)" -eq 2 ]
check "prefill: line 3 not sent" [ "$(sql "SELECT count(*) FROM messages WHERE text LIKE 'A third%'")" -eq 0 ]
check "prefill: one stats record (line 1's)" [ "$(wc -l <"$TMPD/p.json")" -eq 1 ]
check "prefill: integrity ok" [ "$(sql 'PRAGMA integrity_check')" = ok ]

# A reply that runs long (greedy, 7000 tokens on the wide fixture: still
# streaming when the signal comes on any machine, where the tiny fixture's
# could be over on a fast one), stopped once it streams.
DB="$TMPD/r.db"
printf 'FIRST question, please answer at length.\nSECOND question.\n' >"$TMPD/in2.txt"
: >"$TMPD/out2"
"$KVCHAT" -m "$W" --db "$DB" --new r --temp 0 -n 7000 --ctx 8192 --threads 2 --stats-json "$TMPD/r.json" \
    <"$TMPD/in2.txt" >"$TMPD/out2" 2>"$TMPD/err2" &
PID=$!
poll "the reply streams" test -s "$TMPD/out2"
stop_batch
cat "$TMPD/err2"
check "reply: exit status 130 (got $RC)" [ "$RC" -eq 130 ]
check "reply: says the reply to line 1 was cut off" \
    grep -qF "stopped by Ctrl-C: the reply to line 1 was cut off (kept, marked interrupted)" "$TMPD/err2"
check "reply: the exchange is kept (messages: $(msgs))" [ "$(msgs)" -eq 2 ]
check "reply: marked interrupted" [ "$(sql "SELECT interrupted FROM messages WHERE role = 2")" = 1 ]
check "reply: line 2 not sent" [ "$(sql "SELECT count(*) FROM messages WHERE text LIKE 'SECOND%'")" -eq 0 ]
check "reply: stats record says stop interrupted" [ "$(jget "$TMPD/r.json" 1 stop)" = '"interrupted"' ]
check "reply: interrupted true" [ "$(jget "$TMPD/r.json" 1 interrupted)" = true ]
t=$(jget "$TMPD/r.json" 1 ttft_ms)
check "reply: a time to first token ($t)" sh -c "echo '$t' | grep -Eq '^[0-9]+\.[0-9]+\$'"
done_testing
