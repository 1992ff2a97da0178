#!/bin/sh
# test_kv_q8.sh (issue 14, --kv-type q8_0): a conversation with a Q8_0 cache
# resumes from its snapshot with nothing recomputed, byte-identically to an
# uninterrupted run; its snapshot is 34/64 of an F16 one (plus headers);
# --stats-json reports the bytes per position (piped input runs no
# /commands, so /show's line is not checked here); a conversation saved
# with an F16 cache and resumed with --kv-type q8_0 is rebuilt (never read
# as Q8_0) and stored again in Q8_0.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }

tiny_model 23
OPTS="--temp 0 -n 24 --ctx 1024"
printf 'My name is Ada and I like tea.\nWhat do you know about me so far?\n' >"$TMPD/in2.txt"
echo "Say it all again, briefly." >"$TMPD/in3.txt"
cat "$TMPD/in2.txt" "$TMPD/in3.txt" >"$TMPD/in_all.txt"

last_reply() {
	sqlite3 "$1" "SELECT hex(m.text) FROM messages m JOIN conversations c ON c.id = m.conv_id
	    WHERE c.title = '$2' AND m.role = 2 ORDER BY m.seq DESC LIMIT 1"
}
# snap DB TITLE: "positions bytes kv_type" of a conversation's snapshot chunks
snap() {
	sqlite3 "$1" "SELECT max(k.pos1), sum(k.len), group_concat(DISTINCT k.kv_type) FROM kv_chunks k
	    JOIN conversations c ON c.id = k.conv_id WHERE c.title = '$2'"
}

for t in f16 q8_0; do
	kvrun "uninterrupted $t" "$TMPD/u$t.err" -m "$M" --db "$TMPD/u$t.db" --session whole --kv-type $t \
	    $OPTS --stats-json "$TMPD/u$t.json" <"$TMPD/in_all.txt" >"$TMPD/u$t.out"
done
kvrun "q8_0, two turns" "$TMPD/a.err" -m "$M" --db "$TMPD/r.db" --session split --kv-type q8_0 $OPTS \
    <"$TMPD/in2.txt" >/dev/null
kvrun "q8_0, resumed" "$TMPD/b.err" -m "$M" --db "$TMPD/r.db" --session split --kv-type q8_0 $OPTS \
    --stats-json "$TMPD/b.json" <"$TMPD/in3.txt" >/dev/null
check "resumed from the q8_0 snapshot" [ "$(jget "$TMPD/b.json" 1 resumed_from_snapshot)" = true ]
check "nothing but the new turn computed" \
    [ "$(jget "$TMPD/b.json" 1 prefill_tokens)" = "$(jget "$TMPD/b.json" 1 prompt_tokens)" ]
check "resumed reply byte-identical to the uninterrupted q8_0 run" \
    [ "$(last_reply "$TMPD/r.db" split)" = "$(last_reply "$TMPD/uq8_0.db" whole)" ]

# stats: type and bytes per position (tiny: 2 layers x K,V x 128 wide)
check "--stats-json kv_type q8_0" grep -q '"kv_type":"q8_0","kv_bytes_per_pos":544,"snapshot_bytes_per_pos":544' "$TMPD/b.json"
check "--stats-json kv_type f16" grep -q '"kv_type":"f16","kv_bytes_per_pos":1024,' "$TMPD/uf16.json"

# snapshot sizes: same positions, 34/64 of the rows plus one 40-byte header per chunk
set -- $(snap "$TMPD/uf16.db" whole | tr '|' ' ')
p16=$1 b16=$2 ty16=$3
set -- $(snap "$TMPD/uq8_0.db" whole | tr '|' ' ')
p8=$1 b8=$2 ty8=$3
n_chunks=$(sqlite3 "$TMPD/uq8_0.db" "SELECT count(DISTINCT pos0) FROM kv_chunks")
echo "snapshot: f16 $b16 bytes, q8_0 $b8 bytes for $p8 positions ($n_chunks chunks)"
check "chunk types recorded ($ty16, $ty8)" [ "$ty16" = f16 ] && [ "$ty8" = q8_0 ]
check "same positions snapshotted ($p16, $p8)" [ "$p16" = "$p8" ]
check "q8_0 rows are 34/64 of f16's" [ $(( (b8 - 40 * n_chunks) * 64 )) -eq $(( (b16 - 40 * n_chunks) * 34 )) ]

# saved with f16, resumed with q8_0: rebuilt, then stored as q8_0 and resumed from it
kvrun "f16, two turns" "$TMPD/c.err" -m "$M" --db "$TMPD/x.db" --session cross $OPTS <"$TMPD/in2.txt" >/dev/null
kvrun "resumed as q8_0" "$TMPD/d.err" -m "$M" --db "$TMPD/x.db" --session cross --kv-type q8_0 $OPTS \
    --stats-json "$TMPD/d.json" <"$TMPD/in3.txt" >/dev/null
check "f16 snapshot not restored into q8_0: rebuilt" [ "$(jget "$TMPD/d.json" 1 rebuilt)" = true ]
check "the chunks are q8_0 now" [ "$(snap "$TMPD/x.db" cross | cut -d'|' -f3)" = q8_0 ]
echo "One more thing." | "$KVCHAT" -m "$M" --db "$TMPD/x.db" --session cross --kv-type q8_0 $OPTS \
    --stats-json "$TMPD/e.json" >/dev/null 2>"$TMPD/e.err"
check "then resumed from the q8_0 snapshot" [ "$(jget "$TMPD/e.json" 1 resumed_from_snapshot)" = true ]
done_testing
