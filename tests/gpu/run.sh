#!/bin/sh
# tests/gpu/run.sh: everything the device machine checks in one call, run
# from an unpacked, built `make dist` tree (../shared/gpu/on-device.sh):
#   1. the two ceilings (bench/gpu/ceilings: device copy GB/s, cuBLAS bf16 TFLOP/s);
#   2. tests/unit/test_cuda (GPU against CPU logits, greedy, delta prefill, restore);
#   3. compute-sanitizer memcheck of test_cuda, where the tool exists;
#   4. kvchat bench --device cuda on random-weight models shaped like
#      Qwen2.5-7B and Llama-3.1-8B in F16, Q8_0 and Q4_K: decode tok/s and
#      GB/s (against the copy ceiling), prefill tok/s at 512 and 2048 and
#      TFLOP/s at 2048 (against the GEMM ceiling).
# Full logs go to $OUT; a short table is printed last. Each model is deleted
# after use (the device disk is 64 GB). Meant to finish in < 9 minutes.
set -u
OUT=${OUT:-/tmp/kvchat-gpu-out}
mkdir -p "$OUT"
export top_builddir=$(pwd) top_srcdir=$(pwd)
NPROC=$(nproc 2>/dev/null || echo 4)
summary=""
add() { summary="$summary$1\n"; }
T() { timeout "$@"; }

make -j"$NPROC" tests/unit/test_cuda tests/fixtures/mkmodel bench/gpu/ceilings kvchat >"$OUT/make.log" 2>&1 ||
	add "make: FAILED (see make.log)"

# 1. ceilings
copy=0 gemm=0
if T 120 ./bench/gpu/ceilings >"$OUT/ceilings.log" 2>&1; then
	copy=$(awk '$1 == "copy_GBps" { print $2 }' "$OUT/ceilings.log")
	gemm=$(awk '$1 == "gemm_bf16_TFLOPs" { print $2 }' "$OUT/ceilings.log")
	add "ceilings: $(head -1 "$OUT/ceilings.log"); copy $copy GB/s; bf16 GEMM $gemm TFLOP/s"
else
	add "ceilings: FAILED ($(tail -1 "$OUT/ceilings.log"))"
fi

# 2. correctness against the CPU backend
if T 240 ./tests/unit/test_cuda >"$OUT/test_cuda.log" 2>&1; then
	add "test_cuda: ok ($(grep -c '^ok' "$OUT/test_cuda.log") checks)"
else
	add "test_cuda: FAILED rc=$? ($(grep -m3 -i 'not ok\|fail' "$OUT/test_cuda.log" | tr '\n' ' '))"
fi

# 3. memcheck (slow: bounded; a timeout is reported, not counted as clean)
if command -v compute-sanitizer >/dev/null 2>&1; then
	T 150 compute-sanitizer --tool memcheck --leak-check no ./tests/unit/test_cuda >"$OUT/memcheck.log" 2>&1
	rc=$?
	if [ $rc -eq 124 ]; then add "memcheck: timed out after 150 s ($(grep -c 'Invalid' "$OUT/memcheck.log") invalid accesses so far)"
	else add "memcheck: rc=$rc, $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"; fi
else
	add "memcheck: compute-sanitizer not present"
fi

# 4. speed at real shapes. Matrix FLOPs per token of the layers (the output
# matrix runs for the last token only): 2 * L * (E*qd + 2*E*kvd + qd*E + 3*E*F);
# attention over a P-token prefill adds 2 * L * 2 * qd * P^2 / 2 in total.
shape() {
	case $1 in
	qwen2.5-7b) echo "28 3584 3584 512 18944" ;;
	llama3.1-8b) echo "32 4096 4096 1024 14336" ;;
	esac
}
table="preset        type   decode tok/s   GB/s  %copy | prefill512 tok/s  prefill2048 tok/s  TFLOP/s  %gemm\n"
for preset in qwen2.5-7b llama3.1-8b; do
	for type in f16 q8_0 q4_k; do
		m=/tmp/kvchat-$preset-$type.gguf
		log=$OUT/bench-$preset-$type.log
		if ! T 150 ./tests/fixtures/mkmodel -o "$m" --preset "$preset" --type "$type" --threads "$NPROC" \
		    --quiet >"$OUT/mkmodel-$preset-$type.log" 2>&1; then
			add "mkmodel $preset $type: FAILED"
			rm -f "$m"
			continue
		fi
		T 150 ./kvchat bench -m "$m" --device cuda -p 512 -n 128 -r 3 >"$log" 2>&1 ||
			add "bench $preset $type: FAILED ($(tail -1 "$log"))"
		T 100 ./kvchat bench -m "$m" --device cuda -p 2048 -n 0 -r 2 >"$log.2048" 2>&1 ||
			add "bench $preset $type p2048: FAILED ($(tail -1 "$log.2048"))"
		rm -f "$m"
		dec=$(awk -F'|' '$2 ~ /decode/ { gsub(/ /, "", $4); print $4 }' "$log")
		gbs=$(awk -F'|' '$2 ~ /decode/ { gsub(/ /, "", $6); print $6 }' "$log")
		p512=$(awk -F'|' '$2 ~ /prefill/ { gsub(/ /, "", $4); print $4 }' "$log")
		p2k=$(awk -F'|' '$2 ~ /prefill/ { gsub(/ /, "", $4); print $4 }' "$log.2048")
		row=$(shape "$preset" | awk -v dec="${dec:-0}" -v gbs="${gbs:-0}" -v p512="${p512:-0}" \
		    -v p2k="${p2k:-0}" -v copy="${copy:-0}" -v gemm="${gemm:-0}" -v pr="$preset" -v ty="$type" '{
			L = $1; E = $2; qd = $3; kvd = $4; F = $5; P = 2048
			flops = 2 * L * (E * qd + 2 * E * kvd + qd * E + 3 * E * F) * P + 2 * L * qd * P * P
			tf = p2k > 0 ? flops / (P / p2k) / 1e12 : 0
			printf "%-13s %-6s %12.1f %6.0f %5.1f%% | %16.1f %18.1f %8.1f %5.1f%%",
			    pr, ty, dec, gbs, copy > 0 ? 100 * gbs / copy : 0, p512, p2k, tf,
			    gemm > 0 ? 100 * tf / gemm : 0 }')
		table="$table$row\n"
	done
done

printf "%b" "$summary" | tee "$OUT/summary.txt"
printf "%b" "$table" | tee -a "$OUT/summary.txt"
