#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what `make dist` built, as users do, and uses only that (`make dist-test`):
#   python  the wheel in a fresh venv of every CPython 3.9..3.13 found (pyenv's, the
#           system's), outside the checkout with no cargo or rustc on PATH: import, serve,
#           HTTP/TCP/WebSocket, TestClient, headers, the numpy extra, the `ucall` command
#   sdist   the sdist built and installed by pip (Rust present; a release build: slow)
#   rust    a project on the unpacked .crate files serves and calls over three transports
#   node    a project installing the packed @ucall/client calls a server (ESM and CJS);
#           tsc type-checks a typed use
#   checkout  js/ from a clean clone: `npm install` there (prepare builds dist/), then a
#           project installs the folder
#   c       the unpacked C tarball, moved elsewhere: pkg-config and CMake builds serve;
#           libucall.so asks for no glibc newer than the one stated
# Usage: packaging/dist_test.sh [--quick] [python|sdist|rust|node|checkout|c]...
#   --quick: the pass `make test` runs: the oldest Python (the abi3 floor), Node and C; no
#   Rust project, sdist or checkout (each compiles the core again).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
quick=0
parts=()
for arg in "$@"; do
    case "$arg" in
        --quick) quick=1 ;;
        *) parts+=("$arg") ;;
    esac
done
if [ ${#parts[@]} -eq 0 ]; then
    parts=(python node c)
    # The Rust project compiles the packaged core again, the sdist builds the wheel again.
    [ "$quick" = 1 ] || parts+=(rust sdist checkout)
fi
version="$(python3 packaging/check_versions.py --print)"
dist="$root/dist"
work="$(mktemp -d /tmp/ucall-dist-test.XXXXXX)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAILED: $*" >&2; }

wheel="$(ls "$dist"/ucall-"$version"-cp39-abi3-*.whl 2>/dev/null || true)"
# The oldest glibc the C tarball runs on, as the README and docs/c-api.md state it: it is
# built on the build machine's glibc (not through zig, as the wheel is), and Rust's std
# asks for 2.34's symbols there (Debian 12, Ubuntu 22.04, RHEL 9 and newer).
C_GLIBC=2.34
need() { [ -e "$1" ] || { echo "dist-test: $1 is missing: run make dist" >&2; exit 1; }; }

# A PATH without Rust: the system's directories only, with cargo's left out.
plain_path="/usr/local/bin:/usr/bin:/bin"
for tool in cargo rustc; do
    if PATH="$plain_path" command -v "$tool" >/dev/null; then
        echo "dist-test: $tool is in $plain_path; the Python pass needs a PATH without Rust" >&2
        exit 1
    fi
done

# Each CPython 3.9..3.13 found once: pyenv's versions, then python3.X on the path.
pythons() {
    local minor candidate
    for minor in 9 10 11 12 13; do
        # The first that runs (a pyenv shim for a version not selected does not).
        for candidate in "$HOME"/.pyenv/versions/3."$minor".*/bin/python3."$minor" "$(command -v python3."$minor" || true)"; do
            if [ -x "$candidate" ] && "$candidate" -c "" 2>/dev/null; then
                echo "$candidate"
                break
            fi
        done
    done
}

# A fresh venv of $1 at $2 with the wheel (and its numpy extra) installed.
venv_with_wheel() {
    "$1" -m venv "$2"
    "$2/bin/python" -m pip install -q --disable-pip-version-check "$wheel[numpy]"
}

python_pass() {
    need "$wheel"
    mapfile -t found < <(pythons)
    [ ${#found[@]} -gt 0 ] || { fail "no CPython 3.9..3.13 found"; return; }
    # The quick pass: the oldest, the abi3 floor the wheel is built for.
    if [ "$quick" = 1 ]; then found=("${found[0]}"); fi
    for python in "${found[@]}"; do
        local name venv
        name="$(basename "$python")"
        venv="$work/venv-$name"
        if ! venv_with_wheel "$python" "$venv" >"$work/$name.log" 2>&1; then
            fail "$name: pip install of the wheel"; cat "$work/$name.log" >&2; continue
        fi
        # Outside the checkout, no PYTHONPATH, no Rust on the path.
        if (cd "$work" && env -u PYTHONPATH PATH="$venv/bin:$plain_path" UCALL_CHECKOUT="$root" \
            "$venv/bin/python" "$root/packaging/tests/python_smoke.py") >"$work/$name.log" 2>&1; then
            ok "$name: the wheel ($(grep -c '^ok:' "$work/$name.log") checks)"
        else
            fail "$name: the wheel"; cat "$work/$name.log" >&2
        fi
    done
}

sdist_pass() {
    local sdist="$dist/ucall-$version.tar.gz" venv="$work/venv-sdist"
    need "$sdist"
    python3 -m venv "$venv"
    if "$venv/bin/python" -m pip install -q --disable-pip-version-check "$sdist" >"$work/sdist.log" 2>&1 &&
        (cd "$work" && env -u PYTHONPATH UCALL_CHECKOUT="$root" PATH="$venv/bin:$plain_path" \
            "$venv/bin/python" "$root/packaging/tests/python_smoke.py") >>"$work/sdist.log" 2>&1; then
        ok "the sdist builds, installs and serves"
    else
        fail "the sdist"; tail -40 "$work/sdist.log" >&2
    fi
}

# A Python server from the wheel, for the Node and Rust passes: sets $port.
start_server() {
    [ -n "$server_pid" ] && return
    need "$wheel"
    local venv="$work/venv-server"
    [ -x "$venv/bin/python" ] || venv_with_wheel python3 "$venv" >/dev/null
    mkfifo "$work/server.in"
    (cd "$work" && env -u PYTHONPATH UCALL_CHECKOUT="$root" PATH="$venv/bin:$plain_path" \
        "$venv/bin/python" "$root/packaging/tests/python_smoke.py" --serve <"$work/server.in" >"$work/server.log" 2>&1) &
    server_pid=$!
    exec 9>"$work/server.in"  # held open: the server serves until it closes
    port=""
    for _ in $(seq 300); do
        port="$(sed -n 's/^serving \([0-9]*\)$/\1/p' "$work/server.log")"
        [ -n "$port" ] && return
        sleep 0.1
    done
    cat "$work/server.log" >&2
    echo "dist-test: the server did not start" >&2
    exit 1
}

rust_pass() {
    local crates="$work/crates" project="$work/rust"
    mkdir -p "$crates" "$project"
    for crate in ucall-core ucall-client; do
        need "$dist/$crate-$version.crate"
        tar -xzf "$dist/$crate-$version.crate" -C "$crates"
    done
    cp -r packaging/tests/rust/src "$project/"
    sed -e "s|@VERSION@|$version|g" -e "s|@CRATES@|$crates|g" packaging/tests/rust/Cargo.toml.in >"$project/Cargo.toml"
    # The workspace's lock file pins the same dependencies, and its target directory holds
    # them built: only the packaged crates compile again.
    cp Cargo.lock "$project/"
    if CARGO_TARGET_DIR="$root/target" cargo run --quiet --manifest-path "$project/Cargo.toml" >"$work/rust.log" 2>&1 &&
        grep -qx ok "$work/rust.log"; then
        ok "a Rust project on the packaged crates serves and calls"
    else
        fail "the Rust project on the packaged crates"; tail -40 "$work/rust.log" >&2
    fi
}

node_pass() {
    local tarball="$dist/ucall-client-$version.tgz" project="$work/node"
    need "$tarball"
    start_server
    mkdir -p "$project"
    cp packaging/tests/node/* "$project/"
    echo '{"name": "ucall-user", "private": true}' >"$project/package.json"
    if ! (cd "$project" && npm install --silent --no-audit --no-fund --prefer-offline "$tarball" ws@8 typescript@5 @types/node@20) \
        >"$work/npm.log" 2>&1; then
        fail "npm install of the packed @ucall/client"; cat "$work/npm.log" >&2; return
    fi
    local unwanted
    unwanted="$(cd "$project/node_modules/@ucall/client" && find . -path ./node_modules -prune -o \( -name '*.test.*' -o -name test -o -name src \) -print)"
    [ -z "$unwanted" ] && ok "the npm package has no tests or sources" || fail "the npm package holds: $unwanted"
    (cd "$project" && node esm.mjs "$port") >"$work/node.log" 2>&1 && ok "@ucall/client as ESM: HTTP, WebSocket, TCP" ||
        { fail "@ucall/client as ESM"; cat "$work/node.log" >&2; }
    (cd "$project" && node cjs.cjs "$port") >"$work/node.log" 2>&1 && ok "@ucall/client through require()" ||
        { fail "@ucall/client through require()"; cat "$work/node.log" >&2; }
    (cd "$project" && npx --no-install tsc -p .) >"$work/tsc.log" 2>&1 && ok "tsc type-checks a typed use" ||
        { fail "tsc on a typed use"; cat "$work/tsc.log" >&2; }
}

# js/ as a clean clone has it (no node_modules, no dist/): `npm install` there builds dist/
# through `prepare`, and a project then installs the folder, as js/README.md says.
checkout_pass() {
    local clone="$work/clone" project="$work/from-checkout"
    mkdir -p "$clone" "$project"
    git archive HEAD js | tar -x -C "$clone"
    echo '{"name": "ucall-user", "private": true}' >"$project/package.json"
    if (cd "$clone/js" && npm install --silent --no-audit --no-fund --prefer-offline) >"$work/checkout.log" 2>&1 &&
        (cd "$project" && npm install --silent --no-audit --no-fund "$clone/js" &&
            node -e 'const { Client } = require("@ucall/client"); if (typeof Client !== "function") process.exit(1)') \
        >>"$work/checkout.log" 2>&1; then
        ok "npm install of js/ from a clean clone (prepare builds dist/)"
    else
        fail "npm install of js/ from a clean clone"; cat "$work/checkout.log" >&2
    fi
}

c_pass() {
    local tarball="$dist/libucall-$version-linux-x86_64.tar.gz"
    need "$tarball"
    # Unpacked, then moved: nothing in it may name where it was made or first unpacked.
    mkdir -p "$work/unpacked" "$work/moved/elsewhere"
    tar -xzf "$tarball" -C "$work/unpacked"
    mv "$work/unpacked/libucall-$version-linux-x86_64" "$work/moved/elsewhere/ucall"
    if UCALL_PREFIX="$work/moved/elsewhere/ucall" crates/ucall-capi/tests/install_test.sh >"$work/c.log" 2>&1; then
        ok "the C tarball: $(tail -1 "$work/c.log")"
    else
        fail "the C tarball"; cat "$work/c.log" >&2
    fi
    # The glibc the README and docs/c-api.md state: the newest symbol version libucall.so asks for.
    local needed
    needed="$(objdump -T "$work/moved/elsewhere/ucall/lib/libucall.so.$version" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
    if [ -n "$needed" ] && [ "$(printf '%s\n' "$needed" "GLIBC_$C_GLIBC" | sort -V | tail -1)" = "GLIBC_$C_GLIBC" ]; then
        ok "libucall.so needs glibc ${needed#GLIBC_}, at most the $C_GLIBC stated"
    else
        fail "libucall.so needs ${needed:-no versioned glibc symbol}, more than the glibc $C_GLIBC stated (README, docs/c-api.md)"
    fi
}

for part in "${parts[@]}"; do
    case "$part" in
        python) python_pass ;;
        sdist) sdist_pass ;;
        rust) rust_pass ;;
        node) node_pass ;;
        checkout) checkout_pass ;;
        c) c_pass ;;
        *) echo "dist-test: unknown part $part (python, sdist, rust, node, checkout, c)" >&2; exit 2 ;;
    esac
done
echo "dist test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
