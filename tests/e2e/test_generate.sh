#!/bin/sh
# test_generate.sh: the command-line contract of generate, bench and
# convert-llama2c, on a tiny random llama2.c checkpoint made here.
. "$top_srcdir/tests/e2e/lib.sh"
command -v python3 >/dev/null 2>&1 || skip "python3 is needed to write the fixture checkpoint"

# A llama2.c checkpoint (dim 16, hidden 24, 2 layers, 4 heads, 2 kv heads,
# vocab 300, seq_len 32, separate classifier) and its tokenizer.bin.
python3 - "$TMPD/tiny.bin" "$TMPD/tiny-tok.bin" <<'PY'
import random, struct, sys
r = random.Random(1234)
dim, hid, L, H, KV, V, S = 16, 24, 2, 4, 2, 300, 32
hs = dim // H
kvd = hs * KV
def arr(n, scale=0.5, off=0.0):
    return struct.pack("<%df" % n, *[off + scale * (2 * r.random() - 1) for _ in range(n)])
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<7i", dim, hid, L, H, KV, -V, S))
    f.write(arr(V * dim, 1.0))
    f.write(arr(L * dim, 0.1, 1.0))
    f.write(arr(L * dim * dim)); f.write(arr(L * kvd * dim)); f.write(arr(L * kvd * dim)); f.write(arr(L * dim * dim))
    f.write(arr(L * dim, 0.1, 1.0))
    f.write(arr(L * hid * dim)); f.write(arr(L * dim * hid)); f.write(arr(L * hid * dim))
    f.write(arr(dim, 0.1, 1.0))
    f.write(arr(S * hs))
    f.write(arr(V * dim, 2.0))
pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [b"<0x%02X>" % i for i in range(256)]
words = [b" the", b" a", b" cat", b" dog", b"s", b" sat", b" on", b" mat", b"ed", b" ran", b" and",
         b" big", b" red", b" hat", b"e", b"t", b"a", b"o", b" ", b"h", b"c", b"d", b"g", b"m", b"n",
         b"r", b"b", b"i", b"th", b"at", b"og", b"an", b"ca", b"ma", b"ha", b"ra", b"re", b"nd", b"ig", b"un", b"x"]
pieces += words
assert len(pieces) == V
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<i", max(len(p) for p in pieces)))
    for i, p in enumerate(pieces):
        f.write(struct.pack("<fi", -float(i) if i >= 259 else 0.0, len(p)) + p)
PY
M=$TMPD/tiny.gguf
check "convert" "$KVCHAT" convert-llama2c "$TMPD/tiny.bin" "$TMPD/tiny-tok.bin" -o "$M"

# expect_status N COMMAND...: passes when the command exits with status N
expect_status() { want=$1; shift; "$@" >"$TMPD/out" 2>"$TMPD/err"; got=$?; [ "$got" -eq "$want" ] || { echo "exit $got, want $want: $*" >&2; cat "$TMPD/err" >&2; return 1; }; }

# usage errors: 2, with the usage on stderr
check "no model" expect_status 2 "$KVCHAT" generate
check "unknown option" expect_status 2 "$KVCHAT" generate -m "$M" --frobnicate
check "usage printed" grep -q "usage: kvchat generate" "$TMPD/err"
check "bad -n" expect_status 2 "$KVCHAT" generate -m "$M" -n -3
check "bad --temp" expect_status 2 "$KVCHAT" generate -m "$M" --temp hot
check "bad --kv-type" expect_status 2 "$KVCHAT" generate -m "$M" --kv-type q8
check "missing value" expect_status 2 "$KVCHAT" generate -m "$M" -n
check "bench unknown option" expect_status 2 "$KVCHAT" bench -m "$M" --frobnicate
# The option tables of generate, perplexity and batch (sub_opts.c): each
# usage error names what was wrong and the argument, the same way in all three.
for sub in generate perplexity batch; do
	check "$sub: unknown option" expect_status 2 "$KVCHAT" $sub -m "$M" --frobnicate
	check "$sub: ... named" grep -q "kvchat: $sub: unknown option: --frobnicate" "$TMPD/err"
	check "$sub: ... with its usage" grep -q "usage: kvchat $sub" "$TMPD/err"
	check "$sub: a value missing" expect_status 2 "$KVCHAT" $sub -m "$M" --threads
	check "$sub: ... named" grep -q "kvchat: $sub: option needs a value: --threads" "$TMPD/err"
	check "$sub: a stray argument" expect_status 2 "$KVCHAT" $sub -m "$M" stray
	check "$sub: ... named" grep -q "kvchat: $sub: unexpected argument: stray" "$TMPD/err"
	check "$sub: a bad engine value" expect_status 2 "$KVCHAT" $sub -m "$M" --kv-type q8
	check "$sub: ... named" grep -q "kvchat: $sub: bad --kv-type (f16, f32 or q8_0): q8" "$TMPD/err"
	check "$sub --help: usage on stdout, status 0" expect_status 0 "$KVCHAT" $sub --help
	check "$sub --help: ... the usage" grep -q "usage: kvchat $sub" "$TMPD/out"
done
check "generate: a bad sampler value" expect_status 2 "$KVCHAT" generate -m "$M" --top-p 2
check "generate: ... named" grep -q "kvchat: generate: bad --top-p: 2" "$TMPD/err"
check "batch: a bad sampler value" expect_status 2 "$KVCHAT" batch -m "$M" --temp hot
check "batch: ... named" grep -q "kvchat: batch: bad --temp: hot" "$TMPD/err"
check "perplexity: no sampler options" expect_status 2 "$KVCHAT" perplexity -m "$M" --temp 0
check "perplexity: -c is the chunk length" expect_status 2 "$KVCHAT" perplexity -m "$M" -c 2
check "perplexity: ... named" grep -q "bad -c (at least 4): 2" "$TMPD/err"
check "batch: unknown template" expect_status 2 "$KVCHAT" batch -m "$M" --chat-template nope
check "batch: ... named" grep -q "unknown chat template: nope" "$TMPD/err"
check "convert without -o" expect_status 2 "$KVCHAT" convert-llama2c "$TMPD/tiny.bin" "$TMPD/tiny-tok.bin"
# runtime errors: 1 with a message
check "missing model file" expect_status 1 "$KVCHAT" generate -m "$TMPD/nonexistent.gguf"
check "message names the file" grep -q "nonexistent.gguf" "$TMPD/err"
check "unknown device" expect_status 1 "$KVCHAT" generate -m "$M" --device tpu
check "checkpoint is not a model" expect_status 1 "$KVCHAT" generate -m "$TMPD/tiny.bin"

# --ids: decimal ids separated by single spaces, one line; timings on stderr only
check "greedy ids" expect_status 0 "$KVCHAT" generate -m "$M" --temp 0 -n 12 --ids
cp "$TMPD/out" "$TMPD/greedy1"
check "ids format" grep -Eqx '[0-9]+( [0-9]+)*' "$TMPD/greedy1"
check "one line" test "$(wc -l <"$TMPD/greedy1")" -eq 1
n=$(wc -w <"$TMPD/greedy1")
check "at most -n ids" test "$n" -ge 1 -a "$n" -le 12
check "timings on stderr" grep -q "tok/s" "$TMPD/err"
check "ids in range" python3 -c 'import sys; sys.exit(any(not 0 <= int(x) < 300 for x in open(sys.argv[1]).read().split()))' "$TMPD/greedy1"
check "greedy again" expect_status 0 "$KVCHAT" generate -m "$M" --temp 0 -n 12 --ids --threads 1
check "greedy is deterministic" cmp "$TMPD/out" "$TMPD/greedy1"
check "greedy, f32 cache" expect_status 0 "$KVCHAT" generate -m "$M" --temp 0 -n 12 --ids --kv-type f32
check "greedy with f32 cache agrees" cmp "$TMPD/out" "$TMPD/greedy1"

# the text is the detokenized ids
check "greedy text" expect_status 0 "$KVCHAT" generate -m "$M" --temp 0 -n 12
cp "$TMPD/out" "$TMPD/greedy1.text"
check "detokenize" expect_status 0 "$KVCHAT" detokenize -m "$M" <"$TMPD/greedy1"
check "text equals detokenized ids" cmp "$TMPD/out" "$TMPD/greedy1.text"

# sampling with a seed is reproducible
check "seed 42" expect_status 0 "$KVCHAT" generate -m "$M" --temp 1.5 --top-k 0 --top-p 1 --seed 42 -n 20 --ids
cp "$TMPD/out" "$TMPD/s42a"
check "seed 42 again" expect_status 0 "$KVCHAT" generate -m "$M" --temp 1.5 --top-k 0 --top-p 1 --seed 42 -n 20 --ids
check "same seed, same ids" cmp "$TMPD/out" "$TMPD/s42a"
check "seed 42 text" expect_status 0 "$KVCHAT" generate -m "$M" --temp 1.5 --top-k 0 --top-p 1 --seed 42 -n 20
cp "$TMPD/out" "$TMPD/t42a"
check "seed 42 text again" expect_status 0 "$KVCHAT" generate -m "$M" --temp 1.5 --top-k 0 --top-p 1 --seed 42 -n 20
check "same seed, same text" cmp "$TMPD/out" "$TMPD/t42a"
same=0
for s in 1 2 3; do
	"$KVCHAT" generate -m "$M" --temp 1.5 --top-k 0 --top-p 1 --seed $s -n 20 --ids >"$TMPD/s$s" 2>/dev/null
	cmp -s "$TMPD/s$s" "$TMPD/s42a" && same=$((same + 1))
done
check "other seeds give other ids" test "$same" -lt 3

# -n 0 prints nothing; -n is capped by the context; a prompt is accepted
check "-n 0" expect_status 0 "$KVCHAT" generate -m "$M" -n 0
check "-n 0: empty output" test ! -s "$TMPD/out"
check "ctx 6" expect_status 0 "$KVCHAT" generate -m "$M" --temp 0 --ctx 6 -n 100 --ids
check "-n capped by the context" test "$(wc -w <"$TMPD/out")" -le 6
check "prompt" expect_status 0 "$KVCHAT" generate -m "$M" --temp 0 -p "the cat sat" -n 5 --ids
check "prompt too long for the context" expect_status 1 "$KVCHAT" generate -m "$M" --ctx 3 -p "the cat sat on the mat and the dog ran"

# bench prints its table
check "bench" expect_status 0 "$KVCHAT" bench -m "$M" -p 8 -n 4 -r 2
check "bench prefill row" grep -q "^| prefill" "$TMPD/out"
check "bench decode row" grep -q "^| decode" "$TMPD/out"
# -d: a history prefilled once before each timed prefill (TTFT after it)
check "bench -d" expect_status 0 "$KVCHAT" bench -m "$M" -d 16 -p 4 -n 2 -r 2
check "bench -d names the history" grep -q "^history: 16 tokens" "$TMPD/out"
check "bench -d prefill row" grep -q "^| prefill |      4 " "$TMPD/out"
check "bench bad -d" expect_status 2 "$KVCHAT" bench -m "$M" -d -3
done_testing
