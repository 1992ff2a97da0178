#!/bin/sh
# test_recover.sh (issue 10, point 8): a damaged database. A truncated file
# is refused with one message that names its path once and points to
# `kvchat recover`; `kvchat recover IN OUT` copies every row that still
# reads (here: all but those on one destroyed page of messages) into a new
# database that passes the integrity check and resumes; IN is not written.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
tiny_model 59
DB="$TMPD/s.db"
OPTS="--temp 0 -n 12 --ctx 512"
for i in 1 2 3 4 5 6 7 8; do
	# Long lines: messages then fill several pages, of which one is destroyed below.
	w="words to fill the page of messages, so that this table spans several pages"
	printf 'Message one of conversation %s, %s %s %s.\nA second one, %s %s.\nThird, %s.\n' \
	    $i "$w" "$w" "$w" "$w" "$w" "$w" |
	    "$KVCHAT" -m "$M" $OPTS --db "$DB" --session "c$i" >/dev/null 2>"$TMPD/mk.err" ||
		{ echo "FAIL: making conversation $i"; cat "$TMPD/mk.err"; exit 1; }
done
total=$(command sqlite3 "$DB" "SELECT count(*) FROM messages")
command sqlite3 "$DB" "SELECT id || '|' || conv_id || '|' || text FROM messages" | sort >"$TMPD/orig.txt"
echo "messages: $total"

# Truncated: refused, pointing to recover, the path printed once.
cp "$DB" "$TMPD/t.db"
sz=$(stat -c %s "$TMPD/t.db")
truncate -s $((sz * 6 / 10)) "$TMPD/t.db"
echo "Hi." | "$KVCHAT" -m "$M" $OPTS --db "$TMPD/t.db" --resume c1 >/dev/null 2>"$TMPD/t.err"
rc=$?
echo "truncated: exit $rc: $(cat "$TMPD/t.err")"
check "a truncated database is refused (exit $rc)" [ $rc -ne 0 ]
check "the message points to kvchat recover" grep -q "kvchat recover" "$TMPD/t.err"
check "and names the path once" [ "$(grep -o "$TMPD/t.db" "$TMPD/t.err" | wc -l)" -eq 1 ]
kvrun "recover runs on a truncated file" "$TMPD/tr.err" recover "$TMPD/t.db" "$TMPD/t-out.db" >"$TMPD/tr.out"
cat "$TMPD/tr.out"
check "its conversations are salvaged" \
    [ "$(command sqlite3 "$TMPD/t-out.db" 'SELECT count(*) FROM conversations')" -ge 1 ]

# One page of messages destroyed.
page=$(command sqlite3 "$DB" "SELECT pageno FROM dbstat WHERE name = 'messages' AND
    pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET (SELECT count(*) / 2 FROM dbstat
    WHERE name = 'messages' AND pagetype = 'leaf')")
echo "destroying page $page of $(command sqlite3 "$DB" "SELECT count(*) FROM dbstat WHERE name = 'messages'") of messages"
[ -n "$page" ] || skip "this sqlite3 has no dbstat table to find a page of messages"
cp "$DB" "$TMPD/d.db"
head -c 4096 /dev/zero | tr '\0' '\245' |
    dd of="$TMPD/d.db" bs=4096 seek=$((page - 1)) conv=notrunc 2>/dev/null
cksum "$TMPD/d.db" >"$TMPD/d.sum"
kvrun "recover IN OUT" "$TMPD/r.err" recover "$TMPD/d.db" "$TMPD/out.db" >"$TMPD/r.out"
cat "$TMPD/r.out"
got=$(command sqlite3 "$TMPD/out.db" "SELECT count(*) FROM messages")
lost=$(sed -n 's/^lost: \([0-9]*\) unreadable rows.*/\1/p' "$TMPD/r.out")
echo "recovered $got of $total messages, $lost reported lost"
check "most messages recovered ($got of $total)" [ "$got" -gt 0 ] && [ "$got" -lt "$total" ]
check "the loss is reported" [ -n "$lost" ] && [ $((got + lost)) -eq "$total" ]
command sqlite3 "$TMPD/out.db" "SELECT id || '|' || conv_id || '|' || text FROM messages" | sort >"$TMPD/got.txt"
check "every recovered message is as it was" [ -z "$(comm -13 "$TMPD/orig.txt" "$TMPD/got.txt")" ]
check "the recovered database is sound" [ "$(command sqlite3 "$TMPD/out.db" 'PRAGMA integrity_check')" = ok ]
check "IN was not written" sh -c "cksum '$TMPD/d.db' | cmp -s - '$TMPD/d.sum'"
echo "Go on." | kvrun "a recovered conversation resumes" "$TMPD/res.err" -m "$M" $OPTS \
    --db "$TMPD/out.db" --resume c8 >/dev/null
"$KVCHAT" recover "$TMPD/d.db" "$TMPD/out.db" >/dev/null 2>"$TMPD/r2.err"
check "an existing OUT is refused" [ $? -ne 0 ]

# A page of conversations destroyed (issue 26, newcomer 2): before, every
# message of a conversation whose row was lost was refused too ("recovered
# 0 conversations, 0 messages"); now each goes under a placeholder
# conversation with its id, titled for it, and the messages are all kept.
cpage=$(command sqlite3 "$DB" "SELECT pageno FROM dbstat WHERE name = 'conversations' AND
    pagetype = 'leaf' ORDER BY pageno LIMIT 1")
cp "$DB" "$TMPD/dc.db"
head -c 4096 /dev/zero | tr '\0' '\245' |
    dd of="$TMPD/dc.db" bs=4096 seek=$((cpage - 1)) conv=notrunc 2>/dev/null
kvrun "recover with the conversations' page destroyed" "$TMPD/rc.err" recover "$TMPD/dc.db" \
    "$TMPD/outc.db" >"$TMPD/rc.out"
cat "$TMPD/rc.out"
gotc=$(command sqlite3 "$TMPD/outc.db" "SELECT count(*) FROM messages")
check "every message recovered ($gotc of $total)" [ "$gotc" -eq "$total" ]
check "the placeholders are reported" grep -q "had lost their row" "$TMPD/rc.out"
command sqlite3 "$TMPD/outc.db" "SELECT id || '|' || conv_id || '|' || text FROM messages" |
    sort >"$TMPD/gotc.txt"
check "each message as it was, under its conversation's id" cmp -s "$TMPD/orig.txt" "$TMPD/gotc.txt"
c1=$(command sqlite3 "$DB" "SELECT id FROM conversations WHERE title = 'c1'")
check "a placeholder is named for its id" [ "$(command sqlite3 "$TMPD/outc.db" \
    "SELECT title FROM conversations WHERE id = $c1")" = "recovered conversation $c1" ]
check "the recovered database is sound" \
    [ "$(command sqlite3 "$TMPD/outc.db" 'PRAGMA integrity_check')" = ok ]
echo "Go on." | kvrun "a placeholder conversation resumes" "$TMPD/resc.err" -m "$M" $OPTS \
    --db "$TMPD/outc.db" --resume "$c1" >/dev/null
done_testing
