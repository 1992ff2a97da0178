#!/bin/sh
# test_reasoning.sh (issue 23): reasoning models through the chat, on
# fixture models carrying the real templates (mkmodel --chat-template) of
# Qwen3 (thinking on and off), gpt-oss (harmony, effort low and high) and
# a DeepSeek-R1 distill (the generation prompt opens <think>). A fixture's
# random weights write no reasoning, so the replies are scripted
# (KVCHAT_TEST_REPLIES): the model computes every scripted token and the
# rest is the real path: the reasoning told from the answer, stored in its
# own column, piped output the answer only (--show-thinking: both), and
# the next prompt rendered with the reasoning as the template says: it is
# byte-identical to Python's jinja2 on the stored messages, the earlier
# reasoning is not in it, the cache holds exactly its tokens, and turn 2
# kept the cached prefix and computed only the rest, the stats saying how
# many cached positions were cut and why.
. "$top_srcdir/tests/e2e/lib.sh"
have_shared || skip "no shared data (../shared/data): the real chat templates"
command -v python3 >/dev/null 2>&1 || skip "python3 not installed"
python3 -c 'import jinja2' 2>/dev/null || skip "Python's jinja2 not installed (python3-jinja2)"
TD="$SHARED_DATA/chat-templates/llama.cpp"

# chat NAME TEMPLATE REPLIES [OPTIONS...]: two turns on a fixture with TEMPLATE.
chat() {
	n=$1 t=$2 rep=$3
	shift 3
	"$MKMODEL" -o "$TMPD/$n.gguf" --preset tiny --arch qwen2 --type f32 --vocab bpe --ctx 1024 \
	    --seed 7 --chat-template "$TD/$t" --quiet || { fail "$n: mkmodel"; return 1; }
	printf '%s\n' "$rep" >"$TMPD/$n.replies"
	printf 'Hi.\nAnd now?\n' | KVCHAT_TEST_REPLIES="$TMPD/$n.replies" "$KVCHAT" -m "$TMPD/$n.gguf" \
	    --temp 0 --ctx 1024 --threads 2 --db "$TMPD/$n.db" --stats-json "$TMPD/$n.json" "$@" \
	    >"$TMPD/$n.out" 2>"$TMPD/$n.err"
	check "$n: two turns exit 0 ($(tail -1 "$TMPD/$n.err"))" [ $? -eq 0 ]
}
col() { sqlite3 "$TMPD/$1.db" "SELECT $2 FROM messages WHERE seq = $3"; }
# next_prompt NAME VARS: the stored conversation's next prompt against jinja2 and the cache
next_prompt() {
	n=$1 vars=$2
	python3 "$top_srcdir/tests/e2e/chat_stream.py" "$TMPD/$n.db" >"$TMPD/$n.stream"
	sed -n 2p "$TMPD/$n.stream" >"$TMPD/$n.msgs"
	printf '{{ bos_token }}\n{{ eos_token }}' >"$TMPD/be.jinja"
	be=$(printf '[]' | "$KVCHAT" template -m "$TMPD/$n.gguf" --template "$TMPD/be.jinja")
	printf '{%s, "bos_token": "%s", "eos_token": "%s", "template": "%s", "dropped": true}' "$vars" \
	    "$(printf '%s' "$be" | sed -n 1p)" "$(printf '%s' "$be" | sed -n 2p)" "$TD/$t" >"$TMPD/$n.vars"
	python3 "$top_srcdir/tests/e2e/reasoning_check.py" "$TMPD/$n.msgs" "$TMPD/$n.vars" -- \
	    "$KVCHAT" template -m "$TMPD/$n.gguf" >"$TMPD/$n.check"
	check "$n: next prompt = jinja2's, earlier reasoning dropped ($(tail -1 "$TMPD/$n.check"))" [ $? -eq 0 ]
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d.pop("template"); d.pop("dropped")
d["messages"] = json.load(open(sys.argv[2])); print(json.dumps(d))' "$TMPD/$n.vars" "$TMPD/$n.msgs" \
	    >"$TMPD/$n.obj"
	"$KVCHAT" template -m "$TMPD/$n.gguf" --template "$TD/$t" --add-generation-prompt \
	    <"$TMPD/$n.obj" >"$TMPD/$n.prompt"
	"$KVCHAT" template -m "$TMPD/$n.gguf" --template "$TD/$t" --ids --add-generation-prompt \
	    <"$TMPD/$n.obj" >"$TMPD/$n.ids"
	check "$n: the cache held exactly the rendered prompt's tokens" \
	    [ "$(head -1 "$TMPD/$n.stream")" = "$(cat "$TMPD/$n.ids")" ]
}
# delta_only NAME: turn 2 kept the first prompt (but for its generation prompt's tail) and computed the rest
delta_only() {
	n=$1
	p1=$(jget "$TMPD/$n.json" 1 prompt_tokens); r2=$(jget "$TMPD/$n.json" 2 reused_tokens)
	c2=$(jget "$TMPD/$n.json" 2 prefill_tokens); u2=$(jget "$TMPD/$n.json" 2 context_used)
	g2=$(jget "$TMPD/$n.json" 2 gen_tokens); w2=$(jget "$TMPD/$n.json" 2 rewritten_tokens)
	check "$n: turn 2 reuses turn 1's prompt ($r2 of $p1)" [ "$r2" -ge $((p1 - 8)) ]
	check "$n: turn 2 computes only the rest ($r2 + $c2 + $g2 = $u2)" [ $((r2 + c2 + g2)) -eq "$u2" ]
	check "$n: the cut is said ($w2 positions)" [ "$w2" -gt 0 ]
	check "$n: ... and why" grep -q '"rewrite_reason":"the template drops an earlier reply' "$TMPD/$n.json"
	check "$n: the stats line says it" grep -q "cache cut back $w2 positions" "$TMPD/$n.err"
}

# Qwen3, thinking on: <think> in the reply.
Q3=Qwen-Qwen3-0.6B.jinja
chat q3on $Q3 '<think>\nThe user greets me.\n</think>\n\nHello!<|im_end|>
<think>\nA second thought.\n</think>\n\nStill here.<|im_end|>' --think on
check "q3on: piped, the answers only" [ "$(cat "$TMPD/q3on.out")" = "$(printf 'Hello!\n\nStill here.\n')" ]
check "q3on: the answer stored as the text" [ "$(col q3on text 1)" = "Hello!" ]
check "q3on: the reasoning in its own column" [ "$(col q3on reasoning 1)" = "The user greets me." ]
check "q3on: thinking counted" [ "$(jget "$TMPD/q3on.json" 1 reasoning_tokens)" -gt 0 ]
check "q3on: the stats line says thinking" grep -q "thinking [0-9]* tokens" "$TMPD/q3on.err"
next_prompt q3on '"enable_thinking": true'
delta_only q3on
# --show-thinking prints the reasoning piped too
chat q3show $Q3 '<think>\nShown.\n</think>\n\nYes.<|im_end|>' --think on --show-thinking
check "q3show: --show-thinking prints the reasoning" grep -q "^Shown.$" "$TMPD/q3show.out"

# Qwen3, thinking off: the prompt closes an empty block, the reply has none.
chat q3off $Q3 'No thinking.<|im_end|>
Nor now.<|im_end|>' --think off
check "q3off: no reasoning stored" [ "$(col q3off 'reasoning IS NULL' 1)" = 1 ]
check "q3off: no thinking counted" [ "$(jget "$TMPD/q3off.json" 1 reasoning_tokens)" -eq 0 ]
next_prompt q3off '"enable_thinking": false'

# gpt-oss: harmony's analysis channel is the reasoning, final the answer;
# the effort reaches the system message.
OSS=openai-gpt-oss-120b.jinja
for e in low high; do
	chat "oss$e" $OSS '<|channel|>analysis<|message|>Plan the answer.<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>
<|channel|>analysis<|message|>Plan again.<|end|><|start|>assistant<|channel|>final<|message|>Twice.<|return|>' \
	    --reasoning-effort $e
	check "oss$e: piped, the final channel only" [ "$(cat "$TMPD/oss$e.out")" = "$(printf 'Done.\n\nTwice.\n')" ]
	check "oss$e: the analysis stored as reasoning" [ "$(col "oss$e" reasoning 1)" = "Plan the answer." ]
	check "oss$e: the final message as the text" [ "$(col "oss$e" text 3)" = "Twice." ]
	next_prompt "oss$e" "\"reasoning_effort\": \"$e\""
	check "oss$e: Reasoning: $e in the prompt" grep -q "Reasoning: $e" "$TMPD/oss$e.prompt"
	delta_only "oss$e"
done
check "gpt-oss: the effort changes the prompt" [ "$(head -1 "$TMPD/osslow.stream")" != "$(head -1 "$TMPD/osshigh.stream")" ]

# DeepSeek-R1 distill: the generation prompt opens <think>, the model writes only its close.
R1=deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja
chat r1 $R1 'Let me see.\n</think>\n\nSeven.<|im_end|>
Again.\n</think>\n\nEight.<|im_end|>' --think on
check "r1: piped, the answers only" [ "$(cat "$TMPD/r1.out")" = "$(printf 'Seven.\n\nEight.\n')" ]
check "r1: reasoning opened by the prompt, stored" [ "$(col r1 reasoning 1)" = "Let me see." ]
next_prompt r1 '"enable_thinking": true'
delta_only r1
done_testing
