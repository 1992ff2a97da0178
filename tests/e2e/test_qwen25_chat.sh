#!/bin/sh
# test_qwen25_chat.sh (issue 26): the whole chat path on a real chat model,
# Qwen2.5-Coder-0.5B-Instruct (its ChatML template in the file, fetched once
# per machine by scripts/fetch-models.sh; SKIP without it).
#  - a three-turn en/zh conversation through the piped REPL at --temp 0:
#    the stored stream up to each user message is, id for id, what
#    llama-server --jinja renders and tokenizes for the same messages
#    (tests/e2e/qwen25_llamacpp.json, recorded by qwen25_record.py: the
#    file's own Jinja template, default system prompt included), and each
#    greedy reply is llama.cpp's (its top-2 gaps are recorded beside);
#  - the same conversation cut in two processes prints byte for byte what
#    one process printed, the second restoring its snapshot (no rebuild).
. "$top_srcdir/tests/e2e/lib.sh"
have_qwen25 || skip "no $QWEN25 (scripts/fetch-models.sh fetches it)"
REF="$top_srcdir/tests/e2e/qwen25_llamacpp.json"
Q=$QWEN25

python3 - "$REF" >"$TMPD/in.txt" <<'PY' || { echo "FAIL: cannot read $REF"; exit 1; }
import json, sys
for t in json.load(open(sys.argv[1], encoding="utf-8"))["turns"]:
    print(t["user"])
PY
N=$(wc -l <"$TMPD/in.txt")
chat() { # DB STATS < input > output: llama-server's greedy settings
	"$KVCHAT" -m "$Q" --db "$1" --session qwen --temp 0 --repeat-penalty 1 -n 16 --threads 2 \
	    --ctx 1024 --stats-json "$2"
}
chat "$TMPD/a.db" "$TMPD/a.json" <"$TMPD/in.txt" >"$TMPD/a.out" 2>"$TMPD/a.err" ||
	{ fail "the $N-turn chat"; cat "$TMPD/a.err" >&2; }
check "no template fallback notice" sh -c "! grep -qi 'template' '$TMPD/a.err'"
check "$N turns" [ "$(wc -l <"$TMPD/a.json")" -eq "$N" ]

# The stored stream against llama.cpp's rendering, turn by turn.
python3 - "$TMPD/a.db" "$REF" <<'PY' || fail "the conversation is not llama.cpp's"
import json, sqlite3, struct, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT role, tokens, text FROM messages ORDER BY conv_id, seq").fetchall()
ref = json.load(open(sys.argv[2], encoding="utf-8"))["turns"]
ids = lambda b: list(struct.unpack("<%di" % (len(b) // 4), b))
stream, k, bad = [], 0, 0
for role, blob, text in rows:
    stream += ids(blob)
    if role == 1:	# a user message: the prompt of turn k
        want = ref[k]["prompt_ids"]
        if stream != want:
            n = next((i for i, (a, b) in enumerate(zip(stream, want)) if a != b), min(len(stream), len(want)))
            print("turn %d: prompt differs at position %d of %d/%d: kvchat %s, llama.cpp %s"
                  % (k + 1, n, len(stream), len(want), stream[n:n + 8], want[n:n + 8]))
            bad += 1
        else:
            print("turn %d: %d prompt ids equal llama-server's" % (k + 1, len(want)))
    elif role == 2:
        got, want = ids(blob), ref[k]["reply_ids"]
        # llama.cpp's list leaves out the end-of-turn id it stopped at
        if got[:len(want)] != want or len(got) - len(want) not in (0, 1):
            print("turn %d: reply %s, llama.cpp %s (%r / %r)" % (k + 1, got, want, text, ref[k]["reply_text"]))
            bad += 1
        k += 1
if k != len(ref):
    print("%d replies, %d recorded" % (k, len(ref)))
    bad += 1
sys.exit(1 if bad else 0)
PY
ok
# what was printed is llama.cpp's text, each reply then an empty line
python3 - "$TMPD/a.out" "$REF" <<'PY' || fail "printed replies are not llama.cpp's text"
import json, sys
out = open(sys.argv[1], encoding="utf-8").read()
want = "".join(t["reply_text"] + "\n\n" for t in json.load(open(sys.argv[2], encoding="utf-8"))["turns"])
print(repr(out)); print(repr(want))
sys.exit(0 if out == want else 1)
PY
ok

# Cut in two processes: the second resumes from the stored snapshot.
head -n $((N - 1)) "$TMPD/in.txt" | chat "$TMPD/b.db" "$TMPD/b1.json" >"$TMPD/b1.out" 2>"$TMPD/b1.err" ||
	fail "first process"
tail -n 1 "$TMPD/in.txt" | chat "$TMPD/b.db" "$TMPD/b2.json" >"$TMPD/b2.out" 2>"$TMPD/b2.err" ||
	fail "second process"
cat "$TMPD/b1.out" "$TMPD/b2.out" >"$TMPD/b.out"
check "resumed chat is byte-identical" cmp "$TMPD/a.out" "$TMPD/b.out"
check "the second process restored the snapshot" [ "$(jget "$TMPD/b2.json" 1 resumed_from_snapshot)" = true ]
check "  ... without a rebuild" [ "$(jget "$TMPD/b2.json" 1 rebuilt)" = false ]
reused=$(jget "$TMPD/b2.json" 1 reused_tokens)
check "  ... reusing the history ($reused) and computing only the new turn" \
    [ "$reused" -gt 0 -a "$(jget "$TMPD/b2.json" 1 prefill_tokens)" = "$(jget "$TMPD/b2.json" 1 prompt_tokens)" ]
done_testing
