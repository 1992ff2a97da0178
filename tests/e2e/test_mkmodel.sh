#!/bin/sh
# test_mkmodel: the fixture generator writes a valid model for every
# architecture x weight type, deterministically for a seed, with the
# vocabulary padded to --n-vocab and K-quant fallbacks for odd widths.
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }

info() { "$KVCHAT" info -m "$1" 2>&1; }

for arch in llama qwen2 qwen3; do
	for type in f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q3_k q4_k q5_k q6_k q4_k_m; do
		m="$TMPD/$arch-$type.gguf"
		check "mkmodel $arch $type" "$MKMODEL" -o "$m" --arch "$arch" --type "$type" --quiet
		out=$(info "$m")
		check "$arch $type: kvchat info reads it" [ $? -eq 0 ]
		case $out in *"$arch"*) ok ;; *) fail "$arch $type: info does not name $arch: $out" ;; esac
	done
done

# The later formats (quant_iq.c): each makes a model that kvchat reads,
# names the type of, and generates from.
for type in q2_k iq4_nl iq4_xs mxfp4 iq3_xxs iq3_s iq2_xxs iq2_xs iq2_s iq1_s iq1_m; do
	m="$TMPD/qwen2-$type.gguf"
	check "mkmodel qwen2 $type" "$MKMODEL" -o "$m" --arch qwen2 --type "$type" --quiet
	want=$(echo "$type" | tr a-z A-Z)
	out=$(info "$m")
	case $out in *"$want"*) ok ;; *) fail "$type: info does not name $want: $out" ;; esac
	check "$type model generates" sh -c \
	    "'$KVCHAT' generate -m '$m' --device cpu -n 4 --temp 0 -p hello >/dev/null 2>'$TMPD/err'"
done

# gpt-oss as llama-quantize's MXFP4_MOE leaves it: MXFP4 experts, Q8_0 for
# the rest, F32 sinks and biases; it carries YaRN and runs.
m="$TMPD/gpt-oss.gguf"
check "mkmodel gpt-oss mxfp4_moe" "$MKMODEL" -o "$m" --arch gpt-oss --type mxfp4_moe --quiet
out=$(info "$m")
case $out in *"F32 x25 Q8_0 x10 MXFP4 x6"*) ok ;; *) fail "gpt-oss mxfp4_moe: not its type mix: $out" ;; esac
check "gpt-oss has YaRN" grep -qa 'gpt-oss.rope.scaling.type' "$m"
check "gpt-oss mxfp4_moe generates" sh -c \
    "'$KVCHAT' generate -m '$m' --device cpu -n 4 --temp 0 -p hello >/dev/null 2>'$TMPD/err'"
check "--yarn on gpt2 refused" sh -c "! '$MKMODEL' -o '$TMPD/x.gguf' --arch gpt2 --yarn 4 2>/dev/null"

# q4_k_m: Q6_K for ffn_down and output (untied llama)
out=$(info "$TMPD/llama-q4_k_m.gguf")
case $out in *Q6_K*) ok ;; *) fail "q4_k_m has no Q6_K tensors: $out" ;; esac

# Same seed, same bytes, whatever the thread count; another seed differs.
"$MKMODEL" -o "$TMPD/a.gguf" --arch qwen3 --type q4_k --seed 7 --threads 1 --quiet
"$MKMODEL" -o "$TMPD/b.gguf" --arch qwen3 --type q4_k --seed 7 --threads 3 --quiet
"$MKMODEL" -o "$TMPD/c.gguf" --arch qwen3 --type q4_k --seed 8 --quiet
check "deterministic for a seed" cmp -s "$TMPD/a.gguf" "$TMPD/b.gguf"
check "seed changes the weights" sh -c "! cmp -s '$TMPD/a.gguf' '$TMPD/c.gguf'"

# SPM vocabulary, padded to a requested size.
"$MKMODEL" -o "$TMPD/spm.gguf" --arch llama --vocab spm --n-vocab 1000 --quiet
out=$(info "$TMPD/spm.gguf")
case $out in *llama*1000*) ok ;; *) fail "spm vocab not padded to 1000: $out" ;; esac

# A width no K-quant block divides falls back as llama.cpp does (Q4_K ->
# Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0, the 256-value IQ
# types -> IQ4_NL) with a note, and the model runs.
for tf in q4_k:Q5_0:Q4_K q5_k:Q5_1:Q5_K q6_k:Q8_0:Q6_K q3_k:Q4_0:Q3_K q2_k:Q4_0:Q2_K \
    iq4_xs:IQ4_NL:IQ4_XS iq2_xxs:IQ4_NL:IQ2_XXS; do
	t=${tf%%:*}; fb=${tf#*:}; fb=${fb%%:*}; orig=${tf##*:}
	note=$("$MKMODEL" -o "$TMPD/odd-$t.gguf" --arch llama --type "$t" --n-embd 384 --n-head 6 --n-ff 512 2>&1)
	case $note in *"$fb instead of $orig"*) ok ;; *) fail "$t: no $fb fallback note: $note" ;; esac
	check "odd width $t model generates" sh -c \
	    "'$KVCHAT' generate -m '$TMPD/odd-$t.gguf' --device cpu -n 4 --temp 0 -p hello >/dev/null 2>'$TMPD/err'"
done

# Bad options are refused.
check "unknown type refused" sh -c "! '$MKMODEL' -o '$TMPD/x.gguf' --type tq1_0 2>/dev/null"
check "vocab smaller than the fixture refused" sh -c "! '$MKMODEL' -o '$TMPD/x.gguf' --n-vocab 10 2>/dev/null"

done_testing
