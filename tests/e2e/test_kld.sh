#!/bin/sh
# test_kld.sh (issue 12): kvchat perplexity --kl-divergence-base FILE saves
# the log-probabilities of every scored position; with --kl-divergence it
# compares another run against them, as llama-perplexity does.
#  - a model against its own base: KLD 0, same top 100 %, PPL(Q) = PPL(base)
#    = the plain run's PPL;
#  - a Q8_0 fixture against the F32 base of the same weights (and a BF16
#    one): KLD > 0 and equal, within the bound sub_kld.h derives, to
#    tests/fixtures/kldref's computation from the base file and the Q8_0
#    run's own saved rows (kldref shares no code with kvchat);
#  - the BF16 one also against the float64 reference forward of both files
#    (tests/fixtures/refppl kld: exact KL(P || Q), no 16-bit rows); Q8_0
#    cannot be checked that way, kvchat rounds its activations to int8;
#  - a gemma3 fixture (BOS in place of each chunk's first token) against
#    its own base;
#  - another text, -c, vocabulary or BOS handling, a truncated, damaged or
#    foreign file: refused with the reason, exit 1, no crash.
. "$top_srcdir/tests/e2e/lib.sh"
KLDREF="$top_builddir/tests/fixtures/kldref"
REFPPL="$top_builddir/tests/fixtures/refppl"
[ -x "$MKMODEL" ] && [ -x "$KLDREF" ] && [ -x "$REFPPL" ] || { echo "FAIL: mkmodel/kldref/refppl not built"; exit 1; }

i=0
while [ $i -lt 40 ]; do
	echo "Line $i: the quick brown fox jumps over the lazy dog, and then it rests ($((i * 7 % 13)))."
	echo "第${i}行：今天天气很好，我们去公园散步。"
	i=$((i + 1))
done >"$TMPD/text.txt"
for t in f32 q8_0 bf16; do
	"$MKMODEL" -o "$TMPD/$t.gguf" --arch qwen2 --type $t --quiet --seed 5 || { echo "FAIL: mkmodel"; exit 1; }
done
"$MKMODEL" -o "$TMPD/gemma.gguf" --arch gemma3 --type f32 --quiet --seed 5 --swa 8 || { echo "FAIL: mkmodel"; exit 1; }
PPL="perplexity -f $TMPD/text.txt -c 64 --kv-type f32 --threads 2"
B="$TMPD/base.kld"

# 1. the base run prints the plain run's figures and writes the file (0600, exact size)
plain=$("$KVCHAT" $PPL -m "$TMPD/f32.gguf" --chunks 3 2>/dev/null)
kvrun "base run" "$TMPD/err" $PPL -m "$TMPD/f32.gguf" --chunks 3 --kl-divergence-base "$B" >"$TMPD/out"
check "base run prints the plain run's output" [ "$(cat "$TMPD/out")" = "$plain" ]
nv=$("$KVCHAT" info -m "$TMPD/f32.gguf" | sed -n 's/^vocabulary .*, \([0-9]*\) tokens.*/\1/p')
want=$((32 + 4 * 3 * 64 + 8 + 3 * 31 * (24 + 2 * nv)))
check "base file: $want bytes for $nv tokens x 93 rows ($(wc -c <"$B"))" [ "$(wc -c <"$B")" -eq "$want" ]
check "base file is 0600" [ "$(stat -c %a "$B")" = 600 ]
ppl_plain=$(echo "$plain" | sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p')

# field NAME FILE: the first number after "NAME:" in FILE
field() { sed -n "s/^$1 *: *\(-*[0-9.]*\).*/\1/p" "$2" | head -n 1; }
# close A B TOL: |A - B| <= TOL
close() { python3 -c "import sys; a,b,t=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b)<=t else 1)" "$@"; }

# 2. the model against its own base
kvrun "self compare" "$TMPD/err" $PPL -m "$TMPD/f32.gguf" --kl-divergence-base "$B" --kl-divergence >"$TMPD/self"
cat "$TMPD/self"
check "self: three chunk lines" [ "$(grep -c '^ *[123]  ' "$TMPD/self")" -eq 3 ]
check "self: Mean KLD 0" [ "$(field 'Mean    KLD' "$TMPD/self")" = 0.000000 ]
check "self: Maximum KLD 0" [ "$(field 'Maximum KLD' "$TMPD/self")" = 0.000000 ]
check "self: same top 100 %" grep -q '^Same top p: 100.000 ' "$TMPD/self"
check "self: PPL(Q) = the plain PPL" close "$(field 'Mean PPL(Q)' "$TMPD/self")" "$ppl_plain" 0.0001
# the base's NLL is read back to within 2 * delta per position (delta << 1e-3 here)
check "self: PPL(base) = PPL(Q) to 1e-4 relative" close "$(field 'Mean PPL(base)' "$TMPD/self")" "$ppl_plain" \
    "$(python3 -c "print(1e-4 * $ppl_plain)")"

# 3. Q8_0 and BF16 against the F32 base, and against kldref over the saved rows of their own runs
for t in q8_0 bf16; do
	kvrun "$t compare" "$TMPD/err" $PPL -m "$TMPD/$t.gguf" --kl-divergence-base "$B" --kl-divergence >"$TMPD/$t.out"
	kvrun "$t base" "$TMPD/err" $PPL -m "$TMPD/$t.gguf" --chunks 3 --kl-divergence-base "$TMPD/$t.kld" >/dev/null
	ref=$("$KLDREF" "$B" "$TMPD/$t.kld") || { fail "kldref $t"; continue; }
	echo "$t: kldref: $ref"
	grep -E '^(Mean|Same)' "$TMPD/$t.out"
	set -- $ref
	n=$1 rkl=$2 bound=$3 same=$4 amb=$5 nllq=$6 maxdq=$7 nllp=$8
	kl=$(field 'Mean    KLD' "$TMPD/$t.out")
	check "$t: KLD positive ($kl)" python3 -c "import sys; sys.exit(0 if float('$kl') > 1e-6 else 1)"
	# printed to 6 decimals: half a unit of the last digit added to the bound
	check "$t: KLD $kl = kldref's $rkl within $bound" close "$kl" "$rkl" "$(python3 -c "print($bound + 5e-7)")"
	top=$(sed -n 's/^Same top p: *\([0-9.]*\) .*/\1/p' "$TMPD/$t.out")
	kv_same=$(python3 -c "print(round($top * $n / 100))")
	check "$t: same top $kv_same of $n = kldref's $same (+- $amb ambiguous)" close "$kv_same" "$same" "$amb"
	check "$t: PPL(Q) = exp(kldref's NLL of Q) within 2 max delta" close \
	    "$(python3 -c "import math; print(math.log($(field 'Mean PPL(Q)' "$TMPD/$t.out")))")" "$nllq" \
	    "$(python3 -c "print(2 * $maxdq + 1e-6)")"
	check "$t: PPL(base) = exp(kldref's NLL of P)" close \
	    "$(python3 -c "import math; print(math.log($(field 'Mean PPL(base)' "$TMPD/$t.out")))")" "$nllp" 1e-6
done

# 3b. BF16 against the float64 reference: kvchat's float32 logits are within
# ~1e-6 of the reference's (test_forward), which moves a KL divergence by
# about 2e-6 * sum|p - q| ~ 1e-7 here; printed to 6 decimals (5e-7)
ref=$("$KVCHAT" tokenize -m "$TMPD/f32.gguf" <"$TMPD/text.txt" | "$REFPPL" "$TMPD/f32.gguf" kld 64 3 -1 "$TMPD/bf16.gguf") ||
    fail "refppl kld"
set -- $ref
kl=$(field 'Mean    KLD' "$TMPD/bf16.out")
echo "bf16: kvchat $kl, float64 reference $1 (bound $2)"
check "bf16: KLD $kl = the float64 reference's $1 within $2 + 6e-7" close "$kl" "$1" "$(python3 -c "print($2 + 6e-7)")"

# 3c. a BOS model against its own base
kvrun "gemma base" "$TMPD/err" $PPL -m "$TMPD/gemma.gguf" --chunks 2 --kl-divergence-base "$TMPD/g.kld" >/dev/null
kvrun "gemma self" "$TMPD/err" $PPL -m "$TMPD/gemma.gguf" --kl-divergence-base "$TMPD/g.kld" --kl-divergence >"$TMPD/gself"
check "gemma self: Mean KLD 0" [ "$(field 'Mean    KLD' "$TMPD/gself")" = 0.000000 ]
check "gemma self: same top 100 %" grep -q '^Same top p: 100.000 ' "$TMPD/gself"
check "gemma self: two chunks" [ "$(grep -c '^ *[12]  ' "$TMPD/gself")" -eq 2 ]

# 4. refusals: exit 1, the reason, no crash
refused() {
	_d=$1 _w=$2; shift 2
	"$KVCHAT" "$@" >/dev/null 2>"$TMPD/err"
	_rc=$?
	check "$_d: exit 1 ($_rc)" [ $_rc -eq 1 ]
	check "$_d: says '$_w'" grep -q "$_w" "$TMPD/err"
	[ $_rc -eq 1 ] || cat "$TMPD/err" >&2
}
sed 's/fox/cat/' "$TMPD/text.txt" >"$TMPD/other.txt"
refused "another text" "another text or tokenization" perplexity -f "$TMPD/other.txt" -c 64 --threads 2 \
    -m "$TMPD/f32.gguf" --kl-divergence-base "$B" --kl-divergence
refused "another -c" "made with -c 64" perplexity -f "$TMPD/text.txt" -c 32 --threads 2 \
    -m "$TMPD/f32.gguf" --kl-divergence-base "$B" --kl-divergence
refused "more chunks" "holds 3 chunks" $PPL -m "$TMPD/f32.gguf" --chunks 4 --kl-divergence-base "$B" --kl-divergence
refused "another vocabulary" "vocabulary of $nv tokens" $PPL -m "$TMPD/gemma.gguf" --kl-divergence-base "$B" \
    --kl-divergence
head -c $((want - 1000)) "$B" >"$TMPD/short.kld"
refused "truncated" "truncated" $PPL -m "$TMPD/f32.gguf" --kl-divergence-base "$TMPD/short.kld" --kl-divergence
head -c 20 "$B" >"$TMPD/tiny.kld"
refused "truncated header" "truncated" $PPL -m "$TMPD/f32.gguf" --kl-divergence-base "$TMPD/tiny.kld" --kl-divergence
# one byte of the last row changed
cp "$B" "$TMPD/bad.kld"
printf '\377' | dd of="$TMPD/bad.kld" bs=1 seek=$((want - 7)) conv=notrunc 2>/dev/null
refused "damaged row" "corrupt: row 92" $PPL -m "$TMPD/f32.gguf" --kl-divergence-base "$TMPD/bad.kld" --kl-divergence
cp "$B" "$TMPD/bad2.kld"
printf '\001' | dd of="$TMPD/bad2.kld" bs=1 seek=40 conv=notrunc 2>/dev/null
refused "damaged tokens" "fails its check" $PPL -m "$TMPD/f32.gguf" --kl-divergence-base "$TMPD/bad2.kld" --kl-divergence
refused "not a base file" "not a kvchat KL-divergence base" $PPL -m "$TMPD/f32.gguf" \
    --kl-divergence-base "$TMPD/text.txt" --kl-divergence
refused "no base file" "cannot open the base" $PPL -m "$TMPD/f32.gguf" --kl-divergence-base "$TMPD/none" --kl-divergence
"$KVCHAT" $PPL -m "$TMPD/f32.gguf" --kl-divergence >/dev/null 2>"$TMPD/err"
check "--kl-divergence alone: usage error ($?)" grep -q "needs --kl-divergence-base" "$TMPD/err"

# 5. a failed save leaves no file; an unwritable folder is said
mkdir "$TMPD/ro" && chmod 500 "$TMPD/ro"
if [ "$(id -u)" != 0 ]; then
	refused "unwritable folder" "$TMPD/ro" $PPL -m "$TMPD/f32.gguf" --kl-divergence-base "$TMPD/ro/b.kld"
fi
refused "short text, no file left" "at least 128" perplexity -f "$TMPD/tiny.kld" -c 64 -m "$TMPD/f32.gguf" \
    --kl-divergence-base "$TMPD/never.kld"
check "no file left by a failed run" [ ! -e "$TMPD/never.kld" ]
done_testing
