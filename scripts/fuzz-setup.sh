#!/usr/bin/env bash
# What the fuzz targets (fuzz/) need, installed when missing (called by
# scripts/setup.sh and `make fuzz`): rustup's nightly toolchain (minimal
# profile; cargo fuzz needs nightly's -Z flags and sanitizers) with Miri,
# and cargo-fuzz, at a pinned version. Prints nothing when there is
# nothing to do.
set -euo pipefail
export PATH="$HOME/.cargo/bin:$PATH"

CARGO_FUZZ_VERSION=0.13.2

say() { printf '[setup] %s\n' "$*"; }

if ! command -v rustup >/dev/null; then
    say "the fuzz targets need rustup (for a nightly toolchain): run scripts/setup.sh, or see https://rustup.rs"
    exit 1
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    say "installing Rust nightly (minimal) for the fuzz targets"
    rustup toolchain install nightly --profile minimal >/dev/null 2>&1 ||
        { rustup toolchain install nightly --profile minimal; exit 1; }
fi
# Miri too (`make miri`), here with the set-up: `make test` runs Miri beside
# the fuzz targets, which must not find their toolchain changing under them.
if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^miri'; then
    say "adding Miri to Rust nightly"
    rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1 ||
        { rustup component add --toolchain nightly miri rust-src; exit 1; }
fi
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
    say "installing cargo-fuzz $CARGO_FUZZ_VERSION (a few minutes)"
    cargo install --quiet --locked --version "$CARGO_FUZZ_VERSION" cargo-fuzz
fi
