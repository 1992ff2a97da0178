"""bench/serve.py: the load side of bench/serve.sh (issue 24), standard
library only. Against an OpenAI-compatible server (kvchat serve, or
llama-server -np N on the same file):

  python3 serve.py load URL MODEL CLIENTS REQUESTS MAX_TOKENS RESULTS WHO
      CLIENTS concurrent clients, each sending REQUESTS streamed chat
      requests one after another (distinct prompts, greedy, max_tokens
      MAX_TOKENS); prints TTFT p50/p99 (request sent to the first content
      event) and the aggregate decode rate (completion tokens of all
      requests / wall time of the whole run), one line, and appends them
      to RESULTS (JSON lines) under WHO.
  python3 serve.py turns URL MODEL FIRST LAST STATE RESULTS WHO
      turns FIRST..LAST of a conversation that resends its whole history,
      as any OpenAI client does (STATE, a JSON file, carries it between
      calls, so the server can be restarted between them; kvchat stores
      the unnamed conversation, so a restart finds its snapshot); prints
      each turn's TTFT and cached_tokens, and appends them to RESULTS.
  python3 serve.py table RESULTS
      the figures as a Markdown table for docs/BENCHMARKS.md: per client
      count, TTFT p50/p99 and aggregate tok/s of each server; the TTFT of
      the turn after each restart over the turn before it.
"""
import http.client
import json
import sys
import threading
import time
import urllib.parse


def stream(url, body):
    """(ttft_s, completion_tokens, cached_tokens, text, conversation) of one streamed request."""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = dict(body, stream=True, stream_options={"include_usage": True}, temperature=0)
    t0 = time.monotonic()
    c.request("POST", u.path.rstrip("/") + "/chat/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:200]))
    ttft, text, ntok, cached, cid = None, "", 0, None, None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        cid = ev.get("conversation", cid)
        for ch in ev.get("choices", []):
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.monotonic() - t0
                text += piece
                ntok += 1
        if ev.get("usage"):
            ntok = ev["usage"].get("completion_tokens", ntok)
            cached = (ev["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")
    c.close()
    return ttft, ntok, cached, text, cid


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def record(results, row):
    with open(results, "a") as f:
        f.write(json.dumps(row) + "\n")


def load(url, model, clients, requests, max_tokens, results, who):
    ttfts, toks, errors = [], [], []
    lock = threading.Lock()

    def client(k):
        for i in range(requests):
            msgs = [{"role": "user", "content": "Request %d of client %d: tell a story." % (i, k)}]
            try:
                t, n, _, _, _ = stream(url, {"model": model, "messages": msgs, "max_tokens": max_tokens})
            except Exception as e:  # noqa: BLE001 - a load tool reports and goes on
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                if t is not None:
                    ttfts.append(t)
                toks.append(n)
    t0 = time.monotonic()
    ts = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    print("clients %d: %d requests, %d failed; TTFT p50 %.0f ms p99 %.0f ms; %d tokens in %.1f s, "
          "aggregate %.1f tok/s" % (clients, len(toks), len(errors), pct(ttfts, 50) * 1e3 if ttfts else 0,
                                    pct(ttfts, 99) * 1e3 if ttfts else 0, sum(toks), wall,
                                    sum(toks) / wall if wall > 0 else 0))
    for e in errors[:3]:
        print("  error:", e)
    record(results, {"kind": "load", "who": who, "clients": clients, "requests": len(toks),
                     "failed": len(errors), "tokens": sum(toks), "wall_s": wall,
                     "ttft_p50_ms": pct(ttfts, 50) * 1e3 if ttfts else None,
                     "ttft_p99_ms": pct(ttfts, 99) * 1e3 if ttfts else None,
                     "tok_s": sum(toks) / wall if wall > 0 else None})


def turns(url, model, first, last, state, results, who):
    try:
        st = json.load(open(state))
    except (OSError, ValueError):
        st = {"msgs": []}
    msgs = st["msgs"]
    for t in range(first, last + 1):
        msgs.append({"role": "user", "content": "Turn %d: and then what happened?" % t})
        body = {"model": model, "messages": msgs, "max_tokens": 48}
        ttft, n, cached, text, cid = stream(url, body)
        msgs.append({"role": "assistant", "content": text})
        print("turn %d: TTFT %.0f ms, cached_tokens %s" % (t, (ttft or 0) * 1e3, cached))
        record(results, {"kind": "turn", "who": who, "turn": t, "after_restart": t == first and t > 1,
                         "ttft_ms": (ttft or 0) * 1e3, "cached": cached})
    json.dump(st, open(state, "w"))


def table(results):
    rows = [json.loads(x) for x in open(results)]
    whos = []
    for r in rows:
        if r["who"] not in whos:
            whos.append(r["who"])
    f = lambda v, d=0: "-" if v is None else ("%.*f" % (d, v))  # noqa: E731
    print("| clients | " + " | ".join("%s TTFT p50 / p99 ms | %s aggregate tok/s" % (w, w)
                                         for w in whos) + " |")
    print("|---|" + "---|---|" * len(whos))
    for c in sorted({r["clients"] for r in rows if r["kind"] == "load"}):
        cells = []
        for w in whos:
            m = [r for r in rows if r["kind"] == "load" and r["who"] == w and r["clients"] == c]
            if m:
                cells += ["%s / %s%s" % (f(m[-1]["ttft_p50_ms"]), f(m[-1]["ttft_p99_ms"]),
                                         " (%d failed)" % m[-1]["failed"] if m[-1]["failed"] else ""),
                          f(m[-1]["tok_s"], 1)]
            else:
                cells += ["-", "-"]
        print("| %d | %s |" % (c, " | ".join(cells)))
    print()
    print("| server | turn after a restart: TTFT ms (cached_tokens) | the turn before it | ratio |")
    print("|---|---|---|---|")
    for w in whos:
        t = [r for r in rows if r["kind"] == "turn" and r["who"] == w]
        for i, r in enumerate(t):
            if r["after_restart"] and i > 0:
                b = t[i - 1]
                print("| %s | turn %d: %s (%s) | turn %d: %s (%s) | %s |" % (
                    w, r["turn"], f(r["ttft_ms"]), r["cached"], b["turn"], f(b["ttft_ms"]),
                    b["cached"], f(r["ttft_ms"] / b["ttft_ms"], 2) if b["ttft_ms"] else "-"))


if __name__ == "__main__":
    if sys.argv[1] == "load":
        load(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]),
             sys.argv[7], sys.argv[8])
    elif sys.argv[1] == "turns":
        turns(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6],
              sys.argv[7], sys.argv[8])
    else:
        table(sys.argv[2])
