#!/bin/sh
# test_corrupt.sh (issue 4, "corruption and mismatch"): a snapshot that
# cannot be trusted is never restored. Flipped bytes in a stored chunk, a
# missing chunk, a snapshot saved with another model or another cache type:
# each is detected, a notice on stderr says so, and the conversation resumes
# by rebuilding its cache from the stored tokens, giving (greedy) the same
# reply as a rebuild from no snapshot at all.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
last_reply() { sqlite3 "$1" "SELECT hex(text) FROM messages WHERE role = 2 ORDER BY id DESC LIMIT 1"; }
integrity() { check "$1: integrity ok" [ "$(sqlite3 "$2" 'PRAGMA integrity_check')" = ok ]; }

M1="$TMPD/m1.gguf" M2="$TMPD/m2.gguf"
# Same shapes and vocabulary, different weights: only the fingerprint tells them apart.
"$MKMODEL" -o "$M1" --preset tiny --arch qwen2 --type f32 --vocab bpe --ctx 8192 --seed 31 >/dev/null &&
"$MKMODEL" -o "$M2" --preset tiny --arch qwen2 --type f32 --vocab bpe --ctx 8192 --seed 32 >/dev/null ||
	{ echo "FAIL: mkmodel"; exit 1; }
OPTS="--temp 0 -n 16 --ctx 1024"

printf '%s\n' "First message, to build some history." "第二条消息：继续。" "Third one." >"$TMPD/in3.txt"
echo "Now the fourth turn." >"$TMPD/in4.txt"
kvrun "base conversation" "$TMPD/base.err" -m "$M1" --db "$TMPD/base.db" --session c $OPTS \
    <"$TMPD/in3.txt" >/dev/null
nchunks=$(sqlite3 "$TMPD/base.db" "SELECT count(DISTINCT pos0) FROM kv_chunks")
check "one snapshot chunk per turn at least ($nchunks)" [ "$nchunks" -ge 3 ]

# copy NAME SQL: a copy of the base database with SQL applied.
copy() {
	sqlite3 "$TMPD/base.db" ".backup '$TMPD/$1.db'" &&
	{ [ -z "$2" ] || sqlite3 "$TMPD/$1.db" "$2"; }
}
# turn4 NAME MODEL [OPTS...]: the 4th turn on copy NAME; stats in NAME.json, stderr in NAME.err.
turn4() {
	_n=$1 _m=$2; shift 2
	kvrun "4th turn on $_n" "$TMPD/$_n.err" -m "$_m" --db "$TMPD/$_n.db" --session c $OPTS \
	    --stats-json "$TMPD/$_n.json" "$@" <"$TMPD/in4.txt" >/dev/null
}

# References: rebuilt from the stored tokens with no snapshot at all, per model.
copy ref1 "DELETE FROM kv_chunks"
turn4 ref1 "$M1"
check "no snapshot: rebuilt" [ "$(jget "$TMPD/ref1.json" 1 rebuilt)" = true ]
check "no snapshot: not resumed from one" [ "$(jget "$TMPD/ref1.json" 1 resumed_from_snapshot)" = false ]
copy ref2 "DELETE FROM kv_chunks"
turn4 ref2 "$M2"
check "another model's reply differs (the models are told apart)" \
    [ "$(last_reply "$TMPD/ref1.db")" != "$(last_reply "$TMPD/ref2.db")" ]
# And the intact snapshot restores (so the cases below fail for their own reason).
copy intact ""
turn4 intact "$M1"
check "intact snapshot: resumed" [ "$(jget "$TMPD/intact.json" 1 resumed_from_snapshot)" = true ]

# expect_rebuild NAME REF WHAT: NAME's 4th turn rebuilt with a notice and replied as REF.
expect_rebuild() {
	echo "$3: $(tr '\n' ' ' <"$TMPD/$1.err")"
	check "$3: rebuilt" [ "$(jget "$TMPD/$1.json" 1 rebuilt)" = true ]
	check "$3: not resumed from the snapshot" [ "$(jget "$TMPD/$1.json" 1 resumed_from_snapshot)" = false ]
	check "$3: a notice on stderr" grep -qi 'rebuil\|recomput' "$TMPD/$1.err"
	check "$3: same reply as a rebuild from nothing" [ "$(last_reply "$TMPD/$1.db")" = "$(last_reply "$TMPD/$2.db")" ]
	integrity "$3" "$TMPD/$1.db"
	kvrun "$3: 5th turn" "$TMPD/$1.5.err" -m "$4" --db "$TMPD/$1.db" --session c $OPTS \
	    --stats-json "$TMPD/$1.5.json" <"$TMPD/in4.txt" >/dev/null
	# The rebuild saved a fresh snapshot: the next process restores it.
	check "$3: the next process resumes from the rebuilt snapshot" \
	    [ "$(jget "$TMPD/$1.5.json" 1 resumed_from_snapshot)" = true ]
	check "$3: ... computing only its turn" \
	    [ "$(jget "$TMPD/$1.5.json" 1 prefill_tokens)" = "$(jget "$TMPD/$1.5.json" 1 prompt_tokens)" ]
}

# Flipped bytes in the middle of the first chunk's data (same length).
copy flip ""
before=$(sqlite3 "$TMPD/flip.db" "SELECT hex(data) FROM kv_chunks ORDER BY pos0, part LIMIT 1")
sqlite3 "$TMPD/flip.db" "UPDATE kv_chunks SET data = CAST(substr(data, 1, 40) || X'DEADBEEFDEADBEEF' ||
    substr(data, 49) AS BLOB) WHERE id = (SELECT id FROM kv_chunks ORDER BY pos0, part LIMIT 1)"
after=$(sqlite3 "$TMPD/flip.db" "SELECT hex(data) FROM kv_chunks ORDER BY pos0, part LIMIT 1")
check "bytes flipped, length kept" [ "$before" != "$after" -a ${#before} -eq ${#after} ]
turn4 flip "$M1"
expect_rebuild flip ref1 "flipped bytes" "$M1"

# Flipped bytes in the last chunk, the one closest to what is restored last.
copy flip2 "UPDATE kv_chunks SET data = CAST(X'00' || substr(data, 2) AS BLOB)
    WHERE id = (SELECT id FROM kv_chunks ORDER BY pos0 DESC, part DESC LIMIT 1)"
turn4 flip2 "$M1"
expect_rebuild flip2 ref1 "flipped first byte of the last chunk" "$M1"

# A chunk cut short.
copy short "UPDATE kv_chunks SET data = CAST(substr(data, 1, length(data) - 10) AS BLOB)
    WHERE id = (SELECT id FROM kv_chunks ORDER BY pos0, part LIMIT 1)"
turn4 short "$M1"
expect_rebuild short ref1 "truncated chunk" "$M1"

# A gap: the middle chunk is missing.
copy gap "DELETE FROM kv_chunks WHERE pos0 = (SELECT pos0 FROM kv_chunks ORDER BY pos0 LIMIT 1 OFFSET 1)"
turn4 gap "$M1"
expect_rebuild gap ref1 "missing chunk" "$M1"

# Another model: the snapshot is not restored into it.
copy other ""
turn4 other "$M2"
expect_rebuild other ref2 "another model" "$M2"
check "another model: the notice names the model" grep -qi 'model\|fingerprint' "$TMPD/other.err"

# Another cache type.
copy f32 ""
turn4 f32 "$M1" --kv-type f32
echo "f32 cache: $(tr '\n' ' ' <"$TMPD/f32.err")"
check "f32 cache: rebuilt" [ "$(jget "$TMPD/f32.json" 1 rebuilt)" = true ]
check "f32 cache: a notice" grep -qi 'rebuil\|recomput' "$TMPD/f32.err"
integrity "f32 cache" "$TMPD/f32.db"
done_testing
