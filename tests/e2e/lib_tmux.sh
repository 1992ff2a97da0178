# tests/e2e/lib_tmux.sh: driving kvchat through a pseudo-terminal, for the
# tests of what a person types (sourced after lib.sh). kvchat runs in a
# tmux pane on a private server socket with the configuration in
# $KVC_TMUX_CONF (lib.sh); keys go in with send-keys, and the screen is read
# back with capture-pane.
# Settings a test may make before sourcing this file:
#   KVC_TMUX_SCROLL  lines of scrollback screen() reads (default 500)
#   KVC_TMUX_PROMPT  what prompt_ready accepts as the empty prompt on the last
#                    line, an extended regex (default '(>>>|\.\.\.)': the main
#                    prompt or a continuation; '>>>' for the main prompt only)
# A test that adds to the clean-up sets its own EXIT trap after sourcing,
# calling tmux_stop (every server this test started) before removing files.
command -v tmux >/dev/null || { echo "FAIL: tmux is not installed (scripts/deps.sh installs it)"; exit 1; }
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
: "${KVC_TMUX_SCROLL:=500}"
: "${KVC_TMUX_PROMPT:=(>>>|\.\.\.)}"
SOCK_BASE="kvchat-test-$$"
SOCK="$SOCK_BASE"
N_SOCK=0
T() { tmux -L "$SOCK" -f "$KVC_TMUX_CONF" "$@"; }
# new_server: the next T command starts (and talks to) a server of its own,
# for tests that want a fresh server for each start of kvchat.
new_server() {
	N_SOCK=$((N_SOCK + 1))
	SOCK="$SOCK_BASE-$N_SOCK"
}
# tmux_stop: end every server this test started.
tmux_stop() {
	tmux -L "$SOCK_BASE" kill-server 2>/dev/null
	_s=1
	while [ $_s -le $N_SOCK ]; do
		tmux -L "$SOCK_BASE-$_s" kill-server 2>/dev/null
		_s=$((_s + 1))
	done
	return 0
}
trap 'tmux_stop; rm -rf "$TMPD"' EXIT
screen() { T capture-pane -p -J -t t -S "-$KVC_TMUX_SCROLL"; }
# screen_dump: what a timed-out wait shows of the screen (a test with very
# long lines on it may redefine this to show less).
screen_dump() { screen; }
# wait_within DESC N COMMAND...: poll (every 0.1 s, N times at most) until
# COMMAND succeeds; counts as one check.
wait_within() {
	_d=$1 _n=$2; shift 2
	_i=0
	while ! "$@" >/dev/null 2>&1; do
		_i=$((_i + 1))
		if [ $_i -gt "$_n" ]; then
			fail "timed out waiting for: $_d"
			echo "--- screen:" >&2; screen_dump >&2; echo "---" >&2
			return 1
		fi
		sleep 0.1
	done
	ok
	return 0
}
# wait_for DESC COMMAND...: wait_within 60 s (sanitizer builds on a loaded
# machine are slow; a wait only takes that long when it fails).
wait_for() {
	_w=$1; shift
	wait_within "$_w" 600 "$@"
}
on_screen() { screen | grep -qF -- "$1"; }
# count_on_screen TEXT: how many screen lines hold TEXT
count_on_screen() { screen | grep -cF -- "$1"; }
keys() { T send-keys -t t "$@"; }
text() { T send-keys -t t -l -- "$1"; }
# The last non-empty line is an empty prompt ($KVC_TMUX_PROMPT): keys sent
# now cannot race the previous reply.
prompt_ready() { screen | grep -v '^[[:space:]]*$' | tail -n 1 | grep -Eq "^$KVC_TMUX_PROMPT[[:space:]]*\$"; }
# prompts_are N: N lines on the screen start with the main prompt (each
# finished command or turn leaves one behind, then a new one is drawn).
prompts_are() { [ "$(screen | grep -c '^>>>')" -ge "$1" ] && prompt_ready; }
# start ARGS...: kvchat ARGS in a fresh pane; its exit status is printed after it.
start() {
	T kill-session -t t 2>/dev/null
	_a=""
	for _x in "$@"; do _a="$_a '$_x'"; done
	T new-session -d -s t -x 200 -y 50 \
	    "LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' $_a; echo KVCHAT-EXIT:\$?; sleep 60"
}
# cmd LINE: type a line and wait until the next prompt is drawn.
cmd() {
	_n=$(screen | grep -c '^>>>')
	text "$1"; keys Enter
	wait_for "after '$1'" prompts_are $((_n + 1))
}
# reply_streams LINE: the typed LINE is on the screen after the main prompt
# (">>> LINE", its last such row) and a row below it holds text that is not
# the prefill's progress line: the turn was sent and its reply is
# streaming, so a key sent now reaches the reply (before the line is shown
# Ctrl-C would only clear what was typed; during a prefill slow enough to
# show its progress, it takes the turn back).
reply_streams() {
	screen | awk -v l=">>> $1" 'index($0, l) == 1 { f = 1; r = 0; next }
	    f && /[^[:space:]]/ && !/^[a-z]+ [0-9]+\/[0-9]+ positions/ { r = 1 }
	    END { exit !r }'
}
sql() { sqlite3 "$DB" "$1"; }
# has_lines FILE N: FILE (a --stats-json record file) holds N lines or more.
has_lines() { [ "$(cat "$1" 2>/dev/null | wc -l)" -ge "$2" ]; }
