#!/bin/sh
# test_threads.sh (issue 11): --threads above the cores this process may run
# on warns (bench, generate and the chat program), the run still completes,
# and at or below the count there is no warning.
. "$top_srcdir/tests/e2e/lib.sh"
M=$TMPD/tiny.gguf
"$MKMODEL" -o "$M" --quiet || { fail "mkmodel"; done_testing; exit 1; }
cores=$(nproc 2>/dev/null || echo 1)
many=$((cores + 2))

"$KVCHAT" bench -m "$M" -p 8 -n 4 -r 1 --threads "$many" >"$TMPD/o" 2>"$TMPD/e"
check "bench with $many threads on $cores cores runs" [ $? -eq 0 ]
check "bench warns" grep -q "warning: --threads $many is more than the $cores cores" "$TMPD/e"
check "bench still reports" grep -q '^| decode' "$TMPD/o"
"$KVCHAT" bench -m "$M" -p 8 -n 4 -r 1 --threads "$cores" >/dev/null 2>"$TMPD/e"
check "no warning at the core count" sh -c "! grep -q 'warning: --threads' '$TMPD/e'"
"$KVCHAT" generate -m "$M" -p hello -n 2 --threads "$many" >/dev/null 2>"$TMPD/e"
check "generate warns" grep -q "warning: --threads $many" "$TMPD/e"
echo hello | "$KVCHAT" -m "$M" --temp 0 -n 2 --ctx 256 --threads "$many" >/dev/null 2>"$TMPD/e"
check "chat warns" grep -q "warning: --threads $many" "$TMPD/e"
done_testing
