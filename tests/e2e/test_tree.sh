#!/bin/sh
# The house rules of docs/ARCHITECTURE.md: modules include and call only the
# modules below them, no two files call each other, no .c file over 900
# lines, no function over 120 (scripts/check-tree.py says which and where).
. "$top_srcdir/tests/e2e/lib.sh"
command -v python3 >/dev/null 2>&1 || skip "python3 not installed"
command -v nm >/dev/null 2>&1 || skip "nm not installed"
check "scripts/check-tree.py finds no violation" python3 "$top_srcdir/scripts/check-tree.py" --build "$top_builddir"
done_testing
