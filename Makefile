# The project's commands. `make test` is what CI runs (.ci/run).
.PHONY: setup test check unit plugin install

CARGO ?= cargo
# Where scripts/setup.sh installs Rust when the machine has none (or one too
# old); first, so that it wins over an old Debian rustc.
export PATH := $(HOME)/.cargo/bin:$(PATH)
# memflow's default plugin folder; `make install MEMFLOW_PLUGINS=…` to change.
MEMFLOW_PLUGINS ?= $(HOME)/.local/lib/memflow

## setup: install what the project needs (idempotent; run as root on Debian)
setup:
	@scripts/setup.sh

## check: formatting and lints
check:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## plugin: the memflow plugin, built on its own so no test-only feature
## (memflow's dummy_mem) leaks into it: target/release/libmemflow_leechcore.so
plugin:
	$(CARGO) build --release -p memflow-leechcore

## unit: the whole test suite, without set-up
unit: plugin ffi
	$(CARGO) test --workspace

## install: the plugin with LeechCore beside it, where memflow looks
install: setup plugin
	scripts/install-plugin.sh "$(MEMFLOW_PLUGINS)"

## test: set-up, then formatting, lints and every test
test: setup check unit

## fresh: `make test` then `make demo` on a fresh Debian 12 in a chroot
## (as root; about 7 minutes): catches an install step the set-up forgot
.PHONY: fresh
fresh:
	@scripts/fresh-debian.sh

# The C and C++ API (ffi/): libleechio.so, libleechio.a, ffi/include/.
.PHONY: ffi header install-c
# `make install-c PREFIX=…` to change.
PREFIX ?= /usr/local

## ffi: the C library, release build: target/release/libleechio.{so,a}
ffi:
	$(CARGO) build --release -p leechio-ffi

## header: regenerate ffi/include/leechio.h from ffi/src (cbindgen); a test
## fails while the committed header is out of date
header:
	LEECHIO_WRITE_HEADER=1 $(CARGO) test -p leechio-ffi --test header

## install-c: headers into PREFIX/include, libleechio and LeechCore into PREFIX/lib
install-c: setup ffi
	scripts/install-c.sh "$(PREFIX)"

# The tour and the end-to-end benchmark table (both boot a QEMU guest).
.PHONY: demo bench

## demo: the first command for a newcomer: set-up, release builds, a Linux
## guest under QEMU, then leechio info, spaces, translate, dump and a short
## bench against it, each explained; the guest is stopped at the end
demo:
	@scripts/demo.sh

## bench: BENCHMARKS.md, the table of `leechio bench` on an image of the
## guest and on the live guest behind an emulated FPGA board (~3 minutes)
bench:
	@scripts/bench.sh
