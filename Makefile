# The project's commands. `make test` is what CI runs (.ci/run).
.PHONY: setup test check unit

CARGO ?= cargo

## setup: install what the project needs (idempotent; run as root on Debian)
setup:
	@scripts/setup.sh

## check: formatting and lints
check:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## unit: the whole test suite, without set-up
unit:
	$(CARGO) test --workspace

## test: set-up, then formatting, lints and every test
test: setup check unit
