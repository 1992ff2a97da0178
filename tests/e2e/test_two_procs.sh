#!/bin/sh
# test_two_procs.sh (issue 4, "two processes on one database"): a
# conversation open in one process is refused in another with a clear
# message; other conversations stay usable meanwhile; the lock goes with
# the process (exit or SIGKILL); processes writing different conversations
# at the same time never corrupt the database or lose a turn.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
PIDS=""
trap 'for p in $PIDS; do kill -9 $p 2>/dev/null; done; rm -rf "$TMPD"' EXIT
# wait_lines FILE N: until FILE has N lines (60 s at most: a loaded machine;
# it only waits that long when failing).
wait_lines() {
	_i=0
	while [ "$(cat "$1" 2>/dev/null | wc -l)" -lt "$2" ]; do
		_i=$((_i + 1))
		[ $_i -gt 600 ] && return 1
		sleep 0.1
	done
	return 0
}
count_msgs() {
	sqlite3 "$DB" "SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conv_id
	    WHERE c.title = '$1' AND m.role IN (1, 2)"
}

tiny_model 41
DB="$TMPD/s.db"
OPTS="--temp 0 -n 8 --ctx 1024 --db $DB"

# A holds "held", kept alive by a fifo it reads its turns from.
mkfifo "$TMPD/a.in"
"$KVCHAT" -m "$M" $OPTS --session held --stats-json "$TMPD/a.json" <"$TMPD/a.in" \
    >"$TMPD/a.out" 2>"$TMPD/a.err" &
A=$!
PIDS="$PIDS $A"
exec 3>"$TMPD/a.in"
echo "Hello from the first process." >&3
check "A answered its first turn" wait_lines "$TMPD/a.json" 1

# B: the same conversation, by --session and by --resume, is refused.
echo "I should not get in." >"$TMPD/b.in"
"$KVCHAT" -m "$M" $OPTS --session held <"$TMPD/b.in" >"$TMPD/b.out" 2>"$TMPD/b.err"
rc=$?
echo "B (--session held) exit $rc: $(cat "$TMPD/b.err")"
check "B refused (exit $rc)" [ $rc -ne 0 ]
check "B says why" grep -qiE 'in use|another|busy|lock|held by|open in' "$TMPD/b.err"
check "B wrote no reply" [ ! -s "$TMPD/b.out" ]
"$KVCHAT" -m "$M" $OPTS --resume held <"$TMPD/b.in" >/dev/null 2>"$TMPD/b2.err"
rc=$?
check "B refused on --resume TITLE too (exit $rc)" [ $rc -ne 0 ]
check "B (--resume) says why" grep -qiE 'in use|another|busy|lock|held by|open in' "$TMPD/b2.err"
check "A's conversation untouched by B (2 messages)" [ "$(count_msgs held)" -eq 2 ]
# Another conversation works meanwhile.
kvrun "B on another conversation while A runs" "$TMPD/b3.err" -m "$M" $OPTS --session free \
    <"$TMPD/b.in" >/dev/null
# A goes on, then ends at EOF, saving.
echo "A second turn for the first process." >&3
check "A answered its second turn" wait_lines "$TMPD/a.json" 2
exec 3>&-
wait $A
rc=$?
check "A exits 0 at EOF (exit $rc)" [ $rc -eq 0 ]
check "A's 4 messages stored" [ "$(count_msgs held)" -eq 4 ]
# Released: B may now continue it, from the snapshot.
kvrun "B continues after A exited" "$TMPD/b4.err" -m "$M" $OPTS --session held \
    --stats-json "$TMPD/b4.json" <"$TMPD/b.in" >/dev/null
check "B resumed A's snapshot" [ "$(jget "$TMPD/b4.json" 1 resumed_from_snapshot)" = true ]

# A holder killed with SIGKILL leaves a stale lock that the next process takes over.
mkfifo "$TMPD/c.in"
"$KVCHAT" -m "$M" $OPTS --session stale --stats-json "$TMPD/c.json" <"$TMPD/c.in" >/dev/null 2>&1 &
C=$!
PIDS="$PIDS $C"
exec 4>"$TMPD/c.in"
echo "Then I die." >&4
check "C answered" wait_lines "$TMPD/c.json" 1
kill -9 $C
wait $C 2>/dev/null
exec 4>&-
kvrun "D takes over a dead process's conversation" "$TMPD/d.err" -m "$M" $OPTS --session stale \
    --stats-json "$TMPD/d.json" <"$TMPD/b.in" >/dev/null
check "D resumed (snapshot or rebuild)" \
    [ "$(jget "$TMPD/d.json" 1 resumed_from_snapshot)" = true -o "$(jget "$TMPD/d.json" 1 rebuilt)" = true ]

# Three writers, three conversations, at the same time.
i=1
while [ $i -le 6 ]; do echo "Concurrent turn $i, 并发。"; i=$((i + 1)); done >"$TMPD/w.in"
for w in 1 2 3; do
	"$KVCHAT" -m "$M" $OPTS --session "writer$w" <"$TMPD/w.in" >"$TMPD/w$w.out" 2>"$TMPD/w$w.err" &
	eval "W$w=\$!"
	PIDS="$PIDS $!"
done
for w in 1 2 3; do
	eval "wait \$W$w"
	rc=$?
	check "writer $w exits 0 (exit $rc)" [ $rc -eq 0 ]
	[ $rc -eq 0 ] || cat "$TMPD/w$w.err" >&2
	n=$(count_msgs "writer$w")
	check "writer $w: all 12 messages stored (got $n)" [ "$n" -eq 12 ]
done
check "integrity ok" [ "$(sqlite3 "$DB" 'PRAGMA integrity_check')" = ok ]
check "foreign keys ok" [ -z "$(sqlite3 "$DB" 'PRAGMA foreign_key_check')" ]
done_testing
