#!/usr/bin/env bash
# Installs what leechio needs to be built and to run, and nothing for its
# tests (run as root on Debian; `make install` calls it, and so does
# scripts/setup.sh before the test set-up). Does nothing that is already
# done, and prints nothing then:
#   - Debian packages: gcc and libc6-dev (Rust links with them), libusb-1.0-0
#     (LeechCore links it), curl and ca-certificates (to fetch rustup),
#     python3 (and python3-pip when pip is missing) to fetch LeechCore's wheel;
#   - Rust, when cargo is missing or older than the crate's rust-version:
#     rustup's stable toolchain (minimal, with rustfmt and clippy) in
#     ~/.cargo (the Makefile puts ~/.cargo/bin first on PATH). With
#     --rustup, also when cargo is new enough but rustup is missing (the
#     test set-up needs its nightly toolchain for Miri and the fuzz targets);
#   - LeechCore 2.23.3 from the PyPI wheel leechcorepyc (checked against a
#     pinned SHA-256), unpacked into target/leechcore/ (leechcore.so beside
#     its device plugins and the libraries they load).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup-lib.sh

want_rustup=
[ "${1:-}" = --rustup ] && want_rustup=1

LEECHCORE_VERSION=2.23.3
WHEEL=leechcorepyc-${LEECHCORE_VERSION}-cp36-abi3-manylinux1_x86_64.whl
WHEEL_SHA256=bcd75aa423a078fb512e18262e66ebd34a34c0b92e2aca915756d38439acdd28
DEST=target/leechcore

apt_install gcc libc6-dev libusb-1.0-0 ca-certificates curl python3

# Rust. Debian's own rustc is too old for the crate (bookworm has 1.63).
export PATH="$HOME/.cargo/bin:$PATH"
rust_min=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml | head -n 1)
rust_new_enough() {
    local v
    v=$(rustc --version 2>/dev/null | cut -d' ' -f2) || return 1
    [ -n "$v" ] && printf '%s\n%s\n' "$rust_min" "$v" | sort -V -C
}
if ! { command -v cargo >/dev/null && rust_new_enough && { [ -z "$want_rustup" ] || command -v rustup >/dev/null; }; }; then
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

