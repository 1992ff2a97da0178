#!/bin/sh
# test_set_ranges.sh (issue 13 "commands as people type them"): the
# settings' ranges (temperature >= 0, 0 < top_p <= 1, top_k >= 0, min_p in
# [0, 1], repeat_penalty > 0, max_tokens >= 0) are one table that the chat's
# command line, kvchat generate and /set all apply: a value out of range is
# refused with a message naming the option and the range, and is not
# stored; the borders are taken.
. "$top_srcdir/tests/e2e/lib.sh"
. "$top_srcdir/tests/e2e/lib_tmux.sh"
tiny_model 61
DB="$TMPD/s.db"

# refused OPT VALUE RANGE [LABEL]: the chat and generate refuse it as a
# usage error naming RANGE (and the option as LABEL: -n for --max-tokens).
refused() {
	"$KVCHAT" -m "$M" --db "$DB" "$1" "$2" </dev/null >/dev/null 2>"$TMPD/err"
	_rc=$?
	check "$1 $2: exit 2 (got $_rc)" [ "$_rc" -eq 2 ]
	check "$1 $2: the message names the option and the range" \
	    grep -qF -- "${4:-$1}: must be $3, not '$2'" "$TMPD/err"
	"$KVCHAT" generate -m "$M" "$1" "$2" -n 1 >/dev/null 2>&1
	_rc=$?
	check "generate $1 $2: exit 2 (got $_rc)" [ "$_rc" -eq 2 ]
}
refused --temp -1 ">= 0"
refused --temp inf ">= 0"
refused --top-p 2 "in (0, 1]"
refused --top-p 0 "in (0, 1]"
refused --top-k -1 ">= 0"
refused --min-p 1.5 "in [0, 1]"
refused --min-p -0.1 "in [0, 1]"
refused --repeat-penalty 0 "> 0"
refused --max-tokens -1 ">= 0" -n
check "nothing refused was stored" [ ! -s "$DB" ] || [ "$(sqlite3 "$DB" 'SELECT count(*) FROM conversations')" -eq 0 ]

# The borders are taken and stored.
printf 'hi\n' | "$KVCHAT" -m "$M" --db "$DB" --new edge --temp 0 --top-p 1 --top-k 0 --min-p 1 \
    --repeat-penalty 0.5 -n 2 >/dev/null 2>"$TMPD/err"
check "borders taken (exit $?)" [ $? -eq 0 ] || cat "$TMPD/err" >&2
settings() { sqlite3 "$DB" "SELECT settings FROM conversations WHERE title = '$1'"; }
s=$(settings edge)
echo "stored: $s"
check "borders stored" [ "$s" = "temp=0;top_p=1;top_k=0;min_p=1;repeat_penalty=0.5;seed=random;max_tokens=2" ]

# /set: the same ranges; a refused value changes nothing.
start -m "$M" --db "$DB" --session edge --temp 0 -n 2
wait_for "the prompt" prompt_ready
cmd "/set temperature -1"
check "/set temperature -1 refused with the range" on_screen "temperature: must be >= 0, not '-1'"
cmd "/set top_p 2"
check "/set top_p 2 refused with the range" on_screen "top_p: must be in (0, 1], not '2'"
cmd "/set repeat_penalty 0"
check "/set repeat_penalty 0 refused" on_screen "repeat_penalty: must be > 0, not '0'"
cmd "/set min_p 2"
check "/set min_p 2 refused" on_screen "min_p: must be in [0, 1], not '2'"
check "refused /set values not stored" [ "$(settings edge)" = "$s" ]
cmd "/set top_p 0.5"
check "/set top_p 0.5 stored" sh -c "sqlite3 '$DB' \"SELECT settings FROM conversations WHERE title = 'edge'\" | grep -q 'top_p=0.5;'"
text "/quit"; keys Enter
wait_for "exit 0" on_screen "KVCHAT-EXIT:0"
done_testing
