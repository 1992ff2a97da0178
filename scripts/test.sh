#!/bin/sh
# The test command: install build dependencies (Debian), build in build/
# with warnings as errors, fetch the real test models once per machine,
# run the whole suite, print one summary line.
# Extra arguments go to configure (e.g. --enable-sanitizers, --without-cuda).
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh
./bootstrap
# A tree configured in place (./configure && make at the top) stops an
# out-of-tree configure ("source directory already configured"): clean it
# first. Its build outputs are outputs, nothing of the sources is lost.
if [ -f config.status ]; then
	echo "test.sh: the source tree was configured in place; 'make distclean' there first"
	if [ -f Makefile ]; then
		make distclean >/dev/null
	else
		rm -f config.status config.h config.log stamp-h1
	fi
fi
mkdir -p build
cd build
../configure --enable-werror "$@"
make -j"$(nproc)"
# the real models of the Gemma 3 and Qwen2.5-Coder tests, once per machine (never
# fatal: they SKIP without them)
sh ../scripts/fetch-models.sh || true
status=0
make -j"$(nproc)" check || status=$?
if [ -f test-suite.log ]; then
	p=$(sed -n 's/^# PASS: *//p' test-suite.log | head -1)
	f=$(sed -n 's/^# FAIL: *//p' test-suite.log | head -1)
	s=$(sed -n 's/^# SKIP: *//p' test-suite.log | head -1)
	e=$(sed -n 's/^# ERROR: *//p' test-suite.log | head -1)
	[ "$status" -ne 0 ] && cat test-suite.log
	echo "tests: ${p:-0} passed, $(( ${f:-0} + ${e:-0} )) failed, ${s:-0} skipped"
fi
exit $status
