#!/bin/sh
# test_piped_lines.sh (issue 13 "commands as people type them", issue 10
# point 9): in piped mode a line that cannot be a message (invalid UTF-8, a
# NUL byte, too long for the context) is reported with its line number and
# skipped; the batch goes on and the exit status is 1 at the end. "\n" is a
# newline and "\\n" a backslash followed by n.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
tiny_model 61
DB="$TMPD/s.db"
sql() { sqlite3 "$DB" "$1"; }
hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n' | tr a-f A-F; }

long=$(i=0; while [ $i -lt 120 ]; do printf 'word%d ' $i; i=$((i + 1)); done)
# Lines: 1 good, 2 invalid UTF-8, 3 a NUL byte, 4 escapes, 5 too long, 6 empty, 7 good.
{
	printf 'first message\n'
	printf 'bad \377 byte\n'
	printf 'nul \000 inside\n'
	printf 'a\\nb and c\\\\nd\n'
	printf '%s\n' "$long"
	printf '\n'
	printf 'last message\n'
} >"$TMPD/in.txt"
"$KVCHAT" -m "$M" --db "$DB" --new piped --temp 0 -n 4 --ctx 128 <"$TMPD/in.txt" \
    >"$TMPD/out.txt" 2>"$TMPD/err.txt"
rc=$?
cat "$TMPD/err.txt"
check "exit status 1 after skipped lines (got $rc)" [ "$rc" -eq 1 ]
check "line 2 reported as not UTF-8" grep -q "line 2 skipped: .*not valid UTF-8" "$TMPD/err.txt"
check "line 3 reported as holding a NUL" grep -q "line 3 skipped: .*NUL" "$TMPD/err.txt"
check "line 5 (too long) reported" grep -q "line 5 skipped" "$TMPD/err.txt"
check "no other line reported" [ "$(grep -c 'skipped' "$TMPD/err.txt")" -eq 3 ]
users=$(sql "SELECT hex(text) FROM messages WHERE role = 1 ORDER BY conv_id, seq")
check "three user messages stored (lines 1, 4, 7)" [ "$(echo "$users" | wc -l)" -eq 3 ]
check "line 1 stored" [ "$(echo "$users" | sed -n 1p)" = "$(hex "first message")" ]
check "escapes: backslash-n is a newline, two backslashes and n are a backslash and n" [ "$(echo "$users" | sed -n 2p)" = "$(hex 'a
b and c\nd')" ]
check "the batch went on after the skipped lines" [ "$(echo "$users" | sed -n 3p)" = "$(hex "last message")" ]
check "no truncated 'nul ' message" [ "$(sql "SELECT count(*) FROM messages WHERE text LIKE 'nul%'")" -eq 0 ]

# A clean batch still exits 0.
printf 'only good\n' | "$KVCHAT" -m "$M" --db "$DB" --new clean --temp 0 -n 2 >/dev/null 2>"$TMPD/err2.txt"
check "clean batch exits 0" [ $? -eq 0 ]
done_testing
