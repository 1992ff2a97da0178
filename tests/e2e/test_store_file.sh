#!/bin/sh
# test_store_file.sh (issue 10, point 5): the database file alone holds
# every acknowledged turn. kvchat is SIGKILLed after 4 turns and sessions.db
# is copied without its -wal and -shm: the copy has all 4 turns (before,
# they lived only in the -wal, schema included). A non-empty file without
# kvchat's tables (such a copy, made by an older kvchat) is refused and left
# as it was, never silently re-initialised. `kvchat backup` writes a 0600
# single-file copy that resumes, and never overwrites without --force.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
PID=""
trap '[ -n "$PID" ] && kill -9 $PID 2>/dev/null; rm -rf "$TMPD"' EXIT
wait_lines() {
	_i=0
	while [ "$(cat "$1" 2>/dev/null | wc -l)" -lt "$2" ]; do
		_i=$((_i + 1))
		[ $_i -gt 300 ] && return 1
		sleep 0.1
	done
	return 0
}

tiny_model 43
DB="$TMPD/s.db"
OPTS="--temp 0 -n 8 --ctx 1024 --db $DB"

# 4 turns through a fifo, then SIGKILL while kvchat waits for the fifth.
mkfifo "$TMPD/in"
"$KVCHAT" -m "$M" $OPTS --session kept --stats-json "$TMPD/s.json" <"$TMPD/in" \
    >"$TMPD/out" 2>"$TMPD/err" &
PID=$!
exec 3>"$TMPD/in"
for i in 1 2 3 4; do
	echo "Turn number $i, please answer." >&3
	check "turn $i acknowledged" wait_lines "$TMPD/s.json" $i
done
kill -9 $PID
wait $PID 2>/dev/null
PID=""
exec 3>&-
check "the -wal is still there after the kill" [ -e "$DB-wal" ]
cp "$DB" "$TMPD/copy.db"
n=$(command sqlite3 "$TMPD/copy.db" "SELECT count(*) FROM messages WHERE role IN (1, 2)" 2>&1)
echo "messages in sessions.db copied alone: $n"
check "the file alone holds all 4 turns (8 messages): $n" [ "$n" = 8 ]
check "the copy is sound" [ "$(command sqlite3 "$TMPD/copy.db" 'PRAGMA integrity_check' 2>&1)" = ok ]
echo "Turn five." | kvrun "the copy resumes" "$TMPD/r.err" -m "$M" --temp 0 -n 8 --ctx 1024 \
    --db "$TMPD/copy.db" --session kept >/dev/null
check "and grows to 5 turns" \
    [ "$(command sqlite3 "$TMPD/copy.db" "SELECT count(*) FROM messages WHERE role IN (1, 2)")" = 10 ]

# A non-empty database without kvchat's tables: refused, untouched.
command sqlite3 "$TMPD/bare.db" "CREATE TABLE t(a); DROP TABLE t;"
chmod 600 "$TMPD/bare.db"	# private, so no mode warning names it too
cksum "$TMPD/bare.db" >"$TMPD/bare.sum"
echo "hello" | "$KVCHAT" -m "$M" --temp 0 -n 4 --db "$TMPD/bare.db" >/dev/null 2>"$TMPD/bare.err"
rc=$?
echo "schemaless: exit $rc: $(cat "$TMPD/bare.err")"
check "a schemaless non-empty file is refused (exit $rc)" [ $rc -ne 0 ]
check "saying what it is" grep -q "without kvchat's tables" "$TMPD/bare.err"
check "naming the path once" [ "$(grep -o "$TMPD/bare.db" "$TMPD/bare.err" | wc -l)" -eq 1 ]
check "and left as it was" sh -c "cksum '$TMPD/bare.db' | cmp -s - '$TMPD/bare.sum'"
check "no tables added" [ "$(command sqlite3 "$TMPD/bare.db" 'SELECT count(*) FROM sqlite_master')" = 0 ]
# Another program's database likewise.
command sqlite3 "$TMPD/notes.db" "CREATE TABLE notes(a); INSERT INTO notes VALUES (1);"
echo "hello" | "$KVCHAT" -m "$M" --temp 0 -n 4 --db "$TMPD/notes.db" >/dev/null 2>"$TMPD/n.err"
check "a foreign database is refused" [ $? -ne 0 ]
check "foreign one untouched" [ "$(command sqlite3 "$TMPD/notes.db" 'SELECT count(*) FROM sqlite_master')" = 1 ]

# kvchat backup.
umask 022
kvrun "backup" "$TMPD/b.err" backup --db "$DB" "$TMPD/bk.db"
check "backup is 0600" [ "$(stat -c %a "$TMPD/bk.db")" = 600 ]
check "backup needs no -wal" [ ! -e "$TMPD/bk.db-wal" ]
check "backup has the 4 turns" \
    [ "$(command sqlite3 "$TMPD/bk.db" "SELECT count(*) FROM messages WHERE role IN (1, 2)")" = 8 ]
check "backup is sound" [ "$(command sqlite3 "$TMPD/bk.db" 'PRAGMA integrity_check')" = ok ]
echo "More." | kvrun "resume from the backup" "$TMPD/rb.err" -m "$M" --temp 0 -n 8 --ctx 1024 \
    --db "$TMPD/bk.db" --resume kept >/dev/null
cksum "$TMPD/bk.db" >"$TMPD/bk.sum"
"$KVCHAT" backup --db "$DB" "$TMPD/bk.db" 2>"$TMPD/b2.err"
rc=$?
check "an existing FILE is refused without --force (exit $rc)" [ $rc -ne 0 ]
check "the refusal names --force" grep -q -- "--force" "$TMPD/b2.err"
check "and the file is unchanged" sh -c "cksum '$TMPD/bk.db' | cmp -s - '$TMPD/bk.sum'"
kvrun "backup --force replaces it" "$TMPD/b3.err" backup --db "$DB" --force "$TMPD/bk.db"
check "replaced: back to 4 turns" \
    [ "$(command sqlite3 "$TMPD/bk.db" "SELECT count(*) FROM messages WHERE role IN (1, 2)")" = 8 ]
"$KVCHAT" backup --db "$TMPD/none.db" "$TMPD/x.db" 2>"$TMPD/b4.err"
check "backup of a missing database fails" [ $? -ne 0 ]
check "and creates nothing" [ ! -e "$TMPD/none.db" ] && [ ! -e "$TMPD/x.db" ]
done_testing
