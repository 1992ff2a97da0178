#!/bin/sh
# test_rss.sh (issue 21, "weights in memory once"): the peak resident size of
# a one-token generate on a Q8_0 model whose matrices the avx512 table packs
# (and with a tied output, whose embedding rows are then read from the file)
# stays below the file's size plus a bound: the KV cache of its context and
# 24 MiB for the program, its libraries, the tokenizer and the buffers. A
# packed copy made beside its resident file pages (kvchat before this test:
# the fingerprint's samples and the packing's neighbours mapped 2 MiB
# folios of the file back in) is the matrices' size again and fails it.
# Elsewhere nothing is packed and the file is mapped once: the same bound.
# The peak is the child's ru_maxrss, read by python3.
. "$top_srcdir/tests/e2e/lib.sh"
command -v python3 >/dev/null || skip "python3 is not installed (it reads the peak)"
grep -qa __asan_init "$KVCHAT" && skip "a sanitizer build: its shadow memory is not the program's"

M="$TMPD/m.gguf"
L=4 KVD=256 CTX=512
"$MKMODEL" -o "$M" --arch qwen2 --type q8_0 --vocab bpe --ctx $CTX --seed 3 --n-embd 1024 \
    --n-layer $L --n-head 16 --n-head-kv 4 --head-dim 64 --n-ff 4096 --tied >/dev/null ||
	{ echo "FAIL: mkmodel"; exit 1; }
size=$(wc -c <"$M")
# F16 K and V rows of every position of every layer, in KiB
kv=$((L * 2 * CTX * KVD * 2 / 1024))
bound=$((size / 1024 + kv + 24 * 1024))
peak=$(python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r.returncode == 0 else "failed")
' "$KVCHAT" generate -m "$M" -p "hello there" -n 4 --threads 2 --ctx $CTX)
echo "file $((size / 1024)) KiB, peak $peak KiB, bound $bound KiB ($("$KVCHAT" --version | grep kernels))"
check "generate ran" [ "$peak" != failed ]
check "peak RSS $peak KiB <= file + KV + 24 MiB = $bound KiB" [ "$peak" -le "$bound" ]
done_testing
