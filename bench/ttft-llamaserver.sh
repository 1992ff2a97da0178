#!/bin/sh
# bench/ttft-llamaserver.sh (issue 11, "multi-turn TTFT <= llama-server's"):
# bench/ttft.sh's conversation (same fixture model, messages and reply
# length) through kvchat and through a given llama-server, alternated
# (kvchat, llama-server, kvchat, llama-server ...) for a number of rounds at
# one thread count; prints each turn's TTFT for both (medians over the
# rounds), how each grows from the early to the late turns, and the median
# of the per-turn ratios kvchat / llama-server.
#
#   bench/ttft-llamaserver.sh LLAMA_SERVER [BUILDDIR]   (default: the current directory)
#   env: TTFT_TURNS (default 54), TTFT_GEN (reply tokens, default 48),
#        TTFT_THREADS (default: the cores), TTFT_ROUNDS (default 2),
#        TTFT_WAIT (seconds any one wait on llama-server may last, default 120),
#        LLAMA_SERVER_ARGS (more arguments for llama-server), TTFT_OUT (keep files there)
#
# Both programs prefill the same tokens each turn: the token ids come from
# kvchat itself (the round's database holds every message's exact ids, and
# --stats-json each turn's reused and computed counts), and llama-server gets
# them as a token-id array on /completion with cache_prompt. Its reply will
# not be kvchat's, so before each turn an untimed request (n_predict 0) brings
# its cache to kvchat's history, reply included; the timed request then
# computes only the turn's own tokens, which the script checks against
# llama-server's timings.prompt_n, and samples one token (TTFT needs no more;
# TTFT_GEN sets the length of kvchat's replies, which both caches hold).
# llama-server's TTFT is timings.prompt_ms (prompt processing to the first
# token sampled); kvchat's is ttft_ms (line read to first token written).
# Requests are greedy under a printable-ASCII grammar (see the .py file).
# Where llama.cpp's AMX kernels fault (a VM listing amx_tile without
# enabling it), LLAMA_SERVER_ARGS=--no-repack turns them off.
#
# llama-server listens on 127.0.0.1 only, on a free port picked at random;
# it is started afresh for each round (an empty cache, as kvchat's new
# conversation) and stopped when the round ends or the script exits.
set -u
usage() { echo "usage: bench/ttft-llamaserver.sh LLAMA_SERVER [BUILDDIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
LS=$1
[ -x "$LS" ] || { echo "ttft-llamaserver.sh: $LS is not an executable llama-server" >&2; exit 2; }
B=$(cd "${2:-.}" && pwd) || usage
KVCHAT=${KVCHAT:-$B/kvchat}
MKMODEL=$B/tests/fixtures/mkmodel
SRC=$(cd "$(dirname "$0")" && pwd)
TURNS=${TTFT_TURNS:-54}
GEN=${TTFT_GEN:-48}
THREADS=${TTFT_THREADS:-$(nproc)}
ROUNDS=${TTFT_ROUNDS:-2}
WAIT=${TTFT_WAIT:-120}
for v in "$TURNS" "$GEN" "$THREADS" "$ROUNDS" "$WAIT"; do
	case $v in ''|*[!0-9]*|0) echo "ttft-llamaserver.sh: counts must be positive integers ($v)" >&2; exit 2;; esac
done
[ -x "$KVCHAT" ] && [ -x "$MKMODEL" ] || { echo "ttft-llamaserver.sh: build first ($KVCHAT, $MKMODEL)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "ttft-llamaserver.sh: needs python3" >&2; exit 2; }

D=${TTFT_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/kvchat-ttftls.XXXXXX")}
mkdir -p "$D"
pid=""
# Stop llama-server: TERM, up to 10 s for it to go, then KILL.
stop_server() {
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null
	n=0
	while kill -0 "$pid" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	pid=""
}
# waitfor INPUT COMMAND...: run COMMAND in the background, reading INPUT,
# and wait for it: the shell runs a trap only between commands, and a
# wait, unlike a command in the foreground, is cut short by a signal, so ^C
# stops the run at once.
child=""
waitfor() {
	_in=$1
	shift
	"$@" <"$_in" &
	child=$!
	wait "$child"
	_rc=$?
	child=""
	return $_rc
}
cleanup() {
	[ -z "$child" ] || kill "$child" 2>/dev/null
	stop_server
	[ -n "${TTFT_OUT:-}" ] || rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
export HOME="$D/home" XDG_DATA_HOME="$D/data" XDG_STATE_HOME="$D/state"
mkdir -p "$HOME"

"$MKMODEL" -o "$D/m.gguf" --arch qwen3 --type q8_0 --vocab bpe --ctx 8192 --n-embd 768 \
    --n-layer 2 --n-head 2 --n-head-kv 1 --head-dim 32 --n-ff 6144 --seed 7 --quiet ||
	{ echo "ttft-llamaserver.sh: mkmodel failed" >&2; exit 1; }

# The messages of bench/ttft.sh: one sentence with a two-digit turn number.
i=10
while [ $i -lt $((10 + TURNS)) ]; do
	echo "Turn $i: please read this paragraph about lighthouses, tides, weather and ships at sea, and then continue the story in the same calm style as before, adding one new detail."
	i=$((i + 1))
done >"$D/in.txt"

echo "kvchat: $KVCHAT"
echo "llama-server: $LS -m MODEL --host 127.0.0.1 --port (free) -c 8192 -np 1 -t $THREADS -tb $THREADS ${LLAMA_SERVER_ARGS:-}"
echo "$TURNS turns, $GEN reply tokens, $THREADS threads, $ROUNDS rounds; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

r=1
while [ $r -le "$ROUNDS" ]; do
	# A: kvchat, a new conversation in a new database.
	waitfor "$D/in.txt" "$KVCHAT" -m "$D/m.gguf" --db "$D/kv$r.db" --session ttft --temp 0 \
	    -n "$GEN" --ctx 8192 --ctx-overflow stop --threads "$THREADS" --stats-json "$D/kv$r.json" \
	    >/dev/null 2>"$D/kv$r.err" ||
		echo "ttft-llamaserver.sh: kvchat exited with status $? in round $r"
	[ -s "$D/kv$r.json" ] || { echo "ttft-llamaserver.sh: kvchat ran no turn:" >&2; cat "$D/kv$r.err" >&2; exit 1; }
	# B: llama-server fed the same tokens, turn by turn.
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') ||
		{ echo "ttft-llamaserver.sh: no free port" >&2; exit 1; }
	# shellcheck disable=SC2086 # LLAMA_SERVER_ARGS is a list of words
	"$LS" -m "$D/m.gguf" --host 127.0.0.1 --port "$port" -c 8192 -np 1 \
	    -t "$THREADS" -tb "$THREADS" ${LLAMA_SERVER_ARGS:-} >"$D/ls$r.log" 2>&1 &
	pid=$!
	waitfor /dev/null python3 "$SRC/ttft-llamaserver.py" feed "$D/kv$r.db" "$D/kv$r.json" "$port" "$pid" \
	    "$WAIT" "$D/ls$r.json" ||
		{ echo "ttft-llamaserver.sh: round $r: llama-server failed; the end of its log:" >&2
		  tail -n 20 "$D/ls$r.log" >&2; exit 1; }
	stop_server
	r=$((r + 1))
done

python3 "$SRC/ttft-llamaserver.py" report "$D" "$ROUNDS"
