#!/bin/sh
# kill-campaign.sh: SIGKILL kvchat at random moments of the chat's
# operations and check what the next start finds (docs/CRASH.md, issue 26).
# Run by hand, not by the suite (minutes):
#
#   scripts/kill-campaign.sh BUILDDIR [KILLS] [SEED]
#
# Rounds alternate between two modes: "normal" (--ctx 4096) and "slide"
# (--ctx 256 --ctx-overflow slide, the conversation kept at the end of its
# context, so every turn slides). Each round copies the database (PRE),
# resumes conversation "r" in a tmux pane, sends one operation (a turn,
# /retry, /undo, /delete; greedy, --temp 0), kills kvchat with SIGKILL after
# a random delay within the operation's calibrated duration, and checks:
#   - PRAGMA integrity_check is ok, foreign_key_check empty;
#   - a completed turn (its --stats-json line written) is stored whole; r
#     holds whole exchanges, at most a last user message without its reply,
#     and that message is the one typed (a turn) or the one retried;
#   - r's snapshot chunks run from position 0 without gaps;
#   - resumed equals uninterrupted: a new process resumes r from the killed
#     database and answers "Still there?"; the same operation is run
#     uninterrupted on PRE (skipped when the kill left r as it was), followed
#     in the same process by the same message; r's messages must be equal,
#     byte for byte, in the two databases. (A kill that left a message
#     without its reply has no uninterrupted twin: it is counted apart.)
#   - the resume restores r's snapshot (kvchat's own checks of its chunks,
#     sess_chunks_verify, accept it): a rebuild from the tokens is a failure,
#     except after a message left without its reply (its positions were
#     never in a snapshot: they are computed again, and the stats line says
#     "rebuilt").
# Prints one line a kill and a summary; exit status 1 if any check failed.
set -u
B=${1:?usage: kill-campaign.sh BUILDDIR [KILLS] [SEED]}
KILLS=${2:-100}
SEED=${3:-$$}
B=$(cd "$B" && pwd)
KVCHAT=$B/kvchat
MKMODEL=$B/tests/fixtures/mkmodel
command -v tmux >/dev/null || { echo "tmux is needed"; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/kvchat-kills.XXXXXX")
export HOME="$W/home" XDG_DATA_HOME="$W/data" XDG_STATE_HOME="$W/state" XDG_CONFIG_HOME="$W/config"
mkdir -p "$HOME"
SOCK="kvchat-kc-$$"
printf 'set -s exit-empty off\n' >"$W/tmux.conf"
T() { tmux -L "$SOCK" -f "$W/tmux.conf" "$@"; }
trap 'T kill-server 2>/dev/null; rm -rf "$W"' EXIT
FAILS=0
fail() { FAILS=$((FAILS + 1)); echo "FAIL: $*"; }
ms() { date +%s%N | cut -c1-13; }
screen() { T capture-pane -p -J -t t -S -100 2>/dev/null; }
prompt_ready() { screen | grep -v '^[[:space:]]*$' | tail -n 1 | grep -Eq '^>>>[[:space:]]*$'; }
prompts_at_least() { [ "$(screen | grep -c '^>>>')" -ge "$1" ] && prompt_ready; }
asked_delete() { screen | grep -q '\[y/N\]'; }
poll() { _i=0; while ! "$@" >/dev/null 2>&1; do _i=$((_i + 1)); [ $_i -gt 600 ] && return 1; sleep 0.05; done; }
q() { sqlite3 -cmd '.timeout 10000' "$1" "$2"; }
rid() { q "$1" "SELECT id FROM conversations WHERE title = 'r' ORDER BY id DESC LIMIT 1"; }
nmsg() { q "$1" "SELECT count(*) FROM messages WHERE conv_id = $2"; }
# msgs DB ID: r's messages, one hex line each (role and text), to compare byte for byte
msgs() { q "$1" "SELECT role || ':' || hex(text) FROM messages WHERE conv_id = $2 ORDER BY seq"; }
copy() { rm -f "$2" "$2-wal" "$2-shm"; q "$1" ".backup '$2'"; }

M="$W/m.gguf"
"$MKMODEL" -o "$M" --preset tiny --arch qwen2 --type f32 --vocab bpe --ctx 8192 --seed 71 \
    --n-layer 4 --n-head-kv 4 >/dev/null || { echo "mkmodel failed"; exit 2; }
TURN="Go on with the story, please."
PROBE="Still there?"

# opts MODE DB: kvchat's options in that mode
opts() {
	case $1 in
	normal) echo "-m $M --temp 0 -n 16 --ctx 4096 --kv-type f32 --threads 2 --db $2" ;;
	slide) echo "-m $M --temp 0 -n 16 --ctx 256 --ctx-overflow slide --kv-type f32 --threads 2 --db $2" ;;
	esac
}
# make_r MODE DB: a fresh "r" (slide: enough exchanges to fill its context)
make_r() {
	_n=2
	[ "$1" = slide ] && _n=9
	_i=0
	while [ $_i -lt $_n ]; do _i=$((_i + 1)); printf 'Tell me part %d of the lighthouse story.\n' $_i; done |
	    "$KVCHAT" $(opts "$1" "$2") --session r >/dev/null 2>"$W/mk.err" ||
		{ echo "making r failed:"; cat "$W/mk.err"; exit 2; }
}
# start MODE DB [STATS]: kvchat resuming r in a pane; KP its pid
start() {
	T kill-session -t t 2>/dev/null
	T new-session -d -s t -x 200 -y 50 \
	    "LC_ALL=C.UTF-8 TERM=xterm exec '$KVCHAT' $(opts "$1" "$2") --resume r --stats-json '${3:-$W/ref.json}'"
	poll prompt_ready || { fail "no prompt ($1)"; screen; return 1; }
	KP=$(T display -p -t t '#{pane_pid}')
}
send() {
	case $1 in
	turn) T send-keys -t t -l "$TURN" ;;
	undo) T send-keys -t t -l "/undo" ;;
	retry) T send-keys -t t -l "/retry" ;;
	delete) T send-keys -t t -l "/delete"; T send-keys -t t Enter
		poll asked_delete; T send-keys -t t -l "y" ;;
	esac
	T send-keys -t t Enter
}
quit_pane() {
	T send-keys -t t -l "/quit"; T send-keys -t t Enter
	poll sh -c "! kill -0 $KP 2>/dev/null"
	T kill-session -t t 2>/dev/null
}

DBN="$W/normal.db"
DBS="$W/slide.db"
make_r normal "$DBN"
make_r slide "$DBS"
# Calibrate each operation in each mode on a scratch copy.
for mode in normal slide; do
	for op in turn retry undo delete; do
		db=$DBN; [ $mode = slide ] && db=$DBS
		copy "$db" "$W/cal.db"
		start $mode "$W/cal.db" || exit 2
		t0=$(ms)
		send $op
		poll prompts_at_least 2
		eval "D_${mode}_$op=$(( $(ms) - t0 ))"
		quit_pane
		eval "echo \"calibration: $mode $op \$D_${mode}_$op ms\""
	done
done

awk -v seed="$SEED" -v n="$KILLS" 'BEGIN {
	srand(seed)
	split("turn turn retry undo turn retry undo delete", ops, " ")
	for (i = 0; i < n; i++) printf "%s %s %.4f\n", (i % 2 ? "slide" : "normal"), ops[int(rand() * 8) + 1], rand()
}' >"$W/plan"
echo "kills: $KILLS, seed: $SEED"

k=0 n_equal=0 n_dangling=0 n_rebuilt=0 n_completed=0 n_unchanged=0 n_lost=0
while read -r mode op frac; do
	k=$((k + 1))
	db=$DBN; [ $mode = slide ] && db=$DBS
	[ -n "$(rid "$db")" ] || make_r $mode "$db"
	id=$(rid "$db")
	n0=$(nmsg "$db" "$id")
	[ "$op" = undo ] && [ "$n0" -lt 2 ] && op=turn
	last_user=$(q "$db" "SELECT hex(text) FROM messages WHERE conv_id = $id AND role = 1 ORDER BY seq DESC LIMIT 1")
	copy "$db" "$W/pre.db"
	ST="$W/st-$mode.json"
	lines0=$(cat "$ST" 2>/dev/null | wc -l)
	start $mode "$db" "$ST" || continue
	eval "d=\$D_${mode}_$op"
	delay=$(awk -v d="$d" -v f="$frac" 'BEGIN { printf "%.3f", d * 1.1 * f / 1000 }')
	send $op
	sleep "$delay"
	kill -9 "$KP" 2>/dev/null
	poll sh -c "! kill -0 $KP 2>/dev/null"
	T kill-session -t t 2>/dev/null
	lines1=$(cat "$ST" 2>/dev/null | wc -l)
	# --- the database as the kill left it ---
	ic=$(q "$db" "PRAGMA integrity_check")
	fk=$(q "$db" "SELECT count(*) FROM pragma_foreign_key_check")
	[ "$ic" = ok ] && [ "$fk" = 0 ] || fail "kill $k ($mode $op): integrity: $ic, foreign keys $fk"
	exists=$(q "$db" "SELECT count(*) FROM conversations WHERE id = $id")
	n1=$(nmsg "$db" "$id")
	if [ "$op" = turn ] && [ "$lines1" -gt "$lines0" ] && [ "$n1" -ne $((n0 + 2)) ]; then
		fail "kill $k ($mode turn): a completed turn lost ($n0 -> $n1 messages)"
		n_lost=$((n_lost + 1))
	fi
	bad=$(q "$db" "SELECT count(*) FROM messages WHERE conv_id = $id AND role != 1 + (seq % 2)")
	[ "$bad" = 0 ] || fail "kill $k ($mode $op): $bad messages out of user/assistant order"
	dangling=0
	if [ "$exists" = 1 ] && [ $((n1 % 2)) = 1 ]; then
		dangling=1
		n_dangling=$((n_dangling + 1))
		kept=$(q "$db" "SELECT hex(text) FROM messages WHERE conv_id = $id ORDER BY seq DESC LIMIT 1")
		want=$last_user
		[ "$op" = turn ] && want=$(printf '%s' "$TURN" | od -An -tx1 | tr -d ' \n' | tr a-f A-F)
		[ "$kept" = "$want" ] || fail "kill $k ($mode $op): the typed message is not the one kept"
	fi
	gaps=$(q "$db" "SELECT count(*) FROM kv_chunks a WHERE a.conv_id = $id AND a.part = 0 AND
	    a.pos0 > 0 AND NOT EXISTS (SELECT 1 FROM kv_chunks b WHERE b.conv_id = a.conv_id AND
	    b.part = 0 AND b.pos1 = a.pos0)")
	[ "$gaps" = 0 ] || fail "kill $k ($mode $op): $gaps gaps in the snapshot chunks"
	# --- what happened: completed, unchanged, or a message left without its reply ---
	done_op=0
	case $op in
	turn) [ "$n1" -eq $((n0 + 2)) ] && done_op=1 ;;
	undo) [ "$n1" -eq $((n0 - 2)) ] && done_op=1 ;;
	delete) [ "$exists" = 0 ] && done_op=1 ;;
	retry) [ "$n1" -eq "$n0" ] && [ "$(msgs "$db" "$id")" != "$(msgs "$W/pre.db" "$id")" ] && done_op=1 ;;
	esac
	if [ $dangling = 0 ] && [ $done_op = 0 ] && [ "$(msgs "$db" "$id")" = "$(msgs "$W/pre.db" "$id")" ]; then
		n_unchanged=$((n_unchanged + 1))
	elif [ $dangling = 0 ]; then
		n_completed=$((n_completed + 1))
	fi
	# --- resumed (killed database, new process) against uninterrupted (PRE) ---
	if [ "$exists" = 1 ]; then
		echo "$PROBE" | "$KVCHAT" $(opts $mode "$db") --resume "$id" >/dev/null 2>"$W/res.err" ||
			{ fail "kill $k ($mode $op): resume failed"; cat "$W/res.err"; }
		# the stats line's "rebuilt" (a slide's "none recomputed" is not one)
		if [ $dangling = 0 ] && grep -qE '\| rebuilt( \||\])|rebuilding' "$W/res.err"; then
			n_rebuilt=$((n_rebuilt + 1))
			fail "kill $k ($mode $op): the resume rebuilt the cache from the tokens"
			grep -E 'rebuil' "$W/res.err" | head -n 2
		fi
	fi
	verdict=""
	if [ $dangling = 0 ]; then
		copy "$W/pre.db" "$W/ref.db"
		start $mode "$W/ref.db" || continue
		if [ $done_op = 1 ]; then
			send $op
			poll prompts_at_least 2
		fi
		if [ "$op" != delete ] || [ $done_op = 0 ]; then
			T send-keys -t t -l "$PROBE"; T send-keys -t t Enter
			poll prompts_at_least $((2 + done_op))
		fi
		quit_pane
		if [ "$(msgs "$db" "$id")" = "$(msgs "$W/ref.db" "$id")" ]; then
			n_equal=$((n_equal + 1))
			verdict=", resumed = uninterrupted"
		else
			fail "kill $k ($mode $op after ${delay}s): resumed differs from uninterrupted"
			verdict=", DIFFERS"
		fi
	fi
	echo "kill $k: $mode $op after ${delay}s: $n0 -> $n1 messages$( [ "$exists" = 0 ] && echo ', deleted')$( [ $dangling = 1 ] && echo ', message kept without reply')$verdict"
done <"$W/plan"
echo "summary: $k kills (seed $SEED), $FAILS failed checks; completed operations $n_completed, unchanged $n_unchanged, message kept without its reply $n_dangling; resumed = uninterrupted $n_equal of $((k - n_dangling)); completed turns lost $n_lost; resumes that rebuilt (not after a message left without its reply) $n_rebuilt"
[ "$FAILS" -eq 0 ]
