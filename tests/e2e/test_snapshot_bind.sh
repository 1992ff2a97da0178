#!/bin/sh
# test_snapshot_bind.sh (issue 10 point 6): a KV snapshot chunk is bound to
# the tokens it was computed from and to the model that computed them
# (snapshot version 2: a hash of the fingerprint and of every token id up to
# the chunk's end, checked at restore). Before, another conversation's
# chunks were restored with only "covers 125 of 339 positions; computing the
# rest", another model's blob filed under this model's fingerprint was
# restored silently, and the replies changed. Each case here is planted with
# sqlite3, then the conversation continues: the snapshot must be refused with
# a notice, the cache rebuilt, the reply identical to an uninterrupted run,
# and the snapshot written afresh so the next start resumes from it.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
command -v python3 >/dev/null || skip "python3 is needed to rewrite a blob"

M1="$TMPD/m1.gguf"
M2="$TMPD/m2.gguf"
# Same shape, other weights: a blob of one fits the other's cache exactly.
"$MKMODEL" -o "$M1" --preset tiny --arch qwen2 --type f32 --vocab bpe --seed 31 --quiet >/dev/null &&
"$MKMODEL" -o "$M2" --preset tiny --arch qwen2 --type f32 --vocab bpe --seed 32 --quiet >/dev/null ||
	{ echo "FAIL: mkmodel"; exit 1; }
OPTS="--temp 0 -n 16 --ctx 1024"

printf '%s\n' "My name is Ada and I like tea." "I live in a small house by the sea." \
    "What do you know about me?" >"$TMPD/a123.txt"
echo "Say it again, in other words." >"$TMPD/a4.txt"
echo "And once more, shorter." >"$TMPD/a5.txt"
printf '%s\n' "Tell me about mountains." "Which one is the highest?" >"$TMPD/b12.txt"
cat "$TMPD/a123.txt" "$TMPD/a4.txt" "$TMPD/a5.txt" >"$TMPD/a_all.txt"

# reply DB TITLE N: hex of the Nth reply of a conversation, as stored.
reply() {
	sqlite3 "$1" "SELECT hex(m.text) FROM messages m JOIN conversations c ON c.id = m.conv_id
	    WHERE c.title = '$2' AND m.role = 2 ORDER BY m.seq LIMIT 1 OFFSET $(($3 - 1))"
}
# chat DB TITLE MODEL INPUT NAME: one process, stats in $TMPD/NAME.json, stderr in NAME.err
chat() {
	kvrun "$5" "$TMPD/$5.err" -m "$3" --db "$1" --session "$2" $OPTS \
	    --stats-json "$TMPD/$5.json" <"$4" >/dev/null
}

# The uninterrupted run: five turns in one process.
chat "$TMPD/ref.db" A "$M1" "$TMPD/a_all.txt" ref
R4=$(reply "$TMPD/ref.db" A 4)
R5=$(reply "$TMPD/ref.db" A 5)
check "the reference has 5 replies" [ -n "$R5" ]

# The stored state every case starts from: A after 3 turns, B after 2, model 1.
chat "$TMPD/base.db" A "$M1" "$TMPD/a123.txt" base_a
chat "$TMPD/base.db" B "$M1" "$TMPD/b12.txt" base_b
A=$(sqlite3 "$TMPD/base.db" "SELECT id FROM conversations WHERE title = 'A'")
B=$(sqlite3 "$TMPD/base.db" "SELECT id FROM conversations WHERE title = 'B'")
FP1=$(sqlite3 "$TMPD/base.db" "SELECT DISTINCT model_fp FROM kv_chunks")
check "one fingerprint in the base ($FP1)" [ "$(echo "$FP1" | wc -l)" -eq 1 ]
check "A has chunks" [ "$(sqlite3 "$TMPD/base.db" "SELECT count(*) FROM kv_chunks WHERE conv_id = $A")" -gt 0 ]

COLS="conv_id, pos0, pos1, part, n_parts, kv_type, model_fp, len, checksum, window, data"
# copy NAME SQL: base.db copied to NAME.db, then SQL run on it
copy() {
	cp "$TMPD/base.db" "$TMPD/$1.db"
	sqlite3 "$TMPD/$1.db" "$2" || fail "$1: planting with sqlite3"
}

# continue NAME WHAT: the 4th turn on NAME.db must refuse the planted
# snapshot with a notice (WHAT in it), rebuild, and answer as the
# uninterrupted run; the 5th turn, a new process, resumes from the snapshot
# the rebuild wrote.
continue_case() {
	chat "$TMPD/$1.db" A "$M1" "$TMPD/a4.txt" "$1_4"
	echo "$1: $(grep -i 'snapshot' "$TMPD/$1_4.err" | head -2)"
	check "$1: a notice says the snapshot is not used" grep -q "snapshot not used" "$TMPD/$1_4.err"
	check "$1: ... and why ($2)" grep -q "$2" "$TMPD/$1_4.err"
	check "$1: nothing restored from it" \
	    [ "$(jget "$TMPD/$1_4.json" 1 resumed_from_snapshot)" = false ]
	check "$1: rebuilt" [ "$(jget "$TMPD/$1_4.json" 1 rebuilt)" = true ]
	check "$1: not partly restored" sh -c "! grep -q 'covers .* positions' '$TMPD/$1_4.err'"
	check "$1: the 4th reply is the uninterrupted run's" [ "$(reply "$TMPD/$1.db" A 4)" = "$R4" ]
	chat "$TMPD/$1.db" A "$M1" "$TMPD/a5.txt" "$1_5"
	check "$1: the next start resumes from the rewritten snapshot" \
	    [ "$(jget "$TMPD/$1_5.json" 1 resumed_from_snapshot)" = true ]
	check "$1: ... without a rebuild" [ "$(jget "$TMPD/$1_5.json" 1 rebuilt)" = false ]
	check "$1: the 5th reply is the uninterrupted run's" [ "$(reply "$TMPD/$1.db" A 5)" = "$R5" ]
	check "$1: integrity" [ "$(sqlite3 "$TMPD/$1.db" 'PRAGMA integrity_check')" = ok ]
}

# 1. Another conversation's chunks (same model) in place of A's.
copy other_conv "DELETE FROM kv_chunks WHERE conv_id = $A;
    INSERT INTO kv_chunks ($COLS) SELECT $A, pos0, pos1, part, n_parts, kv_type, model_fp, len,
    checksum, window, data FROM kv_chunks WHERE conv_id = $B;"
continue_case other_conv "other tokens or by another model"

# 2. Another model's blob under this model's fingerprint: model 2 rebuilds
# A's very tokens (its own snapshot, its own fingerprint); that snapshot is
# then filed under model 1's fingerprint.
cp "$TMPD/base.db" "$TMPD/m2.db"
kvrun "model 2 rebuilds A" "$TMPD/m2.err" -m "$M2" --db "$TMPD/m2.db" --session A $OPTS </dev/null >/dev/null
FP2=$(sqlite3 "$TMPD/m2.db" "SELECT DISTINCT model_fp FROM kv_chunks WHERE conv_id = $A")
check "model 2 wrote A's snapshot under its own fingerprint ($FP2)" [ -n "$FP2" ] && [ "$FP2" != "$FP1" ]
copy other_model "DELETE FROM kv_chunks WHERE conv_id = $A;
    ATTACH '$TMPD/m2.db' AS m2;
    INSERT INTO kv_chunks ($COLS) SELECT $A, pos0, pos1, part, n_parts, kv_type, '$FP1', len,
    checksum, window, data FROM m2.kv_chunks WHERE conv_id = $A;"
continue_case other_model "other tokens or by another model"

# 3. A version 1 blob (32-byte header, no bind word), with a valid checksum.
cp "$TMPD/base.db" "$TMPD/v1.db"
python3 - "$TMPD/v1.db" "$A" <<'PY'
import sqlite3, struct, sys

M = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
rotl = lambda x, r: ((x << r) | (x >> (64 - r))) & M
def rnd(acc, v): return (rotl((acc + v * P2) & M, 31) * P1) & M
def merge(acc, v): return ((acc ^ rnd(0, v)) * P1 + P4) & M
def xxh64(b):  # XXH64, seed 0, from the published algorithm
    n, i = len(b), 0
    if n >= 32:
        v = [(P1 + P2) & M, P2, 0, (-P1) & M]
        while i + 32 <= n:
            for k in range(4):
                v[k] = rnd(v[k], struct.unpack_from('<Q', b, i + 8 * k)[0])
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M
        for k in range(4):
            h = merge(h, v[k])
    else:
        h = P5
    h = (h + n) & M
    while i + 8 <= n:
        h = (rotl(h ^ rnd(0, struct.unpack_from('<Q', b, i)[0]), 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (struct.unpack_from('<I', b, i)[0] * P1 & M), 23) * P2 + P3) & M
        i += 4
    while i < n:
        h = (rotl(h ^ (b[i] * P5 & M), 11) * P1) & M
        i += 1
    h = ((h ^ (h >> 33)) * P2) & M
    h = ((h ^ (h >> 29)) * P3) & M
    return h ^ (h >> 32)

db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT id, n_parts, len, checksum, data FROM kv_chunks WHERE conv_id = ?",
                  (int(sys.argv[2]),)).fetchall()
for rid, n_parts, ln, cs, data in rows:
    assert n_parts == 1, "a chunk in parts"
    assert struct.unpack('<q', struct.pack('<Q', xxh64(data)))[0] == cs, "checksum recomputed"
    assert data[:4] == b'KVC1' and struct.unpack_from('<I', data, 4)[0] == 2
    old = data[:4] + struct.pack('<I', 1) + data[8:32] + data[40:]
    s = struct.unpack('<q', struct.pack('<Q', xxh64(old)))[0]
    db.execute("UPDATE kv_chunks SET data = ?, len = ?, checksum = ? WHERE id = ?",
               (old, len(old), s, rid))
db.commit()
print("rewrote %d chunks as version 1" % len(rows))
PY
check "chunks rewritten as version 1" [ $? -eq 0 ]
continue_case v1 "version 1"

# A's own snapshot, untouched, still resumes (the bind word matches its own stream).
chat "$TMPD/base.db" A "$M1" "$TMPD/a4.txt" own
check "own snapshot: resumed" [ "$(jget "$TMPD/own.json" 1 resumed_from_snapshot)" = true ]
check "own snapshot: no notice" sh -c "! grep -q -e 'rebuilding' -e 'not used' '$TMPD/own.err'"
check "own snapshot: the 4th reply is the uninterrupted run's" [ "$(reply "$TMPD/base.db" A 4)" = "$R4" ]
done_testing
