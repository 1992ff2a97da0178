# tests/e2e/lib.sh: helpers for kvchat's shell tests (sourced).
# The test environment sets KVCHAT, top_srcdir, top_builddir, SHARED_DATA.
set -u
T_PASS=0
T_FAIL=0
# Real models fetched once per machine by scripts/fetch-models.sh, found
# before HOME is replaced below (KVCHAT_GEMMA3 overrides the path).
GEMMA3=${KVCHAT_GEMMA3:-${XDG_CACHE_HOME:-$HOME/.cache}/kvchat/models/gemma-3-270m-q4_k_m.gguf}
QWEN25=${KVCHAT_QWEN25:-${XDG_CACHE_HOME:-$HOME/.cache}/kvchat/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
TMPD=$(mktemp -d "${TMPDIR:-/tmp}/kvchat-test.XXXXXX")
trap 'rm -rf "$TMPD"' EXIT
export HOME="$TMPD/home" XDG_DATA_HOME="$TMPD/data" XDG_STATE_HOME="$TMPD/state" XDG_CONFIG_HOME="$TMPD/config"
mkdir -p "$HOME"

ok() { T_PASS=$((T_PASS + 1)); }
fail() { T_FAIL=$((T_FAIL + 1)); echo "FAIL: $*" >&2; }
# check DESCRIPTION COMMAND...: passes when the command succeeds
check() { d=$1; shift; if "$@"; then ok; else fail "$d"; fi; }
skip() { echo "SKIP: $*"; exit 77; }
have_gemma3() { [ -f "$GEMMA3" ]; }
have_qwen25() { [ -f "$QWEN25" ]; }
have_shared() { [ -f "${SHARED_DATA:-/nonexistent}/SOURCES.md" ]; }
done_testing() { echo "$T_PASS passed, $T_FAIL failed"; [ "$T_FAIL" -eq 0 ]; }
# The sqlite3 shell has no busy timeout by default: a read that lands while
# kvchat commits would fail at once and read as an empty answer.
sqlite3() { command sqlite3 -cmd '.timeout 10000' "$@"; }

# The fixture generator, and helpers the end-to-end tests share.
MKMODEL="$top_builddir/tests/fixtures/mkmodel"
# jget FILE LINE KEY: a scalar field of the JSON object on line LINE of FILE
jget() { sed -n "${2}p" "$1" | sed -n "s/.*\"$3\" *: *\([^,}]*\).*/\1/p"; }
# tiny_model SEED [CTX]: the usual fixture model at $M ($TMPD/m.gguf): tiny
# qwen2, F32, a BPE vocabulary, CTX positions (8192 by default), weights
# from SEED. Without it the test cannot go on, so it fails here.
# KVC_E2E_ARCH=qwen3moe (say) runs a test on another architecture, by hand.
tiny_model() {
	M="$TMPD/m.gguf"
	"$MKMODEL" -o "$M" --preset tiny --arch "${KVC_E2E_ARCH:-qwen2}" --type f32 --vocab bpe --ctx "${2:-8192}" \
	    --seed "$1" >/dev/null || { echo "FAIL: mkmodel"; exit 1; }
}

# wide_model PATH: a q3_k qwen2 model at PATH wide enough (1024 wide, 8
# layers) that a few hundred positions take seconds on any machine here,
# for the tests that stop a long prefill or rebuild; fails the test without it.
# Q3_K: a type without a packed kernel (quant_pack.c), whose 3x faster
# prefill would finish before the interrupt arrives (Q6_K, which this was,
# is packed since issue 21's K-quant kernels).
wide_model() {
	"$MKMODEL" -o "$1" --arch qwen2 --type q3_k --vocab bpe --ctx 8192 --seed 7 --n-embd 1024 \
	    --n-layer 8 --n-head 16 --n-head-kv 4 --head-dim 64 --n-ff 2816 >/dev/null ||
		{ echo "FAIL: mkmodel"; exit 1; }
}

# ms: milliseconds since the epoch.
ms() { date +%s%N | cut -c1-13; }

# kvrun DESC ERRFILE ARGS...: kvchat ARGS (stdin/stdout as redirected), must exit 0.
kvrun() {
	_d=$1 _e=$2; shift 2
	"$KVCHAT" "$@" 2>"$_e"
	_rc=$?
	if [ $_rc -eq 0 ]; then ok; else fail "$_d (exit $_rc)"; cat "$_e" >&2; fi
	return $_rc
}

# The terminal tests' tmux: a private server that outlives its sessions
# (exit-empty off), so a session started right after one was closed never
# reaches a server on its way out ("server exited unexpectedly").
KVC_TMUX_CONF="$TMPD/tmux.conf"
printf 'set -s exit-empty off\n' >"$KVC_TMUX_CONF"

# serve_start DB ARGS...: kvchat serve -m "$M" --db DB on a free loopback
# port, its stderr appended to $TMPD/serve.err; SPID is its pid and PORT
# the port its "listening" line names. A server that does not start fails
# the test with its messages.
serve_start() {
	_db=$1
	shift
	: >"$TMPD/serve.err"
	"$KVCHAT" serve -m "$M" --port 0 --db "$_db" --threads 2 "$@" 2>>"$TMPD/serve.err" &
	SPID=$!
	PORT=""
	for _i in $(seq 1 300); do
		PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\)\/v1.*/\1/p' "$TMPD/serve.err")
		[ -n "$PORT" ] && break
		kill -0 "$SPID" 2>/dev/null || break
		sleep 0.1
	done
	if [ -z "$PORT" ]; then
		echo "FAIL: kvchat serve did not start:"; cat "$TMPD/serve.err"; exit 1
	fi
}
