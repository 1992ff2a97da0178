#!/usr/bin/env python3
"""check-tree.py: the house rules docs/ARCHITECTURE.md states, checked.

  python3 scripts/check-tree.py [--build DIR]

1. Includes: a file of module M includes only headers of M or of the
   modules M may use (LAYERS below, the same table as docs/ARCHITECTURE.md),
   so no library module includes a CLI header and no two modules include
   each other.
2. Symbols (with --build, from the objects' symbol tables via nm): which
   file calls which. Module to module, the same table must allow it; file
   to file, there must be no cycle (two files that call each other are one
   file's worth of responsibility cut in the wrong place).
3. Sizes: no .c file over 900 lines (the CUDA kernels in cuda/ aside), nor
   a header that holds function bodies (a "{" in column 0: its lines are
   compiled into every file that includes it), no function over 120 lines (a function is counted from the "{" that opens
   it in column 0 to the "}" that closes it in column 0, this tree's style).

Prints one line per violation and exits 1 if there is any.
"""
import os
import re
import subprocess
import sys

# module -> the modules it may use (directly; the table is a DAG by order).
LAYERS = {
    "core": [],
    "gguf": ["core"],
    "sampler": ["core"],
    "sessions": ["core"],
    "quant": ["core", "gguf"],
    "kern": ["core", "gguf", "quant"],
    "tokenizer": ["core", "gguf"],
    "convert": ["core", "gguf"],
    "model": ["core", "gguf", "quant"],
    "backend": ["core", "gguf", "quant", "kern", "model"],
    "engine": ["core", "gguf", "quant", "model", "backend", "tokenizer"],
    "jinja": ["core"],
    "chat": ["core", "gguf", "tokenizer", "jinja"],
    "conv": ["core", "gguf", "model", "tokenizer", "engine", "chat", "jinja", "sampler", "sessions"],
    "remote": ["core"],
    "server": ["core", "gguf", "model", "tokenizer", "engine", "chat", "jinja", "sampler",
               "sessions", "conv"],
    "cli": ["core", "gguf", "quant", "kern", "tokenizer", "convert", "model", "backend",
            "engine", "sampler", "jinja", "chat", "sessions", "conv", "server", "remote"],
}
MAX_FILE_LINES = 900
MAX_FUNC_LINES = 120

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def module_of(rel):
    """The module a path (relative to the root) belongs to, or None."""
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] == "sessions":
        return "sessions"
    if parts[0] == "cuda":
        return "backend"  # the CUDA backend: the backend module's second home
    return None


def sources():
    out = []
    for top in ("src", "sessions", "cuda"):
        for dp, _, fn in os.walk(os.path.join(ROOT, top)):
            for f in fn:
                if f.endswith((".c", ".h", ".cu")):
                    out.append(os.path.relpath(os.path.join(dp, f), ROOT))
    return sorted(out)


def check_includes(files, bad):
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for rel in files:
        m = module_of(rel)
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                g = inc.match(line)
                if not g or g.group(1) == "config.h":
                    continue
                target = g.group(1)
                if "/" not in target:
                    # same folder
                    if not os.path.exists(os.path.join(ROOT, os.path.dirname(rel), target)):
                        bad.append("%s:%d: includes \"%s\", which is not in its folder" % (rel, n, target))
                    continue
                tm = module_of(target if target.startswith(("sessions/", "cuda/")) else "src/" + target)
                if tm is None:
                    bad.append("%s:%d: includes \"%s\", which is in no module" % (rel, n, target))
                elif tm != m and tm not in LAYERS[m]:
                    bad.append("%s:%d: module %s includes \"%s\" of module %s, which it may not use"
                               % (rel, n, m, target, tm))


def objects(build):
    """(object path relative to build, source path relative to root) pairs."""
    out = []
    for dp, _, fn in os.walk(build):
        for f in fn:
            if not f.endswith(".o"):
                continue
            o = os.path.relpath(os.path.join(dp, f), build)
            if o.startswith(("tests/", "bench/")):
                continue
            stem = re.sub(r"^(.*/)?(lib\w+_a-|kvchat-)?", r"\1", o)[:-2]
            for ext in (".c", ".cu"):
                if os.path.exists(os.path.join(ROOT, stem + ext)):
                    out.append((o, stem + ext))
                    break
    return out


def check_symbols(build, bad):
    defs, uses = {}, {}
    for o, src in objects(build):
        text = subprocess.run(["nm", os.path.join(build, o)], capture_output=True,
                              text=True, check=True).stdout
        for line in text.splitlines():
            p = line.split()
            if len(p) == 2 and p[0] == "U":
                uses.setdefault(src, set()).add(p[1])
            elif len(p) == 3 and p[1] in "TDBR" and p[1].isupper():
                defs[p[2]] = src
    edges = {}
    for src, syms in uses.items():
        for s in syms:
            d = defs.get(s)
            if d is None or d == src:
                continue
            edges.setdefault(src, {}).setdefault(d, []).append(s)
    for a, ds in sorted(edges.items()):
        ma = module_of(a)
        for b, syms in sorted(ds.items()):
            mb = module_of(b)
            if ma != mb and mb not in LAYERS.get(ma, []):
                bad.append("%s calls %s of %s (module %s may not use %s)"
                           % (a, ", ".join(sorted(syms)[:3]), b, ma, mb))
    # file cycles: Tarjan's strongly connected components
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for comp in comps:
        ties = []
        for a in comp:
            for b in comp:
                if b in edges.get(a, {}):
                    ties.append("%s -> %s (%s)" % (a, b, ", ".join(sorted(edges[a][b])[:3])))
        bad.append("files call each other in a cycle: " + "; ".join(ties))
    return len(objects(build))


def check_sizes(files, bad):
    for rel in files:
        if not rel.endswith((".c", ".cu", ".h")):
            continue
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            lines = f.read().split("\n")
        bodies = rel.endswith(".c") or (rel.endswith(".h") and any(l.startswith("{") for l in lines))
        if bodies and len(lines) - 1 > MAX_FILE_LINES:
            bad.append("%s: %d lines (at most %d%s)" % (rel, len(lines) - 1, MAX_FILE_LINES,
                       ", a header with function bodies" if rel.endswith(".h") else ""))
        start = None
        for n, line in enumerate(lines, 1):
            if line.startswith("{"):
                start = n
            elif line.startswith("}") and start is not None:
                if n - start - 1 > MAX_FUNC_LINES and not line.startswith("};"):
                    # the name is on the line before the "{" (or the one before that)
                    name = "?"
                    for k in range(start - 2, max(start - 6, -1), -1):
                        g = re.match(r"^\*?(\w+)\(", lines[k])
                        if g:
                            name = g.group(1)
                            break
                    bad.append("%s:%d: function %s is %d lines (at most %d)"
                               % (rel, start, name, n - start - 1, MAX_FUNC_LINES))
                start = None


def main():
    build = None
    args = sys.argv[1:]
    if args[:1] == ["--build"] and len(args) == 2:
        build = args[1]
    elif args:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    bad = []
    files = sources()
    for rel in files:
        if module_of(rel) not in LAYERS:
            bad.append("%s: not in a module folder of the table" % rel)
    check_includes(files, bad)
    n_obj = check_symbols(build, bad) if build else 0
    check_sizes(files, bad)
    for b in bad:
        print("check-tree: " + b)
    print("check-tree: %d source files, %d objects, %d violations" % (len(files), n_obj, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
