#!/bin/sh
# test_cuda_module.sh (issue 25): kvchat links no CUDA library and loads the
# CUDA backend as a module (kvchat-cuda.so) only when --device auto|cuda
# wants it. Without a GPU: ldd lists no CUDA library; kvchat starts and
# generates with the module missing (auto silent, --device cuda a clear
# error); --version names the backends; a stand-in module
# (tests/unit/fake-cuda.so) checks the loader's refusals and auto's
# fallback to the CPU with a one-line notice, also for what the GPU lacks
# (experts, IQ4_NL, MXFP4 weights), named by the real module's model check
# that the stand-in runs. With the real module built:
# it needs nothing of the program beyond cuda/host.syms, and it carries
# machine code for the architectures configure was given.
. "$top_srcdir/tests/e2e/lib.sh"
FAKE="$top_builddir/tests/unit/fake-cuda.so"
MOD="$top_builddir/kvchat-cuda.so"
tiny_model 3 512
# generate's stderr, less its statistics line ("kvchat: cpu, F16 cache: ...")
notices() { grep -v '^kvchat: [a-z]*, [A-Z0-9_]* cache: ' "$1"; }

# 1. the program itself maps no CUDA library
if command -v ldd >/dev/null 2>&1; then
	ldd "$KVCHAT" >"$TMPD/ldd" 2>&1
	check "ldd runs" [ -s "$TMPD/ldd" ]
	if grep -Eq 'libcuda|libcublas|libcudart|libnvrtc' "$TMPD/ldd"; then
		fail "kvchat links a CUDA library:"; cat "$TMPD/ldd" >&2
	else
		ok
	fi
fi

# 2. the module missing: auto runs on the CPU without a word, cuda refuses
export KVCHAT_CUDA_MODULE=/nonexistent/kvchat-cuda.so
kvrun "generate, module missing" "$TMPD/err" generate -m "$M" -n 4 --temp 0 -p hi >"$TMPD/out"
check "auto is silent when the module is missing" [ -z "$(notices "$TMPD/err")" ]
"$KVCHAT" generate -m "$M" -n 4 -p hi --device cuda >"$TMPD/out" 2>"$TMPD/err"
check "--device cuda without the module fails" [ $? -ne 0 ]
check "... saying where it looked" grep -q "no CUDA module at /nonexistent/kvchat-cuda.so" "$TMPD/err"
kvrun "--version, module missing" "$TMPD/err" --version >"$TMPD/ver"
check "--version names the backends" grep -q "^backends: cpu" "$TMPD/ver"
check "--version says why CUDA is not there" grep -q "^cuda: no CUDA module at /nonexistent" "$TMPD/ver"

# 3. the loader against a stand-in module
if [ -f "$FAKE" ]; then
	export KVCHAT_CUDA_MODULE="$FAKE"
	FAKE_CUDA=initfail kvrun "auto, init fails" "$TMPD/err" generate -m "$M" -n 4 --temp 0 -p hi \
	    >"$TMPD/out"
	check "auto falls back with one notice" [ "$(notices "$TMPD/err" | grep -c .)" -eq 1 ]
	check "... saying why and where it runs" \
	    grep -q "^kvchat: cuda: cannot allocate 4096.0 MiB for weights (fake module); running on the CPU$" "$TMPD/err"
	FAKE_CUDA=initfail "$KVCHAT" generate -m "$M" -n 4 -p hi --device cuda >"$TMPD/out" 2>"$TMPD/err"
	check "--device cuda does not fall back" [ $? -ne 0 ]
	check "... and says why" grep -q "cannot allocate 4096.0 MiB" "$TMPD/err"
	FAKE_CUDA=nodevice kvrun "auto, no device" "$TMPD/err" generate -m "$M" -n 4 -p hi >"$TMPD/out"
	check "auto is silent without a device" [ -z "$(notices "$TMPD/err")" ]
	FAKE_CUDA=nodevice "$KVCHAT" generate -m "$M" -n 4 -p hi --device cuda >"$TMPD/out" 2>"$TMPD/err"
	check "--device cuda without a device fails" [ $? -ne 0 ]
	check "... with the runtime's reason" grep -q "no CUDA-capable device is detected (fake module)" "$TMPD/err"
	FAKE_CUDA=oldabi "$KVCHAT" generate -m "$M" -n 4 -p hi --device cuda >"$TMPD/out" 2>"$TMPD/err"
	check "a module of another interface is refused" grep -q "interface 3), this is .* (2): reinstall it" "$TMPD/err"
	# what the GPU lacks, in the real module's words (cuda/support.c, run by the stand-in's init)
	FAKE_CUDA=check kvrun "auto, a model the GPU takes" "$TMPD/err" generate -m "$M" -n 4 --temp 0 -p hi \
	    >"$TMPD/out"
	check "a dense f32 model passes the check" grep -q "passed cu_model_check (fake module); running on the CPU$" \
	    "$TMPD/err"
	for c in "qwen3moe q8_0 qwen3moe's mixture of experts" "llama iq4_nl no GPU kernel for IQ4_NL weights" \
	    "llama mxfp4 no GPU kernel for MXFP4 weights"; do
		set -- $c
		arch=$1 type=$2
		shift 2
		mm="$TMPD/$arch-$type.gguf"
		"$MKMODEL" -o "$mm" --preset tiny --arch "$arch" --type "$type" --vocab bpe --seed 5 >/dev/null ||
			fail "mkmodel $arch $type"
		FAKE_CUDA=check kvrun "auto, $arch $type" "$TMPD/err" generate -m "$mm" -n 4 --temp 0 -p hi >"$TMPD/out"
		check "auto runs $arch $type on the CPU after one notice" [ "$(notices "$TMPD/err" | grep -c .)" -eq 1 ]
		check "... naming what the GPU lacks: $*" grep -q "^kvchat: cuda: .*$*.*; running on the CPU$" "$TMPD/err"
		check "... and generates" [ -s "$TMPD/out" ]
		FAKE_CUDA=check "$KVCHAT" generate -m "$mm" -n 4 -p hi --device cuda >"$TMPD/out" 2>"$TMPD/err"
		check "--device cuda refuses $arch $type" [ $? -ne 0 ]
		check "... saying the CPU runs it" grep -q "the CPU backend runs" "$TMPD/err"
		rm -f "$mm"
	done
	FAKE_CUDA=initfail kvrun "--version with a module" "$TMPD/err" --version >"$TMPD/ver"
	check "--version names the module and its code" grep -q "^cuda: module $FAKE, built for sm_80 (fake)" "$TMPD/ver"
	check "--version lists the devices" grep -q "^cuda: device 0: Fake GPU" "$TMPD/ver"
	FAKE_CUDA=nodevice kvrun "--version, no device" "$TMPD/err" --version >"$TMPD/ver"
	check "--version says why no device" grep -q "^cuda: no device: no CUDA-capable device is detected" "$TMPD/ver"
	# Sampling where the logits are (forward_keep, sample, logits_get) through a
	# stand-in whose compute is the CPU backend's and whose sampler is
	# cuda/sample_core.cuh's replay of the kernels: the CPU's text, greedy,
	# sampled (top-k 40 and 200 on the "device", top-k 0 left to the host).
	for opt in "--temp 0" "--temp 0.8 --seed 7" "--temp 1.3 --seed 3 --top-k 200 --top-p 0.9" \
	    "--temp 0.8 --seed 5 --top-k 0"; do
		"$KVCHAT" generate -m "$M" -n 24 -p hi --device cpu $opt >"$TMPD/cpu.out" 2>"$TMPD/err"
		FAKE_CUDA=cpu FAKE_CUDA_COUNT=1 "$KVCHAT" generate -m "$M" -n 24 -p hi --device cuda $opt \
		    >"$TMPD/keep.out" 2>"$TMPD/err"
		check "sampled in the backend ($opt): the CPU's text" cmp -s "$TMPD/cpu.out" "$TMPD/keep.out"
		grep "^fake-cuda: " "$TMPD/err" >"$TMPD/count.$(echo $opt | tr -dc 'a-z0-9')"
	done
	check "... and some text at all" [ -s "$TMPD/keep.out" ]
	# only the id came back: every token sampled in the backend, no logits copied;
	# top-k 0 is the host's: the logits copied, nothing sampled there
	check "greedy sampled in the backend, no logits copied" \
	    grep -q "^fake-cuda: 24 sampled, 0 logits copied" "$TMPD/count.temp0"
	check "... top-k 40 too" grep -q "^fake-cuda: 24 sampled, 0 logits copied" "$TMPD/count.temp08seed7"
	check "... top-k 200 too" grep -q "^fake-cuda: 24 sampled, 0 logits copied" "$TMPD/count.temp13seed3topk200topp09"
	check "top-k 0: the logits copied for the host's sampler" \
	    grep -q "^fake-cuda: 0 sampled, 24 logits copied" "$TMPD/count.temp08seed5topk0"
	# several sequences reading their logits in turn (copied out before another's forward)
	python3 -c 'import json
for i, w in enumerate(["one", "two two", "three", "four four four", "five"]):
    print(json.dumps({"prompt": w, "max_tokens": 9 + i, "temperature": 0.9, "seed": i, "top_k": 30}))' \
	    >"$TMPD/in.jsonl"
	"$KVCHAT" batch -m "$M" -f "$TMPD/in.jsonl" --parallel 3 --device cpu --quiet >"$TMPD/b.cpu" 2>"$TMPD/err"
	FAKE_CUDA=cpu "$KVCHAT" batch -m "$M" -f "$TMPD/in.jsonl" --parallel 3 --device cuda --quiet \
	    >"$TMPD/b.keep" 2>"$TMPD/err"
	check "batch on the CPU wrote its lines" [ "$(grep -c '"text"' "$TMPD/b.cpu")" -eq 5 ]
	check "batch with the logits kept in the backend: the CPU's output" cmp -s "$TMPD/b.cpu" "$TMPD/b.keep"
	unset KVCHAT_CUDA_MODULE
else
	fail "no stand-in module at $FAKE"
fi

# 4. the real module, when built: what it needs of the program, its GPU code
if [ -f "$MOD" ]; then
	unset KVCHAT_CUDA_MODULE
	kvrun "--version with the real module" "$TMPD/err" --version >"$TMPD/ver"
	check "--version finds the module beside kvchat" grep -q "^cuda: module .*kvchat-cuda.so, built for sm_" "$TMPD/ver"
	if command -v nm >/dev/null 2>&1; then
		# undefined symbols that are not the C/C++ runtime's or CUDA's must be in host.syms
		nm -D --undefined-only "$MOD" | awk '{ print $2 }' | sed 's/@.*//' |
		    grep -E '^(kvc_|gguf_|q_|model_|eng_|tok_|sess_|conv_)' | sort >"$TMPD/need"
		sed -n 's/^[[:space:]]*\([a-z_0-9]*\);$/\1/p' "$top_srcdir/cuda/host.syms" | sort >"$TMPD/have"
		check "the module needs only cuda/host.syms of the program" \
		    [ -z "$(comm -23 "$TMPD/need" "$TMPD/have")" ]
		check "the module needs some of it (the check reads the symbols)" [ -s "$TMPD/need" ]
	fi
	if command -v cuobjdump >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/cuobjdump ]; then
		CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
		"$CUOBJDUMP" --list-elf "$MOD" >"$TMPD/elf" 2>&1
		for a in $(sed -n 's/^#define KVC_CUDA_ARCHS "\(.*\) + PTX.*/\1/p' "$top_builddir/config.h"); do
			check "machine code for $a" grep -q "\.$a\.cubin" "$TMPD/elf"
		done
	fi
fi
done_testing
