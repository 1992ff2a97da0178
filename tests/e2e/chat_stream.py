#!/usr/bin/env python3
"""chat_stream.py DB: a stored conversation's token stream and messages.

Prints two lines: the ids of every message but the last reply, concatenated
(what the cache held when the last reply began), and the messages before
that reply as a JSON array ({"role", "content"}, and a reply's stored
reasoning as "reasoning_content" and "thinking", the names the templates
read it by) for `kvchat template`.
"""
import json
import sqlite3
import struct
import sys

db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT role, text, tokens, reasoning FROM messages WHERE conv_id = "
                  "(SELECT MAX(id) FROM conversations) ORDER BY seq").fetchall()
if rows and rows[-1][0] == 2:
    rows = rows[:-1]
ids, msgs = [], []
for role, text, blob, reasoning in rows:
    ids += struct.unpack("<%di" % (len(blob) // 4), blob)
    msgs.append({"role": ["system", "user", "assistant"][role], "content": text})
    if reasoning is not None:
        msgs[-1]["reasoning_content"] = msgs[-1]["thinking"] = reasoning
print(" ".join(str(i) for i in ids))
print(json.dumps(msgs, ensure_ascii=False))
