#!/usr/bin/env bash
# Installs what the project needs on a Debian machine (run as root), and
# does nothing that is already done:
#   - Debian packages: libusb-1.0-0 (LeechCore links it);
#   - LeechCore 2.23.3 from the PyPI wheel leechcorepyc, unpacked into
#     target/leechcore/ (leechcore.so beside its device plugins).
set -euo pipefail
cd "$(dirname "$0")/.."

LEECHCORE_VERSION=2.23.3
WHEEL=leechcorepyc-${LEECHCORE_VERSION}-cp36-abi3-manylinux1_x86_64.whl
WHEEL_SHA256=bcd75aa423a078fb512e18262e66ebd34a34c0b92e2aca915756d38439acdd28
DEST=target/leechcore

say() { printf '[setup] %s\n' "$*"; }

apt_updated=
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
    if [ -z "$apt_updated" ]; then
        say "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

command -v cargo >/dev/null || { say "cargo not found: install Rust (https://rustup.rs) first"; exit 1; }

apt_install libusb-1.0-0 ca-certificates

if [ -f "$DEST/VERSION" ] && [ "$(cat "$DEST/VERSION")" = "$LEECHCORE_VERSION" ] && [ -f "$DEST/leechcore.so" ]; then
    say "LeechCore $LEECHCORE_VERSION already in $DEST"
else
    command -v python3 >/dev/null || apt_install python3
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
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
