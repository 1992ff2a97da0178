#!/bin/sh
# Fetch the real models the suite's real-file tests use, once per machine,
# into ${XDG_CACHE_HOME:-$HOME/.cache}/kvchat/models (the tests look there
# and SKIP without them). A good copy already there is left alone (the
# shared fetch script checks its sha256 first). Failures only warn: the
# suite never depends on the network.
#   scripts/fetch-models.sh          (KVCHAT_SHARED: the ../shared folder, default beside the checkout)
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${KVCHAT_SHARED:-$root/../shared}
dir=${XDG_CACHE_HOME:-$HOME/.cache}/kvchat/models
script=$shared/models/fetch-gemma3-270m.sh
if [ ! -f "$script" ]; then
	echo "fetch-models: warning: no $script; the Gemma 3 tests will SKIP" >&2
	exit 0
fi
if ! sh "$script" "$dir" >/dev/null; then
	echo "fetch-models: warning: could not fetch gemma-3-270m-q4_k_m.gguf into $dir; the Gemma 3 tests will SKIP" >&2
fi
exit 0
