#!/bin/sh
# test_list_damaged.sh (issue 13 "commands as people type them"): one
# damaged row does not spoil /list. Rows are damaged with sqlite3 the way a
# hand edit, another program or a bad disk would: a title that is not UTF-8
# and holds a terminal escape, a settings text that cannot be read. /list
# shows every conversation, the damaged ones cleaned (no raw escape reaches
# the terminal) and marked, names what is wrong with each, and the damaged
# conversations still resume.
. "$top_srcdir/tests/e2e/lib.sh"
. "$top_srcdir/tests/e2e/lib_tmux.sh"
tiny_model 61 1024
DB="$TMPD/s.db"
for t in alpha bravo charlie; do
	printf 'hello %s\n' "$t" | "$KVCHAT" -m "$M" --db "$DB" --new "$t" --temp 0 -n 2 >/dev/null 2>&1 ||
		{ echo "FAIL: making conversation $t"; exit 1; }
done
A=$(sql "SELECT id FROM conversations WHERE title = 'alpha'")
B=$(sql "SELECT id FROM conversations WHERE title = 'bravo'")
C=$(sql "SELECT id FROM conversations WHERE title = 'charlie'")
# bravo: "br", a byte that is not UTF-8, "vo", ESC [31m (red); charlie: unreadable settings.
sql "UPDATE conversations SET title = CAST(X'6272ff766f1b5b33316d' AS TEXT) WHERE id = $B"
sql "UPDATE conversations SET settings = 'temp=hot;top_p' WHERE id = $C"

start -m "$M" --db "$DB" --resume "$A" --temp 0 -n 2
wait_for "the prompt" prompt_ready
cmd "/list"
check "the clean row listed" on_screen " alpha"
check "the damaged title listed, cleaned and marked" on_screen "br�vo?[31m  (damaged)"
check "the damaged settings' row listed and marked" on_screen "charlie  (damaged)"
check "what is wrong with the title is said" on_screen "conversation $B is damaged: the title is not clean UTF-8 text"
check "what is wrong with the settings is said" on_screen "conversation $C is damaged: the settings: temp: not a number: 'hot'"
check "the clean row is not called damaged" sh -c "! tmux -L '$SOCK' capture-pane -p -J -t t -S -500 | grep -q 'alpha  (damaged)'"

# The damaged conversations still open; the unreadable settings fall back to the defaults.
cmd "/resume $C"
check "charlie resumes" on_screen "conversation $C (charlie)"
cmd "/show parameters"
check "charlie's unreadable temperature: the default" on_screen "temperature     0.8"
cmd "/resume $B"
check "the damaged title resumes" on_screen "conversation $B ("
text "/quit"; keys Enter
wait_for "exit 0" on_screen "KVCHAT-EXIT:0"

# Started on the damaged title: the banner shows it cleaned too.
start -m "$M" --db "$DB" --resume "$B" --temp 0 -n 2
wait_for "the prompt on the damaged title" prompt_ready
check "the banner shows the title cleaned" on_screen "conversation $B (br�vo?[31m)"
text "/quit"; keys Enter
wait_for "exit 0 again" on_screen "KVCHAT-EXIT:0"
done_testing
