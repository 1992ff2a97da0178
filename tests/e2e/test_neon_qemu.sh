#!/bin/sh
# test_neon_qemu.sh (issue 21): the aarch64 kernel tables, cross-built with
# Debian's gcc-aarch64-linux-gnu and run under qemu-user-static, on any
# build machine. Only what the kernels need is built (core's helpers, gguf,
# quant, kern, model, backend, the float64 reference: no readline, SQLite
# or other aarch64 -dev package), statically, with the flags kern.am gives
# on aarch64 (plain, and -march=armv8.2-a+dotprod for kern_neon_dot.c):
#  - qemu -cpu max (SDOT): test_quant and test_quant_iq over scalar, neon
#    and neondot (every type's kernels against the references, batch
#    independence); test_neon: neon and neondot bitwise equal, neondot the
#    best table; test_forward on a qwen2 fixture with Q4_K and F16 weights
#    in the neondot table against the float64 reference, and batch
#    independence of its logits.
#  - qemu -cpu cortex-a53 (ARMv8.0, no SDOT): test_quant (neondot not run),
#    test_neon: neondot refused by name, neon the best table; test_forward
#    (Q4_K) in the neon table.
# SKIPs when the cross compiler or qemu is absent (scripts/deps.sh installs
# them). Speed is not measured here: qemu emulates, it says nothing of it.
. "$top_srcdir/tests/e2e/lib.sh"

CC=${KVC_AARCH64_CC:-aarch64-linux-gnu-gcc}
QEMU=${KVC_QEMU_AARCH64:-qemu-aarch64-static}
command -v "$CC" >/dev/null 2>&1 || skip "no $CC (Debian: apt-get install gcc-aarch64-linux-gnu)"
command -v "$QEMU" >/dev/null 2>&1 || skip "no $QEMU (Debian: apt-get install qemu-user-static)"

S=$top_srcdir O=$TMPD/obj
mkdir -p "$O"
# config.h: the build's own (it names paths and features, not the CPU)
CFLAGS="-std=c11 -O2 -Wall -Wextra -Werror -pthread -include $top_builddir/config.h \
-I$top_builddir -I$S/src -I$S -I$S/tests"
# the compiler without its C library (libc6-dev-arm64-cross) cannot link
printf 'int main(void) { return 0; }\n' >"$O/c.c"
nice "$CC" -static -o "$O/c" "$O/c.c" 2>/dev/null ||
	skip "$CC cannot link a static program (Debian: apt-get install libc6-dev-arm64-cross)"
"$QEMU" -cpu max "$O/c" || skip "$QEMU does not run an aarch64 program here"
cc1() {	# cc1 SOURCE [FLAGS...]: one object under $O
	_s=$1; shift
	_o=$O/$(echo "$_s" | sed 's|/|_|g; s|\.c$|.o|')
	nice "$CC" $CFLAGS "$@" -c "$S/$_s" -o "$_o" 2>"$O/cc.err" ||
		{ cat "$O/cc.err" >&2; echo "FAIL: $CC $_s"; exit 1; }
	echo "$_o"
}
lib=
for f in src/core/util.c src/core/parse.c src/core/file.c \
    $(cd "$S" && ls src/gguf/*.c src/quant/*.c src/model/*.c src/backend/*.c src/kern/*.c |
    grep -v -e '^src/kern/kern_avx' -e '^src/kern/kern_neon_dot\.c$') \
    tests/fixtures/ref_forward.c tests/fixtures/ref_dequant.c; do
	lib="$lib $(cc1 "$f")" || exit 1
done
lib="$lib $(cc1 src/kern/kern_neon_dot.c -march=armv8.2-a+dotprod)" || exit 1
for t in test_quant test_quant_iq test_neon test_forward; do
	nice "$CC" $CFLAGS -static -o "$TMPD/$t" "$S/tests/unit/$t.c" $lib -lm 2>"$O/cc.err" ||
		{ cat "$O/cc.err" >&2; echo "FAIL: link $t"; exit 1; }
done

# run CPU NAME TABLE PROGRAM ARGS...: under qemu as that CPU, KVCHAT_KERNELS=TABLE
# (- : unset); the log's end shown on failure
run() {
	_cpu=$1 _n=$2 _k=$3; shift 3
	[ "$_k" = - ] && _k=
	if env -u KVCHAT_KERNELS ${_k:+KVCHAT_KERNELS=$_k} "$QEMU" -cpu "$_cpu" "$@" >"$TMPD/$_n.log" 2>&1
	then ok; else
		fail "$_n (qemu -cpu $_cpu)"
		grep -v '^ok' "$TMPD/$_n.log" | tail -20 >&2
	fi
}
run max quant-max - "$TMPD/test_quant"
run max quant-iq-max - "$TMPD/test_quant_iq"
check "-cpu max: test_quant ran neondot" grep -q '^kernels neondot$' "$TMPD/quant-max.log"
run max neon-max - "$TMPD/test_neon" dotprod
run max forward-max neondot "$TMPD/test_forward" qwen2 Q4_K F16
check "-cpu max: test_forward ran neondot" grep -q '^qwen2 *F16 *neondot' "$TMPD/forward-max.log"

run cortex-a53 quant-a53 - "$TMPD/test_quant"
check "-cpu cortex-a53: test_quant ran neon" grep -q '^kernels neon$' "$TMPD/quant-a53.log"
check "-cpu cortex-a53: neondot not run" \
    grep -q '^kernels neondot: not on this CPU' "$TMPD/quant-a53.log"
run cortex-a53 neon-a53 - "$TMPD/test_neon" nodot
run cortex-a53 forward-a53 neon "$TMPD/test_forward" qwen2 Q4_K
check "-cpu cortex-a53: test_forward ran neon" grep -q '^qwen2 *Q4_K *neon ' "$TMPD/forward-a53.log"
done_testing
