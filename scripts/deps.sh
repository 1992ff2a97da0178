#!/bin/sh
# Install the Debian packages kvchat builds and tests with (needs root;
# does nothing for packages already installed).
set -e
pkgs="build-essential autoconf automake libtool pkg-config libreadline-dev libsqlite3-dev libutf8proc-dev sqlite3 clang tmux python3"
missing=""
for p in $pkgs; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "kvchat: please install:$missing (e.g. sudo apt-get install$missing)" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq $missing
