#!/bin/sh
# test_long_input.sh (issue 10 point 3): a pasted megabyte does not stall the
# chat. Before, the message was tokenized before its length was checked, and
# the Qwen2 pre-tokenizer was quadratic on digit runs: 1 MB of digits took
# over 300 s. Now a message longer than the context times the longest token
# (in bytes) is refused before it is tokenized, and one that passes that
# check but not the token count is tokenized in linear time and refused.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
M="$TMPD/m.gguf"
"$MKMODEL" -o "$M" --preset tiny --arch qwen2 --type f32 --vocab bpe --ctx 65536 --seed 7 \
	--quiet >/dev/null || { echo "FAIL: mkmodel"; exit 1; }
python3 -c "import sys; sys.stdout.write('1234567890' * 104858 + '\n')" >"$TMPD/digits.txt"
check "1 MB of digits" [ "$(wc -c <"$TMPD/digits.txt")" -gt 1048576 ]

# ms since the epoch
now_ms() { python3 -c 'import time; print(int(time.time() * 1000))'; }

# run CTX NAME: pipe the megabyte to the chat at --ctx CTX; sets rc and ms.
run() {
	t0=$(now_ms)
	timeout 120 "$KVCHAT" -m "$M" --db "$TMPD/c.db" --temp 0 -n 4 --ctx "$1" \
	    --stats-json "$TMPD/$2.json" <"$TMPD/digits.txt" >"$TMPD/$2.out" 2>"$TMPD/$2.err"
	rc=$?
	ms=$(( $(now_ms) - t0 ))
	echo "--ctx $1: exit $rc in $ms ms: $(cat "$TMPD/$2.err")"
}

# Refused by its length in bytes, before tokenizing: fast whatever the
# tokenizer costs. The bounds are a loaded machine's (a sanitizer build at
# a load of 10 or more takes seconds to start): the quadratic scanner they
# guard against took over 300 s, and the messages tell the two refusals
# apart.
run 4096 bytes
check "refused (exit $rc)" [ "$rc" -eq 1 ]
check "refused within 10 s ($ms ms)" [ "$ms" -lt 10000 ]
check "the message says why, in bytes" grep -q "input too long: 1048580 bytes" "$TMPD/bytes.err"
check "... and names the context" grep -q "context of 4096 positions" "$TMPD/bytes.err"
check "no turn was written" [ ! -s "$TMPD/bytes.json" ]
check "no reply on stdout" [ ! -s "$TMPD/bytes.out" ]

# At --ctx 60000 the byte bound (60000 x the longest token) lets it through:
# tokenized (1 MB of single-digit tokens), then refused by its token count.
run 60000 tokens
check "refused (exit $rc)" [ "$rc" -eq 1 ]
check "tokenizing 1 MB of digits takes seconds at most ($ms ms)" [ "$ms" -lt 30000 ]
check "refused by the token count" grep -q "input too long: [0-9]* tokens" "$TMPD/tokens.err"

check "nothing stored" [ "$(sqlite3 "$TMPD/c.db" 'SELECT count(*) FROM messages')" -eq 0 ]
# The chat still works after it.
echo "Hello there." | "$KVCHAT" -m "$M" --db "$TMPD/c.db" --temp 0 -n 4 --ctx 4096 \
    >"$TMPD/ok.out" 2>"$TMPD/ok.err"
check "a short message is answered (exit $?)" [ -s "$TMPD/ok.out" ]
done_testing
