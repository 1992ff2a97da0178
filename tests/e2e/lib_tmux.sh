# tests/e2e/lib_tmux.sh: driving kvchat through a pseudo-terminal, for the
# tests of what a person types (sourced after lib.sh). kvchat runs in a
# tmux pane on a private server socket with no configuration; keys go in
# with send-keys, and the screen is read back with capture-pane.
command -v tmux >/dev/null || { echo "FAIL: tmux is not installed (scripts/deps.sh installs it)"; exit 1; }
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
SOCK="kvchat-test-$$"
T() { tmux -L "$SOCK" -f "$KVC_TMUX_CONF" "$@"; }
trap 'T kill-server 2>/dev/null; rm -rf "$TMPD"' EXIT
screen() { T capture-pane -p -J -t t -S -500; }
# wait_for DESC COMMAND...: poll (30 s at most: sanitizer builds on a loaded
# machine are slow) until COMMAND succeeds; counts as one check.
wait_for() {
	_d=$1; shift
	_i=0
	while ! "$@" >/dev/null 2>&1; do
		_i=$((_i + 1))
		if [ $_i -gt 300 ]; then
			fail "timed out waiting for: $_d"
			echo "--- screen:" >&2; screen >&2; echo "---" >&2
			return 1
		fi
		sleep 0.1
	done
	ok
	return 0
}
on_screen() { screen | grep -qF -- "$1"; }
# count_on_screen TEXT: how many screen lines hold TEXT
count_on_screen() { screen | grep -cF -- "$1"; }
keys() { T send-keys -t t "$@"; }
text() { T send-keys -t t -l -- "$1"; }
# The last non-empty line is an empty prompt (">>> " or "... "): keys sent
# now cannot race the previous reply.
prompt_ready() { screen | grep -v '^[[:space:]]*$' | tail -n 1 | grep -Eq '^(>>>|\.\.\.)[[:space:]]*$'; }
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
sql() { sqlite3 "$DB" "$1"; }
