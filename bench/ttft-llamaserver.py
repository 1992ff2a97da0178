#!/usr/bin/env python3
"""The two halves of bench/ttft-llamaserver.sh that need more than the shell.

feed DB STATS PORT PID WAIT OUT: replays one kvchat conversation on a
llama-server listening on 127.0.0.1:PORT (process PID): each turn's tokens
exactly as kvchat computed them, read from kvchat's database (DB) and
--stats-json records (STATS); one JSON line per turn to OUT.

report DIR ROUNDS: the per-turn table over all rounds, the early -> late
growth of each program and the median ratio kvchat / llama-server.

Every wait on llama-server is bounded by WAIT seconds.
"""
import json
import os
import sqlite3
import statistics
import sys
import time
import urllib.error
import urllib.request


def die(msg):
    print("ttft-llamaserver: " + msg, file=sys.stderr)
    sys.exit(1)


def kvchat_turns(db, stats):
    """[(stream, reused, computed, ttft_ms)] per turn, from kvchat's own files.

    The token stream is the concatenation of the stored messages' exact ids
    (docs/ARCHITECTURE.md, "Resume"); turn t computed stream[reused:reused +
    prefill_tokens] against a cache holding stream[:reused]."""
    rows = [json.loads(line) for line in open(stats) if line.strip()]
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        blobs = con.execute("SELECT tokens FROM messages ORDER BY conv_id, seq").fetchall()
        convs = con.execute("SELECT COUNT(*) FROM conversations").fetchone()[0]
    finally:
        con.close()
    if convs != 1:
        die("%s holds %d conversations, expected 1" % (db, convs))
    stream, bounds = [], {0}
    for (b,) in blobs:
        if len(b) % 4:
            die("a message's token blob is not whole int32s")
        stream += [int.from_bytes(b[i:i + 4], "little", signed=True) for i in range(0, len(b), 4)]
        bounds.add(len(stream))
    turns = []
    for r in rows:
        a, n = r["reused_tokens"], r["prefill_tokens"]
        # A turn's own tokens are one stored user message: both ends on
        # message boundaries, else the stream is not what kvchat computed.
        if a not in bounds or a + n not in bounds or n <= 0:
            die("turn %d (reused %d, computed %d) does not match the stored messages (%d tokens)"
                % (r["turn"], a, n, len(stream)))
        turns.append((stream, a, n, r["ttft_ms"]))
    return turns


def post(port, body, wait):
    req = urllib.request.Request("http://127.0.0.1:%d/completion" % port,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=wait) as f:
            return json.load(f)
    except urllib.error.HTTPError as e:
        die("/completion answered %d: %s" % (e.code, e.read(300).decode(errors="replace")))
    except (urllib.error.URLError, OSError) as e:
        die("/completion: %s" % e)


def wait_healthy(port, pid, wait):
    """Until /health answers 200, the server process dies, or WAIT seconds."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except OSError:
            die("llama-server (pid %d) exited before it was ready" % pid)
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as f:
                if f.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass  # still loading (503) or not listening yet
        time.sleep(0.2)
    die("llama-server not ready after %d s" % wait)


def feed(db, stats, port, pid, wait, out):
    turns = kvchat_turns(db, stats)
    port, pid, wait = int(port), int(pid), int(wait)
    wait_healthy(port, pid, wait)
    # Greedy. The grammar keeps the reply printable ASCII: llama-server
    # answers 500 when it cannot parse a reply that is not UTF-8, which a
    # random-weight model's byte tokens make likely. It costs nothing at
    # the first token over the fixture's 571 tokens (llama.cpp checks the
    # sampled token against the grammar and resamples only if it fails),
    # and the reply itself is not what is measured.
    greedy = {"temperature": 0, "top_k": 1, "cache_prompt": True, "grammar": "root ::= [ -~]*"}
    with open(out, "w") as o:
        for t, (stream, a, n, _) in enumerate(turns, 1):
            sync_n = 0
            if a:
                # Untimed: the history with kvchat's replies, so the timed
                # request below finds all of it in the cache.
                s = post(port, dict(greedy, prompt=stream[:a], n_predict=0), wait)
                sync_n = s["timings"]["prompt_n"]
            # Timed. One token is all TTFT needs: llama-server's reply is
            # replaced by kvchat's in the next turn's history anyway.
            res = post(port, dict(greedy, prompt=stream[:a + n], n_predict=1), wait)
            tm = res["timings"]
            o.write(json.dumps({"turn": t, "reused": a, "tokens": n, "prompt_n": tm["prompt_n"],
                                "prompt_ms": tm["prompt_ms"], "sync_n": sync_n}) + "\n")


def report(d, rounds):
    rounds = int(rounds)
    kv = [kvchat_turns(os.path.join(d, "kv%d.db" % r), os.path.join(d, "kv%d.json" % r))
          for r in range(1, rounds + 1)]
    ls = [[json.loads(line) for line in open(os.path.join(d, "ls%d.json" % r))]
          for r in range(1, rounds + 1)]
    n = min(len(x) for x in kv + ls)
    bad = []
    rows = []
    for i in range(n):
        k = [x[i] for x in kv]
        s = [x[i] for x in ls]
        a, m = k[0][1], k[0][2]
        if any((y[1], y[2]) != (a, m) for y in k):
            bad.append("turn %d: kvchat computed different tokens in different rounds" % (i + 1))
        if any(y["prompt_n"] != m for y in s):
            bad.append("turn %d: kvchat computed %d tokens, llama-server %s"
                       % (i + 1, m, [y["prompt_n"] for y in s]))
        rows.append((i + 1, a, m, statistics.median(y[3] for y in k),
                     statistics.median(y["prompt_ms"] for y in s),
                     min(y[3] for y in k), min(y["prompt_ms"] for y in s)))
    print()
    print("| turn | history | tokens | kvchat ttft ms | llama-server prompt ms | kvchat / llama-server |")
    print("|-----:|--------:|-------:|---------------:|-----------------------:|----------------------:|")
    for t, a, m, kt, lt, _, _ in rows:
        print("| %4d | %7d | %6d | %14.1f | %22.1f | %20.2fx |" % (t, a, m, kt, lt, kt / lt))
    print()
    print("(medians of %d rounds each, alternated kvchat, llama-server, ...)" % rounds)
    # Early -> late, as bench/ttft.sh: the fastest of five neighbouring turns
    # (similar history) is the figure least disturbed by other processes.
    if n >= 2:
        early = rows[1:6]
        late = rows[-5:]
        for name, col in (("kvchat", 3), ("llama-server", 4)):
            e = min(r[col] for r in early)
            la = min(r[col] for r in late)
            print("%-12s fastest of turns 2-%d: %.1f ms; of the last %d: %.1f ms; growth %.2fx"
                  % (name, early[-1][0], e, len(late), la, la / e))
    ratios = [r[3] / r[4] for r in rows]
    print("median ratio kvchat / llama-server over %d turns: %.2fx; kvchat at or below "
          "llama-server on %d of %d turns" % (n, statistics.median(ratios),
                                              sum(x <= 1 for x in ratios), n))
    if rounds > 1:
        # Other processes only ever add time: each turn's fastest round is
        # the other estimate on a shared machine.
        best = [r[5] / r[6] for r in rows]
        print("with each turn's fastest of the %d rounds: median ratio %.2fx; kvchat at or below "
              "llama-server on %d of %d turns" % (rounds, statistics.median(best),
                                                  sum(x <= 1 for x in best), n))
    for b in bad:
        print("MISMATCH: " + b)
    return 1 if bad else 0


def main(argv):
    if len(argv) == 7 and argv[0] == "feed":
        feed(*argv[1:])
        return 0
    if len(argv) == 3 and argv[0] == "report":
        return report(*argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
