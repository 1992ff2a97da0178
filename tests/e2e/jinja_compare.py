#!/usr/bin/env python3
"""jinja_compare.py: renders every chat template x conversation x variables
case with Python's jinja2, configured as Hugging Face transformers'
apply_chat_template configures it, and with kvchat's renderer, and compares
the two byte for byte.

  jinja_compare.py TEMPLATE_DIR CONVS.json TOOLS.json -- RENDERER [ARGS...]

RENDERER is run once per case as `RENDERER ARGS... --template FILE` with the
case's variables as one JSON object on stdin, SOURCE_DATE_EPOCH and TZ=UTC
in its environment (the time strftime_now shows). A case both sides refuse
(raise_exception, an undefined value) counts as agreeing. Prints one line
per difference, naming the first differing byte, and a summary; exits 1 on
any difference, 77 when jinja2 is missing.
"""
import datetime
import json
import os
import subprocess
import sys

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("SKIP: Python's jinja2 is not installed (Debian: python3-jinja2)")
    sys.exit(77)

NOW = 1764374400  # 2025-11-29 00:00:00 UTC


def hf_environment():
    """The environment transformers' chat template rendering builds."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def cases(convs, tools):
    """(name, variables) for each conversation and variable set."""
    extras = [("", {}), ("+think", {"enable_thinking": True}),
              ("-think", {"enable_thinking": False})]
    for cname, msgs in convs.items():
        for agp in (False, True):
            ex = list(extras)
            if agp:
                ex.append(("+effort-high", {"reasoning_effort": "high"}))
                ex.append(("+effort-low", {"reasoning_effort": "low"}))
            for ename, extra in ex:
                v = {"messages": msgs, "add_generation_prompt": agp,
                     "bos_token": "<s>", "eos_token": "</s>"}
                if cname == "tools":
                    v["tools"] = tools
                v.update(extra)
                yield "%s%s%s" % (cname, "+agp" if agp else "", ename), v


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def main():
    argv = sys.argv[1:]
    if len(argv) < 5 or argv[3] != "--":
        print(__doc__)
        return 2
    tdir, convs_path, tools_path, renderer = argv[0], argv[1], argv[2], argv[4:]
    with open(convs_path, encoding="utf-8") as f:
        convs = json.load(f)
    with open(tools_path, encoding="utf-8") as f:
        tools = json.load(f)
    env = hf_environment()
    run_env = dict(os.environ, SOURCE_DATE_EPOCH=str(NOW), TZ="UTC")
    total = same = refused = 0
    bad = []
    for tname in sorted(os.listdir(tdir)):
        if not tname.endswith(".jinja"):
            continue
        path = os.path.join(tdir, tname)
        with open(path, encoding="utf-8") as f:
            tmpl = env.from_string(f.read())
        for cname, v in cases(convs, tools):
            total += 1
            try:
                want = tmpl.render(**v).encode("utf-8")
            except Exception as e:  # raise_exception, undefined, type errors
                want = None
                why = "%s: %s" % (type(e).__name__, e)
            p = subprocess.run(renderer + ["--template", path], input=json.dumps(v).encode(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env)
            got = p.stdout if p.returncode == 0 else None
            if want is None and got is None:
                same += 1
                refused += 1
            elif want is None:
                bad.append("%s %s: jinja2 refused (%s), kvchat rendered %d bytes" %
                           (tname, cname, why, len(got)))
            elif got is None:
                bad.append("%s %s: kvchat refused: %s" %
                           (tname, cname, p.stderr.decode("utf-8", "replace").strip()))
            elif want == got:
                same += 1
            else:
                i = first_diff(want, got)
                bad.append("%s %s: first difference at byte %d: jinja2 %r, kvchat %r" %
                           (tname, cname, i, want[max(0, i - 20):i + 20], got[max(0, i - 20):i + 20]))
    for line in bad:
        print("DIFF " + line)
    print("%d of %d renders byte-identical to jinja2 %s (%d refused by both)" %
          (same, total, jinja2.__version__, refused))
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main())
