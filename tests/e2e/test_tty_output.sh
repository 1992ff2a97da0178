#!/bin/sh
# test_tty_output.sh (issue 26, newcomer 5): what the terminal shows of a
# turn, in a tmux pane 40 columns wide.
#  1. Ctrl-C on a typed line wrapped over two rows, with the cursor on the
#     first: the whole line stays as typed with "^C" at its end, and the new
#     prompt is drawn on a row of its own (it was drawn over the line's
#     second row, whose text was left behind it).
#  2. A reply is wrapped by kvchat, between words, never by the terminal:
#     no row of it is one the terminal wrapped (tmux joins those with -J).
#     With a real model (when fetched), no word shorter than a row is cut
#     across two rows, checked against the stored reply.
#  3. Ctrl-C during a reply stops it at once: nothing is printed after the
#     "^C" the terminal echoes (one more token was).
#  4. Piped, the reply is written unwrapped.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_PROMPT='>>>'
. "$top_srcdir/tests/e2e/lib_tmux.sh"
tiny_model 61 2048
DB="$TMPD/s.db"
ST="$TMPD/st.json"
# start40 ARGS...: kvchat ARGS in a fresh pane 40 columns wide.
start40() {
	T kill-session -t t 2>/dev/null
	_a=""
	for _x in "$@"; do _a="$_a '$_x'"; done
	T new-session -d -s t -x 40 -y 60 \
	    "LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' $_a; echo KVCHAT-EXIT:\$?; sleep 60"
}
# rows_fit FILE: every line of FILE (the pane joined with -J) is at most 40 columns.
rows_fit() {
	python3 - "$1" <<'PY'
import sys, unicodedata
bad = [l for l in open(sys.argv[1], encoding='utf-8', errors='replace').read().split('\n')
       if sum(2 if unicodedata.east_asian_width(c) in 'WF' else 0 if unicodedata.combining(c) else 1
              for c in l.rstrip()) > 40]
for l in bad:
    print('row the terminal wrapped:', repr(l[:120]))
sys.exit(1 if bad else 0)
PY
}
reply_rows() { T capture-pane -p -J -t t -S -500 | sed -n '/^>>> '"$1"'/,/^\[ttft/p' | sed '1d;$d'; }

# 1. Ctrl-C on a line wrapped over two rows, the cursor on its first row.
start40 -m "$M" --db "$DB" --new talk --temp 0 -n 120 --stats-json "$ST"
wait_for "the prompt" prompt_ready
text "aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk"
wait_for "the typed line" on_screen "kkkk"
keys Home
# Ctrl-C once the cursor is back after the prompt (">>> ", column 4) on
# the line's first row: a guessed delay could send it while the cursor
# was still at the end, which tests nothing of the first row.
wait_for "the cursor on the first row" sh -c "[ \"\$(tmux -L '$SOCK' display -p -t t '#{cursor_x}')\" = 4 ]"
keys C-c
wait_for "a fresh prompt after Ctrl-C" sh -c "T() { tmux -L '$SOCK' \"\$@\"; }; T capture-pane -p -t t | grep -v '^[[:space:]]*\$' | tail -n 1 | grep -Eq '^>>>[[:space:]]*\$'"
check "the line's second row ends with ^C" on_screen "iiii jjjj kkkk^C"
check "no row holds a prompt over the line's text" sh -c "! tmux -L '$SOCK' capture-pane -p -t t | grep -q '^>>> iiii'"

# 2. A reply of 120 tokens, wrapped by kvchat at 40 columns.
text "tell me a long story"; keys Enter
wait_for "the reply" has_lines "$ST" 1
wait_for "the prompt after the reply" prompt_ready
reply_rows "tell me a long story" >"$TMPD/rows"
check "the reply has several rows" [ "$(wc -l <"$TMPD/rows")" -ge 3 ]
check "no row of the reply was wrapped by the terminal" rows_fit "$TMPD/rows"
text "/quit"; keys Enter
wait_for "exit 0" on_screen "KVCHAT-EXIT:0"

# 4. Piped: the reply's bytes as stored, no row breaks added.
printf 'tell me a long story\n' | "$KVCHAT" -m "$M" --db "$TMPD/p.db" --new piped --temp 0 -n 120 \
    >"$TMPD/piped" 2>/dev/null
python3 - "$TMPD/piped" "$TMPD/p.db" <<'PY' && ok || fail "piped: the reply is not written as stored"
import sqlite3, sys
out = open(sys.argv[1], 'rb').read()
reply = sqlite3.connect(sys.argv[2]).execute(
    "SELECT CAST(text AS BLOB) FROM messages WHERE role = 2").fetchone()[0]
sys.exit(0 if out == reply + b'\n\n' else 1)
PY

# 2, with a real model's words (when fetched): no word cut across rows.
if have_gemma3; then
	start40 -m "$GEMMA3" --db "$TMPD/g.db" --new words --temp 0 -n 70 --stats-json "$TMPD/g.json"
	wait_for "the prompt (gemma)" prompt_ready
	text "Tell me a story about a lighthouse keeper."; keys Enter
	wait_for "the reply (gemma)" has_lines "$TMPD/g.json" 1
	wait_for "the prompt after the reply (gemma)" prompt_ready
	T capture-pane -p -t t -S -500 | sed -n '/^>>> Tell me a story/,/^\[ttft/p' | sed '1d;$d' >"$TMPD/grows"
	check "gemma: no row wrapped by the terminal" rows_fit "$TMPD/grows"
	python3 - "$TMPD/grows" "$TMPD/g.db" <<'PY' && ok || fail "gemma: a word was cut across rows"
import sqlite3, sys
rows = [r.rstrip() for r in open(sys.argv[1], encoding='utf-8').read().split('\n')]
reply = sqlite3.connect(sys.argv[2]).execute("SELECT text FROM messages WHERE role = 2").fetchone()[0]
words = set(w.strip('*_`') for w in reply.split())
cut = 0
for a, b in zip(rows, rows[1:]):
    if not a or not b or a.endswith(' ') or b.startswith(' '):
        continue
    left, right = a.split(' ')[-1], b.split(' ')[0]
    joined = (left + right).strip('*_`')
    if joined in words and len(left + right) <= 40 and left.strip('*_`') not in words:
        print('cut:', repr(left), repr(right))
        cut += 1
print(len(rows), 'rows,', cut, 'words cut')
sys.exit(1 if cut else 0)
PY
	text "/quit"; keys Enter
	wait_for "exit 0 (gemma)" on_screen "KVCHAT-EXIT:0"
else
	echo "note: $GEMMA3 not fetched (scripts/fetch-models.sh): the real-word wrapping check is left out"
fi

# 3. Ctrl-C while a reply streams from a model slow enough (tens of ms a
# token) that the interrupt lands in a forward pass, as a person's does.
W="$TMPD/w.gguf"
wide_model "$W"
start40 -m "$W" --db "$TMPD/w.db" --new slow --temp 0 -n 4000 --threads 2 --stats-json "$TMPD/w.json"
wait_for "the prompt (wide)" prompt_ready
text "go on"; keys Enter
# the reply streams (a row of it below the typed line, not the prefill's
# progress line a loaded machine shows), then Ctrl-C
KVC_TMUX_SCROLL=2000
wait_for "the reply streaming (wide)" reply_streams "go on"
sleep 0.5
keys C-c
wait_for "the interrupted reply" has_lines "$TMPD/w.json" 1
wait_for "the prompt after Ctrl-C" prompt_ready
check "the reply was interrupted" [ "$(jget "$TMPD/w.json" 1 interrupted)" = true ]
T capture-pane -p -J -t t -S - >"$TMPD/wscreen"
line=$(grep -F '^C' "$TMPD/wscreen" | tail -n 1)
echo "the ^C line: '$line'"
if printf '%s\n' "$line" | grep -q '\^C[[:space:]]*$'; then
	ok
else
	fail "nothing printed after the ^C mark"
	echo "the screen's last rows:"
	grep -v '^[[:space:]]*$' "$TMPD/wscreen" | tail -n 8
fi
text "/quit"; keys Enter
wait_for "exit 0 (wide)" on_screen "KVCHAT-EXIT:0"
done_testing
