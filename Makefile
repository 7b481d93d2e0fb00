# SPDX-License-Identifier: Apache-2.0
# The project's entry points. `make help` lists them.
.DEFAULT_GOAL := help
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: help
help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "} {printf "  \033[1m%-12s\033[0m %s\n", $$1, $$2}'

.PHONY: setup
setup:  ## Install what is missing (Rust check, Debian packages, Python .venv)
	@scripts/setup.sh

.PHONY: build
build: setup  ## Build every crate in release mode
	cargo build --release --workspace

.PHONY: demo
demo: setup  ## Build, start the example server, call it every way, stop it
	cargo build --release -p ucall-examples --bin sum_server
	@scripts/demo.sh target/release/sum_server

.PHONY: test
test: setup lint test-rust test-python  ## Build and run every test suite (Rust, Python)
	@echo "make test: all suites passed"

.PHONY: test-rust
test-rust:  ## Rust unit, in-memory and loopback tests
	cargo test --workspace

.PHONY: test-python
test-python:  ## Python suite against the live spec server, on each engine
	cargo build -p ucall-examples --bin spec_server --bin sum_server
	$(PY) -m pytest -c tests/python/pytest.ini tests/python -q

.PHONY: lint
lint:  ## rustfmt check and clippy with warnings as errors
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

.PHONY: format
format:  ## Format the Rust code
	cargo fmt --all

.PHONY: bench
bench:  ## Full benchmark table (about 20 minutes): UCall beside the C reference and peers
	@scripts/setup.sh bench
	$(PY) benches/run.py

.PHONY: bench-quick
bench-quick:  ## Short benchmark pass (about 2 minutes)
	@scripts/setup.sh bench
	$(PY) benches/run.py --quick

.PHONY: clean
clean:  ## Remove build outputs
	cargo clean
