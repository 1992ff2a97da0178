#!/bin/sh
# test_readonly.sh (issue 10, point 8): a database kvchat cannot write is
# opened read-only instead of refused: on a full disk (a 4 MiB tmpfs filled
# up), on a read-only mount, and as a user who may not write the file. The
# conversation can be listed (/list) and exported (/export) in the
# interactive chat; a turn is refused before generating, saying why; the
# database file is byte-identical afterwards. Needs root (mount); SKIPs
# without it.
. "$top_srcdir/tests/e2e/lib.sh"
KVC_TMUX_SCROLL=300
. "$top_srcdir/tests/e2e/lib_tmux.sh"
FULL="$TMPD/full"
mkdir -p "$FULL"
trap 'tmux_stop; umount "$FULL" 2>/dev/null; rm -rf "$TMPD"' EXIT
mount -t tmpfs -o size=4m,mode=0700 tmpfs "$FULL" 2>/dev/null ||
	skip "cannot mount a small tmpfs (needs root) for the full-disk case"

tiny_model 67
DB="$FULL/s.db"
OPTS="--temp 0 -n 8 --ctx 512"
printf 'Remember the word lighthouse.\nAnd the number seven.\n' |
    kvrun "two turns stored" "$TMPD/mk.err" -m "$M" $OPTS --db "$DB" --session keep >/dev/null
dd if=/dev/zero of="$FULL/fill" bs=64k 2>/dev/null
check "the disk is full" [ "$(df --output=avail "$FULL" | tail -n 1 | tr -d ' ')" -eq 0 ]
cksum "$DB" >"$TMPD/db.sum"

# Piped: the turn is refused before generating, saying why.
echo "A third turn." | "$KVCHAT" -m "$M" $OPTS --db "$DB" --resume keep >"$TMPD/p.out" 2>"$TMPD/p.err"
rc=$?
echo "full disk, piped: exit $rc: $(cat "$TMPD/p.err")"
check "the turn is refused (exit $rc)" [ $rc -ne 0 ]
check "saying the database is read-only because the disk is full" grep -q "read-only (the disk is full)" "$TMPD/p.err"
check "nothing generated" [ ! -s "$TMPD/p.out" ]
# Issue 26 (newcomer 5): why it is read-only is said once, and the refused
# line is named.
check "the read-only notice once" [ "$(grep -c "is open read-only" "$TMPD/p.err")" -eq 1 ]
check "the refused line is named" grep -q 'not sent, the database being read-only: "A third turn."' "$TMPD/p.err"

# Interactive: /list and /export work.
T new-session -d -s t -x 160 -y 50 \
    "LC_ALL=C.UTF-8 TERM=xterm '$KVCHAT' -m '$M' --db '$DB' --resume keep $OPTS; echo KVCHAT-EXIT:\$?; sleep 60"
wait_for "the prompt" on_screen ">>> "
T send-keys -t t "/list" Enter
wait_for "/list shows the conversation" on_screen "keep"
T send-keys -t t "/export md $TMPD/e.md" Enter
wait_for "/export wrote the file" test -s "$TMPD/e.md"
check "the export holds the stored turns" grep -q "lighthouse" "$TMPD/e.md"
T send-keys -t t "Another turn." Enter
wait_for "a turn is refused, naming it" on_screen "not sent, the database being read-only"
T send-keys -t t "/quit" Enter
wait_for "kvchat exits" on_screen "KVCHAT-EXIT:"
check "the database file is unchanged" sh -c "cksum '$DB' | cmp -s - '$TMPD/db.sum'"

# A read-only mount.
rm -f "$FULL/fill" "$DB-wal" "$DB-shm"
mount -o remount,ro "$FULL"
echo "Hi." | "$KVCHAT" -m "$M" $OPTS --db "$DB" --resume keep >/dev/null 2>"$TMPD/r.err"
check "read-only mount: refused turn" [ $? -ne 0 ]
check "read-only mount: says why" grep -q "read-only (the filesystem is mounted read-only)" "$TMPD/r.err"
mount -o remount,rw "$FULL"

# Another user's file (we may read, not write).
if command -v setpriv >/dev/null; then
	chmod 0755 "$TMPD" "$FULL"
	chmod 0644 "$DB"
	chmod 0644 "$M"
	# a copy nobody can run even when the build is in a private home (/root)
	cp "$KVCHAT" "$TMPD/kvchat" && chmod 755 "$TMPD/kvchat"
	echo "Hi." | setpriv --reuid 65534 --regid 65534 --clear-groups env HOME=/nonexistent \
	    "$TMPD/kvchat" -m "$M" $OPTS --db "$DB" --resume keep >/dev/null 2>"$TMPD/u.err"
	rc=$?
	echo "as uid 65534: exit $rc: $(cat "$TMPD/u.err")"
	check "another user's database: opened read-only" grep -q "is open read-only (the file is not writable" "$TMPD/u.err"
	check "another user's database: turn refused" grep -q "not sent, the database being read-only" "$TMPD/u.err"
fi
check "the database file is still unchanged" sh -c "cksum '$DB' | cmp -s - '$TMPD/db.sum'"
done_testing
