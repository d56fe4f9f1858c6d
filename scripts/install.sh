#!/usr/bin/env bash
# Installs the product, built in BUILD_DIR (default target/release), and
# nothing of the test set-up (`make install` builds, then calls this):
#   PLUGIN_DIR/libmemflow_leechcore.so and LeechCore beside it
#       (scripts/install-plugin.sh; memflow's Inventory::scan() finds it);
#   PREFIX/bin/leechio, the command line, which finds LeechCore in PREFIX/lib;
#   PREFIX/share/man/man1/leechio.1 and leechio-COMMAND.1, made from the
#       command line's own definitions;
#   PREFIX/lib/libleechio.so, .a, LeechCore, PREFIX/include/leechio.h,
#       leechio.hpp (scripts/install-c.sh).
# usage: scripts/install.sh PLUGIN_DIR PREFIX [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 PLUGIN_DIR PREFIX [BUILD_DIR]" >&2; exit 2; }
plugins=$1
prefix=$2
build=${3:-target/release}
[ -f "$build/leechio" ] || { echo "install: $build/leechio is missing; run \`make cli\`" >&2; exit 1; }
[ -f target/leechcore/leechcore.so ] || { echo "install: LeechCore is missing; run \`make deps\`" >&2; exit 1; }
scripts/install-plugin.sh "$plugins"
scripts/install-c.sh "$prefix" "$build"
install -d "$prefix/bin" "$prefix/share/man/man1"
install -m 0755 "$build/leechio" "$prefix/bin/"
pages=$("$prefix/bin/leechio" man "$prefix/share/man/man1" | wc -l)
echo "installed leechio into $prefix/bin and its $pages man pages into $prefix/share/man/man1"
