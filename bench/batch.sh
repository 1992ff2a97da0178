#!/bin/sh
# bench/batch.sh (issue 14, "Batch: aggregate decode tok/s at B = 1, 2, 4,
# 8, 16"): kvchat batch on the same prompts at each --parallel B, greedy,
# every request capped at the same length; prints, per B, the aggregate
# decode rate (tokens the decode passes appended / their time) and the
# overall rate (generated tokens / wall time), medians over the rounds
# (rounds alternate the B values: 1 2 4 8 16 1 2 4 ...), and checks that
# every B gave the same output lines as B = 1 (the outputs must not depend
# on the batch).
#
#   bench/batch.sh MODEL [BUILDDIR]   (BUILDDIR default: the current directory)
#   env: BATCH_PROMPTS (default 16), BATCH_GEN (tokens each, default 64),
#        BATCH_SIZES (default "1 2 4 8 16"), BATCH_ROUNDS (default 3),
#        BATCH_THREADS (default: the cores), BATCH_KV (cache type, default f16)
set -u
usage() { echo "usage: bench/batch.sh MODEL [BUILDDIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
MODEL=$1
[ -f "$MODEL" ] || { echo "batch.sh: no model at $MODEL" >&2; exit 2; }
B=$(cd "${2:-.}" && pwd) || usage
KVCHAT=${KVCHAT:-$B/kvchat}
N=${BATCH_PROMPTS:-16}
GEN=${BATCH_GEN:-64}
SIZES=${BATCH_SIZES:-1 2 4 8 16}
ROUNDS=${BATCH_ROUNDS:-3}
THREADS=${BATCH_THREADS:-0}
KV=${BATCH_KV:-f16}
T=$(mktemp -d "${TMPDIR:-/tmp}/kvchat-batch.XXXXXX")
trap 'rm -rf "$T"' EXIT

# N prompts of different lengths (5 to 40 words), all capped at GEN tokens
# (a greedy request on a random-weight fixture rarely meets its end token).
i=0
while [ $i -lt "$N" ]; do
	w=$((5 + (i * 7) % 36))
	words=$(seq 1 $w | sed "s/.*/word$i-&/" | tr '\n' ' ')
	printf '{"prompt": "Request %d: %s", "max_tokens": %d, "temperature": 0}\n' "$i" "$words" "$GEN"
	i=$((i + 1))
done >"$T/in.jsonl"

echo "model: $MODEL; $N prompts, $GEN tokens each, greedy; threads ${THREADS:-0} (0 = cores), $KV cache"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
r=1
while [ $r -le "$ROUNDS" ]; do
	for b in $SIZES; do
		"$KVCHAT" batch -m "$MODEL" -f "$T/in.jsonl" --parallel "$b" --threads "$THREADS" \
		    --kv-type "$KV" --quiet >"$T/out$b" 2>"$T/err" || { cat "$T/err" >&2; exit 1; }
		sed -n 's/.*decode \([0-9.]*\) tok\/s aggregate.*/\1/p' "$T/err" >>"$T/dec$b"
		sed -n 's/.*, \([0-9.]*\) generated tok\/s overall.*/\1/p' "$T/err" >>"$T/all$b"
		if ! cmp -s "$T/out$b" "$T/out1"; then
			echo "batch.sh: --parallel $b gave other output lines than --parallel 1" >&2
			exit 1
		fi
	done
	r=$((r + 1))
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
med() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
base=$(med "$T/dec1")
printf '%4s  %22s  %8s  %24s\n' B "decode tok/s aggregate" "vs B=1" "generated tok/s overall"
for b in $SIZES; do
	d=$(med "$T/dec$b")
	printf '%4s  %22s  %8s  %24s\n' "$b" "$d" "$(echo "$d $base" | awk '{ printf "%.2fx", $1 / $2 }')" \
	    "$(med "$T/all$b")"
done
echo "outputs: identical at every B"
