#!/bin/sh
# Fetch the real models the suite's real-file tests use, once per machine,
# into ${XDG_CACHE_HOME:-$HOME/.cache}/kvchat/models (the tests look there
# and SKIP without them): Gemma 3 270M (base) and Qwen2.5-Coder-0.5B-Instruct
# (a chat model with its ChatML template). A good copy already there is left
# alone (the shared fetch scripts check their sha256 first). Failures only
# warn: the suite never depends on the network.
#   scripts/fetch-models.sh          (KVCHAT_SHARED: the ../shared folder, default beside the checkout)
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${KVCHAT_SHARED:-$root/../shared}
dir=${XDG_CACHE_HOME:-$HOME/.cache}/kvchat/models
# fetch SCRIPT FILE WHICH: one model; a warning when it cannot be had
fetch() {
	script=$shared/models/$1
	if [ ! -f "$script" ]; then
		echo "fetch-models: warning: no $script; the $3 tests will SKIP" >&2
	elif ! sh "$script" "$dir" >/dev/null; then
		echo "fetch-models: warning: could not fetch $2 into $dir; the $3 tests will SKIP" >&2
	fi
}
fetch fetch-gemma3-270m.sh gemma-3-270m-q4_k_m.gguf "Gemma 3"
fetch fetch-qwen25-coder-0.5b.sh qwen2.5-coder-0.5b-instruct-q4_k_m.gguf "Qwen2.5-Coder"
exit 0
