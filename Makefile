# SPDX-License-Identifier: Apache-2.0
# The project's entry points. `make help` lists them.
.DEFAULT_GOAL := help
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
VENV := .venv
PY := $(VENV)/bin/python
# The benchmark driver, benches/ucallbench (benches/run.py is the same under its old name).
BENCH := PYTHONPATH=benches $(PY) -m ucallbench
# A clean build (CI) gains nothing from incremental state, which would double target/debug.
ifdef CI
export CARGO_INCREMENTAL := 0
endif

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
demo: setup python  ## Build, start the example servers (Rust, Python), call them every way, stop them
	cargo build --release -p ucall-examples --bin sum_server
	@scripts/demo.sh target/release/sum_server
	$(PY) examples/python/demo.py

.PHONY: python
python: setup  ## Build the Python package (ucall) into .venv
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/maturin develop --release --quiet

.PHONY: test
test: setup lint test-rust test-python test-python-api  ## Build and run every test suite (Rust, Python)
	@echo "make test: all suites passed"

.PHONY: test-rust
test-rust:  ## Rust unit, in-memory and loopback tests
	cargo test --workspace
	cargo test -p ucall-core --features tracing --test spans

.PHONY: test-python
test-python:  ## Python suite against the live spec server, on each engine
	cargo build -p ucall-examples --bin spec_server --bin sum_server
	$(PY) -m pytest -c tests/python/pytest.ini tests/python -q

.PHONY: test-python-api
test-python-api: python  ## The Python package's suite (tests/python_api), then the shared vectors against a Python server
	@# The Rust servers whose documents, /docs page and start-up line tests/python_api checks.
	cargo build -p ucall-examples --bin described_server --bin sum_server
	$(PY) -m pytest tests/python_api -q
	UCALL_SPEC_SERVER=tests/python_api/spec_server.sh $(PY) -m pytest -c tests/python/pytest.ini tests/python -q

.PHONY: test-js
test-js: python  ## JS client (js/): build, then node --test against live Rust and Python servers
	cargo build -p ucall-examples --bin spec_server --bin sum_server --bin described_server
	cd js && npm run --silent build && UCALL_JS_SERVERS=rust,python node --test test/

test: test-js

.PHONY: bench-js
bench-js: setup  ## JS client: calls/s with 1,000 in flight (16-byte echo) beside jayson and json-rpc-2.0
	cargo build --release -p ucall-examples --bin bench_server
	cd js && npm run --silent build && node bench/echo.mjs

.PHONY: scale-test
scale-test: python  ## Fault injection behind HAProxy, then nginx: 300 calls/s for 60 s each (deploy/, loopback)
	$(PY) tests/scale/scale_test.py --balancer both --rate 300 --seconds 60

.PHONY: test-scale
test-scale: python  ## The scale test's short pass: behind HAProxy, 100 calls/s for 25 s
	$(PY) tests/scale/scale_test.py --balancer haproxy --rate 100 --seconds 25

test: test-scale

.PHONY: chaos
chaos: python  ## Network faults across network namespaces (loss, slow link, partition, SIGSTOP/SIGKILL, reload) behind HAProxy, then nginx: 200 calls/s for 60 s each (root)
	$(PY) tests/scale/chaos_test.py --balancer both --rate 200 --seconds 60

.PHONY: test-chaos
test-chaos: python  ## The chaos test's short pass: HAProxy, 100 calls/s for 25 s (loss, partition, SIGKILL); says SKIPPED where namespaces cannot be made
	@$(PY) tests/scale/chaos_test.py --short; status=$$?; \
	if [ $$status -eq 77 ]; then echo "make test-chaos: SKIPPED (no network namespaces here, see above): NOT a pass" >&2; \
	elif [ $$status -ne 0 ]; then exit $$status; fi

test: test-chaos

.PHONY: lint
lint: setup  ## rustfmt check, clippy with warnings as errors, Python 3.9 compatibility (vermin), ruff
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p ucall-core --features tracing --all-targets -- -D warnings
	@# The package is abi3 for CPython 3.9+: its Python code must not need a newer one.
	$(VENV)/bin/vermin -q --no-tips --violations --eval-annotations -t=3.9- python/ucall examples/python
	$(VENV)/bin/ruff check --quiet python tests benches examples/python

.PHONY: format
format:  ## Format the Rust code
	cargo fmt --all

.PHONY: bench
bench: python  ## Full benchmarks (about 40 minutes): UCall beside the C floor and peers, memory, hostile clients; writes docs/benchmarks.md
	@scripts/setup.sh bench
	@# The tables show what failed, so they are published either way; the status is the run's.
	@# A run that stopped before writing its tables (an error before measuring, a signal)
	@# publishes nothing rather than an older run's tables. rss.py (memory over a million
	@# requests) and hostile.py (bad clients beside a good one) and fair_share.py (a steady client beside one flooding at 20x its rate limit) and idle_memory.py (RSS per idle connection,
	@# 9,000 of them, and after they close) and js/bench/echo.mjs (the JS client beside jayson and
	@# json-rpc-2.0) and benches/middleware.py (one Python middleware's cost per call, beside FastAPI's) and benches/workers.py (--workers 2 against 1) and benches/client_bench.py (the clients beside grpcio and httpx) and benches/client_tls.py (the Python clients over HTTPS, rustls beside Python's ssl) add their tables to the brief,
	@# which `ucallbench publish` copies into docs/benchmarks.md and, in a few rows, README.md.
	@stamp=$$(mktemp); $(BENCH) ; status=$$?; \
	if [ benches/results/latest-brief.md -nt $$stamp ]; then \
	$(PY) benches/rss.py --append benches/results/latest-brief.md || status=1; \
	$(PY) benches/hostile.py --seconds 3 --append benches/results/latest-brief.md || status=1; \
	$(PY) benches/fair_share.py --append benches/results/latest-brief.md || status=1; \
	$(PY) benches/batching.py --append benches/results/latest-brief.md || status=1; \
	$(BENCH) binary --append benches/results/latest-brief.md || status=1; \
	$(PY) benches/middleware.py --append benches/results/latest-brief.md || status=1; \
	$(PY) benches/mcp_tools.py --append benches/results/latest-brief.md || status=1; \
	$(PY) benches/workers.py --append benches/results/latest-brief.md --goals-are-reported || status=1; \
	$(PY) benches/client_bench.py --append benches/results/latest-brief.md || status=1; \
	$(PY) benches/client_tls.py --append benches/results/latest-brief.md || status=1; \
	cargo build --release --quiet -p ucall-examples --bin sum_server && \
	$(PY) benches/idle_memory.py --servers rust,python --goals-are-reported --append benches/results/latest-brief.md || status=1; \
	cargo build --release --quiet -p ucall-examples --bin bench_server && \
	(cd js && npm run --silent build && node bench/echo.mjs --append ../benches/results/latest-brief.md) || status=1; \
	$(BENCH) publish || status=1; \
	else echo "make bench: no new tables, docs/benchmarks.md and README.md unchanged" >&2; fi; rm -f $$stamp; exit $$status

.PHONY: bench-fair-share
bench-fair-share: python  ## A steady client's latency while another floods at 20x its rate limit (about 40 s); publishes nothing
	$(PY) benches/fair_share.py --seconds 5

.PHONY: bench-quick
bench-quick: python  ## Short benchmark pass (about 4 minutes); publishes nothing
	@scripts/setup.sh bench
	$(BENCH) --quick
	$(PY) benches/middleware.py --quick
	$(BENCH) binary --quick
	@benches/setup_peers.sh >/dev/null || true  # the MCP SDK's venv; a failed install shows in the table
	cargo build --release --quiet -p ucall-bench --bin ucall-load
	$(PY) benches/mcp_tools.py --quick

.PHONY: bench-binary
bench-binary: python  ## Binary payloads (about 12 minutes, 7 of them the bench itself): 1.6 MB and 16 KB echoes beside the C floor, grpcio and FastAPI, RSS, clients
	$(BENCH) binary

.PHONY: bench-middleware
bench-middleware: python  ## One Python middleware's cost per call (about 1 minute), beside FastAPI's when benches/.venv-peers exists
	@benches/setup_peers.sh >/dev/null || true  # FastAPI's venv; a failed install shows in the table
	cargo build --release --quiet -p ucall-bench --bin ucall-load
	$(PY) benches/middleware.py

.PHONY: test-mcp-conformance
test-mcp-conformance: python  ## MCP conformance server scenarios (about 5 minutes) against the Python server; expected failures in tests/node/mcp-conformance-baseline.yml
	scripts/mcp_conformance.sh

.PHONY: bench-mcp
bench-mcp: python  ## MCP tools/call over Streamable HTTP (about 30 s): UCall beside the MCP SDK's own server, 32 connections
	@benches/setup_peers.sh >/dev/null || true  # the MCP SDK's venv; a failed install shows in the table
	cargo build --release --quiet -p ucall-bench --bin ucall-load
	$(PY) benches/mcp_tools.py

.PHONY: bench-client
bench-client: python  ## Client benchmark (about 5 minutes): the Python, Rust and C clients beside grpcio and httpx
	@scripts/setup.sh bench
	@benches/setup_peers.sh >/dev/null || true  # grpcio's server and client; a failed install shows in the table
	$(PY) benches/client_bench.py

.PHONY: bench-client-tls
bench-client-tls: python  ## The Python clients over HTTPS (about 1 minute): rustls beside Python's ssl
	$(PY) benches/client_tls.py

.PHONY: bench-batching
bench-batching: python  ## Dynamic batching (about 2 minutes): a numpy MLP batched vs unbatched, beside Ray Serve's @serve.batch
	@benches/setup_peers.sh >/dev/null || true  # Ray Serve's venv; a failed install shows in the table
	cargo build --release --quiet -p ucall-bench --bin ucall-load
	$(PY) benches/batching.py

.PHONY: bench-batching-quick
bench-batching-quick: python  ## The batching bench's bounded pass (about 20 s, no Ray): it all runs
	cargo build --release --quiet -p ucall-bench --bin ucall-load
	$(PY) benches/batching.py --quick

.PHONY: bench-workers
bench-workers: python  ## Worker processes: a 100 µs Python handler on --workers 1, then 2 (goal: 2 answer >= 1.6x)
	cargo build --release -p ucall-bench --bin ucall-load
	$(PY) benches/workers.py

SOAK_SECONDS ?= 600
SOAK_SERVERS ?= rust,c,python
SOAK_ENGINES ?= poll,uring

.PHONY: soak
soak: python  ## Soak test: each server and engine under mixed load for SOAK_SECONDS (600); SOAK_ARGS=--forever
	cargo build --release -p ucall-examples --bin spec_server
	cargo build --release -p ucall-capi
	@mkdir -p $(C_OUT)
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror -Iinclude crates/ucall-capi/tests/c/spec_server.c \
		target/release/libucall.a $(C_LIBS) -o $(C_OUT)/spec_server_release
	$(PY) tests/soak --seconds $(SOAK_SECONDS) --servers $(SOAK_SERVERS) --engines $(SOAK_ENGINES) $(SOAK_ARGS)

.PHONY: soak-smoke
soak-smoke:  ## A 20-second soak of the Rust test server (debug build), as make test runs it
	cargo build -p ucall-examples --bin spec_server
	$(PY) tests/soak --seconds 20 --servers rust --engines auto --rust target/debug/spec_server --idle 50

test: soak-smoke

FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 4

.PHONY: fuzz
fuzz: setup  ## Run every fuzz target for FUZZ_SECONDS each (default 60; nightly + cargo-fuzz)
	@scripts/setup.sh fuzz
	fuzz/run.sh $(FUZZ_SECONDS)

.PHONY: fuzz-smoke
fuzz-smoke:  ## A short pass of every fuzz target (FUZZ_SMOKE_SECONDS each), as make test runs it
	@scripts/setup.sh fuzz
	fuzz/run.sh $(FUZZ_SMOKE_SECONDS)

test: fuzz-smoke

.PHONY: clean
clean:  ## Remove build outputs
	cargo clean

# ------------------------------------------------------------------ C API (crates/ucall-capi)
CBINDGEN := cbindgen --quiet --config crates/ucall-capi/cbindgen.toml crates/ucall-capi
C_FLAGS := -std=c99 -Wall -Wextra -Werror -g -Iinclude
C_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
C_LIBS := -lpthread -ldl -lm -lrt
C_OUT := target/c
PREFIX ?= /usr/local

test: test-c

.PHONY: header
header: setup  ## Regenerate include/ucall/ucall.h with the pinned cbindgen
	$(CBINDGEN) --output include/ucall/ucall.h

.PHONY: header-check
header-check:  ## Fail when include/ucall/ucall.h differs from what cbindgen generates
	@tmp=$$(mktemp) && $(CBINDGEN) --output $$tmp && \
	if diff -u include/ucall/ucall.h $$tmp; then rm -f $$tmp; \
	else rm -f $$tmp; echo "include/ucall/ucall.h is stale: run make header" >&2; exit 1; fi

.PHONY: examples-c
examples-c:  ## Build the C and C++ examples against the release libucall (target/c/examples/)
	cargo build --release -p ucall-capi
	@mkdir -p $(C_OUT)/examples
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror -Iinclude examples/c/sum.c target/release/libucall.a $(C_LIBS) -o $(C_OUT)/examples/sum
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror -Iinclude examples/c/client.c target/release/libucall.a $(C_LIBS) -o $(C_OUT)/examples/client
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -Iinclude examples/c/sum.cpp target/release/libucall.a $(C_LIBS) -o $(C_OUT)/examples/sum_cpp

.PHONY: test-c
test-c: header-check examples-c  ## C API: C tests under ASan/UBSan and valgrind, the vectors on the C spec server, install
	g++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only -x c++ include/ucall/ucall.h
	gcc $(C_FLAGS) -pedantic -fsyntax-only -x c include/ucall/ucall.h
	cargo build -p ucall-capi
	@mkdir -p $(C_OUT)/asan && rm -f $(C_OUT)/asan/*
	gcc $(C_FLAGS) $(C_SANITIZE) crates/ucall-capi/tests/c/api_test.c target/debug/libucall.a $(C_LIBS) -o $(C_OUT)/api_test
	gcc $(C_FLAGS) $(C_SANITIZE) crates/ucall-capi/tests/c/spec_server.c target/debug/libucall.a $(C_LIBS) -o $(C_OUT)/spec_server
	gcc $(C_FLAGS) crates/ucall-capi/tests/c/api_test.c target/debug/libucall.a $(C_LIBS) -o $(C_OUT)/api_test_plain
	ASAN_OPTIONS=abort_on_error=1 $(C_OUT)/api_test 2>$(C_OUT)/api_test.log || { cat $(C_OUT)/api_test.log; exit 1; }
	gcc $(C_FLAGS) $(C_SANITIZE) crates/ucall-capi/tests/c/client_test.c target/debug/libucall.a $(C_LIBS) -o $(C_OUT)/client_test
	ASAN_OPTIONS=abort_on_error=1 timeout 120 $(C_OUT)/client_test 2>$(C_OUT)/client_test.log || { cat $(C_OUT)/client_test.log; exit 1; }
	# valgrind does not model io_uring's shared rings: its run uses the poll engine. The
	# suppressions cover ring's AES-GCM assembly only (see the file).
	UCALL_ENGINE=poll timeout 300 valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
		--suppressions=crates/ucall-capi/tests/valgrind.supp $(C_OUT)/api_test_plain 2>$(C_OUT)/valgrind.log || { cat $(C_OUT)/valgrind.log; exit 1; }
	gcc $(C_FLAGS) crates/ucall-capi/tests/c/client_test.c target/debug/libucall.a $(C_LIBS) -o $(C_OUT)/client_test_plain
	UCALL_ENGINE=poll timeout 300 valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
		--suppressions=crates/ucall-capi/tests/valgrind.supp $(C_OUT)/client_test_plain 2>$(C_OUT)/valgrind-client.log || { cat $(C_OUT)/valgrind-client.log; exit 1; }
	cargo build -p ucall-examples --bin sum_server  # tests/python runs the Rust example too
	# The shared suite on the C spec server, on each engine, two threads in ucall_take_calls.
	# Reports go to asan/log.spec_server.PID; the suite notes how each server ended, which
	# tells an empty log (no report) from a report cut short (see sanitizer_logs.py).
	@rm -f $(C_OUT)/server-exits
	ASAN_OPTIONS=abort_on_error=1:log_exe_name=1:log_path=$(CURDIR)/$(C_OUT)/asan/log \
		UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 UCALL_SERVER_EXITS=$(CURDIR)/$(C_OUT)/server-exits \
		UCALL_SPEC_SERVER=$(C_OUT)/spec_server $(PY) -m pytest -c tests/python/pytest.ini tests/python -q
	$(PY) crates/ucall-capi/tests/sanitizer_logs.py $(C_OUT)/asan $(C_OUT)/server-exits
	crates/ucall-capi/tests/install_test.sh

# ------------------------------------------------------------------ release artifacts (packaging/)
.PHONY: dist
dist: setup  ## Build dist/: the manylinux2014 abi3 wheel and sdist, the .crate files, @ucall/client's .tgz, the C tarball
	packaging/dist.sh

.PHONY: dist-test
dist-test:  ## Install dist/'s artifacts as users do and use them: every CPython 3.9..3.13 found, the sdist, Rust, Node, C
	packaging/dist_test.sh

.PHONY: test-dist
test-dist: python  ## make test's short pass: artifacts from the release builds at hand; the wheel on the oldest Python, Node, C
	packaging/dist.sh --quick
	packaging/dist_test.sh --quick

test: test-dist

.PHONY: install
install:  ## Install libucall, ucall.h, ucall.pc and the CMake package under PREFIX (default /usr/local)
	cargo build --release -p ucall-capi
	crates/ucall-capi/packaging/install.sh "$(PREFIX)"
