#!/bin/sh
# tests/gpu/run.sh: everything the device machine checks in one call, run
# from an unpacked `make dist` build tree (see ../shared/gpu/README.md):
# the GPU tests, compute-sanitizer on them where available, and decode /
# prefill benchmarks at real shapes next to the measured copy bandwidth.
# Full logs go to $OUT; a short table is printed last.
set -u
OUT=${OUT:-/tmp/kvchat-gpu-out}
mkdir -p "$OUT"
export top_builddir=$(pwd) top_srcdir=$(pwd)
summary=""
add() { summary="$summary$1\n"; }

if ./tests/test_cuda >"$OUT/test_cuda.log" 2>&1; then add "test_cuda: $(tail -1 "$OUT/test_cuda.log")"
else add "test_cuda: FAILED ($(tail -1 "$OUT/test_cuda.log"))"; fi
if command -v compute-sanitizer >/dev/null 2>&1; then
	compute-sanitizer --tool memcheck ./tests/test_cuda >"$OUT/memcheck.log" 2>&1
	add "memcheck: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
fi
for preset in qwen2.5-7b llama3.1-8b; do
	for type in f16 q8_0 q4_k; do
		m=/tmp/kvchat-$preset-$type.gguf
		[ -f "$m" ] || ./tests/mkmodel -o "$m" --preset "$preset" --type "$type" >>"$OUT/mkmodel.log" 2>&1
		./kvchat bench -m "$m" --device cuda -p 512 -n 128 >"$OUT/bench-$preset-$type.log" 2>&1
		add "bench $preset $type: $(tail -1 "$OUT/bench-$preset-$type.log")"
		rm -f "$m"
	done
done
printf "%b" "$summary"
