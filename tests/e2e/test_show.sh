#!/bin/sh
# test_show.sh (issue 13 "commands as people type them"): /show says each
# fact once, in binary units only, with ollama's views (/show info,
# parameters, system, template); "weights" is the bytes of tensor data in
# the file, checked against an independent GGUF reader (python3,
# tests/e2e/gguf_weight_bytes.py) on a file of one type and a mixed one.
. "$top_srcdir/tests/e2e/lib.sh"
. "$top_srcdir/tests/e2e/lib_tmux.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 is not installed (scripts/deps.sh installs it)"; exit 1; }
DB="$TMPD/s.db"
# screen_after MARK: the screen from the last line holding MARK on
screen_after() { screen | awk -v m="$1" 'index($0, m) { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }'; }

for type in f32 q4_k_m; do
	M="$TMPD/m-$type.gguf"
	"$MKMODEL" -o "$M" --preset tiny --arch qwen2 --type "$type" --vocab bpe --ctx 4096 \
	    --seed 61 --quiet >/dev/null || { echo "FAIL: mkmodel $type"; exit 1; }
	want=$(python3 "$top_srcdir/tests/e2e/gguf_weight_bytes.py" "$M")
	echo "$type: $want bytes of weights by the independent reader"
	start -m "$M" --db "$DB" --new "show $type" --temp 0 -n 2 --system "Answer briefly."
	wait_for "the prompt ($type)" prompt_ready
	cmd "/show info"
	check "$type: /show info: weights = $want bytes" on_screen "($want bytes in the file)"
	cmd "/show"
	screen_after ">>> /show" | sed '1d' >"$TMPD/show.txt"
	for key in model architecture weights context "kv cache" backend fingerprint database \
	    conversation template system temperature max_tokens; do
		check "$type: /show says '$key' once" [ "$(grep -c "^$key " "$TMPD/show.txt")" -eq 1 ]
	done
	check "$type: /show's model path once" [ "$(grep -cF "$M" "$TMPD/show.txt")" -eq 1 ]
	check "$type: one unit system (no decimal MB/GB/KB)" sh -c "! grep -Eq '[0-9] (KB|MB|GB)\\b' '$TMPD/show.txt'"
	check "$type: binary units" grep -Eq '[0-9] (KiB|MiB|GiB)' "$TMPD/show.txt"
	check "$type: /show has the weights in bytes" grep -qF "($want bytes in the file)" "$TMPD/show.txt"
	cmd "/show parameters"
	screen_after ">>> /show parameters" | sed '1d' >"$TMPD/par.txt"
	check "$type: /show parameters: temperature 0" grep -q '^temperature *0$' "$TMPD/par.txt"
	check "$type: /show parameters: max_tokens 2" grep -q '^max_tokens *2$' "$TMPD/par.txt"
	check "$type: /show parameters: no model facts" sh -c "! grep -q '^weights' '$TMPD/par.txt'"
	cmd "/show system"
	check "$type: /show system" [ "$(screen_after ">>> /show system" | sed -n 2p)" = "Answer briefly." ]
	cmd "/show template"
	check "$type: /show template: the file's own, rendered" on_screen "template     jinja"
	check "$type: /show template: the file's template text" on_screen "add_generation_prompt"
	cmd "/show nonsense"
	check "$type: /show with an unknown view: usage" on_screen "usage: /show [info|parameters|system|template]"
	text "/quit"; keys Enter
	wait_for "exit ($type)" on_screen "KVCHAT-EXIT:0"
done
done_testing
