# The project's commands. `make test` is what CI runs (.ci/run).
.PHONY: setup test check unit plugin install

CARGO ?= cargo
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
unit: plugin
	$(CARGO) test --workspace

## install: the plugin with LeechCore beside it, where memflow looks
install: setup plugin
	scripts/install-plugin.sh "$(MEMFLOW_PLUGINS)"

## test: set-up, then formatting, lints and every test
test: setup check unit
