#!/bin/sh
# test_qwen25_kv.sh (issue 26): Qwen2.5-Coder-0.5B-Instruct's chat with the
# other cache settings (SKIP without the model, as test_qwen25_chat.sh).
#  - --kv-type q8_0: the first prompt is llama-server --jinja's ids
#    (tests/e2e/qwen25_llamacpp.json), every turn computes only its own
#    tokens, and the conversation cut in two processes prints byte for
#    byte what one process printed, the second restoring its q8_0 snapshot;
#  - --ctx-overflow slide at --ctx 64: six en/zh turns slide at least
#    twice, every turn computes only its own prompt, and the same turns in
#    two processes (the cut after a slide) print what one printed, the
#    second restoring the slid snapshot.
. "$top_srcdir/tests/e2e/lib.sh"
have_qwen25 || skip "no $QWEN25 (scripts/fetch-models.sh fetches it)"
REF="$top_srcdir/tests/e2e/qwen25_llamacpp.json"
Q=$QWEN25

# run NAME DB OPTS < input: one process of the chat, greedy as llama-server
run() {
	_n=$1 _db=$2
	shift 2
	"$KVCHAT" -m "$Q" --db "$_db" --session s --temp 0 --repeat-penalty 1 --threads 2 \
	    --stats-json "$TMPD/$_n.json" "$@" >"$TMPD/$_n.out" 2>"$TMPD/$_n.err" ||
		{ fail "$_n: exit status $?"; cat "$TMPD/$_n.err" >&2; }
}
# own_prompts NAME: every turn computed only its own prompt, nothing dropped
own_prompts() {
	_bad=0 _t=1
	while [ $_t -le "$(wc -l <"$TMPD/$1.json")" ]; do
		[ "$(jget "$TMPD/$1.json" $_t prefill_tokens)" = "$(jget "$TMPD/$1.json" $_t prompt_tokens)" ] ||
			_bad=$((_bad + 1))
		[ "$(jget "$TMPD/$1.json" $_t dropped_tokens)" = 0 ] || _bad=$((_bad + 1))
		_t=$((_t + 1))
	done
	[ $_bad -eq 0 ]
}
# resumed NAME: the process's first turn restored its snapshot
resumed() {
	[ "$(jget "$TMPD/$1.json" 1 resumed_from_snapshot)" = true ] &&
	    [ "$(jget "$TMPD/$1.json" 1 rebuilt)" = false ] &&
	    [ "$(jget "$TMPD/$1.json" 1 prefill_tokens)" = "$(jget "$TMPD/$1.json" 1 prompt_tokens)" ]
}

# --kv-type q8_0
python3 - "$REF" >"$TMPD/in.txt" <<'PY' || { echo "FAIL: cannot read $REF"; exit 1; }
import json, sys
for t in json.load(open(sys.argv[1], encoding="utf-8"))["turns"]:
    print(t["user"])
PY
Q8="--kv-type q8_0 -n 12 --ctx 1024"
run q8 "$TMPD/q8.db" $Q8 <"$TMPD/in.txt"
check "q8_0: three turns" [ "$(wc -l <"$TMPD/q8.json")" -eq 3 ]
check "q8_0: every turn computed only its own tokens" own_prompts q8
python3 - "$TMPD/q8.db" "$REF" <<'PY' || fail "q8_0: the first prompt is not llama-server's"
import json, sqlite3, struct, sys
b = sqlite3.connect(sys.argv[1]).execute("SELECT tokens FROM messages ORDER BY seq LIMIT 1").fetchone()[0]
got = list(struct.unpack("<%di" % (len(b) // 4), b))
want = json.load(open(sys.argv[2], encoding="utf-8"))["turns"][0]["prompt_ids"]
print(len(got), len(want))
sys.exit(0 if got == want else 1)
PY
ok
head -n 2 "$TMPD/in.txt" | run q8a "$TMPD/q8r.db" $Q8
tail -n 1 "$TMPD/in.txt" | run q8b "$TMPD/q8r.db" $Q8
cat "$TMPD/q8a.out" "$TMPD/q8b.out" >"$TMPD/q8r.out"
check "q8_0: resumed chat is byte-identical" cmp "$TMPD/q8.out" "$TMPD/q8r.out"
check "q8_0: the second process restored its q8_0 snapshot" resumed q8b

# --ctx-overflow slide in a small context
cat >"$TMPD/slide.txt" <<'EOF'
Name one colour.
再说一种颜色。
Name one fruit.
再说一种水果。
Name one animal.
再说一种动物。
EOF
SL="--ctx-overflow slide --ctx 64 -n 10"
run sl "$TMPD/sl.db" $SL <"$TMPD/slide.txt"
slides=0 t=1
while [ $t -le 6 ]; do
	[ "$(jget "$TMPD/sl.json" $t slid_tokens)" -gt 0 ] && slides=$((slides + 1))
	t=$((t + 1))
done
echo "slide: $slides slides in 6 turns at --ctx 64"
check "slide: six turns" [ "$(wc -l <"$TMPD/sl.json")" -eq 6 ]
check "slide: slid at least twice ($slides)" [ "$slides" -ge 2 ]
check "slide: every turn computed only its own prompt" own_prompts sl
# cut after the first slide
cut=1
while [ $cut -le 6 ] && [ "$(jget "$TMPD/sl.json" $cut slid_tokens)" -eq 0 ]; do
	cut=$((cut + 1))
done
head -n $cut "$TMPD/slide.txt" | run sla "$TMPD/slr.db" $SL
tail -n $((6 - cut)) "$TMPD/slide.txt" | run slb "$TMPD/slr.db" $SL
cat "$TMPD/sla.out" "$TMPD/slb.out" >"$TMPD/slr.out"
check "slide: resumed after turn $cut (a slide) is byte-identical" cmp "$TMPD/sl.out" "$TMPD/slr.out"
check "slide: the second process restored the slid snapshot" resumed slb
done_testing
