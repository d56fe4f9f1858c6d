#!/usr/bin/env bash
# Installs what the project needs on a Debian machine (run as root), and
# does nothing that is already done:
#   - Rust, when cargo is missing or older than the crate's rust-version,
#     or when rustup is (the fuzz targets need its nightly toolchain):
#     rustup's stable toolchain (minimal, with rustfmt and clippy) in
#     ~/.cargo (the Makefile puts ~/.cargo/bin first on PATH); rustfmt and
#     clippy added to a rustup toolchain that lacks them;
#   - for the fuzz targets (fuzz/), scripts/fuzz-setup.sh: rustup's nightly
#     toolchain (minimal) and cargo-fuzz;
#   - Debian packages: libusb-1.0-0 (LeechCore links it); gcc, g++,
#     binutils and valgrind (the C API tests compile and check C programs);
#     python3 (the demo and the bench talk to QEMU's monitor with it) and
#     procps (tests stop guests with kill);
#   - LeechCore 2.23.3 from the PyPI wheel leechcorepyc, unpacked into
#     target/leechcore/ (leechcore.so beside its device plugins);
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

LEECHCORE_VERSION=2.23.3
DRGN_VERSION=0.3.0
DRGN=target/drgn
WHEEL=leechcorepyc-${LEECHCORE_VERSION}-cp36-abi3-manylinux1_x86_64.whl
WHEEL_SHA256=bcd75aa423a078fb512e18262e66ebd34a34c0b92e2aca915756d38439acdd28
DEST=target/leechcore
GUEST=target/guest

say() { printf '[setup] %s\n' "$*"; }

scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT

apt_updated=
apt_update_once() {
    [ -n "$apt_updated" ] && return 0
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
}
apt_install() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        say "missing Debian packages: ${missing[*]}; run this as root or: sudo apt-get install ${missing[*]}"
        exit 1
    fi
    apt_update_once
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        2> >(grep -v 'since apt-utils is not installed' >&2) >/dev/null
}

apt_install libusb-1.0-0 ca-certificates curl qemu-system-x86 busybox-static cpio gcc g++ binutils gdb \
    valgrind python3 python3-venv procps

# Rust. Debian's own rustc is too old for the crate (bookworm has 1.63).
export PATH="$HOME/.cargo/bin:$PATH"
rust_min=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml | head -n 1)
rust_new_enough() {
    local v
    v=$(rustc --version 2>/dev/null | cut -d' ' -f2) || return 1
    [ -n "$v" ] && printf '%s\n%s\n' "$rust_min" "$v" | sort -V -C
}
if ! { command -v cargo >/dev/null && rust_new_enough && command -v rustup >/dev/null; }; then
    if command -v rustup >/dev/null; then
        say "installing Rust stable with rustup (rustc ${rust_min} or newer is needed)"
        rustup toolchain install stable --profile minimal -c rustfmt,clippy >/dev/null
        rustup default stable >/dev/null
    else
        say "installing Rust with rustup into ~/.cargo (rustc ${rust_min} or newer is needed)"
        rtmp=$(mktemp -d)
        scratch+=("$rtmp")
        curl --proto '=https' --tlsv1.2 -sSf -o "$rtmp/rustup-init" \
            "https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init"
        chmod +x "$rtmp/rustup-init"
        # (Beside a distribution's cargo, which it would otherwise refuse.)
        RUSTUP_INIT_SKIP_PATH_CHECK=yes \
            "$rtmp/rustup-init" -y -q --no-modify-path --profile minimal -c rustfmt,clippy >/dev/null
    fi
    rust_new_enough || { say "rustc is still older than $rust_min: $(rustc --version)"; exit 1; }
fi
if ! { cargo fmt --version && cargo clippy --version; } >/dev/null 2>&1; then
    command -v rustup >/dev/null ||
        { say "cargo fmt and cargo clippy are needed: install rustfmt and clippy for $(rustc --version)"; exit 1; }
    say "adding rustfmt and clippy to the Rust toolchain"
    rustup component add rustfmt clippy >/dev/null
fi

scripts/fuzz-setup.sh

if ! { [ -f "$DEST/VERSION" ] && [ "$(cat "$DEST/VERSION")" = "$LEECHCORE_VERSION" ] && [ -f "$DEST/leechcore.so" ]; }; then
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    tmp=$(mktemp -d)
    scratch+=("$tmp")
    say "downloading leechcorepyc==$LEECHCORE_VERSION (LeechCore's own build of leechcore.so)"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
        --dest "$tmp" "leechcorepyc==$LEECHCORE_VERSION"
    echo "$WHEEL_SHA256  $tmp/$WHEEL" | sha256sum --check --quiet
    python3 -m zipfile -e "$tmp/$WHEEL" "$tmp/x"
    mkdir -p "$DEST"
    # leechcore.so, its device plugins and the libraries they load, kept together.
    install -m 0644 "$tmp"/x/leechcorepyc/leechcore.so "$tmp"/x/leechcorepyc/leechcore_*.so \
        "$tmp"/x/leechcorepyc/libMSCompression.so "$DEST"/
    install -m 0644 "$tmp"/x/leechcorepyc-"$LEECHCORE_VERSION".dist-info/LICENSE "$DEST"/LICENSE
    echo "$LEECHCORE_VERSION" > "$DEST/VERSION"
    say "LeechCore $LEECHCORE_VERSION installed in $DEST"
fi

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
