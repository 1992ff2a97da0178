#!/bin/sh
# test_chat_cli.sh: the non-interactive contract of the chat program (issue 4):
# one line in = one turn, each reply followed by an empty line on stdout, no
# stats or colour on stdout, --stats-json writes one parseable object per
# turn with the documented keys, bad usage exits 2, no model exits 1.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
M="$TMPD/m.gguf"
"$MKMODEL" -o "$M" --preset tiny --arch qwen2 --type f32 --vocab bpe --seed 5 --quiet \
	>/dev/null || { echo "FAIL: mkmodel"; exit 1; }
run() { "$KVCHAT" -m "$M" --temp 0 -n 6 --ctx 512 "$@"; }

# Usage errors exit 2 and say so on stderr.
"$KVCHAT" --no-such-option </dev/null >"$TMPD/o" 2>"$TMPD/e"
check "unknown option exits 2" [ $? -eq 2 ]
check "unknown option is named" grep -q "no-such-option" "$TMPD/e"
"$KVCHAT" -m "$M" --kv-type q9 </dev/null >/dev/null 2>&1
check "bad --kv-type exits 2" [ $? -eq 2 ]
"$KVCHAT" --help >"$TMPD/help"
check "--help exits 0" [ $? -eq 0 ]
for w in --db --session --resume --new --system --chat-template --temp --top-k --top-p \
    --min-p --repeat-penalty --seed --threads --ctx --kv-type --kv-budget --ctx-overflow \
    --device --gpu --stats-json --no-color --version /undo /retry /export KVCHAT_MODEL \
    XDG_DATA_HOME XDG_STATE_HOME NO_COLOR; do
	check "--help mentions $w" grep -q -e "$w" "$TMPD/help"
done

# No model anywhere and no -m: a clear error, exit 1.
env -u KVCHAT_MODEL "$KVCHAT" </dev/null >/dev/null 2>"$TMPD/e"
check "no model exits 1" [ $? -eq 1 ]
check "no model says where to put one" grep -qi "model" "$TMPD/e"

# Two lines in, two replies out.
printf 'Hello there.\nline one\\nline two\n' >"$TMPD/in"
run --db "$TMPD/a.db" --session two --stats-json "$TMPD/st.json" <"$TMPD/in" \
	>"$TMPD/out" 2>"$TMPD/err"
check "two turns exit 0" [ $? -eq 0 ]
printf 'Hello there.\n' | run --db "$TMPD/b.db" >"$TMPD/out1" 2>/dev/null
check "one turn exits 0" [ $? -eq 0 ]
n1=$(wc -c <"$TMPD/out1")
check "first reply + empty line is a prefix of the two-turn output" \
	cmp -s "$TMPD/out1" -n "$n1" "$TMPD/out"
check "a reply ends with an empty line" [ "$(tail -c 2 "$TMPD/out1" | od -An -c | tr -d ' ')" = '\n\n' ]
check "output ends with an empty line" [ "$(tail -c 2 "$TMPD/out" | od -An -c | tr -d ' ')" = '\n\n' ]
check "second reply is there" [ "$(wc -c <"$TMPD/out")" -gt "$((n1 + 2))" ]
check "no stats line on stdout" sh -c "! grep -q 'ttft' '$TMPD/out'"
check "no escape sequences on stdout" sh -c "! grep -q \"$(printf '\033')\" '$TMPD/out'"
check "two stats-json lines" [ "$(wc -l <"$TMPD/st.json")" -eq 2 ]

if command -v python3 >/dev/null 2>&1; then
	# Exact framing against the replies stored in the database, and the JSON keys.
	check "stdout is reply, newline, empty line for each stored reply" python3 - "$TMPD" <<'PY'
import json, sqlite3, sys
d = sys.argv[1]
db = sqlite3.connect(d + "/a.db")
rows = db.execute("SELECT role, text FROM messages ORDER BY seq").fetchall()
assert [r[0] for r in rows] == [1, 2, 1, 2], rows
assert rows[2][1] == "line one\nline two", rows[2]
want = "".join(r[1] + "\n\n" for r in rows if r[0] == 2)
got = open(d + "/out", encoding="utf-8").read()
assert got == want, (got, want)
keys = ["turn", "conversation_id", "title", "prompt_tokens", "reused_tokens",
        "prefill_tokens", "gen_tokens", "ttft_ms", "prefill_tps", "decode_tps",
        "context_used", "context_total", "resumed_from_snapshot", "rebuilt",
        "dropped_tokens", "interrupted", "prefill_tok_s", "decode_tok_s", "ctx_used",
        "ctx_size"]
lines = open(d + "/st.json").read().splitlines()
for i, l in enumerate(lines):
    o = json.loads(l)
    for k in keys:
        assert k in o, (k, o)
    assert o["turn"] == i + 1 and o["title"] == "two"
    assert isinstance(o["resumed_from_snapshot"], bool) and isinstance(o["ttft_ms"], (int, float))
    assert o["prefill_tokens"] == o["prompt_tokens"], o
    assert 0 < o["gen_tokens"] <= 6 and o["context_total"] == 512
a, b = json.loads(lines[0]), json.loads(lines[1])
assert b["reused_tokens"] == a["context_used"], (a, b)
PY
fi

# --session continues the same conversation in a new process.
printf 'third\n' | run --db "$TMPD/a.db" --session two --stats-json "$TMPD/st2.json" \
	>/dev/null 2>&1
check "continuing --session exits 0" [ $? -eq 0 ]
check "continued turn is resumed from the snapshot" \
	grep -q '"resumed_from_snapshot":true' "$TMPD/st2.json"
check "continued turn counts as turn 1 of the process" grep -q '"turn":1,' "$TMPD/st2.json"
done_testing
