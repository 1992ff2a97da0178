#!/bin/sh
# bench/serve.sh (issue 24): kvchat serve under load, and the turns of a
# conversation across restarts, against llama-server on the same file.
#
#   bench/serve.sh MODEL.gguf [LLAMA_SERVER]     (run from the build folder)
#   env: SERVE_CLIENTS (default "1 4 16"), SERVE_REQUESTS (per client, default 4),
#        SERVE_TOKENS (max_tokens, default 64), SERVE_THREADS (default: the cores),
#        SERVE_TURNS (default 30), SERVE_RESTART (turns between restarts, default 10),
#        LLAMA_ARGS (more llama-server options, e.g. "-nr" where its weight
#        repacking dies with SIGILL; default none: the peer as it comes),
#        SERVE_OUT (where the results go, default serve-results.jsonl, replaced)
#
# For docs/BENCHMARKS.md, on an idle machine, from the build folder:
#   bench/serve.sh ~/.cache/kvchat/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
#       LLAMA_DIR/build-cpu/bin/llama-server   (a llama.cpp built by ../shared/peers/build-llamacpp.sh)
# It ends with the figures as Markdown tables (serve.py table).
#
# 1. For each client count: TTFT p50/p99 and aggregate decode tok/s of
#    streamed greedy chat requests, kvchat serve --parallel N and, when
#    given, llama-server -np N (same threads, same context per slot).
# 2. A conversation of SERVE_TURNS turns that resends its whole history,
#    kvchat serve restarted every SERVE_RESTART turns (the conversation is
#    stored although the client names no conversation, so its history comes
#    back from the database's snapshot: cached_tokens), llama-server
#    restarted likewise (it re-prefills everything after a restart).
# Figures are only meaningful on an idle machine.
set -u
MODEL=$1
LLAMA=${2:-}
KVCHAT=${KVCHAT:-./kvchat}
HERE=$(cd "$(dirname "$0")" && pwd)
THREADS=${SERVE_THREADS:-$(nproc)}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvchat-bench-serve.XXXXXX")
OUT=${SERVE_OUT:-serve-results.jsonl}
: >"$OUT"
PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"' EXIT

# kv_start PARALLEL: kvchat serve on a free port; URL set.
kv_start() {
	"$KVCHAT" serve -m "$MODEL" --port 0 --parallel "$1" --threads "$THREADS" --ctx 4096 --quiet \
	    --db "$TMP/bench.db" 2>"$TMP/kv.err" &
	PID=$!
	URL=""
	for _i in $(seq 1 600); do
		p=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\)\/v1.*/\1/p' "$TMP/kv.err")
		[ -n "$p" ] && URL="http://127.0.0.1:$p/v1" && return 0
		sleep 0.1
	done
	echo "kvchat serve did not start:"; cat "$TMP/kv.err"; exit 1
}

# ls_start PARALLEL: llama-server on a fixed port; URL set.
ls_start() {
	port=$((20000 + $$ % 20000))
	# shellcheck disable=SC2086 # LLAMA_ARGS: several words
	"$LLAMA" -m "$MODEL" --port "$port" -np "$1" -t "$THREADS" -c $((4096 * $1)) \
	    ${LLAMA_ARGS:-} >"$TMP/ls.log" 2>&1 &
	PID=$!
	URL="http://127.0.0.1:$port/v1"
	for _i in $(seq 1 1200); do
		curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "llama-server did not start:"; tail -5 "$TMP/ls.log"; exit 1
}

stop() { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=""; }
name=$(basename "$MODEL" .gguf)

for c in ${SERVE_CLIENTS:-1 4 16}; do
	kv_start "$c"
	printf 'kvchat serve, '
	python3 "$HERE/serve.py" load "$URL" "$name" "$c" "${SERVE_REQUESTS:-4}" "${SERVE_TOKENS:-64}" \
	    "$OUT" "kvchat serve"
	stop
	if [ -n "$LLAMA" ]; then
		ls_start "$c"
		printf 'llama-server, '
		python3 "$HERE/serve.py" load "$URL" "$name" "$c" "${SERVE_REQUESTS:-4}" "${SERVE_TOKENS:-64}" \
		    "$OUT" "llama-server"
		stop
	fi
done

turns=${SERVE_TURNS:-30}
every=${SERVE_RESTART:-10}
for who in "kvchat serve" ${LLAMA:+llama-server}; do
	echo "$who: $turns turns, restarted every $every"
	rm -f "$TMP/state.json"
	t=1
	while [ "$t" -le "$turns" ]; do
		last=$((t + every - 1))
		[ "$last" -gt "$turns" ] && last=$turns
		if [ "$who" = "kvchat serve" ]; then kv_start 1; else ls_start 1; fi
		python3 "$HERE/serve.py" turns "$URL" "$name" "$t" "$last" "$TMP/state.json" "$OUT" "$who"
		stop
		t=$((last + 1))
	done
done

echo
python3 "$HERE/serve.py" table "$OUT"
