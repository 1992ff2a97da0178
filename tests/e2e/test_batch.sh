#!/bin/sh
# test_batch.sh: kvchat batch (issue 14). Every request's output equals
# running it alone (kvchat generate, greedy and seeded), at --parallel 1, 3
# and 8, with requests of different lengths leaving and joining; output in
# input order; the messages form rendered by the template; bad lines
# reported by line number (exit 1) while the others run; a full context
# stops a request with "length"; -o writes a private file; requests that
# start together share one prefill pass.
. "$top_srcdir/tests/e2e/lib.sh"
command -v python3 >/dev/null 2>&1 || skip "python3 is needed to read the JSON lines"

tiny_model 11
B=$TMPD/b
mkdir -p "$B"

# 20 requests: 16 prompts with max_tokens 0..40, two seeded samples, two chats.
python3 - "$B/in.jsonl" "$B/cases" <<'PY'
import json, sys
words = ["The cat", "Once upon a time", "hello", "a b c d e f g", "Numbers 1 2 3",
         "x", "", "Le chat noir", "zzzz yyyy", "func main() {", "\u00e9t\u00e9 \u4e2d\u6587",
         "tab\there", "quote \" and \\ back", "last line\n", "again and again", "The end"]
reqs, cases = [], []
for i, w in enumerate(words):
    n = [7, 40, 1, 13, 0, 25, 9, 33, 2, 18, 11, 5, 21, 3, 29, 16][i]
    reqs.append({"prompt": w, "max_tokens": n, "temperature": 0})
    cases.append(("p", w, n, "0", "0"))
reqs.append({"prompt": "sampled", "max_tokens": 20, "temperature": 0.9, "seed": 7, "top_k": 20})
cases.append(("p", "sampled", 20, "0.9", "7 --top-k 20"))
reqs.append({"prompt": "sampled too", "max_tokens": 12, "temperature": 1.5, "top_p": 0.5, "seed": 123456789})
cases.append(("p", "sampled too", 12, "1.5", "123456789 --top-p 0.5"))
reqs.append({"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 14, "temperature": 0})
cases.append(("m", "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n", 14, "0", "0"))
reqs.append({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "one"},
             {"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}],
             "max_tokens": 6, "temperature": 0})
cases.append(("m", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\none<|im_end|>\n"
              "<|im_start|>assistant\ntwo<|im_end|>\n<|im_start|>user\nthree<|im_end|>\n"
              "<|im_start|>assistant\n", 6, "0", "0"))
with open(sys.argv[1], "w") as f:
    for r in reqs:
        f.write(json.dumps(r) + "\n")
with open(sys.argv[2], "w") as f:
    json.dump(cases, f)
PY

# The expected output of each request, run alone with kvchat generate.
python3 - "$B/cases" "$KVCHAT" "$M" "$B/expect" <<'PY' || fail "generate alone"
import json, subprocess, sys
cases = json.load(open(sys.argv[1]))
kv, m = sys.argv[2], sys.argv[3]
out = []
for kind, text, n, temp, seed in cases:
    args = [kv, "generate", "-m", m, "-n", str(n), "--temp", temp, "--seed"] + seed.split()
    if kind == "p":
        args += ["-p", text]
    else:
        ids = subprocess.run([kv, "tokenize", "-m", m, "--parse-special"], input=text.encode(),
                             capture_output=True, check=True).stdout.decode().split()
        args += ["--prompt-ids", ",".join(ids)]
    ids = subprocess.run(args + ["--ids"], capture_output=True, check=True).stdout.decode().split()
    txt = subprocess.run(args, capture_output=True, check=True).stdout
    out.append({"ids": [int(x) for x in ids], "text": txt.decode("utf-8", "surrogateescape"),
                "n": n, "prompt_tokens": None})
json.dump(out, open(sys.argv[4], "w"))
PY

# compare OUT: every line in input order, equal to its request run alone.
compare() {
	python3 - "$B/expect" "$1" <<'PY'
import json, sys
exp = json.load(open(sys.argv[1]))
raw = open(sys.argv[2], "rb").read().decode("utf-8", "surrogateescape")
lines = [json.loads(l) for l in raw.splitlines()]
bad = 0
if [l.get("index") for l in lines] != list(range(len(exp))):
    print("indices:", [l.get("index") for l in lines]); bad += 1
for l, e in zip(lines, exp):
    i = l.get("index")
    if l.get("ids") != e["ids"]:
        print(i, "ids", l.get("ids"), "alone", e["ids"]); bad += 1
    if l.get("text") != e["text"]:
        print(i, "text", repr(l.get("text")), "alone", repr(e["text"])); bad += 1
    if l.get("gen_tokens") != len(e["ids"]):
        print(i, "gen_tokens", l.get("gen_tokens")); bad += 1
    want = "length" if len(e["ids"]) == e["n"] else "eos"
    if l.get("stop") != want:
        print(i, "stop", l.get("stop"), "want", want); bad += 1
sys.exit(1 if bad else 0)
PY
}

for par in 1 3 8; do
	if kvrun "batch --parallel $par" "$B/err$par" batch -m "$M" -f "$B/in.jsonl" --parallel $par \
	    >"$B/out$par"; then
		check "--parallel $par: each request as alone, in input order" compare "$B/out$par"
	fi
	check "--parallel $par: a summary line" grep -q "decode .* tok/s aggregate" "$B/err$par"
	check "--parallel $par: one line per request" test "$(grep -c 'batch: #' "$B/err$par")" -eq 20
done
# Issue 26: the requests that start together are prefilled in one pass
# (the outputs above equal each request run alone all the same): 20
# requests take 20 prefill passes one at a time, far fewer 8 at a time.
passes() { sed -n 's/.*tok\/s ([0-9.]* s, \([0-9]*\) passes).*/\1/p' "$1"; }
check "--parallel 1: one prefill pass a request ($(passes "$B/err1"))" test "$(passes "$B/err1")" = 20
check "--parallel 8: prompts prefilled together ($(passes "$B/err8") passes)" \
    test "$(passes "$B/err8")" -lt 12
# more requests than one pass holds: each pass is at most --parallel wide
check "passes hold at most 3" grep -Eq "[0-9]+ tokens in [0-9]+ passes, (2|3)\.[0-9] per pass" "$B/err3"
check "the prompt length of a chat is its rendering's" \
    test "$(sed -n 19p "$B/out1" | sed 's/.*"prompt_tokens":\([0-9]*\).*/\1/')" -eq \
    "$(printf '<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n' |
       "$KVCHAT" tokenize -m "$M" --parse-special | wc -w)"

# -o: the same lines, in a private file
kvrun "batch -o" "$B/erro" batch -m "$M" -f "$B/in.jsonl" --parallel 4 -o "$B/o.jsonl" --quiet
check "-o writes the lines" cmp -s "$B/o.jsonl" "$B/out1"
check "-o file is 0600" test "$(stat -c %a "$B/o.jsonl")" = 600
check "--quiet: no per-request lines" test "$(grep -c 'batch: #' "$B/erro")" -eq 0

# bad lines: each reported by its line number, the others still run
{
	sed -n 1p "$B/in.jsonl"
	echo '{"prompt": "x", "max_token": 3}'
	echo
	echo 'not json'
	sed -n 2p "$B/in.jsonl"
	echo '{"prompt": "a", "messages": []}'
	echo '{"prompt": "a", "temperature": -1}'
	echo '{"messages": [{"role": "robot", "content": "hi"}]}'
	echo '{"prompt": "a", "max_tokens": 2.5}'
	echo '[1, 2]'
	echo '{"prompt": "a", "seed": 18446744073709551615}'
} >"$B/bad.jsonl"
"$KVCHAT" batch -m "$M" -f "$B/bad.jsonl" --parallel 2 >"$B/outb" 2>"$B/errb"
check "bad lines: exit status 1" test $? -eq 1
check "bad lines: 10 output lines" test "$(wc -l <"$B/outb")" -eq 10
python3 - "$B/outb" "$B/out1" <<'PY' || fail "bad lines: errors name their lines, the good lines run"
import json, sys
got = [json.loads(l) for l in open(sys.argv[1])]
good = [json.loads(l) for l in open(sys.argv[2])]
want = {1: ("line 2:", "unknown key \"max_token\""), 2: ("line 4:", "JSON"),
        4: ("line 6:", "not both"), 5: ("line 7:", "temperature"), 6: ("line 8:", "robot"),
        7: ("line 9:", "max_tokens"), 8: ("line 10:", "object"),
        9: ("line 11:", "\"seed\" is out of range: from 0 to 9223372036854775807")}
ok = [g.get("index") for g in got] == list(range(10))
for i, (pre, part) in want.items():
    e = got[i].get("error", "")
    if not (e.startswith(pre) and part in e and "text" not in got[i]):
        print("line", i, got[i]); ok = False
for i, j in ((0, 0), (3, 1)):
    if got[i].get("ids") != good[j]["ids"]:
        print("good line", i, got[i]); ok = False
sys.exit(0 if ok else 1)
PY
check "bad lines: said on stderr" grep -q "batch: line 4: JSON" "$B/errb"

# a full context ends a request with "length", as generate's cap does
"$MKMODEL" -o "$B/small.gguf" --preset tiny --arch qwen2 --type f32 --vocab bpe --ctx 24 --seed 11 >/dev/null ||
	fail "mkmodel small"
printf '{"prompt": "Once upon a time there", "max_tokens": 100, "temperature": 0}\n{"prompt": "hello", "max_tokens": 3, "temperature": 0}\n' >"$B/ctx.jsonl"
kvrun "batch at a full context" "$B/errc" batch -m "$B/small.gguf" -f "$B/ctx.jsonl" --parallel 2 >"$B/outc"
alone=$("$KVCHAT" generate -m "$B/small.gguf" -p "Once upon a time there" -n 100 --temp 0 --ids 2>/dev/null | tr ' ' ',')
check "full context: the ids of generate" grep -q "\"ids\":\[$alone\]" "$B/outc"
check "full context: stop length" test "$(sed -n 1p "$B/outc" | sed 's/.*"stop":"\([a-z]*\)".*/\1/')" = length
n_in=$(sed -n 1p "$B/outc" | sed 's/.*"prompt_tokens":\([0-9]*\).*/\1/')
check "full context: 24 - prompt + 1 tokens" test "$(sed -n 1p "$B/outc" | sed 's/.*"gen_tokens":\([0-9]*\).*/\1/')" -eq $((24 - n_in + 1))

# usage errors
"$KVCHAT" batch -m "$M" >/dev/null 2>&1
check "no -f: usage error" test $? -eq 2
"$KVCHAT" batch -m "$M" -f "$B/in.jsonl" --parallel 0 >/dev/null 2>&1
check "--parallel 0: usage error" test $? -eq 2
"$KVCHAT" batch -m "$M" -f "$B/nonexistent.jsonl" >/dev/null 2>"$B/errn"
check "missing input: exit 1, named" sh -c "test $? -eq 1 && grep -q nonexistent '$B/errn'"

done_testing
