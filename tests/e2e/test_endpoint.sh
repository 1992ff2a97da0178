#!/bin/sh
# test_endpoint.sh (issue 24): kvchat --endpoint against kvchat serve on a
# free loopback port: the first reply equals kvchat generate's greedy text
# on the rendered prompt; the second turn's stats line carries the server's
# cached_tokens; the conversation is stored locally (history only), /undo
# takes the last exchange back, --resume goes on with it; inside the chat,
# /list lists the stored conversations, /resume continues another (the
# server gets its whole history) and /delete deletes one; a server that
# cannot be reached is a clear error and stores nothing; a wrong key is the
# server's 401 message; /set and the sampling options are what the requests
# send (the others left to the server), /system the system message, /show and
# /stats say what is known here; Ctrl-C stops a reply (kept, marked
# interrupted) and the server stops generating it. The server is stopped at the end, also on
# a failure.
. "$top_srcdir/tests/e2e/lib.sh"
command -v python3 >/dev/null 2>&1 || skip "python3 is needed to read the database"

tiny_model 11
SPID=""
trap '[ -n "$SPID" ] && kill "$SPID" 2>/dev/null; rm -rf "$TMPD"' EXIT
printf 'endpoint-key-1\n' >"$TMPD/key"
serve_start "$TMPD/server.db" --api-key-file "$TMPD/key"
URL="http://127.0.0.1:$PORT/v1"
DB="$TMPD/local.db"
EP="--endpoint $URL --api-key-file $TMPD/key --db $DB --temp 0 -n 10"

printf 'hello there\nand more\n/undo\n/history\n' | "$KVCHAT" $EP >"$TMPD/out1" 2>"$TMPD/err1"
check "two turns and /undo (exit $?)" [ $? -eq 0 ]
# the first reply is the model's greedy reply to the rendered prompt
ids=$(printf '<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n' |
    "$KVCHAT" tokenize -m "$M" --parse-special | tr ' \n' ',,' | sed 's/,*$//')
"$KVCHAT" generate -m "$M" -n 10 --temp 0 --prompt-ids "$ids" >"$TMPD/want" 2>/dev/null
python3 - "$DB" "$TMPD/want" <<'PY' || fail "the stored conversation"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("select role, text from messages order by id").fetchall()
want = open(sys.argv[2], "rb").read().decode("utf-8", "replace")
assert [r[0] for r in rows] == [1, 2], rows          # /undo took the second exchange back
assert rows[0][1] == "hello there", rows
assert rows[1][1] == want, (rows[1][1], want)
print("stored:", rows)
PY
check "the second turn's stats line has the server's cached_tokens" \
    grep -q "cached [1-9][0-9]* of [0-9]* prompt tokens" "$TMPD/err1"
check "/history shows what is left" grep -q "^>>> hello there" "$TMPD/out1"
check "...without the undone exchange" sh -c "! grep -q '^>>> and more' '$TMPD/out1'"
check "a title is made from the first message" \
    [ "$(sqlite3 "$DB" "select title from conversations")" = "hello there" ]

printf 'one more\n' | "$KVCHAT" $EP --resume 1 >"$TMPD/out2" 2>"$TMPD/err2"
check "--resume goes on (exit $?)" [ $? -eq 0 ]
check "...with the stored history" grep -q "conversation 1 (hello there), 2 messages" "$TMPD/err2"
check "...the turn stored" [ "$(sqlite3 "$DB" "select count(*) from messages")" -eq 4 ]

old=$(sqlite3 "$DB" "select text from messages where conv_id = 1 order by id desc limit 1")
# /retry replaces the last reply with a new one: greedy again with fewer
# tokens, so the new reply is a shorter beginning of the old.
printf '/retry\n' | "$KVCHAT" $EP -n 3 --resume 1 >"$TMPD/out6" 2>"$TMPD/err6"
check "/retry (exit $?)" [ $? -eq 0 ]
check "...streamed a reply" grep -q "tok/s" "$TMPD/err6"
python3 - "$DB" "$old" <<'PY' || fail "/retry replaces the last reply"
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute(
    "select role, text from messages where conv_id = 1 order by id").fetchall()
old = sys.argv[2]
assert [r[0] for r in rows] == [1, 2, 1, 2], rows
assert rows[3][1] != old and old.startswith(rows[3][1]), (rows[3][1], old)
PY
# /undo's exchange is not in the store nor the next request (the turn after
# it is cached up to the first reply, not past it); /history and /export
# print the conversation; /show and /set work on what the requests send.
printf '/undo\nthird\n/history\n/export md %s\n/export json %s\n/show\n/set temp 1\n' \
    "$TMPD/x.md" "$TMPD/x.json" | "$KVCHAT" $EP --resume 1 >"$TMPD/out5" 2>"$TMPD/err5"
check "the commands (exit $?)" [ $? -eq 0 ]
python3 - "$DB" <<'PY' || fail "/undo in the store"
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute(
    "select role, text from messages where conv_id = 1 order by id").fetchall()
assert [r[0] for r in rows] == [1, 2, 1, 2], rows       # undone, then third
assert rows[2][1] == "third", rows
print("after /undo, third:", rows)
PY
check "/history prints the conversation" grep -q "^>>> third" "$TMPD/out5"
check "/export md" grep -q "^## User" "$TMPD/x.md"
check "...with the title" grep -q "^# hello there" "$TMPD/x.md"
python3 - "$TMPD/x.json" <<'PY' || fail "/export json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["title"] == "hello there", d
assert [m["role"] for m in d["messages"]] == ["user", "assistant", "user", "assistant"], d
assert d["messages"][2]["text"] == "third", d
PY
check "/show names the endpoint" grep -q "^endpoint  *$URL\$" "$TMPD/out5"
check "...and the settings given (--temp 0)" grep -q "^temperature  *0\$" "$TMPD/out5"
check "...the others the server's" grep -q "^top_k  *(the server's default)\$" "$TMPD/out5"
check "/set temp 1 takes" grep -q "^temperature  *1\$" "$TMPD/out5"


# /list, /resume and /delete inside the chat: a second conversation is
# made and listed (starred), an unknown one refused by name, the first one
# resumed and continued (the server is sent its whole history), the second
# deleted by id, a third deleted as the current one (a new one follows).
printf 'second chat\n/list\n/resume nosuch\n/resume 1\n/list\nfourth\n/delete 2\n/new\nfifth\n/delete\n/list\n' |
    "$KVCHAT" $EP >"$TMPD/out7" 2>"$TMPD/err7"
check "/list, /resume, /delete (exit $?)" [ $? -eq 0 ]
check "/list stars the current conversation" grep -Eq '^\* +2  .* second chat$' "$TMPD/out7"
check "...and lists the others" grep -Eq '^  +1  .* hello there$' "$TMPD/out7"
check "/resume of an unknown title is refused by name" \
    grep -q "/resume: no conversation with id or title 'nosuch'" "$TMPD/err7"
check "/resume 1 continues the first" grep -q "conversation 1 (hello there), 4 messages" "$TMPD/err7"
check "...which /list then stars" grep -Eq '^\* +1  .* hello there$' "$TMPD/out7"
check "/delete 2" grep -q "^deleted conversation 2$" "$TMPD/out7"
check "/delete of the current one" grep -q "^deleted conversation 3$" "$TMPD/out7"
check "...only the first is left" [ "$(sqlite3 "$DB" "select group_concat(id) from conversations")" = 1 ]
python3 - "$DB" "$TMPD/server.db" <<'PY' || fail "/resume continues the stored history on the server"
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute(
    "select role, text from messages where conv_id = 1 order by id").fetchall()
assert [r[0] for r in rows] == [1, 2, 1, 2, 1, 2], rows
assert rows[4][1] == "fourth", rows
# the server stored the request it answered: every user message of the history
srv = sqlite3.connect(sys.argv[2])
conv = srv.execute("select conv_id from messages where role = 1 and text = 'fourth'").fetchall()
assert conv, "the server has no request with 'fourth'"
users = [r[0] for r in srv.execute("select text from messages where conv_id = ? and role = 1 "
    "order by id", (conv[-1][0],))]
assert users == ["hello there", "third", "fourth"], users
print("the server's conversation:", users)
PY

# /set, /system, /stats in a new conversation: the requests carry them. The
# reply is what kvchat generate gives for the prompt rendered with that
# system message, cut at /set's max_tokens 3 (not -n 10); /stats lists it;
# "default" gives a setting back to the server; the template's own
# settings are refused by name.
printf '/set max_tokens 3\n/system be brief\nsettings turn\n/stats\n/set max_tokens default\n/show parameters\n/set think on\n/show system\n' |
    "$KVCHAT" $EP >"$TMPD/out8" 2>"$TMPD/err8"
check "/set, /system, /stats (exit $?)" [ $? -eq 0 ]
ids=$(printf '<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nsettings turn<|im_end|>\n<|im_start|>assistant\n' |
    "$KVCHAT" tokenize -m "$M" --parse-special | tr ' \n' ',,' | sed 's/,*$//')
"$KVCHAT" generate -m "$M" -n 3 --temp 0 --prompt-ids "$ids" >"$TMPD/want8" 2>/dev/null
python3 - "$DB" "$TMPD/want8" <<'PY' || fail "/system and /set max_tokens in the request"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
cid, system = db.execute("select id, system from conversations where title = 'settings turn'").fetchone()
rows = db.execute("select role, text from messages where conv_id = ? order by id", (cid,)).fetchall()
want = open(sys.argv[2], "rb").read().decode("utf-8", "replace")
assert system == "be brief", system
assert rows == [(1, "settings turn"), (2, want)], (rows, want)
PY
check "...3 tokens asked" grep -q ", 3 tokens," "$TMPD/err8"
check "/stats lists the turn" grep -Eq '^ +1 +[0-9.]+ +[0-9]+ +[0-9]+ +3 ' "$TMPD/out8"
check "/set max_tokens default: the server's again" grep -q "^max_tokens  *(the server's default)\$" "$TMPD/out8"
check "/set think is refused by name" grep -q "/set think: the server renders" "$TMPD/err8"
check "/show system" grep -q "^be brief\$" "$TMPD/out8"

n0=$(sqlite3 "$DB" "select count(*) from messages")
echo "hello" | "$KVCHAT" --endpoint "http://127.0.0.1:1/v1" --remote-model m --db "$DB" \
    >/dev/null 2>"$TMPD/err3"
check "an unreachable server is exit 1" [ $? -eq 1 ]
check "...saying so" grep -q "connect" "$TMPD/err3"
printf 'wrong-key-00\n' >"$TMPD/badkey"
echo "hello" | "$KVCHAT" --endpoint "$URL" --remote-model m --api-key-file "$TMPD/badkey" \
    --db "$DB" >/dev/null 2>"$TMPD/err4"
check "a wrong key is the server's 401" grep -q "HTTP 401" "$TMPD/err4"
check "failed turns store nothing" [ "$(sqlite3 "$DB" "select count(*) from messages")" -eq "$n0" ]
# stopped_clean ERRFILE: kvchat serve ($SPID) stops on SIGTERM, exit 0, no sanitizer report.
stopped_clean() {
	kill "$SPID" 2>/dev/null
	wait "$SPID" 2>/dev/null
	_rc=$?
	SPID=""
	check "kvchat serve stops cleanly (exit $_rc)" [ "$_rc" -eq 0 ]
	check "...saying nothing of a sanitizer" sh -c "! grep -q 'Sanitizer\|runtime error' '$1'"
}
stopped_clean "$TMPD/serve.err"

# Ctrl-C stops a reply: kept, marked interrupted; the server sees the client go.
# A wide model decodes slowly enough to be caught mid-reply on any machine here.
wide_model "$TMPD/w.gguf"
"$KVCHAT" serve -m "$TMPD/w.gguf" --port 0 --db "$TMPD/server.db" --threads 2 \
    2>"$TMPD/serve2.err" &
SPID=$!
PORT=""
for _i in $(seq 1 300); do
	PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\)\/v1.*/\1/p' "$TMPD/serve2.err")
	[ -n "$PORT" ] && break
	sleep 0.1
done
mkfifo "$TMPD/ep.in"
# Greedy: the reply to "a long one" runs to its 2000 tokens (seconds on this
# model), so the interrupt comes while it streams on any machine.
"$KVCHAT" --endpoint "http://127.0.0.1:$PORT/v1" --db "$TMPD/c.db" --temp 0 -n 2000 \
    <"$TMPD/ep.in" >"$TMPD/ep.out" 2>"$TMPD/ep.err" &
EPID=$!
exec 6>"$TMPD/ep.in"
echo "a long one" >&6
for _i in $(seq 1 600); do
	[ -s "$TMPD/ep.out" ] && break
	sleep 0.1
done
kill -INT "$EPID"
exec 6>&-
wait "$EPID"
check "Ctrl-C: the chat goes on and ends (exit $?)" [ $? -eq 0 ]
check "...the reply stopped" grep -q "interrupted" "$TMPD/ep.err"
check "...kept, marked interrupted" [ "$(sqlite3 "$TMPD/c.db" "select interrupted from messages where role = 2")" = 1 ]
for _i in $(seq 1 300); do
	grep -q "the client went away" "$TMPD/serve2.err" && break
	sleep 0.1
done
check "...and the server stopped generating it" grep -q "the client went away" "$TMPD/serve2.err"
stopped_clean "$TMPD/serve2.err"
done_testing
