#!/usr/bin/env python3
"""qwen25_record.py: record llama.cpp's side of the Qwen2.5-Coder tests.

Not run by the suite: run by hand, once, with a llama.cpp built as
../shared/peers/README.md says, and its output committed as
tests/e2e/qwen25_llamacpp.json (what test_qwen25_chat.sh and
test_qwen25_score.sh compare kvchat with).

    python3 tests/e2e/qwen25_record.py LLAMA_BIN \\
        ~/.cache/kvchat/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\
        "llama.cpp f53577432541bb9edc1588c4ef45c66bf07e4468, build-cpu" \\
        > tests/e2e/qwen25_llamacpp.json

(LLAMA_BIN: the bin folder of that build, the one holding llama-server;
the third argument, where the llama.cpp came from, is only recorded).

It starts `llama-server -m MODEL --jinja -fa off -nr -c 2048 -t 2 --host
127.0.0.1 --port 18089` (the file's own chat template, rendered by
llama.cpp's Jinja engine), and for each user message of a three-turn
zh/en conversation:
  1. POST /apply-template {"messages": [...so far...]} -> the prompt text
     (add_generation_prompt is on);
  2. POST /tokenize {"content": TEXT, "add_special": false,
     "parse_special": true} -> the prompt's ids, the whole history;
  3. POST /completion {"prompt": IDS, "n_predict": 16, "temperature": 0,
     "n_probs": 2, "return_tokens": true, "cache_prompt": false} -> the
     greedy reply's ids, each step's log-prob and its top two;
  4. the reply's text becomes the assistant message of the next turn.
The server is stopped before the script ends.
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

PORT = 18089
N_PREDICT = 16
USERS = [
    "What is the capital of France? Answer in one sentence.",
    "请用中文回答：法国的首都是哪座城市？",
    "Answer with one word: what colour is a clear daytime sky?",
]


def post(path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (PORT, path),
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def wait_ready(proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit("llama-server exited with %d" % proc.returncode)
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % PORT, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("llama-server never became ready")


def main():
    bindir, model = sys.argv[1], sys.argv[2]
    source = sys.argv[3] if len(sys.argv) > 3 else "unknown"
    # -nr: with weight repacking this machine's llama.cpp dies with SIGILL in
    # its AMX Q8_0 kernel (docs/MODELS.md); repacking changes kernels, not the model
    cmd = [os.path.join(bindir, "llama-server"), "-m", model, "--jinja", "-fa", "off", "-nr",
           "-c", "2048", "-t", "2", "--host", "127.0.0.1", "--port", str(PORT)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(proc)
        msgs, turns = [], []
        for user in USERS:
            msgs.append({"role": "user", "content": user})
            text = post("/apply-template", {"messages": msgs})["prompt"]
            ids = post("/tokenize", {"content": text, "add_special": False,
                                     "parse_special": True})["tokens"]
            out = post("/completion", {"prompt": ids, "n_predict": N_PREDICT, "temperature": 0,
                                       "n_probs": 2, "return_tokens": True,
                                       "cache_prompt": False})
            steps = [[p["id"], p["logprob"], [[t["id"], t["logprob"]] for t in p["top_logprobs"]]]
                     for p in out["completion_probabilities"]]
            turns.append({"user": user, "prompt_text": text, "prompt_ids": ids,
                          "reply_ids": out["tokens"], "reply_text": out["content"],
                          "steps": steps})
            msgs.append({"role": "assistant", "content": out["content"]})
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
    version = subprocess.run([cmd[0], "--version"], capture_output=True, text=True)
    write({"recorded_with": " ".join(["llama-server", "-m", "MODEL"] + cmd[3:]),
           "llama_cpp_version": (version.stdout + version.stderr).strip().splitlines(),
           "llama_cpp_source": source,
           "recorder": "tests/e2e/qwen25_record.py", "n_predict": N_PREDICT,
           "turns": turns})


def write(obj):
    """The JSON with each turn's fields on lines of their own (a readable diff)."""
    out = sys.stdout
    out.write("{\n")
    for k in [k for k in obj if k != "turns"]:
        out.write(" %s: %s,\n" % (json.dumps(k), json.dumps(obj[k], ensure_ascii=False)))
    out.write(' "turns": [\n')
    for i, t in enumerate(obj["turns"]):
        fields = ["  %s: %s" % (json.dumps(k), json.dumps(v, ensure_ascii=False)) for k, v in t.items()]
        out.write("  {\n" + ",\n".join(fields) + "\n  }" + ("," if i + 1 < len(obj["turns"]) else "") + "\n")
    out.write(" ]\n}\n")

main()
