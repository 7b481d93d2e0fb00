#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what the build and the tests need and is missing. Safe to run again.
#   scripts/setup.sh          Rust toolchain check + Python .venv with the test tools
#   scripts/setup.sh bench    also the benchmark tools (wrk, the reference server's compiler)
#   scripts/setup.sh fuzz     also the nightly toolchain and cargo-fuzz (make fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }

apt_install() {
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing Debian packages: ${missing[*]}"
    local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

if ! command -v cargo >/dev/null 2>&1; then
    apt_install curl ca-certificates
    say "installing Rust with rustup"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
# g++: simdutf (base64 in the Python module) is C++, built by the cc crate.
apt_install curl gcc g++ make python3-venv openssl

if [ ! -x .venv/bin/python ]; then
    say "creating .venv"
    python3 -m venv .venv
fi
# Reinstall whenever requirements-dev.txt changes (its hash is kept in the venv).
wanted=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [ "$(cat .venv/.requirements-dev.sha256 2>/dev/null)" != "$wanted" ]; then
    say "installing Python test tools into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -r requirements-dev.txt
    echo "$wanted" > .venv/.requirements-dev.sha256
fi

# The C API: its tests (C++ compile of the header, valgrind, pkg-config, CMake) and the
# pinned cbindgen that generates include/ucall/ucall.h (`make header`, checked by `make test`).
apt_install cmake pkg-config valgrind
CBINDGEN_VERSION=0.29.2
if [ "$(cbindgen --version 2>/dev/null)" != "cbindgen $CBINDGEN_VERSION" ]; then
    say "installing cbindgen $CBINDGEN_VERSION with cargo"
    cargo install cbindgen --version "$CBINDGEN_VERSION" --locked --quiet
fi

# The /docs page is tested in Debian's headless Chromium, driven by Playwright (from
# requirements-dev.txt) with no browser download of its own.
apt_install chromium

# Node clients for the WebSocket interop tests and the OpenRPC meta-schema the documents
# are checked against (versions pinned by the lock file); installed again when it changes.
if [ ! -d tests/node/node_modules ] || [ tests/node/package-lock.json -nt tests/node/node_modules ]; then
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    say "installing Node test clients"
    (cd tests/node && npm ci --no-audit --no-fund --silent)
fi

# The JavaScript client (js/): its build and test tools, pinned by js/package-lock.json, and
# Debian's Chromium for its browser tests. Reinstalled whenever the lock file changes.
apt_install chromium
wanted=$(sha256sum js/package-lock.json | cut -d' ' -f1)
if [ "$(cat js/node_modules/.package-lock.sha256 2>/dev/null)" != "$wanted" ]; then
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    say "installing the JS client's tools"
    (cd js && npm ci --no-audit --no-fund --silent)
    echo "$wanted" > js/node_modules/.package-lock.sha256
fi

# The load balancers of the scale-out recipe (deploy/), which make scale-test runs on
# loopback: HAProxy 2.6 and nginx 1.22 with its stream module (raw TCP). Their packages
# would start the system services; a policy-rc.d (Debian's switch for that) keeps them off.
if ! dpkg -s haproxy nginx libnginx-mod-stream >/dev/null 2>&1; then
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ] && [ "$(id -u)" -eq 0 ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
    fi
    apt_install haproxy nginx libnginx-mod-stream
    [ -n "$policy" ] && rm -f "$policy"
fi

# The chaos test (make chaos) joins network namespaces by veth links (iproute2's ip, tc)
# and drops packets with nftables.
apt_install iproute2 nftables

if [ "${1:-}" = "fuzz" ]; then
    # libFuzzer's instrumentation needs nightly Rust; cargo-fuzz drives it.
    if ! rustup run nightly rustc --version >/dev/null 2>&1; then
        say "installing the nightly Rust toolchain"
        rustup toolchain install nightly --profile minimal
    fi
    CARGO_FUZZ_VERSION=0.13.2
    if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
        say "installing cargo-fuzz $CARGO_FUZZ_VERSION with cargo"
        cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --quiet
    fi
fi

if [ "${1:-}" = "bench" ]; then
    apt_install wrk util-linux
fi
say "ready"
