#!/usr/bin/env python3
"""gguf_weight_bytes.py FILE: the bytes of tensor data a GGUF file holds,
computed on its own from the header (each tensor's shape and type, with
ggml's block sizes), for checking kvchat's /show against a reader that
shares no code with it."""
import struct
import sys

# ggml type -> (elements per block, bytes per block)
BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
    8: (32, 34), 9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144),
    13: (256, 176), 14: (256, 210), 15: (256, 292), 24: (1, 1), 25: (1, 2),
    26: (1, 4), 27: (1, 8), 28: (1, 8), 30: (1, 2),
}
# GGUF metadata value types -> struct format of a scalar
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
           10: "Q", 11: "q", 12: "d"}


def main(path):
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
            string()
        elif t == 9:
            et, n = take("I"), take("Q")
            for _ in range(n):
                value(et)
        else:
            take(SCALARS[t])

    if data[:4] != b"GGUF":
        sys.exit("not a GGUF file")
    pos = 4
    take("I")  # version
    n_tensors, n_kv = take("Q"), take("Q")
    for _ in range(n_kv):
        string()
        value(take("I"))
    total = 0
    for _ in range(n_tensors):
        string()
        n_dims = take("I")
        n = 1
        for _ in range(n_dims):
            n *= take("Q")
        t = take("I")
        take("Q")  # offset
        per, size = BLOCKS[t]
        total += n // per * size
    print(total)


main(sys.argv[1])
