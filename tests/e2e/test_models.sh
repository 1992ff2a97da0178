#!/bin/sh
# test_models.sh (issue 12): files kvchat cannot run. Without -m and without
# a terminal, kvchat takes the first model it can run, passing over one it
# cannot (listed first); a load error names the file once, with the reason.
# (The terminal picker marks such files "cannot run: REASON" from the same
# check, model_load on the header: tests/unit/test_discover.)
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }

D="$XDG_DATA_HOME/kvchat/models"
mkdir -p "$D"
"$MKMODEL" -o "$D/b-good.gguf" --arch gemma3 --quiet --seed 2 || { echo "FAIL: mkmodel"; exit 1; }
# the same file with an architecture kvchat does not know (same length: the keys stay consistent)
python3 - "$D/b-good.gguf" "$D/a-bad.gguf" <<'PY'
import sys
open(sys.argv[2], "wb").write(open(sys.argv[1], "rb").read().replace(b"gemma3", b"gemm_3"))
PY

echo "hello" | "$KVCHAT" --db "$TMPD/s.db" --temp 0 -n 2 >"$TMPD/out" 2>"$TMPD/err"
rc=$?
check "runs without -m (rc=$rc)" [ $rc -eq 0 ]
check "picks the model it can run" grep -q "using b-good.gguf" "$TMPD/err"

"$KVCHAT" -m "$D/a-bad.gguf" --db "$TMPD/s.db" </dev/null >/dev/null 2>"$TMPD/err"
check "a file it cannot run is refused" [ $? -ne 0 ]
cat "$TMPD/err"
check "the reason is given" grep -q "architecture 'gemm_3' is not supported" "$TMPD/err"
check "the path once" [ "$(grep -o "a-bad.gguf" "$TMPD/err" | wc -l)" -eq 1 ]
done_testing
