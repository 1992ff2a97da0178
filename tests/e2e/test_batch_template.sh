#!/bin/sh
# test_batch_template.sh (issue 23): kvchat batch renders the messages form
# with the file's own template, as the chat does: a fixture carrying a
# template of its own (mkmodel --chat-template) gets a prompt of exactly
# `kvchat template --ids --add-generation-prompt`'s tokens and the reply
# `kvchat generate` gives on them; --chat-template chatml still picks the
# family.
. "$top_srcdir/tests/e2e/lib.sh"
printf '%s' '{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}' >"$TMPD/own.jinja"
"$MKMODEL" -o "$TMPD/t.gguf" --preset tiny --arch qwen2 --type f32 --vocab bpe --ctx 512 --seed 5 \
    --chat-template "$TMPD/own.jinja" --quiet || { echo "FAIL: mkmodel"; exit 1; }
msgs='[{"role": "system", "content": "Be brief."}, {"role": "user", "content": " one "}]'
printf '{"messages": %s, "max_tokens": 8, "temperature": 0}\n' "$msgs" >"$TMPD/in.jsonl"
"$KVCHAT" batch -m "$TMPD/t.gguf" -f "$TMPD/in.jsonl" --quiet >"$TMPD/out" 2>"$TMPD/err"
check "batch exits 0 ($(tail -1 "$TMPD/err"))" [ $? -eq 0 ]
check "no fallback notice" sh -c "! grep -q 'cannot be used\|chatml' '$TMPD/err'"
printf '%s' "$msgs" | "$KVCHAT" template -m "$TMPD/t.gguf" --ids --add-generation-prompt >"$TMPD/ids"
check "the file's template renders the prompt ($(wc -w <"$TMPD/ids") tokens)" \
    [ "$(jget "$TMPD/out" 1 prompt_tokens)" = "$(wc -w <"$TMPD/ids" | tr -d ' ')" ]
want=$("$KVCHAT" generate -m "$TMPD/t.gguf" -n 8 --temp 0 --prompt-ids "$(tr -s ' \n' ',' <"$TMPD/ids" |
    sed 's/,$//')" --ids | tr '\n' ' ' | sed 's/ *$//')
got=$(sed -n 's/.*"ids":\[\([0-9,]*\)\].*/\1/p' "$TMPD/out" | tr ',' ' ')
check "the reply is generate's on those tokens ($got)" [ "$got" = "$want" ]
"$KVCHAT" batch -m "$TMPD/t.gguf" -f "$TMPD/in.jsonl" --quiet --chat-template chatml >"$TMPD/out2" 2>/dev/null
printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n one <|im_end|>\n<|im_start|>assistant\n' |
    "$KVCHAT" tokenize -m "$TMPD/t.gguf" --parse-special >"$TMPD/chatml.ids"
check "--chat-template chatml: the family's prompt" \
    [ "$(jget "$TMPD/out2" 1 prompt_tokens)" = "$(wc -w <"$TMPD/chatml.ids" | tr -d ' ')" ]
check "... and another reply" [ "$(sed -n 's/.*"ids":\[\([0-9,]*\)\].*/\1/p' "$TMPD/out2")" != \
    "$(sed -n 's/.*"ids":\[\([0-9,]*\)\].*/\1/p' "$TMPD/out")" ]
done_testing
