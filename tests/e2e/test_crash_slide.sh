#!/bin/sh
# test_crash_slide.sh (issue 26, reliability 3 and 4): test_crash_cmds.sh's
# kills during a turn, /undo, /retry and /delete on a conversation that
# slides (--ctx 256 --ctx-overflow slide, filled to the end of its context
# so every turn slides), strict: after a kill that left whole exchanges the
# next start restores the snapshot. Before issue 26 a kill between a
# sliding turn's commit and its window's left a window the snapshot did
# not match, and an /undo of a slid turn left a stale window key: the next
# start rebuilt from the tokens and its greedy replies differed
# (scripts/kill-campaign.sh compares them; docs/CRASH.md).
KVCHAT_CRASH_OPTS="--ctx 256 --ctx-overflow slide ${KVCHAT_CRASH_OPTS:-}"
KVCHAT_CRASH_FILL=${KVCHAT_CRASH_FILL:-9}
KVCHAT_CRASH_STRICT=1
export KVCHAT_CRASH_OPTS KVCHAT_CRASH_FILL KVCHAT_CRASH_STRICT
exec sh "$top_srcdir/tests/e2e/test_crash_cmds.sh"
