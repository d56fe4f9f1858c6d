#!/usr/bin/env bash
# Installs leechio's C and C++ API under a prefix:
#   PREFIX/include/leechio.h, leechio.hpp
#   PREFIX/lib/libleechio.so, libleechio.a
#   PREFIX/lib/leechcore.so and its device plugins (from `make deps`), because
#   libleechio.so looks for leechcore.so beside itself first.
#   PREFIX/share/leechio/leechio.supp, valgrind's suppressions for
#   libleechio's process-lifetime blocks (see ffi/README.md).
# Usage: scripts/install-c.sh PREFIX [BUILD_DIR]
#   BUILD_DIR is where cargo put libleechio (default target/release, which
#   the tests of ffi/tests/c_api.rs pass too).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 PREFIX [BUILD_DIR]" >&2; exit 2; }
prefix=$1
build=${2:-target/release}
for lib in libleechio.so libleechio.a; do
    [ -f "$build/$lib" ] || { echo "install-c: $build/$lib is missing; run \`make ffi\`" >&2; exit 1; }
done
install -d "$prefix/include" "$prefix/lib" "$prefix/share/leechio"
install -m 0644 ffi/include/leechio.h ffi/include/leechio.hpp "$prefix/include/"
install -m 0644 ffi/leechio.supp "$prefix/share/leechio/"
install -m 0755 "$build/libleechio.so" "$prefix/lib/"
install -m 0644 "$build/libleechio.a" "$prefix/lib/"
if [ -f target/leechcore/leechcore.so ]; then
    install -m 0644 target/leechcore/*.so "$prefix/lib/"
    lc="and LeechCore $(cat target/leechcore/VERSION) "
else
    # Not fatal: libleechio also finds LeechCore through LEECHCORE_LIB or
    # the dynamic linker.
    echo "install-c: LeechCore is missing (run \`make deps\`); installing libleechio without it" >&2
    lc=
fi
echo "installed leechio.h, leechio.hpp, libleechio.so, libleechio.a, leechio.supp ${lc}into $prefix"
