#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds into dist/ what a release publishes (`make dist`), each from this checkout:
#   ucall-VERSION-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl and ucall-VERSION.tar.gz
#   ucall-core-, ucall-client-, ucall-capi-VERSION.crate   (cargo package)
#   ucall-client-VERSION.tgz                                (npm pack of js/, @ucall/client)
#   libucall-VERSION-linux-x86_64.tar.gz                    (the C library, relocatable)
# The version is the workspace's (Cargo.toml); packaging/check_versions.py checks every
# other place that states it. Usage: packaging/dist.sh [--quick] [python|crates|npm|c]...
#   --quick: `make test`'s pass: the wheel and the C library from the release build `make
#   python` and `make examples-c` leave in target/release (for this machine's glibc, so no
#   manylinux check), no sdist.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
say() { printf '\033[1mdist:\033[0m %s\n' "$*"; }

quick=0
parts=()
for arg in "$@"; do
    case "$arg" in
        --quick) quick=1 ;;
        *) parts+=("$arg") ;;
    esac
done
version="$(python3 packaging/check_versions.py --print)"
out="$root/dist"
mkdir -p "$out"
venv="$root/.venv/bin"
# The wheel's size limit (bytes); the size is printed and kept in dist/SIZES.
# 2,461,696 bytes at 0.6.0 with MCP, binary messages and rate limits (stripped, built as
# below): the budget leaves room to grow by about half, and stops a wheel that took debug
# info or a second copy of the core.
WHEEL_BUDGET=$((3584 * 1024))
# The wheel's target, named so that maturin --zig builds in target/$triple/ at every run.
triple=x86_64-unknown-linux-gnu

python_dist() {
    rm -f "$out"/ucall-*.whl "$out"/ucall-*.tar.gz
    if [ "$quick" = 1 ]; then
        say "the wheel, for this machine (--quick)"
        # The cargo build `make python` ran (no --strip: its flags would build the module again).
        PATH="$venv:$PATH" "$venv/maturin" build --release --compatibility linux --out "$out" --quiet
        return
    fi
    "$venv/python" -m pip install -q -r packaging/requirements.txt  # zig and auditwheel
    say "the wheel (manylinux2014, zig as the linker; a release build: minutes)"
    # zig links against glibc 2.17's symbols, so the wheel runs on any manylinux2014 system.
    PATH="$venv:$PATH" "$venv/maturin" build --release --zig --compatibility manylinux2014 --strip \
        --target "$triple" --out "$out" --quiet
    PATH="$venv:$PATH" "$venv/maturin" sdist --out "$out" >/dev/null
    wheel="$(ls "$out"/ucall-"$version"-cp39-abi3-*.whl)"
    # auditwheel says which policy the wheel meets; anything newer than manylinux2014 fails.
    "$venv/auditwheel" show "$wheel" | tee "$out/auditwheel.txt"
    tr '\n' ' ' <"$out/auditwheel.txt" | grep -Eq 'consistent with the following platform tag: +"manylinux_2_(5|12|17)_x86_64"' ||
        { echo "dist: the wheel is not manylinux2014 (see dist/auditwheel.txt)" >&2; exit 1; }
    size=$(stat -c %s "$wheel")
    echo "$(basename "$wheel") $size" >"$out/SIZES"
    say "$(basename "$wheel"): $size bytes (budget $WHEEL_BUDGET)"
    [ "$size" -le "$WHEEL_BUDGET" ] || { echo "dist: the wheel is over its budget of $WHEEL_BUDGET bytes" >&2; exit 1; }
    "$venv/python" packaging/check_wheel.py "$wheel" "$out"/ucall-"$version".tar.gz
}

crates_dist() {
    say "the crates (cargo package)"
    rm -f "$out"/*.crate
    # --no-verify: the install test builds a project from these very files instead.
    cargo package --quiet --allow-dirty --no-verify -p ucall-core -p ucall-client -p ucall-capi
    cp target/package/ucall-core-"$version".crate target/package/ucall-client-"$version".crate \
        target/package/ucall-capi-"$version".crate "$out/"
}

npm_dist() {
    say "the npm package (npm pack of js/)"
    rm -f "$out"/ucall-client-*.tgz
    # The tools pinned by js/package-lock.json (make setup installs them), then pack: prepare builds dist/.
    (cd js && { [ -d node_modules ] || npm ci --no-audit --no-fund --silent; } &&
        npm pack --silent --pack-destination "$out" >/dev/null &&
        npm publish --dry-run --silent)
}

c_dist() {
    say "the C library (a release build)"
    # The release build `make install` and `make examples-c` make too (this machine's glibc).
    local built="target/release"
    cargo build --release --quiet -p ucall-capi
    name="libucall-$version-linux-x86_64"
    stage="$(mktemp -d)"
    trap 'rm -rf "$stage"' RETURN
    crates/ucall-capi/packaging/install.sh "$stage/$name" "$built" >/dev/null
    # Debug info is for the developers' builds: without it libucall.a is a fraction of its size.
    strip --strip-debug "$stage/$name/lib/libucall.a"
    strip --strip-unneeded "$stage/$name/lib/libucall.so.$version"
    cp LICENSE "$stage/$name/"
    tar -C "$stage" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"
    echo "$name.tar.gz $(stat -c %s "$out/$name.tar.gz")" >>"$out/SIZES"
}

[ ${#parts[@]} -gt 0 ] || parts=(python crates npm c)
for part in "${parts[@]}"; do
    case "$part" in
        python) python_dist ;;
        crates) crates_dist ;;
        npm) npm_dist ;;
        c) c_dist ;;
        *) echo "dist: unknown part $part (python, crates, npm, c)" >&2; exit 2 ;;
    esac
done
say "version $version in dist/:"
ls -l "$out"
