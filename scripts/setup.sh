#!/usr/bin/env bash
# Installs what the tests, the demo and the benchmarks need on a Debian
# machine (run as root), after what the product itself needs
# (scripts/deps.sh --rustup: the C linker, libusb, Rust with rustup,
# LeechCore in target/leechcore/), and does nothing that is already done:
#   - for the fuzz targets (fuzz/) and Miri, scripts/fuzz-setup.sh:
#     rustup's nightly toolchain (minimal) and cargo-fuzz;
#   - Debian packages: g++, binutils and valgrind (the C API tests compile
#     and check C and C++ programs); gdb (tests read dumps with it);
#     procps (tests stop guests with kill);
#   - drgn (a kernel debugger, from PyPI) in a virtual environment in
#     target/drgn/, with Debian's python3-venv: a test opens leechio's
#     dumps with it, as a user of crash or drgn would (the VMCOREINFO note);
#   - for the live-guest tests (scripts/guest.sh): Debian's qemu-system-x86
#     (no GUI), busybox-static and cpio, and the kernel of Debian's
#     linux-image-amd64 and of its cloud flavour linux-image-cloud-amd64 (a
#     second kernel for tests), of which vmlinuz and three small modules
#     are kept, in target/guest/ (booted by QEMU, never installed on this
#     machine).
# Prints nothing when there is nothing to do.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup-lib.sh

scripts/deps.sh --rustup
export PATH="$HOME/.cargo/bin:$PATH"

DRGN_VERSION=0.3.0
DRGN=target/drgn
GUEST=target/guest

apt_install qemu-system-x86 busybox-static cpio g++ binutils gdb valgrind python3-venv procps

scripts/fuzz-setup.sh

if ! "$DRGN/bin/python" -c "import sys, drgn; sys.exit(drgn.__version__ != '$DRGN_VERSION')" 2>/dev/null; then
    say "installing drgn $DRGN_VERSION from PyPI in $DRGN"
    rm -rf "$DRGN"
    python3 -m venv "$DRGN"
    "$DRGN/bin/pip" install --quiet --disable-pip-version-check "drgn==$DRGN_VERSION"
fi

# The guest kernels: linux-image-amd64 is a metapackage; the kernel is the
# linux-image-* package it depends on. Its files are pulled out of the .deb:
# vmlinuz, and the few small modules the guest loads (GUEST_MODULES, those
# the package has, uncompressed: busybox's insmod reads plain .ko files) in
# target/guest/modules/VERSION/, so the tests see loaded modules in
# /proc/modules (the package's System.map is a placeholder; the guest
# prints the symbols the tests need itself).
# `fetch_kernel METAPACKAGE SUFFIX` keeps it as target/guest/vmlinuz-SUFFIX
# with its version in KERNEL-SUFFIX (vmlinuz and KERNEL when SUFFIX is empty).
# (Three, on every kernel: the module views' call counts are the tests' for
# three. dummy: its device, dummy0, is the guest's network card with an
# address of its own.) The list is kept beside the modules: a list changed here
# fetches them again.
GUEST_MODULES="crc7 crc-itu-t dummy"
fetch_kernel() {
    local meta=$1 suffix=${2:+-$2} pkg version ktmp ko name
    if [ -f "$GUEST/vmlinuz$suffix" ] && [ -f "$GUEST/KERNEL$suffix" ] &&
        [ "$(cat "$GUEST/modules/$(cat "$GUEST/KERNEL$suffix")/.wanted" 2>/dev/null)" = "$GUEST_MODULES" ]; then
        return 0
    fi
    kernel_package() {
        apt-cache depends "$meta" 2>/dev/null |
            sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n 1
    }
    pkg=$(kernel_package)
    if [ -z "$pkg" ]; then
        apt_update_once
        pkg=$(kernel_package)
    fi
    [ -n "$pkg" ] || { say "cannot find the kernel package $meta depends on"; exit 1; }
    ktmp=$(mktemp -d)
    scratch+=("$ktmp")
    say "downloading $pkg (a guest kernel)"
    # As root, apt fetches into a folder its sandbox user cannot write to.
    (cd "$ktmp" && apt-get download -qq -o APT::Sandbox::User=root "$pkg" >/dev/null)
    version=${pkg#linux-image-}
    # The members wanted, as the package names them.
    local members=("./boot/vmlinuz-$version") listing
    listing=$(dpkg-deb --fsys-tarfile "$ktmp"/"$pkg"_*.deb | tar -t)
    for name in $GUEST_MODULES; do
        # (The version as a fixed string: Debian 13's has a `+` in it.)
        ko=$(grep -F "/modules/$version/" <<<"$listing" |
            grep -E "/$name\.ko(\.xz)?\$" | head -n 1 || true)
        case "$ko" in
            '') say "$pkg has no module $name; the guest loads the others" ;;
            *) members+=("$ko") ;;
        esac
    done
    mkdir -p "$ktmp/root"
    dpkg-deb --fsys-tarfile "$ktmp"/"$pkg"_*.deb | tar -x -C "$ktmp/root" "${members[@]}"
    mkdir -p "$GUEST"
    install -m 0644 "$ktmp/root/boot/vmlinuz-$version" "$GUEST/vmlinuz$suffix"
    rm -rf "$GUEST/modules/$version"
    mkdir -p "$GUEST/modules/$version"
    for ko in "${members[@]:1}"; do
        name=$(basename "$ko")
        case "$ko" in
            *.xz) python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' \
                "$ktmp/root/$ko" >"$GUEST/modules/$version/${name%.xz}" ;;
            *) install -m 0644 "$ktmp/root/$ko" "$GUEST/modules/$version/$name" ;;
        esac
    done
    echo "$GUEST_MODULES" >"$GUEST/modules/$version/.wanted"
    echo "$version" > "$GUEST/KERNEL$suffix"
    say "guest kernel $version in $GUEST/vmlinuz$suffix, modules in $GUEST/modules/$version"
}
fetch_kernel linux-image-amd64 ''
fetch_kernel linux-image-cloud-amd64 cloud
