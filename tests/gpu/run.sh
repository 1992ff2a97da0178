#!/bin/sh
# tests/gpu/run.sh: everything the device machine checks in one call, run
# from an unpacked `make dist` tree that ../shared/gpu/on-device.sh built:
#   CONFIGURE_FLAGS=--with-cuda-arch=90 bash .device/on-device.sh tests/gpu/run.sh
# (one architecture builds in a quarter of the time of the default four).
# In order of value, each step bounded by a timeout, each summary line
# printed the moment it is known (a timeout loses nothing before it):
#   1. kvchat --version (the module found, its code, the device);
#   2. tests/unit/test_cuda_i8: the matrix-vector kernels of every weight
#      type on random data against the float64 dot (896 and 14336 wide),
#      the tiled prefill attention and forward_multi's rows' attention
#      against a float64 softmax and one sequence at a time (F16 and Q8_0
#      caches), the q8_0 cache's store (bit for bit against the CPU's rows),
#      slide rotation and attention, and the device sampler against
#      smp_sample on the same logits (same token, same generator state);
#      tests/unit/test_cuda: every architecture x weight type against the
#      float64 reference, F32, F16 and Q8_0 caches, snapshots CPU <-> GPU
#      (Q8_0 rows byte for byte), forward_multi against one-token forwards;
#   3. a short generation with KVCHAT_CUDA_SYNC=1 per architecture (a
#      faulting kernel is named; no graph), then the same as one CUDA graph
#      per step: the text must be the same; then with a q8_0 cache, and
#      sampled on the device (--temp 0.8 --seed 7) both ways: the same text;
#   4. compute-sanitizer memcheck of a short generation, racecheck of a
#      short one (the attention kernels' shared memory), where the tool is;
#   5. the ceilings (bench/gpu/ceilings: device copy GB/s, cuBLAS BF16
#      TFLOP/s);
#   6. kvchat bench --device cuda on random-weight models at Qwen2.5-7B and
#      Llama-3.1-8B shapes (Q4_K, Q8_0, F16): decode tok/s and GB/s against
#      the copy ceiling, prefill tok/s at 512 and 2048; decode once more
#      with KVCHAT_CUDA_GRAPH=0 (graph vs no graph), and the TTFT of a
#      50-token turn after 0, 4k and 16k tokens of history (bench -d);
#      kvchat batch (forward_multi) at --parallel 1 and 8.
# Full logs go to $OUT; summary.txt holds the summary. Models are generated
# here and deleted after use (the device disk is 64 GB). Meant to finish in
# under 6 minutes; not yet run on a device (no session had one).
set -u
OUT=${OUT:-/tmp/kvchat-gpu-out}
mkdir -p "$OUT"
export top_builddir=$(pwd) top_srcdir=$(pwd)
export KVCHAT_CUDA_MODULE=$(pwd)/kvchat-cuda.so
NPROC=$(nproc 2>/dev/null || echo 4)
: >"$OUT/summary.txt"
add() { echo "$1" | tee -a "$OUT/summary.txt"; }
T() { timeout "$@"; }
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }

make -j"$NPROC" kvchat kvchat-cuda.so tests/unit/test_cuda tests/unit/test_cuda_i8 tests/fixtures/mkmodel bench/gpu/ceilings \
    >"$OUT/make.log" 2>&1 || add "make: FAILED (see make.log)"
make -j"$NPROC" tests/unit/test_cuda_sample tests/unit/test_cuda_kvq8 >>"$OUT/make.log" 2>&1

# 1. what was built and found
./kvchat --version >"$OUT/version.txt" 2>&1
add "version: $(tr '\n' ';' <"$OUT/version.txt")"

# 2. the kernels, then the whole forward, against the float64 reference
T 60 ./tests/unit/test_cuda_i8 >"$OUT/test_cuda_i8.log" 2>&1
add "test_cuda_i8: rc=$?, $(tail -1 "$OUT/test_cuda_i8.log") [$(elapsed)]"
grep -m5 '^FAIL' "$OUT/test_cuda_i8.log"
add "  tiled prefill attention: $(grep -c '^device attention_prefill' "$OUT/test_cuda_i8.log") run, $(grep -c '^FAIL: attention_prefill' "$OUT/test_cuda_i8.log") FAIL; forward_multi rows' attention: $(grep -c '^device attention_rows' "$OUT/test_cuda_i8.log") run, $(grep -c '^FAIL: attention_rows' "$OUT/test_cuda_i8.log") FAIL"
T 150 ./tests/unit/test_cuda >"$OUT/test_cuda.log" 2>&1
rc=$?
add "test_cuda: rc=$rc, $(tail -1 "$OUT/test_cuda.log"); worst lines: $(grep -c '^FAIL' "$OUT/test_cuda.log") FAIL [$(elapsed)]"
grep -m5 '^FAIL' "$OUT/test_cuda.log"
add "  forward_multi vs one at a time: $(grep -c 'forward_multi against one at a time' "$OUT/test_cuda.log") models, $(grep -c 'FAIL.*forward_multi' "$OUT/test_cuda.log") FAIL"

# 3. each architecture once, synchronised after every launch
for arch in llama qwen2 qwen3 gemma2 gemma3 phi3 chatglm glm4 gpt2; do
	m=/tmp/kvchat-sync-$arch.gguf
	./tests/fixtures/mkmodel -o "$m" --preset tiny --arch "$arch" --type q4_k >/dev/null 2>&1
	if KVCHAT_CUDA_SYNC=1 T 30 ./kvchat generate -m "$m" --device cuda -n 16 -p hello \
	    >"$OUT/sync-$arch.log" 2>&1; then
		s="${s:-}$arch ok, "
	else
		s="${s:-}$arch FAILED ($(tail -1 "$OUT/sync-$arch.log")), "
	fi
	# the same generation replayed as one CUDA graph per step: the same kernels, so the same text
	T 30 ./kvchat generate -m "$m" --device cuda -n 16 -p hello >"$OUT/graph-$arch.log" 2>&1
	if cmp -s "$OUT/sync-$arch.log" "$OUT/graph-$arch.log"; then
		g="${g:-}$arch same, "
	else
		g="${g:-}$arch DIFFERS, "
	fi
done
add "KVCHAT_CUDA_SYNC=1 generate: $s[$(elapsed)]"
# a q8_0 cache and device sampling: synchronised, then as a graph; the same text
for arch in llama gemma3 phi3; do
	m=/tmp/kvchat-sync-$arch.gguf
	for opt in "--kv-type q8_0" "--temp 0.8 --seed 7" "--kv-type q8_0 --temp 0.8 --seed 7 --top-k 100"; do
		tag="$arch $(echo $opt | tr -d -- '-' | tr ' ' _)"
		KVCHAT_CUDA_SYNC=1 T 30 ./kvchat generate -m "$m" --device cuda -n 16 -p hello $opt \
		    >"$OUT/q8s-$arch.log" 2>&1 || q="${q:-}$tag FAILED ($(tail -1 "$OUT/q8s-$arch.log")), "
		T 30 ./kvchat generate -m "$m" --device cuda -n 16 -p hello $opt >"$OUT/q8g-$arch.log" 2>&1
		cmp -s "$OUT/q8s-$arch.log" "$OUT/q8g-$arch.log" && q="${q:-}$tag same, " || q="${q:-}$tag DIFFERS, "
	done
done
add "q8_0 cache / device sampling, sync vs graph: $q[$(elapsed)]"
for t in test_cuda_sample test_cuda_kvq8; do
	T 30 ./tests/unit/$t >"$OUT/$t.log" 2>&1
	add "$t (CPU): rc=$?, $(tail -1 "$OUT/$t.log")"
done
add "graph vs kernel by kernel (text of 16 greedy tokens): $g[$(elapsed)]"

# 4. memcheck and racecheck (slow: short runs, bounded)
if command -v compute-sanitizer >/dev/null 2>&1; then
	m=/tmp/kvchat-sync-qwen2.gguf
	T 90 compute-sanitizer --tool memcheck --leak-check no ./kvchat generate -m "$m" --device cuda \
	    -n 8 -p "hello there" >"$OUT/memcheck.log" 2>&1
	add "memcheck: rc=$?, $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) [$(elapsed)]"
	T 90 compute-sanitizer --tool racecheck ./kvchat generate -m "$m" --device cuda \
	    -n 4 -p "hello there" >"$OUT/racecheck.log" 2>&1
	add "racecheck: rc=$?, $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1) [$(elapsed)]"
else
	add "memcheck/racecheck: compute-sanitizer not present"
fi
rm -f /tmp/kvchat-sync-*.gguf

# 5. ceilings
copy=0 gemm=0
if T 60 ./bench/gpu/ceilings >"$OUT/ceilings.log" 2>&1; then
	copy=$(awk '$1 == "copy_GBps" { print $2 }' "$OUT/ceilings.log")
	gemm=$(awk '$1 == "gemm_bf16_TFLOPs" { print $2 }' "$OUT/ceilings.log")
	add "ceilings: $(head -1 "$OUT/ceilings.log"); copy $copy GB/s; bf16 GEMM $gemm TFLOP/s [$(elapsed)]"
else
	add "ceilings: FAILED ($(tail -1 "$OUT/ceilings.log"))"
fi

# 6. speed at real shapes. Matrix FLOPs per token of the layers (the output
# matrix runs for the last token only): 2 * L * (E*qd + 2*E*kvd + qd*E + 3*E*F);
# attention over a P-token prefill adds 2 * L * 2 * qd * P^2 / 2 in total.
shape() {
	case $1 in
	qwen2.5-7b) echo "28 3584 3584 512 18944" ;;
	llama3.1-8b) echo "32 4096 4096 1024 14336" ;;
	esac
}
add "preset        type   decode tok/s   GB/s  %copy | prefill512 tok/s  prefill2048 tok/s  TFLOP/s  %gemm"
for type in q4_k q8_0 f16; do
	for preset in qwen2.5-7b llama3.1-8b; do
		m=/tmp/kvchat-$preset-$type.gguf
		log=$OUT/bench-$preset-$type.log
		if ! T 120 ./tests/fixtures/mkmodel -o "$m" --preset "$preset" --type "$type" --threads "$NPROC" \
		    --quiet >"$OUT/mkmodel-$preset-$type.log" 2>&1; then
			add "mkmodel $preset $type: FAILED"
			rm -f "$m"
			continue
		fi
		T 100 ./kvchat bench -m "$m" --device cuda -p 512 -n 128 -r 3 >"$log" 2>&1 ||
			add "bench $preset $type: FAILED ($(tail -1 "$log"))"
		T 60 ./kvchat bench -m "$m" --device cuda -p 2048 -n 0 -r 2 >"$log.2048" 2>&1 ||
			add "bench $preset $type p2048: FAILED ($(tail -1 "$log.2048"))"
		if [ "$preset-$type" = qwen2.5-7b-q4_k ]; then
			KVCHAT_CUDA_GRAPH=0 T 60 ./kvchat bench -m "$m" --device cuda -p 0 -n 128 -r 3 \
			    >"$log.nograph" 2>&1
			ng=$(awk -F'|' '$2 ~ /decode/ { gsub(/ /, "", $4); print $4 }' "$log.nograph")
			# TTFT of a 50-token turn after 0, 4k and 16k tokens of history
			tt=
			for d in 0 4096 16384; do
				T 60 ./kvchat bench -m "$m" --device cuda -d $d -p 50 -n 0 -r 3 >"$log.d$d" 2>&1
				p50=$(awk -F'|' '$2 ~ /prefill/ { gsub(/ /, "", $4); print $4 }' "$log.d$d")
				tt="$tt $(awk -v p="${p50:-0}" 'BEGIN { printf "%s", p > 0 ? sprintf("%.1f ms", 50000 / p) : "?" }') after $d,"
			done
			add "TTFT (50-token turn), qwen2.5-7b q4_k:$tt [$(elapsed)]"
			# forward_multi: 8 greedy requests decoded together, against one at a time
			i=0
			: >"$OUT/batch-in.jsonl"
			while [ $i -lt 8 ]; do
				printf '{"prompt": "Request %d: %s", "max_tokens": 32, "temperature": 0}\n' $i \
				    "$(seq 1 $((5 + i * 4)) | tr '\n' ' ')" >>"$OUT/batch-in.jsonl"
				i=$((i + 1))
			done
			bt=
			for b in 1 8; do
				T 60 ./kvchat batch -m "$m" --device cuda -f "$OUT/batch-in.jsonl" --parallel $b --quiet \
				    >"$OUT/batch-out$b" 2>"$OUT/batch-err$b"
				bt="$bt B=$b: $(sed -n 's/.*decode \([0-9.]*\) tok\/s aggregate.*/\1/p' "$OUT/batch-err$b") tok/s,"
			done
			nd=$(diff "$OUT/batch-out1" "$OUT/batch-out8" | grep -c '^<')
			add "kvchat batch, qwen2.5-7b q4_k, 8 x 32 tokens, decode aggregate:$bt output lines differing from B=1: $nd of 8 (float rounding may flip a near tie) [$(elapsed)]"
		fi
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
		add "$row [$(elapsed)]"
	done
done
add "decode without graphs (KVCHAT_CUDA_GRAPH=0), qwen2.5-7b q4_k: ${ng:-?} tok/s [$(elapsed)]"
