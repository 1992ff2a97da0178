#!/bin/sh
# test_scoring.sh (issue 12): kvchat generate --prompt-ids, --logprobs K,
# --json and --force on fixtures.
#  - teacher-forced log-probs (and each step's top id) equal the float64
#    reference's over the same ids (tests/fixtures/refppl score; F32 weights
#    and cache: logits agree to ~1e-7 relative, log-probs asserted to 1e-4);
#  - unforced, --temp 0 steps are generate --ids' greedy ids, each step's id
#    is its top-1, its log-prob the first of the top list, the top list
#    sorted and K long;
#  - --prompt-ids takes ids as they are (no BOS added): the ids of -p's
#    prompt (BOS included) give the same continuation;
#  - a forced id outside the vocabulary is refused.
. "$top_srcdir/tests/e2e/lib.sh"
REFPPL="$top_builddir/tests/fixtures/refppl"
[ -x "$MKMODEL" ] && [ -x "$REFPPL" ] || { echo "FAIL: mkmodel/refppl not built"; exit 1; }

M="$TMPD/g.gguf"
"$MKMODEL" -o "$M" --arch gemma3 --type f32 --quiet --seed 3 --swa 4 || { echo "FAIL: mkmodel"; exit 1; }
P="the quick brown fox jumps over"
pids=$(printf '%s' "$P" | "$KVCHAT" tokenize -m "$M" --bos)
pids=$(echo $pids)	# one line
np=$(echo "$pids" | wc -w)
force="10 200 33 4 150 77 9 300"

# Teacher forcing against the reference.
"$KVCHAT" generate -m "$M" --prompt-ids "$(echo "$pids" | tr ' ' ,)" --force "$(echo "$force" | tr ' ' ,)" \
    --logprobs 5 --json --kv-type f32 --threads 2 >"$TMPD/f.json" 2>"$TMPD/err" ||
	{ fail "forced run"; cat "$TMPD/err" >&2; }
echo "$pids $force" | "$REFPPL" "$M" score "$np" >"$TMPD/ref.txt" || fail "refppl score"
python3 - "$TMPD/f.json" "$TMPD/ref.txt" "$force" <<'PY' || fail "forced log-probs differ from the reference"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
ref = [l.split() for l in open(sys.argv[2])]
force = [int(x) for x in sys.argv[3].split()]
assert len(steps) == len(force) == len(ref), (len(steps), len(force), len(ref))
for s, r, f in zip(steps, ref, force):
    print(s["step"], s["id"], s["logprob"], r)
    assert s["id"] == f and int(r[0]) == s["step"]
    assert abs(s["logprob"] - float(r[1])) <= 1e-4, (s, r)
    assert s["top"][0][0] == int(r[2]), (s, r)
    assert len(s["top"]) == 5
PY
ok

# Greedy scoring equals greedy generation.
ids=$("$KVCHAT" generate -m "$M" -p "$P" -n 8 --temp 0 --ids --threads 2 2>/dev/null)
"$KVCHAT" generate -m "$M" -p "$P" -n 8 --temp 0 --logprobs 4 --json --threads 2 >"$TMPD/g.json" 2>"$TMPD/err" ||
	{ fail "greedy --json"; cat "$TMPD/err" >&2; }
python3 - "$TMPD/g.json" "$ids" <<'PY' || fail "greedy --json steps are not generate's ids"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
ids = [int(x) for x in sys.argv[2].split()]
assert [s["id"] for s in steps] == ids, ([s["id"] for s in steps], ids)
for i, s in enumerate(steps):
    assert s["step"] == i and len(s["top"]) == 4
    assert s["top"][0][0] == s["id"] and s["top"][0][1] == s["logprob"]
    lps = [t[1] for t in s["top"]]
    assert lps == sorted(lps, reverse=True) and lps[0] <= 0
PY
ok

# --prompt-ids: the same ids as -p's tokenization continue the same way.
ids2=$("$KVCHAT" generate -m "$M" --prompt-ids "$(echo "$pids" | tr ' ' ,)" -n 8 --temp 0 --logprobs 1 --json \
    --threads 2 2>/dev/null | sed 's/.*"id":\([0-9]*\),.*/\1/' | tr '\n' ' ')
check "--prompt-ids continues as -p ($ids2 / $ids)" [ "$(echo $ids2)" = "$(echo $ids)" ]

# Without --json: the text, then one line per step.
"$KVCHAT" generate -m "$M" -p "$P" -n 3 --temp 0 --logprobs 2 --threads 2 >"$TMPD/t.txt" 2>/dev/null
check "text mode: three step lines" [ "$(grep -c '^\[[0-9]\] ' "$TMPD/t.txt")" -eq 3 ]

"$KVCHAT" generate -m "$M" -p "$P" --force 5,999999 --logprobs 1 >/dev/null 2>"$TMPD/err"
check "out-of-vocabulary forced id refused" [ $? -ne 0 ]
check "  ... with a message" grep -q "outside the vocabulary" "$TMPD/err"
"$KVCHAT" generate -m "$M" -p "$P" --prompt-ids 1,2 >/dev/null 2>"$TMPD/err"
check "-p with --prompt-ids is a usage error" [ $? -eq 2 ]
# Issue 26 (reliability 5): an empty entry or a sign is refused, not read
# as ids; commas or spaces with padding still work.
for bad in "1,,2" "-0" "+1" "1," ",1" "1;2" "" " "; do
	"$KVCHAT" generate -m "$M" --prompt-ids "$bad" -n 1 >/dev/null 2>"$TMPD/err"
	check "--prompt-ids '$bad' is a usage error" [ $? -eq 2 ]
done
for good in "1,2" "1, 2" "1 2" " 1 ,2 "; do
	"$KVCHAT" generate -m "$M" --prompt-ids "$good" -n 1 --temp 0 >/dev/null 2>"$TMPD/err"
	check "--prompt-ids '$good' runs" [ $? -eq 0 ]
done
done_testing
