#!/bin/sh
# test_private.sh (issue 10, points 1 and 2): conversations are private to
# their user. Whatever the umask (022, 000), every file kvchat writes is
# 0600 (sessions.db, -wal, -shm, /export, --stats-json, the line history)
# and every folder it creates 0700; an existing database others can read is
# reported with the chmod that fixes it, and left as it is; folders others
# own or can write are refused; an unset, empty or relative $HOME means the
# password database's home, never the current folder; a link or file planted
# in a folder others can write never redirects a write (export, stats), and
# the history's temporary file is never one somebody else named.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_SCROLL=300 KVC_TMUX_PROMPT='>>>'
. "$top_srcdir/tests/e2e/lib_tmux.sh"
NB=""
trap 'tmux_stop; rm -rf "$TMPD" ${NB:+"$NB"}' EXIT
M="$TMPD/m.gguf"
"$MKMODEL" -o "$M" --preset tiny --arch qwen2 --type f32 --vocab bpe --seed 5 --quiet \
	>/dev/null || { echo "FAIL: mkmodel"; exit 1; }
mode() { stat -c %a "$1" 2>/dev/null || echo missing; }
# is_mode DESC WANT PATH
is_mode() { _m=$(mode "$3"); if [ "$_m" = "$2" ]; then ok; else fail "$1: $3 is $_m, not $2"; fi; }
text() { T send-keys -t t -l -- "$1"; T send-keys -t t Enter; }
gone() { ! kill -0 "$1" 2>/dev/null; }
# A runner for the terminal: sets the umask, writes kvchat's pid (exec keeps
# it) to $TMPD/pid, then reports the exit status on the screen.
cat >"$TMPD/run.sh" <<'EOF'
umask "$1"; shift
sh -c 'echo $$ >"$0"; exec "$@"' "$TMPD/pid" "$@"
echo KVCHAT-EXIT:$?
sleep 60
EOF
# start UMASK ENV ARGS: kvchat at a terminal (a tmux pane), environment
# assignments ENV and options ARGS (each a string of words without spaces
# inside them); waits for the prompt and sets PID.
start() {
	rm -f "$TMPD/pid"
	T new-session -d -s t -x 160 -y 50 \
	    "TMPD='$TMPD' LC_ALL=C.UTF-8 TERM=xterm sh '$TMPD/run.sh' $1 env $2 \
	    '$KVCHAT' -m '$M' --temp 0 -n 4 --ctx 256 $3" || fail "tmux"
	wait_for "the prompt" prompt_ready || return 1
	PID=$(cat "$TMPD/pid")
}
# quit: /quit, wait for the exit status 0, close the pane.
quit() {
	text "/quit"
	wait_for "exit status 0" on_screen "KVCHAT-EXIT:0"
	T kill-session -t t 2>/dev/null
	wait_for "kvchat exits" gone "$PID"
}

# 1. Modes at a terminal under umask 022 and 000: the database at its XDG
# place, its -wal and -shm while it runs, exports, stats, history, folders.
for u in 022 000; do
	D="$TMPD/u$u"
	mkdir -p "$D"
	start $u "XDG_DATA_HOME=$D/data XDG_STATE_HOME=$D/state" "--stats-json $D/st.json" ||
		{ done_testing; exit 1; }
	text "hello there"
	wait_for "umask $u: first turn" has_lines "$D/st.json" 1
	wait_for "umask $u: prompt after the turn" prompt_ready
	db="$D/data/kvchat/sessions.db"
	for f in "$db" "$db-wal" "$db-shm" "$D/st.json"; do
		is_mode "umask $u" 600 "$f"
	done
	text "/export md $D/ex.md"
	wait_for "umask $u: /export md" on_screen "wrote $D/ex.md"
	text "/export json $D/ex.json"
	wait_for "umask $u: /export json" on_screen "wrote $D/ex.json"
	quit
	for f in "$D/ex.md" "$D/ex.json" "$D/state/kvchat/history" "$db"; do
		is_mode "umask $u" 600 "$f"
	done
	for f in "$D/data" "$D/data/kvchat" "$D/state" "$D/state/kvchat"; do
		is_mode "umask $u: folder" 700 "$f"
	done
	check "umask $u: the history holds the line" grep -q "hello there" "$D/state/kvchat/history"
	check "umask $u: no temporary file left" \
		[ "$(ls "$D/state/kvchat" | wc -l)" -eq 1 ]
done

# Batch mode too, with --db in a new folder, umask 000.
(umask 000; printf 'hi\n' | "$KVCHAT" -m "$M" --temp 0 -n 4 --ctx 256 \
	--db "$TMPD/b/new/s.db" --stats-json "$TMPD/b.json" >/dev/null 2>"$TMPD/e")
check "batch run exits 0" [ $? -eq 0 ]
is_mode "batch" 600 "$TMPD/b/new/s.db"
is_mode "batch" 600 "$TMPD/b.json"
is_mode "batch folder" 700 "$TMPD/b"
is_mode "batch folder" 700 "$TMPD/b/new"
check "a private database gives no warning" sh -c "! grep -q warning '$TMPD/e'"

# 2. An existing database (and folder) others can read: a warning naming the
# chmod, and nothing changed.
chmod 644 "$TMPD/b/new/s.db"
chmod 755 "$TMPD/b/new"
printf 'again\n' | "$KVCHAT" -m "$M" --temp 0 -n 4 --ctx 256 --db "$TMPD/b/new/s.db" \
	>/dev/null 2>"$TMPD/e"
check "exposed database: still runs" [ $? -eq 0 ]
check "exposed database: one warning line" [ "$(grep -c warning "$TMPD/e")" -eq 1 ]
check "exposed database: names the chmod of the file" \
	grep -q "chmod 600 $TMPD/b/new/s.db" "$TMPD/e"
check "exposed database: names the chmod of the folder" \
	grep -q "chmod 700 $TMPD/b/new" "$TMPD/e"
is_mode "exposed database: left as it was" 644 "$TMPD/b/new/s.db"
is_mode "exposed folder: left as it was" 755 "$TMPD/b/new"
check "file and folder listed apart" grep -q "s.db (mode 0644), $TMPD/b/new (mode 0755)" "$TMPD/e"
# A readable database: said at every start. A folder others can only list
# (the README's mkdir made one; its files private): said once per folder
# and mode, remembered in the state folder (issue 26, newcomer 4).
printf 'again\n' | "$KVCHAT" -m "$M" --temp 0 -n 4 --ctx 256 --db "$TMPD/b/new/s.db" \
	>/dev/null 2>"$TMPD/e"
check "exposed database: said again" [ "$(grep -c warning "$TMPD/e")" -eq 1 ]
chmod 600 "$TMPD/b/new/s.db"
for n in 1 2; do
	printf 'again\n' | "$KVCHAT" -m "$M" --temp 0 -n 4 --ctx 256 --db "$TMPD/b/new/s.db" \
		>/dev/null 2>"$TMPD/e$n"
done
check "a listable folder alone: said the first time" grep -q "chmod 700 $TMPD/b/new" "$TMPD/e1"
check "... saying it is said once" grep -q "said once for this folder" "$TMPD/e1"
check "... and not the second time" sh -c "! grep -q warning '$TMPD/e2'"
is_mode "the note of it is private" 600 "$XDG_STATE_HOME/kvchat/exposure-noted"
chmod 750 "$TMPD/b/new"
printf 'again\n' | "$KVCHAT" -m "$M" --temp 0 -n 4 --ctx 256 --db "$TMPD/b/new/s.db" \
	>/dev/null 2>"$TMPD/e3"
check "another mode: said again" grep -q "chmod 700 $TMPD/b/new" "$TMPD/e3"
# The README's command makes the models folder and those above it private.
(d="$TMPD/readme/data/kvchat/models" && umask 077 && mkdir -p "$d")
is_mode "README's mkdir: kvchat folder" 700 "$TMPD/readme/data/kvchat"
is_mode "README's mkdir: models folder" 700 "$TMPD/readme/data/kvchat/models"
check "README has that command" grep -q 'umask 077 && mkdir -p "$d"' "$top_srcdir/README.md"

# 3. Folders others can write or own are refused, naming the path and why.
refused() {
	_d=$1 _db=$2 _why=$3
	printf 'x\n' | "$KVCHAT" -m "$M" --temp 0 -n 4 --ctx 256 --db "$_db" >/dev/null 2>"$TMPD/e"
	_rc=$?
	check "$_d: refused" [ $_rc -ne 0 ]
	check "$_d: says why" grep -q "$_why" "$TMPD/e"
	check "$_d: no database made" [ ! -e "$_db" ]
}
mkdir "$TMPD/ww" && chmod 777 "$TMPD/ww"
refused "folder writable by others" "$TMPD/ww/s.db" "others can write"
mkdir -p "$TMPD/open/mine" && chmod 777 "$TMPD/open" && chmod 700 "$TMPD/open/mine"
refused "non-sticky world-writable folder above" "$TMPD/open/mine/s.db" "$TMPD/open, on its path"
mkdir -p "$TMPD/sticky/mine" && chmod 1777 "$TMPD/sticky" && chmod 700 "$TMPD/sticky/mine"
printf 'x\n' | "$KVCHAT" -m "$M" --temp 0 -n 4 --ctx 256 --db "$TMPD/sticky/mine/s.db" \
	>/dev/null 2>"$TMPD/e"
check "a sticky folder (like /tmp) above is fine" [ $? -eq 0 ]

# 4. Links and files planted in a folder others can write (sticky, as /tmp).
P="$TMPD/pub"
mkdir "$P" && chmod 1777 "$P"
printf 'precious\n' >"$TMPD/victim"
ln -s "$TMPD/victim" "$P/st.json"
printf 'x\n' | "$KVCHAT" -m "$M" --temp 0 -n 4 --ctx 256 --db "$TMPD/v.db" \
	--stats-json "$P/st.json" >/dev/null 2>"$TMPD/e"
check "stats-json through a planted link: the turn still runs" [ $? -eq 0 ]
check "stats-json through a planted link: victim untouched" \
	[ "$(cat "$TMPD/victim")" = precious ]
check "stats-json through a planted link: reported" grep -q "$P/st.json" "$TMPD/e"
ln -s "$TMPD/victim" "$P/ex.md"
start 022 "" "--db $TMPD/v.db" || { done_testing; exit 1; }
text "/export md $P/ex.md"
wait_for "/export through a planted link is refused" on_screen "cannot write $P/ex.md"
quit
check "/export through a planted link: victim untouched" [ "$(cat "$TMPD/victim")" = precious ]

# The history's temporary file: a link planted under the old predictable
# name history.PID.tmp (even in the user's own folder) is never followed;
# and a state folder others can write is not used at all.
for kind in own shared; do
	S="$TMPD/hist-$kind"
	mkdir -p "$S/kvchat"
	chmod 700 "$S" "$S/kvchat"
	[ $kind = shared ] && chmod 777 "$S/kvchat"
	printf 'precious\n' >"$TMPD/victim-$kind"
	start 022 "XDG_STATE_HOME=$S" "--db $TMPD/v.db" || { done_testing; exit 1; }
	ln -s "$TMPD/victim-$kind" "$S/kvchat/history.$PID.tmp"
	text "secret words"
	wait_for "history ($kind folder): turn" prompt_ready
	quit
	check "history ($kind folder): victim untouched" \
		[ "$(cat "$TMPD/victim-$kind")" = precious ]
	if [ $kind = own ]; then
		check "history (own folder): written" grep -q "secret words" "$S/kvchat/history"
		is_mode "history (own folder)" 600 "$S/kvchat/history"
	else
		check "history (shared folder): not written" [ ! -e "$S/kvchat/history" ]
	fi
done

# Root can plant a file owned by someone else; such a file in a folder others
# can write is not appended to.
if [ "$(id -u)" = 0 ]; then
	printf 'theirs\n' >"$P/other.json"
	chown 65534 "$P/other.json" && chmod 666 "$P/other.json"
	printf 'x\n' | "$KVCHAT" -m "$M" --temp 0 -n 4 --ctx 256 --db "$TMPD/v.db" \
		--stats-json "$P/other.json" >/dev/null 2>"$TMPD/e"
	check "another user's file in a shared folder: not written" \
		[ "$(cat "$P/other.json")" = theirs ]
	mkdir "$TMPD/theirs" && chown 65534 "$TMPD/theirs" && chmod 700 "$TMPD/theirs"
	refused "folder owned by another user" "$TMPD/theirs/s.db" "owned by uid 65534"
else
	echo "SKIP (part): planting another user's file needs root"
fi

# 5. $HOME unset, empty or relative: the password database's home, never the
# current folder. Run as an unprivileged user (nobody) whose passwd home is
# known; it is usually missing, so kvchat must fail naming it rather than
# write under the current folder.
as_nobody=""
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1 &&
    setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
	as_nobody="setpriv --reuid=65534 --regid=65534 --clear-groups"
fi
NHOME=$(getent passwd 65534 2>/dev/null | cut -d: -f6)
if [ -n "$as_nobody" ] && [ -n "$NHOME" ] && ! $as_nobody test -w "$NHOME"; then
	NB=$(mktemp -d /tmp/kvchat-nobody.XXXXXX)
	chmod 755 "$NB"
	cp "$M" "$NB/m.gguf" && chmod 644 "$NB/m.gguf"
	# a copy nobody can run even when the build is in a private home (/root)
	cp "$KVCHAT" "$NB/kvchat" && chmod 755 "$NB/kvchat"
	mkdir "$NB/cwd" && chown 65534:65534 "$NB/cwd"
	for h in unset empty relative; do
		case $h in
		unset) set -- -u HOME ;;
		empty) set -- HOME= ;;
		relative) set -- HOME=rel ;;
		esac
		(cd "$NB/cwd" && printf 'x\n' | $as_nobody env -u XDG_DATA_HOME -u XDG_STATE_HOME \
			"$@" "$NB/kvchat" -m "$NB/m.gguf" --temp 0 -n 4 --ctx 256 >/dev/null 2>"$NB/e")
		check "HOME $h: nothing under the current folder" [ -z "$(ls -A "$NB/cwd")" ]
		check "HOME $h: names the passwd home ($NHOME)" grep -q "$NHOME/.local" "$NB/e"
		rm -rf "$NB/cwd/"* "$NB/cwd/".[!.]* 2>/dev/null
	done
else
	echo "SKIP (part): the \$HOME checks need root, setpriv and a uid 65534 whose home it cannot write"
fi

done_testing
