#!/usr/bin/env python3
"""gguf_weight_bytes.py [--per-token [--used N]] FILE: the bytes of tensor data a GGUF
file holds, computed on its own from the header (each tensor's shape and
type, with ggml's block sizes), for checking kvchat's /show and bench
against a reader that shares no code with it.

--per-token: the bytes a decode step reads instead: a 3-D expert matrix
(`*_exps.weight`, experts on its third axis) counts expert_used_count of
its expert_count experts, and the embedding nothing when an output matrix
is stored apart (a tied one is the output, read whole). --used N: as if
N experts were used per token rather than the file's count."""
import struct
import sys

# ggml type -> (elements per block, bytes per block)
BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
    8: (32, 34), 9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144),
    13: (256, 176), 14: (256, 210), 15: (256, 292), 24: (1, 1), 25: (1, 2),
    26: (1, 4), 27: (1, 8), 28: (1, 8), 30: (1, 2),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
    21: (256, 110), 22: (256, 82), 23: (256, 136), 29: (256, 56), 39: (32, 17),
}
# GGUF metadata value types -> struct format of a scalar
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
           10: "Q", 11: "q", 12: "d"}


def main(args):
    per_token = "--per-token" in args
    used = int(args[args.index("--used") + 1]) if "--used" in args else None
    path = args[-1]
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n]
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            for _ in range(n):
                value(et)
            return None
        return take(SCALARS[t])

    if data[:4] != b"GGUF":
        sys.exit("not a GGUF file")
    pos = 4
    take("I")  # version
    n_tensors, n_kv = take("Q"), take("Q")
    keys = {}
    for _ in range(n_kv):
        k = string().decode()
        keys[k] = value(take("I"))
    arch = keys.get("general.architecture", b"").decode()
    n_exp = keys.get(arch + ".expert_count", 0)
    n_used = keys.get(arch + ".expert_used_count", 0) if used is None else used
    sizes = {}
    for _ in range(n_tensors):
        name = string().decode()
        n_dims = take("I")
        ne = [take("Q") for _ in range(n_dims)]
        n = 1
        for d in ne:
            n *= d
        t = take("I")
        take("Q")  # offset
        per, size = BLOCKS[t]
        b = n // per * size
        if per_token and name.endswith("_exps.weight") and n_dims == 3 and ne[2] == n_exp:
            b = b // n_exp * n_used
        sizes[name] = b
    if per_token and "output.weight" in sizes:
        sizes.pop("token_embd.weight", None)
    print(sum(sizes.values()))


main(sys.argv[1:])
