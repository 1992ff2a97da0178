"""serve_client.py: the HTTP side of tests/e2e/test_serve.sh (issue 24),
with the standard library only: requests to a running kvchat serve, their
answers checked against kvchat generate's on the same rendered prompt.

  python3 serve_client.py STEP PORT KVCHAT MODEL WORKDIR

Prints one "FAIL: ..." line per failed check and "N passed, M failed" at
the end; exits 1 when a check failed.
"""
import http.client
import json
import socket
import subprocess
import sys
import threading
import time

STEP, PORT, KV, MODEL, WD = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
passed = failed = 0


def check(desc, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", desc, detail)


def post(path, body, headers=None, raw=None):
    """(status, parsed JSON or None, headers) of one request."""
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, raw if raw is not None else json.dumps(body), h)
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data), dict(r.getheaders())
    except ValueError:
        return r.status, None, dict(r.getheaders())


def get(path):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data)


def stream(path, body):
    """(text, finish_reason, usage, events) of a streamed request."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        return None, None, None, r.status
    text, finish, usage, n = "", None, None, 0
    for line in r.read().decode().split("\n\n"):
        if not line.startswith("data: "):
            continue
        d = line[6:]
        if d == "[DONE]":
            break
        ev = json.loads(d)
        n += 1
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev["choices"]:
            piece = ch.get("delta", {}).get("content") if "delta" in ch else ch.get("text")
            text += piece or ""
            finish = ch.get("finish_reason") or finish
    c.close()
    return text, finish, usage, n


def chatml(msgs):
    s = "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in msgs)
    return s + "<|im_start|>assistant\n"


def generate(n, prompt=None, rendered=None):
    """kvchat generate's greedy text of a raw prompt, or of a rendered chat."""
    args = [KV, "generate", "-m", MODEL, "-n", str(n), "--temp", "0"]
    if prompt is not None:
        args += ["-p", prompt]
    else:
        ids = subprocess.run([KV, "tokenize", "-m", MODEL, "--parse-special"],
                             input=rendered.encode(), capture_output=True,
                             check=True).stdout.decode().split()
        args += ["--prompt-ids", ",".join(ids)]
    return subprocess.run(args, capture_output=True, check=True).stdout.decode("utf-8", "replace")


CHATS = [[{"role": "user", "content": w}] for w in
         ["hi there", "Once upon a time", "tell me", "a b c d", "Numbers 1 2 3",
          "\u00e9t\u00e9 \u4e2d\u6587", "x", "The end"]]
LENS = [12, 30, 5, 21, 17, 9, 26, 3]


def step_basic():
    st, h = get("/health")
    check("health", st == 200 and h.get("status") == "ok", h)
    st, m = get("/v1/models")
    check("models lists the file's name", st == 200 and m["data"][0]["id"] == "m", m)
    msgs = CHATS[0]
    want = generate(LENS[0], rendered=chatml(msgs))
    st, r, _ = post("/v1/chat/completions", {"model": "m", "messages": msgs,
                                               "max_tokens": LENS[0], "temperature": 0})
    got = r["choices"][0]["message"]["content"] if st == 200 else None
    check("non-streamed chat = kvchat generate", got == want, (st, got, want))
    u = r["usage"] if st == 200 else {}
    check("usage counts", u.get("completion_tokens") == LENS[0] and u.get("prompt_tokens", 0) > 0
          and "cached_tokens" in u.get("prompt_tokens_details", {}), u)
    check("timings", st == 200 and r["timings"]["predicted_n"] == LENS[0], r)
    text, fin, usage, n = stream("/v1/chat/completions", {"messages": msgs, "max_tokens": LENS[0],
                                                         "temperature": 0})
    check("streamed chat = kvchat generate", text == want, (text, want))
    check("stream finish and usage", fin == "length" and usage is not None and
          usage["completion_tokens"] == LENS[0], (fin, usage))
    # the same prompt again: all but its last position come from the resident cache
    check("cached_tokens of a repeated prompt", usage is not None and
          usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1, usage)
    want = generate(20, prompt="The cat")
    st, r, _ = post("/v1/completions", {"prompt": "The cat", "max_tokens": 20, "temperature": 0})
    check("completion = kvchat generate", st == 200 and r["choices"][0]["text"] == want,
          (st, r, want))
    text, fin, usage, n = stream("/completions", {"prompt": "The cat", "max_tokens": 20,
                                                  "temperature": 0})
    check("streamed completion = kvchat generate", text == want, (text, want))
    # a stop string: the text ends where it begins
    if len(want) > 6:
        stop = want[3:6]
        st, r, _ = post("/v1/completions", {"prompt": "The cat", "max_tokens": 20,
                                            "temperature": 0, "stop": [stop]})
        got = r["choices"][0] if st == 200 else {}
        check("stop string", got.get("text") == want[:want.index(stop)] and
              got.get("finish_reason") == "stop", (got, want, stop))
        text, fin, usage, n = stream("/v1/completions", {"prompt": "The cat", "max_tokens": 20,
                                                         "temperature": 0, "stop": stop})
        check("stop string, streamed", text == want[:want.index(stop)] and fin == "stop",
              (text, fin))


def step_curl():
    """curl, as a shell script calls the API: a chat reply and a streamed completion, each
    equal to kvchat generate's greedy text."""
    import shutil
    if shutil.which("curl") is None:
        print("note: curl is not installed (scripts/deps.sh installs it): not checked")
        return
    url = "http://127.0.0.1:%d/v1/" % PORT
    msgs = CHATS[3]
    want = generate(LENS[3], rendered=chatml(msgs))
    out = subprocess.run(["curl", "-sS", "-H", "Content-Type: application/json", "-d",
                          json.dumps({"messages": msgs, "max_tokens": LENS[3], "temperature": 0}),
                          url + "chat/completions"], capture_output=True)
    try:
        got = json.loads(out.stdout)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError):
        got = None
    check("curl: chat = kvchat generate", got == want, (out.stdout[:300], out.stderr, want))
    want = generate(15, prompt="Numbers")
    out = subprocess.run(["curl", "-sSN", "-H", "Content-Type: application/json", "-d",
                          json.dumps({"prompt": "Numbers", "max_tokens": 15, "temperature": 0,
                                      "stream": True}), url + "completions"], capture_output=True)
    text = ""
    for ev in out.stdout.decode("utf-8", "replace").split("\n\n"):
        if ev.startswith("data: {"):
            text += "".join(c.get("text") or "" for c in json.loads(ev[6:])["choices"])
    check("curl: streamed completion = kvchat generate", text == want and
          out.stdout.rstrip().endswith(b"data: [DONE]"), (out.stdout[-300:], want))


def step_concurrent():
    wants = [generate(n, rendered=chatml(m)) for m, n in zip(CHATS, LENS)]
    got = [None] * len(CHATS)

    def run(i):
        got[i] = stream("/v1/chat/completions", {"messages": CHATS[i], "max_tokens": LENS[i],
                                                 "temperature": 0})[0]
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(CHATS))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i in range(len(CHATS)):
        check("concurrent stream %d = alone" % i, got[i] == wants[i], (got[i], wants[i]))


def step_disconnect():
    s = socket.create_connection(("127.0.0.1", PORT))
    body = json.dumps({"prompt": "a long one", "max_tokens": 2000, "temperature": 0,
                       "stream": True})
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    got = b""
    while got.count(b"data: ") < 3:
        d = s.recv(4096)
        if not d:
            break
        got += d
    check("stream began", got.count(b"data: ") >= 3, got[:200])
    s.close()
    # the server goes on serving, right
    want = generate(5, prompt="after")
    st, r, _ = post("/v1/completions", {"prompt": "after", "max_tokens": 5, "temperature": 0})
    check("served after a disconnect", st == 200 and r["choices"][0]["text"] == want, (st, r))


def send_raw(path, body, headers=""):
    """A socket that sent a request (read nothing yet)."""
    s = socket.create_connection(("127.0.0.1", PORT))
    body = json.dumps(body)
    s.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
               "Content-Length: %d\r\n\r\n%s" % (path, headers, len(body), body)).encode())
    return s


def log_mark():
    """Where the server's log ends now: log_wait looks past it."""
    try:
        return len(open(WD + "/serve.err", "rb").read())
    except OSError:
        return 0


def log_wait(pattern, since=0, secs=60):
    """The first match of pattern in the server's log past since, waiting for it (None)."""
    import re
    for _ in range(int(secs * 10)):
        m = re.search(pattern, open(WD + "/serve.err", "rb").read()[since:].decode("utf-8",
                                                                                     "replace"))
        if m:
            return m
        time.sleep(0.1)
    return None


def conv_rows(db, cid):
    return db.execute("select role, text, interrupted from messages where conv_id = ? "
                      "order by id", (cid,)).fetchall()


def step_disconnect_plain():
    """Non-streamed requests whose client leaves while they generate, and while a stored
    conversation's turn prefills: the work stops, the store stays whole, one line says so.
    The client leaves once the server has logged the request's first token (not after a
    fixed time: on a fast machine a reply can end first, on a slow one it has not begun)."""
    import os
    import sqlite3
    # a greedy completion of "a long one" runs to its 2000 tokens (seconds on this model)
    at = log_mark()
    s = send_raw("/v1/completions", {"prompt": "a long one", "max_tokens": 2000, "temperature": 0})
    m = log_wait(r"(cmpl-\w+): first token", at)
    s.close()
    m = m and log_wait(r"%s: the client went away after (\d+) tokens" % m.group(1), at)
    check("a non-streamed completion stops when its client leaves", m is not None and
          int(m.group(1)) < 2000, m and m.group(0))
    # the same as a new stored conversation's turn
    db = sqlite3.connect(os.environ.get("KVC_SERVE_DB", WD + "/s.db"))
    n0 = db.execute("select count(*) from conversations").fetchone()[0]
    msgs = [{"role": "user", "content": "a long one"}]
    at = log_mark()
    s = send_raw("/v1/chat/completions", {"messages": msgs, "max_tokens": 2000,
                                          "temperature": 0, "conversation": "new"})
    m = log_wait(r"(chatcmpl-\w+): conversation (\d+): first token", at)
    s.close()
    m = m and log_wait(r"%s: conversation (\d+): the client went away after (\d+) tokens"
                       % m.group(1), at)
    check("a stored conversation's turn stops when its client leaves", m is not None and
          int(m.group(2)) < 2000, m and m.group(0))
    if m is None:
        return
    cid = int(m.group(1))
    rows = conv_rows(db, cid)
    check("...stored: the message and the reply so far, marked interrupted",
          db.execute("select count(*) from conversations").fetchone()[0] == n0 + 1 and
          len(rows) == 2 and rows[0][:2] == (1, "a long one") and rows[1][0] == 2 and
          rows[1][2] == 1, rows)
    # its next turn with a long message, left once the server stored the message (its
    # prefill then begins; on the wide model a long prompt takes seconds): taken back whole
    msgs += [{"role": "assistant", "content": rows[1][1]}]
    at = log_mark()
    s = send_raw("/v1/chat/completions", {"messages": msgs + [
        {"role": "user", "content": "tell me more about it " * 60}], "max_tokens": 2000,
        "temperature": 0, "conversation": cid})
    for _ in range(600):
        if len(conv_rows(db, cid)) > 2:
            break
        time.sleep(0.1)
    s.close()
    m = log_wait(r"chatcmpl-\w+: (?:conversation %d: )?the client went away after (\d+) tokens"
                 % cid, at)
    check("a turn whose client leaves before its reply stops", m is not None, m)
    now = conv_rows(db, cid)
    if m is not None and int(m.group(1)) == 0:
        check("...taken back whole: the conversation as it was", now == rows, now)
    else:
        # a machine fast enough to prefill before the close was seen: kept as interrupted
        print("note: the long prompt was prefilled before the client was seen gone")
        check("...or its reply so far stored, marked interrupted", len(now) == 4 and
              now[3][2] == 1, now)
    db.close()
    # consistent: the next turn resending that history is served from the cache
    msgs = [{"role": "user" if r[0] == 1 else "assistant", "content": r[1]} for r in now]
    msgs.append({"role": "user", "content": "go on"})
    st, r, _ = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "temperature": 0,
                                               "conversation": cid})
    u = r.get("usage", {}) if st == 200 else {}
    check("...and continued by the next request", st == 200 and
          u["prompt_tokens_details"]["cached_tokens"] > 0, (st, r))


def read_response(s):
    """(status, body) of one HTTP response on s, read to its Content-Length (or the end)."""
    got = b""
    s.settimeout(60)
    while b"\r\n\r\n" not in got:
        d = s.recv(4096)
        if not d:
            return None, got
        got += d
    head, body = got.split(b"\r\n\r\n", 1)
    n = None
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    while n is None or len(body) < n:
        d = s.recv(4096)
        if not d:
            break
        body += d
    return int(head.split()[1]), body


def is_error(body, code):
    """Whether body is OpenAI's error shape with this status."""
    try:
        e = json.loads(body)["error"]
        return e["code"] == code and isinstance(e["message"], str) and isinstance(e["type"], str)
    except (ValueError, KeyError, TypeError):
        return False


def step_shutdown():
    """SIGTERM: new requests get 503 in OpenAI's error shape, the running one ends whole and
    is stored. What keeps the server stopping (not gone) while the checks run is a request
    whose body is not sent yet: the server waits for it (--grace), so nothing here races."""
    import os
    import signal
    import sqlite3
    # a stored conversation's turn, streamed, under way (its headers come with its first
    # token; it may still end before the signal: the checks hold all the same)
    ca = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    ca.request("POST", "/v1/chat/completions", json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 300, "temperature": 0,
         "conversation": "new", "stream": True}), {"Content-Type": "application/json"})
    ra = ca.getresponse()
    check("the stream began", ra.status == 200, ra.status)
    # a request whose headers are in (its 100 Continue says so) and whose body is not
    body = json.dumps({"prompt": "x", "max_tokens": 2})
    h = socket.create_connection(("127.0.0.1", PORT))
    h.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)).encode())
    got = b""
    h.settimeout(60)
    while b"\r\n\r\n" not in got:
        d = h.recv(4096)
        if not d:
            break
        got += d
    check("100 Continue", got.startswith(b"HTTP/1.1 100"), got)
    at = log_mark()
    os.kill(int(os.environ["SERVE_PID"]), signal.SIGTERM)
    check("the server says it stops", log_wait(r"SIGTERM: stopping", at) is not None)
    st, r, _ = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "late"}],
                                               "max_tokens": 2})
    check("a request while it stops is 503", st == 503 and r is not None and
          r["error"]["code"] == 503 and r["error"]["type"] == "unavailable_error", (st, r))
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    c.request("GET", "/health")
    hr = c.getresponse()
    check("/health while it stops is 503", hr.status == 503 and is_error(hr.read(), 503), hr.status)
    c.close()
    h.sendall(body.encode())
    st, b = read_response(h)
    check("the request begun before, its body sent after, is 503", st == 503 and
          is_error(b, 503), (st, b))
    h.close()
    # the stream that ran: whole, ending with [DONE], stored as it was sent
    got = ra.read()
    ca.close()
    text, fin = "", None
    for ev in got.split(b"\n\n"):
        i = ev.find(b"data: {")
        if i < 0:
            continue
        e = json.loads(ev[i + 6:])
        for ch in e.get("choices", []):
            text += ch.get("delta", {}).get("content") or ""
            fin = ch.get("finish_reason") or fin
    check("the running stream ended whole", b"data: [DONE]" in got and b'{"error"' not in got and
          fin in ("stop", "length"), got[-300:])
    db = sqlite3.connect(WD + "/s.db")
    rows = db.execute("select m.role, m.text, m.interrupted from messages m join conversations c "
                      "on c.id = m.conv_id where c.id = (select max(id) from conversations) "
                      "order by m.id").fetchall()
    check("...and was stored whole", len(rows) == 2 and rows[0][1] == "hi" and
          rows[1][1] == text and rows[1][2] == 0, (rows, text))


def step_shutdown_now():
    """--grace 0: SIGTERM ends a stored conversation's turn at once; its reply so far is the
    response and is stored, marked interrupted."""
    import os
    import signal
    import sqlite3
    res = {}

    def run():
        res["r"] = post("/v1/chat/completions", {"messages": [{"role": "user", "content":
                        "a long one"}], "max_tokens": 2000, "temperature": 0,
                        "conversation": "new"})
    at = log_mark()
    t = threading.Thread(target=run)
    t.start()
    m = log_wait(r"(chatcmpl-\w+): conversation (\d+): first token", at)
    check("the turn began", m is not None)
    os.kill(int(os.environ["SERVE_PID"]), signal.SIGTERM)
    t.join()
    st, r, _ = res["r"]
    g = m and log_wait(r"%s: conversation (\d+): stopped by the server after (\d+) tokens"
                       % m.group(1), at)
    check("SIGTERM stops the turn", g is not None and int(g.group(2)) < 2000, g and g.group(0))
    if g is None or st != 200:
        check("...its reply so far the response", False, (st, r))
        return
    db = sqlite3.connect(os.environ["KVC_SERVE_DB"])
    rows = conv_rows(db, int(g.group(1)))
    check("...stored, marked interrupted, as the response says", len(rows) == 2 and
          rows[1][1] == r["choices"][0]["message"]["content"] and rows[1][2] == 1, (rows, r))


def step_bad():
    cases = [
        ("invalid JSON", "/v1/chat/completions", b"{\"messages\": [", 400),
        ("not an object", "/v1/chat/completions", b"[1, 2]", 400),
        ("messages not an array", "/v1/chat/completions", b"{\"messages\": \"hi\"}", 400),
        ("a bad role", "/v1/chat/completions",
         b"{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", 400),
        ("temperature a string", "/v1/chat/completions",
         b"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": \"hot\"}", 400),
        ("top_k a float", "/v1/completions", b"{\"prompt\": \"x\", \"top_k\": 1.5}", 400),
        ("top_p out of range", "/v1/completions", b"{\"prompt\": \"x\", \"top_p\": 0}", 400),
        ("max_tokens negative", "/v1/completions", b"{\"prompt\": \"x\", \"max_tokens\": -1}", 400),
        ("max_tokens over the cap", "/v1/completions",
         b"{\"prompt\": \"x\", \"max_tokens\": 100000000}", 400),
        ("n = 2", "/v1/completions", b"{\"prompt\": \"x\", \"n\": 2}", 400),
        ("stream not a bool", "/v1/completions", b"{\"prompt\": \"x\", \"stream\": 1}", 400),
        ("prompt a number", "/v1/completions", b"{\"prompt\": 7}", 400),
        ("duplicate keys", "/v1/completions", b"{\"prompt\": \"x\", \"prompt\": \"y\"}", 400),
        ("unknown model", "/v1/completions", b"{\"prompt\": \"x\", \"model\": \"other\"}", 404),
        ("no such conversation", "/v1/chat/completions",
         b"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"conversation\": 999}", 404),
        ("a bad conversation", "/v1/chat/completions",
         b"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"conversation\": \"../db\"}", 400),
        ("unknown path", "/v1/embeddings", b"{}", 404),
    ]
    for desc, path, raw, want in cases:
        st, r, _ = post(path, None, raw=raw)
        check(desc, st == want and r is not None and r["error"]["code"] == want and
              isinstance(r["error"]["message"], str), (st, r))
    # 100 MB announced: refused from the headers, before any of it is sent
    s = socket.create_connection(("127.0.0.1", PORT))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nContent-Length: 104857600\r\n\r\n{\"messages\": ")
    resp = b""
    s.settimeout(20)
    try:
        while b"\r\n\r\n" not in resp:
            d = s.recv(4096)
            if not d:
                break
            resp += d
    except OSError:
        pass
    s.close()
    check("a 100 MB body is 413", resp.startswith(b"HTTP/1.1 413"), resp[:100])
    # 5 MB sent without saying so (chunked): read and dropped, 413
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    c.request("POST", "/v1/completions", body=iter([b"{\"prompt\": \"" + b"x" * (5 << 20), b"\"}"]),
              headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
              encode_chunked=True)
    r = c.getresponse()
    r.read()
    check("a 5 MB chunked body is 413", r.status == 413, r.status)


def step_conv_new():
    """Turn 1 of a new stored conversation, turn 2 resending it; ids and figures to WD."""
    msgs = [{"role": "user", "content": "hello there"}]
    st, r, h = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 6,
                                               "temperature": 0, "conversation": "new"})
    check("new conversation", st == 200 and r.get("conversation", 0) > 0 and
          h.get("X-Kvchat-Conversation") == str(r.get("conversation")), (st, r, h))
    cid = r["conversation"]
    msgs += [{"role": "assistant", "content": r["choices"][0]["message"]["content"]},
             {"role": "user", "content": "and then?"}]
    text, fin, usage, n = stream("/v1/chat/completions", {"messages": msgs, "max_tokens": 6,
                                                         "temperature": 0, "conversation": cid})
    check("second turn streamed", text is not None and usage is not None, (text, usage))
    msgs.append({"role": "assistant", "content": text})
    json.dump({"id": cid, "msgs": msgs, "usage": usage}, open(WD + "/conv.json", "w"))


def step_conv_resumed():
    """After a restart (and a turn the REPL added): the history comes from the snapshot."""
    c = json.load(open(WD + "/conv.json"))
    msgs = c["msgs"] + json.load(open(WD + "/repl_turn.json")) + [
        {"role": "user", "content": "one more"}]
    st, r, h = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 6, "temperature": 0},
                    headers={"X-Kvchat-Conversation": str(c["id"])})
    u = r.get("usage", {}) if st == 200 else {}
    cached = u.get("prompt_tokens_details", {}).get("cached_tokens", -1)
    computed = r["timings"]["prompt_n"] if st == 200 else -1
    check("turn after a restart", st == 200, (st, r))
    check("the cache came from the snapshot", r.get("conversation_cache") == "snapshot", r)
    # everything before the new message came from the store's snapshot: what
    # was computed is at most the new message's rendering (with the previous
    # reply's end of turn when that reply was cut by max_tokens)
    delta = subprocess.run([KV, "tokenize", "-m", MODEL, "--parse-special"],
                           input=b"<|im_end|>\n<|im_start|>user\none more<|im_end|>\n"
                           b"<|im_start|>assistant\n", capture_output=True,
                           check=True).stdout.decode().split()
    check("cached_tokens covers the history", cached > 0 and 0 < computed <= len(delta) and
          cached + computed == u.get("prompt_tokens"), (u, computed, len(delta)))
    json.dump({"id": c["id"], "msgs": msgs + [
        {"role": "assistant", "content": r["choices"][0]["message"]["content"]}]},
        open(WD + "/conv2.json", "w"))


def step_anon_stored():
    """Without naming it, after a restart: the stored conversation's snapshot gives the prefix."""
    c = json.load(open(WD + "/conv2.json"))
    msgs = c["msgs"] + [{"role": "user", "content": "anonymous"}]
    st, r, h = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 3, "temperature": 0})
    u = r.get("usage", {}) if st == 200 else {}
    # the slots are empty after the restart: anything cached came from the store; at least
    # the first turn's prompt (the replies' texts may tokenize otherwise than their ids)
    first = subprocess.run([KV, "tokenize", "-m", MODEL, "--parse-special"],
                           input=chatml(msgs[:1]).encode(), capture_output=True,
                           check=True).stdout.decode().split()
    cached = u.get("prompt_tokens_details", {}).get("cached_tokens", -1)
    check("an unnamed request reuses a stored conversation's snapshot", st == 200 and
          cached >= len(first), (st, u, len(first)))
    import sqlite3
    db = sqlite3.connect(WD + "/s.db")
    title = db.execute("select title from conversations where id = ?",
                       (r.get("conversation", 0),)).fetchone() if st == 200 else None
    n = db.execute("select count(*) from messages where conv_id = ?", (c["id"],)).fetchone()[0]
    check("...is stored as a conversation of its own, titled api: (the named one unchanged)",
          r.get("conversation", c["id"]) != c["id"] and title is not None and
          title[0].startswith("api: ") and n == len(c["msgs"]), (r, title, n))
    want = generate(3, rendered=chatml(msgs))
    check("...its reply as computed from scratch", st == 200 and
          r["choices"][0]["message"]["content"] == want, (r, want))


def anon_turn(msgs, n):
    """An unnamed request: (status, response, usage)."""
    st, r, _ = post("/v1/chat/completions", {"messages": msgs, "max_tokens": n, "temperature": 0})
    return st, r, (r.get("usage", {}) if st == 200 else {})


def step_anon_first():
    """Two unnamed turns: the first is stored, the second (its history resent) continues it."""
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    st, r, u = anon_turn(msgs, 6)
    check("an unnamed request is stored", st == 200 and r.get("conversation", 0) > 0, (st, r))
    cid = r.get("conversation")
    msgs += [{"role": "assistant", "content": r["choices"][0]["message"]["content"]},
             {"role": "user", "content": "and then?"}]
    st, r, u = anon_turn(msgs, 6)
    check("...the next request resending it continues it", st == 200 and
          r.get("conversation") == cid, (st, r, cid))
    msgs.append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})
    json.dump({"id": cid, "msgs": msgs}, open(WD + "/anon.json", "w"))


def step_anon_restart():
    """After a restart: the history's cache comes from the snapshot, only the new message computed."""
    import sqlite3
    import struct
    c = json.load(open(WD + "/anon.json"))
    msgs = c["msgs"] + [{"role": "user", "content": "one more"}]
    st, r, u = anon_turn(msgs, 4)
    cached = u.get("prompt_tokens_details", {}).get("cached_tokens", -1)
    # what the new message adds: the previous reply's end of turn (when max_tokens cut it), the
    # user turn, the generation prompt
    delta = subprocess.run([KV, "tokenize", "-m", MODEL, "--parse-special"],
                           input=b"<|im_end|>\n<|im_start|>user\none more<|im_end|>\n"
                           b"<|im_start|>assistant\n", capture_output=True,
                           check=True).stdout.decode().split()
    check("after a restart an unnamed request's history is cached", st == 200 and
          u["prompt_tokens"] - len(delta) - 1 <= cached < u["prompt_tokens"], (st, u, len(delta)))
    check("...in the conversation it continues", st == 200 and r.get("conversation") == c["id"],
          (r, c["id"]))
    db = sqlite3.connect(WD + "/s.db")
    rows = db.execute("select role, tokens from messages where conv_id = ? order by seq",
                      (c["id"],)).fetchall()
    check("...which holds the six messages", [x[0] for x in rows] == [1, 2, 1, 2, 1, 2], rows)
    # the prompt is the stored stream: the replies' own ids, then the new message; the reply
    # is what kvchat generate computes from scratch on it
    ids = [i for x in rows[:5] for i in struct.unpack("<%di" % (len(x[1]) // 4), x[1])]
    check("...whose stream is the prompt", len(ids) == u.get("prompt_tokens"), (len(ids), u))
    args = [KV, "generate", "-m", MODEL, "-n", "4", "--temp", "0", "--prompt-ids",
            ",".join(map(str, ids))]
    want = subprocess.run(args, capture_output=True, check=True).stdout.decode("utf-8", "replace")
    check("...its reply as computed from scratch", st == 200 and
          r["choices"][0]["message"]["content"] == want, (r, want))


def step_anon_keep():
    """--keep-unnamed 2: of five new unnamed conversations the two most recent stay."""
    import sqlite3
    db = sqlite3.connect(WD + "/s.db")
    others = db.execute("select id from conversations where title not like 'api: %' "
                        "order by id").fetchall()
    ids = []
    for k in range(5):
        st, r, u = anon_turn([{"role": "user", "content": "question %d" % k}], 2)
        ids.append(r.get("conversation") if st == 200 else None)
    left = db.execute("select id from conversations where title like 'api: %' "
                      "order by id").fetchall()
    check("the two most recent unnamed conversations are kept", [x[0] for x in left] == ids[3:],
          (left, ids))
    check("...the others untouched", db.execute("select id from conversations where title not "
          "like 'api: %' order by id").fetchall() == others)


def step_conv_locked():
    c = json.load(open(WD + "/conv2.json"))
    msgs = c["msgs"] + [{"role": "user", "content": "while locked"}]
    st, r, h = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 3, "temperature": 0,
                                               "conversation": c["id"]})
    check("a conversation the REPL holds is 409", st == 409 and r["error"]["code"] == 409, (st, r))
    st, r, h = post("/v1/chat/completions", {"messages": c["msgs"][:1] + [
        {"role": "user", "content": "not the history"}], "conversation": c["id"]})
    check("a history that is not the stored one is 409", st == 409, (st, r))


def step_auth():
    for desc, hdr, want in [("no key", {}, 401), ("wrong key", {"Authorization": "Bearer nope"}, 401),
                            ("a longer wrong key", {"Authorization": "Bearer s3cret-key-xyz"}, 401),
                            ("the key", {"Authorization": "Bearer s3cret-key"}, 200)]:
        st, r, h = post("/v1/completions", {"prompt": "x", "max_tokens": 2}, headers=hdr)
        check(desc, st == want and (want == 200 or r["error"]["code"] == 401), (st, r))
    st, h = get("/health")
    check("health needs no key", st == 200)


def step_budget():
    """--kv-budget 1K: an idle cache is let go, the repeated prompt computed again, the same reply."""
    msgs = CHATS[1]
    want = generate(6, rendered=chatml(msgs))
    for i in range(2):
        st, r, _ = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 6, "temperature": 0})
        u = r["usage"] if st == 200 else {}
        check("request %d under the budget" % i, st == 200 and
              r["choices"][0]["message"]["content"] == want and
              u["prompt_tokens_details"]["cached_tokens"] == 0, (st, r))


def step_queue():
    """--parallel 1 --max-queue 0: while one runs the next is 429; once it left, served."""
    a = socket.create_connection(("127.0.0.1", PORT))
    body = json.dumps({"prompt": "a long one", "max_tokens": 2000, "temperature": 0, "stream": True})
    a.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    got = b""
    while got.count(b"data: ") < 2:
        d = a.recv(4096)
        if not d:
            break
        got += d
    check("the first request runs", got.count(b"data: ") >= 2, got[:100])
    st, r, _ = post("/v1/completions", {"prompt": "c", "max_tokens": 3, "temperature": 0})
    check("the next is 429", st == 429 and r["error"]["code"] == 429, (st, r))
    a.close()
    for _ in range(300):
        st, r, _ = post("/v1/completions", {"prompt": "b", "max_tokens": 3, "temperature": 0})
        if st != 429:
            break
        time.sleep(0.1)
    check("served once the first left", st == 200 and
          r["choices"][0]["text"] == generate(3, prompt="b"), (st, r))


{"basic": step_basic, "budget": step_budget, "queue": step_queue, "concurrent": step_concurrent, "disconnect": step_disconnect,
 "disconnect_plain": step_disconnect_plain, "shutdown": step_shutdown, "curl": step_curl,
 "shutdown_now": step_shutdown_now,
 "bad": step_bad, "conv_new": step_conv_new, "conv_resumed": step_conv_resumed,
 "conv_locked": step_conv_locked, "anon_stored": step_anon_stored,
 "anon_first": step_anon_first, "anon_restart": step_anon_restart, "anon_keep": step_anon_keep, "auth": step_auth}[STEP]()
print("%s: %d passed, %d failed" % (STEP, passed, failed))
sys.exit(1 if failed else 0)
