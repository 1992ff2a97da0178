#!/bin/sh
# test_crash.sh (issue 4, "crash safety"): SIGKILL kvchat at random moments
# of a scripted conversation (while loading, prefilling, generating, writing
# snapshot chunks: an F32 cache makes the chunk writes take real time), many
# times over a few conversations on one database. After every kill:
#   - PRAGMA integrity_check is ok;
#   - every turn completed before the kill is stored. "Completed" means its
#     --stats-json line was written: kvchat writes that line after the turn's
#     transaction commits, so a turn with a stats line must be in the
#     database, and at most one more (committed, killed before its line);
#   - stdout is consistent with the store: the replies of the completed
#     turns, each followed by a blank line, then at most part of one more;
#   - the stored conversation alternates user/assistant. The user's message
#     is stored when it is sent (issue 13), so a kill during a turn leaves it
#     without its reply; the next run's first turn gives it an empty reply
#     marked interrupted. Those are not counted as replies below (no turn
#     of these runs is interrupted otherwise), and after the last runs
#     every message has its reply;
# and the next process resumes the conversation from its snapshot or by
# rebuilding, computing only the new turn's tokens when from the snapshot.
# KVCHAT_CRASH_KILLS (default 50) and KVCHAT_CRASH_SEED make longer or
# repeatable runs (docs/CRASH.md).
. "$top_srcdir/tests/e2e/lib.sh"
[ -x "$MKMODEL" ] || { echo "FAIL: $MKMODEL is not built"; exit 1; }
KILLS=${KVCHAT_CRASH_KILLS:-50}
SEED=${KVCHAT_CRASH_SEED:-$$}
# Enough conversations that none grows long: kill delays are calibrated on a short one.
NCONV=$((KILLS / 12 > 4 ? KILLS / 12 : 4))
echo "kills: $KILLS, seed: $SEED (KVCHAT_CRASH_SEED=$SEED to repeat)"

M="$TMPD/m.gguf"
"$MKMODEL" -o "$M" --preset tiny --arch qwen2 --type f32 --vocab bpe --ctx 8192 --seed 51 \
    --n-layer 4 --n-head-kv 4 >/dev/null ||
	{ echo "FAIL: mkmodel"; exit 1; }
DB="$TMPD/crash.db"
OPTS="--temp 0.7 -n 48 --ctx 4096 --kv-type f32 --db $DB"
# Four turns per run: short and long prompts, so both prefill and chunk writes are targets.
{
	echo "Tell me a story about a lighthouse keeper."
	echo "请继续讲这个故事，多写一点细节，比如天气、海浪和灯塔的样子，还有守塔人每天做什么。"
	echo "Now summarise it in one sentence, please, and then add a moral: what should a reader learn from the keeper, the sea and the light?"
	echo "Thanks."
} >"$TMPD/in.txt"

# Calibrate: full runs (not killed) set the range of kill delays. The faster
# of two: one slowed by a busy machine would spread the kills past most runs' end.
T=""
for i in 1 2; do
	t0=$(ms)
	"$KVCHAT" -m "$M" $OPTS --session calibrate <"$TMPD/in.txt" >/dev/null 2>"$TMPD/cal.err" ||
		{ echo "FAIL: calibration run failed:"; cat "$TMPD/cal.err"; exit 1; }
	t=$(( $(ms) - t0 ))
	[ -z "$T" ] || [ "$t" -lt "$T" ] && T=$t
done
echo "an uninterrupted run of 4 turns takes $T ms"
# Each kill's moment as a fraction of a run, uniform over it and a little
# past its end (some runs then finish). The run's length T is the faster
# calibration run's, and shrinks to any kill run that finished before its
# kill: a machine that got faster since (the load of parallel tests came
# and went) would otherwise finish most runs before their kills.
awk -v seed="$SEED" -v n="$KILLS" 'BEGIN {
	srand(seed)
	for (i = 0; i < n; i++) printf "%.4f\n", rand() * 1.05
}' >"$TMPD/delays"

t_start=$(ms)
k=1
while [ $k -le "$KILLS" ]; do
	conv="crash$((k % NCONV))"
	# seconds; at least 1 ms (timeout takes 0 as no limit)
	d=$(awk -v f="$(sed -n "${k}p" "$TMPD/delays")" -v t="$T" 'BEGIN {
		d = f * t / 1000; printf "%.3f", d < 0.001 ? 0.001 : d }')
	n0=$(sqlite3 "$DB" "SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conv_id
	    WHERE c.title = '$conv' AND m.role = 2 AND m.interrupted = 0")
	# Created here: a kill within a millisecond can land before the child's redirections.
	: >"$TMPD/out.$k"
	: >"$TMPD/err.$k"
	t0=$(ms)
	timeout --foreground -s KILL "$d" "$KVCHAT" -m "$M" $OPTS --session "$conv" --stats-json "$TMPD/st.$k" \
	    <"$TMPD/in.txt" >>"$TMPD/out.$k" 2>>"$TMPD/err.$k"
	rc=$?
	t=$(( $(ms) - t0 ))
	# finished before its kill: a whole run takes at most t now
	if [ $rc -eq 0 ] && [ "$t" -lt "$T" ]; then
		echo "run $k finished in $t ms, before its kill: the kill range shrinks to that"
		T=$t
	fi
	ic=$(sqlite3 "$DB" 'PRAGMA integrity_check' 2>&1)
	[ "$ic" = ok ] || fail "kill $k: integrity_check: $ic"
	n1=$(sqlite3 "$DB" "SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conv_id
	    WHERE c.title = '$conv' AND m.role = 2 AND m.interrupted = 0")
	echo "$k $conv $n0 $n1 $rc $d" >>"$TMPD/log"
	k=$((k + 1))
done
echo "$KILLS kill runs took $(( $(ms) - t_start )) ms"

# One more run per conversation, not killed: it must resume and finish.
for c in $(seq 0 $((NCONV - 1))); do
	conv="crash$c"
	"$KVCHAT" -m "$M" $OPTS --session "$conv" --stats-json "$TMPD/final.$c" \
	    <"$TMPD/in.txt" >/dev/null 2>"$TMPD/final.$c.err"
	rc=$?
	check "$conv: a last run finishes (exit $rc)" [ $rc -eq 0 ]
	[ $rc -eq 0 ] || cat "$TMPD/final.$c.err" >&2
	check "$conv: 4 turns in the last run" [ "$(wc -l <"$TMPD/final.$c")" -eq 4 ]
done
check "integrity ok at the end" [ "$(sqlite3 "$DB" 'PRAGMA integrity_check')" = ok ]

python3 - "$DB" "$TMPD" "$NCONV" <<'EOF'
import json, sqlite3, sys
db, d, nconv = sys.argv[1], sys.argv[2], int(sys.argv[3])
con = sqlite3.connect(db)
bad = 0
def fail(msg):
    global bad
    bad += 1
    print("FAIL:", msg, file=sys.stderr)

def replies(conv):
    return [t for (t,) in con.execute(
        "SELECT m.text FROM messages m JOIN conversations c ON c.id = m.conv_id "
        "WHERE c.title = ? AND m.role = 2 AND m.interrupted = 0 ORDER BY m.seq", (conv,))]

def stats(path):
    try:
        return [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
    except FileNotFoundError:
        return []

killed = finished = extra_commit = resumed = rebuilt = 0
phases = {}
replied = {}	# conversation: replies stored after its last kill (fewer kills than conversations leave some unused)
for line in open(d + "/log"):
    k, conv, n0, n1, rc, delay = line.split()
    n0, n1, rc = int(n0), int(n1), int(rc)
    replied[conv] = n1
    st = stats("%s/st.%s" % (d, k))
    out = open("%s/out.%s" % (d, k), encoding="utf-8", errors="surrogateescape", newline="").read()
    s = len(st)
    killed += rc != 0
    finished += rc == 0
    phases[s] = phases.get(s, 0) + 1
    if not (n0 + s <= n1 <= n0 + s + 1):
        fail("kill %s (%s): %d turns reported done, store went from %d to %d replies" % (k, conv, s, n0, n1))
        continue
    if rc == 0 and not (s == 4 and n1 == n0 + 4):
        fail("kill %s: run finished (exit 0) with %d stats lines, %d new replies" % (k, s, n1 - n0))
    extra_commit += n1 == n0 + s + 1
    r = replies(conv)
    done = "".join(t + "\n\n" for t in r[n0:n0 + s])
    if not out.startswith(done):
        i = next((j for j in range(min(len(out), len(done))) if out[j] != done[j]), min(len(out), len(done)))
        why = ""
        if i < len(out) and out[i] == "\x00":
            why = " (the reply printed a NUL byte; the stored text stops there)"
        fail("kill %s: stdout does not start with the %d completed replies%s: at byte %d, %r vs %r"
             % (k, s, why, i, out[max(0, i - 20):i + 20], done[max(0, i - 20):i + 20]))
        continue
    rest = out[len(done):]
    if n1 == n0 + s + 1:
        whole = r[n0 + s] + "\n\n"
        if not (whole.startswith(rest) or rest.startswith(whole)):
            fail("kill %s: stdout after the completed replies is not the committed one" % k)
    elif rc == 0 and rest:
        fail("kill %s: output after the last reply: %r" % (k, rest[:80]))
    if st and n0 > 0:
        f = st[0]
        resumed += f.get("resumed_from_snapshot") is True
        rebuilt += f.get("rebuilt") is True
        if not (f.get("resumed_from_snapshot") is True or f.get("rebuilt") is True):
            fail("kill %s: first turn after a kill neither resumed nor rebuilt: %s" % (k, f))
        if f.get("resumed_from_snapshot") is True and f.get("prefill_tokens") != f.get("prompt_tokens"):
            fail("kill %s: resumed but computed %s positions for a %s-token turn" %
                 (k, f.get("prefill_tokens"), f.get("prompt_tokens")))
    for j, f in enumerate(st):
        if f.get("interrupted") is True:
            fail("kill %s: turn %d marked interrupted" % (k, j + 1))

for c in range(nconv):
    conv = "crash%d" % c
    roles = [r for (r,) in con.execute(
        "SELECT m.role FROM messages m JOIN conversations c ON c.id = m.conv_id "
        "WHERE c.title = ? AND m.role IN (1, 2) ORDER BY m.seq", (conv,))]
    if roles != [1, 2] * (len(roles) // 2) or len(roles) % 2:
        fail("%s: messages do not alternate user/assistant: %s" % (conv, roles))
    f = stats("%s/final.%d" % (d, c))
    if f and replied.get(conv, 0) > 0 and not (f[0].get("resumed_from_snapshot") is True or
                                               f[0].get("rebuilt") is True):
        fail("%s: the last run neither resumed nor rebuilt" % conv)

print("killed %d times, %d runs finished before their kill; turns done at the kill: %s"
      % (killed, finished, " ".join("%d:%d" % kv for kv in sorted(phases.items()))))
print("killed between a commit and its stats line: %d; next run resumed from the snapshot %d times, rebuilt %d times"
      % (extra_commit, resumed, rebuilt))
if killed < 0.8 * (killed + finished):
    fail("only %d of %d runs were really killed" % (killed, killed + finished))
sys.exit(1 if bad else 0)
EOF
check "every kill left a consistent store and stdout" [ $? -eq 0 ]
done_testing
