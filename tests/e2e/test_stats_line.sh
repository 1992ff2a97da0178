#!/bin/sh
# test_stats_line.sh (issue 13 "commands as people type them"): the stats
# line says the turn's new tokens and the history reused from the cache
# apart ("prompt N new + R reused"), the positions computed only when they
# differ from the new tokens, and why a reply stopped when it was not the
# model ending its turn ("stopped: max tokens", "stopped: context full";
# "stopped: interrupted" is in test_input_keys.sh). The figures are checked
# against --stats-json, whose "stop" says the same reason ("eos" when the
# model ended its turn).
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
tiny_model 61
DB="$TMPD/s.db"
ST="$TMPD/st.json"
stats() { grep '^\[ttft' "$1" | sed -n "${2}p"; }
# has FILE N TEXT / lacks FILE N TEXT: the Nth stats line of FILE holds TEXT, or not
has() { stats "$1" "$2" | grep -qF -- "$3"; }
lacks() { ! has "$@"; }

# Greedy on this fixture: replies run on past any small cap.
printf 'hello\ntell me a story\n' | "$KVCHAT" -m "$M" --db "$DB" --new s --temp 0 -n 6 \
    --stats-json "$ST" >/dev/null 2>"$TMPD/err.txt"
check "two turns run" [ $? -eq 0 ]
cat "$TMPD/err.txt"
for t in 1 2; do
	p=$(jget "$ST" $t prompt_tokens) r=$(jget "$ST" $t reused_tokens)
	check "turn $t: 'prompt $p new + $r reused'" has "$TMPD/err.txt" $t "prompt $p new + $r reused,"
	check "turn $t: no 'computed' when only the new tokens were" lacks "$TMPD/err.txt" $t computed
	check "turn $t hit the cap (6 tokens)" [ "$(jget "$ST" $t gen_tokens)" -eq 6 ]
	check "turn $t: stopped: max tokens" has "$TMPD/err.txt" $t "| stopped: max tokens]"
	check "turn $t: --stats-json stop is max tokens" [ "$(jget "$ST" $t stop)" = '"max tokens"' ]
done
check "turn 2 reuses turn 1" [ "$(jget "$ST" 2 reused_tokens)" -gt 0 ]

# At temperature 1 the model ends its turn after some tokens for most seeds:
# the first seed (of 40) whose reply ends before 40 tokens is used. No
# reason is given, even when the cap equals the reply's length (its last
# token is the end of turn, so the model stopped, not the cap).
seed=1
while :; do
	rm -f "$TMPD/ste.json"
	printf 'hello\n' | "$KVCHAT" -m "$M" --db "$DB" --new "e$seed" --temp 1 --seed $seed -n 40 \
	    --stats-json "$TMPD/ste.json" >/dev/null 2>"$TMPD/erre.txt"
	g=$(jget "$TMPD/ste.json" 1 gen_tokens)
	[ "${g:-40}" -lt 40 ] || [ $seed -ge 40 ] && break
	seed=$((seed + 1))
done
cat "$TMPD/erre.txt"
check "the model ended its turn ($g < 40 tokens)" [ "$g" -lt 40 ]
check "ended by the model: no stop reason" lacks "$TMPD/erre.txt" 1 stopped
check "ended by the model: --stats-json stop is eos" [ "$(jget "$TMPD/ste.json" 1 stop)" = '"eos"' ]
printf 'hello\n' | "$KVCHAT" -m "$M" --db "$DB" --new e2 --temp 1 --seed $seed -n "$g" \
    --stats-json "$TMPD/ste2.json" >/dev/null 2>"$TMPD/erre2.txt"
cat "$TMPD/erre2.txt"
check "same reply with -n $g" [ "$(jget "$TMPD/ste2.json" 1 gen_tokens)" -eq "$g" ]
check "end of turn as the cap's last token: no stop reason" lacks "$TMPD/erre2.txt" 1 stopped

# A full context: no cap, a small context; the reply stops at its end.
printf 'tell me a story\n' | "$KVCHAT" -m "$M" --db "$DB" --new full --temp 0 --ctx 48 \
    --stats-json "$TMPD/st2.json" >/dev/null 2>"$TMPD/err2.txt"
cat "$TMPD/err2.txt"
check "context full said" grep -qF '| stopped: context full]' "$TMPD/err2.txt"
check "the context is full" [ "$(jget "$TMPD/st2.json" 1 context_used)" -eq 48 ]
check "--stats-json stop is context full" [ "$(jget "$TMPD/st2.json" 1 stop)" = '"context full"' ]

# A drop of old exchanges recomputes more than the new tokens: the line
# says how many were computed.
printf 'one two three\nfour five six\nseven eight\n' | "$KVCHAT" -m "$M" --db "$DB" --new d \
    --temp 0 -n 8 --ctx 64 --stats-json "$TMPD/st3.json" >/dev/null 2>"$TMPD/err3.txt"
cat "$TMPD/err3.txt"
p=$(jget "$TMPD/st3.json" 2 prompt_tokens) c=$(jget "$TMPD/st3.json" 2 prefill_tokens)
r=$(jget "$TMPD/st3.json" 2 reused_tokens)
check "turn 2 dropped old exchanges" [ "$(jget "$TMPD/st3.json" 2 dropped_tokens)" -gt 0 ]
check "after a drop: 'prompt $p new + $r reused, $c computed'" has "$TMPD/err3.txt" 2 \
    "prompt $p new + $r reused, $c computed,"
done_testing
