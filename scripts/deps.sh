#!/bin/sh
# Install the Debian packages kvchat builds and tests with (does nothing
# for packages already installed). As root it runs apt-get itself; as
# another user through sudo when there is one, else it says what to
# install. curl and ca-certificates are for the README's model download
# (curl also drives kvchat serve in the tests); python3-venv makes the
# virtual environment the serve tests install the openai package into;
# gcc-aarch64-linux-gnu and qemu-user-static cross-build and run the
# aarch64 kernel tests (tests/e2e/test_neon_qemu.sh).
set -e
pkgs="build-essential autoconf automake libtool pkg-config libreadline-dev libsqlite3-dev libutf8proc-dev libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev sqlite3 clang tmux strace python3 python3-venv python3-jinja2 curl ca-certificates gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static"
missing=""
for p in $pkgs; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
	as_root=""
elif command -v sudo >/dev/null 2>&1; then
	as_root="sudo"
	echo "kvchat: installing with sudo:$missing" >&2
else
	echo "kvchat: please install, as root:$missing (apt-get install$missing)" >&2
	exit 1
fi
$as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
