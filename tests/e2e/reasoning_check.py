#!/usr/bin/env python3
"""reasoning_check.py MESSAGES.json VARS.json -- KVCHAT template -m MODEL [--var ...]

The next prompt of a conversation with reasoning, checked against Python's
jinja2: MESSAGES.json is the stored conversation before its last reply as
chat_stream.py prints it (replies' reasoning as "reasoning_content" and
"thinking"), VARS.json the template variables (enable_thinking,
reasoning_effort, bos_token, eos_token, the template's path as
"template"). Renders the messages with the generation prompt by jinja2,
configured as transformers configures it (jinja_compare.py), and by
`kvchat template`, and requires them byte-identical; requires too that no
earlier reply's reasoning is in the render when the template drops it
("dropped": true in VARS.json). Exits 0, 1 on a difference, 77 without
jinja2.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja_compare  # noqa: E402 (exits 77 without jinja2)


def main():
    argv = sys.argv[1:]
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        msgs = json.load(f)
    with open(argv[1], encoding="utf-8") as f:
        v = json.load(f)
    path, dropped = v.pop("template"), v.pop("dropped", False)
    v.update({"messages": msgs, "add_generation_prompt": True})
    with open(path, encoding="utf-8") as f:
        want = jinja_compare.hf_environment().from_string(f.read()).render(**v).encode("utf-8")
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(jinja_compare.NOW), TZ="UTC")
    kv = {k: x for k, x in v.items() if k not in ("bos_token", "eos_token")}
    p = subprocess.run(argv[3:] + ["--template", path, "--add-generation-prompt"],
                       input=json.dumps(kv).encode(), stdout=subprocess.PIPE, env=env)
    ok = p.returncode == 0 and p.stdout == want
    if not ok:
        i = jinja_compare.first_diff(want, p.stdout)
        print("DIFF at byte %d: jinja2 %r, kvchat %r" % (i, want[max(0, i - 30):i + 30],
              p.stdout[max(0, i - 30):i + 30]))
    reasons = [m["reasoning_content"] for m in msgs if "reasoning_content" in m]
    kept = [r for r in reasons if r.encode("utf-8") in want]
    if dropped and kept:
        print("the render keeps an earlier reply's reasoning: %r" % kept[0])
        ok = False
    print("%s: %d bytes, %d messages, %d with reasoning, %d of them kept in the prompt" %
          ("same" if ok else "DIFFERENT", len(want), len(msgs), len(reasons), len(kept)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
