# The project's commands. `make test` is what CI runs (.ci/run).
.PHONY: deps setup test check unit plugin cli install

CARGO ?= cargo
# Where scripts/setup.sh installs Rust when the machine has none (or one too
# old); first, so that it wins over an old Debian rustc.
export PATH := $(HOME)/.cargo/bin:$(PATH)
# memflow's default plugin folder; `make install MEMFLOW_PLUGINS=…` to change.
MEMFLOW_PLUGINS ?= $(HOME)/.local/lib/memflow
# Where `make install` and `make install-c` put the command line, the C
# library and the headers; `make install PREFIX=…` to change.
PREFIX ?= /usr/local

## deps: install what the product needs to build and run, nothing more: the C
## linker, libusb, Rust, LeechCore in target/leechcore/ (idempotent; as root on
## Debian)
deps:
	@scripts/deps.sh

## setup: deps, then what the tests, the demo and the benchmarks need: QEMU,
## the guest kernels, gdb, valgrind, drgn, Rust nightly (idempotent; as root)
setup:
	@scripts/setup.sh
# Cargo cannot watch for a file that is not there yet: when the set-up put
# something new in target/, the next build looks for it again (build/lab.rs);
# otherwise nothing is rebuilt.
	@[ -z "$$(find target/leechcore target/guest target/drgn -newer build/lab.rs -print -quit 2>/dev/null)" ] || \
	  touch build/lab.rs

## check: formatting, lints, and no Rust file over 500 lines outside tests
## (tests.rs files and tests/ folders): a longer one is split by concern
check:
	$(CARGO) fmt --all --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	@find . -name '*.rs' -not -path './target/*' -not -path './fuzz/target/*' \
	  -not -path '*/tests/*' -not -name tests.rs -exec wc -l {} + | \
	  awk '$$2 != "total" && $$1 > 500 { print $$2 ": " $$1 " lines, over 500: split it by concern"; long = 1 } END { exit long }'

## plugin: the memflow plugin, built on its own so no test-only feature
## (memflow's dummy_mem) leaks into it: target/release/libmemflow_leechcore.so
plugin:
	$(CARGO) build --release -p memflow-leechcore

## cli: the command line, release build: target/release/leechio
cli:
	$(CARGO) build --release -p leechio-cli

## unit: the whole test suite, every test run: the build fails if
## anything `make setup` installs is missing (LEECHIO_REQUIRE_LAB), where
## `cargo test` alone would ignore the tests that need it
# (Set for the release builds too, so a missing set-up stops the first one.)
unit: export LEECHIO_REQUIRE_LAB = 1
unit: plugin ffi cli
	$(CARGO) test --workspace

## install: the product and only what it needs (deps): the plugin with
## LeechCore beside it where memflow looks (MEMFLOW_PLUGINS); the `leechio`
## command line, its man pages, libleechio and its headers, and LeechCore
## under PREFIX (bin, share/man, lib, include)
install: deps plugin ffi cli
	scripts/install.sh "$(MEMFLOW_PLUGINS)" "$(PREFIX)"

## test: set-up, then formatting, lints, every test, then the unit tests
## under Miri (see `make miri`) beside every fuzz target for a minute (see
## `make fuzz`): each of those two keeps one core busy, so they share the
## machine's two rather than take turns
test: setup check unit
	@$(MAKE) --no-print-directory -j2 miri fuzz-minute

# Each fuzz target for a minute, as `make test` runs them.
.PHONY: fuzz-minute
fuzz-minute:
	@scripts/fuzz.sh 60

## fresh: `make test` then `make demo` on a fresh Debian in a chroot, 12
## (bookworm) unless `DEBIAN=trixie` (13) or another release is given (as
## root; about an hour): catches an install step the set-up forgot.
## In /var/tmp/leechio-fresh unless FRESH_DIR=DIR (removed first if it exists)
DEBIAN ?= bookworm
FRESH_DIR ?= /var/tmp/leechio-fresh
.PHONY: fresh
fresh:
	@scripts/fresh-debian.sh --release $(DEBIAN) $(FRESH_DIR)

## miri: the library's unit tests under Miri, which catches undefined
## behaviour in the engine's unsafe code (adds Miri to rustup's nightly
## toolchain when it lacks it; about 5 minutes). A test Miri cannot run
## says so itself with `#[cfg_attr(miri, ignore)]`: one that needs the
## file system, sockets or processes (which Miri's isolation refuses),
## that counts on the clock, or that walks whole table graphs (vm has no
## unsafe code; they would take hours under Miri). The Linux layer's
## tests (linux::) are left out too: it has no unsafe code, and they
## spent five of Miri's minutes reading made-up kernels through the
## engine, whose own tests cover what they reach. The tests that leak
## futures on purpose run without the leak check, and the threaded ones
## again with other schedules (seeds), where races show.
MIRI_LEAKY := a_scope_ends_with_no_request_left_on_its_buffers \
  dropped_and_leaked_futures_never_have_their_buffers_written
MIRI_SEEDED := a_scope_ends_on_one_thread a_future_dropped_on_another_thread \
  join_all_waits_for_futures_woken futures_dropped_while_their_flush_is_in_the_device
.PHONY: miri
miri:
	@rustup component add --toolchain nightly miri rust-src 2>/dev/null || \
	  rustup toolchain install nightly --profile minimal --component miri,rust-src
	$(CARGO) +nightly miri test --lib -p leechio -- --skip linux:: $(addprefix --skip ,$(MIRI_LEAKY))
	MIRIFLAGS=-Zmiri-ignore-leaks $(CARGO) +nightly miri test --lib -p leechio -- $(MIRI_LEAKY)
	MIRIFLAGS=-Zmiri-many-seeds=0..8 $(CARGO) +nightly miri test --lib -p leechio -- $(MIRI_SEEDED)

## fuzz: every fuzz target (fuzz/) for FUZZ_SECONDS each, under
## AddressSanitizer (installs a nightly toolchain and cargo-fuzz); the
## corpus grows in fuzz/corpus/, what fails is kept in fuzz/artifacts/
FUZZ_SECONDS ?= 300
.PHONY: fuzz
fuzz:
	@scripts/fuzz-setup.sh
	@scripts/fuzz.sh $(FUZZ_SECONDS)

# The C and C++ API (ffi/): libleechio.so, libleechio.a, ffi/include/.
.PHONY: ffi header install-c

## ffi: the C library, release build: target/release/libleechio.{so,a}
ffi:
	$(CARGO) build --release -p leechio-ffi

## header: regenerate ffi/include/leechio.h from ffi/src (cbindgen); a test
## fails while the committed header is out of date
header:
	LEECHIO_WRITE_HEADER=1 $(CARGO) test -p leechio-ffi --test header

## install-c: headers into PREFIX/include, libleechio and LeechCore into PREFIX/lib,
## valgrind suppressions into PREFIX/share/leechio
install-c: deps ffi
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
