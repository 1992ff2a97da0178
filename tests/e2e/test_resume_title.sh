#!/bin/sh
# test_resume_title.sh (issue 13, "/resume TITLE with several matches lists
# them instead of picking one"): on the command line too. kvchat --resume
# TITLE (and --session TITLE) with two conversations of that title lists
# both (id, date, messages, title) on stderr, asks for the id and exits 1
# without touching either; --resume ID resumes the one named.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
tiny_model 61
DB="$TMPD/s.db"
OPTS="-m $M --db $DB --temp 0 -n 4 --ctx 512"
sql() { sqlite3 "$DB" "$1"; }
msgs() { sql "SELECT count(*) FROM messages WHERE conv_id = $1"; }
echo "hello" >"$TMPD/in.txt"
for t in dup dup other; do
	kvrun "conversation $t" "$TMPD/e.$t" $OPTS --new $t <"$TMPD/in.txt" >/dev/null
done
D1=$(sql "SELECT min(id) FROM conversations WHERE title = 'dup'")
D2=$(sql "SELECT max(id) FROM conversations WHERE title = 'dup'")
n0=$(sql "SELECT count(*) FROM conversations")

for opt in --resume --session; do
	echo "again" | "$KVCHAT" $OPTS $opt dup >"$TMPD/out.txt" 2>"$TMPD/err.txt"
	rc=$?
	cat "$TMPD/err.txt"
	check "$opt dup: exit status 1 (got $rc)" [ $rc -eq 1 ]
	check "$opt dup: says there are two and asks for the id" \
	    grep -qF -- "$opt: 2 conversations are titled 'dup'; give the id" "$TMPD/err.txt"
	for d in $D1 $D2; do
		check "$opt dup: lists $d with its date and messages" \
		    grep -Eq "^ +$d  [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} +2 msgs  dup\$" "$TMPD/err.txt"
	done
	check "$opt dup: nothing answered" [ ! -s "$TMPD/out.txt" ]
	check "$opt dup: the first unchanged" [ "$(msgs $D1)" -eq 2 ]
	check "$opt dup: the second unchanged" [ "$(msgs $D2)" -eq 2 ]
	check "$opt dup: no conversation made" [ "$(sql "SELECT count(*) FROM conversations")" -eq "$n0" ]
done

# An unknown title is an error that names it.
echo "again" | "$KVCHAT" $OPTS --resume nosuch >/dev/null 2>"$TMPD/err.txt"
check "--resume nosuch: exit status 1" [ $? -eq 1 ]
check "--resume nosuch: said" grep -qF "no conversation with id or title 'nosuch'" "$TMPD/err.txt"

# The id picks one; a title one conversation has still works.
kvrun "--resume $D1" "$TMPD/e.r1" $OPTS --resume "$D1" <"$TMPD/in.txt" >/dev/null
check "--resume $D1 continued the first" [ "$(msgs $D1)" -eq 4 ]
check "--resume $D1 left the second" [ "$(msgs $D2)" -eq 2 ]
kvrun "--resume other" "$TMPD/e.r2" $OPTS --resume other <"$TMPD/in.txt" >/dev/null
O=$(sql "SELECT id FROM conversations WHERE title = 'other'")
check "--resume other continued it" [ "$(msgs $O)" -eq 4 ]

# A long first line gives a title cut at a word's end, not inside a word
# (issue 26, newcomer 5).
echo "Tell me everything about the lighthouses of Brittany and their keepers" |
    kvrun "a long first line" "$TMPD/long.err" $OPTS >/dev/null
t=$(sql "SELECT title FROM conversations ORDER BY id DESC LIMIT 1")
echo "title: '$t'"
check "the title ends at a word's end ('$t')" [ "$t" = "Tell me everything about the lighthouses of" ]

# A prefix of a title names none, but the titles it starts are suggested
# with their ids (issue 26, newcomer 5).
O=$(sql "SELECT id FROM conversations WHERE title = 'other'")
echo "again" | "$KVCHAT" $OPTS --resume oth >/dev/null 2>"$TMPD/pre.err"
check "--resume oth: still refused" [ $? -ne 0 ]
cat "$TMPD/pre.err"
check "--resume oth: suggests 'other' with its id" grep -q "'other' (id $O)" "$TMPD/pre.err"
done_testing
