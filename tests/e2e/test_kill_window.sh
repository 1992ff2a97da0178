#!/bin/sh
# test_kill_window.sh (issue 26's family): a kill at any commit of an /undo
# that chooses the context window again, or of a /system change, must leave
# a store the next start restores from its snapshot. Both used to write the
# change (the rewind and the new window, or the new prompt and first ids,
# every old chunk dropped) in one transaction and the recomputed cache's
# snapshot in a later one: a kill between them left no snapshot, and the
# next start rebuilt from the tokens (test_crash_slide.sh's strict mode
# fails such a start). strace kills kvchat at its 1st, 2nd, ... fdatasync
# (each commit syncs the WAL once its commit frame is written, so the kills
# land after every transaction in turn) while it runs the command at a
# terminal; after each kill a new process must resume without rebuilding.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_PROMPT='>>>'
. "$top_srcdir/tests/e2e/lib_tmux.sh"
command -v strace >/dev/null 2>&1 && strace -f -o /dev/null true 2>/dev/null ||
	skip "the kills need strace (scripts/deps.sh installs it)"
M="$TMPD/m.gguf"
"$MKMODEL" -o "$M" --preset tiny --arch qwen2 --type f32 --vocab bpe --ctx 8192 --seed 31 \
    >/dev/null || { echo "FAIL: mkmodel"; exit 1; }
REAL=$KVCHAT
nmsgs() { sqlite3 "$1" "SELECT count(*) FROM messages"; }
exited() { on_screen "KVCHAT-EXIT:"; }
alive_prompt() { prompt_ready || exited; }
# the typed command's prompt line and a new one below it, or the kill
cmd_over() { [ "$(screen | grep -c '^>>>')" -ge 2 ] || exited; }

# kill_at DB N OPTS CMD: kvchat at a terminal (strace kills it at its Nth
# fdatasync, or N=0: never) types CMD once its prompt is up, then /quit.
# KILLED=1 when it was killed, else 0.
kill_at() {
	ka_db=$1 ka_n=$2 ka_o=$3 ka_c=$4
	if [ "$ka_n" = 0 ]; then
		ka_s="-e trace=fdatasync"
	else
		ka_s="-e trace=fdatasync -e inject=fdatasync:signal=KILL:when=$ka_n"
	fi
	cat >"$TMPD/kv.sh" <<EOS
#!/bin/sh
exec strace -f -o "$TMPD/trace" $ka_s "$REAL" "\$@"
EOS
	chmod +x "$TMPD/kv.sh"
	KVCHAT="$TMPD/kv.sh"
	new_server
	# shellcheck disable=SC2086
	start -m "$M" --db "$ka_db" $ka_o
	KVCHAT=$REAL
	wait_for "the prompt or the kill" alive_prompt
	if ! exited; then
		text "$ka_c"; keys Enter
		# the command's output, then a new prompt (or the kill)
		wait_for "after '$ka_c'" cmd_over
		wait_for "the prompt after '$ka_c'" alive_prompt
		if ! exited; then
			text "/quit"; keys Enter
		fi
	fi
	wait_for "kvchat exits" exited
	KILLED=1
	on_screen "KVCHAT-EXIT:0" && KILLED=0
	T kill-server 2>/dev/null
}

# campaign NAME DB OPTS CMD: kills CMD's process at each fdatasync in turn,
# from a copy of DB each time; the next start must restore its snapshot.
campaign() {
	kw_name=$1 kw_db0=$2 kw_o=$3 kw_c=$4
	cp "$kw_db0" "$TMPD/c.db"
	kill_at "$TMPD/c.db" 0 "$kw_o" "$kw_c"
	kw_syncs=$(grep -c fdatasync "$TMPD/trace")
	kw_n=1 kw_bad=0 kw_kills=0
	while [ $kw_n -le "$kw_syncs" ]; do
		cp "$kw_db0" "$TMPD/k.db"
		kill_at "$TMPD/k.db" $kw_n "$kw_o" "$kw_c"
		kw_kills=$((kw_kills + KILLED))
		rm -f "$TMPD/k.json"
		echo "Still there?" | eval "\"\$KVCHAT\" -m \"\$M\" --db \"$TMPD/k.db\" $kw_o \
		    --stats-json \"$TMPD/k.json\"" >/dev/null 2>"$TMPD/k.err" ||
			fail "$kw_name, kill at fdatasync #$kw_n: the next start failed: $(cat "$TMPD/k.err")"
		if [ "$(jget "$TMPD/k.json" 1 rebuilt)" != false ]; then
			kw_bad=$((kw_bad + 1))
			echo "$kw_name, kill at fdatasync #$kw_n: the next start rebuilt: $(cat "$TMPD/k.err")"
		fi
		kw_n=$((kw_n + 1))
	done
	echo "$kw_name: $kw_syncs syncs, $kw_kills kills, $kw_bad rebuilt"
	check "$kw_name: killed at each of the $kw_syncs syncs ($kw_kills kills)" [ "$kw_kills" -eq "$kw_syncs" ]
	check "$kw_name: after a kill at any of them the next start restores ($kw_bad rebuilt)" \
	    [ "$kw_bad" -eq 0 ]
}

# /undo that chooses the window again: 12 turns at --ctx 256 sliding
# (turns 4-6, 8-10 and 12 slide), then two /undo (each keeps the slid
# window); the third takes back a message that began in the part slid
# away, so the window is chosen again and the cache recomputed.
O="--temp 0 -n 24 --ctx 256 --ctx-overflow slide"
i=1
: >"$TMPD/fill.txt"
while [ $i -le 12 ]; do
	echo "Turn $i: tell me one more thing about tea, please." >>"$TMPD/fill.txt"
	i=$((i + 1))
done
"$KVCHAT" -m "$M" --db "$TMPD/u.db" --session s $O --system "You are terse." \
    <"$TMPD/fill.txt" >/dev/null 2>"$TMPD/fill.err" || { fail "fill: $(cat "$TMPD/fill.err")"; }
new_server
start -m "$M" --db "$TMPD/u.db" $O --resume s
wait_for "the prompt" prompt_ready
cmd "/undo"; cmd "/undo"
text "/quit"; keys Enter; wait_for "kvchat exits" on_screen "KVCHAT-EXIT:0"
T kill-server 2>/dev/null
key() { sqlite3 "$1" "SELECT window FROM conversations"; }
check "two /undo left 20 messages" [ "$(nmsgs "$TMPD/u.db")" = 20 ]
check "and the slid window (key $(key "$TMPD/u.db"))" [ "$(key "$TMPD/u.db")" -gt 1048576 ]
cp "$TMPD/u.db" "$TMPD/once.db"
kill_at "$TMPD/once.db" 0 "$O --resume s" "/undo"
check "the third /undo chose the window again (window $(key "$TMPD/once.db"))" \
    [ "$(key "$TMPD/once.db")" -lt 1048576 ]
check "... and left 18 messages" [ "$(nmsgs "$TMPD/once.db")" = 18 ]
campaign "/undo choosing the window again" "$TMPD/u.db" "$O --resume s" "/undo"

# /system on a conversation with messages (not slid: /system refuses a slid one).
O="--temp 0 -n 16 --ctx 1024"
head -n 3 "$TMPD/fill.txt" | "$KVCHAT" -m "$M" --db "$TMPD/s.db" --session p $O \
    --system "You are terse." >/dev/null 2>"$TMPD/sfill.err" || fail "fill: $(cat "$TMPD/sfill.err")"
cp "$TMPD/s.db" "$TMPD/once.db"
kill_at "$TMPD/once.db" 0 "$O --resume p" "/system Answer in one word."
check "/system changed the prompt" \
    [ "$(sqlite3 "$TMPD/once.db" "SELECT system FROM conversations")" = "Answer in one word." ]
campaign "/system" "$TMPD/s.db" "$O --resume p" "/system Answer in one word."
done_testing
