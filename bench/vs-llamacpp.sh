#!/bin/sh
# bench/vs-llamacpp.sh LLAMA_BENCH MODEL...: kvchat against llama.cpp on the
# same GGUF files and thread counts (issue 11). For each model and thread
# count it runs, alternately (A B A B ...), VS_ROUNDS times each:
#   kvchat bench -m MODEL -p P -n 0 -r REPS --threads T   (prefill)
#   kvchat bench -m MODEL -p 0 -n N -r REPS --threads T   (decode)
#   LLAMA_BENCH -m MODEL -fa 0,1 -p P -n N -r REPS -t T
# Decode is measured from an empty cache on both sides, as llama-bench's tgN
# is (one kvchat run -p P -n N would decode after the P-token prefill, each
# step attending over P more positions than llama.cpp's).
# and prints one table row with the median of the rounds: prefill (ppP) and
# decode (tgN) tokens/s of both, and their ratios kvchat / llama.cpp.
# llama.cpp is measured in its best configuration: each round runs it with
# flash attention off and on (VS_FA) and keeps the faster of the two for
# each test; its weight repacking stays at its default (on). kvchat runs the
# kernel table it picks, or the one KVCHAT_KERNELS names (avx2 against an
# AVX2-only llama.cpp build); the last column names the table it ran.
# (kvchat bench reports the median of its REPS runs, llama-bench the mean.)
# llama.cpp is not part of kvchat: pass the path of a llama-bench you built.
#
#   env: KVCHAT (default: kvchat on PATH), VS_THREADS (default "1 2"),
#        VS_ROUNDS (default 2), VS_P (512), VS_N (128), VS_REPS (3),
#        VS_FA (llama-bench's -fa values, default "0,1": the faster is kept),
#        VS_LOG (keep every raw output there),
#        KVCHAT_BASE (a second kvchat, e.g. a build from before a change:
#        run in the same alternation, A B C A B C, and shown as "base" columns),
#        VS_PEER_ALT (settings of the peer to try, separated by ";": each
#        round runs LLAMA_BENCH once per setting and keeps the fastest row,
#        for a peer whose best configuration is not its default, e.g.
#        ik_llama.cpp's weight repacking: VS_PEER_ALT="-rtr 0;-rtr 1")
#
# The machine should be otherwise idle; on a shared one the alternation and
# medians only temper the noise: say so with the figures.
set -u
usage() { echo "usage: LLAMA_BENCH MODEL... (see the first lines of $0)" >&2; exit 2; }
[ $# -ge 2 ] || usage
LB=$1
shift
KVCHAT=${KVCHAT:-kvchat}
THREADS=${VS_THREADS:-1 2}
ROUNDS=${VS_ROUNDS:-2}
P=${VS_P:-512}
N=${VS_N:-128}
REPS=${VS_REPS:-3}
FA=${VS_FA:-0,1}
PEER_ALT=${VS_PEER_ALT:-}
command -v "$KVCHAT" >/dev/null 2>&1 || { echo "vs-llamacpp.sh: no kvchat at '$KVCHAT' (set KVCHAT)" >&2; exit 2; }
command -v "$LB" >/dev/null 2>&1 || { echo "vs-llamacpp.sh: no llama-bench at '$LB'" >&2; exit 2; }
for m in "$@"; do
	[ -r "$m" ] || { echo "vs-llamacpp.sh: cannot read $m" >&2; exit 2; }
done
D=$(mktemp -d "${TMPDIR:-/tmp}/kvchat-vs.XXXXXX")
trap 'rm -rf "$D"' EXIT
LOG=${VS_LOG:-$D}
mkdir -p "$LOG"

# kv FILE: "prefill decode" tok/s from kvchat bench's tables (the prefill of
# the first run, the decode of the last), or "fail fail"
kv() {
	awk -F'|' '$2 ~ /prefill/ && p == "" { gsub(/ /, "", $4); p = $4 }
		$2 ~ /decode/ { gsub(/ /, "", $4); d = $4 }
		END { print (p == "" ? "fail" : p), (d == "" ? "fail" : d) }' "$1"
}
# lb FILE: "pp tg" tok/s from llama-bench's markdown table (the mean before
# the ±; of several rows for one test, e.g. -fa 0 and 1, the fastest)
lb() {
	awk -F'|' -v pp="pp$P" -v tg="tg$N" '
		NF >= 3 { t = $(NF - 2); gsub(/ /, "", t); v = $(NF - 1); sub(/^ */, "", v); sub(/ .*/, "", v)
			if (t == pp && (p == "" || v + 0 > p + 0)) p = v
			if (t == tg && (d == "" || v + 0 > d + 0)) d = v }
		END { print (p == "" ? "fail" : p), (d == "" ? "fail" : d) }' "$1"
}
# median of the numbers on stdin ("fail" when there are none)
median() {
	grep -v fail | sort -g | awk '{ a[NR] = $1 } END {
		if (NR == 0) print "fail"; else if (NR % 2) print a[(NR + 1) / 2];
		else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "fail" || b == "fail" || b == 0) print "-"; else printf "%.2fx\n", a / b }'; }

BASE=${KVCHAT_BASE:-}
if [ -n "$BASE" ]; then
	command -v "$BASE" >/dev/null 2>&1 || { echo "vs-llamacpp.sh: no kvchat at '$BASE' (KVCHAT_BASE)" >&2; exit 2; }
	echo "| model | threads | prefill pp$P base | kvchat | llama.cpp | base ratio | ratio | decode tg$N base | kvchat | llama.cpp | base ratio | ratio | kernels |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
else
	echo "| model | threads | prefill pp$P kvchat | llama.cpp | ratio | decode tg$N kvchat | llama.cpp | ratio | kernels |"
	echo "|---|---|---|---|---|---|---|---|---|"
fi
i=0
for m in "$@"; do
	for t in $THREADS; do
		: > "$D/kv.txt"
		: > "$D/lb.txt"
		: > "$D/base.txt"
		r=1
		while [ "$r" -le "$ROUNDS" ]; do
			i=$((i + 1))
			"$KVCHAT" bench -m "$m" -p "$P" -n 0 -r "$REPS" --threads "$t" > "$LOG/$i-kvchat.txt" 2>&1
			"$KVCHAT" bench -m "$m" -p 0 -n "$N" -r "$REPS" --threads "$t" >> "$LOG/$i-kvchat.txt" 2>&1
			kv "$LOG/$i-kvchat.txt" >> "$D/kv.txt"
			if [ -z "$PEER_ALT" ]; then
				"$LB" -m "$m" -fa "$FA" -p "$P" -n "$N" -r "$REPS" -t "$t" -o md > "$LOG/$i-llama.txt" 2>&1
			else
				: > "$LOG/$i-llama.txt"
				# one run per setting, word-split on purpose ("-rtr 1")
				printf '%s\n' "$PEER_ALT" | tr ';' '\n' | while IFS= read -r alt; do
					# shellcheck disable=SC2086
					"$LB" -m "$m" -fa "$FA" -p "$P" -n "$N" -r "$REPS" -t "$t" -o md $alt >> "$LOG/$i-llama.txt" 2>&1
				done
			fi
			lb "$LOG/$i-llama.txt" >> "$D/lb.txt"
			if [ -n "$BASE" ]; then
				"$BASE" bench -m "$m" -p "$P" -n 0 -r "$REPS" --threads "$t" > "$LOG/$i-base.txt" 2>&1
				"$BASE" bench -m "$m" -p 0 -n "$N" -r "$REPS" --threads "$t" >> "$LOG/$i-base.txt" 2>&1
				kv "$LOG/$i-base.txt" >> "$D/base.txt"
			fi
			r=$((r + 1))
		done
		kp=$(cut -d' ' -f1 < "$D/kv.txt" | median)
		kd=$(cut -d' ' -f2 < "$D/kv.txt" | median)
		lp=$(cut -d' ' -f1 < "$D/lb.txt" | median)
		ld=$(cut -d' ' -f2 < "$D/lb.txt" | median)
		kt=$(sed -n 's/.*CPU kernels \([a-z0-9]*\).*/\1/p' "$LOG/$i-kvchat.txt" | head -n 1)
		if [ -n "$BASE" ]; then
			bp=$(cut -d' ' -f1 < "$D/base.txt" | median)
			bd=$(cut -d' ' -f2 < "$D/base.txt" | median)
			echo "| $(basename "$m") | $t | $bp | $kp | $lp | $(ratio "$bp" "$lp") | $(ratio "$kp" "$lp") | $bd | $kd | $ld | $(ratio "$bd" "$ld") | $(ratio "$kd" "$ld") | ${kt:--} |"
		else
			echo "| $(basename "$m") | $t | $kp | $lp | $(ratio "$kp" "$lp") | $kd | $ld | $(ratio "$kd" "$ld") | ${kt:--} |"
		fi
	done
done
