#!/bin/sh
# test_ttft_llamaserver.sh: bench/ttft-llamaserver.sh (issue 11) against a
# stand-in llama-server (python3 http.server answering /health and
# /completion as llama-server does, with a prompt cache and timings
# prompt_ms = 0.5 ms x prompt_n + 3): the runs alternate kvchat /
# llama-server; the server listens on 127.0.0.1 and is gone when the script
# ends; each timed request computes exactly the tokens kvchat computed; the
# table and the median ratio are read right; a server without a cache shows
# as a mismatch, one that never gets ready fails within TTFT_WAIT.
. "$top_srcdir/tests/e2e/lib.sh"
command -v python3 >/dev/null || skip "python3 not found"
S="$top_srcdir/bench/ttft-llamaserver.sh"
SEQ=$TMPD/seq REQ=$TMPD/req PIDF=$TMPD/pid
export SEQ REQ PIDF
cat > "$TMPD/kv" <<EOF2
#!/bin/sh
echo "kvchat \$*" >> "$SEQ"
exec "$KVCHAT" "\$@"
EOF2
cat > "$TMPD/llama-server" <<'EOF2'
#!/usr/bin/env python3
import http.server, json, os, sys, time
args = sys.argv[1:]
open(os.environ["SEQ"], "a").write("llama " + " ".join(args) + "\n")
open(os.environ["PIDF"], "w").write(str(os.getpid()))
opt = dict(zip(args, args[1:]))
if opt.get("--host") != "127.0.0.1":
    sys.exit(3)
mode = os.environ.get("STANDIN_MODE", "ok")
t0 = time.monotonic()
cache = []
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        if self.path != "/health":
            return self.reply(404, {})
        if mode == "never-ready" or time.monotonic() - t0 < 0.3:
            return self.reply(503, {"error": {"code": 503, "message": "Loading model"}})
        self.reply(200, {"status": "ok"})
    def do_POST(self):
        global cache
        q = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        p = q["prompt"]
        open(os.environ["REQ"], "a").write(json.dumps({k: q.get(k) for k in
            ("n_predict", "cache_prompt", "temperature", "top_k")} | {"len": len(p)}) + "\n")
        if mode == "slow":
            time.sleep(60)
        past = 0
        if q.get("cache_prompt") and mode != "nocache":
            while past < min(len(p), len(cache)) and p[past] == cache[past]:
                past += 1
        past = min(past, len(p) - 1)  # at least one token is evaluated
        n = len(p) - past
        # the reply is never kvchat's: tokens no prompt holds
        cache = p + [100000 + i for i in range(max(1, q["n_predict"]))]
        self.reply(200, {"content": "x", "timings": {"prompt_n": n, "prompt_ms": 0.5 * n + 3}})
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(opt["--port"])), H).serve_forever()
EOF2
chmod +x "$TMPD/kv" "$TMPD/llama-server"
export TTFT_TURNS=3 TTFT_GEN=4 TTFT_THREADS=1

KVCHAT="$TMPD/kv" TTFT_ROUNDS=2 sh "$S" "$TMPD/llama-server" "$top_builddir" > "$TMPD/out" 2> "$TMPD/err"
check "script exits 0" [ $? -eq 0 ]
cat "$TMPD/out" "$TMPD/err"
check "runs alternate kvchat, llama-server" [ "$(cut -d' ' -f1 "$SEQ" | tr '\n' ' ')" = "kvchat llama kvchat llama " ]
check "llama-server on 127.0.0.1, a port, one slot, the threads" \
	[ "$(grep -c '^llama -m [^ ]*m.gguf --host 127.0.0.1 --port [1-9][0-9]* -c 8192 -np 1 -t 1 -tb 1 *$' "$SEQ")" -eq 2 ]
check "kvchat at the same threads" [ "$(grep -c '^kvchat .*--threads 1 ' "$SEQ")" -eq 2 ]
check "the server is stopped" sh -c '! kill -0 "$(cat "$PIDF")" 2>/dev/null'
# per round: turn 1 timed; turns 2 and 3 each an untimed n_predict 0 then a timed one
check "requests: greedy, cache_prompt, one token when timed" [ "$(python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
ok = len(r) == 10 and all(x["cache_prompt"] is True and x["temperature"] == 0 and x["top_k"] == 1 for x in r)
ok = ok and [x["n_predict"] for x in r] == [1, 0, 1, 0, 1] * 2
print("ok" if ok else r)' "$REQ")" = ok ]
rows=$(grep -c '^| *[0-9]* |' "$TMPD/out")
check "three turns in the table ($rows)" [ "$rows" -eq 3 ]
# llama-server's column is 0.5 x tokens + 3 when the script made the
# server compute exactly kvchat's tokens; the ratio is the two columns'
check "llama-server column and ratios read from its timings" [ "$(awk -F'|' '/^\| *[0-9]+ \|/ {
	tok = $4 + 0; k = $5 + 0; l = $6 + 0; r = $7; sub(/x.*/, "", r)
	d = k / l - r; if (d < 0) d = -d   # k is rounded to 0.1 ms, r computed before
	if (l != 0.5 * tok + 3 || d > 0.006) bad++ }
	END { print bad + 0 }' "$TMPD/out")" = 0 ]
check "turn 1 computes the whole first message" grep -q '^| *1 | *0 | *117 |' "$TMPD/out"
want=$(awk -F'|' '/^\| *[0-9]+ \|/ { r = $7; gsub(/[ x]/, "", r); print r }' "$TMPD/out" | sort -n | sed -n 2p)
check "median ratio is the middle turn's ($want)" grep -q "median ratio kvchat / llama-server over 3 turns: ${want}x" "$TMPD/out"
check "the fastest-round estimate too" grep -q "fastest of the 2 rounds: median ratio [0-9.]*x; kvchat at or below llama-server on [0-3] of 3 turns" "$TMPD/out"
check "growth lines for both" [ "$(grep -c 'growth [0-9.]*x$' "$TMPD/out")" -eq 2 ]
check "no mismatch" sh -c "! grep -q MISMATCH '$TMPD/out'"

: > "$SEQ"
KVCHAT="$TMPD/kv" STANDIN_MODE=nocache TTFT_ROUNDS=1 TTFT_TURNS=2 sh "$S" "$TMPD/llama-server" "$top_builddir" > "$TMPD/out2" 2>&1
check "a server recomputing the history fails" [ $? -eq 1 ]
check "and shows as a mismatch" grep -q '^MISMATCH: turn 2: kvchat computed 119 tokens' "$TMPD/out2"

: > "$SEQ"
t0=$(date +%s)
KVCHAT="$TMPD/kv" STANDIN_MODE=never-ready TTFT_ROUNDS=1 TTFT_TURNS=1 TTFT_WAIT=2 \
	sh "$S" "$TMPD/llama-server" "$top_builddir" > "$TMPD/out3" 2>&1
check "a server never ready fails" [ $? -eq 1 ]
check "within the wait ($(($(date +%s) - t0)) s)" [ $(($(date +%s) - t0)) -lt 60 ]
check "and says so" grep -q 'not ready after 2 s' "$TMPD/out3"
check "that server is stopped too" sh -c '! kill -0 "$(cat "$PIDF")" 2>/dev/null'

# TERM while a request is under way: the script ends at once, its server too
: > "$REQ"
KVCHAT="$TMPD/kv" STANDIN_MODE=slow TTFT_ROUNDS=1 TTFT_TURNS=1 \
	sh "$S" "$TMPD/llama-server" "$top_builddir" > "$TMPD/out4" 2>&1 &
sp=$!
n=0
while [ ! -s "$REQ" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
check "the slow server got its request" [ -s "$REQ" ]
kill -TERM $sp
n=0
# at once, that is well before the slow stand-in's 60 s (30 s: a loaded machine)
while kill -0 $sp 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
check "TERM ends the script within 30 s" sh -c "! kill -0 $sp 2>/dev/null"
wait $sp
check "with status 143" [ $? -eq 143 ]
check "and stops its server" sh -c '! kill -0 "$(cat "$PIDF")" 2>/dev/null'

sh "$S" > /dev/null 2>&1
check "usage error without llama-server" [ $? -eq 2 ]
sh "$S" "$TMPD/missing" > /dev/null 2>&1
check "a missing llama-server refused" [ $? -eq 2 ]
done_testing
