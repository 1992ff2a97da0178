#!/bin/sh
# test_title_clean.sh (issue 26, newcomer 5): every message that names a
# conversation shows its title cleaned, as /list does, never raw. A title
# edited into the database (by hand, another program, a damaged disk) with
# a byte that is not UTF-8, "clear the screen" (ESC [2J), a carriage return
# and a bell must not reach the terminal through /resume, /show info or /clear.
# The pane's output is also logged raw (pipe-pane): no escape of the title's
# is in it, whatever the screen shows.
. "$top_srcdir/tests/e2e/lib.sh"
. "$top_srcdir/tests/e2e/lib_tmux.sh"
tiny_model 61 1024
DB="$TMPD/s.db"
for t in alpha bravo; do
	printf 'hello %s\n' "$t" | "$KVCHAT" -m "$M" --db "$DB" --new "$t" --temp 0 -n 2 >/dev/null 2>&1 ||
		{ echo "FAIL: making conversation $t"; exit 1; }
done
A=$(sql "SELECT id FROM conversations WHERE title = 'alpha'")
B=$(sql "SELECT id FROM conversations WHERE title = 'bravo'")
# "br", 0xff, "vo", ESC [2J, CR, "x", BEL.
sql "UPDATE conversations SET title = CAST(X'6272ff766f1b5b324a0d7807' AS TEXT) WHERE id = $B"
CLEAN='br�vo?[2J?x?'

start -m "$M" --db "$DB" --resume "$A" --temp 0 -n 2
T pipe-pane -t t "cat >'$TMPD/raw'"
wait_for "the prompt" prompt_ready
cmd "/resume $B"
check "/resume names the title cleaned" on_screen "conversation $B ($CLEAN): "
cmd "/show info"
check "/show info names the title cleaned" on_screen " $B ($CLEAN), 2 messages"
cmd "/clear"
check "/clear names the title cleaned" on_screen "conversation $CLEAN cleared"
text "/quit"; keys Enter
wait_for "exit 0" on_screen "KVCHAT-EXIT:0"
check "the title's escape never reached the terminal raw" sh -c "! LC_ALL=C grep -q \"\$(printf '\\033\\[2J')\" '$TMPD/raw'"
check "nor its bell" sh -c "! LC_ALL=C grep -q \"\$(printf '\\007')\" '$TMPD/raw'"
done_testing
