#!/bin/sh
# test_serve.sh (issue 24): kvchat serve on a free loopback port, driven by
# tests/e2e/serve_client.py (and curl): greedy replies, streamed and not, chat and raw
# completions, equal kvchat generate's on the same rendered prompt; a
# repeated prompt reuses its resident cache; 8 concurrent streams (4
# decoding together, the rest waiting) each equal to its run alone; a client
# that disconnects mid-stream, and one that leaves a non-streamed request
# once it generates (completion, and a stored conversation's turn: the reply
# so far kept, marked interrupted, the next turn continuing it) or before
# (the turn taken back whole); SIGTERM: new requests 503 while the running
# one ends whole, or with --grace 0 is stopped (its reply so far stored), and
# exit 0; bad requests each get their status and change
# nothing in the store; a stored conversation written through the API,
# continued by the REPL, continued again after a restart with its history
# from the snapshot (cached_tokens), reused by an unnamed request that
# resends it (its snapshot read, nothing written), refused while the REPL holds it;
# a restarted server taking back the caches of the conversations used last; the
# key; --kv-budget letting idle caches go; --max-queue's 429; a non-loopback
# address refused
# without one. The server is stopped
# at the end, also when a check fails.
. "$top_srcdir/tests/e2e/lib.sh"
command -v python3 >/dev/null 2>&1 || skip "python3 is needed to drive the server"

tiny_model 11
DB=$TMPD/s.db
SPID=""
PORT=""
# stop_server [quiet]: SIGTERM; it must exit 0 (under the sanitizers: no report).
stop_server() {
	if [ -n "$SPID" ]; then
		kill "$SPID" 2>/dev/null
		wait "$SPID" 2>/dev/null
		_rc=$?
		SPID=""
		if [ "${1:-}" != quiet ]; then
			check "kvchat serve stops cleanly (exit $_rc)" [ "$_rc" -eq 0 ]
			check "...saying nothing of a sanitizer" sh -c "! grep -q 'Sanitizer\|runtime error' '$TMPD/serve.err'"
		fi
	fi
}
# wait_server: kvchat serve stops by itself (a step sent the signal); it must exit 0.
wait_server() {
	wait "$SPID" 2>/dev/null
	_rc=$?
	SPID=""
	check "kvchat serve stops by itself, cleanly (exit $_rc)" [ "$_rc" -eq 0 ]
	check "...saying so" grep -q "kvchat: serve: stopped" "$TMPD/serve.err"
	check "...and nothing of a sanitizer" sh -c "! grep -q 'Sanitizer\|runtime error' '$TMPD/serve.err'"
}
trap 'stop_server quiet; [ -n "${RPID:-}" ] && kill "$RPID" 2>/dev/null; rm -rf "$TMPD"' EXIT

# start_server ARGS...: kvchat serve on the test's database (lib.sh's serve_start).
start_server() { serve_start "$DB" "$@"; }

client() {
	if python3 "$top_srcdir/tests/e2e/serve_client.py" "$1" "$PORT" "$KVCHAT" "$M" "$TMPD"; then
		ok
	else
		fail "serve: $1"
	fi
}

# What the store holds, to see that a request changed nothing.
store_dump() { sqlite3 "$DB" "select id, title, system, settings from conversations;
	select id, conv_id, role, text from messages; select count(*) from kv_chunks;" 2>&1; }

start_server --parallel 4
client basic
client curl
client concurrent
store_dump >"$TMPD/before"
client bad
store_dump >"$TMPD/after"
check "bad requests change nothing in the store" cmp -s "$TMPD/before" "$TMPD/after"
client conv_new
stop_server

# The REPL continues what the API wrote.
CID=$(python3 -c "import json; print(json.load(open('$TMPD/conv.json'))['id'])")
printf 'from the repl\n' | "$KVCHAT" -m "$M" --db "$DB" --resume "$CID" -n 5 --temp 0 \
    >"$TMPD/repl.out" 2>"$TMPD/repl.err"
check "the REPL resumes the API's conversation" [ $? -eq 0 ]
check "...from its snapshot" grep -q "snapshot\|0 computed\|reused" "$TMPD/repl.err"
python3 - "$DB" "$CID" "$TMPD/repl_turn.json" <<'PY' || fail "reading the REPL's turn"
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("select role, text from messages where conv_id = ? order by id desc limit 2",
                  (int(sys.argv[2]),)).fetchall()[::-1]
assert [r[0] for r in rows] == [1, 2], rows
json.dump([{"role": "user", "content": rows[0][1]}, {"role": "assistant", "content": rows[1][1]}],
          open(sys.argv[3], "w"))
PY

# A restart: the history comes back from the snapshot, only the new message is computed.
start_server --parallel 2
client conv_resumed
check "the turn is stored" [ "$(sqlite3 "$DB" "select count(*) from messages where conv_id = $CID")" -eq 8 ]
stop_server
# (--no-warmup: the sequences start empty, the request reads the snapshot itself)
start_server --parallel 2 --no-warmup
check "--no-warmup takes back no cache" sh -c "! grep -q 'taken back' '$TMPD/serve.err'"
client anon_stored
check "the snapshot was used" grep -q "positions from the snapshot of conversation $CID" "$TMPD/serve.err"
check "an unnamed request adds nothing to the named conversation" \
    [ "$(sqlite3 "$DB" "select count(*) from messages where conv_id = $CID")" -eq 8 ]
client anon_first
stop_server
# Unnamed requests after a restart: the history from the snapshot they were stored with,
# read before the server listens (the caches of the conversations used last taken back).
start_server --parallel 2
check "a restarted server takes back the caches of the conversations used last" \
    grep -q "the caches of 2 stored conversations taken back" "$TMPD/serve.err"
client anon_restart
check "...so the request continuing one reads no snapshot" \
    sh -c "! grep -q 'positions from the snapshot' '$TMPD/serve.err'"
stop_server
start_server --keep-unnamed 2
client anon_keep

# The REPL holds the conversation: the server refuses it, and stores nothing.
mkfifo "$TMPD/repl.in"
"$KVCHAT" -m "$M" --db "$DB" --resume "$CID" <"$TMPD/repl.in" >/dev/null 2>"$TMPD/repl2.err" &
RPID=$!
exec 5>"$TMPD/repl.in"
for _i in $(seq 1 600); do
	[ "$(sqlite3 "$DB" "select count(*) from locks where conv_id = $CID")" -gt 0 ] && break
	sleep 0.1
done
check "the REPL holds the conversation" [ "$(sqlite3 "$DB" "select count(*) from locks where conv_id = $CID")" -gt 0 ]
n0=$(sqlite3 "$DB" "select count(*) from messages")
client conv_locked
check "a refused turn stores nothing" [ "$(sqlite3 "$DB" "select count(*) from messages")" -eq "$n0" ]
exec 5>&-
wait "$RPID" 2>/dev/null
RPID=""
stop_server

# SIGTERM: new requests get 503 (OpenAI's error shape) while the running one
# ends whole and is stored; then kvchat serve exits 0 by itself.
start_server --parallel 2
SERVE_PID=$SPID
export SERVE_PID
client shutdown
wait_server

# The key: every request but /health needs it.
printf 's3cret-key\n' >"$TMPD/key"
start_server --api-key-file "$TMPD/key"
store_dump >"$TMPD/before"
client auth
store_dump >"$TMPD/after"
# (the one request with the key is a completion, which is not stored either)
check "requests without the key change nothing in the store" cmp -s "$TMPD/before" "$TMPD/after"
stop_server

# --kv-budget: idle caches let go (a database of its own, storing nothing:
# a stored request's snapshot would give the prompt back).
serve_start "$TMPD/budget.db" --kv-budget 1K --keep-unnamed 0
client budget
stop_server

# A non-streamed request whose client leaves, on a model wide enough that a
# reply takes seconds: on the tiny one an idle machine can finish the reply
# (or reach its end of turn) before the client is seen gone.
wide_model "$TMPD/w.gguf"
M_TINY=$M
M=$TMPD/w.gguf
KVC_SERVE_DB=$TMPD/dp.db
export KVC_SERVE_DB
serve_start "$KVC_SERVE_DB" --parallel 2
client disconnect_plain
stop_server
# --grace 0: SIGTERM stops a stored conversation's turn at once, its reply so far stored.
serve_start "$KVC_SERVE_DB" --parallel 2 --grace 0
SERVE_PID=$SPID
client shutdown_now
wait_server
# A stream whose client leaves after its first events: on the tiny model a
# fast machine finishes all 2000 tokens before the client's close is seen.
serve_start "$KVC_SERVE_DB" --parallel 2
client disconnect
# noticed at the server's next write to the closed connection
for _i in $(seq 1 300); do
	grep -q "the client went away" "$TMPD/serve.err" && break
	sleep 0.1
done
check "the disconnect was noticed" grep -q "the client went away" "$TMPD/serve.err"
stop_server
# --max-queue 0: nothing waits; a request while the one sequence is busy is
# 429 (the busy one a greedy reply of 2000 tokens, seconds on this model).
serve_start "$KVC_SERVE_DB" --parallel 1 --max-queue 0
client queue
stop_server
M=$M_TINY
unset KVC_SERVE_DB

# Another address than loopback, without a key: refused before anything starts.
"$KVCHAT" serve -m "$M" --host 0.0.0.0 --port 0 --db "$DB" >/dev/null 2>"$TMPD/open.err"
check "a public address without a key is refused" [ $? -eq 2 ]
check "...saying how to give one" grep -q "api-key-file" "$TMPD/open.err"

done_testing
