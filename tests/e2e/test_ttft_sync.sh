#!/bin/sh
# test_ttft_sync.sh (issue 26): no fsync or fdatasync on the path to a
# reply's first token. The user's message is committed before its prefill
# (docs/CRASH.md) but with synchronous=OFF and no checkpoint
# (sess_user_commit); the reply's commit, after the last token, syncs the
# WAL the message shares. Traced with strace over three piped turns: the
# syncs between a turn's start (the input read, or the previous turn's
# --stats-json line) and its first token on stdout are counted; there must
# be none. (With synchronous=NORMAL there was one, the WAL header's sync,
# on every turn after the first.) SKIP without strace, or where it cannot trace.
. "$top_srcdir/tests/e2e/lib.sh"
command -v strace >/dev/null 2>&1 || skip "strace not found"
# a container without ptrace has strace but cannot trace (as test_slide and
# test_store_file check before their strace runs)
strace -f -o /dev/null true 2>/dev/null || skip "strace cannot trace here (ptrace not permitted)"
command -v python3 >/dev/null 2>&1 || skip "python3 not found"
"$MKMODEL" -o "$TMPD/m.gguf" --preset tiny --arch qwen2 --type f32 --vocab bpe --ctx 2048 \
    --seed 5 >/dev/null || { echo "FAIL: mkmodel"; exit 1; }
# a database that exists already, as on every start but the first
echo "First." | kvrun "an earlier conversation" "$TMPD/e0" -m "$TMPD/m.gguf" --db "$TMPD/s.db" \
    --session earlier --temp 0 -n 4 >/dev/null
printf 'Hello there.\nSecond turn here.\nAnd a third.\n' >"$TMPD/in.txt"
# (LeakSanitizer cannot run under ptrace: off for the traced run in a sanitizer build)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    strace -f -e trace=fdatasync,fsync,write,read -o "$TMPD/trace" "$KVCHAT" -m "$TMPD/m.gguf" \
    --db "$TMPD/s.db" --session traced --temp 0 -n 4 --stats-json "$TMPD/s.json" \
    <"$TMPD/in.txt" >"$TMPD/out" 2>"$TMPD/err" || { fail "traced chat"; cat "$TMPD/err" >&2; }
check "three turns" [ "$(wc -l <"$TMPD/s.json")" -eq 3 ]
python3 - "$TMPD/trace" <<'PY' || fail "a sync on the path to the first token"
import re, sys
turns, cur, syncs = [], None, 0
for line in open(sys.argv[1], errors="replace"):
    if re.search(r"\bread\(0, \"[^\"]", line) and cur is None and not turns:
        cur, syncs = "turn 1", 0			# the lines are read: turn 1 starts
    elif re.search(r'write\(\d+, "\{\\"turn\\":(\d+)', line):
        n = int(re.search(r'\\"turn\\":(\d+)', line).group(1))
        cur, syncs = "turn %d" % (n + 1), 0	# its stats line: the next turn starts
    elif cur and re.search(r"\b(fdatasync|fsync)\(", line):
        syncs += 1
    elif cur and re.search(r"\bwrite\(1, ", line):
        turns.append((cur, syncs))			# the first token
        cur = None
print(turns)
sys.exit(0 if len(turns) == 3 and all(s == 0 for _, s in turns) else 1)
PY
ok
done_testing
