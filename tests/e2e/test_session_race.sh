#!/bin/sh
# test_session_race.sh (issue 10, point 7): kvchats started together with
# the same --session NAME on a fresh database make exactly one
# conversation. Before, each looked the title up, found nothing, and
# created its own (the lookup and the insert were separate transactions).
# KVCHAT_RACE_TRIALS (default 8) trials of 3 processes each.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
TRIALS=${KVCHAT_RACE_TRIALS:-8}
tiny_model 47
echo "Hello there." >"$TMPD/in"
dup=0
t=1
while [ $t -le "$TRIALS" ]; do
	DB="$TMPD/race$t.db"
	# A gate: all three block on the fifo until a line each is written. The
	# gate is held open (read-write, which never blocks) until all three
	# have gone: a plain write to it could close before a slow subshell
	# opened it, which would then wait forever for another writer.
	mkfifo "$TMPD/gate$t"
	pids=""
	for p in 1 2 3; do
		( read -r _ <"$TMPD/gate$t"; exec "$KVCHAT" -m "$M" --temp 0 -n 4 --ctx 512 \
		    --db "$DB" --session race <"$TMPD/in" >/dev/null 2>"$TMPD/e$t.$p" ) &
		pids="$pids $!"
	done
	# a moment for the three to reach the gate (a slow one still gets its line)
	sleep 0.3
	exec 5<>"$TMPD/gate$t"
	printf 'go\ngo\ngo\n' >&5
	for p in $pids; do wait "$p"; done
	exec 5>&-
	n=$(command sqlite3 "$DB" "SELECT count(*) FROM conversations WHERE title = 'race'")
	echo "trial $t: $n conversation(s) titled race"
	[ "$n" = 1 ] || dup=$((dup + 1))
	check "trial $t: exactly one conversation ($n)" [ "$n" = 1 ]
	check "trial $t: database sound" [ "$(command sqlite3 "$DB" 'PRAGMA integrity_check')" = ok ]
	t=$((t + 1))
done
echo "trials with more than one conversation: $dup of $TRIALS"
done_testing
