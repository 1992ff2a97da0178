#!/bin/sh
# test_serve_openai.sh (issue 24): kvchat serve through the official openai
# Python package, as editors and agents use it: chat and raw completions,
# streamed (with include_usage) and not, equal kvchat generate's greedy
# text on the same rendered prompt; its error classes for an unknown model
# (404) and a wrong key (401). The package is installed once into a virtual
# environment under the build folder from the package index; the test
# SKIPs, saying so, only when that install fails.
. "$top_srcdir/tests/e2e/lib.sh"
command -v python3 >/dev/null 2>&1 || skip "python3 is needed"

VENV="$top_builddir/tests/e2e/openai-venv"
if ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
	rm -rf "$VENV"
	if ! python3 -m venv "$VENV" >"$TMPD/venv.log" 2>&1 ||
	    ! "$VENV/bin/pip" install -q --disable-pip-version-check openai >>"$TMPD/venv.log" 2>&1; then
		tail -3 "$TMPD/venv.log"
		rm -rf "$VENV"
		skip "cannot install the openai package into a virtual environment (above: why)"
	fi
fi

tiny_model 11
SPID=""
trap '[ -n "$SPID" ] && kill "$SPID" 2>/dev/null; rm -rf "$TMPD"' EXIT
printf 'test-key-12345\n' >"$TMPD/key"
serve_start "$TMPD/s.db" --api-key-file "$TMPD/key"

"$VENV/bin/python" - "$PORT" "$KVCHAT" "$M" <<'PY'
import subprocess, sys
import openai
port, kv, model = sys.argv[1], sys.argv[2], sys.argv[3]
cl = openai.OpenAI(base_url="http://127.0.0.1:%s/v1" % port, api_key="test-key-12345")
bad = 0
def check(desc, cond, detail=""):
    global bad
    if not cond:
        bad += 1
        print("FAIL:", desc, detail)
def generate(n, prompt=None, rendered=None):
    args = [kv, "generate", "-m", model, "-n", str(n), "--temp", "0"]
    if prompt is not None:
        args += ["-p", prompt]
    else:
        ids = subprocess.run([kv, "tokenize", "-m", model, "--parse-special"], input=rendered.encode(),
                             capture_output=True, check=True).stdout.decode().split()
        args += ["--prompt-ids", ",".join(ids)]
    return subprocess.run(args, capture_output=True, check=True).stdout.decode("utf-8", "replace")

name = cl.models.list().data[0].id
check("the model's name", name == "m", name)
msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
want = generate(15, rendered="<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello"
                "<|im_end|>\n<|im_start|>assistant\n")
r = cl.chat.completions.create(model=name, messages=msgs, max_tokens=15, temperature=0)
check("chat = kvchat generate", r.choices[0].message.content == want, (r.choices[0].message.content, want))
check("usage", r.usage.completion_tokens == 15 and r.usage.prompt_tokens_details.cached_tokens >= 0, r.usage)
text, usage = "", None
for ch in cl.chat.completions.create(model=name, messages=msgs, max_completion_tokens=15,
                                     temperature=0, stream=True,
                                     stream_options={"include_usage": True}):
    if ch.usage:
        usage = ch.usage
    for c in ch.choices:
        text += c.delta.content or ""
check("streamed chat = kvchat generate", text == want, (text, want))
check("streamed usage, the prompt cached", usage is not None and
      usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1, usage)
want = generate(10, prompt="Once upon")
r = cl.completions.create(model=name, prompt="Once upon", max_tokens=10, temperature=0)
check("completion = kvchat generate", r.choices[0].text == want, (r.choices[0].text, want))
text = "".join(c.choices[0].text for c in cl.completions.create(
    model=name, prompt="Once upon", max_tokens=10, temperature=0, stream=True) if c.choices)
check("streamed completion = kvchat generate", text == want, (text, want))
try:
    cl.chat.completions.create(model="gpt-4o", messages=msgs, max_tokens=2)
    check("unknown model refused", False)
except openai.NotFoundError:
    pass
try:
    openai.OpenAI(base_url="http://127.0.0.1:%s/v1" % port, api_key="wrong-key").models.list()
    check("wrong key refused", False)
except openai.AuthenticationError:
    pass
print("openai client:", "ok" if bad == 0 else "%d failed" % bad)
sys.exit(1 if bad else 0)
PY
check "the openai package's requests" [ $? -eq 0 ]
done_testing
